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
# not among them). One exception, which real hardware and Linux 6.1 make too: an interrupt (or
# exception) taken in ring 3 within the last `depth` branches. Its entry into ring 0 is not
# captured (LBR_SELECT.CPL_EQ_0: branches ending in ring 0), but its IRET back to ring 3 is,
# with a kernel FROM address, and Linux's intel_pmu_lbr_filter drops every entry whose FROM is
# a kernel address from a user-only stack (Debian 6.1.192: the test of br_sel & X86_BR_KERNEL
# and kernel_ip(from) after the type check): that sample has fewer entries. The dropped IRET
# returns to the interrupted instruction, so the straight-line check below still holds across
# it. With `irqs` (a file of "CPU TIME" lines: the interrupts and user page faults a
# system-wide `perf record` of tracepoints saw, `perf script --ns -F cpu,time`) and stacks read
# with `-F cpu,time,brstack --ns`, a stack shorter than `depth` is accepted only when such an
# event happened on its CPU since the previous sample (for the first sample: since the recorder
# started, which includes the workload's start-up page faults); without `irqs`, never.
# The last field of an entry is its cycle count (LBR_INFO[15:0] CYC_CNT; 0 when the record has
# none: the first after the LBRs were reset, or no timed LBRs). With `cycles` (a percentage), at
# least that share of the entries must carry a nonzero count.
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
function secs(t) {
    sub(/:$/, "", t)
    return t + 0
}
BEGIN {
    if (irqs != "") {
        while ((getline line < irqs) > 0) {
            split(line, f, " ")
            if (f[1] ~ /^\[[0-9]+\]$/) {
                nirq++; irq_cpu[nirq] = f[1]; irq_t[nirq] = secs(f[2])
            }
        }
        close(irqs)
    }
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
    first = 1; cpu = ""
    if ($1 ~ /^\[[0-9]+\]$/) {
        # -F cpu,time,brstack: "[CPU] TIME: entries..."
        cpu = $1; t = secs($2); first = 3
    }
    n_entries = NF - first + 1
    if (depth != "" && n_entries != depth + 0) {
        explained = 0
        if (irqs != "" && cpu != "")
            for (k = 1; k <= nirq; k++)
                if (irq_cpu[k] == cpu && irq_t[k] > t_prev && irq_t[k] <= t) { explained = 1; break }
        if (explained) {
            short_irq++
            short_missing += depth - n_entries
        } else
            bad("stack depth " n_entries " (expected " depth ")" (irqs != "" ? ", no interrupt on CPU " cpu " since the previous sample" : ""), $first)
    }
    if (cpu != "")
        t_prev = t
    for (i = first; i <= NF; i++) {
        if (split($i, f, "/") < 3)
            continue
        from = hex(f[1]); to = hex(f[2]); flag = f[3]
        entries++
        if (f[6] + 0 > 0)
            timed++
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
    printf "%d of %d entries with a nonzero cycle count (%d%%)\n", timed, entries, entries ? int(100 * timed / entries) : 0
    if (cycles != "" && 100 * timed < (cycles + 0) * entries) {
        printf "BAD cycle counts: %d of %d entries nonzero, expected at least %d%%\n", timed, entries, cycles
        errors++
    }
    printf "%d samples, %d branch-stack entries (Jcc %d, JMP %d, CALL %d, RET %d, indirect JMP %d, indirect CALL %d; %d mispredicted), %d violations\n", samples, entries, by_kind["C"], by_kind["J"], by_kind["L"], by_kind["R"], by_kind["I"], by_kind["K"], misp, errors
    if (irqs != "")
        printf "%d interrupt/page-fault events read; %d stacks shorter than %d (%d entries short), each after an interrupt on its CPU since the previous sample\n", nirq, short_irq, depth, short_missing
    exit (errors > 0 || entries == 0)
}
