/* CPL-qualified BTS (seed 001 experiment 14-11, §10.1): with BTS_OFF_OS the kernel's branches
 * and the transfers into the kernel (int $0x80, SYSCALL) are not recorded; the returns to ring 3
 * (IRETQ, SYSRET) and the user code's branches are. DEBUGCTL = 2C0H as in the seed.
 * The host checks the log against the ground truth filtered by target privilege (user code runs
 * at its alias addresses >= USER_ALIAS_OFFSET). */
// bts-expect: --user-from 40000000 --off-os
#include "bts.h"

#define SLOTS 512
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record buf[SLOTS] __attribute__((aligned(64)));

__attribute__((noinline)) static uint64_t user_work(int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++)
        acc += (i & 1) ? (uint64_t)i : acc >> 1;
    return acc;
}

static uint64_t user_main(void)
{
    uint64_t r = 0;
    for (int i = 0; i < 3; i++)
        r += user_int80(SYS_ECHO, i) + user_work(8); /* like the seed's INT service calls */
    return r;
}

void test_main(void)
{
    bts_setup(&ds, buf, SLOTS, SLOTS + 1);
    irq_disable();
    BTS_WRMSR("bts_enable_wrmsr", 0x2C0); /* TR=1, BTS=1, BTS_OFF_OS=1 */
    uint64_t r = enter_user(user_main, NULL);
    BTS_WRMSR("bts_disable_wrmsr", 0);
    (void)r;
    uint64_t n = (ds.bts_index - ds.bts_base) / sizeof(struct bts_record);
    uint64_t from_kernel = 0;
    for (uint64_t i = 0; i < n; i++) {
        ASSERT(buf[i].to >= USER_ALIAS_OFFSET);  /* only transfers into ring 3 */
        if (buf[i].from < USER_ALIAS_OFFSET)
            from_kernel++;                       /* IRETQ / SYSRET back to user */
    }
    printf("BTS_OFF_OS: %lu records, %lu of them returns from the kernel\n", n, from_kernel);
    ASSERT(n > 10 && n < SLOTS);
    ASSERT(from_kernel >= 4); /* entry into ring 3 + three returns from int $0x80 */
    printf("BTSLOGCOUNT %lu\n", n);
    for (uint64_t i = 0; i < n; i++)
        bts_print_record("BTSLOG", i, &buf[i]);
}
