#!/usr/bin/env bash
# Provide QEMU >= 10.2 with TCG plugin support (plugin API v5 plus the
# discontinuity callback) for qemu-x86_64 and qemu-system-x86_64.
#
#   scripts/qemu.sh          build if needed, print the directory holding both binaries
#
# Order of preference:
#   1. $PTTRACE_QEMU_DIR, if it holds qemu-x86_64 and qemu-system-x86_64 >= 10.2;
#   2. qemu-x86_64 / qemu-system-x86_64 on PATH, if >= 10.2 and built with plugins;
#   3. the cached build under ${PTTRACE_CACHE:-$HOME/.cache/pttrace} (outside the clone, reused by CI and later runs);
#   4. a cold build from Debian's source package (sid), newest listed version first.
# Progress goes to stderr; stdout carries only the directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PTTRACE_CACHE:-$HOME/.cache/pttrace}
prefix=$cache/qemu
log() { echo "qemu.sh: $*" >&2; }

version_ok() {  # $1 = binary; true if version >= 10.2 and -plugin is accepted
  local v major minor
  v=$("$1" --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p' | head -1) || return 1
  [ -n "$v" ] || return 1
  read -r major minor <<<"$v"
  [ "$major" -gt 10 ] || { [ "$major" -eq 10 ] && [ "$minor" -ge 2 ]; } || return 1
  "$1" -h 2>/dev/null | grep -q -- '-plugin'
}
dir_ok() { [ -x "$1/qemu-x86_64" ] && [ -x "$1/qemu-system-x86_64" ] && version_ok "$1/qemu-x86_64" && version_ok "$1/qemu-system-x86_64"; }

if [ -n "${PTTRACE_QEMU_DIR:-}" ]; then
  dir_ok "$PTTRACE_QEMU_DIR" || { log "PTTRACE_QEMU_DIR=$PTTRACE_QEMU_DIR does not hold QEMU >= 10.2 with plugins"; exit 1; }
  echo "$PTTRACE_QEMU_DIR"; exit 0
fi
if p=$(command -v qemu-x86_64 2>/dev/null) && dir_ok "$(dirname "$p")"; then dirname "$p"; exit 0; fi
if dir_ok "$prefix/bin"; then echo "$prefix/bin"; exit 0; fi

# ---- cold build ----
bash "$here/install-deps.sh"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
src_list=/etc/apt/sources.list.d/pttrace-sid-src.list
if [ ! -f "$src_list" ]; then
  log "adding a deb-src entry for sid (source packages only)"
  echo "deb-src http://deb.debian.org/debian sid main" | $SUDO tee "$src_list" >/dev/null
  $SUDO apt-get update -qq >&2
fi
mkdir -p "$cache/src"
cd "$cache/src"
# Versions of the source package, newest first; keep 10.2 and later. The sid index can list
# versions whose files are gone from the pool, so try each until one downloads.
mapfile -t versions < <(apt-cache showsrc qemu 2>/dev/null | sed -n 's/^Version: //p' | sort -rV | uniq)
srcdir=""
for v in "${versions[@]}"; do
  up=${v#*:}; up=${up%%+*}; up=${up%%-*}
  maj=${up%%.*}; rest=${up#*.}; min=${rest%%.*}
  if [ "$maj" -lt 10 ] || { [ "$maj" -eq 10 ] && [ "$min" -lt 2 ]; }; then continue; fi
  existing=$(ls -d qemu-"$up"*/ 2>/dev/null | head -1 || true)
  if [ -n "$existing" ] && [ -f "$existing/meson.build" ]; then srcdir=$cache/src/${existing%/}; break; fi
  log "fetching source package qemu=$v"
  if apt-get source -qq "qemu=$v" >&2 2>"$cache/src/fetch.log"; then
    srcdir=$(ls -d "$cache"/src/qemu-"$up"*/ | head -1); srcdir=${srcdir%/}; break
  fi
  log "qemu=$v could not be fetched, trying the next version"
done
[ -n "$srcdir" ] || { log "no QEMU >= 10.2 source package could be fetched"; exit 1; }
log "building $srcdir"

# meson >= 1.5 and pycotap from PyPI, in a venv of our own.
if [ ! -x "$cache/pyvenv/bin/meson" ]; then
  python3 -m venv "$cache/pyvenv"
  "$cache/pyvenv/bin/pip" install -q 'meson>=1.5,<1.9' 'pycotap==1.3.1' >&2
fi
# The +ds tarball has no edk2 firmware blobs; meson.build unpacks them when bzip2 is found.
sed -i "s/^\( *\)unpack_edk2_blobs = bzip2.found()/\1unpack_edk2_blobs = false/" "$srcdir/meson.build"

build=$srcdir/build-pttrace
mkdir -p "$build"; cd "$build"
if [ ! -f build.ninja ]; then
  PATH=$cache/pyvenv/bin:$PATH ../configure --prefix="$prefix" --python="$cache/pyvenv/bin/python3" \
    --target-list=x86_64-softmmu,x86_64-linux-user --enable-plugins --disable-install-blobs \
    --disable-docs --disable-werror --disable-gtk --disable-sdl --disable-opengl --disable-vnc \
    --disable-spice --disable-curses --disable-xen --disable-kvm --enable-tcg --disable-tools >&2
fi
# Only the two emulators: the full tree (tests, tools, contrib plugins) doubles the build time.
PATH=$cache/pyvenv/bin:$PATH ninja -j"$(nproc)" qemu-x86_64 qemu-system-x86_64 >&2
mkdir -p "$prefix/bin"
install -m 755 qemu-x86_64 qemu-system-x86_64 "$prefix/bin/"
dir_ok "$prefix/bin" || { log "build finished but $prefix/bin fails the version/plugin check"; exit 1; }
echo "$prefix/bin"
