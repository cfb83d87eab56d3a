/* The branchy ring-0 function most trace tests run (conditional branches whose outcome changes
 * with i, a loop back-edge, a call and a return), so their traces exercise TNT, RET and TIP. */
#ifndef GUEST_WORK_H
#define GUEST_WORK_H
#include <stdint.h>

__attribute__((noinline, noipa, unused)) static uint64_t work(int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0)
            acc += i;
        else
            acc ^= acc << 1;
    }
    return acc;
}

/* The loop the LBR tests overflow a counter in (t_lbr, t_lbr_core2, t_arch_lbr): a taken
 * back-edge and a data-dependent add per iteration, ~5 instructions; its whole body lies within
 * 0x100 bytes of its start, where those tests look for the youngest record at the PMI. */
__attribute__((noinline, unused)) static uint64_t branchy(uint64_t n)
{
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        asm volatile("" : "+r"(acc));
        acc += i & 3 ? i : 1;
    }
    return acc;
}
#endif
