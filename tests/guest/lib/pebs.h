/* PEBS layouts shared by the guest tests of the Skylake profile (SDM Vol. 3B §20.3.1.1.1,
 * seed 001 §6.5-§6.7). */
#ifndef GUEST_PEBS_H
#define GUEST_PEBS_H
#include "guest.h"

/* 64-bit DS save area (SDM Vol. 3B Figure 18-9, seed 001 §5): BTS part, PEBS part, the GP counters'
 * reset values (DS + 40H + 8n) and the fixed counters' (DS + 60H + 8n, format 4). */
struct ds64 {
    uint64_t bts_base, bts_index, bts_max, bts_thr;
    uint64_t pebs_base, pebs_index, pebs_max, pebs_thr;
    uint64_t reset[4];
    uint64_t fixed_reset[4];
};

/* PEBS record format 3 (Skylake, 200 bytes): RFLAGS, IP, the GPRs, applicable counters, data
 * linear address, data source, latency, EventingIP, TSX, TSC. */
struct pebs_rec {
    uint64_t flags, ip, ax, bx, cx, dx, si, di, bp, sp, r8, r9, r10, r11, r12, r13, r14, r15;
    uint64_t applicable, dla, dse, lat, eventing_ip, tsx, tsc;
};
_Static_assert(sizeof(struct pebs_rec) == 200, "format 3 record");

#endif
