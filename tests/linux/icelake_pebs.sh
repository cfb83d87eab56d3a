#!/usr/bin/env bash
# Issue 14, adaptive PEBS: the stock Debian bookworm guest (kernel 6.1, perf 6.1) with
# profile=icelake,pebs=1 (Ice Lake client 06_7EH, perfmon version 5, PEBS format 4 with
# PEBS_BASELINE). Linux picks its Ice Lake tables and adaptive PEBS (intel_pmu_drain_pebs_icl,
# setup_pebs_adaptive_sample_data); `instructions` goes to fixed counter 0 (Linux schedules the
# fixed counter first), so the samples come from PEBS on a fixed counter. Part of
# `make test-linux` (a short boot, ~80 s). Ground truth as in perf_pt.sh: the workload binary
# from the guest image disassembled on the host (insn-table.py).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
plugin=$top/target/release/libpttrace.so
script=$(mktemp "${TMPDIR:-/tmp}/pttrace-icelake.XXXXXX")
files=$(mktemp -d "${TMPDIR:-/tmp}/pttrace-icelake-files.XXXXXX")
trap 'rm -rf "$script" "$files"' EXIT
guest=${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest
bash "$top/scripts/linux-guest/build.sh" "$guest" >/dev/null || { echo "icelake_pebs.sh: building the guest failed" >&2; exit 2; }
(cd "$files" && gzip -dc <"$guest/initramfs.cpio.gz" 2>/dev/null | cpio -i --quiet -d usr/local/bin/calls)
[ -f "$files/usr/local/bin/calls" ] || { echo "icelake_pebs.sh: no usr/local/bin/calls in $guest/initramfs.cpio.gz" >&2; exit 2; }
python3 "$top/tests/linux/insn-table.py" "$files/usr/local/bin/calls" >"$files/calls.insns" || exit 2
cp "$top/tests/linux/brstack.awk" "$top/tests/linux/sample-ips.awk" "$files/"
export LINUX_GUEST_FILES="$files/calls.insns $files/brstack.awk $files/sample-ips.awk" LINUX_GUEST_NOBUILD=1
cat >"$script" <<'GUEST'
# with_irqs NAME CMD...: as in perf_pt.sh (the interrupts whose IRET Linux drops from a stack).
with_irqs() { wi=$1; shift; rm -f $wi.irq.data; perf record -q -a -e 'irq_vectors:*_entry' -e irq:irq_handler_entry -e exceptions:page_fault_user -o $wi.irq.data 2>$wi.irq.log & wp=$!; while [ ! -s $wi.irq.data ]; do sleep 0.1; done; sleep 1; "$@"; kill -INT $wp; wait $wp; perf script --ns -i $wi.irq.data -F cpu,time >$wi.irqs 2>/dev/null; }
# The CPU is an Ice Lake client 06_7EH stepping 5; Linux uses its Ice Lake tables, adaptive PEBS
# with the baseline, perfmon v5 (AnyThread deprecated) and the 32 LBRs.
grep -q -E '^model[[:space:]]+: 126$' /proc/cpuinfo && grep -q -E '^stepping[[:space:]]+: 5$' /proc/cpuinfo
dmesg | grep 'Performance Events:'; dmesg | grep -q 'Performance Events: PEBS fmt4+-baseline, Icelake events, AnyThread deprecated, 32-deep LBR, full-width counters, Intel PMU driver'
test "$(cat /sys/bus/event_source/devices/cpu/caps/max_precise)" = 3 && test "$(cat /sys/bus/event_source/devices/cpu/caps/pmu_name)" = icelake
# No MSR access error, no PEBS size warning (WARN_ONCE "PEBS record size"), no splat; Ice Lake is
# in Linux's RETBleed list as Skylake is, and the vCPU has no IBRS (README "Counting PMU").
! dmesg | grep -v -F 'RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!' | grep -i -E 'unchecked MSR|unhandled (rd|wr)msr|Dazed|Uhhuh|NMI received for unknown|perf.*(fail|broken)|PEBS record size|WARNING|cut here|Call Trace'
echo 100000 > /proc/sys/kernel/perf_event_max_sample_rate; echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
cd /tmp
for k in 3000 4000; do perf stat -x, -e instructions:u -o st$k.txt calls $k >/dev/null; done; per=$(( ($(awk -F, '/instructions:u/ {print $1}' st4000.txt) - $(awk -F, '/instructions:u/ {print $1}' st3000.txt)) / 1000 )); echo "instructions per call: $per"; test "$per" -gt 3
perf stat -x, -e instructions:u -o st100k.txt calls 100000 >/dev/null; ni=$(awk -F, '/instructions:u/ {print $1}' st100k.txt); echo "instructions:u $ni"
# instructions:upp: basic records (DATA_CFG 0), the sample IP is the basic group's EventingIP:
# exactly floor(instructions:u / 10008) samples walking through every instruction of the loop
# (--per-thread: one event for the task, which perf_pt.sh's instructions:u check explains).
perf record -q --per-thread -e instructions:upp -c 10007 -o pp.data calls 100000 >/dev/null; perf script -i pp.data -F ip,sym 2>/dev/null | awk -v hot="main pttrace_target" -v per="$per" -v expect="$((ni / 10008))" -f /pttrace/files/sample-ips.awk /pttrace/files/calls.insns -
# instructions:up (precise_ip 1): Linux asks for the GPR group and takes its IP, the
# instruction after the triggering one (trap-like): the same count, again every loop instruction.
perf record -q --per-thread -e instructions:up -c 10007 -o p.data calls 100000 >/dev/null; perf script -i p.data -F ip,sym 2>/dev/null | awk -v hot="main pttrace_target" -v per="$per" -v expect="$((ni / 10008))" -f /pttrace/files/sample-ips.awk /pttrace/files/calls.insns -
# cycles:upp: PEBS on fixed counter 1 (no alias on Ice Lake); cycle events take their records at
# block boundaries (README "PEBS"): samples, each IP an instruction of the binary.
perf record -q -e cycles:upp -c 100003 -o cpp.data calls 100000 >/dev/null; perf script -i cpp.data -F ip,sym 2>/dev/null | awk -f /pttrace/files/sample-ips.awk /pttrace/files/calls.insns -
# -b with :upp: large PEBS with the LBR group (DATA_CFG LBRs, 32 entries); the branch stacks
# come from the records (intel_pmu_store_pebs_lbrs) and are real branches of the program.
with_irqs bpp perf record -q --sample-cpu -b -e instructions:upp -c 10007 -o bpp.data calls 100000 >/dev/null; perf script --ns -i bpp.data -F cpu,time,brstack 2>/dev/null | awk -v depth=32 -v irqs=bpp.irqs -f /pttrace/files/brstack.awk /pttrace/files/calls.insns -
GUEST
LINUX_GUEST_TIMEOUT=${LINUX_GUEST_TIMEOUT:-600} bash "$top/scripts/linux-guest/run.sh" "$script" -plugin "$plugin,profile=icelake,pebs=1" "$@"
