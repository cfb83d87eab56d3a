#!/usr/bin/env bash
# Build the guest program corpus: static, non-PIE x86_64 Linux executables.
#
#   tests/corpus/build.sh OUTDIR
#
# Builds every program into OUTDIR (required; callers pass a directory under target/).
# Rebuilds a program only when its source or this script is newer than the binary, so
# repeated runs are fast. Prints one line per program; exits non-zero on any failure.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
CC=${CC:-gcc}

common=(-static -g -fno-pie -no-pie -Wall -Wextra -Werror)
copts=("${common[@]}" -O1)
asopts=("${common[@]}" -nostdlib -Wl,--build-id=none)

# name : source : extra flags
programs=(
  "loops:loops.c:"
  "recursion:recursion.c:"
  "indirect:indirect.c:-O2"
  "setjmp:setjmp.c:"
  "retmismatch:retmismatch.S:asm"
  "signals:signals.c:"
  "sigstorm:sigstorm.c:"
  "handler_first:handler_first.c:"
  "syscalls:syscalls.c:"
  "threads:threads.c:-pthread"
  "long_psb:long_psb.c:"
  "jumptable_asm:jumptable_asm.S:asm"
  "smc:smc.c:"
  "smc_threads:smc_threads.c:-pthread"
  "smc_inplace:smc_inplace.c:"
  "fork_tree:fork_tree.c:"
  "fork_threads:fork_threads.c:-pthread"
)

# Fail if FUNCTION in BINARY holds no `jmp *` through a table (a switch jump table).
require_jump_table() {
  local bin=$1 fn=$2
  local dis
  dis=$(objdump -d --no-show-raw-insn --disassemble="$fn" "$bin")
  if ! grep -Eq 'jmp +\*(0x[0-9a-f]+|[a-z_.0-9]+)?\(,%r[a-z0-9]+,8\)' <<<"$dis"; then
    echo "build.sh: $bin: no jump-table 'jmp *' found in $fn" >&2
    return 1
  fi
}

for entry in "${programs[@]}"; do
  IFS=: read -r name file extra <<<"$entry"
  bin=$out/$name
  if [ -x "$bin" ] && [ "$bin" -nt "$src/$file" ] && [ "$bin" -nt "$src/build.sh" ]; then
    echo "up-to-date $name -> $bin"
    continue
  fi
  tmp=$bin.tmp.$$
  trap 'rm -f "$tmp"' EXIT
  if [ "$extra" = asm ]; then
    "$CC" "${asopts[@]}" -o "$tmp" "$src/$file"
  else
    # shellcheck disable=SC2086  # $extra is a word list of flags (may be empty)
    "$CC" "${copts[@]}" $extra -o "$tmp" "$src/$file"
  fi
  case $name in
    indirect) require_jump_table "$tmp" interp ;;
    long_psb) require_jump_table "$tmp" run ;;
    jumptable_asm) require_jump_table "$tmp" _start ;;
  esac
  mv -f "$tmp" "$bin"
  echo "built $name -> $bin"
done
