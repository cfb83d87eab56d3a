/* Benchmark guest for `make bench` (scripts/bench.sh): the same branchy ring-0 workload four
 * times, timed with RDTSC (host time under TCG): without any tracing, with tracing configured but
 * disabled (IA32_RTIT_CTL written with TraceEn = 0), with Intel PT on into a single range (a 1 MiB
 * circular range), and with Intel PT on into a ToPA table (two 512 KiB regions and END back to
 * the table). Prints "BENCH off=<cycles> configured=<cycles> on=<cycles> topa=<cycles>
 * bytes=<trace bytes>"; without Intel PT (no plugin) the last three phases run untraced. */
#include "bench_loop.h"

void test_main(void)
{
    enum { N = 3000000 };
    uint32_t r[4];
    cpuid(7, 0, r);
    int pt = (r[1] >> 25) & 1;
    uint64_t off = timed(N), configured, on, topa, bytes = 0;
    if (pt) {
        uint8_t *buf = alloc_aligned(1 << 20, 1 << 20);
        wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
        wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, (1 << 20) - 1);
        uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
        wrmsr(IA32_RTIT_CTL, ctl);
        configured = timed(N);
        wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
        on = timed(N);
        wrmsr(IA32_RTIT_CTL, ctl);
        uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        bytes = mp >> 32; /* offset in the 1 MiB range (wraps: a lower bound) */
        uint64_t *table = alloc_aligned(4096, 4096);
        table[0] = (uint64_t)buf | TOPA_SIZE(7);               /* 512 KiB */
        table[1] = (uint64_t)(buf + (1 << 19)) | TOPA_SIZE(7); /* 512 KiB */
        table[2] = (uint64_t)table | TOPA_END;
        wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)table);
        wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F);
        wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TOPA | RTIT_CTL_TRACEEN);
        topa = timed(N);
        wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TOPA);
    } else {
        configured = timed(N);
        on = timed(N);
        topa = timed(N);
    }
    printf("BENCH pt=%d off=%lu configured=%lu on=%lu topa=%lu bytes=%lu\n", pt, off, configured, on, topa, bytes);
}
