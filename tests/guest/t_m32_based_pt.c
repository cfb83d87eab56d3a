/* Issue 12: Intel PT in code segments with a non-zero base (lib32/based.h): 32-bit protected mode
 * with paging off and on, a 16-bit segment, an INT n into a based segment and IRET, a GDT entry
 * whose base is rewritten without reloading CS, and real mode entered with a 32-bit CS (base
 * F0000H) still cached, then a real-mode far JMP to segment 1000H (still 32-bit code).
 * With CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0 every IP payload is the offset from the CS base of
 * the code it points into (SDM Vol. 3C §33.3.1.1 "Packet Decoding of RIP versus LIP": "the
 * payload is the offset from the current CS base address"; a FUP binds to the source, a TIP to
 * the destination). `host-check: ip-payloads-below 100000` lists, in stream order, every payload
 * below the image (flat code has base 0: its payloads are its addresses, 100000H and up):
 * Parts 1 and 2 (paging off, then on): P1's TIP into 18H, the indirect JMP's TIP, the INT's FUP
 * and its handler's TIP, the IRET's TIP, the TIP after the GDT rewrite (still base F0000H), P2's
 * TIP into 20H, the 16-bit indirect JMP's TIP, P3's TIP back into 18H; Part 3: R1's TIP, the
 * real-mode indirect JMP's TIP (base F0000H cached, not CS << 4), the PAUSE WRMSR's FUP, the
 * RESUME's TIP.PGE, R2's TIP into 1000H and the indirect JMP there (base 10000H).
 * MODE.Exec (SDM §33.4.2.8): PSB+ 32 | P2 16 | P3 32 | P2 16 | P3 32 | the resume's PSB+ 32 (the
 * cached CS.D in real mode, in a block that decodes alike as 16- and 32-bit code).
 * libipt has no segments: it is told which IPs are offsets in which segment (`pt-decode:`), and
 * its flow must equal the ground truth (linear addresses). */
// host-check: modes 32 16 32 16 32 32
// host-check: ip-payloads-below 0x100000 @bp_s32-0xf0000 @bp_ind32-0xf0000 @bp_int-0xf0000 @bh32-0xf0000 @bp_after_int-0xf0000 @bp_ind32b-0xf0000 @bp_s16-@based16_start @bp_ind16-@based16_start @bp_ret32-0xf0000 @bp_s32-0xf0000 @bp_ind32-0xf0000 @bp_int-0xf0000 @bh32-0xf0000 @bp_after_int-0xf0000 @bp_ind32b-0xf0000 @bp_s16-@based16_start @bp_ind16-@based16_start @bp_ret32-0xf0000 @r32-0xf0000 @r32_ind-0xf0000 @pt_pause_wrmsr-0xf0000 @r_after_resume-0xf0000 @rs32-0x10000 @rs_ind-0x10000
// pt-decode: --cs-base f0000@10000-1ffff,@based16_start@0-ffff,10000@0f0000-0fffff
#define BASED_W_START  "pt_enable_wrmsr"
#define BASED_W_PAUSE  "pt_pause_wrmsr"
#define BASED_W_RESUME "pt_resume_wrmsr"
#define BASED_W_END    "pt_disable_wrmsr"
#include "lib32/based.h"
#include "lib32/pt32.h"

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_based_pt: Intel PT in code segments with a non-zero base\n");
    m32_check_mode();
    uint32_t ecx;
    asm volatile("cpuid" : "=c"(ecx) : "a"(0x14), "c"(0) : "ebx", "edx");
    CHECK(!(ecx & (1u << 31))); /* LIP = 0: IP payloads are offsets from the CS base */
    uint32_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    static const uint32_t msr[4] = { IA32_RTIT_CTL, IA32_RTIT_CTL, IA32_RTIT_CTL, IA32_RTIT_CTL };
    const uint32_t val[4] = { ctl | RTIT_CTL_TRACEEN, ctl, ctl | RTIT_CTL_TRACEEN, ctl };
    based_setup(msr, val, 0);
    m32_pt_single_range(buf);
    based_run();
    m32_pt_check_dump(buf);
    m32_exit(1);
}
