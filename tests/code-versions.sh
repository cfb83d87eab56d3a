#!/usr/bin/env bash
# Code that changes at run time (issue 19): code.img's versions.
#
# - smc (one RWX address, three functions in turn, 20 rounds), smc_threads (one thread writes
#   code another runs) and smc_inplace (a block that rewrites its own next instruction):
#   `pttrace compare` = ground truth exactly, PT and RTIT (tests/run-corpus.sh checks them too,
#   as corpus programs); code.img holds a few versions of the rewritten code, however many
#   rounds ran.
# - smc with an internal buffer that overflows: 0 decode errors, and the decoded flow is an
#   ordered subsequence of the ground truth (the OVF records give the count where decoding
#   resumes).
# - The check can fail: the same code.img flattened to the old format (later records win, no
#   versions) must make `pttrace compare` fail on smc; on loops (no rewrite) it still decodes.
# - A truncated or corrupt code.img of a run that ended in order is a clear error; pttrace perf
#   refuses a run whose code was rewritten.
# - LuaJIT (Debian's luajit; scripts/install-deps.sh installs it when it can): a script that
#   compiles traces, calls jit.flush() and compiles again decodes with 0 errors and equals the
#   ground truth. Skipped, saying so, if luajit is not installed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh")
bin=$top/target/corpus/bin
out=$top/target/corpus/out/code-versions
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null
release=${PTTRACE_TARGET:-$top/target}/release
plugin=$release/libpttrace.so
tool=$release/pttrace
rm -rf "$out"
mkdir -p "$out"
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

run() {  # dir options program args...
  local dir=$1 opts=$2; shift 2
  rm -rf "$dir"
  "$qemu_dir/qemu-x86_64" -plugin "$plugin,out=$dir,truth=1${opts:+,$opts}" "$@" >"$dir.stdout" 2>"$dir.stderr"
}

# Records of a code.img by kind: "versions switches ovfs versions_outside_[lo,hi)
# switches_to_those".
census() {  # code.img lo hi
  python3 - "$@" <<'EOF'
import struct, sys
d = open(sys.argv[1], 'rb').read()
lo, hi = int(sys.argv[2], 16), int(sys.argv[3], 16)
assert d[:8] == b'PTCODE2\n', d[:8]
p, n, outside, vs, sw = 8, {1: 0, 2: 0, 3: 0}, 0, [], 0
while p < len(d):
    k = d[p]
    if k == 1:
        a, l = struct.unpack_from('<QI', d, p + 1)
        vs.append(not (lo <= a < hi))
        outside += vs[-1]
        p += 13 + l
    else:
        if k == 2:
            sw += vs[struct.unpack_from('<I', d, p + 13)[0]]
        p += 17
    n[k] += 1
print(n[1], n[2], n[3], outside, sw)
EOF
}

# Flatten a PTCODE2 code.img into PTCODE1 (versions in file order, later wins; no switches).
flatten() {  # in out
  python3 - "$@" <<'EOF'
import struct, sys
d = open(sys.argv[1], 'rb').read()
o, p = bytearray(b'PTCODE1\n'), 8
while p < len(d):
    if d[p] == 1:
        l = struct.unpack_from('<I', d, p + 9)[0]
        o += d[p + 1:p + 13 + l]
        p += 13 + l
    else:
        p += 17
open(sys.argv[2], 'wb').write(o)
EOF
}

# 1. smc, smc_threads: exact, PT and RTIT.
for p in smc smc_threads smc_inplace; do
  for t in pt rtit; do
    dir=$out/$p-$t
    opts=""; [ $t = rtit ] && opts=trace=rtit
    run "$dir" "$opts" "$bin/$p"
    if "$tool" compare "$dir" >"$dir.compare" 2>&1; then
      n=$(sed -n 's/^total: .*compared \([0-9]*\) instructions.*/\1/p' "$dir.compare")
      ok "$p [$t]: $n instructions = ground truth, 0 decode errors"
    else
      bad "$p [$t]:"; cat "$dir.compare"
    fi
  done
done

# 2. Size: the RWX page's code has a handful of versions (blocks of three functions); each
# thread's switches grow with the rewrites it ran, never with repeated executions.
dir=$out/smc-pt
lo=$(sed -n 's/^start_code=//p' "$dir/meta.txt"); hi=$(sed -n 's/^end_code=//p' "$dir/meta.txt")
read -r versions switches _ovfs outside page_switches < <(census "$dir/code.img" "$lo" "$hi")
if [ "$outside" -ge 3 ] && [ "$outside" -le 12 ] && [ "$page_switches" -ge 60 ] && [ "$page_switches" -le 240 ]; then
  ok "smc code.img: $outside versions of the RWX page's blocks, $page_switches switches to them for 60 rewrites ($versions versions, $switches switches in all)"
else
  bad "smc code.img: $outside versions of the RWX page's blocks, $page_switches switches to them ($versions versions, $switches switches in all)"
fi

# 3. Overflow: the count after each OVF comes from code.img's OVF records.
dir=$out/smc-ovf
run "$dir" buffer=512,drain=1/64 "$bin/smc"
summary=$("$tool" decode "$dir" --summary 2>&1 || true)
ovfs=$(sed -n 's/.* 0 errors, \([0-9]*\) overflows.*/\1/p' <<<"$summary")
sub=$("$tool" decode "$dir" --thread 1 2>/dev/null | awk -f "$top/tests/ordered-subsequence.awk" "$dir/thread-1.truth" -)
if [ "${ovfs:-0}" -gt 0 ] && [ "$sub" -gt 0 ] 2>/dev/null; then
  ok "smc [buffer=512,drain=1/64]: $ovfs overflows, 0 decode errors, $sub decoded instructions = ordered subsequence of the ground truth"
else
  bad "smc [buffer=512,drain=1/64]: $summary; subsequence '${sub:-}'"
fi

# 4. The check fails without versions; the old format still decodes.
dir=$out/smc-pt
mkdir -p "$out/smc-v1"
cp "$dir"/* "$out/smc-v1/"
flatten "$dir/code.img" "$out/smc-v1/code.img"
if "$tool" compare "$out/smc-v1" >"$out/smc-v1.compare" 2>&1; then
  bad "smc with a PTCODE1 code.img (no versions) should not equal the ground truth"
else
  ok "smc with a PTCODE1 code.img (no versions): compare fails ($(tail -1 "$out/smc-v1.compare" | sed 's/^total: //'))"
fi
run "$out/loops-v1" "" "$bin/loops"
flatten "$out/loops-v1/code.img" "$out/loops-v1/code.img.v1"
mv "$out/loops-v1/code.img.v1" "$out/loops-v1/code.img"
if "$tool" compare "$out/loops-v1" >"$out/loops-v1.compare" 2>&1; then
  ok "loops with a PTCODE1 code.img (the old format): compare = ground truth"
else
  bad "loops with a PTCODE1 code.img:"; cat "$out/loops-v1.compare"
fi

# 5. Damaged code.img: clear errors.
mkdir -p "$out/smc-trunc" "$out/smc-corrupt"
cp "$dir"/* "$out/smc-trunc/"; cp "$dir"/* "$out/smc-corrupt/"
size=$(stat -c %s "$dir/code.img")
head -c $((size - 5)) "$dir/code.img" >"$out/smc-trunc/code.img"
msg=$("$tool" decode "$out/smc-trunc" 2>&1 >/dev/null) && rc=0 || rc=$?
if [ $rc -ne 0 ] && grep -q "code.img: truncated" <<<"$msg"; then
  ok "truncated code.img: exit $rc, $(grep -m1 'truncated' <<<"$msg")"
else
  bad "truncated code.img: exit $rc, $msg"
fi
python3 - "$out/smc-corrupt/code.img" <<'EOF'
import sys
p = sys.argv[1]; d = bytearray(open(p, 'rb').read()); d[8] = 9; open(p, 'wb').write(d)
EOF
msg=$("$tool" decode "$out/smc-corrupt" 2>&1 >/dev/null) && rc=0 || rc=$?
if [ $rc -ne 0 ] && grep -q "code.img: corrupt" <<<"$msg"; then
  ok "corrupt code.img: exit $rc, $(grep -m1 'corrupt' <<<"$msg")"
else
  bad "corrupt code.img: exit $rc, $msg"
fi
msg=$("$tool" perf "$dir" -o "$out/smc.perf.data" 2>&1) && rc=0 || rc=$?
if [ $rc -ne 0 ] && grep -q "rewrote code" <<<"$msg"; then
  ok "pttrace perf refuses rewritten code: $msg"
else
  bad "pttrace perf on smc: exit $rc, $msg"
fi

# 6. LuaJIT with jit.flush().
if command -v luajit >/dev/null; then
  lj=$(readlink -f "$(command -v luajit)")
  for t in pt rtit; do
    dir=$out/luajit-$t
    opts=""; [ $t = rtit ] && opts=trace=rtit
    run "$dir" "$opts" "$lj" "$top/tests/jit/flush.lua"
    if grep -q '^flush.lua: ' "$dir.stdout" && "$tool" compare "$dir" >"$dir.compare" 2>&1; then
      n=$(sed -n 's/^total: .*compared \([0-9]*\) instructions.*/\1/p' "$dir.compare")
      read -r versions switches _ _ _ < <(census "$dir/code.img" 0 0)
      ok "luajit flush.lua [$t]: $n instructions = ground truth, 0 decode errors ($versions versions, $switches switches)"
    else
      bad "luajit flush.lua [$t]:"; cat "$dir.stderr" "$dir.compare" 2>/dev/null | tail -20
    fi
  done
else
  echo "skip luajit: not installed (Debian package luajit; scripts/install-deps.sh installs it when apt can)"
fi

if [ $fail -ne 0 ]; then
  echo "code-versions: FAILED"
  exit 1
fi
echo "code-versions: all checks passed"
