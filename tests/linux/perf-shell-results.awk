# Host side: the results of perf's own shell tests from the guest's console log (run by
# tests/linux/perf_shell_tests.sh through `perf test -v DESC`).
#
#   awk -f perf-shell-results.awk console.log
#
# Prints one line per result, "<script>/<sub-test> pass|skip|fail" for the sub-tests of
# test_intel_pt.sh ("Miscellaneous Intel PT testing") and "<perf test description> pass|skip|fail"
# for each whole script (perf test's verdict: Ok, Skip, FAILED!), and "<description>/<part>
# pass|skip|fail" for the parts that stat.sh, record.sh and the CSV/JSON linters report.
#
# test_intel_pt.sh prints "--- Test <what> ---" before each sub-test and "OK" as the last line of
# one that passed; one that skips prints a line starting with "SKIP" or ending in "skipping"
# (and returns 2). So a sub-test is "pass" only when its last line is OK and it printed no skip
# line, "skip" when it printed a skip line, else "fail". Lines of the kernel log ("[ 12.3] ...")
# and perf record's own chatter between them are ignored. The sub-test's name is the function of
# test_intel_pt.sh that prints that heading.
function subtest_name(what) {
	if (what == "system-wide sideband") return "system_wide_side_band"
	if (what == "per-thread recording") return "per_thread"
	if (what == "per-thread (incl. kernel) recording") return "per_thread_k"
	if (what == "tracing self-modifying code that uses jitdump") return "jitdump"
	if (what == "with MTC and TSC disabled") return "packet_filter"
	if (what == "with branches disabled") return "disable_branch"
	if (what == "with/without CYC") return "time_cyc"
	if (what == "recording with sample mode") return "sample"
	if (what == "with kernel trace") return "kernel_trace"
	if (what == "virtual LBR") return "virtual_lbr"
	if (what == "power events") return "power_event"
	if (what == "with TNT packets disabled") return "no_tnt"
	if (what == "with event_trace") return "event_trace"
	return "unknown(" what ")"
}
function close_subtest() {
	if (cur == "") return
	print "test_intel_pt/" cur " " (skipped ? "skip" : (last == "OK" ? "pass" : "fail"))
	cur = ""
}
{
	gsub(/\r/, "")
	gsub(/\033\[[0-9;]*m/, "")
}
/^\[ *[0-9]+\.[0-9]+\]/ { next }
/^\[ perf record: / || /^Lowering default frequency rate/ || /^Please consider tweaking/ { next }
/^=== CMD / { close_subtest(); in_ipt = 0 }
/^--- start ---$/ { next }
/^ *[0-9]+: Miscellaneous Intel PT testing +:/ { in_ipt = 1; next }
in_ipt && /^--- Test .* ---$/ {
	close_subtest()
	what = $0
	sub(/^--- Test /, "", what); sub(/ +---$/, "", what)
	cur = subtest_name(what); skipped = 0; last = ""
	next
}
in_ipt && /^--- (Cleaning up|Done) ---$/ { close_subtest(); next }
cur != "" {
	if ($0 ~ /^SKIP/ || $0 ~ /skipping$/) skipped = 1
	if ($0 !~ /^[ \t]*$/) last = $0
}
# Scripts that report their own parts as "<part> [Success]", "[Skipped ...]" or "[Failed ...]"
# (stat.sh, record.sh, stat+csv_output.sh, stat+json_output.sh): one line each, after the
# script's description.
/^ *[0-9]+: .* +:$/ { desc_now = $0; sub(/^ *[0-9]+: /, "", desc_now); sub(/ +:$/, "", desc_now) }
/ \[(Success|Skipped[^]]*|Failed[^]]*)\]$/ && desc_now != "" {
	part = $0; sub(/ \[[^]]*\]$/, "", part); sub(/^.*Checking (CSV|json) output: /, "", part)
	res = $0; sub(/^.* \[/, "", res)
	print desc_now "/" part " " (res ~ /^Success/ ? "pass" : (res ~ /^Skipped/ ? "skip" : "fail"))
}
/: (Ok|Skip|FAILED!)$/ && !/^ *[0-9]+: / {
	close_subtest(); in_ipt = 0
	verdict = $0; sub(/.*: /, "", verdict)
	desc = $0; sub(/: (Ok|Skip|FAILED!)$/, "", desc)
	print desc " " (verdict == "Ok" ? "pass" : (verdict == "Skip" ? "skip" : "fail"))
}
END { close_subtest() }
