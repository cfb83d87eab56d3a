/* Branch Trace Store from the 32-bit protected-mode guests (t_m32_bts.c, t_m32_trip_bts.c,
 * t_m32_based_bts.c): the 64-bit DS format (CPUID.1:ECX.DTES64 = 1, the plugin's default: SDM
 * Vol. 3B Figure 18-9) set up with WRMSR from 32-bit code (§18.4.8-18.4.9), the records printed
 * for the host's comparison with the ground truth (tests/run-guest.sh, BTSLOG lines) and the
 * search for expected records in order. */
#ifndef GUEST_M32_BTS32_H
#define GUEST_M32_BTS32_H
#include "lib32/m32.h"

#define DEBUGCTL_TR  (1u << 6)
#define DEBUGCTL_BTS (1u << 7)

struct ds_area { uint64_t bts_base, bts_index, bts_max, bts_threshold, pebs[8]; };
struct bts_record { uint64_t from, to, flags; };

/* CPUID.1:ECX[2] DTES64: the 64-bit DS format. */
static inline void m32_bts_check_dtes64(void)
{
    uint32_t ecx;
    asm volatile("cpuid" : "=c"(ecx) : "a"(1), "c"(0) : "ebx", "edx");
    CHECK(ecx & (1u << 2)); /* DTES64 */
}

/* DS area with a BTS buffer of `slots` records at `rec`, the interrupt threshold past the end
 * (never reached); IA32_DS_AREA := ds. */
static inline void m32_bts_setup(struct ds_area *ds, struct bts_record *rec, uint32_t slots)
{
    ds->bts_base = ds->bts_index = (uint32_t)rec;
    ds->bts_max = (uint32_t)rec + slots * sizeof(struct bts_record);
    ds->bts_threshold = ds->bts_max + sizeof(struct bts_record);
    wrmsr(IA32_DS_AREA, (uint32_t)ds);
}

/* The number of records the index says were written ("BTS records: n"), and at most `slots` of
 * them as "BTSLOG i from to flags" lines for the host. */
static inline uint32_t m32_bts_log(const struct ds_area *ds, const struct bts_record *rec, uint32_t slots)
{
    uint32_t n = (uint32_t)(ds->bts_index - ds->bts_base) / sizeof(struct bts_record);
    puts_serial("BTS records: "); put_hex(n); putc_serial('\n');
    for (uint32_t i = 0; i < n && i < slots; i++) {
        puts_serial("BTSLOG "); put_hex(i); putc_serial(' ');
        put_hex(rec[i].from); putc_serial(' ');
        put_hex(rec[i].to); putc_serial(' ');
        put_hex(rec[i].flags); putc_serial('\n');
    }
    return n;
}

/* An expected record: linear FROM and TO, what the branch is. */
struct bts_want { uint32_t from, to; const char *what; };

/* Each of `want[0..count)` among records 0..n-1, in this order (other records between them). */
static inline void m32_bts_find_in_order(const struct bts_record *rec, uint32_t n, const struct bts_want *want,
                                         uint32_t count)
{
    uint32_t k = 0;
    for (uint32_t w = 0; w < count; w++) {
        while (k < n && !(rec[k].from == want[w].from && rec[k].to == want[w].to))
            k++;
        puts_serial("  "); puts_serial(want[w].what); puts_serial(": ");
        put_hex(want[w].from); puts_serial(" -> "); put_hex(want[w].to);
        puts_serial(k < n ? " found\n" : " MISSING\n");
        CHECK(k < n);
        k++;
    }
}
#endif
