// pttrace-options: profile=core2,pebs=1
/* PEBS of the Core 2 profile (profile=core2, Core 2 Duo E8400, Penryn 06_17H stepping AH): seed
 * 001's experiments with the original 64-bit PEBS record of the Intel Core microarchitecture,
 * record format 0, 144 bytes (seed 001 §5, §6.5-§6.7, §9.1.3, §9.2.2; SDM Vol. 3B "Processor Event
 * Based Sampling (PEBS)" for the Intel Core microarchitecture): enumeration (CPUID.1 signature,
 * DS/DTES64/PDCM, CPUID.0AH version 2 with 2 GP + 3 fixed 40-bit counters, IA32_MISC_ENABLE[12] =
 * 0, PERF_CAPABILITIES[11:8] = 0 so that seed 001's support_enhancement_pebs() says "not
 * enhanced", [6] trap-like as Penryn reports it, [7] architectural registers, no FW_WRITE),
 * IA32_PEBS_ENABLE with PEBS on IA32_PMC0 only, the record length found from consecutive records
 * (144, nothing after a record's last field), records checked field by field (RFLAGS with IF set
 * in one run and clear in the other, RIP of the instruction after the triggering one, all 16
 * GPRs after it), the counter reloaded from the DS reset field (a value different from the
 * initial one, so the distance between records shows where it came from), nothing written at the
 * absolute maximum, the DS interrupt at the threshold with OvfBuffer whose handler resets the
 * index (§9.2.2), after which recording resumes at the base; and PMC1 overflowing with
 * IA32_PEBS_ENABLE[0] set writes nothing.
 *
 * Counting convention (as t_pebs): the enabling WRMSR is event 1, `inc %r12` number j is event
 * j + 1. The counter starts at 2^40 - P (overflow at event P, record at P + 1); after each
 * record it is reloaded with 2^40 - Q, so record k comes from event (P + 1) + (k - 1)(Q + 1). */
#include "pebs.h"

#define WIDTH    40
#define P        5ull                 /* first overflow after P events */
#define Q        3ull                 /* after each record: overflow after Q events */
#define START    ((1ull << WIDTH) - P)
#define RESET    ((1ull << WIDTH) - Q)
#define REC      144
#define SLOTS    10
/* 38 incs: events 2..39, the XOR after them is event 40; records at events 6, 10, ..., 38. */
#define N_RECORDS 9

_Static_assert(sizeof(struct pebs_rec_fmt0) == REC, "Core record");

static struct ds64 ds __attribute__((aligned(64)));
static uint8_t pebs_buf[(SLOTS + 2) * REC] __attribute__((aligned(64)));
uint8_t pebs_sti;                     /* run the incs with RFLAGS.IF = 1 */
uint32_t pebs_ctrl;

/* pebs_run(): known registers, RFLAGS.IF := 1 if pebs_sti, enable (GLOBAL_CTRL = pebs_ctrl),
 * 38 x inc %r12, xor, disable, RFLAGS.IF := 0. */
PEBS_RUN_ASM("  cmpb $0, pebs_sti(%rip)\n"
             "  je 1f\n"
             "  sti\n"
             "1:\n",
             "pebs_ctrl(%rip)", "  cli\n");

/* The DS interrupt handler of seed 001 §9.2.2 (PEBS buffer reached the threshold): note the
 * status and the records, reset the PEBS index to the base, clear OvfBuffer and PMC0's overflow
 * bit through IA32_PERF_GLOBAL_STATUS_RESET, unmask LVTPC. Counters stay frozen (DEBUGCTL[12]:
 * version 2 clears IA32_PERF_GLOBAL_CTRL at the PMI). */
static volatile uint64_t pmis, pmi_status, pmi_ctrl, pmi_index;
static uint8_t saved[SLOTS * REC];

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    pmi_ctrl = rdmsr(IA32_PERF_GLOBAL_CTRL);
    pmi_index = ds.pebs_index;
    if (pmi_status & OVF_BUFFER)
        pebs_drain(&ds, pebs_buf, saved, 1);
    lapic_write(LAPIC_LVT_PERF, 0x400);
}

static void setup(uint64_t base, uint64_t max_records, uint64_t thr_records)
{
    pebs_ctrl = 1;
    pebs_ds_setup(&ds, pebs_buf, sizeof pebs_buf, base, REC, max_records, thr_records);
    ds.reset[0] = RESET;
    ds.reset[1] = 0x1234;               /* PMC1 has no PEBS: never loaded */
    wrmsr(IA32_DS_AREA, (uint64_t)&ds);
    /* No full-width writes: a legacy write of EAX, sign-extended from bit 31 to 40 bits. */
    wrmsr(IA32_PMC0, START & 0xFFFFFFFFull);
    ASSERT_EQ(rdmsr(IA32_PMC0), START);
    wrmsr(IA32_PERFEVTSEL0, PEBS_EVTSEL_INST_RETIRED);
    wrmsr(IA32_PEBS_ENABLE, 1);
}

/* Record k (1-based) of a run, at `r`, field by field. */
static void check_record(const struct pebs_rec_fmt0 *r, uint64_t k, int if_set)
{
    uint64_t event = (P + 1) + (k - 1) * (Q + 1), inc = event - 1;
    uint64_t ip = (uint64_t)pebs_incs + 3 * inc;   /* the instruction after `inc` number inc */
    printf("record %lu: ip %lx r12 %lu rflags %lx\n", k, r->ip, r->r12, r->flags);
    pebs_check_regs(r, ip, inc, pebs_ctrl);
    /* RFLAGS: bit 1 set, IF as the run set it. DF and the arithmetic flags are not checked: the
     * plugin reads RFLAGS through QEMU's gdbstub register, which under TCG holds neither
     * (README "Core 2 profile"). */
    ASSERT_EQ(r->flags & (0x2 | RFLAGS_IF), 0x2 | (if_set ? RFLAGS_IF : 0));
}

void test_main(void)
{
    uint32_t r[4];
    uint64_t v;
    irq_disable();
    cpuid(1, 0, r);
    printf("CPUID.1:EAX %x\n", r[0]);
    ASSERT_EQ(r[0] & 0x0FFF3FFF, 0x0001067A);            /* 06_17H stepping AH */
    ASSERT(r[3] & (1u << 21));                           /* DS */
    ASSERT(r[2] & (1u << 2));                            /* DTES64 */
    ASSERT(r[2] & (1u << 15));                           /* PDCM */
    cpuid(0xA, 0, r);
    printf("CPUID.0AH %x %x %x %x\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0], 0x07280202);                         /* v2, 2 GP x 40 bits */
    ASSERT_EQ(r[3] & 0x1FFF, 0x503);                     /* 3 fixed x 40 bits */
    ASSERT_EQ(rdmsr(IA32_MISC_ENABLE) & (1u << 12), 0);  /* PEBS available */
    uint64_t cap = rdmsr(IA32_PERF_CAPABILITIES);
    printf("PERF_CAPABILITIES %lx\n", cap);
    ASSERT_EQ((cap >> 8) & 0xF, 0);                      /* record format 0 */
    ASSERT(cap & (1u << 6));                             /* trap-like (Penryn: "PEBS fmt0+") */
    ASSERT(cap & (1u << 7));                             /* architectural registers */
    ASSERT_EQ(cap & (1u << 13), 0);                      /* no FW_WRITE */
    ASSERT(rdmsr_safe(IA32_A_PMC0, &v));                 /* so no IA32_A_PMC0 */
    ASSERT(rdmsr_safe(IA32_PMC0 + 2, &v));               /* two GP counters */
    ASSERT(rdmsr_safe(IA32_PERF_GLOBAL_STATUS_SET, &v)); /* a version 4 MSR */
    ASSERT(wrmsr_safe(IA32_PERFEVTSEL0, 1ull << 21));    /* AnyThread: version 3 */
    ASSERT_EQ(pebs_record_length(), REC);

    /* IA32_PEBS_ENABLE: only [0] Enable PEBS on PMC0; PMC1 and the load-latency bits #GP. */
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0);
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 1));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 32));
    ASSERT(!wrmsr_safe(IA32_PEBS_ENABLE, 1));
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 1);
    wrmsr(IA32_PEBS_ENABLE, 0);

    set_handler(2, pmi_handler);
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400); /* NMI */
    uint64_t base = (uint64_t)pebs_buf;

    /* 1. Record length from consecutive records, the maximum, the reload: 4 records fit; the
     * other 5 triggers write nothing but reload the counter; no threshold PMI. IF set (the PIC
     * is masked, the LAPIC timer off: nothing arrives). */
    setup(base, 4, SLOTS + 1);
    pmis = 0;
    pebs_sti = 1;
    pebs_run();
    pebs_sti = 0;
    printf("maximum: index +%lu, counter %lx, pmis %lu\n", ds.pebs_index - base, rdmsr(IA32_PMC0), pmis);
    ASSERT_EQ(ds.pebs_index - base, 4 * REC);
    /* Consecutive records: the length is where record 2's RIP field lies from record 1's, found
     * by scanning for the expected RIP one reload period on (seed 001 §6.7.1 by experiment). */
    uint64_t next_ip = (uint64_t)pebs_incs + 3 * ((P + 1) + (Q + 1) - 1), found = 0;
    for (uint64_t off = 8; off + 8 <= 4 * REC; off += 8)
        if (*(const uint64_t *)(pebs_buf + off) == next_ip) {
            found = off - 8;
            break;
        }
    printf("record length by experiment: %lu\n", found);
    ASSERT_EQ(found, REC);
    for (uint64_t k = 1; k <= 4; k++)
        check_record((const struct pebs_rec_fmt0 *)(pebs_buf + (k - 1) * REC), k, 1);
    ASSERT(pebs_untouched(pebs_buf, 4 * REC, sizeof pebs_buf)); /* nothing at or past the maximum */
    ASSERT_EQ(pmis, 0);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 1);         /* PMC0's overflow, no OvfBuffer */
    /* The 9th trigger (event 38) reloaded RESET: events 39 and 40 follow. */
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET + 2);

    /* 2. The DS interrupt at the threshold (2 records) with freeze on PMI: the handler sees
     * OvfBuffer and resets the index; the counters stay frozen. */
    setup(base, SLOTS, 2);
    wrmsr(IA32_DEBUGCTL, 1ull << 12);
    pmis = 0;
    pebs_run();
    printf("threshold: pmis %lu, status at PMI %lx, index at PMI +%lu, now +%lu\n", pmis, pmi_status,
           pmi_index - base, ds.pebs_index - base);
    ASSERT_EQ(pmis, 1);
    ASSERT_EQ(pmi_status, OVF_BUFFER | 1);
    ASSERT_EQ(pmi_ctrl, 0);                               /* legacy freeze: GLOBAL_CTRL cleared */
    ASSERT_EQ(pmi_index, base + 2 * REC);
    ASSERT_EQ(ds.pebs_index, base);                       /* reset by the handler */
    for (uint64_t k = 1; k <= 2; k++)
        check_record((const struct pebs_rec_fmt0 *)(saved + (k - 1) * REC), k, 0);
    ASSERT(pebs_untouched(pebs_buf, 2 * REC, sizeof pebs_buf));
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 0);         /* cleared by the handler */
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET);                   /* frozen right after the reload */
    /* Resume: the counter continues from the reset value, records go to the base again. */
    memset(pebs_buf, 0xA5, sizeof pebs_buf);
    pmis = 0;
    pebs_run();
    wrmsr(IA32_DEBUGCTL, 0);
    printf("resumed: pmis %lu, index at PMI +%lu\n", pmis, pmi_index - base);
    ASSERT_EQ(pmis, 1);
    ASSERT_EQ(pmi_index, base + 2 * REC);
    ASSERT_EQ(ds.pebs_index, base);
    /* From RESET the records come at events Q + 1 and 2(Q + 1): r12 = Q and 2Q + 1. */
    const struct pebs_rec_fmt0 *s1 = (const struct pebs_rec_fmt0 *)saved;
    const struct pebs_rec_fmt0 *s2 = (const struct pebs_rec_fmt0 *)(saved + REC);
    ASSERT_EQ(s1->r12, Q);
    ASSERT_EQ(s2->r12, 2 * Q + 1);
    ASSERT_EQ(s1->ip, (uint64_t)pebs_incs + 3 * Q);
    ASSERT_EQ(s2->ip, (uint64_t)pebs_incs + 3 * (2 * Q + 1));

    /* 3. PEBS is PMC0's only: PMC1 overflowing with IA32_PEBS_ENABLE[0] set (PMC0 off) writes
     * no record and is not reloaded from its DS reset field. */
    setup(base, SLOTS, SLOTS + 1);
    wrmsr(IA32_PERFEVTSEL0, 0);
    wrmsr(IA32_PMC0 + 1, START & 0xFFFFFFFFull);
    wrmsr(IA32_PERFEVTSEL0 + 1, PEBS_EVTSEL_INST_RETIRED);
    pebs_ctrl = 2;
    pebs_run();
    printf("pmc1: index +%lu, counter %lx, status %lx\n", ds.pebs_index - base, rdmsr(IA32_PMC0 + 1),
           rdmsr(IA32_PERF_GLOBAL_STATUS));
    ASSERT_EQ(ds.pebs_index, base);
    ASSERT(pebs_untouched(pebs_buf, 0, sizeof pebs_buf));
    ASSERT_EQ(rdmsr(IA32_PMC0 + 1), 40 - P);              /* 40 events from 2^40 - P, wrapped */
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 2);

    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0 + 1, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
}
