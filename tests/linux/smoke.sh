#!/usr/bin/env bash
# Smoke test of the Linux test guest (no plugin): builds it if needed (scripts/linux-guest/build.sh),
# boots it under QEMU TCG and checks that the kernel, busybox, perf and the workloads work and that
# perf can count a software event. Prints the console; exits 0 when every command exited 0.
# Extra arguments go to QEMU (e.g. -plugin ...).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
script=$(mktemp "${TMPDIR:-/tmp}/pttrace-smoke.XXXXXX")
trap 'rm -f "$script"' EXIT
cat >"$script" <<'GUEST'
uname -a
cat /etc/pttrace-guest.txt | head -4
head -n 20 /proc/cpuinfo
grep -o -w -E 'intel_pt|ds|dtes64|pdcm|arch_perfmon|pti' /proc/cpuinfo | sort | uniq -c
dmesg | grep -i -E 'perf|pmu|intel_pt|bts' || true
ls /sys/bus/event_source/devices/
perf --version
calls 1000 | grep -x 'calls=1000 sum=1325890662619500'
perf stat -e task-clock calls 100000
perf stat -e task-clock,context-switches,page-faults -- calls 1000 3
GUEST
bash "$top/scripts/linux-guest/run.sh" "$script" "$@"
