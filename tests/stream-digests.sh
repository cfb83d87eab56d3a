#!/usr/bin/env bash
# Byte identity of the trace streams (issue 13): speed work must not change a single packet.
#
#   tests/stream-digests.sh            compare with tests/golden/streams.txt (part of make test)
#   tests/stream-digests.sh --record   rewrite tests/golden/streams.txt with the current encoder
#
# Each run traces a corpus program with fixed options and hashes its streams (thread-1, thread-2,
# ... concatenated). A user-mode run is deterministic only if the guest sees the same start-up:
# libc's start-up walks the environment and argv (their lengths change its branches), so every
# run gets `env -i`, cwd /, and the program copied to a path of fixed length
# (/tmp/pttrace-digest.XXXXXX/prog). Measured: loops, recursion, indirect, setjmp, long_psb and the
# two libc-free assembly programs give identical streams across runs, clone paths and
# environments that way; signals, syscalls, sigstorm and threads do not (timers, scheduling) and
# are not here (tests/run-corpus.sh checks their decoded flow).
#
# A digest is keyed by the program's loaded image (objcopy -O binary without the build-id note,
# which holds the debug info's clone path): with another toolchain the code, hence the flow,
# differs, and such a run is reported as skipped, never as passed. The libc-free programs keep
# their image under any toolchain version that assembles them the same way.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh")
bin=$top/target/corpus/bin
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null
release=${PTTRACE_TARGET:-$top/target}/release
plugin=$release/libpttrace.so
golden=$top/tests/golden/streams.txt
record=0
[ "${1:-}" = --record ] && record=1
tmp=$(mktemp -d /tmp/pttrace-digest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

main=$(nm "$bin/loops" | awk '$3 == "main" { print $1 }')
sort=$(nm "$bin/loops" | awk '$3 == "insertion_sort" { print $1 }')
# label : program : plugin options
runs=(
  "pt:loops:"
  "pt:recursion:"
  "pt:indirect:"
  "pt:setjmp:"
  "pt:long_psb:"
  "pt:retmismatch:"
  "pt:jumptable_asm:"
  "pt-noretcomp:recursion:noretcomp=1"
  "pt-noretcomp:retmismatch:noretcomp=1"
  "pt-psb3-notsc:long_psb:psb_period=3,tsc=0"
  "pt-psb5:indirect:psb_period=5"
  "pt-mtc-cyc:recursion:mtc=1,mtc_period=3,cyc=1,cyc_thresh=2"
  "pt-mtc0-cyc:long_psb:mtc=1,mtc_period=0,cyc=1"
  "pt-overflow:recursion:buffer=512,drain=1/8"
  "pt-overflow:long_psb:buffer=256,drain=1/16"
  "pt-stop-main:loops:stop=0x$main-0x$main"
  "pt-filter-sort:loops:filter=0x$sort/0x200"
  "rtit:loops:trace=rtit"
  "rtit:recursion:trace=rtit"
  "rtit:indirect:trace=rtit"
  "rtit:setjmp:trace=rtit"
  "rtit:long_psb:trace=rtit"
  "rtit:retmismatch:trace=rtit"
  "rtit:jumptable_asm:trace=rtit"
  "rtit-noretcomp:recursion:trace=rtit,noretcomp=1"
  "rtit-psb3-mtc-cyc:long_psb:trace=rtit,psb_period=3,mtc=1,mtc_period=1,cyc=1"
  "rtit-less-pkts:recursion:trace=rtit,less_pkts=1,mtc=1,mtc_period=0,cyc=1"
  "rtit-errata:long_psb:trace=rtit,errata=all"
  "rtit-stop-sort:loops:trace=rtit,stop=0x$sort-0x$sort"
)

image() {  # program -> digest of its loaded image
  objcopy -O binary -R .note.gnu.build-id "$1" "$tmp/img"
  sha256sum <"$tmp/img" | cut -c1-16
}

declare -A want_img want_sum
if [ $record = 0 ]; then
  while read -r key img sum; do
    [ -z "$key" ] || [ "${key:0:1}" = "#" ] && continue
    want_img[$key]=$img want_sum[$key]=$sum
  done <"$golden"
fi

# Each run four times, each variable hidden from the guest with -U so its environment stays
# empty; all must give the recorded bytes:
# - the default: the encoder thread, a callback at every block, prediction after 200 ms (these
#   runs end before);
# - "sync": every block run through the model on its vCPU (PTTRACE_ENCODER=0);
# - "predict": only the blocks the static predictor misses recorded, from the start
#   (PTTRACE_PREDICT=2, issue 13 step 24);
# - "switch": the same from 1 ms on, after a translation flush (PTTRACE_PREDICT_AFTER_MS=1).
fail=0 ok=0 skipped=0 lines=()
for r in "${runs[@]}" "${runs[@]/#/sync:}" "${runs[@]/#/predict:}" "${runs[@]/#/switch:}"; do
  mode="" var=""
  case "${r%%:*}" in
    sync) mode=sync var=PTTRACE_ENCODER=0 r=${r#sync:} ;;
    predict) mode=predict var=PTTRACE_PREDICT=2 r=${r#predict:} ;;
    switch) mode=switch var=PTTRACE_PREDICT_AFTER_MS=1 r=${r#switch:} ;;
  esac
  IFS=: read -r label p opts <<<"$r"
  key="$label/$p"
  cp "$bin/$p" "$tmp/prog"
  rm -rf "$tmp/out"
  if ! (cd / && env -i ${var:+$var} "$qemu_dir/qemu-x86_64" ${var:+-U ${var%%=*}} \
        -plugin "$plugin,out=$tmp/out${opts:+,$opts}" "$tmp/prog" >/dev/null 2>"$tmp/stderr"); then
    echo "FAIL $key [$opts${mode:+, $mode}]: qemu-x86_64 exited non-zero"; cat "$tmp/stderr"; fail=1; continue
  fi
  img=$(image "$tmp/prog")
  sum=$(cd "$tmp/out" && find . -name 'thread-*.pt' -o -name 'thread-*.rtit' | sort -t- -k2 -n | xargs cat | sha256sum | cut -c1-16)
  if [ $record = 1 ]; then
    [ -z "$mode" ] && lines+=("$key $img $sum")
    continue
  fi
  key="$key${mode:+ ($mode)}"
  if [ -z "${want_img[$label/$p]:-}" ]; then
    echo "FAIL $key: no recorded digest (run tests/stream-digests.sh --record with the reference encoder)"; fail=1
  elif [ "${want_img[$label/$p]}" != "$img" ]; then
    echo "skip $key: the program's code differs from the recorded one (another toolchain)"; skipped=$((skipped + 1))
  elif [ "${want_sum[$label/$p]}" != "$sum" ]; then
    echo "FAIL $key [$opts]: stream digest $sum, recorded ${want_sum[$label/$p]}: the packets changed"; fail=1
  else
    ok=$((ok + 1))
  fi
done
if [ $record = 1 ]; then
  { echo "# tests/stream-digests.sh --record: run program-image-digest stream-digest"; printf '%s\n' "${lines[@]}"; } >"$golden"
  echo "recorded ${#lines[@]} stream digests in $golden"
  exit 0
fi
echo "stream digests: $ok of $((4 * ${#runs[@]})) runs byte-identical to the recorded streams, $skipped skipped; result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
