#!/usr/bin/env bash
# Trace every corpus program under qemu-x86_64 with the plugin, decode each thread's stream with
# libipt (`pttrace compare`) and compare it address by address with the ground-truth log that the
# plugin's independent per-instruction logging mode (truth=1) wrote in the same run.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh")
bin=$top/target/corpus/bin
out=$top/target/corpus/out
mkdir -p "$bin" "$out"
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null
plugin=$top/target/release/libpttrace.so
tool=$top/target/release/pttrace
programs=${CORPUS:-$(cd "$bin" && ls)}
fail=0 total=0 progs=0
for p in $programs; do
  dir=$out/$p
  rm -rf "$dir"
  if ! "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$dir,truth=1" "$bin/$p" >"$dir.stdout" 2>"$dir.stderr"; then
    echo "FAIL $p: qemu-x86_64 exited non-zero"; cat "$dir.stderr"; fail=1; continue
  fi
  if ! "$tool" compare "$dir" >"$dir.compare" 2>&1; then
    echo "FAIL $p:"; cat "$dir.compare"; fail=1
  else
    n=$(sed -n 's/^total: .*compared \([0-9]*\) instructions.*/\1/p' "$dir.compare" | tail -1)
    echo "ok   $p: ${n:-?} instructions compared, 0 mismatches"
    total=$((total + ${n:-0}))
  fi
  progs=$((progs + 1))
done
# Option variants: the same exact comparison with perf-style config terms changed.
variant() {  # name program options...
  local name=$1 p=$2; shift 2
  local dir=$out/variant-$name opts
  opts=$(IFS=,; echo "$*")
  rm -rf "$dir"
  if "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$dir,truth=1,$opts" "$bin/$p" >/dev/null 2>"$dir.stderr" &&
     "$tool" compare "$dir" >"$dir.compare" 2>&1; then
    n=$(sed -n 's/^total: .*compared \([0-9]*\) instructions.*/\1/p' "$dir.compare" | tail -1)
    echo "ok   $p [$opts]: ${n:-?} instructions compared, 0 mismatches"
    total=$((total + ${n:-0}))
  else
    echo "FAIL $p [$opts]"; cat "$dir.stderr" "$dir.compare" 2>/dev/null; fail=1
  fi
}
variant noretcomp recursion noretcomp=1
variant psb_period3_notsc long_psb psb_period=3 tsc=0
variant psb_period5 threads psb_period=5
variant mtc_cyc recursion mtc=1 mtc_period=3 cyc=1 cyc_thresh=2
variant mtc_cyc_sig sigstorm mtc=1 mtc_period=0 cyc=1

# TraceStop at main(): the stream must end with TIP.PGD at the CALL into main, so the decoded
# flow is exactly the ground truth up to (not including) main's first instruction.
main=$(nm "$bin/loops" | awk '$3 == "main" { print $1 }')
dir=$out/variant-stop
rm -rf "$dir"
"$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$dir,truth=1,stop=0x$main-0x$main" "$bin/loops" >/dev/null 2>"$dir.stderr"
idx=$(grep -n -m1 -x "$(printf '%x' "0x$main")" "$dir/thread-1.truth" | cut -d: -f1)
if [ -n "$idx" ] && "$tool" dump "$dir/thread-1.pt" | tail -1 | grep -q ' stop' &&
   cmp -s <("$tool" decode "$dir" --thread 1) <(head -n $((idx - 1)) "$dir/thread-1.truth"); then
  echo "ok   loops [stop=main]: decoded flow = ground truth before main ($((idx - 1)) instructions), ends with TraceStop"
else
  echo "FAIL loops [stop=main]"; fail=1
fi

echo "corpus: $progs programs, $total instructions compared, result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
