/* Issue 12: Atom RTIT (profile=silvermont, seed 002) from a multiboot guest that stays in the
 * loader's 32-bit protected mode and never executes LGDT (lib32/entry.S). Single output region
 * (MSR_RTIT_BASE_ADDR / MSR_RTIT_LIMIT_MASK / MSR_RTIT_OFFSET, seed 002 §3.3) programmed with WRMSR from
 * 32-bit code around a loop with calls and conditional branches; every MSR_RTIT_CTL write drains the
 * internal buffer (§3.3.2), so MSR_RTIT_OFFSET is the stream length after the disabling WRMSR. The
 * host compares the bytes with the plugin's copy and decodes them against the ground truth. */
// pttrace-options: profile=silvermont
#include "lib32/rtit32.h"

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_rtit: 32-bit protected mode, loader's GDT\n");
    m32_check_mode();
    uint32_t ctl = rtit_single_region((uint32_t)buf);
    uint32_t on = ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"(on), "d"(0) : "memory");
    m32_sink = m32_work(20);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"(ctl), "d"(0) : "memory");
    m32_rtit_check_dump(buf);
    m32_exit(1);
}
