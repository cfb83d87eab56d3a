#!/usr/bin/env bash
# Build the overlay that puts perf's own shell tests (tools/perf/tests/shell of Linux 6.1) and the
# tools they need into the pttrace Linux test guest:
#
#   scripts/linux-guest/perf-tests.sh [CACHE_DIR]    build if needed, print the overlay's path
#
# Everything comes from Debian bookworm packages (apt-get download + dpkg-deb/tar, nothing is
# installed on the host, nothing of their text goes into this repository):
#   linux-source-6.1   of the same version as the guest's linux-perf (so the tests are those of the
#                      perf binary): only tools/perf/tests/shell/ (with lib/) and
#                      tools/perf/util/jitdump.h (test_intel_pt.sh's jitdump test includes it) are
#                      unpacked, into /usr/src/linux-source-6.1/ in the guest; `perf test` run from
#                      there finds them as in a kernel tree (./tools/perf/tests/shell).
#   tcc, libc6-dev, linux-libc-dev   the scripts compile their workloads with /usr/bin/cc (`cc`):
#                      the Tiny C Compiler as /usr/bin/cc (`tcc -g`: the symbol table, as gcc), with glibc's and the kernel's headers
#                      and glibc's crt files, linked against the guest's libc.so.6 (gcc with cc1
#                      and binutils would be ~10 times the size).
#   dash               Debian's /bin/sh, as /bin/dash. Debian's busybox sh runs its own applets
#                      before anything on PATH, so the scripts (#!/bin/sh) only get the GNU tools
#                      below when the test run points /bin/sh at dash (as on a Debian system).
#   bash               for the scripts that start with #!/bin/bash (stat+csv_output.sh,
#                      stat+json_output.sh, stat_all_metrics.sh, ...), as /bin/bash.
#   coreutils, findutils, util-linux   GNU date (`date +%s%1N`), mktemp (templates with fewer than
#                      six X, e.g. record.sh's), find (`-printf`) and taskset (`--cpu-list`), which
#                      busybox lacks or reads differently, and coreutils' dynamically linked `true`
#                      (the workload of stat.sh and record.sh: busybox's static `true` retires only
#                      ~20,000 user instructions, fewer than Linux 6.1.192's first period of an
#                      instructions event in frequency mode, 500,000,000 / 4000 - 1 = 124,999, so
#                      record.sh's `perf record -e instructions:u true` gets no sample, as it would
#                      on hardware), in /usr/lib/pttrace/gnu (put first on PATH only by the scripts
#                      that run the shell tests).
#   python3.11-minimal, libpython3.11-minimal, libpython3.11-stdlib   Python's standard library
#                      for perf's embedded interpreter (`perf script -s`, test_intel_pt.sh's
#                      virtual_lbr) and `python3` for stat+json_output.sh's checker.
# The shared libraries these binaries need beyond those of the base image come from the same
# download (ld.so --list, as in build.sh).
#
# CACHE_DIR (default ${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest, the base guest's cache)
# gets perf-tests.cpio.gz (padded to 4 bytes; scripts/linux-guest/run.sh appends it after the base
# initramfs when LINUX_GUEST_OVERLAYS names it), perf-tests.manifest and perf-tests-debs/ (the
# downloads, kept: linux-source-6.1 is 139 MB). Idempotent like build.sh (a stamp of the package
# versions and this script). Progress on stderr; stdout carries only the overlay's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:-${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest}
log() { echo "linux-guest/perf-tests.sh: $*" >&2; }

# xz unpacks linux-source-6.1's tarball (the other host tools are build.sh's).
if ! command -v xz >/dev/null; then
  log "installing xz-utils"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends xz-utils >&2
fi

# The base guest first (its manifest names the linux-perf version and its file list the libraries
# already there).
bash "$here/build.sh" "$cache" >/dev/null
cache=$(cd "$cache" && pwd)
perfver=$(sed -n 's/^linux-perf=//p' "$cache/manifest.txt")
[ -n "$perfver" ] || { log "no linux-perf version in $cache/manifest.txt"; exit 1; }

exec 8>"$cache/.perf-tests.lock"
flock 8

pkgs=(dash bash tcc libc6 libc6-dev linux-libc-dev coreutils findutils util-linux libselinux1 libpcre2-8-0
      python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libexpat1 zlib1g libssl3 libtinfo6)
mapfile -t pins < <(apt-cache show --no-all-versions "${pkgs[@]}" |
  awk '/^Package: /{p=$2} /^Version: /{print p "=" $2}' | LC_ALL=C sort -u)
[ ${#pins[@]} -eq ${#pkgs[@]} ] || { log "apt-cache show: ${#pins[@]} of ${#pkgs[@]} packages"; exit 1; }
pins+=("linux-source-6.1=$perfver")
stamp=$( { printf '%s\n' "${pins[@]}"; cat "$cache/stamp"; sha256sum <"$here/perf-tests.sh"; } |
  sha256sum | cut -d' ' -f1)
out=$cache/perf-tests.cpio.gz
if [ -f "$out" ] && [ "$(cat "$cache/perf-tests.stamp" 2>/dev/null)" = "$stamp" ]; then
  log "up to date (linux-source-6.1=$perfver)"
  echo "$out"; exit 0
fi
rm -f "$cache/perf-tests.stamp"

# ---- download (cached) ----
debs=$cache/perf-tests-debs
mkdir -p "$debs"; cd "$debs"
debfile() {
  local pkg=${1%%=*} ver=${1#*=} f
  for f in "${pkg}_${ver//:/%3a}"_*.deb; do [ -f "$f" ] && echo "$f"; break; done
  return 0
}
want=()
for pv in "${pins[@]}"; do [ -n "$(debfile "$pv")" ] || want+=("$pv"); done
if [ ${#want[@]} -gt 0 ]; then
  log "downloading ${#want[@]} packages"
  apt-get download -qq -o APT::Sandbox::User=root "${want[@]}" >&2
fi
declare -A keep=()
for pv in "${pins[@]}"; do
  f=$(debfile "$pv"); [ -n "$f" ] || { log "missing $pv after download"; exit 1; }
  keep[$f]=1
done
for f in *.deb; do [ -n "${keep[$f]:-}" ] || rm -f "$f"; done

# ---- unpack ----
work=$cache/perf-tests-work
rm -rf "$work"; mkdir -p "$work/stage" "$work/root"
stage=$work/stage root=$work/root
for pv in "${pins[@]}"; do
  case ${pv%%=*} in
    linux-source-6.1) ;;
    *) dpkg-deb -x "$(debfile "$pv")" "$stage" ;;
  esac
done
src=usr/src/linux-source-6.1
mkdir -p "$root/usr/src"
dpkg-deb --fsys-tarfile "$(debfile "linux-source-6.1=$perfver")" | tar -xO "./$src.tar.xz" | xz -dc |
  tar -x -C "$root/usr/src" linux-source-6.1/tools/perf/tests/shell linux-source-6.1/tools/perf/util/jitdump.h
[ -f "$root/$src/tools/perf/tests/shell/test_intel_pt.sh" ] || { log "no test_intel_pt.sh in linux-source-6.1"; exit 1; }

cd "$root"
mkdir -p bin usr/bin usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib/pttrace/gnu usr/include
# cc: tcc with its own headers and libtcc1.a; glibc's and the kernel's headers; glibc's crt
# files, linker scripts and small archives (libc_nonshared.a, the libpthread.a stub), not its
# static libraries.
install -m 755 "$stage/usr/bin/tcc" usr/bin/tcc
# gcc always writes the ELF symbol table; tcc only with -g (without it only .dynsym: pipe_test.sh's
# `noploop` could not be symbolised). So cc is tcc -g.
printf '#!/bin/sh\n# perf-tests.sh: gcc keeps .symtab by default, tcc only with -g\nexec /usr/bin/tcc -g "$@"\n' >usr/bin/cc
chmod 755 usr/bin/cc
cp -a "$stage/usr/lib/x86_64-linux-gnu/tcc" usr/lib/x86_64-linux-gnu/
cp -a "$stage/usr/include/." usr/include/
for f in "$stage"/usr/lib/x86_64-linux-gnu/*; do
  [ -f "$f" ] || [ -L "$f" ] || continue
  case $f in
    *.o|*.so) cp -a "$f" usr/lib/x86_64-linux-gnu/ ;;
    *.a) [ "$(stat -L -c %s "$f")" -lt 65536 ] && cp -a "$f" usr/lib/x86_64-linux-gnu/ ;;
  esac
done
install -m 755 "$stage/bin/dash" "$stage/bin/bash" bin/
# GNU tools
install -m 755 "$stage/bin/date" "$stage/bin/mktemp" "$stage/bin/true" "$stage/usr/bin/find" "$stage/usr/bin/taskset" usr/lib/pttrace/gnu/
# Python
install -m 755 "$stage/usr/bin/python3.11" usr/bin/python3.11
ln -s python3.11 usr/bin/python3
cp -a "$stage/usr/lib/python3.11" usr/lib/
rm -rf usr/lib/python3.11/test usr/lib/python3.11/idlelib usr/lib/python3.11/tkinter \
  usr/lib/python3.11/ensurepip usr/lib/python3.11/lib2to3 usr/lib/python3.11/pydoc_data
[ -d "$stage/etc/python3.11" ] && mkdir -p etc && cp -a "$stage/etc/python3.11" etc/

# Libraries: what the stage's ld.so resolves for the new binaries, minus the base image's.
gzip -dc "$cache/initramfs.cpio.gz" | cpio -t --quiet 2>/dev/null | LC_ALL=C sort >"$work/base.txt"
ldso=$stage/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
libpath=$stage/lib/x86_64-linux-gnu:$stage/usr/lib/x86_64-linux-gnu
for bin in bin/dash bin/bash usr/bin/tcc usr/lib/pttrace/gnu/date usr/lib/pttrace/gnu/true usr/lib/pttrace/gnu/mktemp usr/lib/pttrace/gnu/find usr/lib/pttrace/gnu/taskset \
           usr/bin/python3.11; do
  "$ldso" --library-path "$libpath" --list "$bin"
done | while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  case $path in "$stage"/*) ;; *) log "$name resolved outside the packages: '$path'"; exit 1 ;; esac
  rel=${path#"$stage"/}
  grep -qx "$rel" "$work/base.txt" && continue
  mkdir -p "$(dirname "$rel")"; cp -L "$path" "$rel"
done

{
  echo "perf's shell tests from linux-source-6.1=$perfver (tools/perf/tests/shell, tools/perf/util/jitdump.h)"
  printf '%s\n' "${pins[@]}"
} >"$work/manifest"

# ---- pack (deterministic) ----
find . -exec touch -h -d @0 {} +
find . -mindepth 1 | LC_ALL=C sort |
  cpio -o -H newc -R 0:0 --reproducible --quiet | gzip -9n >"$work/overlay.cpio.gz"
size=$(stat -c %s "$work/overlay.cpio.gz")
head -c $(( (4 - size % 4) % 4 )) /dev/zero >>"$work/overlay.cpio.gz"
mv -f "$work/overlay.cpio.gz" "$out"
mv -f "$work/manifest" "$cache/perf-tests.manifest"
cd "$cache"; rm -rf "$work"
echo "$stamp" >"$cache/perf-tests.stamp"
log "built: perf shell tests of linux-source-6.1 $perfver + tools, $(( $(stat -c %s "$out") / 1024 )) KiB"
echo "$out"
