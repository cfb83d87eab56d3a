/* Intel PT from the 32-bit protected-mode guests (t_m32_pt.c, t_m32_trip_pt.c, t_m32_based_pt.c,
 * t_m32_based_filter.c): a 4 KiB single-range output region (SDM Vol. 3C §33.2.7.3) programmed
 * with WRMSR from 32-bit code, and the checks and dump of what tracing left there
 * (tests/run-guest.sh compares the PTDUMP bytes with the plugin's copy). */
#ifndef GUEST_M32_PT32_H
#define GUEST_M32_PT32_H
#include "lib32/m32.h"

#define RTIT_CTL_TRACEEN   (1u << 0)
#define RTIT_CTL_OS        (1u << 2)
#define RTIT_CTL_USER      (1u << 3)
#define RTIT_CTL_BRANCHEN  (1u << 13)

/* IA32_RTIT_OUTPUT_BASE := buf (4 KiB, aligned), IA32_RTIT_OUTPUT_MASK_PTRS := FFFH (single
 * range, offset 0), IA32_RTIT_STATUS := 0. */
static inline void m32_pt_single_range(uint8_t *buf)
{
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint32_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
}

/* The bytes the single range holds (IA32_RTIT_OUTPUT_MASK_PTRS[63:32]), printed: more than a
 * PSB+, less than the range, and IA32_RTIT_STATUS[4] Error and [5] Stopped clear. */
static inline uint32_t m32_pt_written(void)
{
    uint32_t len = (uint32_t)(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32);
    puts_serial("single range: "); put_hex(len); puts_serial(" bytes\n");
    CHECK(len > 16 && len < 4096);
    CHECK((rdmsr(IA32_RTIT_STATUS) & 0x30) == 0);
    return len;
}

/* m32_pt_written(), the stream ending in the disabling WRMSR's TIP.PGD, and the PTDUMP lines. */
static inline void m32_pt_check_dump(const uint8_t *buf)
{
    uint32_t len = m32_pt_written();
    CHECK(buf[len - 1] == 0x01); /* TIP.PGD, IP suppressed */
    hex_dump("PTDUMP ", buf, len);
}
#endif
