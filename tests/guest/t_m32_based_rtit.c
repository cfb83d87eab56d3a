/* Issue 12: Atom RTIT (profile=silvermont, seed 002) in code segments with a non-zero base
 * (lib32/based.h): 32-bit protected mode with paging off and on, a 16-bit segment, INT n and
 * IRET (a far CALL with the frame of an INT n), a GDT entry rewritten without reloading CS, real mode with a 32-bit CS (base F0000H) still
 * cached and a real-mode far JMP to segment 1000H. RTIT payloads are linear addresses (LIPs, seed
 * 002), the CS base included. One window over the whole trip (the PAUSE/RESUME points write
 * IA32_DEBUGCTL = 0, no effect); single output region; every MSR_RTIT_CTL write drains the internal
 * buffer (§3.3.2), so MSR_RTIT_OFFSET is the stream length after the disabling WRMSR. The host
 * compares the bytes in guest memory with the plugin's copy and decodes them against the ground
 * truth; RTIT has no MODE packet, so the decoder is told which code is 16-bit. */
// pttrace-options: profile=silvermont
// rtit-decode: --bits 32 --code16 @based16_start-@based16_end
#define BASED_W_START  "pt_enable_wrmsr"
#define BASED_W_PAUSE  "based_no_pause"
#define BASED_W_RESUME "based_no_resume"
#define BASED_W_END    "pt_disable_wrmsr"
/* INT 30H replaced by PUSHFL + LCALL (the same frame for the handler's IRET): the ground truth
 * leaves an INT n out of the executed instructions (as Intel PT's FUP binds to it), RTIT's
 * FUP.FAR carries its NLIP. */
#define BASED_INT "pushfl; lcall $0x18, $(bh32 - 0xF0000)"
#include "lib32/based.h"
#include "lib32/rtit32.h"

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_based_rtit: RTIT in code segments with a non-zero base\n");
    m32_check_mode();
    uint32_t ctl = rtit_single_region((uint32_t)buf);
    static const uint32_t msr[4] = { MSR_RTIT_CTL, IA32_DEBUGCTL, IA32_DEBUGCTL, MSR_RTIT_CTL };
    const uint32_t val[4] = { ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE, 0, 0, ctl };
    based_setup(msr, val, 0);
    based_run();
    m32_rtit_check_dump(buf);
    m32_exit(1);
}
