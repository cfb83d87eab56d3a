/* Issue 12: Branch Trace Store from a multiboot guest that stays in the loader's 32-bit
 * protected mode and never executes LGDT (lib32/entry.S). The DS area and BTS buffer are set up
 * with WRMSR from 32-bit code (SDM Vol. 3B §18.4.8-18.4.9) around a loop with calls and
 * conditional branches; the host compares every record with the ground truth. The plugin once
 * recorded `call rel32` at X with FROM = X+3 (the 16-bit length) here. */
#include "lib32/bts32.h"

#define SLOTS 512
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record rec[SLOTS] __attribute__((aligned(64)));

#define BTS_WRMSR(label, value) \
    asm volatile(".globl " label "\n" label ": wrmsr" :: "c"(IA32_DEBUGCTL), "a"(value), "d"(0) : "memory")

void m32_main(void)
{
    puts_serial("t_m32_bts: 32-bit protected mode, loader's GDT\n");
    m32_check_mode();
    m32_bts_check_dtes64();
    m32_bts_setup(&ds, rec, SLOTS);
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS);
    m32_sink = m32_work(6);
    BTS_WRMSR("bts_disable_wrmsr", 0);
    uint32_t n = m32_bts_log(&ds, rec, SLOTS);
    CHECK(n > 10 && n < SLOTS);
    m32_exit(1);
}
