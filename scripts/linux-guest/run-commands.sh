#!/bin/sh
# run-commands.sh FILE — run in the guest by /init (busybox sh). Splits FILE into complete shell
# commands and runs them one after another in this one shell (so `cd`, variables and functions
# carry over), each with stdin from /dev/null, framed by
#     === CMD n START: <first line>
#     ... output ...
#     === CMD n EXIT rc
# A command is one line, or several when the first is not complete on its own: open quotes,
# if/for/while/case blocks, { ... } or function bodies, here-documents and lines ending in a
# backslash continue until the command is complete. Blank and comment-only lines are skipped.
# Prints "=== ALL DONE n" at the end; exits 0 then. A command that calls `exit` ends this shell
# early: /init reports that.
script=$1
work=/tmp/.pttrace-cmds
rm -rf "$work"; mkdir -p "$work"

# complete TEXT: true when TEXT parses as a whole command. The second check catches an open
# here-document, which `sh -n` accepts at the end of input: a line ")" after a complete command is
# a syntax error, but inside a here-document body it is just text.
complete() {
    case $1 in *\\) return 1 ;; esac
    sh -n -c "$1" 2>/dev/null || return 1
    ! sh -n -c "$1
)" 2>/dev/null
}

# Pass 1: split into $work/1, $work/2, ...
count=0 buf=
while IFS= read -r line || [ -n "$line" ]; do
    if [ -z "$buf" ]; then
        stripped=${line#"${line%%[![:space:]]*}"}
        case $stripped in ''|'#'*) continue ;; esac
        buf=$line
    else
        buf="$buf
$line"
    fi
    if complete "$buf"; then
        count=$((count + 1))
        printf '%s\n' "$buf" >"$work/$count"
        buf=
    fi
done <"$script"
if [ -n "$buf" ]; then
    count=$((count + 1))
    printf '%s\n' "$buf" >"$work/$count"   # incomplete at end of file: run it, sh reports the error
fi

# Pass 2: run them in order.
n=0
while [ "$n" -lt "$count" ]; do
    n=$((n + 1))
    echo "$n" >/tmp/.pttrace-current
    first=$(head -n 1 "$work/$n")
    [ "$(wc -l <"$work/$n")" -gt 1 ] && first="$first ..."
    echo "=== CMD $n START: $first"
    eval "$(cat "$work/$n")" </dev/null
    rc=$?
    echo "=== CMD $n EXIT $rc"
done
rm -f /tmp/.pttrace-current
echo "=== ALL DONE $count"
exit 0
