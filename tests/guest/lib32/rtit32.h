/* Atom RTIT (profile=silvermont, seed 002) from the 32-bit protected-mode guests (t_m32_rtit.c,
 * t_m32_trip_rtit.c, t_m32_based_rtit.c): a single output region (MSR_RTIT_BASE_ADDR /
 * MSR_RTIT_LIMIT_MASK / MSR_RTIT_OFFSET, seed 002 §3.3) programmed with WRMSR from 32-bit code.
 * Every MSR_RTIT_CTL write drains the internal buffer (§3.3.2), so MSR_RTIT_OFFSET is the stream
 * length after the disabling WRMSR. */
#ifndef GUEST_M32_RTIT32_H
#define GUEST_M32_RTIT32_H
#include "lib32/m32.h"

#define ATOM_CTL_TRACE_EN     (1u << 0)
#define ATOM_CTL_OS           (1u << 2)
#define ATOM_CTL_USER         (1u << 3)
#define ATOM_CTL_CMPRS_RET    (1u << 11)
#define ATOM_CTL_TRACE_ACTIVE (1u << 13)

/* The 4 KiB region at `buf`, FilterEn always on, TraceStop always off, MSR_RTIT_CTL := OS, USER,
 * CMPRS_RET (not yet enabled); returns that value. */
static inline uint32_t m32_rtit_single_region(uint8_t *buf)
{
    (void)rdmsr(MSR_RTIT_CTL); /* §3.3.1: MSR_RTIT_CTL is read first */
    wrmsr(MSR_RTIT_BASE_ADDR, (uint32_t)buf);
    wrmsr(MSR_RTIT_LIMIT_MASK, 0xFFF);
    wrmsr(MSR_RTIT_OFFSET, 0);
    wrmsr(MSR_RTIT_EVENTS, 7 | (6 << 3)); /* FilterEn: always on; TraceStop: always off */
    uint32_t ctl = ATOM_CTL_OS | ATOM_CTL_USER | ATOM_CTL_CMPRS_RET;
    wrmsr(MSR_RTIT_CTL, ctl);
    return ctl;
}

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
