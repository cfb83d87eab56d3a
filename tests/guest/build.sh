#!/bin/bash
# Usage: build.sh OUTDIR — builds every tests/guest/t_*.c into OUTDIR/t_*.elf (incremental).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)
exec make -s --no-print-directory -C "$(dirname "$0")" OUT="$out" -k -j"$(nproc)"
