/* BTINT = 1: the DS interrupt when the BTS index reaches the threshold, serviced by a PMI
 * handler that saves the records and resets the index (seed 001 experiments 14-10 and 14-13:
 * count the PMI handler invocations while a workload runs).
 * The PMI is an NMI through LVTPC; the handler stops BTS (IA32_DEBUGCTL.TR = 0) first, copies
 * [base, index) to a log, resets the index to the base, re-arms LVTPC (the processor masked it
 * on delivery) and restarts BTS. The host compares the complete log (the records of the
 * workload, of the interrupt deliveries and of the handler's own branches while BTS was on)
 * with the ground truth, record by record. */
#include "bts.h"
#include "work.h"

#define SLOTS 32
#define THRESHOLD 8 /* headroom: the PMI skid plus the ~7 records of the NMI entry path before the handler stops BTS */
#define LOG_MAX 4096

static volatile uint64_t sink;
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record buf[SLOTS + 1] __attribute__((aligned(64)));
static struct bts_record log_[LOG_MAX];
static volatile uint64_t nlog, pmis, max_at_pmi, min_at_pmi = ~0ull, lvt_at_pmi;

static void drain(void)
{
    uint64_t n = (ds.bts_index - ds.bts_base) / sizeof(struct bts_record);
    for (uint64_t i = 0; i < n && nlog < LOG_MAX; i++)
        log_[nlog++] = buf[i];
    ds.bts_index = ds.bts_base;
}

__attribute__((noinline)) static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    BTS_WRMSR("bts_disable_wrmsr_pmi", 0);
    uint64_t n = (ds.bts_index - ds.bts_base) / sizeof(struct bts_record);
    if (n > max_at_pmi) max_at_pmi = n;
    if (n < min_at_pmi) min_at_pmi = n;
    lvt_at_pmi = lapic_read(LAPIC_LVT_PERF);
    pmis++;
    drain();
    lapic_write(LAPIC_LVT_PERF, 0x400); /* NMI, unmasked */
    BTS_WRMSR("bts_enable_wrmsr_pmi", DEBUGCTL_TR | DEBUGCTL_BTS | DEBUGCTL_BTINT);
}

void test_main(void)
{
    buf[SLOTS].from = 0x5A5A5A5A5A5A5A5Aull; /* sentinel past the maximum */
    set_handler(2, pmi_handler);
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400);
    bts_setup(&ds, buf, SLOTS, THRESHOLD);
    irq_disable();
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS | DEBUGCTL_BTINT);
    sink = work(300);
    BTS_WRMSR("bts_disable_wrmsr", 0);
    drain();
    printf("BTS PMIs: %lu, records per PMI between %lu and %lu, log %lu records\n", pmis, min_at_pmi,
           max_at_pmi, nlog);
    ASSERT(pmis >= 5);
    ASSERT(min_at_pmi >= THRESHOLD);  /* the interrupt came at the threshold, not before */
    ASSERT(max_at_pmi < SLOTS);       /* ... and before the buffer filled up */
    ASSERT(lvt_at_pmi & (1u << 16));  /* LVTPC masked by the delivery */
    ASSERT_EQ(buf[SLOTS].from, 0x5A5A5A5A5A5A5A5Aull);
    ASSERT(nlog < LOG_MAX);
    printf("BTSLOGCOUNT %lu\n", nlog);
    for (uint64_t i = 0; i < nlog; i++)
        bts_print_record("BTSLOG", i, &log_[i]);
}
