# Checks LBR branch stacks of a workload against its instruction table (busybox awk, in the guest).
#
#   perf script -F brstack | awk [-v depth=32] -f brstack.awk TABLE -
#
# TABLE comes from insn-table.py (objdump -d of the same binary on the host): ADDR KIND TARGET.
# Every input line is one sample's stack, youngest entry first, each entry FROM/TO/M|P|-/...
# (perf 6.1). Each entry must be a real taken branch of the binary:
#   - FROM is the address of a branch instruction and TO an instruction start of the binary;
#   - a direct branch (Jcc, JMP, CALL) went to its encoded target;
#   - a RET went to the instruction right after a CALL (a return address);
#   - the MISPRED flag is the model's documented static prediction (core/src/bts/prediction.rs):
#     backward Jcc, direct JMP/CALL and RET predicted; forward Jcc and indirect JMP/CALL not;
#   - between an entry's TO and the FROM of the next younger entry the code runs straight: no
#     JMP, CALL, RET or indirect transfer in between (only not-taken Jcc and SYSCALL, whose
#     kernel side the user-only stack leaves out).
# With `depth`, every sample's stack must hold exactly that many entries (a full LBR stack of
# user branches: the LBRs froze at the PMI request, so the PMI's own entry into the kernel is
# not among them).
# Prints the counts and exits 1 on any violation (or an empty input).
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
    # brk[i]: JMP/CALL/RET/indirect/far transfers among the instructions before index i.
    brk[n] = breaks
    if ($2 ~ /^[JLIKRF]$/)
        breaks++
    n++
    next
}
{
    samples++
    have_younger = 0
    if (depth != "" && NF != depth + 0)
        bad("stack depth " NF " (expected " depth ")", $1)
    for (i = 1; i <= NF; i++) {
        if (split($i, f, "/") < 3)
            continue
        from = hex(f[1]); to = hex(f[2]); flag = f[3]
        entries++
        e = from "->" to " " flag
        if (!(from in idx)) { bad("FROM not an instruction of the binary", e); have_younger = 0; continue }
        if (!(to in idx)) { bad("TO not an instruction of the binary", e); have_younger = 0; continue }
        fi = idx[from]; ti = idx[to]; k = kind[fi]
        by_kind[k]++
        if (k !~ /^[CJLIKR]$/)
            bad("FROM is not a branch (kind " k ")", e)
        else if (k ~ /^[CJL]$/ && tgt[fi] != to)
            bad("direct branch not to its target " tgt[fi], e)
        else if (k == "R" && kind[ti - 1] !~ /^[LK]$/)
            bad("RET not to a return address", e)
        # The static prediction: a taken Jcc is predicted when backward (target <= FROM).
        pred = (k == "C") ? (ti <= fi) : (k ~ /^[JLR]$/)
        if (flag != (pred ? "P" : "M"))
            bad("MISPRED flag " flag " against the static prediction", e)
        if (flag == "M")
            misp++
        # Straight-line flow from this (older) entry's TO to the younger entry's FROM.
        if (have_younger && !(ti <= yfi && brk[yfi] == brk[ti]))
            bad("no straight path from TO to the next entry's FROM " yfrom, e)
        have_younger = 1; yfi = fi; yfrom = from
    }
}
END {
    printf "%d samples, %d branch-stack entries (Jcc %d, JMP %d, CALL %d, RET %d, indirect JMP %d, indirect CALL %d; %d mispredicted), %d violations\n", samples, entries, by_kind["C"], by_kind["J"], by_kind["L"], by_kind["R"], by_kind["I"], by_kind["K"], misp, errors
    exit (errors > 0 || entries == 0)
}
