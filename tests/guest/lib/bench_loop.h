/* The branchy ring-0 workload of the benchmark guests (b_pt_loop.c, b_pmu_loop.c), timed with
 * RDTSC (host time under TCG): one definition, so that their rows measure the same loop. */
#ifndef GUEST_BENCH_LOOP_H
#define GUEST_BENCH_LOOP_H
#include "pt.h"

static volatile uint64_t bench_sink;

__attribute__((noinline, noipa)) static uint64_t bench_work(int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++) {
        if ((i * 7) % 3 == 0)
            acc += i;
        else if (acc & 1)
            acc ^= acc << 1;
        else
            acc = (acc >> 3) + i;
    }
    return acc;
}

/* RDTSC cycles of bench_work(n). */
static uint64_t timed(int n)
{
    uint64_t t0 = rdtsc();
    bench_sink = bench_work(n);
    return rdtsc() - t0;
}
#endif
