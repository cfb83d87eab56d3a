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

#define ATOM_CTL_TRACE_EN     (1u << 0)
#define ATOM_CTL_OS           (1u << 2)
#define ATOM_CTL_USER         (1u << 3)
#define ATOM_CTL_CMPRS_RET    (1u << 11)
#define ATOM_CTL_TRACE_ACTIVE (1u << 13)

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_trip_rtit: RTIT across real mode, 16- and 32-bit protected mode\n");
    m32_check_mode();
    (void)rdmsr(MSR_RTIT_CTL); /* §3.3.1: MSR_RTIT_CTL is read first */
    wrmsr(MSR_RTIT_BASE_ADDR, (uint32_t)buf);
    wrmsr(MSR_RTIT_LIMIT_MASK, 0xFFF);
    wrmsr(MSR_RTIT_OFFSET, 0);
    wrmsr(MSR_RTIT_EVENTS, 7 | (6 << 3)); /* FilterEn: always on; TraceStop: always off */
    uint32_t ctl = ATOM_CTL_OS | ATOM_CTL_USER | ATOM_CTL_CMPRS_RET;
    wrmsr(MSR_RTIT_CTL, ctl);
    static const uint32_t msr[4] = { MSR_RTIT_CTL, IA32_DEBUGCTL, IA32_DEBUGCTL, MSR_RTIT_CTL };
    const uint32_t val[4] = { ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE, 0, 0, ctl };
    trip_setup(msr, val);
    trip();
    puts_serial("trip BX "); put_hex(trip_bx); putc_serial('\n');
    CHECK(trip_bx == TRIP_EXPECTED_BX);
    uint32_t len = (uint32_t)rdmsr(MSR_RTIT_OFFSET);
    puts_serial("TNTBUFF "); put_hex(rdmsr(0x77D)); putc_serial('\n');
    puts_serial("RTIT: "); put_hex(len); puts_serial(" bytes\n");
    CHECK(len > 16 && len < 4096);
    hex_dump("PTDUMP ", buf, len);
    m32_exit(1);
}
