/* setjmp: setjmp/longjmp across several frames, repeatedly; nested jmp_bufs.
 * longjmp produces returns that do not match their calls. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf outer, inner;
static volatile unsigned long sink;

__attribute__((noinline)) static void level(int depth, int target, int val)
{
    sink += (unsigned long)depth;
    if (depth == target)
        longjmp(outer, val);
    if (depth > 1000)
        return; /* never: target is always reached first */
    level(depth + 1, target, val);
    sink ^= (unsigned long)depth; /* never reached when the jump happens */
}

__attribute__((noinline)) static int inner_work(int k)
{
    if (k % 3 == 0)
        longjmp(inner, k + 1);
    return k * 2;
}

__attribute__((noinline)) static int middle(int k)
{
    volatile int r = 0;
    int v = setjmp(inner);
    if (v == 0) {
        r = inner_work(k);
    } else {
        r = -v;
        if (k % 7 == 0)
            longjmp(outer, 1000 + k); /* jump past this frame too */
    }
    return r;
}

int main(void)
{
    volatile long total = 0;
    volatile int i;
    for (i = 0; i < 300; i++) {
        int v = setjmp(outer);
        if (v == 0) {
            level(0, 1 + (i % 9) * 9, i + 1); /* depths 1..73 */
        } else {
            total += v;
        }
    }
    for (i = 0; i < 200; i++) {
        int v = setjmp(outer);
        if (v == 0)
            total += middle(i);
        else
            total += v * 3;
    }
    printf("setjmp: total=%ld sink=%lu\n", (long)total, sink);
    return 0;
}
