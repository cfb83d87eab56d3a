/* Atom RTIT (profile=silvermont, seed 002) from the 32-bit protected-mode guests (t_m32_rtit.c,
 * t_m32_trip_rtit.c, t_m32_based_rtit.c): a single output region (lib/rtit_region.h)
 * programmed with WRMSR from 32-bit code.
 * Every MSR_RTIT_CTL write drains the internal buffer (§3.3.2), so MSR_RTIT_OFFSET is the stream
 * length after the disabling WRMSR. */
#ifndef GUEST_M32_RTIT32_H
#define GUEST_M32_RTIT32_H
#include "lib32/m32.h"
#include "lib/rtit_region.h"

/* After the disabling WRMSR: the TNTBUFF line for the host, the stream length (more than a few
 * packets, less than the region) and the PTDUMP lines. */
static inline void m32_rtit_check_dump(const uint8_t *buf)
{
    uint32_t len = (uint32_t)rdmsr(MSR_RTIT_OFFSET);
    puts_serial("TNTBUFF "); put_hex(rdmsr(MSR_RTIT_TNT_BUFF)); putc_serial('\n');
    puts_serial("RTIT: "); put_hex(len); puts_serial(" bytes\n");
    CHECK(len > 16 && len < 4096);
    hex_dump("PTDUMP ", buf, len);
}
#endif
