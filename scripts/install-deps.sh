#!/usr/bin/env bash
# Debian packages pttrace needs on a fresh bookworm machine: the QEMU build
# dependencies, the system emulator's firmware, cmake + libclang for the libipt
# crate (bindgen), a C toolchain for the guest test corpus, and linux-perf (host perf
# decodes `pttrace perf` output in tests/perf-data.sh).
set -euo pipefail
pkgs=(build-essential pkg-config ninja-build libglib2.0-dev libpixman-1-dev libslirp-dev libfdt-dev
      device-tree-compiler flex bison python3-venv dpkg-dev cmake libclang-dev clang
      seabios qemu-system-data xxd time linux-perf)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "install-deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# Optional: LuaJIT, the JIT compiler tests/code-versions.sh traces (issue 19); the test says so
# and skips that check if the package cannot be installed.
if ! dpkg-query -W -f='${Status}' luajit 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if apt-cache show luajit >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends luajit >/dev/null 2>&1 ||
      echo "install-deps: optional package luajit could not be installed" >&2
  fi
fi
