# pttrace — see README.md. `make demo` and `make test` do all set-up on a fresh Debian machine.
SHELL := /bin/bash
CARGO ?= cargo
RELEASE := target/release
PLUGIN := $(RELEASE)/libpttrace.so
TOOL := $(RELEASE)/pttrace

.PHONY: all deps qemu print-qemu demo test test-unit test-corpus test-linux bench stress fuzz clean

all: deps
	$(CARGO) build --release -p pttrace-plugin -p pttrace

deps:
	@bash scripts/install-deps.sh

# Builds QEMU >= 10.2 if needed (cached outside the clone) and prints the directory holding
# qemu-x86_64 and qemu-system-x86_64.
print-qemu: deps
	@bash scripts/qemu.sh

qemu: deps
	@bash scripts/qemu.sh >/dev/null

demo: all qemu
	@bash scripts/demo.sh

test-unit: all
	$(CARGO) test --release --workspace --exclude pttrace-plugin

test-corpus: all qemu
	@bash tests/run-corpus.sh
	@bash tests/stream-digests.sh
	@bash tests/options.sh
	@bash tests/run-guest.sh
	@bash tests/record-identity.sh
	@bash tests/signals.sh
	@bash tests/perf-data.sh
	@bash tests/code-versions.sh
	@bash tests/fork.sh
	@echo "code-versions.sh and fork.sh again, user mode recording only mispredicted blocks from the start (PTTRACE_PREDICT=2)"
	@PTTRACE_PREDICT=2 bash tests/code-versions.sh
	@PTTRACE_PREDICT=2 bash tests/fork.sh

test: test-unit test-corpus test-linux

# A stock Debian Linux guest running perf with the emulated Intel PT and perf's own shell tests
# from linux-source-6.1 (~12-15 minutes under TCG).
test-linux: all qemu
	@bash tests/linux/checkers-selftest.sh
	@bash tests/linux/perf_pt.sh
	@bash tests/linux/perf_shell_tests.sh
	@bash tests/linux/arch_lbr.sh
	@bash tests/linux/icelake_pebs.sh
	@bash tests/linux/core2_pebs.sh

# Cost against the same QEMU without a plugin (prints ratios; not a test).
bench: all qemu
	@bash scripts/bench.sh

# Issue 9 stress: 4 vCPUs tracing with frequent enable/disable, CR3 switches, interrupts and BTS
# for STRESS_ROUNDS rounds (default 10000, a few minutes); make test runs 40 of them.
STRESS_ROUNDS ?= 10000
stress: all qemu
	@STRESS_ROUNDS=$(STRESS_ROUNDS) GUESTS=t_stress_smp bash tests/run-guest.sh

# Fuzz the core model with cargo-fuzz/libFuzzer (stable rustc via RUSTC_BOOTSTRAP=1; installs
# cargo-fuzz if missing): every target FUZZ_SECONDS (default 60) on fuzz/corpus, fails on a crash.
fuzz:
	@bash scripts/fuzz.sh

clean:
	$(CARGO) clean
