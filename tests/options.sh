#!/usr/bin/env bash
# Bad plugin options: QEMU must exit non-zero with a message naming the option (never a crash),
# and good ones must be accepted.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu=$(bash "$top/scripts/qemu.sh")/qemu-x86_64
plugin=${PTTRACE_TARGET:-$top/target}/release/libpttrace.so
prog=$top/target/corpus/bin/retmismatch
[ -x "$prog" ] || bash "$top/tests/corpus/build.sh" "$top/target/corpus/bin" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect_error() {  # option, text the message must contain
  "$qemu" -plugin "$plugin,out=$tmp/o,$1" "$prog" >/dev/null 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ] || ! grep -q -- "$2" "$tmp/err"; then
    echo "FAIL option '$1': exit $rc, stderr: $(head -c 300 "$tmp/err")"; fail=1
  else
    echo "ok   option '$1' refused: $(head -1 "$tmp/err")"
  fi
}
expect_error "bogus=1" "unknown option 'bogus'"
expect_error "psb_period=6" "accepted: 0..=5"
expect_error "psb_period=-1" "not a number"
expect_error "branch=2" "not a boolean"
expect_error "filter=0x2000-0x1000" "above its end"
expect_error "filter=0x800000000000-0x800000000010" "canonical"
expect_error "filter=1-2,filter=3-4,stop=5-6" "at most 2"
expect_error "mtc_period=2" "accepted: 0, 3, 6, 9"
expect_error "cyc_thresh=14" "accepted: 0..=13"
expect_error "out" "needs a directory"
expect_error "trace=etm" "accepted: pt, rtit, off"
expect_error "buffer=12" "option 'buffer'"
expect_error "buffer=4K,drain=0/4" "option 'drain'"
expect_error "drain=1/4" "needs buffer=BYTES"
expect_error "trace=rtit,buffer=4K" "buffer"
expect_error "errata=E1" "needs trace=rtit"
expect_error "trace=rtit,errata=E8" "accepted: E1..E7"
expect_error "trace=rtit,psb_period=4" "with trace=rtit (accepted: 0..=3"
expect_error "trace=rtit,mtc_period=6" "with trace=rtit (accepted: 0..=3"
expect_error "branch=0,trace=rtit" "RTIT has no BranchEn"
expect_error "trace=rtit,tsc=0" "option 'tsc' needs trace=pt"
expect_error "trace=rtit,cyc_thresh=1" "option 'cyc_thresh' needs trace=pt"
expect_error "less_pkts=1" "option 'less_pkts' needs trace=rtit"
expect_error "inherit=2" "option 'inherit': '2' is not a boolean"
expect_error "inherit=" "option 'inherit': '' is not a boolean"
if "$qemu" -plugin "$plugin,out=$tmp/ok,noretcomp=1,psb_period=5,tsc=0,branch=1,filter=0x401000/0x1000" "$prog" >/dev/null 2>"$tmp/err" &&
   [ -s "$tmp/ok/thread-1.pt" ]; then
  echo "ok   valid options accepted"
else
  echo "FAIL valid options: $(cat "$tmp/err")"; fail=1
fi
if "$qemu" -plugin "$plugin,out=$tmp/rtit,trace=rtit,noretcomp=1,psb_period=3,mtc=1,mtc_period=2,cyc=1,less_pkts=1,branch=1,filter=0x401000/0x1000" "$prog" >/dev/null 2>"$tmp/err" &&
   [ -s "$tmp/rtit/thread-1.rtit" ] && [ ! -e "$tmp/rtit/thread-1.pt" ] && grep -qx "trace=rtit" "$tmp/rtit/meta.txt"; then
  echo "ok   valid trace=rtit options accepted"
else
  echo "FAIL valid trace=rtit options: $(cat "$tmp/err")"; fail=1
fi
# trace=off (the cost baseline): no stream, and meta.txt still names the binary and the end (it
# registers no translation callback, so the binary's layout is noted at exit).
if "$qemu" -plugin "$plugin,out=$tmp/off,trace=off" "$prog" >/dev/null 2>"$tmp/err" &&
   ! ls "$tmp/off"/thread-* >/dev/null 2>&1 && grep -qx "trace=off" "$tmp/off/meta.txt" &&
   grep -qx "binary=$prog" "$tmp/off/meta.txt" && grep -qx "end=exit" "$tmp/off/meta.txt"; then
  echo "ok   trace=off: no stream; meta.txt names the binary and end=exit"
else
  echo "FAIL trace=off: $(cat "$tmp/err"; cat "$tmp/off/meta.txt" 2>/dev/null)"; fail=1
fi
exit $fail
