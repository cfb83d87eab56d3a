/* recursion: deep recursion (depth 5000), fib, ackermann, mutual recursion:
 * overflows a 64-entry return stack so returns are both compressed and not. */
#include <stdio.h>

volatile unsigned long sink;

/* Not a tail call and not a linear accumulator, so gcc keeps the recursion. */
__attribute__((noinline)) static unsigned long deep(int n)
{
    if (n == 0)
        return 1;
    unsigned long r = deep(n - 1);
    sink = r;
    return (r ^ (r >> 3)) + (unsigned long)(n & 7);
}

__attribute__((noinline)) static unsigned long fib(int n)
{
    if (n < 2)
        return (unsigned long)n;
    return fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) static unsigned long ack(unsigned long m, unsigned long n)
{
    if (m == 0)
        return n + 1;
    if (n == 0)
        return ack(m - 1, 1);
    unsigned long t = ack(m, n - 1);
    sink = t;
    return ack(m - 1, t);
}

__attribute__((noinline)) static int is_odd(int n);
__attribute__((noinline)) static int is_even(int n)
{
    if (n == 0)
        return 1;
    int r = is_odd(n - 1);
    sink = (unsigned long)r;
    return r;
}
__attribute__((noinline)) static int is_odd(int n)
{
    if (n == 0)
        return 0;
    int r = is_even(n - 1);
    sink = (unsigned long)r;
    return r;
}

/* Walk depth up and down around the 64-entry boundary. */
__attribute__((noinline)) static unsigned long zigzag(int depth, int max)
{
    if (depth >= max)
        return (unsigned long)depth;
    unsigned long s = zigzag(depth + 1, max);
    if ((depth % 10) == 0)
        s += deep(20 + depth % 70);
    sink = s;
    return s + 1;
}

int main(void)
{
    unsigned long t = 0;
    t += deep(5000);
    t += deep(5000);
    t += deep(63);
    t += deep(64);
    t += deep(65);
    t += fib(20);
    t += ack(2, 20);
    t += ack(3, 4);
    t += (unsigned long)is_even(3001);
    t += (unsigned long)is_odd(3001);
    t += zigzag(0, 300);
    printf("recursion: %lu fib20=%lu ack34=%lu\n", t, fib(20), ack(3, 4));
    return 0;
}
