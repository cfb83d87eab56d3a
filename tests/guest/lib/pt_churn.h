/* A workload that produces trace bytes quickly: indirect calls (TIP), compressed RETs and
 * conditional branches (TNT). Shared by the ToPA / single-range tests, which compare streams of
 * the same code path within one test. */
#ifndef PT_CHURN_H
#define PT_CHURN_H
#include "guest.h"

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
#endif
