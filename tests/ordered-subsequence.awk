# awk -f tests/ordered-subsequence.awk TRUTH DECODED
# Prints how many addresses DECODED has when they occur in TRUTH in the same order (each one found
# after the previous match; TRUTH's `#` annotation lines are skipped), or "no". A trace with
# overflow gaps decodes to such a subsequence of the executed instructions, each stretch as executed.
NR == FNR { if ($1 !~ /^#/) t[++n] = $1; next }
{ while (i < n && t[++i] != $1) ; if (t[i] != $1) { bad = 1; print "no"; exit } m++ }
END { if (!bad && m) print m }
