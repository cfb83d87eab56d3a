/* Benchmark guest for `make bench` (scripts/bench.sh, issue 13/14): the cost of the counting
 * PMU. b_pt_loop's branchy ring-0 workload timed with RDTSC (host time under TCG) without
 * counting, then with IA32_FIXED_CTR0 (INST_RETIRED.ANY) and IA32_PMC0 (BR_INST_RETIRED
 * .ALL_BRANCHES, event C4H umask 00H) counting at CPL 0 (SDM Vol. 3B §20.2). Prints
 * "BENCH pmu=<0/1> off=<cycles> counting=<cycles> insns=<FIXED_CTR0> branches=<PMC0>"; without
 * the plugin (no architectural PMU in CPUID.0AH) both phases run uncounted. */
#include "bench_loop.h"


void test_main(void)
{
    enum { N = 3000000 };
    uint32_t r[4];
    cpuid(0, 0, r);
    int pmu = 0;
    if (r[0] >= 0xA) {
        cpuid(0xA, 0, r);
        /* Version >= 2, at least one GP counter and one fixed counter, branches not marked
         * unavailable (EBX[5]). */
        pmu = (r[0] & 0xFF) >= 2 && ((r[0] >> 8) & 0xFF) >= 1 && (r[3] & 0x1F) >= 1 && !(r[1] & (1 << 5));
    }
    uint64_t off = timed(N), counting, insns = 0, branches = 0;
    if (pmu) {
        wrmsr(IA32_FIXED_CTR0, 0);
        wrmsr(IA32_PMC0, 0);
        wrmsr(IA32_FIXED_CTR_CTRL, 1);                        /* CTR0: OS */
        wrmsr(IA32_PERFEVTSEL0, 0xC4 | (1ull << 17) | (1ull << 22)); /* OS, EN */
        wrmsr(IA32_PERF_GLOBAL_CTRL, (1ull << 32) | 1);
        counting = timed(N);
        wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
        insns = rdmsr(IA32_FIXED_CTR0);
        branches = rdmsr(IA32_PMC0);
    } else {
        counting = timed(N);
    }
    printf("BENCH pmu=%d off=%lu counting=%lu insns=%lu branches=%lu\n", pmu, off, counting, insns, branches);
}
