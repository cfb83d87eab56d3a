// pttrace-options: profile=sapphirerapids
/* PSB and PMI preservation (issue 15): CPUID.(14H,0):EBX[6], IA32_RTIT_CTL[56]
 * InjectPsbPmiOnEnable, IA32_RTIT_STATUS[6] PendPSB and [7] PendTopaPMI (SDM §33.2.7.2 "PMI
 * Preservation", Table 33-7), profile=sapphirerapids.
 *  1. PendPSB: PacketByteCnt restored to 2040 (PSBFreq 0: a PSB+ every 2 KiB), an enable and a
 *     disable in a row: no PSB+ (the count continues), and the packets cross the period: with
 *     InjectPsbPmiOnEnable, STATUS.PendPSB = 1 after the disable and the next enable starts with
 *     PSB+ (PendPSB cleared); without it, PendPSB stays 0 and the next enable has no PSB+.
 *  2. PendTopaPMI: an INT region fills while tracing: one PMI (NMI through LVTPC),
 *     GLOBAL_STATUS[55] and, with InjectPsbPmiOnEnable, STATUS.PendTopaPMI = 1. With the bit left
 *     set, the next enable pends the ToPA PMI anew (one more NMI, GLOBAL_STATUS[55] again); once
 *     software clears PendTopaPMI, an enable raises none. Without InjectPsbPmiOnEnable the bit
 *     never sets. */
#include "pt.h"
#include "work.h"

extern void pp_pair(uint64_t on, uint64_t off);
/* Enable (rdi) and disable (rsi) IA32_RTIT_CTL with nothing in between. */
asm(".text\n"
    ".globl pp_pair\n"
    "pp_pair:\n"
    "  mov $0x570, %ecx\n  mov %rdi, %rax\n  mov %rdi, %rdx\n  shr $32, %rdx\n"
    "  wrmsr\n"
    "  mov %rsi, %rax\n  mov %rsi, %rdx\n  shr $32, %rdx\n"
    "  wrmsr\n"
    "  ret\n");

static volatile uint64_t sink, nmi_count, nmi_gstatus;

static void nmi_handler(struct trap_frame *f)
{
    (void)f;
    nmi_count++;
    nmi_gstatus = rdmsr(IA32_PERF_GLOBAL_STATUS);
}

static void wait_nmi(uint64_t count)
{
    for (int i = 0; i < 100000 && nmi_count < count; i++)
        cpu_pause();
}

#define BYTECNT(st) (((st) >> 32) & 0x1FFFF)

static void pend_psb(int inject)
{
    uint8_t *buf = alloc_aligned(4096, 4096);
    memset(buf, 0, 4096);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | (inject ? RTIT_CTL_INJECTPSBPMI : 0);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 2040ull << 32);
    pp_pair(ctl | RTIT_CTL_TRACEEN, ctl);
    uint64_t st1 = rdmsr(IA32_RTIT_STATUS);
    uint64_t end1 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    pp_pair(ctl | RTIT_CTL_TRACEEN, ctl);
    uint64_t st2 = rdmsr(IA32_RTIT_STATUS);
    uint64_t end2 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    printf("PendPSB (InjectPsbPmiOnEnable=%d): run 1 %lu bytes, STATUS %lx; run 2 %lu bytes, STATUS %lx\n",
           inject, end1, st1, end2 - end1, st2);
    pt_print(buf, end2);
    /* Run 1: no PSB+ (PacketByteCnt was not 0); its packets pushed the count past 2048. */
    ASSERT(end1 > 0 && end1 < 16);
    ASSERT(buf[0] != 0x02);
    ASSERT_EQ(BYTECNT(st1), 2040 + end1);
    ASSERT_EQ(!!(st1 & RTIT_STATUS_PENDPSB), inject);
    ASSERT_EQ(st2 & RTIT_STATUS_PENDPSB, 0);
    if (inject) {
        ASSERT(pt_has_psb(buf + end1)); /* PendPSB: PSB+ at the enable */
        ASSERT(BYTECNT(st2) < 64);
    } else {
        /* No PSB+ at the enable (MODE.Exec, TIP.PGE first): the count continues from the
         * restored value and the PSB+ follows at the next instruction boundary. */
        ASSERT_EQ(buf[end1], 0x99);
        ASSERT(end2 - end1 > 16 && !pt_has_psb(buf + end1));
    }
}

static void pend_topa_pmi(int inject)
{
    uint64_t *tab = alloc_pages(1);
    uint8_t *rg = alloc_pages(2);
    tab[0] = (uint64_t)rg | TOPA_SIZE(0) | TOPA_INT;
    tab[1] = (uint64_t)(rg + 4096) | TOPA_SIZE(0);
    tab[2] = (uint64_t)tab | TOPA_END;
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TOPA | (inject ? RTIT_CTL_INJECTPSBPMI : 0);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)tab);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, pt_mask_ptrs(0, 0));
    wrmsr(IA32_RTIT_STATUS, 0);
    nmi_count = 0;
    lapic_write(LAPIC_LVT_PERF, 0x400); /* NMI, unmasked */
    wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
    for (int i = 0; i < 20000 && nmi_count == 0; i++)
        sink = work(100);
    wrmsr(IA32_RTIT_CTL, ctl);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    printf("PendTopaPMI (InjectPsbPmiOnEnable=%d): INT region filled: NMIs %lu, GLOBAL_STATUS %lx, STATUS %lx\n",
           inject, nmi_count, rdmsr(IA32_PERF_GLOBAL_STATUS), st);
    ASSERT_EQ(nmi_count, 1);
    ASSERT(nmi_gstatus & PERF_GLOBAL_STATUS_TOPA_PMI);
    ASSERT_EQ(!!(st & RTIT_STATUS_PENDTOPAPMI), inject);
    ASSERT_EQ(pt_topa_index(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS)), 1);

    /* PMI handled (GLOBAL_STATUS[55] cleared, LVTPC re-armed) but PendTopaPMI left set: the next
     * enable pends the ToPA PMI again (with InjectPsbPmiOnEnable). */
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
    lapic_write(LAPIC_LVT_PERF, 0x400);
    pp_pair(ctl | RTIT_CTL_TRACEEN, ctl);
    wait_nmi(2);
    uint64_t gs = rdmsr(IA32_PERF_GLOBAL_STATUS);
    st = rdmsr(IA32_RTIT_STATUS);
    printf("  enable with PendTopaPMI=%d: NMIs %lu, GLOBAL_STATUS %lx, STATUS %lx\n", inject, nmi_count, gs, st);
    ASSERT_EQ(nmi_count, inject ? 2 : 1);
    ASSERT_EQ(!!(gs & PERF_GLOBAL_STATUS_TOPA_PMI), inject);
    ASSERT_EQ(!!(st & RTIT_STATUS_PENDTOPAPMI), inject);

    /* Software clears PendTopaPMI (TraceEn = 0): the next enable raises no PMI. */
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
    wrmsr(IA32_RTIT_STATUS, st & ~RTIT_STATUS_PENDTOPAPMI);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_PENDTOPAPMI, 0);
    lapic_write(LAPIC_LVT_PERF, 0x400);
    uint64_t before = nmi_count;
    pp_pair(ctl | RTIT_CTL_TRACEEN, ctl);
    wait_nmi(before + 1);
    ASSERT_EQ(nmi_count, before);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);
    lapic_write(LAPIC_LVT_PERF, 0x10400);
}

void test_main(void)
{
    uint32_t r[4];
    cpuid(0x14, 0, r);
    ASSERT(r[1] & (1u << 6)); /* EBX[6] PSB and PMI preservation */
    /* PendPSB / PendTopaPMI are writable (TraceEn = 0) and read back; CTL[56] is writable. */
    wrmsr(IA32_RTIT_STATUS, RTIT_STATUS_PENDPSB | RTIT_STATUS_PENDTOPAPMI);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS), RTIT_STATUS_PENDPSB | RTIT_STATUS_PENDTOPAPMI);
    wrmsr(IA32_RTIT_STATUS, 0);
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_INJECTPSBPMI), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), RTIT_CTL_INJECTPSBPMI);
    wrmsr(IA32_RTIT_CTL, 0);

    pend_psb(1);
    pend_psb(0);
    set_handler(2, nmi_handler);
    lapic_enable();
    pend_topa_pmi(1);
    pend_topa_pmi(0);
}
