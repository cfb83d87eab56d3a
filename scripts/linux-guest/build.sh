#!/usr/bin/env bash
# Build the pttrace Linux test guest from Debian bookworm packages (apt-get download + dpkg-deb -x,
# nothing is installed on the host from them):
#
#   scripts/linux-guest/build.sh [CACHE_DIR]      build if needed, print CACHE_DIR
#
# CACHE_DIR (default ${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest, outside the clone) gets
#   vmlinuz             the kernel of the current bookworm linux-image-amd64 (its linux-image-6.1.0-N-amd64)
#   config              its kernel configuration (Debian's System.map there is a stub: the real one
#                       is in the -dbg package, which is not fetched)
#   initramfs.cpio.gz   busybox-static, /usr/bin/perf from linux-perf and every shared library that
#                       ld.so --list resolves for it (taken from the downloaded packages, never from the
#                       host), the static workloads tests/linux/workloads/*.c in /usr/local/bin, and /init
#                       (scripts/linux-guest/init + run-commands.sh). Padded to a multiple of 4 bytes so
#                       run.sh can append its command archive.
#   manifest.txt        the exact package versions inside
#   debs/               the downloaded packages (reused)
# Idempotent: when the package versions (as apt currently offers them) and the inputs in this
# directory and tests/linux/workloads are unchanged, it only prints CACHE_DIR.
# Progress goes to stderr; stdout carries only CACHE_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${1:-${PTTRACE_CACHE:-$HOME/.cache/pttrace}/linux-guest}
log() { echo "linux-guest/build.sh: $*" >&2; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo

# ---- host tools ----
# cpio packs the initramfs; gcc + libc6-dev (libc.a) build the static workloads.
missing=()
for p in cpio gcc libc6-dev gzip; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  $SUDO apt-get update -qq >&2; updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
exec 9>"$out/.lock"
flock 9   # one build at a time per cache dir

# ---- versions apt offers now ----
candidate() { apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p' | sed -n 1p; }
kmeta=$(candidate linux-image-amd64)
if [ -z "$kmeta" ] || [ "$kmeta" = "(none)" ]; then
  [ "$updated" -eq 0 ] && { log "apt-get update"; $SUDO apt-get update -qq >&2; }
  kmeta=$(candidate linux-image-amd64)
fi
[ -n "$kmeta" ] && [ "$kmeta" != "(none)" ] || { log "apt offers no linux-image-amd64"; exit 1; }
# linux-image-amd64 is a metapackage depending on the real one, e.g. linux-image-6.1.0-56-amd64.
kpkg=$(apt-cache show "linux-image-amd64=$kmeta" | sed -n 's/^Depends: //p' | sed -n 1p |
       tr ',|' '\n\n' | grep -o 'linux-image-[0-9][^ ]*' | sed -n 1p)
[ -n "$kpkg" ] || { log "cannot tell which kernel linux-image-amd64=$kmeta depends on"; exit 1; }

# Library packages perf can need: every lib*/zlib* package in linux-perf's dependency closure.
# Which files of them go into the guest is decided later by ld.so itself.
mapfile -t libpkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances linux-perf 2>/dev/null |
  grep -v '^ ' | grep -E '^(lib|zlib)' | grep -v -E -- '-(common|data|doc|dev)$' | LC_ALL=C sort -u)
mapfile -t pins < <(apt-cache show --no-all-versions "$kpkg" linux-perf busybox-static "${libpkgs[@]}" |
  awk '/^Package: /{p=$2} /^Version: /{print p "=" $2}' | LC_ALL=C sort -u)
[ ${#pins[@]} -ge 3 ] || { log "apt-cache show returned too little"; exit 1; }

inputs_hash() {
  {
    printf '%s\n' "${pins[@]}"
    gcc -dumpfullversion; dpkg-query -W -f='${Version}\n' libc6-dev
    cd "$top" && sha256sum scripts/linux-guest/build.sh scripts/linux-guest/init \
      scripts/linux-guest/run-commands.sh tests/linux/workloads/*.c
  } | sha256sum | cut -d' ' -f1
}
stamp=$(inputs_hash)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] &&
   [ -f "$out/vmlinuz" ] && [ -f "$out/initramfs.cpio.gz" ]; then
  log "up to date ($kpkg, $(grep -o '^linux-perf=.*' <<<"$(printf '%s\n' "${pins[@]}")"))"
  echo "$out"; exit 0
fi
rm -f "$out/stamp"

# ---- download (cached in $out/debs) ----
mkdir -p "$out/debs"
cd "$out/debs"
debfile() {  # pkg=ver -> the file apt-get download names it (epoch colon as %3a), if present
  local pkg=${1%%=*} ver=${1#*=}
  local f
  for f in "${pkg}_${ver//:/%3a}"_*.deb; do [ -f "$f" ] && echo "$f"; break; done
  return 0
}
want=()
for pv in "${pins[@]}"; do [ -n "$(debfile "$pv")" ] || want+=("$pv"); done
if [ ${#want[@]} -gt 0 ]; then
  log "downloading ${#want[@]} packages"
  apt-get download -q -o APT::Sandbox::User=root "${want[@]}" >&2
fi
declare -A keep=()
for pv in "${pins[@]}"; do
  f=$(debfile "$pv"); [ -n "$f" ] || { log "missing $pv after download"; exit 1; }
  keep[$f]=1
done
for f in *.deb; do  # drop packages of other versions
  [ -n "${keep[$f]:-}" ] || rm -f "$f"
done

# ---- extract ----
work=$out/work
rm -rf "$work"; mkdir -p "$work/stage" "$work/kernel" "$work/root"
stage=$work/stage root=$work/root
for pv in "${pins[@]}"; do
  f=$(debfile "$pv")
  case ${pv%%=*} in
    "$kpkg") dpkg-deb --fsys-tarfile "$f" | tar -x -C "$work/kernel" ./boot ;;
    *) dpkg-deb -x "$f" "$stage" ;;
  esac
done
kfile=$(ls "$work"/kernel/boot/vmlinuz-* | sed -n 1p)
krel=${kfile##*/vmlinuz-}
[ -f "$kfile" ] || { log "no vmlinuz in $kpkg"; exit 1; }

# ---- initramfs tree ----
cd "$root"
mkdir -p bin sbin usr/bin usr/sbin usr/local/bin usr/local/src lib/x86_64-linux-gnu \
  usr/lib/x86_64-linux-gnu lib64 lib/pttrace proc sys dev tmp root etc run mnt var/tmp pttrace
chmod 1777 tmp var/tmp; chmod 700 root

# busybox and its applets as symlinks (the binary is static: it runs on the host to list them)
install -m 755 "$stage/bin/busybox" bin/busybox
while read -r applet; do
  [ -e "$applet" ] || [ -L "$applet" ] || ln -s /bin/busybox "$applet"
done < <(bin/busybox --list-full)

# perf and the libraries the dynamic loader of the same libc6 package resolves for it
install -m 755 "$stage/usr/bin/perf" usr/bin/perf
ldso=$stage/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
libpath=$stage/lib/x86_64-linux-gnu:$stage/usr/lib/x86_64-linux-gnu
"$ldso" --library-path "$libpath" --list usr/bin/perf >"$work/perf-libs.txt"
nlibs=0
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  case $name in /*) continue ;; esac   # the loader itself, copied below
  case $path in
    "$stage"/*) ;;
    *) log "perf needs $name, which no downloaded package provides (resolved to '$path')"; exit 1 ;;
  esac
  rel=${path#"$stage"/}
  mkdir -p "$(dirname "$rel")"
  cp -L "$path" "$rel"
  nlibs=$((nlibs + 1))
done <"$work/perf-libs.txt"
cp -L "$ldso" lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
ln -sf /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 lib64/ld-linux-x86-64.so.2
# The same loader must find them all inside the tree (default paths only, no ld.so.cache).
check=$("$ldso" --library-path "$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu" --list usr/bin/perf)
if grep -q 'not found' <<<"$check"; then
  log "perf has unresolved libraries in the initramfs tree"; exit 1
fi

# workloads
for c in "$top"/tests/linux/workloads/*.c; do
  [ -f "$c" ] || continue
  name=$(basename "$c" .c)
  # Built from the clone's top with its path mapped away, so the binary (debug info included)
  # depends on neither where the clone nor where the cache is.
  (cd "$top" && gcc -static -O2 -g -fno-omit-frame-pointer -Wall -ffile-prefix-map="$top"=. \
     -o "$root/usr/local/bin/$name" "tests/linux/workloads/$name.c")
  cp "$c" usr/local/src/
done

# init, its command runner, a minimal /etc
install -m 755 "$here/init" init
install -m 755 "$here/run-commands.sh" lib/pttrace/run-commands.sh
echo 'root:x:0:0:root:/root:/bin/sh' >etc/passwd
echo 'root:x:0:' >etc/group
echo 'pttrace-guest' >etc/hostname
# The kernel opens /dev/console before /init runs; its built-in initramfs has that node too.
mknod -m 600 dev/console c 5 1 2>/dev/null || true
mknod -m 666 dev/null c 1 3 2>/dev/null || true

{
  echo "kernel $krel"
  printf '%s\n' "${pins[@]}"
  echo "workloads built with gcc $(gcc -dumpfullversion), libc6-dev $(dpkg-query -W -f='${Version}' libc6-dev)"
} >etc/pttrace-guest.txt

# ---- pack: deterministic order, owners and times ----
find . -exec touch -h -d @0 {} +
find . -mindepth 1 | LC_ALL=C sort |
  cpio -o -H newc -R 0:0 --reproducible --quiet | gzip -9n >"$work/initramfs.cpio.gz"
size=$(stat -c %s "$work/initramfs.cpio.gz")
head -c $(( (4 - size % 4) % 4 )) /dev/zero >>"$work/initramfs.cpio.gz"

mv -f "$work/initramfs.cpio.gz" "$out/initramfs.cpio.gz"
mv -f "$kfile" "$out/vmlinuz"
mv -f "$work/kernel/boot/config-$krel" "$out/config"
cp etc/pttrace-guest.txt "$out/manifest.txt"
cd "$out"; rm -rf "$work" "$out/System.map"
echo "$stamp" >"$out/stamp"
log "built: kernel $krel, perf $(grep -o '^linux-perf=.*' manifest.txt | cut -d= -f2), $nlibs libraries," \
    "initramfs $(( $(stat -c %s initramfs.cpio.gz) / 1024 )) KiB"
echo "$out"
