/* make bench: a branchy integer workload, an LZ77-style compressor with a hash chain over
 * generated text-like data, then a bytecode interpreter summing over the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N (1 << 20)
static unsigned char in[N], out[N + N / 8 + 16];
static int head[1 << 14], prev_[N];

static size_t compress(const unsigned char *src, size_t n, unsigned char *dst)
{
    memset(head, -1, sizeof head);
    size_t o = 0, i = 0;
    while (i < n) {
        unsigned h = i + 3 <= n ? ((src[i] << 6) ^ (src[i + 1] << 3) ^ src[i + 2]) & 0x3FFF : 0;
        int best = 0, dist = 0, cand = i + 3 <= n ? head[h] : -1, tries = 8;
        while (cand >= 0 && tries--) {
            int l = 0;
            while (i + l < n && l < 255 && src[cand + l] == src[i + l])
                l++;
            if (l > best) {
                best = l;
                dist = (int)i - cand;
            }
            cand = prev_[cand];
        }
        if (i + 3 <= n) {
            prev_[i] = head[h];
            head[h] = (int)i;
        }
        if (best >= 4 && dist < 65536) {
            dst[o++] = 0xFF;
            dst[o++] = (unsigned char)best;
            dst[o++] = (unsigned char)dist;
            dst[o++] = (unsigned char)(dist >> 8);
            i += best;
        } else {
            dst[o++] = src[i] == 0xFF ? 0xFE : src[i];
            i++;
        }
    }
    return o;
}

static long interpret(const unsigned char *code, size_t n)
{
    long acc = 0, r1 = 1;
    for (size_t pc = 0; pc < n; pc++) {
        switch (code[pc] & 7) {
        case 0: acc += code[pc]; break;
        case 1: acc -= r1; break;
        case 2: r1 = (r1 * 3 + code[pc]) & 0xFFFF; break;
        case 3: if (acc & 1) acc >>= 1; else acc = acc * 3 + 1; break;
        case 4: acc ^= r1 << 2; break;
        case 5: r1 ^= acc; break;
        case 6: acc = (acc + r1) % 100003; break;
        default: if (code[pc] > 200) pc++; break;
        }
    }
    return acc;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    unsigned x = 12345;
    const char *words[] = {"trace ", "packet ", "branch ", "the ", "processor ", "emulated ", "QEMU "};
    for (size_t i = 0; i < N;) {
        x = x * 1103515245 + 12345;
        const char *w = words[(x >> 16) % 7];
        for (size_t k = 0; w[k] && i < N; k++)
            in[i++] = (unsigned char)w[k];
    }
    long total = 0;
    for (int r = 0; r < rounds; r++) {
        size_t o = compress(in, N, out);
        total += (long)o + interpret(out, o);
    }
    printf("lz %d rounds total %ld\n", rounds, total);
    return 0;
}
