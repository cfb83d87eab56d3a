/* BTS enumeration, MSRs and the circular BTS buffer in 64-bit mode (seed 001 experiment 14-12,
 * SDM §18.4.9.3 with BTINT = 0).
 *  - CPUID.1:EDX[21] DS, ECX[2] DTES64, ECX[4] DS-CPL; IA32_MISC_ENABLE[11] = 0 (BTS available),
 *    [12] = 1 (PEBS unavailable).
 *  - IA32_DEBUGCTL and IA32_DS_AREA reset to 0, read back what was written, #GP(0) on reserved
 *    bits / non-canonical addresses with the value unchanged.
 *  - A 10-record buffer, threshold one record past the maximum (seed Figure "40"): a branchy
 *    function wraps it several times; the index wraps to the base; no DS interrupt.
 * The host (tests/run-guest.sh) rebuilds the expected ring from the plugin's per-instruction
 * ground truth: slot k mod 10 holds the k-th taken branch, and the index is at n mod 10. */
#include "bts.h"
#include "work.h"

static volatile uint64_t sink;
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record ring[10] __attribute__((aligned(64)));

void test_main(void)
{
    uint32_t r[4];
    cpuid(1, 0, r);
    ASSERT(r[3] & (1u << 21)); /* DS */
    ASSERT(r[2] & (1u << 2));  /* DTES64 */
    ASSERT(r[2] & (1u << 4));  /* DS-CPL */
    uint64_t misc = rdmsr(IA32_MISC_ENABLE);
    ASSERT_EQ(misc & (1u << 11), 0);
    ASSERT_EQ(misc & (1u << 12), 1u << 12);

    ASSERT_EQ(rdmsr(IA32_DEBUGCTL), 0);
    ASSERT_EQ(rdmsr(IA32_DS_AREA), 0);
    wrmsr(IA32_DEBUGCTL, 0x3); /* LBR | BTF: kept and read back */
    ASSERT_EQ(rdmsr(IA32_DEBUGCTL), 0x3);
    ASSERT(wrmsr_safe(IA32_DEBUGCTL, 1u << 2) != 0);  /* reserved bit 2 */
    ASSERT_EQ(last_fault.vector, 13);
    ASSERT_EQ(last_fault.error_code, 0);
    ASSERT(wrmsr_safe(IA32_DEBUGCTL, 1ull << 32) != 0);
    ASSERT_EQ(rdmsr(IA32_DEBUGCTL), 0x3);
    wrmsr(IA32_DEBUGCTL, 0);
    ASSERT(wrmsr_safe(IA32_DS_AREA, 0x0000800000000000ull) != 0); /* non-canonical */
    ASSERT_EQ(rdmsr(IA32_DS_AREA), 0);
    wrmsr(IA32_DS_AREA, 0xFFFF800000001000ull);
    ASSERT_EQ(rdmsr(IA32_DS_AREA), 0xFFFF800000001000ull);

    bts_setup(&ds, ring, 10, 11);
    ASSERT_EQ(rdmsr(IA32_DS_AREA), (uint64_t)&ds);
    irq_disable();
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS);
    sink = work(40);
    BTS_WRMSR("bts_disable_wrmsr", 0);
    ASSERT_EQ(rdmsr(IA32_DEBUGCTL), 0);

    uint64_t idx = ds.bts_index;
    ASSERT(idx >= ds.bts_base && idx < ds.bts_max);
    ASSERT_EQ((idx - ds.bts_base) % sizeof(struct bts_record), 0);
    printf("BTSRING slots=10 index=%lu\n", (idx - ds.bts_base) / sizeof(struct bts_record));
    for (int i = 0; i < 10; i++) {
        ASSERT(ring[i].from != 0 && ring[i].to != 0); /* wrapped: every slot written */
        ASSERT_EQ(ring[i].flags & ~0x10ull, 0);
        bts_print_record("BTSSLOT", i, &ring[i]);
    }
    /* Recording is off: a branch now changes nothing. */
    sink = work(5);
    ASSERT_EQ(ds.bts_index, idx);
}
