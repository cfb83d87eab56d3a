# Decode errors of an Intel PT recording that lost data (perf_pt.sh, the -m,8 recording), in
# busybox awk:
#
#   perf script -D -i big.data | grep -E 'PERF_RECORD_AUX(TRACE)? ' >big.aux
#   perf script -i big.data --itrace=e >big.err 2>&1
#   awk -f pt-gaps.awk big.aux big.err
#
# When the guest's perf falls behind, the trace fills the ToPA STOP region perf placed at the end
# of the free space and stops there, cutting the last packet in two ("output ceases after the
# last byte of the region is filled, which may mean that a packet is cut off in the middle",
# SDM Vol. 3C §33.2.7.2, as on hardware); perf marks that PERF_RECORD_AUX truncated ("AUX data
# lost") and reports one "Lost trace data" (code 8) per truncated record. perf record copies
# the AUX area as it finds it: the data after the cut is the next record's (the restarted trace,
# from its PSB on), in the same AUXTRACE buffer or in the next one, and the decoder completes the
# cut packet with those bytes: one "Bad packet", or a wrong packet that gives a few errors ("Trace
# doesn't match instruction", "Bad packet", "Failed to get instruction" at a garbage IP; seen up
# to 3) until it resynchronises at a PSB. Real hardware's cut packets meet the same perf.
# So: every error other than code 8 must fall between the AUX records around a truncated record
# (its timestamp after the AUX record before it and before the one after it; the decoder's
# timestamps of the cut packet may be slightly later than the truncation's), at most 4 for each
# truncated record; a code 8 gap for each truncated record (perf's; the decoder adds one where
# it meets a discontinuity: 7 truncated records gave 8 gaps once), none without. Prints the
# counts (and how many truncated records end inside an AUXTRACE buffer); exits 1 on a violation.
function num(s) { return s ~ /^0x/ ? hex(s) : s + 0 }
function hex(s,   i, c, v) {
    v = 0; s = tolower(substr(s, 3))
    for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; v = v * 16 + c }
    return v
}
BEGIN { nb = 0; na = 0; nt = 0 }
FILENAME == ARGV[1] && / PERF_RECORD_AUXTRACE / {
    for (i = 1; i < NF; i++) {
        if ($i == "size:") bsize[nb] = num($(i + 1))
        if ($i == "offset:") boff[nb] = num($(i + 1))
    }
    nb++
    next
}
FILENAME == ARGV[1] && / PERF_RECORD_AUX / {
    t = $2 / 1e9
    for (i = 1; i < NF; i++) {
        if ($i == "offset:") off = num($(i + 1))
        if ($i == "size:") size = num($(i + 1))
    }
    at[na] = t
    if ($0 ~ /\[T\]/) {
        trunc[nt] = na; end[nt] = off + size; nt++
    }
    na++
    next
}
FILENAME == ARGV[1] { next }
/instruction trace error type/ {
    t = $0; sub(/.* time /, "", t); sub(/ .*/, "", t); t += 0
    if ($0 ~ /code 8: Lost trace data/) { gaps++; next }
    errors++
    # The truncation around it: after the AUX record before the truncated one, before the next.
    best = -1
    for (g = 0; g < nt; g++) {
        k = trunc[g]
        lo = k > 0 ? at[k - 1] : 0
        hi = k + 1 < na ? at[k + 1] : 1e18
        d = t - at[k]; if (d < 0) d = -d
        if (t > lo && t < hi && (best < 0 || d < bestd)) { best = g; bestd = d }
    }
    if (best < 0) { bad++; print "BAD: an error away from any truncated record: " $0; next }
    near[best]++
    line[best] = line[best] "\n    " $0
}
END {
    for (g = 0; g < nt; g++) {
        merged = 0
        for (b = 0; b < nb; b++)
            if (boff[b] < end[g] && end[g] < boff[b] + bsize[b]) merged = 1
        if (merged) nmerged++
        if (debug) printf "truncation %d ends %#x merged %d errors %d\n", g, end[g], merged, near[g]
        if (near[g] > 4) {
            bad++
            printf "BAD: %d errors at the truncation ending at offset %#x (%s its AUXTRACE buffer):%s\n", near[g], end[g], merged ? "inside" : "at the end of", line[g]
        }
    }
    if (gaps < nt || (nt == 0 && gaps > 0)) { bad++; printf "BAD: %d \"Lost trace data\" gaps for %d truncated AUX records\n", gaps, nt }
    printf "truncated AUX records: %d (%d inside an AUXTRACE buffer), gaps: %d, other decode errors: %d, unexplained: %d\n", nt, nmerged, gaps, errors, bad + 0
    exit bad > 0
}
