#!/usr/bin/env bash
# Issue 14, PEBS record format 0: the stock Debian bookworm guest (kernel 6.1, perf 6.1) with
# profile=core2,pebs=1 (Core 2 Duo E8400, Penryn 06_17H stepping AH, perfmon version 2, PEBS on
# PMC0 only, the 144-byte record, trap-like). Linux takes its Core 2 tables
# (intel_core2_pebs_event_constraints) and the "PEBS fmt0" path (intel_pmu_drain_pebs_core).
# Part of `make test-linux` (a short boot). Ground truth as in perf_pt.sh: the workload binary
# from the guest image disassembled on the host (insn-table.py).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
plugin=$top/target/release/libpttrace.so
script=$(mktemp "${TMPDIR:-/tmp}/pttrace-core2.XXXXXX")
files=$(mktemp -d "${TMPDIR:-/tmp}/pttrace-core2-files.XXXXXX")
trap 'rm -rf "$script" "$files"' EXIT
guest=${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest
bash "$top/scripts/linux-guest/build.sh" "$guest" >/dev/null || { echo "core2_pebs.sh: building the guest failed" >&2; exit 2; }
(cd "$files" && gzip -dc <"$guest/initramfs.cpio.gz" 2>/dev/null | cpio -i --quiet -d usr/local/bin/calls)
[ -f "$files/usr/local/bin/calls" ] || { echo "core2_pebs.sh: no usr/local/bin/calls in $guest/initramfs.cpio.gz" >&2; exit 2; }
python3 "$top/tests/linux/insn-table.py" "$files/usr/local/bin/calls" >"$files/calls.insns" || exit 2
cp "$top/tests/linux/sample-ips.awk" "$files/"
export LINUX_GUEST_FILES="$files/calls.insns $files/sample-ips.awk" LINUX_GUEST_NOBUILD=1
cat >"$script" <<'GUEST'
# The CPU is a Penryn 06_17H stepping 10; Linux uses its Core 2 tables and PEBS format 0,
# trap-like ('+').
grep -q -E '^model[[:space:]]+: 23$' /proc/cpuinfo && grep -q -E '^stepping[[:space:]]+: 10$' /proc/cpuinfo
dmesg | grep -A8 'Performance Events:'
dmesg | grep -q 'Performance Events: PEBS fmt0+, Core2 events, '
grep -q ' pebs ' /proc/cpuinfo
echo "max_precise $(cat /sys/bus/event_source/devices/cpu/caps/max_precise) pmu_name $(cat /sys/bus/event_source/devices/cpu/caps/pmu_name)"
test "$(cat /sys/bus/event_source/devices/cpu/caps/pmu_name)" = core2
! dmesg | grep -i -E 'unchecked MSR|unhandled (rd|wr)msr|Dazed|Uhhuh|NMI received for unknown|perf.*(fail|broken)|PEBS record size|WARNING|cut here|Call Trace'
echo 100000 > /proc/sys/kernel/perf_event_max_sample_rate; echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
cd /tmp
for k in 3000 4000; do perf stat -x, -e instructions:u -o st$k.txt calls $k >/dev/null; done; per=$(( ($(awk -F, '/instructions:u/ {print $1}' st4000.txt) - $(awk -F, '/instructions:u/ {print $1}' st3000.txt)) / 1000 )); echo "instructions per call: $per"; test "$per" -gt 3
perf stat -x, -e instructions:u -o st100k.txt calls 100000 >/dev/null; ni=$(awk -F, '/instructions:u/ {print $1}' st100k.txt); echo "instructions:u $ni"
# instructions:up (precise_ip 1): PEBS on PMC0 with INST_RETIRED.ANY_P (C0H); the sample IP is
# the record's RIP, the instruction after the triggering one (trap-like): exactly
# floor(instructions:u / 10008) samples walking through every instruction of the loop
# (--per-thread: one event for the task, which perf_pt.sh's instructions:u check explains).
perf record -q --per-thread -e instructions:up -c 10007 -o p.data calls 100000 >/dev/null; perf script -i p.data -F ip,sym 2>/dev/null | awk -v hot="main pttrace_target" -v per="$per" -v expect="$((ni / 10008))" -f /pttrace/files/sample-ips.awk /pttrace/files/calls.insns -
# cycles:up: Linux's Core 2 alias, INST_RETIRED.ANY_P with INV and CMASK = 16 on PMC0 (every
# cycle, from the emulated clock). The run must end normally (perf record passes on the
# workload's status: 139 when it died of SIGSEGV), the kernel must report no segfault, and every
# sample IP must be an instruction of the binary. (Before RDPMC's completion kept the status
# flags and DF out of QEMU's EFLAGS word, a ZF leaked into the next NMI frame, a JA in
# __strcmp_sse2 went the wrong way and the process died at 42f5e0, 6 of 7 runs: README "Core 2
# profile", guest t_pmu_count.)
dmesg -c >/dev/null; perf record -q -e cycles:up -c 100003 -o c.data calls 100000 >/dev/null && perf script -i c.data -F ip,sym 2>/dev/null | awk -f /pttrace/files/sample-ips.awk /pttrace/files/calls.insns -
! dmesg | grep -i -E 'segfault|general protection|traps:'
GUEST
LINUX_GUEST_TIMEOUT=${LINUX_GUEST_TIMEOUT:-600} bash "$top/scripts/linux-guest/run.sh" "$script" -plugin "$plugin,profile=core2,pebs=1" "$@"
