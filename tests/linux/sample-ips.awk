# Checks the sample IPs of a workload against its instruction table (busybox awk, in the guest).
#
#   perf script -F ip,sym | awk -v hot="main pttrace_target" -v per=11 -v expect=111 \
#       -f sample-ips.awk TABLE -
#
# TABLE comes from insn-table.py (objdump -d of the same binary on the host). Every sample IP
# must be the address of an instruction of the binary. Optional checks:
#   expect  the exact number of samples;
#   hot/per the IPs in the functions named in `hot` (the workload's loop) hit at least twice must
#           be exactly `per` distinct instructions: with a period coprime to the loop's length,
#           exact (PEBS) IPs walk through every instruction of the loop, while IPs with skid
#           only land on the few instructions where a PMI can be taken (block boundaries).
# Prints a histogram of the hot IPs and the counts; exits 1 on any violation.
function hex(s) {
    s = tolower(s)
    sub(/^0x/, "", s)
    sub(/^0+/, "", s)
    return s == "" ? "0" : s
}
BEGIN {
    nh = split(hot, h, " ")
    for (i = 1; i <= nh; i++)
        is_hot[h[i]] = 1
}
FNR == NR { insn[$1] = 1; next }
NF >= 1 {
    samples++
    ip = hex($1)
    if (!(ip in insn)) {
        if (bad++ < 3)
            printf "BAD sample IP %s (%s) is not an instruction of the binary\n", ip, $2
        next
    }
    if ($2 in is_hot) {
        hot_samples++
        hits[ip]++
    }
}
END {
    for (ip in hits) {
        printf "  %s %d\n", ip, hits[ip]
        if (hits[ip] >= 2)
            distinct++
    }
    printf "%d samples (expected %s), %d not at an instruction start", samples, expect == "" ? "any > 0" : expect, bad
    if (hot != "")
        printf ", %d in %s at %d distinct instructions hit twice or more (expected %s)", hot_samples, hot, distinct, per == "" ? "any" : per
    printf "\n"
    if (bad || samples == 0)
        exit 1
    if (expect != "" && samples != expect + 0)
        exit 1
    if (per != "" && distinct != per + 0)
        exit 1
}
