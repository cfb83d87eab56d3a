/* Issue 12: Intel PT from a multiboot guest that stays in the loader's 32-bit protected mode and
 * never executes LGDT (lib32/entry.S). Programs a 4 KiB single-range output region (SDM Vol. 3C
 * §33.2.7.3) with WRMSR from 32-bit code around a loop with calls and conditional branches and
 * dumps it; tests/run-guest.sh compares the bytes with the plugin's copy and decodes them with
 * libipt against the ground truth (truth=1). The plugin once took this code for 16-bit code
 * (from the option ROM's real-mode LGDT): MODE.Exec said 16-bit and the decode went wrong. */
#include "lib32/m32.h"

#define RTIT_CTL_TRACEEN   (1u << 0)
#define RTIT_CTL_OS        (1u << 2)
#define RTIT_CTL_USER      (1u << 3)
#define RTIT_CTL_BRANCHEN  (1u << 13)

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_pt: 32-bit protected mode, loader's GDT\n");
    m32_check_mode();
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint32_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    uint32_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"(ctl | RTIT_CTL_TRACEEN), "d"(0) : "memory");
    m32_sink = m32_work(20);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"(ctl), "d"(0) : "memory");
    uint32_t len = (uint32_t)(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32);
    puts_serial("single range: "); put_hex(len); puts_serial(" bytes\n");
    CHECK(len > 16 && len < 4096);
    CHECK(buf[len - 1] == 0x01); /* TIP.PGD, IP suppressed */
    CHECK((rdmsr(IA32_RTIT_STATUS) & 0x30) == 0);
    hex_dump("PTDUMP ", buf, len);
    m32_exit(1);
}
