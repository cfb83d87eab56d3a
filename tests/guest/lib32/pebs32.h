/* Seed 001 §6.7.1 in 32-bit protected mode, shared by t_m32_pebs_core2.c and t_m32_pebs_nehalem.c:
 * without DTES64 (CPUID.1:ECX[2] = 0, `dtes64=0`) and outside IA-32e mode the DS save area has the
 * 32-bit format (PEBS fields at 10H-1CH, counter n's reset at 20H + 8n) and every PEBS record is
 * 40 bytes (EFLAGS, EIP, EAX, EBX, ECX, EDX, ESI, EDI, EBP, ESP), whatever PERF_CAPABILITIES[11:8]
 * says. m32_pebs32_main() finds the record length from the index after consecutive records,
 * checks the records field by field, nothing at the absolute maximum and the reload from the
 * reset field (PMC0's at 20H). Counting: the enabling WRMSR is event 1, `add $1, %edi` number j
 * is event j + 1; PMC0 starts at 2^width - P, reloads 2^width - Q. */
#ifndef GUEST_M32_PEBS32_H
#define GUEST_M32_PEBS32_H
#include "lib32/m32.h"

#define P     5u
#define Q     3u
#define REC   40u
#define FIT   4u                      /* records below the absolute maximum */

struct ds32 {
    uint32_t bts_base, bts_index, bts_max, bts_thr;
    uint32_t pebs_base, pebs_index, pebs_max, pebs_thr;
    uint64_t reset[4];
};
struct pebs_rec32 { uint32_t flags, ip, ax, bx, cx, dx, si, di, bp, sp; };
_Static_assert(sizeof(struct pebs_rec32) == REC, "32-bit record");

static struct ds32 ds __attribute__((aligned(64)));
static uint8_t buf[(FIT + 2) * REC] __attribute__((aligned(64)));
uint32_t run_esp;

/* Known registers, enable PMC0 (GLOBAL_CTRL = 1), 38 x `add $1, %edi`, disable. */
extern void pebs_run32(void);
extern char pebs_adds[];
asm(".text\n"
    ".globl pebs_run32, pebs_adds\n"
    "pebs_run32:\n"
    "  push %ebx; push %esi; push %edi; push %ebp\n"
    "  mov $0xB0B0, %ebx\n"
    "  mov $0x5151, %esi\n"
    "  xor %edi, %edi\n"
    "  mov $0xBEBE, %ebp\n"
    "  mov %esp, run_esp\n"
    "  mov $0x38f, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "pebs_adds:\n"
    "  .rept 38\n"
    "  add $1, %edi\n"
    "  .endr\n"
    "  xor %eax, %eax\n"
    "  wrmsr\n"
    "  pop %ebp; pop %edi; pop %esi; pop %ebx\n"
    "  ret\n");

/* The test: `banner` first; CPUID.1:EAX (family, model, stepping) = `signature`;
 * PERF_CAPABILITIES[11:8] = `format`; `width`-bit counters. */
static inline void m32_pebs32_main(const char *banner, uint32_t signature, uint32_t format, unsigned width)
{
    const uint64_t top = 1ull << width;
    puts_serial(banner);
    m32_check_mode();
    uint32_t eax, ecx, edx;
    asm volatile("cpuid" : "=a"(eax), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0) : "ebx");
    CHECK((eax & 0x0FFF3FFF) == signature);
    CHECK(edx & (1u << 21));                   /* DS */
    CHECK(!(ecx & (1u << 2)));                 /* no DTES64 */
    uint64_t cap = rdmsr(IA32_PERF_CAPABILITIES);
    CHECK(((cap >> 8) & 0xF) == format);       /* format 0 (144 bytes with DTES64) or 1 (176)... */
    /* ...but seed 001 §6.7.1: no DTES64 -> the 40-byte record. */

    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
    for (uint32_t i = 0; i < sizeof buf; i++)
        buf[i] = 0xA5;
    ds.pebs_base = ds.pebs_index = (uint32_t)buf;
    ds.pebs_max = (uint32_t)buf + FIT * REC;
    ds.pebs_thr = ds.pebs_max + REC;       /* no threshold interrupt */
    ds.reset[0] = top - Q;
    wrmsr(IA32_DS_AREA, (uint32_t)&ds);
    wrmsr(IA32_PMC0, (uint32_t)-P);            /* legacy write, sign-extended to `width` bits */
    CHECK(rdmsr(IA32_PMC0) == top - P);
    wrmsr(IA32_PERFEVTSEL0, 0xC0 | (1u << 17) | (1u << 22)); /* INST_RETIRED.ANY_P, OS, EN */
    wrmsr(IA32_PEBS_ENABLE, 1);
    pebs_run32();
    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0, 0);

    uint32_t used = ds.pebs_index - ds.pebs_base;
    puts_serial("PEBS index advanced by "); put_hex(used); putc_serial('\n');
    CHECK(used == FIT * REC);
    const struct pebs_rec32 *r = (const struct pebs_rec32 *)buf;
    /* Record length from consecutive records: record 2 lies REC bytes on and is Q + 1 events
     * later. */
    CHECK(r[1].di - r[0].di == Q + 1);
    for (uint32_t k = 1; k <= FIT; k++, r++) {
        uint32_t add = (P + 1) + (k - 1) * (Q + 1) - 1;  /* the triggering `add` */
        puts_serial("record "); put_hex(k); puts_serial(": eip "); put_hex(r->ip);
        puts_serial(" edi "); put_hex(r->di); puts_serial(" eflags "); put_hex(r->flags); putc_serial('\n');
        CHECK(r->ip == (uint32_t)pebs_adds + 3 * add);   /* trap-like: the next instruction */
        CHECK(r->di == add);
        CHECK(r->ax == 1 && r->bx == 0xB0B0 && r->cx == 0x38F && r->dx == 0);
        CHECK(r->si == 0x5151 && r->bp == 0xBEBE && r->sp == run_esp);
        CHECK((r->flags & 0x202) == 0x2);
    }
    for (uint32_t i = FIT * REC; i < sizeof buf; i++)
        CHECK(buf[i] == 0xA5);                   /* nothing at or past the maximum */
    /* 9 triggers (events 6, 10, ..., 38), each reloading 2^width - Q; then events 39 and 40. */
    CHECK(rdmsr(IA32_PMC0) == top - Q + 2);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
    m32_exit(1);
}
#endif
