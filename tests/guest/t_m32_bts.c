/* Issue 12: Branch Trace Store from a multiboot guest that stays in the loader's 32-bit
 * protected mode and never executes LGDT (lib32/entry.S). The DS area and BTS buffer are set up
 * with WRMSR from 32-bit code (SDM Vol. 3B §18.4.8-18.4.9) around a loop with calls and
 * conditional branches; the host compares every record with the ground truth. The plugin once
 * recorded `call rel32` at X with FROM = X+3 (the 16-bit length) here. */
#include "lib32/m32.h"

#define DEBUGCTL_TR  (1u << 6)
#define DEBUGCTL_BTS (1u << 7)

/* The 64-bit DS format (CPUID.1:ECX.DTES64 = 1, the plugin's default: SDM Figure 18-9). */
struct ds_area { uint64_t bts_base, bts_index, bts_max, bts_threshold, pebs[8]; };
struct bts_record { uint64_t from, to, flags; };

#define SLOTS 512
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record rec[SLOTS] __attribute__((aligned(64)));

#define BTS_WRMSR(label, value) \
    asm volatile(".globl " label "\n" label ": wrmsr" :: "c"(IA32_DEBUGCTL), "a"(value), "d"(0) : "memory")

void m32_main(void)
{
    puts_serial("t_m32_bts: 32-bit protected mode, loader's GDT\n");
    m32_check_mode();
    uint32_t ecx;
    asm volatile("cpuid" : "=c"(ecx) : "a"(1), "c"(0) : "ebx", "edx");
    CHECK(ecx & (1u << 2)); /* DTES64 */
    ds.bts_base = ds.bts_index = (uint32_t)rec;
    ds.bts_max = (uint32_t)rec + SLOTS * sizeof(struct bts_record);
    ds.bts_threshold = ds.bts_max + sizeof(struct bts_record);
    wrmsr(IA32_DS_AREA, (uint32_t)&ds);
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS);
    m32_sink = m32_work(6);
    BTS_WRMSR("bts_disable_wrmsr", 0);
    uint32_t n = (uint32_t)(ds.bts_index - ds.bts_base) / sizeof(struct bts_record);
    puts_serial("BTS records: "); put_hex(n); putc_serial('\n');
    CHECK(n > 10 && n < SLOTS);
    for (uint32_t i = 0; i < n; i++) {
        puts_serial("BTSLOG "); put_hex(i); putc_serial(' ');
        put_hex(rec[i].from); putc_serial(' ');
        put_hex(rec[i].to); putc_serial(' ');
        put_hex(rec[i].flags); putc_serial('\n');
    }
    m32_exit(1);
}
