#!/usr/bin/env bash
# make bench: the cost of pttrace against the same QEMU without a plugin (issue 8).
# For each workload under qemu-x86_64: median wall time of several paired runs without a plugin and
# with the plugin tracing (user-mode PT, default options), the slowdown ratio, PT bytes per retired
# branch, and the peak resident memory of QEMU with the plugin. Not a test: it prints figures.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh")
bin=$top/target/corpus/bin
mkdir -p "$bin"
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null
plugin=$top/target/release/libpttrace.so
runs=${BENCH_RUNS:-7}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
secs() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }

printf '%-12s %10s %10s %8s %12s %14s %10s\n' workload "plain(us)" "pt(us)" ratio "PT bytes" "bytes/branch" "peak RSS"
# recursion: call-heavy; long_psb: branchy interpreter + LZ compressor; syscalls: syscall-heavy;
# threads: 6 threads.
for w in ${BENCH_WORKLOADS:-recursion long_psb syscalls threads}; do
  plain=() traced=()
  for _ in $(seq "$runs"); do
    plain+=("$(secs "$qemu_dir/qemu-x86_64" "$bin/$w")")
    traced+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$out/$w" "$bin/$w")")
  done
  p=$(printf '%s\n' "${plain[@]}" | median)
  t=$(printf '%s\n' "${traced[@]}" | median)
  /usr/bin/time -o "$out/rss" -f '%M' "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$out/$w" "$bin/$w" >/dev/null 2>&1
  rss=$(tail -1 "$out/rss")
  bytes=$(cat "$out/$w"/thread-*.pt | wc -c)
  # Retired branches: the changes of flow in libipt's decoded flow (pttrace decode --summary).
  branches=$("$top/target/release/pttrace" decode "$out/$w" --summary 2>&1 | sed -n "s/.* \([0-9]*\) branches.*/\1/p" | awk '{ s += $1 } END { print s + 0 }')
  per=$(awk -v b="$bytes" -v n="$branches" 'BEGIN { if (n > 0) printf "%.3f", b / n; else print "n/a" }')
  printf '%-12s %10s %10s %8s %12s %14s %9sK\n' "$w" "$p" "$t" "$(awk -v a="$t" -v b="$p" 'BEGIN { printf "%.2fx", a / b }')" "$bytes" "$per" "$rss"
done
echo "(median of $runs runs each; ratio = with plugin tracing / without plugin; hardware PT: ~0.14 bytes/branch)"
