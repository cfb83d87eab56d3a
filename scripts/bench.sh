#!/usr/bin/env bash
# make bench: the cost of pttrace against the same QEMU without a plugin (issue 8).
# For each workload under qemu-x86_64: median wall time of several paired runs without a plugin and
# with the plugin tracing (user-mode PT, default options), the slowdown ratio, PT bytes per retired
# branch, and the peak resident memory of QEMU with the plugin. Not a test: it prints figures.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh")
bin=$top/target/bench/bin
mkdir -p "$bin"
# Workloads (tests/bench/): calls = call-heavy loop, lz = LZ77 compressor + bytecode interpreter
# (branchy integer code), sys = getppid loop (syscall-heavy); each runs ~0.5-0.8 s without a
# plugin, so startup does not dominate. Plus the corpus' 6-thread program.
for p in calls lz sys; do
  [ "$bin/$p" -nt "$top/tests/bench/$p.c" ] || gcc -O2 -static -o "$bin/$p" "$top/tests/bench/$p.c"
done
bash "$top/tests/corpus/build.sh" "$top/target/corpus/bin" >/dev/null
cp "$top/target/corpus/bin/threads" "$bin/threads"
plugin=${BENCH_PLUGIN:-$top/target/release/libpttrace.so}
# BENCH_BASELINE=OLD/libpttrace.so: also time that build of the plugin (Intel PT, default options),
# interleaved with the others, for before/after figures from one run (column "base").
baseline=${BENCH_BASELINE:-}
runs=${BENCH_RUNS:-7}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
secs() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }

# For comparison: QEMU's own test plugin bb.c (from the
# same Debian source package as the QEMU binary), counting blocks with a C callback per block
# (inline=off) and with inline counters only (inline=on). Built here when the source is cached.
floor_cb="" floor_inline=""
# The floor of per-block work (issue 13): tests/bench/floor.c, one empty C execute callback per
# block registered with QEMU_PLUGIN_CB_NO_REGS.
floor_empty=""
# The floor of a record-then-encode design: tests/bench/record_floor.c, an 8-byte append per block
# to a per-vCPU ring (no consumer, no model): what recording every block costs on the vCPU.
floor_record=""
# The floor of recording only unpredicted blocks: tests/bench/predict_floor.c, inline operations per
# block (the predicted successor, a block count) and a conditional C callback that appends to a
# ring only when a block is not the one the block before predicted (static BTFNT prediction).
floor_predict=""
src=$(ls -d "${PTTRACE_CACHE:-$HOME/.cache/pttrace}"/src/qemu-*/tests/tcg/plugins 2>/dev/null | tail -1)
if [ -n "$src" ] && [ -f "$src/bb.c" ]; then
  inc=$(dirname "$(dirname "$(dirname "$src")")")/include/qemu
  # shellcheck disable=SC2046
  if gcc -O2 -shared -fPIC -I"$inc" $(pkg-config --cflags glib-2.0) "$src/bb.c" -o "$out/libbb.so" 2>/dev/null; then
    floor_cb="$out/libbb.so,inline=off" floor_inline="$out/libbb.so,inline=on"
  fi
  # shellcheck disable=SC2046
  if gcc -O2 -shared -fPIC -I"$inc" $(pkg-config --cflags glib-2.0) "$top/tests/bench/floor.c" -o "$out/libfloor.so"; then
    floor_empty="$out/libfloor.so"
  fi
  # shellcheck disable=SC2046
  if gcc -O2 -shared -fPIC -I"$inc" $(pkg-config --cflags glib-2.0) "$top/tests/bench/record_floor.c" -o "$out/librecfloor.so"; then
    floor_record="$out/librecfloor.so"
  fi
  # shellcheck disable=SC2046
  if gcc -O2 -shared -fPIC -I"$inc" $(pkg-config --cflags glib-2.0) "$top/tests/bench/predict_floor.c" -o "$out/libpredfloor.so"; then
    floor_predict="$out/libpredfloor.so,predict=btfnt"
  fi
fi

printf '%-12s %10s %10s %8s %9s %10s %8s %8s %8s %8s %9s %9s %10s %9s %12s %13s %10s\n' workload "plain(us)" "pt(us)" "floor" "rec-floor" "pred-floor" "pt" "base" "off" "rtit" "bb-cb" "bb-inl" "Mblocks/s" "PT MB/s" "PT bytes" "bytes/branch" "peak RSS"
declare -A args=([calls]=30000000 [lz]=16 [sys]=2000000 [threads]="")
for w in ${BENCH_WORKLOADS:-calls lz sys threads}; do
  plain=() traced=() fcb=() finl=() offr=() rtitr=() fempty=() frec=() fpred=() based=()
  for _ in $(seq "$runs"); do
    plain+=("$(secs "$qemu_dir/qemu-x86_64" "$bin/$w" ${args[$w]})")
    traced+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$out/$w" "$bin/$w" ${args[$w]})")
    offr+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$plugin,trace=off,out=$out/off-$w" "$bin/$w" ${args[$w]})")
    rtitr+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$plugin,trace=rtit,out=$out/rtit-$w" "$bin/$w" ${args[$w]})")
    if [ -n "$baseline" ]; then
      based+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$baseline,out=$out/base-$w" "$bin/$w" ${args[$w]})")
    fi
    if [ -n "$floor_empty" ]; then
      fempty+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$floor_empty" "$bin/$w" ${args[$w]})")
    fi
    if [ -n "$floor_record" ]; then
      frec+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$floor_record" "$bin/$w" ${args[$w]})")
    fi
    if [ -n "$floor_predict" ]; then
      fpred+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$floor_predict" "$bin/$w" ${args[$w]})")
    fi
    if [ -n "$floor_cb" ]; then
      fcb+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$floor_cb" "$bin/$w" ${args[$w]})")
      finl+=("$(secs "$qemu_dir/qemu-x86_64" -plugin "$floor_inline" "$bin/$w" ${args[$w]})")
    fi
  done
  p=$(printf '%s\n' "${plain[@]}" | median)
  t=$(printf '%s\n' "${traced[@]}" | median)
  ratio() { awk -v a="$1" -v b="$p" 'BEGIN { if (a > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  rcb=n/a rinl=n/a rempty=n/a rrec=n/a rpred=n/a rbase=n/a
  if [ -n "$baseline" ]; then
    rbase=$(ratio "$(printf '%s\n' "${based[@]}" | median)")
  fi
  if [ -n "$floor_empty" ]; then
    rempty=$(ratio "$(printf '%s\n' "${fempty[@]}" | median)")
  fi
  if [ -n "$floor_record" ]; then
    rrec=$(ratio "$(printf '%s\n' "${frec[@]}" | median)")
  fi
  if [ -n "$floor_predict" ]; then
    # (plus the share of blocks it recorded, from one more run)
    share=$("$qemu_dir/qemu-x86_64" -plugin "$floor_predict" "$bin/$w" ${args[$w]} 2>&1 >/dev/null |
      sed -n 's/^predict-floor: recorded \([0-9]*\) of \([0-9]*\) blocks.*/\1 \2/p' | awk '$2 > 0 { printf "/%d%%", 100 * $1 / $2 }')
    rpred=$(ratio "$(printf '%s\n' "${fpred[@]}" | median)")$share
  fi
  if [ -n "$floor_cb" ]; then
    rcb=$(ratio "$(printf '%s\n' "${fcb[@]}" | median)")
    rinl=$(ratio "$(printf '%s\n' "${finl[@]}" | median)")
  fi
  /usr/bin/time -o "$out/rss" -f '%M' "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$out/$w" "$bin/$w" ${args[$w]} >/dev/null 2>"$out/$w.stderr"
  rss=$(tail -1 "$out/rss")
  bytes=$(cat "$out/$w"/thread-*.pt | wc -c)
  # Throughput while tracing: executed blocks (the plugin's exit line) and trace bytes per second
  # of the median traced run.
  blocks=$(sed -n 's/^pttrace: .* \([0-9]*\) blocks.*/\1/p' "$out/$w.stderr" | tail -1)
  bps=$(awk -v n="${blocks:-0}" -v us="$t" 'BEGIN { if (us > 0) printf "%.1f", n / us; else print "n/a" }')
  mbps=$(awk -v n="$bytes" -v us="$t" 'BEGIN { if (us > 0) printf "%.1f", n / us; else print "n/a" }')
  # Retired branches: the changes of flow in libipt's decoded flow (pttrace decode --summary).
  branches=$("$top/target/release/pttrace" decode "$out/$w" --summary 2>&1 | sed -n "s/.* \([0-9]*\) branches.*/\1/p" | awk '{ s += $1 } END { print s + 0 }')
  per=$(awk -v b="$bytes" -v n="$branches" 'BEGIN { if (n > 0) printf "%.3f", b / n; else print "n/a" }')
  printf '%-12s %10s %10s %8s %9s %10s %8s %8s %8s %8s %9s %9s %10s %9s %12s %13s %9sK\n' "$w" "$p" "$t" "$rempty" "$rrec" "$rpred" "$(ratio "$t")" "$rbase" \
    "$(ratio "$(printf '%s\n' "${offr[@]}" | median)")" "$(ratio "$(printf '%s\n' "${rtitr[@]}" | median)")" \
    "$rcb" "$rinl" "$bps" "$mbps" "$bytes" "$per" "$rss"
done
echo "(median of $runs runs each; ratios against no plugin: floor = tests/bench/floor.c, an empty C callback per"
echo " block (NO_REGS): the cost of any per-block design; rec-floor = tests/bench/record_floor.c, an 8-byte append"
echo " per block to a per-vCPU ring, no consumer: the vCPU's part of any record-then-encode design; pred-floor ="
echo " tests/bench/predict_floor.c, the same append only for blocks the block before did not predict (static"
echo " BTFNT), with inline operations per block, and the share of blocks it recorded; pt = Intel PT tracing (default options), base = the same"
echo " with the BENCH_BASELINE build of the plugin (n/a without), off = plugin"
echo " loaded with trace=off, rtit = Atom RTIT tracing; Mblocks/s and PT MB/s: executed blocks and trace bytes"
echo " per second of the median PT run; hardware PT: ~0.14 bytes/branch)"
echo "(bb-cb / bb-inl: QEMU's bb.c test plugin with a C callback per block, which looks up a scoreboard entry"
echo " every block, / inline counters only)"

[ "${BENCH_SYSTEM:-1}" = 0 ] && exit 0
# Full system: tests/guest/b_pt_loop.c times one branchy ring-0 workload three times with RDTSC:
# untraced, with IA32_RTIT_CTL configured but TraceEn = 0, and with Intel PT on. Ratios against the
# same guest without the plugin (median of the runs).
export QEMU=$qemu_dir/qemu-system-x86_64
gbin=$top/target/guest/bin
bash "$top/tests/guest/build.sh" "$gbin" >/dev/null
field() { sed -n "s/.*BENCH .* $1=\\([0-9]*\\).*/\\1/p"; }
np=() cf=() on=() tp=() offp=() gbytes=0 fl=() frl=() fpl=() fps="" e0=() e1=() r0=() fo=() fc=()
cn=() con=() cr0=() cfr=() cin=() cind=()
pn=() pc=() pc0=()
for _ in $(seq "$runs"); do
  # tests/guest/b_pmu_loop.c: b_pt_loop's workload counted by a fixed and a GP counter (the
  # counting PMU, Intel PT off), without the plugin (uncounted), with it, and with the model at
  # every block (PTTRACE_RECORD=0: before counting took the recorded path).
  pn+=("$(bash "$top/tests/guest/run.sh" "$gbin/b_pmu_loop.elf" 2>/dev/null | tr -d '\r' | field counting)")
  pc+=("$(bash "$top/tests/guest/run.sh" "$gbin/b_pmu_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r' | field counting)")
  pc0+=("$(PTTRACE_RECORD=0 bash "$top/tests/guest/run.sh" "$gbin/b_pmu_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r' | field counting)")
  # tests/guest/b_pt_calls.c: a call-heavy ring-0 loop (every RET an indirect transfer whose
  # target the block callback must find), untraced without the plugin and with Intel PT on.
  cplain=$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_calls.elf" 2>/dev/null | tr -d '\r')
  cwith=$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_calls.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r')
  cn+=("$(field on <<<"$cplain")") con+=("$(field on <<<"$cwith")")
  cin+=("$(field ind <<<"$cplain")") cind+=("$(field ind <<<"$cwith")")
  cr0+=("$(PTTRACE_RECORD=0 bash "$top/tests/guest/run.sh" "$gbin/b_pt_calls.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r' | field on)")
  [ -n "$floor_record" ] && cfr+=("$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_calls.elf" -plugin "$floor_record" 2>/dev/null | tr -d '\r' | field on)")
  base=$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" 2>/dev/null | tr -d '\r')
  with=$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r')
  # The same with the model on the vCPU at every block (PTTRACE_RECORD=0, the reference path),
  # with recorded blocks run by the vCPU itself (PTTRACE_ENCODER=0: no encoder thread) and by
  # the encoder thread all the time (PTTRACE_ENCODER=2); the default places the model beside
  # the vCPU while the vCPU has a host CPU to itself (issue 13 step 21).
  # Every block instrumented from the start (PTTRACE_LIGHT=0: as before light instrumentation).
  full=$(PTTRACE_LIGHT=0 bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r')
  fo+=("$(field off <<<"$full")") fc+=("$(field configured <<<"$full")")
  r0+=("$(PTTRACE_RECORD=0 bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r' | field on)")
  e0+=("$(PTTRACE_ENCODER=0 bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r' | field on)")
  e1+=("$(PTTRACE_ENCODER=2 bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$plugin" 2>/dev/null | tr -d '\r' | field on)")
  [ -n "$floor_record" ] && frl+=("$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$floor_record" 2>/dev/null | tr -d '\r' | field off)")
  [ -n "$floor_empty" ] && fl+=("$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$floor_empty" 2>/dev/null | tr -d '\r' | field off)")
  if [ -n "$floor_predict" ]; then
    pfo=$(bash "$top/tests/guest/run.sh" "$gbin/b_pt_loop.elf" -plugin "$floor_predict" 2>&1 | tr -d '\r')
    fpl+=("$(field off <<<"$pfo")")
    fps=$(sed -n 's/^predict-floor: recorded \([0-9]*\) of \([0-9]*\) blocks.*/\1 \2/p' <<<"$pfo" | awk '$2 > 0 { printf "%d%% of the blocks recorded", 100 * $1 / $2 }')
  fi
  np+=("$(field off <<<"$base")")
  offp+=("$(field off <<<"$with")")
  cf+=("$(field configured <<<"$with")")
  on+=("$(field on <<<"$with")")
  tp+=("$(field topa <<<"$with")")
  gbytes=$(field bytes <<<"$with")
done
m() { printf '%s\n' "$@" | median; }
r() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
b=$(m "${np[@]}")
echo
echo "full system (qemu-system-x86_64, tests/guest/b_pt_loop.c; guest RDTSC cycles, median of $runs):"
echo "  no plugin:                               $b"
echo "  plugin loaded, PT never enabled:         $(m "${offp[@]}") ($(r "$(m "${offp[@]}")" "$b"))"
echo "  RTIT_CTL configured, TraceEn = 0:        $(m "${cf[@]}") ($(r "$(m "${cf[@]}")" "$b"))"
echo "  the same two, every block instrumented:  $(m "${fo[@]}") ($(r "$(m "${fo[@]}")" "$b")), $(m "${fc[@]}") ($(r "$(m "${fc[@]}")" "$b")) (PTTRACE_LIGHT=0: before light instrumentation)"
echo "  Intel PT on (single range):              $(m "${on[@]}") ($(r "$(m "${on[@]}")" "$b")), $gbytes trace bytes"
echo "  Intel PT on (ToPA, 2 x 512 KiB):         $(m "${tp[@]}") ($(r "$(m "${tp[@]}")" "$b"))"
echo "  single range, model at every block:      $(m "${r0[@]}") ($(r "$(m "${r0[@]}")" "$b")) (PTTRACE_RECORD=0: before issue 13 step 2)"
echo "  single range, recorded, run on the vCPU: $(m "${e0[@]}") ($(r "$(m "${e0[@]}")" "$b")) (PTTRACE_ENCODER=0)"
echo "  single range, recorded, encoder thread:  $(m "${e1[@]}") ($(r "$(m "${e1[@]}")" "$b")) (PTTRACE_ENCODER=2)"
[ ${#fl[@]} -gt 0 ] && echo "  floor (empty C callback per block):      $(m "${fl[@]}") ($(r "$(m "${fl[@]}")" "$b"))"
[ ${#frl[@]} -gt 0 ] && echo "  record floor (C ring append per block):  $(m "${frl[@]}") ($(r "$(m "${frl[@]}")" "$b"))"
[ ${#fpl[@]} -gt 0 ] && echo "  predict floor (append if not predicted): $(m "${fpl[@]}") ($(r "$(m "${fpl[@]}")" "$b")), $fps (tests/bench/predict_floor.c)"
echo "  ($(nproc) host CPUs; by default the encoder thread runs the recorded blocks while the vCPU has a CPU to itself)"
pmb=$(m "${pn[@]}")
echo "counting PMU (tests/guest/b_pmu_loop.c: FIXED_CTR0 + PMC0 branches, Intel PT off; guest RDTSC cycles, median of $runs):"
echo "  no plugin (not counted):                 $pmb"
echo "  counting:                                $(m "${pc[@]}") ($(r "$(m "${pc[@]}")" "$pmb"))"
echo "  counting, model at every block:          $(m "${pc0[@]}") ($(r "$(m "${pc0[@]}")" "$pmb")) (PTTRACE_RECORD=0)"
cb=$(m "${cn[@]}")
echo "call-heavy loop (tests/guest/b_pt_calls.c; guest RDTSC cycles, median of $runs):"
echo "  no plugin:                               $cb"
echo "  Intel PT on (single range):              $(m "${con[@]}") ($(r "$(m "${con[@]}")" "$cb"))"
echo "  the same, model at every block:          $(m "${cr0[@]}") ($(r "$(m "${cr0[@]}")" "$cb")) (PTTRACE_RECORD=0)"
echo "  calls through a table (CALL [mem]): no plugin $(m "${cin[@]}"), Intel PT on $(m "${cind[@]}") ($(r "$(m "${cind[@]}")" "$(m "${cin[@]}")"))"
[ ${#cfr[@]} -gt 0 ] && echo "  record floor (C ring append per block):  $(m "${cfr[@]}") ($(r "$(m "${cfr[@]}")" "$cb"))"

[ "${BENCH_LINUX:-1}" = 0 ] && exit 0
# The Linux guest (issue 13's last two rows): boot to /init with and without the plugin (the
# guest's uptime when /init starts, as scripts/linux-guest/run.sh reports it), and one workload
# (calls 10000000) timed in the guest with and without `perf record -e intel_pt//u` (perf's own start-up
# and the write of perf.data included, as a user sees it).
lscript=$(mktemp)
cat >"$lscript" <<'GUEST'
cd /tmp; perf record -q -e dummy:u -o d.data true >/dev/null 2>&1; t0=$(cut -d' ' -f1 /proc/uptime); calls 10000000 >/dev/null; t1=$(cut -d' ' -f1 /proc/uptime); perf record -q -e intel_pt//u -o w.data calls 10000000 >/dev/null; t2=$(cut -d' ' -f1 /proc/uptime); perf record -q -e dummy:u -o d.data calls 10000000 >/dev/null 2>&1; t3=$(cut -d' ' -f1 /proc/uptime); perf stat -x, -o s.txt -e instructions:u,branches:u calls 10000000 >/dev/null; t4=$(cut -d' ' -f1 /proc/uptime); perf record -q -b -e instructions:u -c 100003 -o b.data calls 10000000 >/dev/null 2>&1; t5=$(cut -d' ' -f1 /proc/uptime); awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" -v f="$t5" 'BEGIN { printf "LINUXBENCH plain_ms=%d perf_ms=%d dummy_ms=%d stat_ms=%d lbr_ms=%d\n", (b - a) * 1000, (c - b) * 1000, (d - c) * 1000, (e - d) * 1000, (f - e) * 1000 }'
cd /tmp; t0=$(cut -d' ' -f1 /proc/uptime); calls 10000000 >/dev/null & calls 10000000 >/dev/null; wait; t1=$(cut -d' ' -f1 /proc/uptime); perf stat -x, -o s2.txt -a -e instructions:u,branches:u sh -c 'calls 10000000 >/dev/null & calls 10000000 >/dev/null; wait'; t2=$(cut -d' ' -f1 /proc/uptime); awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "PARBENCH plain_ms=%d stat_ms=%d\n", (b - a) * 1000, (c - b) * 1000 }'
GUEST
# PEBS needs its own boot (`pebs=1`): the same workload plain and under precise sampling.
pscript=$(mktemp)
cat >"$pscript" <<'GUEST'
cd /tmp; perf record -q -e dummy:u -o d.data true >/dev/null 2>&1; t0=$(cut -d' ' -f1 /proc/uptime); calls 10000000 >/dev/null; t1=$(cut -d' ' -f1 /proc/uptime); perf record -q -e instructions:upp -c 100003 -o p.data calls 10000000 >/dev/null 2>&1; t2=$(cut -d' ' -f1 /proc/uptime); awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "PEBSBENCH plain_ms=%d pebs_ms=%d\n", (b - a) * 1000, (c - b) * 1000 }'
GUEST
# A ten times longer workload, so that perf's own start-up (the dummy row) weighs less in the
# ratio the issue sets (a workload under perf record -e intel_pt//u against the same without perf).
llscript=$(mktemp)
cat >"$llscript" <<'GUEST'
cd /tmp; perf record -q -e dummy:u -o d.data true >/dev/null 2>&1; t0=$(cut -d' ' -f1 /proc/uptime); calls 100000000 >/dev/null; t1=$(cut -d' ' -f1 /proc/uptime); perf record -q -e intel_pt//u -o w.data calls 100000000 >/dev/null; t2=$(cut -d' ' -f1 /proc/uptime); perf record -q -e dummy:u -o d.data calls 100000000 >/dev/null 2>&1; t3=$(cut -d' ' -f1 /proc/uptime); awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN { printf "LONGBENCH plain_ms=%d perf_ms=%d dummy_ms=%d\n", (b - a) * 1000, (c - b) * 1000, (d - c) * 1000 }'
GUEST
bscript=$(mktemp)
echo true >"$bscript"
bootmsg() { sed -n 's/.*guest reached \/init at \([0-9.]*\) s uptime.*/\1/p' | tail -1; }
nb=() wb=() fb=() lp=() lw=() ld=() ls=() lb=() pp=() pb=() np0=() nd0=() gp=() gw=() gd=() qp=() qs=()
for _ in $(seq "${BENCH_LINUX_RUNS:-1}"); do
  nout=$(LINUX_GUEST_TIMEOUT=600 bash "$top/scripts/linux-guest/run.sh" "$lscript" 2>&1 | tr -d '\r')
  nb+=("$(bootmsg <<<"$nout")")
  # Without the plugin perf has no Intel PT (that record fails at once), but `-e dummy:u` runs:
  # perf's own start-up and write in this TCG guest, the floor of every perf row.
  np0+=("$(sed -n 's/^LINUXBENCH plain_ms=\([0-9]*\).*/\1/p' <<<"$nout")")
  nd0+=("$(sed -n 's/^LINUXBENCH .*dummy_ms=\([0-9]*\).*/\1/p' <<<"$nout")")
  lout=$(LINUX_GUEST_TIMEOUT=600 bash "$top/scripts/linux-guest/run.sh" "$lscript" -plugin "$plugin" 2>&1 | tr -d '\r')
  wb+=("$(bootmsg <<<"$lout")")
  fb+=("$(PTTRACE_LIGHT=0 LINUX_GUEST_TIMEOUT=600 bash "$top/scripts/linux-guest/run.sh" "$bscript" -plugin "$plugin" 2>&1 | tr -d '\r' | bootmsg)")
  lp+=("$(sed -n 's/^LINUXBENCH plain_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  lw+=("$(sed -n 's/^LINUXBENCH .*perf_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  ld+=("$(sed -n 's/^LINUXBENCH .*dummy_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  ls+=("$(sed -n 's/^LINUXBENCH .*stat_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  lb+=("$(sed -n 's/^LINUXBENCH .*lbr_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  qp+=("$(sed -n 's/^PARBENCH plain_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  qs+=("$(sed -n 's/^PARBENCH .*stat_ms=\([0-9]*\).*/\1/p' <<<"$lout")")
  gout=$(LINUX_GUEST_TIMEOUT=900 bash "$top/scripts/linux-guest/run.sh" "$llscript" -plugin "$plugin" 2>&1 | tr -d '\r')
  gp+=("$(sed -n 's/^LONGBENCH plain_ms=\([0-9]*\).*/\1/p' <<<"$gout")")
  gw+=("$(sed -n 's/^LONGBENCH .*perf_ms=\([0-9]*\).*/\1/p' <<<"$gout")")
  gd+=("$(sed -n 's/^LONGBENCH .*dummy_ms=\([0-9]*\).*/\1/p' <<<"$gout")")
  pout=$(LINUX_GUEST_TIMEOUT=600 bash "$top/scripts/linux-guest/run.sh" "$pscript" -plugin "$plugin,pebs=1" 2>&1 | tr -d '\r')
  pp+=("$(sed -n 's/^PEBSBENCH plain_ms=\([0-9]*\).*/\1/p' <<<"$pout")")
  pb+=("$(sed -n 's/^PEBSBENCH .*pebs_ms=\([0-9]*\).*/\1/p' <<<"$pout")")
done
rm -f "$lscript" "$pscript" "$bscript" "$llscript"
echo
echo "Linux guest (Debian 6.1 kernel, 2 vCPUs; median of ${BENCH_LINUX_RUNS:-1}):"
echo "  boot to /init, no plugin:                $(m "${nb[@]}") s uptime"
echo "  boot to /init, plugin loaded:            $(m "${wb[@]}") s uptime ($(r "$(m "${wb[@]}")" "$(m "${nb[@]}")"))"
echo "  boot to /init, every block instrumented: $(m "${fb[@]}") s uptime ($(r "$(m "${fb[@]}")" "$(m "${nb[@]}")")) (PTTRACE_LIGHT=0)"
echo "  calls 10000000 (guest /proc/uptime):     $(m "${lp[@]}") ms"
echo "  the same under perf record -e intel_pt//u:$(m "${lw[@]}") ms ($(r "$(m "${lw[@]}")" "$(m "${lp[@]}")"))"
echo "  the same under perf record -e dummy:u:    $(m "${ld[@]}") ms ($(r "$(m "${ld[@]}")" "$(m "${lp[@]}")"): perf's own start-up and write, nothing traced)"
echo "  without the plugin: calls $(m "${np0[@]}") ms, under perf record -e dummy:u $(m "${nd0[@]}") ms ($(r "$(m "${nd0[@]}")" "$(m "${np0[@]}")"): perf's start-up in this TCG guest, the floor of the perf rows)"
echo "  calls 100000000: $(m "${gp[@]}") ms; under perf record -e intel_pt//u $(m "${gw[@]}") ms ($(r "$(m "${gw[@]}")" "$(m "${gp[@]}")")); under -e dummy:u $(m "${gd[@]}") ms ($(r "$(m "${gd[@]}")" "$(m "${gp[@]}")"))"
echo "  counting, perf stat -e instructions:u,branches:u: $(m "${ls[@]}") ms ($(r "$(m "${ls[@]}")" "$(m "${lp[@]}")"))"
echo "  two calls 10000000 at once (one per vCPU): $(m "${qp[@]}") ms; under perf stat -a -e instructions:u,branches:u $(m "${qs[@]}") ms ($(r "$(m "${qs[@]}")" "$(m "${qp[@]}")"))"
echo "  LBR sampling, perf record -b -e instructions:u -c 100003: $(m "${lb[@]}") ms ($(r "$(m "${lb[@]}")" "$(m "${lp[@]}")"))"
echo "  PEBS boot (pebs=1): calls 10000000 $(m "${pp[@]}") ms; perf record -e instructions:upp -c 100003: $(m "${pb[@]}") ms ($(r "$(m "${pb[@]}")" "$(m "${pp[@]}")"))"
