// pttrace-options: pebs=1
/* PEBS of the Skylake profile (SDM Vol. 3B §20.3.1.1.1 / §20.5.3.1; seed 001 §5, §6.5-§6.7,
 * §9.1.3-§9.2.5): enumeration (CPUID.1 DS/DTES64, IA32_MISC_ENABLE[12] = 0, PERF_CAPABILITIES
 * format 3 trap-like), IA32_PEBS_ENABLE's #GP rules, and records of a hand-written straight-line
 * sequence checked field by field: record length 200, EventingIP = the instruction after the
 * overflowing one, IP = the next one (trap-like), the GPRs after it, applicable counters, TSC,
 * the DS index, the counter reloaded from the DS reset field, the threshold PMI with
 * GLOBAL_STATUS[62] OvfBuffer, nothing written at the absolute maximum, and a buffer in
 * unmapped memory.
 *
 * Counting convention (as t_pmu_count): the enabling WRMSR is event 1, `inc %r12` number j is
 * event j + 1. With PMC0 = INST_RETIRED.ANY_P at 2^48 - P and reset value 2^48 - P, the counter
 * overflows at event P, the next event (P + 1) triggers the record and the reload, so record k
 * (k = 1, 2, ...) comes from event k(P + 1): `inc` number k(P + 1) - 1. */
#include "pebs.h"

#define P        5ull                 /* sampling period - 1: overflow after P events */
#define RESET    ((1ull << 48) - P)
#define REC      200
#define SLOTS    8
#define N_INCS   38                   /* events 2..39; the XOR after them is event 40 */

_Static_assert(sizeof(struct pebs_rec) == REC, "format 3 record");

static struct ds64 ds __attribute__((aligned(64)));
static uint8_t pebs_buf[(SLOTS + 2) * REC] __attribute__((aligned(64)));

/* pebs_run(): known registers, enable (GLOBAL_CTRL = 1), 38 x inc %r12, xor, disable. */
PEBS_RUN_ASM("", "$1", "");

static volatile uint64_t pmis, pmi_status;

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    /* Counters stay frozen (CTR_Frz) until the test clears the status. */
    lapic_write(LAPIC_LVT_PERF, 0x400);
}

static void setup(uint64_t base, uint64_t max_records, uint64_t thr_records)
{
    pebs_ds_setup(&ds, pebs_buf, sizeof pebs_buf, base, REC, max_records, thr_records);
    ds.reset[0] = RESET;
    wrmsr(IA32_DS_AREA, (uint64_t)&ds);
    wrmsr(IA32_A_PMC0, RESET);
    wrmsr(IA32_PERFEVTSEL0, PEBS_EVTSEL_INST_RETIRED);
    wrmsr(IA32_PEBS_ENABLE, 1);
}

/* Record k (1-based) field by field. */
static void check_record(uint64_t k, const struct pebs_rec *prev)
{
    const struct pebs_rec *r = (const struct pebs_rec *)(pebs_buf + (k - 1) * REC);
    uint64_t event = k * (P + 1), inc = event - 1;
    uint64_t eventing = (uint64_t)pebs_incs + 3 * (inc - 1);
    printf("record %lu: ip %lx eventing_ip %lx r12 %lu applicable %lx tsc %lx\n", k, r->ip, r->eventing_ip,
           r->r12, r->applicable, r->tsc);
    ASSERT_EQ(r->eventing_ip, eventing);   /* the instruction after the overflowing one */
    pebs_check_regs((const struct pebs_rec_fmt0 *)r, eventing + 3, inc, 1);
    ASSERT_EQ(r->flags & 0x2, 0x2);        /* RFLAGS bit 1 */
    ASSERT_EQ(r->applicable, 1);           /* PMC0 */
    ASSERT_EQ(r->dla | r->dse | r->lat | r->tsx, 0);
    ASSERT(r->tsc != 0);
    if (prev)
        ASSERT(r->tsc > prev->tsc);
}

void test_main(void)
{
    uint32_t r[4];
    uint64_t v;
    irq_disable();
    cpuid(1, 0, r);
    ASSERT(r[3] & (1u << 21));                           /* DS */
    ASSERT(r[2] & (1u << 2));                            /* DTES64 */
    ASSERT_EQ(rdmsr(IA32_MISC_ENABLE) & (1u << 12), 0);  /* PEBS available */
    uint64_t cap = rdmsr(IA32_PERF_CAPABILITIES);
    printf("PERF_CAPABILITIES %lx\n", cap);
    ASSERT_EQ((cap >> 8) & 0xF, 3);                      /* PEBS format 3 */
    ASSERT(cap & (1u << 6));                             /* trap-like */
    ASSERT(cap & (1u << 7));                             /* architectural registers */

    /* IA32_PEBS_ENABLE: PEBS_EN_PMC0-3 and LL_EN_PMC0-3, the rest #GP. */
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0);
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 4));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 31));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 36));
    ASSERT(wrmsr_safe(IA32_PEBS_ENABLE, 1ull << 63));
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0);
    ASSERT(!wrmsr_safe(IA32_PEBS_ENABLE, 0xF0000000Full));
    ASSERT_EQ(rdmsr(IA32_PEBS_ENABLE), 0xF0000000Full);
    ASSERT(!rdmsr_safe(IA32_PEBS_ENABLE, &v));
    wrmsr(IA32_PEBS_ENABLE, 0);

    set_handler(2, pmi_handler);
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400); /* NMI */
    uint64_t base = (uint64_t)pebs_buf;

    /* 1. Maximum: 4 records fit; the 5th and 6th triggers write nothing; no threshold PMI. */
    setup(base, 4, SLOTS + 1);
    pmis = 0;
    pebs_run();
    printf("maximum: index +%lu, counter %lx, pmis %lu\n", ds.pebs_index - base, rdmsr(IA32_PMC0), pmis);
    ASSERT_EQ(ds.pebs_index, base + 4 * REC);
    for (uint64_t k = 1; k <= 4; k++)
        check_record(k, k > 1 ? (const struct pebs_rec *)(pebs_buf + (k - 2) * REC) : 0);
    ASSERT(pebs_untouched(pebs_buf, 4 * REC, sizeof pebs_buf));          /* nothing at or past the maximum */
    ASSERT_EQ(pmis, 0);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & OVF_BUFFER, 0);
    /* The 6th trigger (event 36) reloaded the counter: events 37..40 follow. */
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET + 4);

    /* 2. Threshold after 3 records: PMI with OvfBuffer; freeze on PMI stops counting there. */
    setup(base, SLOTS, 3);
    wrmsr(IA32_DEBUGCTL, 1ull << 12);
    pmis = 0;
    pebs_run();
    wrmsr(IA32_DEBUGCTL, 0);
    uint64_t status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    printf("threshold: index +%lu, pmis %lu, status at PMI %lx, now %lx\n", ds.pebs_index - base, pmis, pmi_status,
           status);
    ASSERT_EQ(pmis, 1);
    ASSERT(pmi_status & OVF_BUFFER);
    ASSERT(pmi_status & CTR_FRZ);
    ASSERT_EQ(ds.pebs_index, base + 3 * REC);
    for (uint64_t k = 1; k <= 3; k++)
        check_record(k, k > 1 ? (const struct pebs_rec *)(pebs_buf + (k - 2) * REC) : 0);
    ASSERT(pebs_untouched(pebs_buf, 3 * REC, sizeof pebs_buf));
    /* Frozen right after the third record (event 18): the counter holds the reset value. */
    ASSERT_EQ(rdmsr(IA32_PMC0), RESET);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, status);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 0);

    /* 3. A buffer in unmapped memory: nothing written, the index stays, nothing crashes. */
    setup(0x7FFF00000000ull, 4, 2);
    pebs_run();
    ASSERT_EQ(ds.pebs_index, 0x7FFF00000000ull);
    ASSERT(pebs_untouched(pebs_buf, 0, sizeof pebs_buf));
    wrmsr(IA32_PEBS_ENABLE, 0);
    wrmsr(IA32_PERFEVTSEL0, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
}
