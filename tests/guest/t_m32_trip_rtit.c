/* Issue 12: Atom RTIT (profile=silvermont, seed 002) across real mode, 16-bit and 32-bit protected
 * mode (with and without a guest LGDT) and the far JMP/CALL/RET and IRET between them
 * (lib32/trip.h), in a multiboot guest that starts in the loader's 32-bit protected mode. One
 * window over the whole trip (the PAUSE/RESUME points write IA32_DEBUGCTL = 0, no effect); the
 * code of the segment whose GDT entry was rewritten to D = 1 without reloading CS must still be
 * followed as 16-bit code. Single output region (MSR_RTIT_BASE_ADDR / MSR_RTIT_LIMIT_MASK / MSR_RTIT_OFFSET,
 * seed 002 §3.3); every MSR_RTIT_CTL write drains the internal buffer (§3.3.2), so MSR_RTIT_OFFSET is the
 * stream length after the disabling WRMSR. The host compares the bytes in guest memory with the
 * plugin's copy and decodes them against the ground truth; RTIT has no MODE packet, so the
 * decoder is told which code is 16-bit (the trip's low copy) and that the rest is 32-bit. */
// pttrace-options: profile=silvermont
// rtit-decode: --bits 32 --code16 3000-3fff
#define TRIP_W_START  "pt_enable_wrmsr"
#define TRIP_W_PAUSE  "trip_no_pause"
#define TRIP_W_RESUME "trip_no_resume"
#define TRIP_W_END    "pt_disable_wrmsr"
#include "lib32/trip.h"
#include "lib32/rtit32.h"

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_trip_rtit: RTIT across real mode, 16- and 32-bit protected mode\n");
    m32_check_mode();
    uint32_t ctl = rtit_single_region((uint32_t)buf);
    static const uint32_t msr[4] = { MSR_RTIT_CTL, IA32_DEBUGCTL, IA32_DEBUGCTL, MSR_RTIT_CTL };
    const uint32_t val[4] = { ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE, 0, 0, ctl };
    trip_setup(msr, val);
    trip_run();
    m32_rtit_check_dump(buf);
    m32_exit(1);
}
