// pttrace-options: profile=icelake,pebs=1
/* Adaptive PEBS of the Ice Lake profile (PEBS record format 4 with PERF_CAPABILITIES[14]
 * PEBS_BASELINE; SDM Vol. 3B "Adaptive PEBS"; Linux 6.1 arch/x86/events/intel/ds.c
 * setup_pebs_adaptive_sample_data / adaptive_pebs_record_size_update): enumeration (CPUID 06_7EH,
 * perfmon version 5, PERF_CAPABILITIES), the #GP rules of MSR_PEBS_DATA_CFG, IA32_PEBS_ENABLE
 * (PEBS_EN_FIXEDi) and the Adaptive_Record bits, and records checked field by field for several
 * MSR_PEBS_DATA_CFG combinations: basic only, + GPRs, + memory info, + XMMs, + LBRs on fixed
 * counter 0, a counter without Adaptive_Record (basic record whatever DATA_CFG says), the
 * absolute maximum and the threshold PMI with OvfBuffer.
 *
 * Counting convention (as t_pebs): the enabling WRMSR is event 1, `inc %r12` number j is event
 * j + 1. With the counter at 2^48 - P and reset value 2^48 - P, record k comes from event
 * k(P + 1): EventingIP = `inc` number k(P + 1) - 1, the GPR group's IP the next instruction
 * (trap-like), R12 = k(P + 1) - 1. The basic group's IP is the EventingIP (Linux: "The ip in
 * basic is EventingIP"), the GPR group's IP the next instruction. */
#include "pebs.h"

#define ADAPTIVE   (1ull << 34)        /* IA32_PERFEVTSELx.Adaptive_Record */
#define FC0_ADAPTIVE (1ull << 32)      /* IA32_FIXED_CTR_CTRL.FC0_Adaptive_Record */

#define CFG_MEM  1ull
#define CFG_GPR  2ull
#define CFG_XMM  4ull
#define CFG_LBR  8ull
#define CFG_LBR_ENTRIES(n) ((uint64_t)((n) - 1) << 24)

#define P        5ull
#define RESET    ((1ull << 48) - P)
#define BUF      8192

struct ds64_fmt4 {                    /* the DS area with 8 GP counters */
    uint64_t bts_base, bts_index, bts_max, bts_thr;
    uint64_t pebs_base, pebs_index, pebs_max, pebs_thr;
    uint64_t reset[8];                 /* GP counters: DS + 40H + 8n */
    uint64_t fixed_reset[4];           /* fixed counters: DS + 80H + 8i (format 4) */
};
_Static_assert(__builtin_offsetof(struct ds64_fmt4, fixed_reset) == 0x80, "fixed counter reset fields");

static struct ds64_fmt4 ds __attribute__((aligned(64)));
static uint8_t pebs_buf[BUF] __attribute__((aligned(64)));
uint64_t ad_rsp, ad_debugctl;
uint8_t ad_xmm_vals[256] __attribute__((aligned(16)));

/* ad_run(): DEBUGCTL = ad_debugctl (LBR), four taken JMPs (the LBR stack's youngest entries),
 * XMM0-15 and the GPRs loaded with known values, GLOBAL_CTRL = PMC0 | FIXED_CTR0, 38 x inc %r12,
 * GLOBAL_CTRL = 0, DEBUGCTL = 0. */
extern void ad_run(void);
extern char ad_incs[], ad_j1[], ad_t1[], ad_j2[], ad_t2[], ad_j3[], ad_t3[], ad_j4[], ad_t4[];
asm(".text\n"
    ".globl ad_run, ad_incs, ad_j1, ad_t1, ad_j2, ad_t2, ad_j3, ad_t3, ad_j4, ad_t4\n"
    "ad_run:\n"
    "  push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15\n"
    "  mov $0x1d9, %ecx\n"
    "  mov ad_debugctl(%rip), %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "ad_j1: jmp ad_t1\n"
    "  nop\n"
    "ad_t1:\n"
    "ad_j2: jmp ad_t2\n"
    "  nop\n"
    "ad_t2:\n"
    "ad_j3: jmp ad_t3\n"
    "  nop\n"
    "ad_t3:\n"
    "ad_j4: jmp ad_t4\n"
    "  nop\n"
    "ad_t4:\n"
    "  lea ad_xmm_vals(%rip), %rax\n"
    "  movdqu 0(%rax), %xmm0\n"
    "  movdqu 16(%rax), %xmm1\n"
    "  movdqu 32(%rax), %xmm2\n"
    "  movdqu 48(%rax), %xmm3\n"
    "  movdqu 64(%rax), %xmm4\n"
    "  movdqu 80(%rax), %xmm5\n"
    "  movdqu 96(%rax), %xmm6\n"
    "  movdqu 112(%rax), %xmm7\n"
    "  movdqu 128(%rax), %xmm8\n"
    "  movdqu 144(%rax), %xmm9\n"
    "  movdqu 160(%rax), %xmm10\n"
    "  movdqu 176(%rax), %xmm11\n"
    "  movdqu 192(%rax), %xmm12\n"
    "  movdqu 208(%rax), %xmm13\n"
    "  movdqu 224(%rax), %xmm14\n"
    "  movdqu 240(%rax), %xmm15\n"
    PEBS_KNOWN_GPRS_ASM("ad_rsp")
    "  mov $0x38f, %ecx\n"
    "  mov $1, %eax\n"
    "  mov $1, %edx\n"
    "  wrmsr\n"
    "ad_incs:\n"
    "  .rept 38\n"
    "  inc %r12\n"
    "  .endr\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  mov $0x1d9, %ecx\n"
    "  wrmsr\n"
    "  pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx\n"
    "  ret\n");

static volatile uint64_t pmis, pmi_status;

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    lapic_write(LAPIC_LVT_PERF, 0x400);
}

/* The record size Linux's adaptive_pebs_record_size_update computes for `cfg`. */
static uint64_t record_size(uint64_t cfg)
{
    uint64_t sz = 32;
    if (cfg & CFG_MEM)
        sz += 32;
    if (cfg & CFG_GPR)
        sz += 144;
    if (cfg & CFG_XMM)
        sz += 256;
    if (cfg & CFG_LBR)
        sz += 24 * (((cfg >> 24) & 0xFF) + 1);
    return sz;
}

/* PEBS on PMC0 (fixed = 0) or FIXED_CTR0 (fixed = 1), INST_RETIRED at CPL 0. */
static void setup(int fixed, int adaptive, uint64_t cfg, uint64_t size, uint64_t max_records, uint64_t thr_records)
{
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0, 0);
    wrmsr(IA32_FIXED_CTR_CTRL, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
    memset(pebs_buf, PEBS_FILL, sizeof pebs_buf);
    memset(&ds, 0, sizeof ds);
    ds.pebs_base = ds.pebs_index = (uint64_t)pebs_buf;
    ds.pebs_max = ds.pebs_base + max_records * size;
    ds.pebs_thr = ds.pebs_base + thr_records * size;
    wrmsr(IA32_DS_AREA, (uint64_t)&ds);
    wrmsr(MSR_PEBS_DATA_CFG, cfg);
    if (fixed) {
        ds.fixed_reset[0] = RESET;
        ds.reset[0] = 0x1234;          /* must not be used */
        wrmsr(IA32_FIXED_CTR0, RESET);
        wrmsr(IA32_FIXED_CTR_CTRL, 0x1 | (adaptive ? FC0_ADAPTIVE : 0)); /* OS */
        wrmsr(IA32_PEBS_ENABLE, 1ull << 32);
    } else {
        ds.reset[0] = RESET;
        wrmsr(IA32_A_PMC0, RESET);
        wrmsr(IA32_PERFEVTSEL0, PEBS_EVTSEL_INST_RETIRED | (adaptive ? ADAPTIVE : 0));
        wrmsr(IA32_PEBS_ENABLE, 1);
    }
}

static uint64_t q(const uint8_t *p, uint64_t off)
{
    uint64_t v;
    memcpy(&v, p + off, 8);
    return v;
}

/* Records 1..n of a run, field by field; `groups` is the record format the records must carry
 * (the DATA_CFG applied, 0 for basic records). */
static void check_records(const char *what, uint64_t n, uint64_t groups, uint64_t applicable)
{
    uint64_t size = record_size(groups), prev_tsc = 0;
    printf("%s: %lu records of %lu bytes, index +%lu\n", what, n, size, ds.pebs_index - ds.pebs_base);
    ASSERT_EQ(ds.pebs_index, ds.pebs_base + n * size);
    for (uint64_t k = 1; k <= n; k++) {
        const uint8_t *r = pebs_buf + (k - 1) * size;
        uint64_t inc = k * (P + 1) - 1;
        uint64_t eventing = (uint64_t)ad_incs + 3 * (inc - 1);
        /* Basic group. */
        ASSERT_EQ(q(r, 0), (groups & 0xFFFFFFFFFFFFull) | (size << 48)); /* record format, size */
        ASSERT_EQ(q(r, 8), eventing);                                   /* IP = EventingIP */
        ASSERT_EQ(q(r, 16), applicable);
        ASSERT(q(r, 24) > prev_tsc);
        prev_tsc = q(r, 24);
        uint64_t off = 32;
        if (groups & CFG_MEM) {
            for (int i = 0; i < 4; i++)                 /* no memory event: address, aux, latency, TSX 0 */
                ASSERT_EQ(q(r, off + 8 * i), 0);
            off += 32;
        }
        if (groups & CFG_GPR) {
            static const uint64_t fixed_part[] = { 1, 0x38F, 1, 0xB0B0 }; /* RAX, RCX, RDX, RBX */
            ASSERT_EQ(q(r, off) & 0x2, 0x2);            /* RFLAGS bit 1 */
            ASSERT_EQ(q(r, off + 8), eventing + 3);     /* IP: trap-like, the next instruction */
            for (int i = 0; i < 4; i++)
                ASSERT_EQ(q(r, off + 16 + 8 * i), fixed_part[i]);
            ASSERT_EQ(q(r, off + 48), ad_rsp);          /* RSP */
            ASSERT_EQ(q(r, off + 56), 0xBEBE);          /* RBP */
            ASSERT_EQ(q(r, off + 64), 0x5151);          /* RSI */
            ASSERT_EQ(q(r, off + 72), 0xD1D1);          /* RDI */
            ASSERT_EQ(q(r, off + 80), 0x8888);          /* R8 */
            ASSERT_EQ(q(r, off + 88), 0x9999);
            ASSERT_EQ(q(r, off + 96), 0xAAAA);
            ASSERT_EQ(q(r, off + 104), 0xBBBB);
            ASSERT_EQ(q(r, off + 112), inc);            /* R12 after the triggering inc */
            ASSERT_EQ(q(r, off + 120), 0xDDDD);
            ASSERT_EQ(q(r, off + 128), 0xEEEE);
            ASSERT_EQ(q(r, off + 136), 0xFFFF);
            off += 144;
        }
        if (groups & CFG_XMM) {
            ASSERT(memcmp(r + off, ad_xmm_vals, 256) == 0);
            off += 256;
        }
        if (groups & CFG_LBR) {
            /* Youngest first: the four JMPs before the counters were enabled (no branch since),
             * predicted (LBR_INFO: MISPRED clear). LBR_INFO[15:0] CYC_CNT counts the core clocks
             * (host TSC, not deterministic) since the previous record: nonzero for the JMPs
             * after the first (each ends a block); the first may be the first record since
             * RESET (0). */
            const char *from[] = { ad_j4, ad_j3, ad_j2, ad_j1 }, *to[] = { ad_t4, ad_t3, ad_t2, ad_t1 };
            uint64_t entries = ((groups >> 24) & 0xFF) + 1;
            for (uint64_t e = 0; e < entries && e < 4; e++) {
                ASSERT_EQ(q(r, off + 24 * e), (uint64_t)from[e]);
                ASSERT_EQ(q(r, off + 24 * e + 8), (uint64_t)to[e]);
                ASSERT_EQ(q(r, off + 24 * e + 16) & ~0xFFFFull, 0);
                if (e < 3)
                    ASSERT(q(r, off + 24 * e + 16) & 0xFFFF);
            }
            off += 24 * entries;
        }
        ASSERT_EQ(off, size);
    }
    ASSERT(pebs_untouched(pebs_buf, n * size, sizeof pebs_buf));
}

static void run(uint64_t debugctl)
{
    ad_debugctl = debugctl;
    pmis = 0;
    ad_run();
}

void test_main(void)
{
    uint32_t r[4];
    uint64_t v;
    irq_disable();
    for (int i = 0; i < 256; i++)
        ad_xmm_vals[i] = (uint8_t)(0x11 * (i / 16) + i);

    /* Enumeration: Ice Lake client 06_7EH, perfmon version 5, adaptive PEBS. */
    cpuid(1, 0, r);
    printf("CPUID.01H:EAX %x\n", r[0]);
    ASSERT_EQ(r[0] & 0x0FFF3FFF, 0x000706E5);
    ASSERT(r[3] & (1u << 21));                           /* DS */
    ASSERT(r[2] & (1u << 2));                            /* DTES64 */
    ASSERT(r[2] & (1u << 15));                           /* PDCM */
    cpuid(0xA, 0, r);
    printf("CPUID.0AH %x %x %x %x\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0] & 0xFFFF, 0x0805);                    /* version 5, 8 GP counters */
    ASSERT_EQ(r[2], 0x7);                                /* fixed counters 0-2 */
    ASSERT(r[3] & (1u << 15));                           /* AnyThread deprecated */
    ASSERT_EQ(rdmsr(IA32_MISC_ENABLE) & (1u << 12), 0);  /* PEBS available */
    uint64_t cap = rdmsr(IA32_PERF_CAPABILITIES);
    printf("PERF_CAPABILITIES %lx\n", cap);
    ASSERT_EQ((cap >> 8) & 0xF, 4);                      /* PEBS format 4 */
    ASSERT(cap & (1u << 14));                            /* PEBS_BASELINE */
    ASSERT(cap & (1u << 6));                             /* trap-like */

    /* MSR_PEBS_DATA_CFG: [3:0] groups, [31:24] LBR entries - 1, the rest #GP. */
    ASSERT_EQ(rdmsr(MSR_PEBS_DATA_CFG), 0);
    ASSERT(wrmsr_safe(MSR_PEBS_DATA_CFG, 1ull << 4));
    ASSERT(wrmsr_safe(MSR_PEBS_DATA_CFG, 1ull << 23));
    ASSERT(wrmsr_safe(MSR_PEBS_DATA_CFG, 1ull << 32));
    ASSERT(wrmsr_safe(MSR_PEBS_DATA_CFG, 1ull << 63));
    ASSERT(!wrmsr_safe(MSR_PEBS_DATA_CFG, 0x1F00000Full));
    ASSERT(!rdmsr_safe(MSR_PEBS_DATA_CFG, &v));
    ASSERT_EQ(v, 0x1F00000Full);
    wrmsr(MSR_PEBS_DATA_CFG, 0);
    /* IA32_PEBS_ENABLE: PEBS_EN_PMC0-7 and PEBS_EN_FIXED0-2. */
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 8));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 35));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 63));
    ASSERT(!wrmsr_safe(IA32_PEBS_ENABLE, 0x7000000FFull));
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0x7000000FFull);
    wrmsr(IA32_PEBS_ENABLE, 0);
    /* Adaptive_Record: PERFEVTSELx[34], FIXED_CTR_CTRL[32 + 4i] (i < 3). */
    ASSERT(!wrmsr_safe(IA32_PERFEVTSEL0 + 7, ADAPTIVE));
    ASSERT(wrmsr_safe(IA32_PERFEVTSEL0 + 7, 1ull << 35));
    ASSERT(!wrmsr_safe(IA32_FIXED_CTR_CTRL, FC0_ADAPTIVE | (1ull << 36) | (1ull << 40)));
    ASSERT(wrmsr_safe(IA32_FIXED_CTR_CTRL, 1ull << 44));
    wrmsr(IA32_PERFEVTSEL0 + 7, 0);
    wrmsr(IA32_FIXED_CTR_CTRL, 0);

    set_handler(2, pmi_handler);
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400); /* NMI */

    /* 1. Basic records (DATA_CFG = 0), absolute maximum after 4: 6 triggers, 4 records. */
    setup(0, 1, 0, 32, 4, 100);
    run(1);
    check_records("basic, maximum 4", 4, 0, 1);
    ASSERT_EQ(pmis, 0);

    /* 2. + GPRs. */
    setup(0, 1, CFG_GPR, record_size(CFG_GPR), 20, 20);
    run(1);
    check_records("GPRs", 6, CFG_GPR, 1);

    /* 3. + memory info and GPRs. */
    setup(0, 1, CFG_MEM | CFG_GPR, record_size(CFG_MEM | CFG_GPR), 20, 20);
    run(1);
    check_records("memory + GPRs", 6, CFG_MEM | CFG_GPR, 1);

    /* 4. + XMMs. */
    setup(0, 1, CFG_XMM, record_size(CFG_XMM), 12, 12);
    run(1);
    check_records("XMMs", 6, CFG_XMM, 1);

    /* 5. Fixed counter 0 (INST_RETIRED.ANY), GPRs + 4 LBR entries; reload from DS + 80H. */
    uint64_t lbr_cfg = CFG_GPR | CFG_LBR | CFG_LBR_ENTRIES(4);
    setup(1, 1, lbr_cfg, record_size(lbr_cfg), 20, 20);
    run(1);
    check_records("fixed counter 0, GPRs + 4 LBRs", 6, lbr_cfg, 1ull << 32);

    /* 6. Everything, 32 LBR entries (only the youngest 4 are known here). */
    uint64_t all = CFG_MEM | CFG_GPR | CFG_XMM | CFG_LBR | CFG_LBR_ENTRIES(32);
    setup(0, 1, all, record_size(all), 6, 6);
    run(1);
    check_records("all groups, 32 LBRs", 6, all, 1);

    /* 7. Adaptive_Record clear: basic records whatever DATA_CFG selects. */
    setup(0, 0, CFG_GPR | CFG_MEM, 32, 20, 20);
    run(1);
    check_records("no Adaptive_Record", 6, 0, 1);

    /* 8. Threshold after 3 GPR records: PMI with OvfBuffer, frozen there (DEBUGCTL[12]). */
    setup(0, 1, CFG_GPR, record_size(CFG_GPR), 20, 3);
    run(1 | (1ull << 12));
    uint64_t status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    printf("threshold: pmis %lu, status at PMI %lx\n", pmis, pmi_status);
    ASSERT_EQ(pmis, 1);
    ASSERT(pmi_status & OVF_BUFFER);
    ASSERT(pmi_status & CTR_FRZ);
    check_records("threshold 3", 3, CFG_GPR, 1);
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, status);

    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0, 0);
    wrmsr(MSR_PEBS_DATA_CFG, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
}
