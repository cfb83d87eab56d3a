// pttrace-options: profile=nehalem,pebs=1
/* PEBS of the Nehalem profile (profile=nehalem, Core i7-920 06_1AH): seed 001's experiments with
 * the enhanced 176-byte record (seed 001 §5, §6.5-§6.7, §9.1.3, §9.2.2; SDM Vol. 3B Nehalem PEBS):
 * enumeration (CPUID.1 signature, DS/DTES64, CPUID.0AH version 3, IA32_MISC_ENABLE[12] = 0,
 * PERF_CAPABILITIES[11:8] = 1 as support_enhancement_pebs() tests it, trap-like, no FW_WRITE and
 * so no IA32_A_PMCx), the record length found from consecutive records (176), records checked
 * field by field (RFLAGS, RIP of the next instruction, the GPRs after the triggering one,
 * IA32_PERF_GLOBAL_STATUS, data linear address / data source / latency = 0 since the model counts
 * no memory event), the counter reloaded from the DS reset field (a value different from the
 * initial one, so the distance between records shows where it came from), nothing written at
 * the absolute maximum, and the DS interrupt at the threshold with OvfBuffer whose handler
 * resets the index (§9.2.2), after which recording resumes at the base. PEBS on PMC2 as well:
 * Nehalem has it on the four GP counters (seed 001 §6.5.7), with its reset field at DS+50H.
 *
 * Counting convention (as t_pebs): the enabling WRMSR is event 1, `inc %r12` number j is event
 * j + 1. The counter starts at 2^48 - P (overflow at event P, record at P + 1); after each
 * record it is reloaded with 2^48 - Q, so record k comes from event (P + 1) + (k - 1)(Q + 1). */
#include "pebs.h"

#define P        5ull                 /* first overflow after P events */
#define Q        3ull                 /* after each record: overflow after Q events */
#define START    ((1ull << 48) - P)
#define RESET    ((1ull << 48) - Q)
#define REC      176
#define SLOTS    10
/* 38 incs: events 2..39, the XOR after them is event 40; records at events 6, 10, ..., 38. */
#define N_RECORDS 9

_Static_assert(sizeof(struct pebs_rec_fmt1) == REC, "enhanced record");

static struct ds64 ds __attribute__((aligned(64)));
static uint8_t pebs_buf[(SLOTS + 2) * REC] __attribute__((aligned(64)));
static unsigned counter;              /* the PEBS counter of the current phase (0 or 2) */
uint32_t pebs_ctrl;

/* pebs_run(): known registers, enable (GLOBAL_CTRL = pebs_ctrl), 38 x inc %r12, xor, disable. */
PEBS_RUN_ASM("", "pebs_ctrl(%rip)", "");

/* The DS interrupt handler of seed 001 §9.2.2 (PEBS buffer reached the threshold): note the
 * status and the records, reset the PEBS index to the base, clear OvfBuffer and the counter's
 * overflow bit through IA32_PERF_GLOBAL_STATUS_RESET, unmask LVTPC. Counters stay frozen
 * (DEBUGCTL[12]: version 3 clears IA32_PERF_GLOBAL_CTRL at the PMI). */
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
        pebs_drain(&ds, pebs_buf, saved, 1ull << counter);
    lapic_write(LAPIC_LVT_PERF, 0x400);
}

static void setup(unsigned ctr, uint64_t base, uint64_t max_records, uint64_t thr_records)
{
    counter = ctr;
    pebs_ctrl = 1u << ctr;
    pebs_ds_setup(&ds, pebs_buf, sizeof pebs_buf, base, REC, max_records, thr_records);
    ds.reset[ctr] = RESET;
    wrmsr(IA32_DS_AREA, (uint64_t)&ds);
    /* No full-width writes: a legacy write of EAX, sign-extended from bit 31 to 48 bits. */
    wrmsr(IA32_PMC0 + ctr, START & 0xFFFFFFFFull);
    ASSERT_EQ(rdmsr(IA32_PMC0 + ctr), START);
    wrmsr(IA32_PERFEVTSEL0 + ctr, PEBS_EVTSEL_INST_RETIRED);
    wrmsr(IA32_PEBS_ENABLE, 1ull << ctr);
}

/* Record k (1-based) of a run, at `r`, field by field. */
static void check_record(const struct pebs_rec_fmt1 *r, uint64_t k)
{
    uint64_t event = (P + 1) + (k - 1) * (Q + 1), inc = event - 1;
    uint64_t ip = (uint64_t)pebs_incs + 3 * inc;   /* the instruction after `inc` number inc */
    printf("record %lu: ip %lx r12 %lu rflags %lx status %lx\n", k, r->ip, r->r12, r->flags, r->status);
    pebs_check_regs((const struct pebs_rec_fmt0 *)r, ip, inc, pebs_ctrl);
    /* RFLAGS: bit 1 set, IF clear (interrupts off). The arithmetic flags are not checked: the
     * model's are stale mid-block (README "Nehalem profile"). */
    ASSERT_EQ(r->flags & 0x202, 0x2);
    /* IA32_PERF_GLOBAL_STATUS at the assist: the counter's overflow bit (set at its overflow,
     * not cleared since), nothing else. */
    ASSERT_EQ(r->status, 1ull << counter);
    /* Data linear address, data source, latency: no memory event is modelled. */
    ASSERT_EQ(r->dla, 0);
    ASSERT_EQ(r->dse, 0);
    ASSERT_EQ(r->lat, 0);
}

void test_main(void)
{
    uint32_t r[4];
    uint64_t v;
    irq_disable();
    cpuid(1, 0, r);
    printf("CPUID.1:EAX %x\n", r[0]);
    ASSERT_EQ(r[0] & 0x0FFF3FFF, 0x000106A5);            /* 06_1AH stepping 5 */
    ASSERT(r[3] & (1u << 21));                           /* DS */
    ASSERT(r[2] & (1u << 2));                            /* DTES64 */
    ASSERT(r[2] & (1u << 15));                           /* PDCM */
    cpuid(0xA, 0, r);
    printf("CPUID.0AH %x %x %x %x\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0], 0x07300403);                         /* v3, 4 GP x 48 bits */
    ASSERT_EQ(r[3] & 0x1FFF, 0x603);                     /* 3 fixed x 48 bits */
    ASSERT_EQ(rdmsr(IA32_MISC_ENABLE) & (1u << 12), 0);  /* PEBS available */
    uint64_t cap = rdmsr(IA32_PERF_CAPABILITIES);
    printf("PERF_CAPABILITIES %lx\n", cap);
    ASSERT_EQ((cap >> 8) & 0xF, 1);                      /* enhanced PEBS record */
    ASSERT(cap & (1u << 6));                             /* trap-like */
    ASSERT(cap & (1u << 7));                             /* architectural registers */
    ASSERT_EQ(cap & (1u << 13), 0);                      /* no FW_WRITE */
    ASSERT(rdmsr_safe(IA32_A_PMC0, &v));                 /* so no IA32_A_PMC0 */
    ASSERT(wrmsr_safe(IA32_A_PMC0, 1));
    ASSERT(rdmsr_safe(IA32_PERF_GLOBAL_STATUS_SET, &v)); /* a version 4 MSR */
    ASSERT_EQ(pebs_record_length(), REC);

    /* IA32_PEBS_ENABLE: PEBS_EN_PMC0-3 and LL_EN_PMC0-3, the rest #GP. */
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0);
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 4));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 32 | 1ull << 36));
    ASSERT(!wrmsr_safe(IA32_PEBS_ENABLE, 0xF0000000Full));
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0xF0000000Full);
    wrmsr(IA32_PEBS_ENABLE, 0);

    set_handler(2, pmi_handler);
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400); /* NMI */
    uint64_t base = (uint64_t)pebs_buf;

    /* 1. Record length from consecutive records, the maximum, the reload: 4 records fit; the
     * other 5 triggers write nothing but reload the counter; no threshold PMI. */
    setup(0, base, 4, SLOTS + 1);
    pmis = 0;
    pebs_run();
    printf("maximum: index +%lu, counter %lx, pmis %lu\n", ds.pebs_index - base, rdmsr(IA32_PMC0), pmis);
    ASSERT_EQ(ds.pebs_index - base, 4 * REC);
    /* Consecutive records: record 2 begins where the index said after record 1, and its RIP
     * and R12 are one reload period on. */
    const struct pebs_rec_fmt1 *r1 = (const struct pebs_rec_fmt1 *)pebs_buf;
    const struct pebs_rec_fmt1 *r2 = (const struct pebs_rec_fmt1 *)(pebs_buf + REC);
    ASSERT_EQ(r2->r12 - r1->r12, Q + 1);
    ASSERT_EQ(r2->ip - r1->ip, 3 * (Q + 1));
    for (uint64_t k = 1; k <= 4; k++)
        check_record((const struct pebs_rec_fmt1 *)(pebs_buf + (k - 1) * REC), k);
    ASSERT(pebs_untouched(pebs_buf, 4 * REC, sizeof pebs_buf));          /* nothing at or past the maximum */
    ASSERT_EQ(pmis, 0);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 1);         /* PMC0's overflow, no OvfBuffer */
    /* The 9th trigger (event 38) reloaded RESET: events 39 and 40 follow. */
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET + 2);

    /* 2. The DS interrupt at the threshold (2 records) with freeze on PMI: the handler sees
     * OvfBuffer and resets the index; the counters stay frozen. */
    setup(0, base, SLOTS, 2);
    wrmsr(IA32_DEBUGCTL, 1ull << 12);
    pmis = 0;
    pebs_run();
    printf("threshold: pmis %lu, status at PMI %lx, index at PMI +%lu, now +%lu\n", pmis, pmi_status,
           pmi_index - base, ds.pebs_index - base);
    ASSERT_EQ(pmis, 1);
    ASSERT_EQ(pmi_status, OVF_BUFFER | 1);                /* no CTR_Frz before version 4 */
    ASSERT_EQ(pmi_ctrl, 0);                               /* legacy freeze: GLOBAL_CTRL cleared */
    ASSERT_EQ(pmi_index, base + 2 * REC);
    ASSERT_EQ(ds.pebs_index, base);                       /* reset by the handler */
    for (uint64_t k = 1; k <= 2; k++)
        check_record((const struct pebs_rec_fmt1 *)(saved + (k - 1) * REC), k);
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
    /* From RESET the records come at events Q + 1 and 2(Q + 1): the 2nd and 3rd records of the
     * numbering with START shifted by one record, i.e. r12 = Q and 2Q + 1. */
    const struct pebs_rec_fmt1 *s1 = (const struct pebs_rec_fmt1 *)saved;
    const struct pebs_rec_fmt1 *s2 = (const struct pebs_rec_fmt1 *)(saved + REC);
    ASSERT_EQ(s1->r12, Q);
    ASSERT_EQ(s2->r12, 2 * Q + 1);
    ASSERT_EQ(s1->ip, (uint64_t)pebs_incs + 3 * Q);
    ASSERT_EQ(s1->status, 1);
    ASSERT_EQ(s1->dla | s1->dse | s1->lat, 0);

    /* 3. PEBS on PMC2, its reset field at DS+50H. */
    setup(2, base, SLOTS, SLOTS + 1);
    pebs_run();
    printf("pmc2: index +%lu, counter %lx\n", ds.pebs_index - base, rdmsr(IA32_PMC0 + 2));
    ASSERT_EQ(ds.pebs_index - base, N_RECORDS * REC);
    for (uint64_t k = 1; k <= N_RECORDS; k++)
        check_record((const struct pebs_rec_fmt1 *)(pebs_buf + (k - 1) * REC), k);
    ASSERT(pebs_untouched(pebs_buf, N_RECORDS * REC, sizeof pebs_buf));
    ASSERT_EQ(rdmsr(IA32_PMC0 + 2), RESET + 2);

    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0 + 2, 0);
    wrmsr(IA32_PERFEVTSEL0, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
}
