/* Issue 12: Intel PT from a multiboot guest that stays in the loader's 32-bit protected mode and
 * never executes LGDT (lib32/entry.S). Programs a 4 KiB single-range output region (SDM Vol. 3C
 * §33.2.7.3) with WRMSR from 32-bit code around a loop with calls and conditional branches and
 * dumps it; tests/run-guest.sh compares the bytes with the plugin's copy and decodes them with
 * libipt against the ground truth (truth=1). The plugin once took this code for 16-bit code
 * (from the option ROM's real-mode LGDT): MODE.Exec said 16-bit and the decode went wrong. */
#include "lib32/pt32.h"

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_pt: 32-bit protected mode, loader's GDT\n");
    m32_check_mode();
    m32_pt_single_range(buf);
    uint32_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"(ctl | RTIT_CTL_TRACEEN), "d"(0) : "memory");
    m32_sink = m32_work(20);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"(ctl), "d"(0) : "memory");
    m32_pt_check_dump(buf);
    m32_exit(1);
}
