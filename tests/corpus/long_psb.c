/* long_psb: ~5-10M instructions of branchy work (a small stack-bytecode interpreter
 * dispatching through a jump table, and an LZ77-style compressor + decompressor over a
 * generated buffer), long enough to cross many PSB packets. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------- bytecode interpreter ---------------- */
enum { OP_PUSH, OP_LOAD, OP_STORE, OP_ADD, OP_SUB, OP_MUL, OP_MOD, OP_LT, OP_JZ, OP_JMP,
       OP_DUP, OP_DROP, OP_SWAP, OP_INC, OP_PRINTACC, OP_HALT };

struct insn { uint8_t op; int32_t arg; };

/* Count primes below N by trial division:
 *   n = 2; count = 0
 *   loop: if !(n < N) goto done
 *     d = 2; isp = 1
 *     inner: if !(d*d < n+1) goto check
 *       if (n % d == 0) { isp = 0; goto check }
 *       d++ ; goto inner
 *     check: count += isp; n++; goto loop
 *   done: halt */
enum { V_N, V_COUNT, V_D, V_ISP, V_ACC };
static const struct insn prog[] = {
    /* 0 */ {OP_PUSH, 2},  {OP_STORE, V_N},
    /* 2 */ {OP_PUSH, 0},  {OP_STORE, V_COUNT},
    /* 4 loop */ {OP_LOAD, V_N}, {OP_PUSH, 0 /* patched: N */}, {OP_LT, 0}, {OP_JZ, 40},
    /* 8 */ {OP_PUSH, 2}, {OP_STORE, V_D}, {OP_PUSH, 1}, {OP_STORE, V_ISP},
    /* 12 inner */ {OP_LOAD, V_D}, {OP_DUP, 0}, {OP_MUL, 0}, {OP_LOAD, V_N}, {OP_INC, 0},
    /* 17 */ {OP_LT, 0}, {OP_JZ, 32},
    /* 19 */ {OP_LOAD, V_N}, {OP_LOAD, V_D}, {OP_MOD, 0}, {OP_JZ, 28},
    /* 23 */ {OP_LOAD, V_D}, {OP_INC, 0}, {OP_STORE, V_D}, {OP_JMP, 12}, {OP_HALT, 0},
    /* 28 */ {OP_PUSH, 0}, {OP_STORE, V_ISP}, {OP_JMP, 32}, {OP_HALT, 0},
    /* 32 check */ {OP_LOAD, V_COUNT}, {OP_LOAD, V_ISP}, {OP_ADD, 0}, {OP_STORE, V_COUNT},
    /* 36 */ {OP_LOAD, V_N}, {OP_INC, 0}, {OP_STORE, V_N}, {OP_JMP, 4},
    /* 40 done */ {OP_LOAD, V_COUNT}, {OP_PRINTACC, 0}, {OP_HALT, 0},
};

__attribute__((noinline)) static long run(const struct insn *code, long *vars)
{
    long stack[64];
    int sp = 0, pc = 0;
    for (;;) {
        const struct insn *in = &code[pc++];
        switch (in->op) {
        case OP_PUSH: stack[sp++] = in->arg; break;
        case OP_LOAD: stack[sp++] = vars[in->arg]; break;
        case OP_STORE: vars[in->arg] = stack[--sp]; break;
        case OP_ADD: sp--; stack[sp - 1] += stack[sp]; break;
        case OP_SUB: sp--; stack[sp - 1] -= stack[sp]; break;
        case OP_MUL: sp--; stack[sp - 1] *= stack[sp]; break;
        case OP_MOD: sp--; stack[sp - 1] %= stack[sp]; break;
        case OP_LT: sp--; stack[sp - 1] = stack[sp - 1] < stack[sp]; break;
        case OP_JZ: if (stack[--sp] == 0) pc = in->arg; break;
        case OP_JMP: pc = in->arg; break;
        case OP_DUP: stack[sp] = stack[sp - 1]; sp++; break;
        case OP_DROP: sp--; break;
        case OP_SWAP: { long t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; } break;
        case OP_INC: stack[sp - 1]++; break;
        case OP_PRINTACC: vars[V_ACC] = stack[--sp]; break;
        case OP_HALT: return vars[V_ACC];
        default: return -1;
        }
    }
}

/* ---------------- LZ77-style compressor ---------------- */
#define BUF 8000
static uint8_t input[BUF], packed[BUF * 2], unpacked[BUF];

static void gen_input(void)
{
    uint32_t s = 99;
    static const char *words[] = {"alpha ", "beta ", "gamma ", "delta ", "pt ", "trace ",
                                  "packet ", "tnt ", "tip ", "psb "};
    size_t n = 0;
    while (n < BUF) {
        s = s * 1103515245u + 12345u;
        uint32_t r = s >> 16;
        if (r % 7 == 0) { /* noise byte */
            input[n++] = (uint8_t)(r >> 3);
            continue;
        }
        const char *w = words[r % 10];
        while (*w && n < BUF)
            input[n++] = (uint8_t)*w++;
    }
}

/* token: 0x00 len literal-bytes  |  0x01 offset(2) len(1) */
__attribute__((noinline)) static size_t compress(const uint8_t *in, size_t n, uint8_t *out)
{
    size_t i = 0, o = 0;
    size_t lit_start = 0;
    while (i < n) {
        size_t best_len = 0, best_off = 0;
        size_t window = i < 256 ? i : 256;
        for (size_t off = 1; off <= window; off++) {
            if (in[i - off] != in[i])
                continue;
            size_t len = 0;
            while (len < 255 && i + len < n && in[i - off + len] == in[i + len])
                len++;
            if (len > best_len) {
                best_len = len;
                best_off = off;
                if (len >= 32)
                    break;
            }
        }
        if (best_len >= 4) {
            while (lit_start < i) { /* flush literals */
                size_t l = i - lit_start > 255 ? 255 : i - lit_start;
                out[o++] = 0;
                out[o++] = (uint8_t)l;
                memcpy(out + o, in + lit_start, l);
                o += l;
                lit_start += l;
            }
            out[o++] = 1;
            out[o++] = (uint8_t)(best_off & 0xff);
            out[o++] = (uint8_t)(best_off >> 8);
            out[o++] = (uint8_t)best_len;
            i += best_len;
            lit_start = i;
        } else {
            i++;
        }
    }
    while (lit_start < n) {
        size_t l = n - lit_start > 255 ? 255 : n - lit_start;
        out[o++] = 0;
        out[o++] = (uint8_t)l;
        memcpy(out + o, in + lit_start, l);
        o += l;
        lit_start += l;
    }
    return o;
}

__attribute__((noinline)) static size_t decompress(const uint8_t *in, size_t n, uint8_t *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        if (in[i] == 0) {
            size_t l = in[i + 1];
            for (size_t k = 0; k < l; k++)
                out[o++] = in[i + 2 + k];
            i += 2 + l;
        } else {
            size_t off = in[i + 1] | ((size_t)in[i + 2] << 8);
            size_t l = in[i + 3];
            for (size_t k = 0; k < l; k++, o++)
                out[o] = out[o - off];
            i += 4;
        }
    }
    return o;
}

int main(void)
{
    struct insn code[sizeof prog / sizeof prog[0]];
    memcpy(code, prog, sizeof prog);
    code[5].arg = 2000; /* N */
    long vars[8] = {0};
    long primes = run(code, vars);
    if (primes != 303)
        return 2;

    gen_input();
    size_t clen = compress(input, BUF, packed);
    size_t dlen = decompress(packed, clen, unpacked);
    if (dlen != BUF || memcmp(input, unpacked, BUF) != 0)
        return 3;
    uint32_t h = 0;
    for (size_t i = 0; i < clen; i++)
        h = h * 31u + packed[i];
    printf("long_psb: primes=%ld clen=%zu hash=%u\n", primes, clen, h);
    return 0;
}
