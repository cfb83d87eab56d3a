// qemu-options: -smp 4
// host-check: decode
/* Stress (issue 9): four vCPUs under MTTCG, each tracing its own way at the same time, many
 * rounds: Intel PT enabled and disabled every round with a configuration that changes from round
 * to round (OS/User, RET compression off, MTC/CYC), an 8 KiB single-range buffer that wraps many
 * times, MOV CR3 switches (PIP), LAPIC timer interrupts, indirect calls, and BTS into a circular
 * 32-record DS buffer every other round. Rounds: `-append rounds=N` (default 40; `make stress`
 * runs many more). In the guest: no STATUS.Error/Stopped, the BTS index always inside its ring,
 * every timer interrupt delivered. On the host (tests/run-guest.sh, "host-check: decode"): libipt
 * decodes each vCPU's complete stream (every session, as the plugin wrote it to guest memory)
 * without a single error. */
#include "bts.h"
#include "pt.h"
#include "pt_churn.h"

#define NCPUS    4
#define BUF_SIZE 8192

static uint8_t *bufs[NCPUS];
static struct ds_area ds[NCPUS] __attribute__((aligned(64)));
static struct bts_record rings[NCPUS][32] __attribute__((aligned(64)));
static volatile uint64_t timer_hits[NCPUS], sink[NCPUS], rounds_done[NCPUS];
static uint64_t rounds;

static void on_timer(struct trap_frame *f)
{
    (void)f;
    timer_hits[cpu_id()]++;
    lapic_eoi();
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void per_cpu(int cpu)
{
    if (cpu != 0) {
        bufs[cpu] = alloc_aligned(BUF_SIZE, BUF_SIZE);
    }
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)bufs[cpu]);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    bts_setup(&ds[cpu], rings[cpu], 32, 33);
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(cpu + 1);
    smp_barrier();
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t x = next_rand(&seed);
        uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
        if (x & 1)
            ctl |= RTIT_CTL_USER;
        if (x & 2)
            ctl |= 1ull << 11; /* DisRETC */
        if (x & 4)
            ctl |= (1ull << 9) | (3ull << 14); /* MTCEn, MTCFreq 3 */
        if (x & 8)
            ctl |= (1ull << 1) | (1ull << 19); /* CYCEn, CycThresh 1 */
        int bts = (r & 1) != 0;
        if (bts)
            wrmsr(IA32_DEBUGCTL, DEBUGCTL_TR | DEBUGCTL_BTS);
        wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
        sink[cpu] += churn(200 + (x >> 8) % 800);
        load_cr3(cr3_alt());
        sink[cpu] += churn(20 + cpu);
        load_cr3(cr3_main());
        uint64_t hits = timer_hits[cpu];
        lapic_timer_oneshot(TIMER_VECTOR, 5000 + (uint32_t)((x >> 20) % 20000));
        while (timer_hits[cpu] == hits)
            asm volatile("sti; hlt; cli" ::: "memory");
        wrmsr(IA32_RTIT_CTL, ctl);
        if (bts)
            wrmsr(IA32_DEBUGCTL, 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
        ASSERT(ds[cpu].bts_index >= ds[cpu].bts_base && ds[cpu].bts_index < ds[cpu].bts_max);
        rounds_done[cpu]++;
    }
    smp_barrier();
}

void test_main(void)
{
    rounds = cmdline_u64("rounds", 40);
    set_handler(TIMER_VECTOR, on_timer);
    lapic_enable();
    bufs[0] = alloc_aligned(BUF_SIZE, BUF_SIZE);
    ASSERT_EQ(smp_start(per_cpu, NCPUS), NCPUS);
    per_cpu(0);
    smp_join();
    for (int cpu = 0; cpu < NCPUS; cpu++) {
        ASSERT_EQ(rounds_done[cpu], rounds);
        ASSERT(timer_hits[cpu] >= rounds);
        printf("cpu %d: %lu rounds, %lu timer interrupts, single range offset %lu, BTS index slot %lu\n",
               cpu, rounds_done[cpu], timer_hits[cpu], rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32,
               (ds[cpu].bts_index - ds[cpu].bts_base) / 24);
    }
}
