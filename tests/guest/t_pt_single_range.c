/* Intel PT enumeration, single-range output, enable/disable by WRMSR.
 * Checks CPUID leaves 7 and 14H against the default (Skylake-class) profile, traces a branchy
 * function in ring 0 into a 4 KiB single-range buffer, and checks the buffer and the MSR
 * read-backs right after the disabling WRMSR. The host side (tests/run-guest.sh) compares the
 * dumped bytes with the plugin's host copy and decodes them with libipt against the ground truth. */
#include "pt.h"
#include "work.h"

static volatile uint64_t sink;

void test_main(void)
{
    uint32_t r[4];
    cpuid(7, 0, r);
    ASSERT(r[1] & (1u << 25)); /* CPUID.(7,0):EBX[25] Intel PT */
    cpuid(0x14, 0, r);
    ASSERT_EQ(r[0], 1);
    ASSERT_EQ(r[1], 0xF);
    ASSERT_EQ(r[2], 0x7);
    ASSERT_EQ(r[3], 0);
    cpuid(0x14, 1, r);
    ASSERT_EQ(r[0], 0x02490002);
    ASSERT_EQ(r[1], 0x003F3FFF);

    /* Reset values. */
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0x7F);

    uint8_t *buf = alloc_aligned(4096, 4096);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);   /* 4 KiB range, offset 0 */
    wrmsr(IA32_RTIT_STATUS, 0);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN; /* ToPA=0: single range */
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl | RTIT_CTL_TRACEEN) >> 32)));
    sink = work(200);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));

    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t len = mp >> 32;
    printf("single range: %lu bytes, MASK_PTRS %lx, STATUS %lx\n", len, mp, rdmsr(IA32_RTIT_STATUS));
    ASSERT_EQ(mp & 0xFFFFFFFF, 0xFFF);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)buf);
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), ctl);
    ASSERT(len > 16 && len < 4096);
    ASSERT(pt_has_psb(buf));
    /* The stream ends with the disabling WRMSR's FUP and TIP.PGD (IP suppressed, 0x01). */
    ASSERT_EQ(buf[len - 1], 0x01);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    pt_dump(buf, len);
}
