#!/usr/bin/env bash
# Forked children (issue 19): every process of a run gets its own streams in DIR/proc-PID.
#
# - fork_tree and fork_threads (corpus programs, also checked exactly by tests/run-corpus.sh, PT
#   and RTIT): the process tree on disk is the program's (a directory per process, each meta.txt's
#   ppid= names a process of the run, the grandchild's parent is a child), `pttrace decode` names
#   every stream `process PID thread N`, and a second run into the same directory replaces the
#   first run's process directories.
# - fork_die: a child killed by SIGSEGV keeps its trace: decoded exactly = ground truth up to and
#   including the faulting instruction; a child that raises SIGTERM ends in order (its own
#   finisher) and decodes exactly.
# - fork_storm: 4 threads fork 20 children each at once (locks held across fork): 81 processes,
#   all decoded = ground truth.
# - dash (Debian) with command substitution and subshells: every process decoded = ground truth.
# - inherit=0: no process directory, the children say they are not traced, the parent decodes.
# - pttrace perf on a run with children: converts the program's own process and says so; a
#   child's directory converts on its own and host perf decodes it to that child's ground truth.
# PTTRACE_TARGET=DIR takes the plugin and tool from DIR/release instead of target/release.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
qemu_dir=$(bash "$top/scripts/qemu.sh") || exit 1
bin=$top/target/corpus/bin
out=$top/target/corpus/out/fork
bash "$top/tests/corpus/build.sh" "$bin" >/dev/null || exit 1
# fork_die is not a corpus program: the SIGSEGV child's flow ends inside a block (see 3.).
die=$top/target/fork/bin/fork_die
mkdir -p "${die%/*}"
[ "$die" -nt "$top/tests/fork/fork_die.c" ] ||
  gcc -O1 -g -static -fno-pie -no-pie -Wall -Werror -o "$die" "$top/tests/fork/fork_die.c" || exit 1
storm=$top/target/fork/bin/fork_storm
[ "$storm" -nt "$top/tests/fork/fork_storm.c" ] ||
  gcc -O1 -g -static -fno-pie -no-pie -pthread -Wall -Werror -o "$storm" "$top/tests/fork/fork_storm.c" || exit 1
release=${PTTRACE_TARGET:-$top/target}/release
plugin=$release/libpttrace.so
tool=$release/pttrace
q=$qemu_dir/qemu-x86_64
rm -rf "$out"
mkdir -p "$out"
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

run() {  # dir options program args...
  local dir=$1 opts=$2; shift 2
  "$q" -plugin "$plugin,out=$dir,truth=1${opts:+,$opts}" "$@" >"$dir.stdout" 2>"$dir.stderr"
}

# The pids of a run: the root's, then every proc-PID directory's (from meta.txt).
pids() { sed -n 's/^pid=//p' "$1/meta.txt" "$1"/proc-*/meta.txt; }

# 1. The process tree on disk, headers, a second run into the same directory.
d=$out/tree
for round in 1 2; do
  run "$d" "" "$bin/fork_tree" || { bad "fork_tree: exit status $?"; cat "$d.stderr"; }
done
root=$(sed -n 's/^pid=//p' "$d/meta.txt")
ndirs=$(find "$d" -mindepth 1 -maxdepth 1 -type d -name 'proc-*' | wc -l)
parents=$(sed -n 's/^ppid=//p' "$d"/proc-*/meta.txt | sort | uniq -c | awk '{ print $1 }' | sort -n | tr '\n' ' ')
orphans=0
for m in "$d"/proc-*/meta.txt; do
  pp=$(sed -n 's/^ppid=//p' "$m")
  pids "$d" | grep -qx "$pp" || orphans=$((orphans + 1))
done
# fork_tree: the root forks 3 children, the second forks the grandchild: ppid counts 1 and 3.
if [ "$ndirs" = 4 ] && [ "$parents" = "1 3 " ] && [ "$orphans" = 0 ] &&
   [ "$(grep -c "^ppid=$root$" "$d"/proc-*/meta.txt | awk -F: '{ s += $2 } END { print s }')" = 3 ]; then
  ok "fork_tree: 4 process directories after two runs into one directory (3 children of $root, 1 grandchild), every ppid= a process of the run"
else
  bad "fork_tree: $ndirs process directories, ppid counts '$parents', $orphans unknown parents"
fi
if "$tool" compare "$d" >"$d.compare" 2>&1; then
  ok "fork_tree: $(tail -1 "$d.compare")"
else
  bad "fork_tree: compare"; cat "$d.compare"
fi
# The check can fail: without the SWITCH records at count 0 that give each child the forking
# thread's view of the rewritten page, the child that runs the inherited bytes decodes wrong.
rm -rf "$d-noview"; cp -r "$d" "$d-noview"
for c in "$d-noview"/proc-*; do
  python3 - "$c/code.img" <<'EOF'
import struct, sys
d = open(sys.argv[1], 'rb').read()
p, out = 8, bytearray(d[:8])
while p < len(d):
    q = p + 13 + struct.unpack_from('<I', d, p + 9)[0] if d[p] == 1 else p + 17
    if not (d[p] == 2 and struct.unpack_from('<Q', d, p + 5)[0] == 0):
        out += d[p:q]
    p = q
open(sys.argv[1], 'wb').write(out)
EOF
done
"$tool" compare "$d-noview" --context 0 >"$d-noview.compare" 2>&1
nbad=$(grep -c '^process .*first mismatch' "$d-noview.compare")
if [ "$nbad" = 1 ]; then
  ok "fork_tree: without the children's SWITCH records at count 0, the child that runs the inherited rewritten page fails to compare ($(grep 'first mismatch' "$d-noview.compare" | cut -d, -f1-3))"
else
  bad "fork_tree: $nbad processes fail without the SWITCH records at count 0 (want 1)"; cat "$d-noview.compare"
fi
streams=$(find "$d" -name 'thread-*.pt' | wc -l)
headers=$("$tool" decode "$d" 2>/dev/null | grep -cE '^process [0-9]+ thread [0-9]+$')
exec_end=$(grep -l '^end=execve$' "$d"/proc-*/meta.txt | wc -l)
if [ "$headers" = "$streams" ] && [ "$headers" = 5 ] && [ "$exec_end" = 1 ]; then
  ok "fork_tree: pttrace decode names all $headers streams 'process PID thread N'; the child that execs ends with end=execve"
else
  bad "fork_tree: $headers decode headers for $streams streams, $exec_end children ending at execve"
fi

# 2. Fork from a multithreaded parent: the child has one thread (the one that forked).
d=$out/threads
run "$d" "" "$bin/fork_threads" || bad "fork_threads: exit status $?"
nroot=$(find "$d" -maxdepth 1 -name 'thread-*.pt' | wc -l)
nchild=$(find "$d"/proc-* -name 'thread-*.pt' | wc -l)
if "$tool" compare "$d" >"$d.compare" 2>&1 && [ "$nroot" = 4 ] && [ "$nchild" = 3 ]; then
  ok "fork_threads: 4 threads in the parent; the child: the thread that forked and one it started; the grandchild: one; $(tail -1 "$d.compare")"
else
  bad "fork_threads: $nroot parent streams, $nchild child streams"; cat "$d.compare"
fi

# 3. Children that die of a signal. A fatal SIGSEGV stops its block at the faulting instruction,
#    but plugins get no registers at exit, so the trace cannot say where: the stream ends as if the
#    block had completed (the decoder runs on to the end of that block and then stops with an
#    error). Everything up to the fault must be exact.
d=$out/die
run "$d" "" "$die"; rc=$?
"$tool" compare "$d" --context 0 >"$d.compare" 2>&1
segv=$(grep -l '^end=exit$' "$d"/proc-*/meta.txt | xargs -n1 dirname | xargs -n1 basename)
term=$(grep -l '^end=signal 15$' "$d"/proc-*/meta.txt | xargs -n1 dirname | xargs -n1 basename)
segv_pid=${segv#proc-}
# The SIGSEGV child: the truth log ends with the faulting instruction (its callback ran before it
# faulted); the decoded flow equals it at every index of the truth, that instruction included.
line=$(grep "^process $segv_pid thread 1:" "$d.compare")
t=$(sed -n 's/.*truth \([0-9]*\), mismatches.*/\1/p' <<<"$line")
fault=$(tail -1 "$d/$segv/thread-1.truth")
insn=$(objdump -d --start-address=0x"$fault" --stop-address=$((0x$fault + 16)) "$die" | grep -E "^ +$fault:")
if [ "$rc" = 0 ] && [ -n "$segv" ] && [ -n "$term" ] &&
   [[ "$line" = *", mismatches 0, first mismatch at index $t (decoded "*", truth <end>)"* ]] &&
   [[ "$insn" = *"mov "*"(%rax)"* ]] &&
   grep -q "^process [0-9]* thread 1: decoded \([0-9]*\), truth \1, mismatches 0, decode errors 0$" "$d.compare" &&
   grep -q "^process ${term#proc-} thread 1: decoded \([0-9]*\), truth \1, mismatches 0, decode errors 0$" "$d.compare"; then
  ok "fork_die: the SIGSEGV child's decoded flow = truth through the faulting store at $fault ($t instructions); the SIGTERM child ends with end=signal 15 and decodes exactly; the parent exits 0"
else
  bad "fork_die: exit $rc, SIGSEGV child '$segv', SIGTERM child '$term', fault at '$fault' ($insn)"; cat "$d.compare"
fi

# 3b. Forks from 4 threads at once while the others make system calls: 80 children, every
#     process decoded = ground truth, no hang (bounded by timeout).
d=$out/storm
"$q" -plugin "$plugin,out=$d,truth=1" "$storm" >"$d.stdout" 2>"$d.stderr" &
pid=$!
( sleep 300; kill -KILL "$pid" 2>/dev/null ) & watchdog=$!
wait "$pid"; rc=$?
kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
nproc=$(pids "$d" | wc -l)
if [ "$rc" = 0 ] && [ "$nproc" = 81 ] && "$tool" compare "$d" >"$d.compare" 2>&1; then
  ok "fork_storm: 4 threads forking 20 children each at once: $(tail -1 "$d.compare")"
else
  bad "fork_storm: exit $rc, $nproc processes"; tail -3 "$d.compare" "$d.stderr"
fi

# 4. dash: command substitution, a subshell, a pipeline into an external program.
d=$out/dash
if [ -x /usr/bin/dash ]; then
  run "$d" "" /usr/bin/dash -c 'x=$(echo a); (echo b); echo $x; y=`echo c`; (echo $y; echo d) | cat'
  nproc=$(pids "$d" | wc -l)
  if [ "$(tr '\n' ' ' <"$d.stdout")" = "b a c d " ] && [ "$nproc" -ge 4 ] && "$tool" compare "$d" >"$d.compare" 2>&1; then
    ok "dash -c (command substitution, subshells, a pipeline): $nproc processes; $(tail -1 "$d.compare")"
  else
    bad "dash: output '$(tr '\n' ' ' <"$d.stdout")', $nproc processes"; cat "$d.compare" "$d.stderr"
  fi
  # pttrace perf: the program's own process, with a warning about the children.
  if "$tool" perf "$d" -o "$out/dash.perf.data" >/dev/null 2>"$out/dash.perf.stderr" &&
     grep -q "forked process(es) (proc-PID/): perf.data covers only" "$out/dash.perf.stderr"; then
    ok "pttrace perf on a run with children: the program's own process converted, the children named in a warning"
  else
    bad "pttrace perf on the dash run"; cat "$out/dash.perf.stderr"
  fi
  # A child's own directory converts alone; host perf decodes it to that child's ground truth.
  c=$(ls -d "$d"/proc-* | head -1)
  if ! command -v perf >/dev/null; then
    echo "skip pttrace perf DIR/proc-PID: host perf is not installed"
  elif "$tool" perf "$c" -o "$out/child.perf.data" 2>"$out/child.perf.stderr" &&
     cmp -s <(perf script -i "$out/child.perf.data" --itrace=i1i -F ip 2>/dev/null | awk '{ print $1 }') "$c/thread-1.truth"; then
    ok "pttrace perf DIR/${c##*/}: host perf decodes the forked child = its ground truth ($(wc -l <"$c/thread-1.truth") instructions)"
  else
    bad "pttrace perf DIR/${c##*/}"; cat "$out/child.perf.stderr"
  fi
else
  echo "skip dash: /usr/bin/dash is not installed"
fi

# 5. inherit=0: children are not traced.
d=$out/no-inherit
run "$d" "inherit=0" "$bin/fork_tree"
if [ -z "$(find "$d" -mindepth 1 -maxdepth 1 -name 'proc-*')" ] &&
   [ "$(grep -c 'forked children are not traced' "$d.stderr")" = 3 ] &&
   "$tool" compare "$d" >"$d.compare" 2>&1; then
  ok "inherit=0: no process directories, 3 children report they are not traced (the exec'd one says nothing); parent $(tail -1 "$d.compare")"
else
  bad "inherit=0"; cat "$d.stderr" "$d.compare"
fi

echo "fork: result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
