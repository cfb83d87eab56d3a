/* indirect: function-pointer calls, switch via jump table, vtable-like dispatch,
 * tail calls through pointers (-O2: sibling calls become `jmp *reg`), computed goto. */
#include <stdint.h>
#include <stdio.h>

static uint32_t seed = 777u;
static inline uint32_t rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
}

/* ---- plain function-pointer table ---- */
__attribute__((noinline)) static long op_add(long a, long b) { return a + b; }
__attribute__((noinline)) static long op_sub(long a, long b) { return a - b; }
__attribute__((noinline)) static long op_xor(long a, long b) { return a ^ b; }
__attribute__((noinline)) static long op_mix(long a, long b) { return (a << 3) ^ (b >> 1); }
__attribute__((noinline)) static long op_min(long a, long b) { return a < b ? a : b; }

typedef long (*binop)(long, long);
static binop volatile ops[5] = {op_add, op_sub, op_xor, op_mix, op_min};

/* ---- switch compiled to a jump table ---- */
__attribute__((noinline)) static long interp(unsigned op, long x)
{
    switch (op) {
    case 0: x += 1; break;
    case 1: x -= 3; break;
    case 2: x ^= 0x55; break;
    case 3: x <<= 1; break;
    case 4: x >>= 2; break;
    case 5: x *= 7; break;
    case 6: x = ~x; break;
    case 7: x += x >> 4; break;
    case 8: x -= (x & 0xff); break;
    case 9: x |= 0x100; break;
    case 10: x &= 0xffffff; break;
    case 11: x = x * 3 + 1; break;
    case 12: x ^= x >> 7; break;
    case 13: x += 1000; break;
    case 14: x = (x >> 1) | (x << 9); break;
    case 15: x -= 17; break;
    default: x = 0; break;
    }
    return x;
}

/* ---- virtual-dispatch-like struct of function pointers ---- */
struct shape;
struct vtable {
    long (*area)(const struct shape *);
    long (*perimeter)(const struct shape *);
    void (*scale)(struct shape *, long);
};
struct shape {
    const struct vtable *vt;
    long a, b;
};
__attribute__((noinline)) static long rect_area(const struct shape *s) { return s->a * s->b; }
__attribute__((noinline)) static long rect_per(const struct shape *s) { return 2 * (s->a + s->b); }
__attribute__((noinline)) static void rect_scale(struct shape *s, long k) { s->a = s->a * k % 1000; s->b = s->b * k % 1000; }
__attribute__((noinline)) static long sq_area(const struct shape *s) { return s->a * s->a; }
__attribute__((noinline)) static long sq_per(const struct shape *s) { return 4 * s->a; }
__attribute__((noinline)) static void sq_scale(struct shape *s, long k) { s->a = (s->a + k) % 997; }
__attribute__((noinline)) static long tri_area(const struct shape *s) { return s->a * s->b / 2; }
__attribute__((noinline)) static long tri_per(const struct shape *s) { return s->a + s->b + (s->a > s->b ? s->a : s->b); }
__attribute__((noinline)) static void tri_scale(struct shape *s, long k) { s->b = (s->b ^ k) % 991; }
static const struct vtable rect_vt = {rect_area, rect_per, rect_scale};
static const struct vtable sq_vt = {sq_area, sq_per, sq_scale};
static const struct vtable tri_vt = {tri_area, tri_per, tri_scale};

/* ---- tail calls through pointers ---- */
typedef long (*stepfn)(int n, long x);
static long step_a(int n, long x);
static long step_b(int n, long x);
static long step_c(int n, long x);
static stepfn volatile steps[3] = {step_a, step_b, step_c};
__attribute__((noinline)) static long step_a(int n, long x)
{
    if (n == 0)
        return x;
    return steps[(x + 1) % 3](n - 1, x + 5);
}
__attribute__((noinline)) static long step_b(int n, long x)
{
    if (n == 0)
        return x;
    return steps[(x >> 1) % 3](n - 1, x * 3 + 1);
}
__attribute__((noinline)) static long step_c(int n, long x)
{
    if (n == 0)
        return x;
    return steps[x % 3](n - 1, (x >> 2) + 11);
}
__attribute__((noinline)) static long apply(binop f, long a, long b)
{
    return f(a + 1, b - 1); /* sibling call: jmp *%rax/%rdi */
}

/* ---- computed goto (GNU C) ---- */
__attribute__((noinline)) static long threaded(const unsigned char *code, int n)
{
    static void *const labels[] = {&&L0, &&L1, &&L2, &&L3};
    long acc = 1;
    int pc = 0;
#define NEXT                                                                                       \
    do {                                                                                           \
        if (pc >= n)                                                                               \
            return acc;                                                                            \
        goto *labels[code[pc++] & 3];                                                              \
    } while (0)
    NEXT;
L0: acc += 3; NEXT;
L1: acc ^= acc << 2; NEXT;
L2: acc -= 7; NEXT;
L3: acc = (acc >> 1) + pc; NEXT;
#undef NEXT
}

int main(void)
{
    long acc = 0;
    for (int i = 0; i < 2000; i++) {
        unsigned r = rnd();
        acc = ops[r % 5](acc, (long)(r & 0xffff));
        acc = apply(ops[(r >> 4) % 5], acc, i);
    }
    long x = 1;
    for (int i = 0; i < 4000; i++)
        x = interp(rnd() % 17, x);

    struct shape shapes[6] = {
        {&rect_vt, 3, 4}, {&sq_vt, 5, 0}, {&tri_vt, 6, 8},
        {&sq_vt, 7, 0},   {&rect_vt, 9, 2}, {&tri_vt, 10, 3},
    };
    long geo = 0;
    for (int i = 0; i < 600; i++) {
        struct shape *s = &shapes[rnd() % 6];
        geo += s->vt->area(s) + s->vt->perimeter(s);
        s->vt->scale(s, i % 13 + 1);
    }

    long t = 0;
    for (int i = 0; i < 50; i++)
        t += steps[i % 3](60 + i, i);

    unsigned char code[512];
    for (int i = 0; i < 512; i++)
        code[i] = (unsigned char)rnd();
    long th = threaded(code, 512) + threaded(code + 7, 300);

    printf("indirect: acc=%ld x=%ld geo=%ld t=%ld th=%ld\n", acc, x, geo, t, th);
    return 0;
}
