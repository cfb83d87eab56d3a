/* make bench: a call-heavy loop (direct calls, returns, a conditional per iteration). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static unsigned long leaf(unsigned long x)
{
    __asm__ volatile("" : "+r"(x));
    return x * 2654435761UL ^ (x >> 7);
}

__attribute__((noinline)) static unsigned long mid(unsigned long x)
{
    return leaf(x) + (x & 1 ? leaf(x >> 1) : 0);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 0) : 4000000;
    unsigned long sum = 0;
    for (long i = 0; i < n; i++)
        sum += mid((unsigned long)i);
    printf("calls %ld sum %lu\n", n, sum);
    return 0;
}
