#!/usr/bin/env bash
# Boot the pttrace Linux test guest under QEMU TCG and run a shell script in it:
#
#   scripts/linux-guest/run.sh SCRIPT [extra qemu args...]     e.g. ... -plugin target/release/libpttrace.so,...
#
# SCRIPT is run by the guest's /init with busybox sh, command by command (see run-commands.sh):
# each command is framed by "=== CMD n START: ..." and "=== CMD n EXIT rc" on the serial console.
# The console goes to stdout as it comes. Exit status: 0 if every command of SCRIPT ran and exited
# 0; 1 if one failed or the guest stopped early; 124 on timeout; 2 on a usage or setup error.
#
# The script travels in a second, tiny cpio archive (/pttrace/cmd.sh) appended to the cached
# initramfs; so do the files named in LINUX_GUEST_FILES (space-separated host paths, placed in
# /pttrace/files/ under their base names). LINUX_GUEST_OVERLAYS names further cpio.gz archives
# (each padded to a multiple of 4 bytes, e.g. perf-tests.sh's) that go between the two.
#
# Environment:
#   LINUX_GUEST_TIMEOUT   seconds before QEMU is killed (default 300)
#   LINUX_GUEST_APPEND    extra kernel command line words
#   LINUX_GUEST_CPU       -cpu value (default max,vendor=GenuineIntel)
#   LINUX_GUEST_SMP, LINUX_GUEST_MEM   -smp (default 2) and -m in MiB (default 1024)
#   LINUX_GUEST_LOG       also keep the raw console log in this file
#   LINUX_GUEST_OVERLAYS  extra initramfs archives (see above)
#   LINUX_GUEST_NOBUILD=1 use the cached guest as it is (do not run build.sh first)
#   PTTRACE_CACHE         cache root (guest in $PTTRACE_CACHE/linux-guest); QEMU  qemu-system-x86_64 to use
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: $0 SCRIPT [extra qemu args...]" >&2; exit 2; }
script=$1; shift
guest=${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest
timeout_s=${LINUX_GUEST_TIMEOUT:-300}

if [ "${LINUX_GUEST_NOBUILD:-0}" != 1 ] || [ ! -f "$guest/initramfs.cpio.gz" ]; then
  bash "$here/build.sh" "$guest" >/dev/null || { echo "run.sh: building the guest failed" >&2; exit 2; }
fi
if [ -n "${QEMU:-}" ]; then qemu=$QEMU
else qemu=$(bash "$top/scripts/qemu.sh")/qemu-system-x86_64 || { echo "run.sh: no QEMU" >&2; exit 2; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pttrace-linux-guest.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/extra/pttrace/files"
cp "$script" "$tmp/extra/pttrace/cmd.sh"
for f in ${LINUX_GUEST_FILES:-}; do
  cp -r "$f" "$tmp/extra/pttrace/files/" || exit 2
done
# The kernel unpacks concatenated archives; the base one is padded to 4 bytes by build.sh.
(cd "$tmp/extra" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1) \
  >"$tmp/cmd.cpio.gz" || exit 2
for o in ${LINUX_GUEST_OVERLAYS:-}; do
  [ -f "$o" ] && [ $(( $(stat -c %s "$o") % 4 )) -eq 0 ] || { echo "run.sh: overlay $o missing or not padded to 4 bytes" >&2; exit 2; }
done
# shellcheck disable=SC2086
cat "$guest/initramfs.cpio.gz" ${LINUX_GUEST_OVERLAYS:-} "$tmp/cmd.cpio.gz" >"$tmp/initrd.img"

log=${LINUX_GUEST_LOG:-$tmp/console.log}
start=$(date +%s.%N)
timeout -k 5 "$timeout_s" "$qemu" \
  -accel tcg -cpu "${LINUX_GUEST_CPU:-max,vendor=GenuineIntel}" -m "${LINUX_GUEST_MEM:-1024}" \
  -smp "${LINUX_GUEST_SMP:-2}" -L /usr/share/seabios -L /usr/share/qemu -nic none \
  -display none -monitor none -serial stdio -no-reboot \
  -kernel "$guest/vmlinuz" -initrd "$tmp/initrd.img" \
  -append "console=ttyS0 nopti nmi_watchdog=0 quiet panic=-1 ${LINUX_GUEST_APPEND:-}" \
  "$@" </dev/null | tee "$log"
rc=${PIPESTATUS[0]}
wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

# ---- verdict from the console ----
tr -d '\r' <"$log" >"$tmp/clean.log"
ready=$(sed -n 's/.*=== GUEST READY uptime \([0-9.]*\) s.*/\1/p' "$tmp/clean.log" | head -1)
starts=$(grep -c '=== CMD [0-9]* START' "$tmp/clean.log")
exits=$(grep -o '=== CMD [0-9]* EXIT [0-9]*' "$tmp/clean.log")
nexit=$(grep -c . <<<"$exits")
[ -n "$exits" ] || nexit=0
failed=$(awk '$5 != 0 { printf "%s%s (exit %s)", sep, $3, $5; sep = ", " }' <<<"$exits")
done_n=$(sed -n 's/.*=== ALL DONE \([0-9]*\).*/\1/p' "$tmp/clean.log" | head -1)

echo "run.sh: wall ${wall} s, guest reached /init at ${ready:-?} s uptime, QEMU status $rc"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "run.sh: TIMEOUT after $timeout_s s ($starts commands started)"; exit 124
fi
if [ -z "$done_n" ]; then
  echo "run.sh: FAIL: the guest did not finish the script ($starts started, $nexit ended${failed:+; failed: $failed})"
  exit 1
fi
if [ -n "$failed" ] || [ "$nexit" -ne "$done_n" ] || [ "$starts" -ne "$done_n" ]; then
  echo "run.sh: FAIL: of $done_n commands, $starts started and $nexit ended${failed:+; failed: $failed}"
  exit 1
fi
echo "run.sh: OK: all $done_n commands exited 0"
exit 0
