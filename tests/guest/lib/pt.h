/* Intel PT helpers for guest tests: MSR numbers, IA32_RTIT_CTL bits, and a hex dump of a trace
 * buffer to the serial port (lines "PTDUMP <hex>", 32 bytes each) that the host test extracts. */
#ifndef PT_H
#define PT_H
#include "guest.h"

#define MSR_IA32_RTIT_OUTPUT_BASE      0x560
#define MSR_IA32_RTIT_OUTPUT_MASK_PTRS 0x561
#define MSR_IA32_RTIT_CTL              0x570
#define MSR_IA32_RTIT_STATUS           0x571
#define MSR_IA32_RTIT_CR3_MATCH        0x572
#define MSR_IA32_RTIT_ADDR0_A          0x580
#define MSR_IA32_PERF_GLOBAL_STATUS    0x38E
#define MSR_IA32_PERF_GLOBAL_OVF_CTRL  0x390

#define RTIT_CTL_TRACEEN   (1ull << 0)
#define RTIT_CTL_CYCEN     (1ull << 1)
#define RTIT_CTL_OS        (1ull << 2)
#define RTIT_CTL_USER      (1ull << 3)
#define RTIT_CTL_CR3FILTER (1ull << 7)
#define RTIT_CTL_TOPA      (1ull << 8)
#define RTIT_CTL_MTCEN     (1ull << 9)
#define RTIT_CTL_TSCEN     (1ull << 10)
#define RTIT_CTL_DISRETC   (1ull << 11)
#define RTIT_CTL_BRANCHEN  (1ull << 13)

#define RTIT_STATUS_ERROR   (1ull << 4)
#define RTIT_STATUS_STOPPED (1ull << 5)

static inline void pt_dump(const uint8_t *buf, uint64_t len)
{
    static const char hex[] = "0123456789abcdef";
    for (uint64_t i = 0; i < len; i += 32) {
        puts_serial("PTDUMP ");
        for (uint64_t j = i; j < len && j < i + 32; j++) {
            putchar_serial(hex[buf[j] >> 4]);
            putchar_serial(hex[buf[j] & 15]);
        }
        putchar_serial('\n');
    }
}

static inline int pt_has_psb(const uint8_t *p)
{
    for (int i = 0; i < 16; i += 2)
        if (p[i] != 0x02 || p[i + 1] != 0x82)
            return 0;
    return 1;
}
#endif
