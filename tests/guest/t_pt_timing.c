// qemu-options: -icount shift=3,sleep=off
// host-check: timing
// host-check: rerun
/* Timing packets from the guest's clock (issue 7), deterministic under -icount.
 * TSCEn, MTCEn (MTCFreq 3), CYCEn (CycThresh 2) and a PSB every 2 KiB: the stream carries TSC and
 * TMA in every PSB+, MTC and CYC in between. The guest reads RDTSC before enabling and after
 * disabling. Host checks (tests/run-guest.sh, "host-check: timing"): every TSC packet lies between
 * the two RDTSC values and TSC never goes backwards; MTC packets are present; libipt decodes the
 * flow to the ground truth (the usual pt_enable/pt_disable check); and a second run of the same
 * guest under -icount produces a byte-identical stream (QEMU's TSC is then virtual time, 2^shift
 * ns per instruction, and the plugin's clock counts instructions too). */
#include "pt.h"
#include "pt_churn.h"

static volatile uint64_t sink;

void test_main(void)
{
    uint8_t *buf = alloc_aligned(1 << 16, 1 << 16);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, (1 << 16) - 1);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TSCEN | RTIT_CTL_MTCEN | (3ull << 14) |
                   RTIT_CTL_CYCEN | (2ull << 19); /* PSBFreq 0: 2 KiB */
    uint64_t t0 = rdtsc();
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl | RTIT_CTL_TRACEEN) >> 32)));
    sink = churn(3000);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));
    uint64_t t1 = rdtsc();
    uint64_t len = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    printf("TIMING lo=%lx hi=%lx bytes=%lu\n", t0, t1, len);
    ASSERT(len > 4096 && len < (1 << 16) - 256); /* several PSBs, no wrap */
    ASSERT(t1 > t0);
    pt_dump(buf, len);
}
