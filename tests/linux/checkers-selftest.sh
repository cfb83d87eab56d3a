#!/usr/bin/env bash
# Host-side checks of perf_pt.sh's checkers on recorded guest output (issue 14), each case one
# that must pass and variants that must fail:
# - tests/linux/brstack.awk's depth rule: a `perf record -b -e instructions:upp` sample of
#   `calls` whose stack Linux shortened to 31 entries (an interrupt fell among its last 32
#   branches; README "LBR") is accepted only with an interrupt on the sample's CPU since the
#   previous sample; a wrong target is rejected. Needs the cached Linux guest (the binary).
# - tests/linux/callstack.awk (Arch LBR call-stack mode): a recorded stack passes, a RET entry,
#   a repeated call site, a wrong target or flag fail.
# - tests/linux/pt-gaps.awk: the decode errors of two -m,8 recordings that lost data (README
#   "Intel PT under Linux"): errors at truncations pass; one moved away from any truncation,
#   five at one truncation, or gaps without truncated records fail.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
guest=${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pttrace-brstack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The first check of `make test-linux`: on a fresh machine it builds the guest (cached), as
# perf_pt.sh does (a cold-cache CI run failed here before).
bash "$top/scripts/linux-guest/build.sh" "$guest" >/dev/null || { echo "checkers-selftest.sh: building the guest failed" >&2; exit 2; }
[ -f "$guest/initramfs.cpio.gz" ] || { echo "checkers-selftest.sh: no guest in $guest (scripts/linux-guest/build.sh)" >&2; exit 2; }
(cd "$tmp" && gzip -dc <"$guest/initramfs.cpio.gz" 2>/dev/null | cpio -i --quiet -d usr/local/bin/calls)
python3 "$top/tests/linux/insn-table.py" "$tmp/usr/local/bin/calls" >"$tmp/calls.insns" || exit 2
grep -v '^#' "$top/tests/linux/data/brstack-irq-sample.txt" >"$tmp/stacks"
fails=0
# expect STATUS NAME [awk -v assignments...] < stacks
expect() {
    local want=$1 name=$2; shift 2
    out=$(awk -v depth=32 "$@" -f "$top/tests/linux/brstack.awk" "$tmp/calls.insns" - <"$tmp/in" 2>&1); rc=$?
    if { [ "$want" = pass ] && [ $rc = 0 ]; } || { [ "$want" = fail ] && [ $rc != 0 ]; }; then
        echo "ok   $name"
    else
        echo "FAIL $name (exit $rc): $out"; fails=$((fails + 1))
    fi
}
cp "$tmp/stacks" "$tmp/in"
printf '[001] 38.931000000:\n' >"$tmp/irq-same-cpu"
printf '[000] 38.931000000:\n' >"$tmp/irq-other-cpu"
printf '[001] 38.929000000:\n' >"$tmp/irq-before"
expect fail "31-entry stack without an interrupt list"
expect pass "31-entry stack after an interrupt on its CPU" -v irqs="$tmp/irq-same-cpu"
expect fail "31-entry stack, the interrupt on another CPU" -v irqs="$tmp/irq-other-cpu"
expect fail "31-entry stack, the interrupt before the previous sample" -v irqs="$tmp/irq-before"
head -1 "$tmp/stacks" >"$tmp/in"
expect pass "the full 32-entry stack"
sed '1s#0x40151f/0x4016f0#0x40151f/0x4016f5#' "$tmp/in" >"$tmp/in2"; mv "$tmp/in2" "$tmp/in"
expect fail "a CALL entry with a wrong target" -v irqs="$tmp/irq-same-cpu"
# pt-gaps.awk: expect_gaps STATUS NAME AUX ERR
expect_gaps() {
    local want=$1 name=$2
    out=$(awk -f "$top/tests/linux/pt-gaps.awk" "$3" "$4" 2>&1); rc=$?
    if { [ "$want" = pass ] && [ $rc = 0 ]; } || { [ "$want" = fail ] && [ $rc != 0 ]; }; then
        echo "ok   $name"
    else
        echo "FAIL $name (exit $rc): $out"; fails=$((fails + 1))
    fi
}
d=$top/tests/linux/data
for r in 7 9; do grep -v '^#' "$d/pt-gaps-run$r.aux" >"$tmp/run$r.aux"; done
expect_gaps pass "run 7: 2 errors at a truncation inside an AUXTRACE buffer" "$tmp/run7.aux" "$d/pt-gaps-run7.err"
expect_gaps pass "run 9: the cut's Bad packet timestamped after its gap" "$tmp/run9.aux" "$d/pt-gaps-run9.err"
sed 's/time 75.194789173/time 75.130000000/' "$d/pt-gaps-run7.err" >"$tmp/moved.err"
expect_gaps fail "run 7 with an error moved between truncations" "$tmp/run7.aux" "$tmp/moved.err"
sed 's/^\( instruction trace error type 1 time 75.194789164 .*\)$/\1\n\1\n\1\n\1/' "$d/pt-gaps-run7.err" >"$tmp/five.err"
expect_gaps fail "run 7 with 5 errors at one truncation" "$tmp/run7.aux" "$tmp/five.err"
sed 's/flags: 0x1 \[T\]/flags: 0 []/' "$tmp/run7.aux" >"$tmp/untrunc.aux"
expect_gaps fail "run 7's gaps without truncated AUX records" "$tmp/untrunc.aux" "$d/pt-gaps-run7.err"
# callstack.awk: a call-stack-mode stack (`perf record --call-graph lbr` on Arch LBR, README
# "Architectural LBR"), as `perf script -F brstacksym` printed it in one run, resolved against
# the binary's symbols: it passes; a RET among the calls, a call site twice (a RET that did not
# pop), a wrong direct target and a wrong MISPRED flag fail.
addr() { printf '0x%x' $((16#$(nm "$tmp/usr/local/bin/calls" | awk -v s="$1" '$3 == s { print $1; exit }') + $2)); }
cs_main=$(addr main 0x2f)/$(addr pttrace_target 0)
cs_libc=$(addr __libc_start_call_main 0x62)/$(addr main 0)
cs_impl=$(addr __libc_start_main_impl 0x89b)/$(addr __libc_start_call_main 0)
cs_start=$(addr _start 0x1b)/$(addr __libc_start_main_impl 0)
expect_cs() {
    local want=$1 name=$2
    out=$(awk -f "$top/tests/linux/callstack.awk" "$tmp/calls.insns" - <"$tmp/in" 2>&1); rc=$?
    if { [ "$want" = pass ] && [ $rc = 0 ]; } || { [ "$want" = fail ] && [ $rc != 0 ]; }; then
        echo "ok   $name"
    else
        echo "FAIL $name (exit $rc): $out"; fails=$((fails + 1))
    fi
}
echo "$cs_main/P/-/-/0  $cs_libc/M/-/-/0  $cs_impl/P/-/-/0  $cs_start/P/-/-/0" >"$tmp/in"
expect_cs pass "call stack: main -> pttrace_target under libc's calls"
ret=$(awk '$2 == "R" { print $1; exit }' "$tmp/calls.insns")
echo "0x$ret/$(addr main 0x34)/P/-/-/0  $cs_libc/M/-/-/0  $cs_impl/P/-/-/0  $cs_start/P/-/-/0" >"$tmp/in"
expect_cs fail "call stack with a RET entry"
echo "$cs_main/P/-/-/0  $cs_main/P/-/-/0  $cs_libc/M/-/-/0  $cs_impl/P/-/-/0  $cs_start/P/-/-/0" >"$tmp/in"
expect_cs fail "call stack with a call site twice"
echo "$(addr main 0x2f)/$(addr pttrace_target 4)/P/-/-/0  $cs_libc/M/-/-/0" >"$tmp/in"
expect_cs fail "call stack with a wrong direct target"
echo "$cs_main/M/-/-/0  $cs_libc/M/-/-/0" >"$tmp/in"
expect_cs fail "call stack with a direct call flagged mispredicted"
# perf-shell-results.awk (perf_shell_tests.sh): the console of a Skylake boot that ran perf's own
# shell tests gives exactly the recorded results (data/perf-shell-skylake.results, checked by
# hand against the console: per_thread and jitdump failed, the three newest-part sub-tests
# skipped); a sub-test whose OK is gone fails, one that printed a SKIP line is a skip, not a pass.
expect_results() {  # NAME CONSOLE EXPECTED
    out=$(awk -f "$top/tests/linux/perf-shell-results.awk" "$2" | diff "$3" - 2>&1); rc=$?
    if [ $rc = 0 ]; then echo "ok   $1"; else echo "FAIL $1: $out"; fails=$((fails + 1)); fi
}
expect_results "perf shell tests: recorded Skylake console" "$d/perf-shell-skylake.console" "$d/perf-shell-skylake.results"
awk '/^--- Test virtual LBR ---$/ { v = 1 } v && $0 == "OK" { v = 0; next } { print }' "$d/perf-shell-skylake.console" >"$tmp/nolbr.console"
sed 's#^test_intel_pt/virtual_lbr pass$#test_intel_pt/virtual_lbr fail#' "$d/perf-shell-skylake.results" >"$tmp/nolbr.results"
expect_results "perf shell tests: virtual_lbr without its OK is a fail" "$tmp/nolbr.console" "$tmp/nolbr.results"
awk '/^--- Test with kernel trace ---$/ { print; print "SKIP: no kernel tracing"; next } { print }' "$d/perf-shell-skylake.console" >"$tmp/skip.console"
sed 's#^test_intel_pt/kernel_trace pass$#test_intel_pt/kernel_trace skip#' "$d/perf-shell-skylake.results" >"$tmp/skip.results"
expect_results "perf shell tests: a SKIP line makes kernel_trace a skip despite its OK" "$tmp/skip.console" "$tmp/skip.results"
[ $fails = 0 ] && echo "checkers-selftest.sh: all cases as expected" || { echo "checkers-selftest.sh: $fails case(s) wrong"; exit 1; }
