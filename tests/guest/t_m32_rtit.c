/* Issue 12: Atom RTIT (profile=silvermont, seed 002) from a multiboot guest that stays in the
 * loader's 32-bit protected mode and never executes LGDT (lib32/entry.S). Single output region
 * (MSR_RTIT_BASE_ADDR / MSR_RTIT_LIMIT_MASK / MSR_RTIT_OFFSET, seed 002 §3.3) programmed with WRMSR from
 * 32-bit code around a loop with calls and conditional branches; every MSR_RTIT_CTL write drains the
 * internal buffer (§3.3.2), so MSR_RTIT_OFFSET is the stream length after the disabling WRMSR. The
 * host compares the bytes with the plugin's copy and decodes them against the ground truth. */
// pttrace-options: profile=silvermont
#include "lib32/m32.h"

#define ATOM_CTL_TRACE_EN     (1u << 0)
#define ATOM_CTL_OS           (1u << 2)
#define ATOM_CTL_USER         (1u << 3)
#define ATOM_CTL_CMPRS_RET    (1u << 11)
#define ATOM_CTL_TRACE_ACTIVE (1u << 13)

static uint8_t buf[4096] __attribute__((aligned(4096)));

void m32_main(void)
{
    puts_serial("t_m32_rtit: 32-bit protected mode, loader's GDT\n");
    m32_check_mode();
    (void)rdmsr(MSR_RTIT_CTL); /* §3.3.1: MSR_RTIT_CTL is read first */
    wrmsr(MSR_RTIT_BASE_ADDR, (uint32_t)buf);
    wrmsr(MSR_RTIT_LIMIT_MASK, 0xFFF);
    wrmsr(MSR_RTIT_OFFSET, 0);
    wrmsr(MSR_RTIT_EVENTS, 7 | (6 << 3)); /* FilterEn: always on; TraceStop: always off */
    uint32_t ctl = ATOM_CTL_OS | ATOM_CTL_USER | ATOM_CTL_CMPRS_RET;
    wrmsr(MSR_RTIT_CTL, ctl);
    uint32_t on = ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"(on), "d"(0) : "memory");
    m32_sink = m32_work(20);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"(ctl), "d"(0) : "memory");
    uint32_t len = (uint32_t)rdmsr(MSR_RTIT_OFFSET);
    puts_serial("TNTBUFF "); put_hex(rdmsr(0x77D)); putc_serial('\n');
    puts_serial("RTIT: "); put_hex(len); puts_serial(" bytes\n");
    CHECK(len > 16 && len < 4096);
    hex_dump("PTDUMP ", buf, len);
    m32_exit(1);
}
