/* Atom RTIT (profile=silvermont, seed 002) single output region, shared by the 64-bit guests
 * (t_rtit_basic.c, t_rtit_compat.c, after lib/guest.h) and the 32-bit ones (lib32/rtit32.h,
 * after lib32/m32.h): both give wrmsr(msr, value), rdmsr(msr) and the MSR numbers of lib/msr.h. */
#ifndef GUEST_RTIT_REGION_H
#define GUEST_RTIT_REGION_H

/* MSR_RTIT_CTL (seed 002 §3.2). */
#define ATOM_CTL_TRACE_EN     (1u << 0)
#define ATOM_CTL_OS           (1u << 2)
#define ATOM_CTL_USER         (1u << 3)
#define ATOM_CTL_CMPRS_RET    (1u << 11)
#define ATOM_CTL_TRACE_ACTIVE (1u << 13)

/* The 4 KiB region at `base` (MSR_RTIT_BASE_ADDR / MSR_RTIT_LIMIT_MASK / MSR_RTIT_OFFSET, seed
 * 002 §3.3), FilterEn always on, TraceStop always off, MSR_RTIT_CTL := OS, USER, CMPRS_RET (not
 * yet enabled); returns that value. */
static inline uint32_t rtit_single_region(uint64_t base)
{
    (void)rdmsr(MSR_RTIT_CTL); /* §3.3.1: MSR_RTIT_CTL is read first */
    wrmsr(MSR_RTIT_BASE_ADDR, base);
    wrmsr(MSR_RTIT_LIMIT_MASK, 0xFFF);
    wrmsr(MSR_RTIT_OFFSET, 0);
    wrmsr(MSR_RTIT_EVENTS, 7 | (6 << 3)); /* FilterEn: always on; TraceStop: always off */
    uint32_t ctl = ATOM_CTL_OS | ATOM_CTL_USER | ATOM_CTL_CMPRS_RET;
    wrmsr(MSR_RTIT_CTL, ctl);
    return ctl;
}
#endif
