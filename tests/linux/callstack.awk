# Checks LBR call-stack mode stacks of a workload against its instruction table (busybox awk, in
# the guest).
#
#   perf script -F brstack | awk -f callstack.awk TABLE -
#
# TABLE comes from insn-table.py (objdump -d of the same binary on the host): ADDR KIND TARGET.
# Every input line is one sample's stack, youngest entry first, each entry FROM/TO/M|P|-/...
# (perf 6.1, `perf record --call-graph lbr`: IA32_LBR_CTL.CALL_STACK with near calls and returns).
# Every entry must be a call of the binary still open at the sample: FROM a direct (L) or
# indirect (K) CALL, TO the encoded target of a direct one, the MISPRED flag the static predictor
# gives (direct calls predicted, indirect not) where perf reports flags (`--call-graph lbr`
# asks for none: "-"). The workload has no recursion, so a call site
# appears at most once in a stack: a return that did not pop its call would leave main's call of
# pttrace_target in the stack once per iteration, filling it. Prints the counts and exits 1 on
# any violation (or no entry at all).
function hex(s) {
    s = tolower(s)
    sub(/^0x/, "", s)
    sub(/^0+/, "", s)
    return s == "" ? "0" : s
}
function bad(what, e) {
    if (nbad[what]++ < 3)
        printf "BAD %s: %s (sample %d)\n", what, e, samples
    errors++
}
FNR == NR {
    idx[$1] = n; kind[n] = $2; tgt[n] = $3
    n++
    next
}
{
    samples++
    delete seen
    depth = 0
    for (i = 1; i <= NF; i++) {
        if (split($i, f, "/") < 3)
            continue
        from = hex(f[1]); to = hex(f[2]); flag = f[3]
        entries++; depth++
        e = from "->" to " " flag
        if (!(from in idx)) { bad("FROM not an instruction of the binary", e); continue }
        if (!(to in idx)) { bad("TO not an instruction of the binary", e); continue }
        k = kind[idx[from]]
        by_kind[k]++
        if (k !~ /^[LK]$/)
            bad("FROM is not a CALL (kind " k ")", e)
        else if (k == "L" && tgt[idx[from]] != to)
            bad("direct call not to its target " tgt[idx[from]], e)
        if (flag != "-" && flag != (k == "L" ? "P" : "M"))
            bad("MISPRED flag " flag " against the static prediction", e)
        if (from in seen)
            bad("call site twice in one stack (a return did not pop)", e)
        seen[from] = 1
    }
    hist[depth]++
    if (depth > max_depth)
        max_depth = depth
}
END {
    printf "%d samples, %d call-stack entries (CALL %d, indirect CALL %d), deepest stack %d, %d violations\n", samples, entries, by_kind["L"], by_kind["K"], max_depth, errors
    for (d = 0; d <= max_depth; d++)
        if (d in hist)
            printf "  depth %d: %d samples\n", d, hist[d]
    exit (errors > 0 || entries == 0)
}
