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
#endif
