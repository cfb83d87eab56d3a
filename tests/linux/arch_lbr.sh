#!/usr/bin/env bash
# Issue 14: architectural LBR in the stock Debian bookworm guest (kernel 6.1, perf 6.1) with
# profile=sapphirerapids (README "Architectural LBR"): Linux's enumeration (dmesg), `perf record -b`
# branch stacks (brstack.awk) and call-stack mode (`--call-graph lbr`, callstack.awk) against the
# workload binary's instruction table. Part of `make test-linux` (a short Linux boot, ~45-100 s).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
plugin=$top/target/release/libpttrace.so
script=$(mktemp "${TMPDIR:-/tmp}/pttrace-archlbr.XXXXXX")
files=$(mktemp -d "${TMPDIR:-/tmp}/pttrace-archlbr-files.XXXXXX")
trap 'rm -rf "$script" "$files"' EXIT
# Ground truth for the Arch LBR branch stacks, as in perf_pt.sh: the workload binary of the guest
# image disassembled on the host, with the checker.
guest=${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest
bash "$top/scripts/linux-guest/build.sh" "$guest" >/dev/null || { echo "arch_lbr.sh: building the guest failed" >&2; exit 2; }
(cd "$files" && gzip -dc <"$guest/initramfs.cpio.gz" 2>/dev/null | cpio -i --quiet -d usr/local/bin/calls)
[ -f "$files/usr/local/bin/calls" ] || { echo "arch_lbr.sh: no usr/local/bin/calls in $guest/initramfs.cpio.gz" >&2; exit 2; }
python3 "$top/tests/linux/insn-table.py" "$files/usr/local/bin/calls" >"$files/calls.insns" || exit 2
cp "$top/tests/linux/brstack.awk" "$top/tests/linux/callstack.awk" "$files/"
export LINUX_GUEST_FILES="$files/calls.insns $files/brstack.awk $files/callstack.awk" LINUX_GUEST_NOBUILD=1
cat >"$script" <<'GUEST'
! dmesg | grep -i -E 'unchecked MSR|unhandled (rd|wr)msr|Dazed|Uhhuh|NMI received for unknown|WARNING'
# Architectural LBR (issue 14): CPUID.(7,0):EDX[19] and leaf 1CH; Linux's intel_pmu_arch_lbr_init
# wrote IA32_LBR_DEPTH (it gives up if that faults) and printed "Architectural LBR", and its
# read-back probe of every IA32_LBR_x_FROM_IP/TO_IP passed ("32-deep LBR").
dmesg | grep 'Performance Events:'; dmesg | grep -q 'Performance Events: .*Architectural LBR, .*32-deep LBR' && grep -q -w arch_lbr /proc/cpuinfo
# perf record -b on Arch LBR: IA32_LBR_CTL = LBREn | USR | all branch types, FREEZE_LBRS_ON_PMI,
# the 32 records (FROM/TO, INFO's MISPRED and BR_TYPE) read at each overflow PMI. Exactly
# floor(instructions:u / 10007) samples (--per-thread: one event for the task, which perf_pt.sh's
# instructions:u check explains), every entry a real taken branch of the workload with the
# static predictor's MISPRED (brstack.awk, as for the Skylake LBRs in perf_pt.sh), 32 entries
# except after an interrupt (its IRET back to ring 3 has a kernel FROM and Linux drops it).
echo 100000 > /proc/sys/kernel/perf_event_max_sample_rate; echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
perf stat -x, -e instructions:u -o st100k.txt calls 100000 >/dev/null; ni=$(awk -F, '/instructions:u/ {print $1}' st100k.txt); echo "instructions:u $ni"; test -n "$ni"
with_irqs() { wi=$1; shift; rm -f $wi.irq.data; perf record -q -a -e 'irq_vectors:*_entry' -e irq:irq_handler_entry -e exceptions:page_fault_user -o $wi.irq.data 2>$wi.irq.log & wp=$!; while [ ! -s $wi.irq.data ]; do sleep 0.1; done; sleep 1; "$@"; kill -INT $wp; wait $wp; perf script --ns -i $wi.irq.data -F cpu,time >$wi.irqs 2>/dev/null; }
# Cycle counts (LBR_INFO[15:0] CYC_CNT, the last field of each brstack entry; README "LBR cycle
# counts"): the emulated core clock (host TSC) between two user branches is nonzero, so most
# entries (at least 50 %) carry one (0: a record with none, the first after the LBRs were reset).
with_irqs lbr perf record -q --per-thread --sample-cpu -T -b -e instructions:u -c 10007 -o lbr.data calls 100000 >/dev/null; ns=$(perf script -i lbr.data -F ip 2>/dev/null | wc -l); echo "perf record -b (Arch LBR): $ns samples (expected $((ni / 10007))), $(wc -l <lbr.irqs) interrupt events"; test "$ns" = "$((ni / 10007))"
perf script --ns -i lbr.data -F cpu,time,brstack 2>/dev/null | awk -v depth=32 -v irqs=lbr.irqs -v cycles=50 -f /pttrace/files/brstack.awk /pttrace/files/calls.insns -
perf script -i lbr.data -F brstacksym 2>/dev/null | sed -n 50p | cut -c1-200
# Call-stack mode: perf record --call-graph lbr programs IA32_LBR_CTL.CALL_STACK with near calls
# and returns (USR); every entry of every stack is a CALL of the workload still open at the
# sample, each call site at most once per stack (callstack.awk: a RET that did not pop would
# leave main's call of pttrace_target in the stack once per loop iteration).
perf record -q --per-thread --call-graph lbr -e instructions:u -c 10007 -o cs.data calls 100000 >/dev/null; ns=$(perf script -i cs.data -F brstack 2>/dev/null | wc -l); echo "perf record --call-graph lbr: $ns samples (expected $((ni / 10007)))"; test "$ns" = "$((ni / 10007))"
perf script -i cs.data -F brstack 2>/dev/null | awk -f /pttrace/files/callstack.awk /pttrace/files/calls.insns -
perf script -i cs.data -F brstacksym 2>/dev/null | sed -n 50p | cut -c1-200; perf report -i cs.data --stdio -G 2>/dev/null | grep -m3 -E 'pttrace_target|main'
GUEST
LINUX_GUEST_TIMEOUT=${LINUX_GUEST_TIMEOUT:-600} bash "$top/scripts/linux-guest/run.sh" "$script" -plugin "$plugin,profile=sapphirerapids" "$@"
