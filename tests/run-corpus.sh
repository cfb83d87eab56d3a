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
echo "corpus: $progs programs, $total instructions compared, result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
