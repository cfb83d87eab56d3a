// pttrace-options: pebs=1
/* PEBS (Skylake profile, format 3, trap-like; SDM Vol. 3B §20.3.1.1.1, seed 001 §6.5-§6.7) with
 * a long sampling period over a loop of many blocks: the plugin's block callback only records
 * blocks while a PEBS counter is far from overflow and runs them through the model in batches
 * (issue 13, `Pmu::blocks_before_pmi`). Each record must still name the exact instruction and
 * hold the registers after it, as when every block runs the model.
 *
 * Counting convention (as t_pebs): the enabling WRMSR is event 1; the loop's instructions
 * (inc %r12; dec %rdi; jnz) are events 2, 3, 4, 5, ... With PMC0 = INST_RETIRED.ANY_P at
 * 2^48 - P and reset value 2^48 - P, the counter overflows at event P and the next event triggers
 * the record and the reload: record k comes from event k(P + 1). */
#include "pebs.h"


#define P        30000ull
#define RESET    ((1ull << 48) - P)
#define REC      200
#define SLOTS    8
#define ITERS    40000ull             /* events 2 .. 3 * ITERS + 1; the XOR after the loop is next */

_Static_assert(sizeof(struct pebs_rec) == REC, "format 3 record");

static struct ds64 ds __attribute__((aligned(64)));
static uint8_t pebs_buf[(SLOTS + 2) * REC] __attribute__((aligned(64)));
uint64_t pebsb_rsp;

/* pebsb_run(n): known registers, enable (GLOBAL_CTRL = 1), n x { inc %r12; dec %rdi; jnz },
 * xor, disable. */
extern void pebsb_run(uint64_t n);
extern char pebsb_inc[], pebsb_dec[], pebsb_jnz[];
asm(".text\n"
    ".globl pebsb_run, pebsb_inc, pebsb_dec, pebsb_jnz\n"
    "pebsb_run:\n"
    "  push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15\n"
    "  mov $0xB0B0, %ebx\n"
    "  mov $0x5151, %esi\n"
    "  mov $0xBEBE, %ebp\n"
    "  xor %r12d, %r12d\n"
    "  mov $0xDDDD, %r13d\n"
    "  mov %rsp, pebsb_rsp(%rip)\n"
    "  mov $0x38f, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "pebsb_inc: inc %r12\n"
    "pebsb_dec: dec %rdi\n"
    "pebsb_jnz: jnz pebsb_inc\n"
    "  xor %eax, %eax\n"
    "  wrmsr\n"
    "  pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx\n"
    "  ret\n");

/* Record k (1-based): the instruction of event k(P + 1), the next one, and the registers after
 * the first. */
static void check_record(uint64_t k)
{
    const struct pebs_rec *r = (const struct pebs_rec *)(pebs_buf + (k - 1) * REC);
    uint64_t i = k * (P + 1) - 2, it = i / 3; /* index in the loop's instruction stream */
    uint64_t eventing, ip, r12 = it + 1, rdi;
    switch (i % 3) {
    case 0: eventing = (uint64_t)pebsb_inc; ip = (uint64_t)pebsb_dec; rdi = ITERS - it; break;
    case 1: eventing = (uint64_t)pebsb_dec; ip = (uint64_t)pebsb_jnz; rdi = ITERS - it - 1; break;
    default: eventing = (uint64_t)pebsb_jnz; ip = (uint64_t)pebsb_inc; rdi = ITERS - it - 1; break;
    }
    printf("record %lu: ip %lx eventing_ip %lx r12 %lu rdi %lu (expected %lx %lx %lu %lu)\n", k, r->ip,
           r->eventing_ip, r->r12, r->di, ip, eventing, r12, rdi);
    ASSERT_EQ(r->eventing_ip, eventing);
    ASSERT_EQ(r->ip, ip);                  /* trap-like: the next instruction */
    ASSERT_EQ(r->r12, r12);                /* registers after the triggering instruction */
    ASSERT_EQ(r->di, rdi);
    ASSERT_EQ(r->bx, 0xB0B0);
    ASSERT_EQ(r->si, 0x5151);
    ASSERT_EQ(r->bp, 0xBEBE);
    ASSERT_EQ(r->r13, 0xDDDD);
    ASSERT_EQ(r->sp, pebsb_rsp);
    ASSERT_EQ(r->applicable, 1);           /* PMC0 */
}

void test_main(void)
{
    irq_disable();
    uint64_t base = (uint64_t)pebs_buf;
    memset(pebs_buf, 0xA5, sizeof pebs_buf);
    memset(&ds, 0, sizeof ds);
    ds.pebs_base = ds.pebs_index = base;
    ds.pebs_max = base + SLOTS * REC;
    ds.pebs_thr = base + (SLOTS + 1) * REC; /* no threshold PMI */
    ds.reset[0] = RESET;
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_DS_AREA, (uint64_t)&ds);
    wrmsr(IA32_A_PMC0, RESET);
    wrmsr(IA32_PERFEVTSEL0, 0xC0 | (1ull << 17) | (1ull << 22)); /* INST_RETIRED.ANY_P, OS, EN */
    wrmsr(IA32_PEBS_ENABLE, 1);
    pebsb_run(ITERS);
    /* Events 2 .. 3 * ITERS + 2 (the XOR): records at 30001, 60002, 90003. */
    printf("index +%lu, counter %lx\n", ds.pebs_index - base, rdmsr(IA32_PMC0));
    ASSERT_EQ(ds.pebs_index, base + 3 * REC);
    for (uint64_t k = 1; k <= 3; k++)
        check_record(k);
    for (uint64_t b = 3 * REC; b < sizeof pebs_buf; b++)
        ASSERT_EQ(pebs_buf[b], 0xA5);
    /* Reloaded at event 90003: events 90004 .. 3 * ITERS + 2 since. */
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET + (3 * ITERS + 2 - 3 * (P + 1)));
    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
}
