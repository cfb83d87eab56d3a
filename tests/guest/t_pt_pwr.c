// pttrace-options: profile=sapphirerapids
// host-check: events pwre c1.1|exstop, ip: @hlt_insn|pwrx int: c1 (c1)
/* Power event trace (issue 15): IA32_RTIT_CTL[4] PwrEvtEn, CPUID.(14H,0):EBX[5],
 * profile=sapphirerapids. Ring-0 branch tracing with PwrEvtEn; STI; HLT waits for a LAPIC timer
 * interrupt. The model's core goes C0 -> C1 (HLT) -> C0 (woken by the interrupt) and nothing
 * deeper, so the packets are exactly (SDM §33.2.3; libipt mwait-pwre-exstop_ip-pwrx.ptt order):
 *   PWRE(C1 = MWAIT-hint encoding 0, sub-state 0, HW = 0: entered by software; ptxed prints
 *   c1.1), EXSTOP(IP = 1), FUP(the HLT),
 *   PWRX(wake reason interrupt, last c1, deepest c1), FUP(the instruction after HLT), TIP(handler).
 * A second HLT with PwrEvtEn = 0 gives only the interrupt's FUP and TIP. The guest checks these
 * sequences in its buffer; the host (tests/run-guest.sh) checks bytes in memory = host copy,
 * libipt's flow = the ground truth, and the power events libipt reports
 * (`// host-check: events`: pwre, exstop at the HLT, pwrx) in that order. */
#include "pt.h"

extern char hlt_insn[], hlt_next[], hlt2_insn[];
static volatile uint64_t timer_hits;
static void on_timer(struct trap_frame *f) { (void)f; timer_hits++; lapic_eoi(); }

static struct pt_pkt pk[512];

static int find_ip(int n, enum pt_kind kind, uint64_t ip)
{
    for (int i = 0; i < n; i++)
        if (pk[i].kind == kind && pk[i].ipbytes && pk[i].ip == ip)
            return i;
    return -1;
}

void test_main(void)
{
    uint32_t r[4];
    cpuid(0x14, 0, r);
    ASSERT(r[1] & (1u << 5)); /* EBX[5] power event trace */
    cpuid(1, 0, r);
    ASSERT_EQ(r[2] & (1u << 3), 0); /* no MONITOR/MWAIT: the model's power events cover HLT only */
    set_handler(TIMER_VECTOR, on_timer);
    lapic_enable();

    uint8_t *buf = alloc_aligned(4096, 4096);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_PWREVTEN;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl | RTIT_CTL_TRACEEN) >> 32)));
    lapic_timer_oneshot(TIMER_VECTOR, 50000);
    asm volatile("sti\n.globl hlt_insn\nhlt_insn: hlt\n.globl hlt_next\nhlt_next: cli" ::: "memory");
    /* Pause (TraceEn = 0), PwrEvtEn off, resume: the same HLT gives no power packets. */
    asm volatile(".globl pt_pause_wrmsr\npt_pause_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));
    uint64_t len1 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    uint64_t ctl2 = ctl & ~RTIT_CTL_PWREVTEN;
    asm volatile(".globl pt_resume_wrmsr\npt_resume_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl2 | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl2 | RTIT_CTL_TRACEEN) >> 32)));
    lapic_timer_oneshot(TIMER_VECTOR, 50000);
    asm volatile("sti\n.globl hlt2_insn\nhlt2_insn: hlt\ncli" ::: "memory");
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl2), "d"((uint32_t)(ctl2 >> 32)));
    ASSERT_EQ(timer_hits, 2);
    uint64_t len = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    pt_print(buf, len);
    /* One parse of the whole buffer (run 2 has no PSB+: its IPs are compressed against run 1's). */
    int n = pt_parse_all(buf, len, pk, 512);
    ASSERT(n > 0);
    int n1 = 0;
    while (n1 < n && pk[n1].off < len1)
        n1++;
    int f = find_ip(n, PT_FUP, (uint64_t)hlt_insn);
    ASSERT(f >= 2);
    int e = pt_prev_nonpad(pk, f), w = pt_prev_nonpad(pk, e);
    ASSERT_EQ(pk[w].kind, PT_PWRE);
    ASSERT_EQ(pk[w].val, 0x0000);        /* C1 (encoding 0), sub-state 0, HW = 0 */
    ASSERT_EQ(pk[e].kind, PT_EXSTOP);
    ASSERT_EQ(pk[e].val, 1);             /* IP = 1: the FUP of the HLT follows */
    int x = pt_next_nonpad(pk, n, f);
    ASSERT_EQ(pk[x].kind, PT_PWRX);
    ASSERT_EQ(pk[x].val, 0x0100);        /* last C1, deepest C1, wake reason 1: interrupt */
    int i = pt_next_nonpad(pk, n, x);
    ASSERT_EQ(pk[i].kind, PT_FUP);
    ASSERT_EQ(pk[i].ip, (uint64_t)hlt_next);
    int t = pt_next_nonpad(pk, n, i);
    ASSERT_EQ(pk[t].kind, PT_TIP);
    int power = 0;
    for (int k = 0; k < n1; k++)
        power += pk[k].kind >= PT_EXSTOP;
    ASSERT_EQ(power, 3);

    ASSERT(n1 < n);
    for (int k = n1; k < n; k++)
        ASSERT(pk[k].kind < PT_EXSTOP);
    int f2 = find_ip(n, PT_FUP, (uint64_t)hlt2_insn + 1); /* the interrupt's FUP */
    ASSERT(f2 >= n1);
    pt_dump(buf, len);
}
