/* BTINT = 1 with the threshold at the maximum and the PMI masked (seed 001 §6.5.5/§6.5.6,
 * experiment 14-10's "buffer full"): records are written up to the BTS absolute maximum and
 * not past it; the index stays at the maximum. The host checks that the buffer holds exactly the
 * first 4 taken branches of the ground truth. */
#include "bts.h"
#include "work.h"

static volatile uint64_t sink;
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record buf[6] __attribute__((aligned(64)));

void test_main(void)
{
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400 | (1u << 16)); /* NMI, masked */
    for (int i = 4; i < 6; i++)
        buf[i].from = buf[i].to = buf[i].flags = 0xA5A5A5A5A5A5A5A5ull;
    bts_setup(&ds, buf, 4, 4);
    irq_disable();
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS | DEBUGCTL_BTINT);
    sink = work(50);
    BTS_WRMSR("bts_disable_wrmsr", 0);
    ASSERT_EQ(ds.bts_index, ds.bts_max);
    for (int i = 4; i < 6; i++)
        ASSERT_EQ(buf[i].from & buf[i].to & buf[i].flags, 0xA5A5A5A5A5A5A5A5ull);
    printf("BTSFIRST 4\n");
    for (int i = 0; i < 4; i++)
        bts_print_record("BTSLOG", i, &buf[i]);
}
