/* Branch Trace Store helpers for the guest tests (SDM Vol. 3B §18.4.8-18.4.9, seed 001). */
#ifndef GUEST_BTS_H
#define GUEST_BTS_H
#include "guest.h"

#define DEBUGCTL_TR           (1u << 6)
#define DEBUGCTL_BTS          (1u << 7)
#define DEBUGCTL_BTINT        (1u << 8)
#define DEBUGCTL_BTS_OFF_OS   (1u << 9)
#define DEBUGCTL_BTS_OFF_USR  (1u << 10)

/* 64-bit DS save area (Figure 18-9): the BTS part, then the PEBS part (unused here). */
struct ds_area {
    uint64_t bts_base, bts_index, bts_max, bts_threshold;
    uint64_t pebs_base, pebs_index, pebs_max, pebs_threshold, pebs_reset[4];
};

struct bts_record { uint64_t from, to, flags; };

/* DS area with a BTS buffer of `slots` records and the interrupt threshold at record
 * `threshold_slot` (slots + 1 or more: never, for a circular buffer). */
static inline void bts_setup(struct ds_area *ds, struct bts_record *buf, uint64_t slots,
                             uint64_t threshold_slot)
{
    ds->bts_base = ds->bts_index = (uint64_t)buf;
    uint64_t base = (uint64_t)buf, size = sizeof(struct bts_record); /* address arithmetic only */
    ds->bts_max = base + slots * size;
    ds->bts_threshold = base + threshold_slot * size;
    wrmsr(IA32_DS_AREA, (uint64_t)ds);
}

/* Enable/disable at a WRMSR carrying a global label: the host's ground truth (tests/run-guest.sh)
 * switches BTS on after every `bts_enable_wrmsr*` and off after every `bts_disable_wrmsr*`. */
#define BTS_WRMSR(label, value)                                                              \
    asm volatile(".globl " label "\n" label ": wrmsr" ::"c"(IA32_DEBUGCTL),              \
                 "a"((uint32_t)(value)), "d"(0) : "memory")

static inline void bts_print_record(const char *tag, uint64_t i, const struct bts_record *r)
{
    printf("%s %lu %lx %lx %lx\n", tag, i, r->from, r->to, r->flags);
}
#endif
