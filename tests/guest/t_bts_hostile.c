/* Hostile Debug Store set-ups (issue 9): QEMU keeps running, the guest keeps running, and only
 * memory the guest pointed the BTS at is written.
 *  1. IA32_DS_AREA at an unmapped linear address (not present in the page tables).
 *  2. A mapped DS area whose BTS index points at unmapped memory.
 *  3. An index below the base (software error): records land where the index points, the index
 *     advances, and the circular wrap happens only at the maximum.
 * The SDM requires the DS area and the BTS buffer in always-present memory and leaves the
 * behaviour otherwise undefined; the model drops such records and counts them (printed at exit:
 * "not written (DS area or buffer unmapped)"). */
#include "bts.h"
#include "work.h"

static volatile uint64_t sink;
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record buf[16] __attribute__((aligned(64)));

static void traced(int n)
{
    wrmsr(IA32_DEBUGCTL, DEBUGCTL_TR | DEBUGCTL_BTS);
    sink = work(n);
    wrmsr(IA32_DEBUGCTL, 0);
}

void test_main(void)
{
    irq_disable();
    /* 1. */
    wrmsr(IA32_DS_AREA, UNMAPPED_ADDR);
    traced(20);
    ASSERT_EQ(rdmsr(IA32_DS_AREA), UNMAPPED_ADDR);
    /* 2. */
    ds.bts_base = ds.bts_index = UNMAPPED_ADDR + 0x1000;
    ds.bts_max = UNMAPPED_ADDR + 0x2000;
    ds.bts_threshold = UNMAPPED_ADDR + 0x3000;
    wrmsr(IA32_DS_AREA, (uint64_t)&ds);
    traced(20);
    ASSERT_EQ(ds.bts_index, UNMAPPED_ADDR + 0x1000);
    /* 3. Base at buf[8], index at buf[2]: records go to buf[2], buf[3], ... */
    uint64_t base = (uint64_t)&buf[8], size = sizeof(struct bts_record);
    ds.bts_base = base;
    ds.bts_index = (uint64_t)&buf[2];
    ds.bts_max = base + 4 * size;
    ds.bts_threshold = base + 5 * size;
    traced(3);
    uint64_t n = (ds.bts_index - (uint64_t)&buf[2]) / size;
    printf("index below the base: %lu records written from buf[2] on\n", n);
    ASSERT(n >= 3 && n < 6);
    ASSERT(buf[2].from != 0 && buf[2].to != 0);
    ASSERT_EQ(buf[0].from | buf[1].from, 0);
    printf("hostile DS areas: guest and QEMU still running\n");
}
