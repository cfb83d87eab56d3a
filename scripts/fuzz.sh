#!/usr/bin/env bash
# Fuzz pttrace-core with cargo-fuzz (libFuzzer): every target for FUZZ_SECONDS (default 60) on
# the committed seed corpus, one job at a time. Exits non-zero on the first crash, leak, timeout
# or invariant violation; libFuzzer then prints the reproducer path (fuzz/artifacts/<target>/).
#
#   FUZZ_SECONDS=300 bash scripts/fuzz.sh                 # all targets, 5 minutes each
#   bash scripts/fuzz.sh packet_decode topa_tables        # some targets
#   FUZZ_RUNS=0 bash scripts/fuzz.sh                      # only replay the corpus (a quick check)
#
# cargo-fuzz needs nightly-only rustc flags (-Zsanitizer, -Cpasses=sancov); with a stable
# toolchain RUSTC_BOOTSTRAP=1 unlocks them. New inputs libFuzzer finds go to
# fuzz/corpus-work/<target>/ (git-ignored), so the committed seeds in fuzz/corpus/ stay small;
# `cargo fuzz cmin` can fold good ones back.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(packet_decode topa_tables msr_sequences)
fi

export PATH="$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1
# The machines have two cores shared with other work: build with two jobs, fuzz with one.
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz (a few minutes)" >&2
    cargo install cargo-fuzz --locked
fi

cd "$ROOT"
cargo fuzz build --fuzz-dir fuzz

status=0
for t in "${TARGETS[@]}"; do
    work="fuzz/corpus-work/$t"
    mkdir -p "$work" "fuzz/artifacts/$t"
    if [ -n "${FUZZ_RUNS:-}" ]; then
        limit=(-runs="$FUZZ_RUNS")
    else
        limit=(-max_total_time="$FUZZ_SECONDS")
    fi
    echo "== $t: ${limit[*]}" >&2
    # -timeout: one input running longer than 10 s is a hang (unbounded ToPA walk, decoder loop).
    # -rss_limit_mb: the targets use a few hundred MiB at most.
    if ! cargo fuzz run --fuzz-dir fuzz "$t" "$work" "fuzz/corpus/$t" -- \
        "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1; then
        echo "fuzz.sh: $t FAILED (reproducer under fuzz/artifacts/$t/)" >&2
        status=1
        break
    fi
done
exit $status
