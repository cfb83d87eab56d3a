#!/bin/bash
# Usage: run.sh ELF [QEMU ARGS...] — boots one guest test under QEMU TCG, prints its serial
# output and returns 0 on PASS, 77 on SKIP, 124 on timeout, 1 on FAIL, 2 on anything else.
# Environment: QEMU (binary), GUEST_TIMEOUT (seconds, default 60), GUEST_ACCEL (the -accel
# argument, default tcg; e.g. tcg,one-insn-per-tb=on).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 ELF [QEMU ARGS...]" >&2; exit 2; }
elf=$1; shift
qemu=${QEMU:-$HOME/.cache/pttrace/qemu/bin/qemu-system-x86_64}
timeout -k 5 "${GUEST_TIMEOUT:-60}" "$qemu" \
    -accel "${GUEST_ACCEL:-tcg}" -cpu max,vendor=GenuineIntel -m 128 -L /usr/share/seabios -L /usr/share/qemu \
    -nic none -display none -monitor none -serial stdio -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 -kernel "$elf" "$@" </dev/null
rc=$?
case $rc in
    33) echo "run.sh: $elf: PASS"; exit 0 ;;
    37) echo "run.sh: $elf: SKIP"; exit 77 ;;
    35) echo "run.sh: $elf: FAIL"; exit 1 ;;
    124|137) echo "run.sh: $elf: TIMEOUT after ${GUEST_TIMEOUT:-60} s"; exit 124 ;;
    *) echo "run.sh: $elf: QEMU exited with status $rc (0: triple fault/shutdown; 1: QEMU error)"
       exit 2 ;;
esac
