#!/usr/bin/env bash
# The main job: trace a program under qemu-x86_64 with libpttrace.so, decode the Intel PT stream
# with libipt, and show that it reconstructs exactly the instructions QEMU executed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh")
bin=$top/target/demo/bin
out=$top/target/demo/out
mkdir -p "$bin"
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null
prog=${1:-recursion}
tool=$top/target/release/pttrace

echo "== tracing $prog: $qemu_dir/qemu-x86_64 -plugin libpttrace.so,out=$out,truth=1 $prog"
rm -rf "$out"
"$qemu_dir/qemu-x86_64" -plugin "$top/target/release/libpttrace.so,out=$out,truth=1" "$bin/$prog"
echo
echo "== output directory $out"
ls -l "$out"
echo
echo "== first packets of thread-1.pt (pttrace dump)"
"$tool" dump "$out/thread-1.pt" | head -n 24
echo "   ..."
echo
echo "== decoded with libipt (pttrace decode), first instructions"
"$tool" decode "$out" 2>/dev/null | head -n 8
echo "   ..."
echo
echo "== decoded flow vs. the independent per-instruction log (pttrace compare)"
"$tool" compare "$out"
pt_bytes=$(cat "$out"/thread-*.pt | wc -c)
insns=$(cat "$out"/thread-*.truth | wc -l)
echo
echo "summary: $prog executed $insns instructions; $pt_bytes bytes of Intel PT; libipt reconstructed all of them."
