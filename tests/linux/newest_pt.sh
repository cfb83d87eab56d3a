#!/usr/bin/env bash
# Issue 15: the stock Debian bookworm guest (kernel 6.1, perf 6.1) with profile=sapphirerapids.
# Debian's perf ships no tests/shell, so the power_event, no_tnt and event_trace sub-tests of
# perf's test_intel_pt.sh are done here the way that script does them (caps file, record with the
# term, no decode error, the packets/events it looks for). Part of `make test-linux` (a second,
# short Linux boot, ~35 s).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
plugin=$top/target/release/libpttrace.so
script=$(mktemp "${TMPDIR:-/tmp}/pttrace-newest.XXXXXX")
trap 'rm -f "$script"' EXIT
cat >"$script" <<'GUEST'
# The kernel sees the new capabilities (arch/x86/events/intel/pt.c caps).
cat /sys/bus/event_source/devices/intel_pt/caps/power_event_trace /sys/bus/event_source/devices/intel_pt/caps/event_trace /sys/bus/event_source/devices/intel_pt/caps/tnt_disable
test "$(cat /sys/bus/event_source/devices/intel_pt/caps/power_event_trace)$(cat /sys/bus/event_source/devices/intel_pt/caps/event_trace)$(cat /sys/bus/event_source/devices/intel_pt/caps/tnt_disable)" = 111
test "$(cat /sys/bus/event_source/devices/intel_pt/caps/ptwrite)" = 0
! dmesg | grep -i -E 'unchecked MSR|unhandled (rd|wr)msr|Dazed|Uhhuh|NMI received for unknown|WARNING'
cd /tmp
# power_event: system-wide user tracing with pwr_evt; the idle HLTs give power events; no decode error.
perf record -q -o pwr.data -a -e intel_pt/pwr_evt/u sleep 1
perf script -i pwr.data --itrace=e > pwr.err 2>&1; cat pwr.err; ! grep -q -i error pwr.err
c=$(perf script -i pwr.data --itrace=p 2>/dev/null | grep -c -E 'PWRE|PWRX|EXSTOP|pwre|pwrx|exstop'); echo "power events: $c"; test "$c" -gt 0
# no_tnt: no TNT packet in the dump, no decode error.
perf record -q -o notnt.data -e intel_pt/notnt/u calls 100
c=$(perf script -i notnt.data -D 2>/dev/null | grep -c 'TNT'); echo "TNT packets: $c"; test "$c" = 0
perf script -i notnt.data --itrace=e > notnt.err 2>&1; cat notnt.err; ! grep -q -i error notnt.err
# event_trace: at least one event, no decode error.
perf record -q -o ev.data -e intel_pt/event/u calls 1000
perf script -i ev.data --itrace=e > ev.err 2>&1; cat ev.err; ! grep -q -i error ev.err
c=$(perf script -i ev.data --itrace=Ie 2>/dev/null | wc -l); echo "event trace events: $c"; test "$c" -gt 0
perf script -i ev.data --itrace=Ie 2>/dev/null | head -5
GUEST
LINUX_GUEST_TIMEOUT=${LINUX_GUEST_TIMEOUT:-600} bash "$top/scripts/linux-guest/run.sh" "$script" -plugin "$plugin,profile=sapphirerapids" "$@"
