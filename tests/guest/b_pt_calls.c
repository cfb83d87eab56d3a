/* Benchmark guest (issue 13): a call-heavy ring-0 loop (the shape of tests/bench/calls.c: direct
 * CALLs, RETs, a conditional per iteration), timed with RDTSC (host time under TCG) without
 * tracing and with Intel PT on into a 1 MiB circular single range (BranchEn, RET compression
 * on). Every RET's target is an indirect transfer the plugin must find at run time. A third
 * phase (traced too) calls through a table of function pointers (CALL r/m64 with a memory
 * operand, as a PLT or a vtable does). Prints "BENCH pt=<0|1> off=<cycles> on=<cycles>
 * ind=<cycles> bytes=<offset in the range>". */
#include "pt.h"

static volatile uint64_t sink;

__attribute__((noinline, noipa)) static uint64_t leaf(uint64_t x)
{
    __asm__ volatile("" : "+r"(x));
    return x * 2654435761UL ^ (x >> 7);
}

__attribute__((noinline, noipa)) static uint64_t mid(uint64_t x)
{
    return leaf(x) + (x & 1 ? leaf(x >> 1) : 0);
}

__attribute__((noinline, noipa)) static uint64_t leaf2(uint64_t x)
{
    __asm__ volatile("" : "+r"(x));
    return x + 3;
}

/* Called as table[i & 1](x): gcc -O2 emits CALL [reg + reg * 8]. */
uint64_t (*table[2])(uint64_t) = { leaf, leaf2 };

__attribute__((noinline, noipa)) static uint64_t mid_ind(uint64_t x)
{
    return table[x & 1](x) + leaf(x);
}

/* Always inlined with a constant `f`: the loop calls `f` directly, as written out by hand. */
static inline __attribute__((always_inline)) uint64_t timed(uint64_t (*f)(uint64_t), int n)
{
    uint64_t t0 = rdtsc(), sum = 0;
    for (int i = 0; i < n; i++)
        sum += f((uint64_t)i);
    sink = sum;
    return rdtsc() - t0;
}

void test_main(void)
{
    enum { N = 2000000 };
    uint32_t r[4];
    cpuid(7, 0, r);
    int pt = (r[1] >> 25) & 1;
    uint64_t off = timed(mid, N), on, ind, bytes = 0;
    if (pt) {
        uint8_t *buf = alloc_aligned(1 << 20, 1 << 20);
        wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
        wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, (1 << 20) - 1);
        uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
        wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
        on = timed(mid, N);
        ind = timed(mid_ind, N);
        wrmsr(IA32_RTIT_CTL, ctl);
        bytes = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    } else {
        on = timed(mid, N);
        ind = timed(mid_ind, N);
    }
    printf("BENCH pt=%d off=%lu on=%lu ind=%lu bytes=%lu\n", pt, off, on, ind, bytes);
}
