/*
 * calls N [M]: calls pttrace_target() exactly N times (default 1000) from one loop, then prints
 * "calls=N sum=S". With M > 0 the whole thing is repeated M times (for runs long enough to sample).
 *
 * Built static (gcc -static) into the guest's /usr/local/bin by scripts/linux-guest/build.sh, with
 * symbols, so a decoder can find pttrace_target and count its entries in a trace: every call is a
 * direct near CALL to pttrace_target and every return a RET back into main's loop.
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) unsigned long pttrace_target(unsigned long x)
{
    /* Keep the call from being folded away: the compiler cannot see through the asm. */
    __asm__ volatile("" : "+r"(x));
    return x * 2654435761UL ^ (x >> 7);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 0) : 1000;
    long m = argc > 2 ? strtol(argv[2], NULL, 0) : 1;
    unsigned long sum = 0;
    if (n < 0 || m < 1) {
        fprintf(stderr, "usage: calls [N >= 0] [M >= 1]\n");
        return 2;
    }
    for (long r = 0; r < m; r++)
        for (long i = 0; i < n; i++)
            sum += pttrace_target((unsigned long)i);
    printf("calls=%ld sum=%lu\n", n * m, sum);
    return 0;
}
