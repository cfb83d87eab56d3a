/* A workload that produces trace bytes quickly: indirect calls (TIP), compressed RETs and
 * conditional branches (TNT). Shared by the ToPA / single-range tests, which compare streams of
 * the same code path within one test. */
#ifndef PT_CHURN_H
#define PT_CHURN_H
#include "pt.h"

__attribute__((noinline)) static uint64_t f0(uint64_t x) { return x * 3 + 1; }
__attribute__((noinline)) static uint64_t f1(uint64_t x) { return x ^ (x >> 3); }
__attribute__((noinline)) static uint64_t f2(uint64_t x) { return x + 0x9E37; }
__attribute__((noinline)) static uint64_t f3(uint64_t x) { return (x << 1) | 1; }
__attribute__((noinline)) static uint64_t f4(uint64_t x) { return x - 7; }
__attribute__((noinline)) static uint64_t f5(uint64_t x) { return x * 5; }
__attribute__((noinline)) static uint64_t f6(uint64_t x) { return ~x; }
__attribute__((noinline)) static uint64_t f7(uint64_t x) { return x >> 1; }
static uint64_t (*volatile fns[8])(uint64_t) = { f0, f1, f2, f3, f4, f5, f6, f7 };

__attribute__((noinline)) static uint64_t churn(uint64_t n)
{
    uint64_t acc = 1;
    for (uint64_t i = 0; i < n; i++) {
        acc = fns[(i * 5 + (acc & 3)) & 7](acc + i);
        if (acc & 4)
            acc += i;
    }
    return acc;
}

/* The one code path every traced run of a test takes, so runs of the same length produce the same
 * bytes: enable with ctl | TraceEn, read STATUS, run churn(n), read CTL and STATUS while TraceEn is
 * still 1 (RDMSR makes no packets), disable with ctl. */
static volatile uint64_t churn_sink, traced_status_at_enable, traced_ctl_on, traced_status_on;
__attribute__((noinline, unused)) static void traced_run(uint64_t ctl, uint64_t n)
{
    wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
    traced_status_at_enable = rdmsr(IA32_RTIT_STATUS);
    churn_sink = churn(n);
    traced_ctl_on = rdmsr(IA32_RTIT_CTL);
    traced_status_on = rdmsr(IA32_RTIT_STATUS);
    wrmsr(IA32_RTIT_CTL, ctl);
}
#endif
