/* Atom RTIT in a freestanding guest (profile=silvermont; seed 002).
 *  - Enumeration: CPUID.1 reports family 6 model 4DH (RTIT is not in CPUID); CPUID.(7,0):EBX[25]
 *    (Intel PT) is 0 and the IA32_RTIT_* MSRs of Intel PT fault.
 *  - §3.3.1: an RTIT MSR other than MSR_RTIT_CTL read before MSR_RTIT_CTL faults (#GP(0) on RDMSR);
 *    reset values; reserved bits #GP.
 *  - Single output region at MSR_RTIT_BASE_ADDR & ~MSR_RTIT_LIMIT_MASK with MSR_RTIT_OFFSET; tracing a
 *    branchy ring-0 function; every MSR_RTIT_CTL write drains the internal buffer (§3.3.2), so right
 *    after the disabling WRMSR MSR_RTIT_OFFSET is the stream length.
 * The host compares the region's bytes with the plugin's copy of the stream and decodes them with
 * the project's RTIT decoder: the flow must be the ground truth up to the last packet (clearing
 * Trace_En sends no FUP.PGD, and the pending branch results stay in RTIT_TNT_BUFF, so the
 * instructions after the last packet cannot be placed by any decoder). */
// pttrace-options: profile=silvermont
#include "pt.h"
#include "work.h"

#define RTIT_LIP0        0x760
#include "rtit_region.h"

static volatile uint64_t sink;

void test_main(void)
{
    uint32_t r[4];
    cpuid(1, 0, r);
    uint32_t family = (r[0] >> 8) & 0xF, model = ((r[0] >> 4) & 0xF) | ((r[0] >> 12) & 0xF0);
    printf("CPUID.1:EAX %x: family %x model %x\n", r[0], family, model);
    ASSERT_EQ(family, 6);
    ASSERT_EQ(model, 0x4D);
    cpuid(7, 0, r);
    ASSERT_EQ(r[1] & (1u << 25), 0);
    uint64_t v;
    ASSERT(rdmsr_safe(IA32_RTIT_CTL, &v) != 0);      /* Intel PT's 570H does not exist */
    ASSERT(wrmsr_safe(IA32_RTIT_CTL, 0) != 0);

    /* §3.3.1: read MSR_RTIT_CTL first. */
    ASSERT(rdmsr_safe(MSR_RTIT_STATUS, &v) != 0);
    ASSERT_EQ(last_fault.vector, 13);
    ASSERT_EQ(last_fault.error_code, 0);
    ASSERT_EQ(rdmsr(MSR_RTIT_CTL), 0);
    ASSERT_EQ(rdmsr(MSR_RTIT_STATUS), 0);
    ASSERT_EQ(rdmsr(MSR_RTIT_BASE_ADDR), 0xFDC00000);
    ASSERT_EQ(rdmsr(MSR_RTIT_LIMIT_MASK), 0x7F);
    ASSERT_EQ(rdmsr(MSR_RTIT_PKT_CNT), 0x20000);
    ASSERT(wrmsr_safe(MSR_RTIT_CTL, 1ull << 40) != 0);       /* reserved */
    ASSERT(wrmsr_safe(MSR_RTIT_LIMIT_MASK, 0xFC0) != 0);     /* bits 5:0 must be 3FH */
    ASSERT_EQ(rdmsr(MSR_RTIT_LIMIT_MASK), 0x7F);

    uint8_t *buf = alloc_aligned(4096, 4096);
    uint64_t ctl = rtit_single_region((uint64_t)buf);
    uint64_t on = ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"((uint32_t)on), "d"((uint32_t)(on >> 32)));
    sink = work(200);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));
    uint64_t len = rdmsr(MSR_RTIT_OFFSET);
    /* Branch results not yet sent: no FUP.PGD when TriggerEn drops (§4.2.8) and the TNT buffer is
     * not drained (RTIT_TNT_BUFF keeps them, leading 1 = valid marker, Table 15). */
    printf("TNTBUFF %lx\n", rdmsr(MSR_RTIT_TNT_BUFF));
    printf("RTIT: %lu bytes, STATUS %lx, LAST_LIP %lx\n", len, rdmsr(MSR_RTIT_STATUS), rdmsr(MSR_RTIT_LAST_LIP));
    ASSERT(len > 16 && len < 4096);
    ASSERT_EQ(buf[0], 0xC0); /* PSB: C0H + 8 zero bytes (Table 19 row 1, TriggerEn 0 -> 1) */
    for (int i = 1; i < 9; i++)
        ASSERT_EQ(buf[i], 0);
    pt_dump(buf, len);
}
