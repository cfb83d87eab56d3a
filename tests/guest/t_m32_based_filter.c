/* Issue 12: Intel PT IP filtering (IA32_RTIT_ADDR0_A/B, ADDR0_CFG = 1) in a code segment with a
 * non-zero base (lib32/based.h). With CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0 the ranges are
 * compared with effective addresses, offsets from the CS base, like the IP payloads: SDM Vol. 3C
 * §33.3.1.1 "Packet Decoding of RIP versus LIP": "IP comparison logic, for IP filtering and
 * TraceStop range calculation, is based on the same IP type as these IP packets. For processors
 * that output RIP, the IP comparison mechanism is also based on RIP, and hence on those
 * processors RIP values should be written to IA32_RTIT_ADDRn_[AB] MSRs."
 * ADDR0 = the offsets in segment 18H (base F0000H) of based_part's 32-bit code, [bp_s32 - F0000H,
 * based16_start - F0000H - 1]. No code executes at those linear addresses (the flat code lies at
 * 100000H and up, the real-mode code of Part 3 has other offsets), so a comparison of linear
 * addresses would trace nothing. Compared as offsets, Parts 1 and 2 (paging off and on) are each
 * traced from P1 (TIP.PGE into 18H) to P2 (TIP.PGD: the 16-bit segment's offsets are outside),
 * again from P3 (TIP.PGE back into 18H) to P4 (TIP.PGD into flat code). In Part 3 (real mode,
 * CS 18H with base F0000H cached) the calls of bf32 before the PAUSE and after the RESUME enter
 * the range (TIP.PGE at bf32's offset, TIP.PGD at the return); those from segment 1000H and from
 * flat code do not (other offsets). The guest's WRMSR labels are not pt_enable_wrmsr..., so the
 * plugin runs without the ground-truth log, as a user would: while tracing is paused no block
 * is seen, and the cached base (and CS.D) must survive that.
 * `host-check: ip-payloads-below 100000` lists the TIP.PGE, TIP and FUP payloads in stream
 * order; MODE.Exec: at the first TIP.PGE and at the first after the RESUME; libipt decodes the
 * stream without an error (`host-check: decode`, told the segments' bases). Tracing is paused
 * and resumed by RTIT_CTL writes that keep ADDR0_CFG (only TraceEn may change while it is set). */
// host-check: modes 32 32
// host-check: ip-payloads-below 0x100000 @bp_s32-0xf0000 @bp_ind32-0xf0000 @bp_int-0xf0000 @bh32-0xf0000 @bp_after_int-0xf0000 @bp_ind32b-0xf0000 @bp_ret32-0xf0000 @bp_s32-0xf0000 @bp_ind32-0xf0000 @bp_int-0xf0000 @bh32-0xf0000 @bp_after_int-0xf0000 @bp_ind32b-0xf0000 @bp_ret32-0xf0000 @bf32-0xf0000 @bf32-0xf0000
// host-check: decode
// pt-decode: --cs-base f0000@10000-1ffff,@based16_start@0-ffff,10000@0f0000-0fffff
#define BASED_W_START  "pt_filter_enable_wrmsr"
#define BASED_W_PAUSE  "pt_filter_pause_wrmsr"
#define BASED_W_RESUME "pt_filter_resume_wrmsr"
#define BASED_W_END    "pt_filter_disable_wrmsr"
#include "lib32/based.h"
#include "lib32/pt32.h"

#define RTIT_CTL_ADDR0_CFG_FILTER_HI 1u /* IA32_RTIT_CTL[35:32] ADDR0_CFG = 1 (EDX bits 3:0) */

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_based_filter: Intel PT IP filter ranges with LIP = 0 in a based segment\n");
    m32_check_mode();
    uint32_t eax, ecx;
    asm volatile("cpuid" : "=a"(eax), "=c"(ecx) : "a"(0x14), "c"(0) : "ebx", "edx");
    CHECK(!(ecx & (1u << 31))); /* LIP = 0 */
    asm volatile("cpuid" : "=a"(eax), "=c"(ecx) : "a"(0x14), "c"(1) : "ebx", "edx");
    CHECK((eax & 7) >= 1); /* an address range */
    uint32_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    static const uint32_t msr[4] = { IA32_RTIT_CTL, IA32_RTIT_CTL, IA32_RTIT_CTL, IA32_RTIT_CTL };
    const uint32_t val[4] = { ctl | RTIT_CTL_TRACEEN, ctl, ctl | RTIT_CTL_TRACEEN, ctl };
    based_setup(msr, val, RTIT_CTL_ADDR0_CFG_FILTER_HI);
    m32_pt_single_range(buf);
    wrmsr(IA32_RTIT_ADDR0_A, (uint32_t)bp_s32 - BASED_B32);
    wrmsr(IA32_RTIT_ADDR0_B, (uint32_t)based16_start - BASED_B32 - 1);
    based_run();
    uint32_t len = m32_pt_written();
    /* More than the PSB+ of the enable and of the resume (16 bytes each without TSC): the
     * payloads themselves are checked by the host. */
    CHECK(len > 2 * 16 + 8);
    hex_dump("PTDUMP ", buf, len);
    m32_exit(1);
}
