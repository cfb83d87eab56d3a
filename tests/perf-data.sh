#!/usr/bin/env bash
# Issue 16: host perf reads pttrace traces. For the corpus programs, option variants and a stock
# dynamically linked Debian program (/usr/bin/sort), traced with truth=1, `pttrace perf DIR`
# writes DIR/perf.data and Debian's perf on this host (whatever its CPU) must
#  - report no trace error:      perf script --itrace=e prints nothing (overflow runs: only
#                                "Overflow packet" errors, one per OVF libipt sees)
#  - decode the exact flow:      perf script --itrace=i1i -F tid,ip, per thread (one tid per
#                                thread-N.pt), equals thread-N.truth (an ordered subsequence of it
#                                with overflows; the truth up to main with stop=main)
#  - show the expected calls:    perf script --itrace=b -F tid,ip,addr,sym has, for every function
#                                of the program the truth enters by a jump (not by falling
#                                through), the branch from the instruction before it in the truth
#                                (or from 0, the trace beginning, for a signal handler) to its
#                                first instruction, named
#  - name the program's functions: perf report --itrace=i --stdio (i1000i for runs under 2M
#                                instructions: the default period is 100000) lists a function
#                                defined in tests/corpus
# Also a program ending in execve, one killed by a signal it raises, filter/stop ranges, -o.
# and `pttrace perf` must refuse a directory that is no pttrace output, an RTIT trace and a trace
# whose binary is gone, with a message saying so.
# CORPUS="p1 p2" limits the corpus programs; PTTRACE_TARGET=DIR takes the plugin and tool from
# DIR/release instead of target/release.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh") || exit 1
command -v perf >/dev/null || bash "$top/scripts/install-deps.sh" || exit 1
release=${PTTRACE_TARGET:-$top/target}/release
plugin=$release/libpttrace.so
tool=$release/pttrace
bin=$top/target/corpus/bin
out=$top/target/perf-data
mkdir -p "$bin" "$out"
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null || exit 1
q=$qemu_dir/qemu-x86_64
# The synthetic process id of perf.data (tool/src/perf_data/mod.rs PID): thread N is PID + N - 1.
pid=1000
fail=0 runs=0 insns=0

bad() { echo "FAIL $1"; fail=1; }

# Functions the truth enters by a jump, as perf must name them: "FROM TO |NAME|ALIAS|..." (hex
# without 0x; perf may pick any of the names at an address).
# SYMS: "ADDR TYPE NAME" lines (nm, addresses without leading zeros); TRUTH: one thread's truth.
expected_calls() {  # syms-file truth
  awk 'function hex(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
       NR == FNR { if ($2 ~ /^[TtWwi]$/) sym[$1] = sym[$1] "|" $3; next }
       ($1 in sym) && !($1 in seen) {
         seen[$1] = 1
         d = hex($1) - hex(prev)
         if (prev != "" && (d <= 0 || d > 15)) print prev, $1, sym[$1] "|"
       }
       { prev = $1 }' "$1" "$2"
}

# Check DIR (traced with truth=1) through host perf. MODE: exact, overflow, stop:ADDR (the truth
# before ADDR) or filter:LO-HI (the truth inside [LO, HI]).
# FUNCS: a regexp of function names the report must show (empty: no report check).
check() {  # dir label mode funcs
  local dir=$1 label=$2 mode=$3 funcs=$4 n t tid want got nthreads ntids period ok=1 what=""
  runs=$((runs + 1))
  if ! "$tool" perf "$dir" >"$dir.perf-out" 2>&1; then
    bad "$label: pttrace perf: $(cat "$dir.perf-out")"; return
  fi
  local data=$dir/perf.data
  perf script -i "$data" --itrace=e >"$dir.errors" 2>&1
  if [ "$mode" = overflow ]; then
    local ovfs errs
    ovfs=$("$tool" decode "$dir" --summary 2>&1 | sed -n 's/.* 0 errors, \([0-9]*\) overflows.*/\1/p')
    errs=$(grep -c '^ *instruction trace error type' "$dir.errors")
    if [ "${ovfs:-0}" -eq 0 ] || [ "$errs" -ne "$ovfs" ] || [ "$(grep '^ *instruction trace error type' "$dir.errors" | grep -vc 'Overflow packet')" -ne 0 ]; then
      bad "$label: perf --itrace=e: $errs errors for ${ovfs:-?} overflows: $(grep '^ *instruction trace error type' "$dir.errors" | grep -v 'Overflow packet' | head -3)"; return
    fi
    what="$ovfs overflows reported as such, "
  elif grep -q . "$dir.errors"; then
    bad "$label: perf script --itrace=e: $(head -3 "$dir.errors")"; return
  fi
  perf script -i "$data" --itrace=i1i -F tid,ip >"$dir.ips" 2>"$dir.ips.err" || { bad "$label: perf script --itrace=i1i: $(head -3 "$dir.ips.err")"; return; }
  nthreads=$(ls "$dir"/thread-*.pt | wc -l)
  ntids=$(awk '{ print $1 }' "$dir.ips" | sort -u | wc -l)
  if [ "$nthreads" -ne "$ntids" ]; then
    bad "$label: $nthreads streams but perf decoded $ntids threads"; return
  fi
  n=0
  for t in "$dir"/thread-*.truth; do
    tid=${t##*/thread-}; tid=$((pid + ${tid%.truth} - 1))
    awk -v t="$tid" '$1 == t { print $2 }' "$dir.ips" >"$dir.got"
    case $mode in
      exact) cmp -s "$dir.got" "$t" || { bad "$label: thread $tid: perf's flow differs from the truth: $(cmp "$dir.got" "$t" 2>&1 | head -1)"; return; } ;;
      overflow)
        got=$(awk -f "$top/tests/ordered-subsequence.awk" "$t" "$dir.got")
        [ "$got" -gt 0 ] 2>/dev/null || { bad "$label: thread $tid: perf's flow is not an ordered subsequence of the truth"; return; } ;;
      filter:*)
        local r=${mode#filter:}
        cmp -s "$dir.got" <(perl -ne 'BEGIN { $lo = hex(shift); $hi = hex(shift) } chomp; $v = hex($_); print "$_\n" if $v >= $lo && $v <= $hi' "${r%-*}" "${r#*-}" <"$t") ||
          { bad "$label: perf's flow is not the truth inside $r"; return; } ;;
      stop:*)
        local idx
        idx=$(grep -n -m1 -x "${mode#stop:}" "$t" | cut -d: -f1)
        cmp -s "$dir.got" <(head -n $((idx - 1)) "$t") || { bad "$label: perf's flow is not the truth before ${mode#stop:}"; return; } ;;
    esac
    n=$((n + $(wc -l <"$dir.got")))
  done
  insns=$((insns + n))
  # Calls: every function entered by a jump in the truth, from the right place, named. (nm gives
  # run-time addresses for the static corpus; the stripped Debian programs have no symbols.)
  local binary calls=0
  binary=$(sed -n 's/^binary=//p' "$dir/meta.txt")
  nm "$binary" 2>/dev/null | awk 'NF == 3 { a = $1; sub(/^0+/, "", a); print a, $2, $3 }' >"$dir.nm"
  if [ -s "$dir.nm" ] && [ "$mode" = exact -o "$mode" = overflow ]; then
    perf script -i "$data" --itrace=b -F tid,ip,addr,sym >"$dir.branches" 2>"$dir.branches.err" ||
      { bad "$label: perf script --itrace=b: $(head -3 "$dir.branches.err")"; return; }
    for t in "$dir"/thread-*.truth; do
      tid=${t##*/thread-}; tid=$((pid + ${tid%.truth} - 1))
      expected_calls "$dir.nm" "$t" >"$dir.want-calls"
      calls=$((calls + $(wc -l <"$dir.want-calls")))
      [ "$mode" = overflow ] && continue  # a gap may hide the branch
      # Entered by a signal (user-only trace: the kernel's delivery is not traced): the branch
      # perf shows is the trace beginning, from 0.
      missing=$(awk -v t="$tid" 'NR == FNR { from[$2] = $1; names[$2] = $3; next }
                $1 == t && $4 == "=>" && ($5 in from) && ($2 == from[$5] || $2 == "0") && index(names[$5], "|" $6 "|") { delete from[$5] }
                END { for (a in from) print from[a], a, names[a] }' "$dir.want-calls" "$dir.branches" | head -3)
      [ -z "$missing" ] || { bad "$label: thread $tid: branches perf does not show (from to name): $missing"; return; }
    done
    what="$what$calls calls named, "
  fi
  if [ -n "$funcs" ]; then
    period=i
    [ "$n" -lt 2000000 ] && period=i1000i
    perf report -i "$data" --itrace=$period --stdio --sort sym 2>"$dir.report.err" >"$dir.report"
    got=$(grep -v '^#' "$dir.report" | grep -oE "\[\.\] ($funcs)\$" | sed 's/^\[\.\] //' | sort -u | head -6 | paste -sd' ')
    [ -n "$got" ] || { bad "$label: perf report --itrace=$period names none of $funcs: $(grep -v '^#' "$dir.report" | head -5)"; return; }
    what="${what}report names ${got% }, "
  fi
  echo "ok   $label: $nthreads thread(s), perf decoded $n instructions = ${mode%%:*} ground truth, ${what}no trace error"
}

# The functions a corpus program defines itself (its .c/.S file), as a regexp.
own_functions() {  # program
  nm -l "$bin/$1" 2>/dev/null | awk '$2 ~ /^[Tt]$/ && $4 ~ /tests\/corpus\// { print $3 }' | sort -u | paste -sd'|'
}

trace() {  # dir program options...
  local dir=$1 p=$2; shift 2
  local opts
  opts=$(IFS=,; echo "$*")
  rm -rf "$dir"
  "$q" -plugin "$plugin,out=$dir,truth=1${opts:+,$opts}" "$p" >"$dir.stdout" 2>"$dir.stderr" ||
    { bad "$p [$opts]: qemu-x86_64 exited non-zero: $(tail -2 "$dir.stderr")"; return 1; }
}

for p in ${CORPUS:-$(cd "$bin" && ls)}; do
  case $p in
    # Code rewritten at run time: perf.data has one version per address, so `pttrace perf`
    # refuses these (tests/code-versions.sh checks that it says so). fork_tree rewrites code
    # too (tests/fork.sh converts a run with forked children).
    smc | smc_threads | smc_inplace | fork_tree) continue ;;
  esac
  trace "$out/$p" "$bin/$p" && check "$out/$p" "$p" exact "$(own_functions "$p")"
done
trace "$out/v-noretcomp" "$bin/recursion" noretcomp=1 && check "$out/v-noretcomp" "recursion [noretcomp=1]" exact ""
# tsc=0: no TSC bit in the config, so perf decodes without timestamps.
trace "$out/v-notsc" "$bin/threads" psb_period=3 tsc=0 && check "$out/v-notsc" "threads [psb_period=3,tsc=0]" exact ""
trace "$out/v-mtc-cyc" "$bin/sigstorm" mtc=1 mtc_period=3 cyc=1 cyc_thresh=2 &&
  check "$out/v-mtc-cyc" "sigstorm [mtc=1,mtc_period=3,cyc=1,cyc_thresh=2]" exact ""
trace "$out/v-overflow" "$bin/recursion" buffer=512 drain=1/8 && check "$out/v-overflow" "recursion [buffer=512,drain=1/8]" overflow ""
main=$(nm "$bin/loops" | awk '$3 == "main" { print $1 }')
trace "$out/v-stop" "$bin/loops" "stop=0x$main-0x$main" &&
  check "$out/v-stop" "loops [stop=main]" "stop:$(printf '%x' "0x$main")" ""
read -r a size <<<"$(nm -S "$bin/loops" | awk '$4 == "insertion_sort" { print $1, $2 }')"
hi=$(printf '%x' $((0x$a + 0x$size - 1)))
trace "$out/v-filter" "$bin/loops" "filter=0x$a-0x$hi" &&
  check "$out/v-filter" "loops [filter=insertion_sort]" "filter:$a-$hi" ""
# -o FILE: the same file elsewhere.
if "$tool" perf "$out/v-filter" 2>/dev/null && "$tool" perf "$out/v-filter" -o "$out/v-filter.perf.data" 2>/dev/null &&
   cmp -s "$out/v-filter.perf.data" "$out/v-filter/perf.data"; then
  echo "ok   pttrace perf DIR -o FILE writes the same perf.data as the default DIR/perf.data"
else
  bad "pttrace perf DIR -o FILE: missing or different from DIR/perf.data"
fi

# A stock dynamically linked, position-independent Debian program: ld.so, libc, the program.
printf 'pear\napple\nfig\nbanana\ncherry\n' >"$out/sort-input"
rm -rf "$out/sort"
if "$q" -plugin "$plugin,out=$out/sort,truth=1" /usr/bin/sort "$out/sort-input" >"$out/sort.stdout" 2>"$out/sort.stderr" &&
   cmp -s "$out/sort.stdout" <(sort "$out/sort-input"); then
  check "$out/sort" "/usr/bin/sort" exact "_dl_[a-z_]+|_int_malloc|__libc_start_main_impl|main"
  if ! grep -q 'ld-linux-x86-64.so.2' "$out/sort/perf.data" || ! grep -q 'libc.so.6' "$out/sort/perf.data"; then
    bad "/usr/bin/sort: perf.data does not map ld.so and libc"
  fi
else
  bad "/usr/bin/sort under the plugin: $(tail -2 "$out/sort.stderr")"
fi

# A program that ends in execve (the new program runs untraced: meta.txt end=execve), and one
# killed by a signal it raises (the plugin finishes the streams: end=signal 15).
rm -rf "$out/execve"
"$q" -plugin "$plugin,out=$out/execve,truth=1" /bin/sh -c 'echo hi; exec /bin/true' >/dev/null 2>"$out/execve.stderr" &&
  grep -qx 'end=execve' "$out/execve/meta.txt" && check "$out/execve" "/bin/sh -c 'echo hi; exec /bin/true'" exact "" ||
  bad "sh -c exec: no end=execve trace"
sig=$top/target/signals/bin/sigdie
mkdir -p "${sig%/*}"
[ "$sig" -nt "$top/tests/signals/sigdie.c" ] ||
  gcc -O1 -g -static -fno-pie -no-pie -pthread -Wall -Werror -o "$sig" "$top/tests/signals/sigdie.c" || exit 1
rm -rf "$out/sigterm"
("$q" -plugin "$plugin,out=$out/sigterm,truth=1" "$sig" raise 15 30000 >/dev/null 2>"$out/sigterm.stderr"; :) 2>/dev/null
grep -qx 'end=signal 15' "$out/sigterm/meta.txt" && check "$out/sigterm" "sigdie raise SIGTERM" exact "work|main" ||
  bad "sigdie raise 15: no end=signal 15 trace"

# Errors: clear refusals, exit status 2.
refuse() {  # label expected-text pttrace-perf-args...
  local label=$1 text=$2 rc; shift 2
  "$tool" perf "$@" >"$out/refuse.out" 2>&1; rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$text" "$out/refuse.out"; then
    echo "ok   refused: $label: $(head -1 "$out/refuse.out")"
  else
    bad "$label: exit $rc, $(head -2 "$out/refuse.out")"
  fi
}
mkdir -p "$out/not-a-trace"
refuse "not a pttrace output" "is not a pttrace output directory" "$out/not-a-trace"
trace "$out/rtit" "$bin/loops" trace=rtit && refuse "Atom RTIT trace" "perf has no decoder for RTIT" "$out/rtit"
cp "$bin/loops" "$out/loops-copy"
trace "$out/gone" "$out/loops-copy" && rm -f "$out/loops-copy" &&
  refuse "binary gone" "loops-copy cannot be read on this host" "$out/gone"

echo "perf-data: $runs traces through host perf ($(perf --version)), $insns instructions = ground truth; result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
