/* Issue 12: Branch Trace Store in compatibility mode (lib/compat_trip.h). BTS records carry
 * linear addresses and, in IA-32e mode, the 64-bit record format (SDM Vol. 3B §18.4.8.2,
 * Figure 18-9) whatever the code's mode: the FROM of a branch in 32-bit code is the address of
 * that branch decoded as 32-bit code (a 64-bit decode of the same bytes gives other instruction
 * boundaries: `inc ecx` = 41 is a REX prefix in 64-bit code). The host compares every record with
 * the taken transfers of the ground truth, the code between compat32_start and compat32_end
 * decoded as 32-bit code (`bts-expect --code32`). */
// bts-expect: --code32 @compat32_start-@compat32_end
#include "bts.h"
#include "compat_trip.h"

#define SLOTS 256
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record buf[SLOTS] __attribute__((aligned(64)));
static volatile uint32_t trip_result;

void test_main(void)
{
    compat_gdt_enter();
    bts_setup(&ds, buf, SLOTS, SLOTS + 1);
    irq_disable();
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS);
    trip_result = compat_trip_run();
    BTS_WRMSR("bts_disable_wrmsr", 0);
    compat_gdt_leave();
    uint64_t n = (ds.bts_index - ds.bts_base) / sizeof(struct bts_record);
    printf("compat trip: ecx %x (expected %x), %lu BTS records\n", trip_result, TRIP_ECX, n);
    ASSERT_EQ(trip_result, TRIP_ECX);
    ASSERT(n >= 12 && n < SLOTS);
    printf("BTSLOGCOUNT %lu\n", n);
    for (uint64_t i = 0; i < n; i++)
        bts_print_record("BTSLOG", i, &buf[i]);
}
