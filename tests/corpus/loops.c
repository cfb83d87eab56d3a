/* loops: nested loops, data-dependent conditional branches, loop/jrcxz in inline asm. */
#include <stdint.h>
#include <stdio.h>

static uint32_t seed = 12345u;
static inline uint32_t rnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return seed >> 16;
}

static unsigned data[256];

/* Sum n..1 with the `loop` instruction; jrcxz skips the loop when n == 0. */
__attribute__((noinline)) static unsigned long asm_loop(unsigned long n)
{
    unsigned long acc = 0, cnt = n;
    __asm__ volatile("jrcxz 2f\n\t"
                     "1:\n\t"
                     "add %%rcx, %0\n\t"
                     "loop 1b\n\t"
                     "2:\n\t"
                     : "+r"(acc), "+c"(cnt)
                     :
                     : "cc");
    return acc;
}

/* Count down with jrcxz as the loop exit test (taken once at the end). */
__attribute__((noinline)) static unsigned long asm_jrcxz(unsigned long n)
{
    unsigned long acc = 0, cnt = n;
    __asm__ volatile("1:\n\t"
                     "jrcxz 2f\n\t"
                     "lea 3(%0,%%rcx,2), %0\n\t"
                     "dec %%rcx\n\t"
                     "jmp 1b\n\t"
                     "2:\n\t"
                     : "+r"(acc), "+c"(cnt)
                     :
                     : "cc");
    return acc;
}

__attribute__((noinline)) static void insertion_sort(unsigned *a, int n)
{
    for (int i = 1; i < n; i++) {
        unsigned v = a[i];
        int j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

__attribute__((noinline)) static int popcount_loop(unsigned x)
{
    int c = 0;
    while (x) {
        x &= x - 1;
        c++;
    }
    return c;
}

int main(void)
{
    unsigned long sum = 0;
    for (int i = 0; i < 256; i++)
        data[i] = rnd() & 0x3ff;

    /* Nested loops with a mix of taken / not-taken branches. */
    for (int i = 0; i < 120; i++) {
        unsigned thr = (unsigned)(i * 37) & 0x3ff;
        for (int j = 0; j < 64; j++) {
            unsigned v = data[(i + j) & 255];
            if (v > thr)
                sum += v;
            else if (v & 1)
                sum ^= v << 3;
            else
                sum -= j;
            if ((v & 15) == 0)
                continue;
            if (v == 1023)
                break;
            if (v & 0x100)
                sum += popcount_loop(v * 2654435761u);
        }
    }

    /* Data-dependent trip counts. */
    for (int i = 0; i < 200; i++) {
        unsigned n = data[i] & 31;
        unsigned k = 0;
        do {
            k += n & 3;
            n >>= 1;
        } while (n);
        sum += k;
        sum += asm_loop(data[i] & 15);     /* 0 takes the jrcxz */
        sum += asm_jrcxz(data[255 - i] & 7);
    }

    /* Insertion sort: inner loop trip count depends on the data. */
    insertion_sort(data, 256);
    for (int i = 1; i < 256; i++)
        if (data[i - 1] > data[i])
            return 1;

    /* Binary searches: unpredictable branch directions. */
    for (int q = 0; q < 300; q++) {
        unsigned key = rnd() & 0x3ff;
        int lo = 0, hi = 255;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (data[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        sum += lo;
    }

    printf("loops: sum=%lu\n", sum);
    return 0;
}
