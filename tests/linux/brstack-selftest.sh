#!/usr/bin/env bash
# Host-side check of tests/linux/brstack.awk's depth rule (issue 14), on a recorded stack: a
# `perf record -b -e instructions:upp` sample of `calls` whose stack Linux shortened to 31
# entries (an interrupt fell among its last 32 branches; README "LBR"). The checker must accept
# it only with an interrupt on the sample's CPU since the previous sample, and must reject a
# stack with a wrong target. Needs the cached Linux guest (for the workload binary).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
guest=${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pttrace-brstack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
[ -f "$guest/initramfs.cpio.gz" ] || { echo "brstack-selftest.sh: no guest in $guest (scripts/linux-guest/build.sh)" >&2; exit 2; }
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
[ $fails = 0 ] && echo "brstack-selftest.sh: all cases as expected" || { echo "brstack-selftest.sh: $fails case(s) wrong"; exit 1; }
