#!/usr/bin/env bash
# Full system (issue 13): the block callback only records executed blocks and the model runs
# them later (on the encoder thread, or on the vCPU when the trace becomes observable). That
# must not change a single packet, nor when output reaches guest memory in a way the guest sees
# (ToPA PMI, STOP). Each guest that produces Intel PT without ground truth runs three ways:
#   PTTRACE_RECORD=0     the model runs at every block as it executes (the reference path)
#   PTTRACE_ENCODER=2    recording, the encoder thread beside the vCPU all the time
#   PTTRACE_ENCODER=0    recording, the vCPU runs its recorded blocks itself (no encoder thread)
#   PTTRACE_LIGHT=0      every block instrumented from the start (the default starts with light
#                        instrumentation and flushes the translations when tracing is enabled),
#                        with the default placement of the model (beside the vCPU while the
#                        vCPU has a host CPU to itself, else on it)
# and its streams (thread-*.pt, the host copy of every byte) must be byte-identical.
# Skipped: guests whose streams differ from run to run on their own (a LAPIC timer interrupt
# lands at a point that depends on host time: t_pt_transfers, t_pt_smp, t_stress_smp) and guests
# without Intel PT output. b_pt_loop (make bench's workload,
# ~9 M blocks per traced phase) is included: it is the one that fills rings and ToPA regions; so
# is b_pt_calls (a RET per ~3 blocks, and calls through a table: the recorded path takes those
# targets from the value their load returned).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/target/guest/bin
plugin=$top/target/release/libpttrace.so
tmp=$(mktemp -d /tmp/pttrace-record.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
bash "$top/tests/guest/build.sh" "$bin" >/dev/null
fail=0 n=0 bytes=0
for elf in "$bin"/t_pt_*.elf "$bin"/t_m32_*pt*.elf "$bin"/t_hostile_mmio.elf "$bin"/b_pt_loop.elf "$bin"/b_pt_calls.elf; do
  name=$(basename "$elf" .elf)
  src=$top/tests/guest/$name.c
  grep -q 'lapic_timer_' "$src" && continue
  extra=$(sed -n 's|^// pttrace-options: *||p' "$src" 2>/dev/null | head -1)
  qx=$(sed -n 's|^// qemu-options: *||p' "$src" 2>/dev/null | head -1)
  sums=()
  for mode in PTTRACE_RECORD=0 PTTRACE_ENCODER=2 PTTRACE_ENCODER=0 PTTRACE_LIGHT=0; do
    d=$tmp/$name.${mode//=/}
    # shellcheck disable=SC2086
    env $mode GUEST_TIMEOUT=120 bash "$top/tests/guest/run.sh" "$elf" $qx \
      -plugin "$plugin,out=$d${extra:+,$extra}" >"$d.log" 2>&1
    sums+=("$(cat "$d"/thread-*.pt 2>/dev/null | md5sum | cut -c1-16)/$(cat "$d"/thread-*.pt 2>/dev/null | wc -c)")
  done
  size=${sums[0]#*/}
  [ "$size" = 0 ] && continue
  n=$((n + 1)) bytes=$((bytes + size))
  if [ "${sums[0]}" != "${sums[1]}" ] || [ "${sums[0]}" != "${sums[2]}" ] || [ "${sums[0]}" != "${sums[3]}" ]; then
    echo "FAIL $name: streams differ: model at every block ${sums[0]}, recorded + encoder ${sums[1]}, recorded on the vCPU ${sums[2]}, instrumented from the start ${sums[3]} (md5/bytes)"
    fail=1
  fi
done
echo "recorded blocks: $n guests, $bytes trace bytes each, identical with the model at every block, with the encoder thread, on the vCPU and with every block instrumented from the start; result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
