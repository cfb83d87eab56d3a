/* Issue 12: Intel PT across real mode, 16-bit and 32-bit protected mode (with and without a guest
 * LGDT) and the far JMP/CALL/RET and IRET between them (lib32/trip.h), in a multiboot guest that
 * starts in the loader's 32-bit protected mode. Tracing is paused and resumed (WRMSR clearing and
 * setting TraceEn) inside the 16-bit segment whose GDT entry was rewritten to D = 1 without
 * reloading CS: the PSB+ of the resume must carry MODE.Exec 16-bit (the descriptor cache, SDM
 * Vol. 3A §3.4.3), not the 32-bit mode the GDT now says.
 * SDM §33.4.2.8 MODE.Exec (CS.L & LMA, CS.D): 01 64-bit, 02 32-bit, 00 16-bit (real mode and
 * 16-bit protected mode alike); sent before the TIP of a far transfer that changes the mode and
 * in every PSB+. The host (tests/run-guest.sh) checks the bytes in guest memory against the
 * plugin's copy, libipt's decoded flow against the ground truth (without the two WRMSRs of the
 * pause and what lies between them), and the MODE.Exec payloads in stream order:
 *   PSB+ 32 (enable) | A1 16 | A5 32 | B1 16 | resume PSB+ 16 | B2 32 | B4 16 | B5 32 |
 *   B6 16 | B7 32 (the bitness of each payload, as `pttrace dump` prints it)
 * (A2 into real mode, A3/A4 real-mode far CALL/RET and B3 32 -> 32 keep the mode: a bare TIP).
 * IP payloads are offsets from the CS base (CPUID.14H:ECX[31] LIP = 0, SDM Vol. 3C §33.3.1.1):
 * the TIP of A3 into the real-mode segment 300H (base 3000H) carries rfar's offset 0..FFFH, the
 * others below 10000H (CS base 0 in real mode and in the 16-bit segments) the linear address.
 * `host-check: ip-payloads` lists them in stream order (a16, real, rfar in 300H, A3's return
 * address in CS 0, b16, the pause WRMSR's FUP, the resume's TIP.PGE, c16, d16); libipt, which has
 * no segments, is told that IPs 0..FFFH are offsets in a segment at 3000H (`pt-decode:`). */
// host-check: modes 32 16 32 16 16 32 16 32 16 32
// host-check: ip-payloads 0x3000+@a16-@low_start 0x3000+@real-@low_start @rfar-@low_start 0x3000+@trip_lcall_a3+5-@low_start 0x3000+@b16-@low_start @pt_pause_wrmsr 0x3000+@trip_call_after_resume-@low_start 0x3000+@c16-@low_start 0x3000+@d16-@low_start
// pt-decode: --cs-base 3000@0-fff
#define TRIP_W_START  "pt_enable_wrmsr"
#define TRIP_W_PAUSE  "pt_pause_wrmsr"
#define TRIP_W_RESUME "pt_resume_wrmsr"
#define TRIP_W_END    "pt_disable_wrmsr"
#include "lib32/trip.h"
#include "lib32/pt32.h"

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_trip_pt: Intel PT across real mode, 16- and 32-bit protected mode\n");
    m32_check_mode();
    uint32_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    static const uint32_t msr[4] = { IA32_RTIT_CTL, IA32_RTIT_CTL, IA32_RTIT_CTL, IA32_RTIT_CTL };
    const uint32_t val[4] = { ctl | RTIT_CTL_TRACEEN, ctl, ctl | RTIT_CTL_TRACEEN, ctl };
    trip_setup(msr, val);
    m32_pt_single_range(buf);
    trip_run();
    m32_pt_check_dump(buf);
    m32_exit(1);
}
