// pttrace-options: profile=sapphirerapids
// host-check: events if 0, ip: @ev_int3|interrupt 3, ip: @ev_int3|iret, ip: @trap_iret|interrupt 6, ip: @ev_ud2|iret, ip: @trap_iret|interrupt e, cr2: 80000040, ip: @ev_pf|iret, ip: @trap_iret|if 1, ip: @ev_sti_next|interrupt 40, ip: *|if 0, ip: *|iret, ip: @trap_iret|if 1, ip: *|if 0, ip: @ev_cli_next|if 1, ip: @ev_popf_next|if 0, ip: *|iret, ip: @ev_iret_pending|if 1, ip: @ev_after_iret|interrupt 40, ip: @ev_after_iret|if 0, ip: *|iret, ip: @trap_iret|if 1, ip: @ev_after_iret|if 0, ip: *|iret, ip: *|if 1, ip: *|if 0, ip: @syscall_entry|if 1, ip: *|interrupt 80, ip: *|if 0, ip: *|iret, ip: @trap_iret|if 1, ip: *|if 0, ip: @syscall_entry
/* Event Trace (issue 15): IA32_RTIT_CTL[31] EventEn, CPUID.(14H,0):EBX[7], profile=sapphirerapids.
 * Ring-0 branch tracing with EventEn over INT3, #UD (UD2 skipped by its handler), #PF on an
 * unmapped address (resumed after the load), a LAPIC timer interrupt taken after STI, POPF
 * setting IF, an IRETQ to IF = 1 with the timer interrupt pending (taken right after it), and ring 3 (entered by IRETQ, SYSCALL + SYSRET, INT $0x80 + IRETQ, left by
 * SYSCALL; user and kernel traced); every handler returns with IRETQ (trap_iret). SYSCALL and
 * SYSRET have no CFE type (INTR, IRET, SMI, RSM, SIPI, INIT, VM entry/exit, shutdown, UINTR,
 * UIRET): only the IF they change shows, in MODE.Exec. Expected packets (libipt pt_event_decoder.c: a CFE with
 * IP = 1 binds the next FUP, which then starts no asynchronous branch; with IP = 0 the event
 * attaches to the next FUP; EVD goes to the CFE; mode_exec-if.ptt for IF changes):
 *   each event: [EVD(CR2) for #PF] CFE(INTR, vector, IP = 0: the event's own FUP follows and
 *               stays the source of the asynchronous branch), FUP(source: the INT3, the UD2,
 *               the load, the next instruction for the interrupt), MODE.Exec(IF = 0: the
 *               interrupt gate cleared IF, only where IF was 1), TIP(handler);
 *   each IRETQ: CFE(IRET, IP = 1), FUP(trap_iret), MODE.Exec(IF restored) if it changes, TIP;
 *   STI: MODE.Exec(64-bit, IF = 1), FUP(next instruction); CLI: MODE.Exec(IF = 0), FUP(next).
 * The guest checks those in its buffer; the host checks bytes = host copy, libipt's flow = the
 * ground truth, and the events libipt reports (`pttrace decode --events`, with libipt's
 * enable_iflags_events since meta.txt says event_trace=1) in order: the IF changes (`if 0/1` at
 * the enable, STI, the timer's gate and IRET, CLI, POPF, ring 3 entry, SYSCALL, SYSRET, INT $0x80
 * and its IRETQ), the interrupts with their vectors (CR2 for the #PF) and the IRETs. */
#include "pt.h"

extern char ev_int3[], ev_ud2[], ev_pf[], ev_sti_next[], ev_cli_next[], ev_popf_next[], trap_iret[],
    isr_stubs[], ev_iret_pending[], ev_after_iret[];
static volatile uint64_t timer_hits, ud_hits, pf_val;
static void on_timer(struct trap_frame *f) { (void)f; timer_hits++; lapic_eoi(); }
static void on_bp(struct trap_frame *f) { (void)f; }
static void on_ud(struct trap_frame *f) { ud_hits++; f->rip += 2; }

/* As many packets as the 16 KiB buffer can hold: the waits for the timer below spin for as long
 * as the host takes to fire it, one TNT bit per iteration (2559 packets in one CI run). */
static struct pt_pkt pk[16384];

/* Ring 3: SYSCALL + SYSRET, INT $0x80 + IRETQ; returns through SYSCALL(SYS_EXIT). */
static uint64_t user_path(void)
{
    return user_syscall(SYS_ECHO, 5) + user_int80(SYS_ECHO, 6);
}

static int find_cfe(int n, int from, uint32_t type, uint32_t vector)
{
    for (int i = from; i < n; i++)
        if (pk[i].kind == PT_CFE && ((pk[i].val >> 8) & 0x1F) == type && (pk[i].val & 0xFF) == vector)
            return i;
    return -1;
}

/* CFE(INTR, vector, IP = 0), FUP(fup, or any IP if 0), [MODE.Exec], TIP(the vector's stub). */
static int check_intr(int n, int from, uint32_t vector, uint64_t fup)
{
    int c = find_cfe(n, from, 1, vector);
    printf("  CFE(INTR, %x) at packet %d\n", vector, c);
    ASSERT(c >= 0);
    ASSERT_EQ(pk[c].val >> 15, 0); /* IP = 0: the interrupt's FUP follows */
    int f = pt_next_nonpad(pk, n, c);
    ASSERT_EQ(pk[f].kind, PT_FUP);
    if (fup)
        ASSERT_EQ(pk[f].ip, fup);
    int t = pt_next_nonpad(pk, n, f);
    if (pk[t].kind == PT_MODE)
        t = pt_next_nonpad(pk, n, t);
    ASSERT_EQ(pk[t].kind, PT_TIP);
    ASSERT_EQ(pk[t].ip, (uint64_t)isr_stubs + 16 * vector);
    /* The handler returns: CFE(IRET, IP = 1), FUP(the IRETQ). */
    int r = find_cfe(n, t, 2, 0);
    ASSERT(r >= 0 && (pk[r].val >> 15));
    int rf = pt_next_nonpad(pk, n, r);
    ASSERT_EQ(pk[rf].kind, PT_FUP);
    ASSERT_EQ(pk[rf].ip, (uint64_t)trap_iret);
    return t;
}

void test_main(void)
{
    uint32_t r[4];
    cpuid(0x14, 0, r);
    ASSERT(r[1] & (1u << 7)); /* EBX[7] Event Trace */
    set_handler(3, on_bp);
    set_handler(6, on_ud);
    set_handler(TIMER_VECTOR, on_timer);
    lapic_enable();

    uint8_t *buf = alloc_aligned(16384, 16384);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 16384 - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    /* IA32_RTIT_CTL[27:24] PSBFreq = 5 (64K bytes): no PSB+ within the 16 KiB buffer. A PSB+ in
     * a timer wait (its length is the host's) would add the IF state of its MODE.Exec to
     * libipt's events (make test failed once so on a loaded host). */
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN | RTIT_CTL_EVENTEN | (5ull << 24);
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl | RTIT_CTL_TRACEEN) >> 32)));
    asm volatile(".globl ev_int3\nev_int3: int3" ::: "memory");
    asm volatile(".globl ev_ud2\nev_ud2: ud2" ::: "memory");
    uint64_t val = 0x1111;
    asm volatile(".globl ev_pf\nev_pf:\tmov (%[addr]), %[val]\n"
                 "2:\n\t"
                 EXTABLE_ENTRY(ev_pf, 2b)
                 : [val] "+r"(val) : [addr] "r"(UNMAPPED_ADDR + 0x40) : "memory");
    pf_val = val;
    lapic_timer_oneshot(TIMER_VECTOR, 20000);
    asm volatile("sti\n.globl ev_sti_next\nev_sti_next:" ::: "memory");
    for (uint64_t i = 0; i < 2000000 && !timer_hits; i++)
        cpu_pause();
    asm volatile("cli\n.globl ev_cli_next\nev_cli_next:" ::: "memory");
    /* POPF with IF = 1 (ends QEMU's block like STI): MODE.Exec(IF), FUP(the next instruction). */
    asm volatile("pushq $0x202\npopfq\n.globl ev_popf_next\nev_popf_next: cli" ::: "memory");
    /* IRETQ to IF = 1 with the timer interrupt already pending: the interrupt is taken right
     * after the IRETQ, before the next block starts; the IRETQ's IF change is still reported
     * (from the RFLAGS the interrupt pushed). */
    lapic_timer_oneshot(TIMER_VECTOR, 100);
    for (int i = 0; i < 1000000 && !(lapic_read(0x220) & 1); i++) /* IRR bit of vector 40H */
        cpu_pause();
    ASSERT(lapic_read(0x220) & 1);
    asm volatile("mov %%rsp, %%rax\n"
                 "pushq $0x10\n"
                 "pushq %%rax\n"
                 "pushq $0x202\n"
                 "pushq $0x08\n"
                 "lea 1f(%%rip), %%rax\n"
                 "pushq %%rax\n"
                 ".globl ev_iret_pending\nev_iret_pending: iretq\n"
                 "1:\n.globl ev_after_iret\nev_after_iret: cli" ::: "rax", "memory");
    ASSERT_EQ(timer_hits, 2);
    uint64_t user = enter_user(user_path, NULL);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));
    ASSERT_EQ(timer_hits, 2);
    ASSERT_EQ(ud_hits, 1);
    ASSERT_EQ(user, 11);
    uint64_t len = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    pt_print(buf, len);
    int n = pt_parse_all(buf, len, pk, (int)(sizeof(pk) / sizeof(pk[0])));
    ASSERT(n > 0);
    int at = check_intr(n, 0, 3, (uint64_t)ev_int3);
    at = check_intr(n, at, 6, (uint64_t)ev_ud2);
    int e = find_cfe(n, at, 1, 14);
    ASSERT(e > 0);
    int evd = pt_prev_nonpad(pk, e);
    ASSERT_EQ(pk[evd].kind, PT_EVD);
    ASSERT_EQ(pk[evd].ipbytes, 0);                 /* EVD type 0: CR2 */
    ASSERT_EQ(pk[evd].val, UNMAPPED_ADDR + 0x40);
    at = check_intr(n, at, 14, (uint64_t)ev_pf);
    /* STI: MODE.Exec(64-bit, IF) and FUP(the next instruction), before the timer's CFE. */
    int s = -1;
    for (int i = at; i < n && s < 0; i++)
        if (pk[i].kind == PT_FUP && pk[i].ip == (uint64_t)ev_sti_next)
            s = i;
    ASSERT(s > 0);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, s)].kind, PT_MODE);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, s)].val, 0x05); /* CS.L | IF */
    at = check_intr(n, s, TIMER_VECTOR, 0);
    /* The timer's handler runs with IF = 0 (interrupt gate): a MODE.Exec without IF before its TIP. */
    ASSERT_EQ(pk[pt_prev_nonpad(pk, at)].kind, PT_MODE);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, at)].val, 0x01);
    /* CLI: MODE.Exec(64-bit) and FUP(the next instruction). */
    int c = -1;
    for (int i = at; i < n && c < 0; i++)
        if (pk[i].kind == PT_FUP && pk[i].ip == (uint64_t)ev_cli_next)
            c = i;
    ASSERT(c > 0);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, c)].kind, PT_MODE);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, c)].val, 0x01);
    /* POPF: MODE.Exec(64-bit, IF) and FUP(the next instruction). */
    int pf = -1;
    for (int i = c; i < n && pf < 0; i++)
        if (pk[i].kind == PT_FUP && pk[i].ip == (uint64_t)ev_popf_next)
            pf = i;
    ASSERT(pf > 0);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, pf)].kind, PT_MODE);
    ASSERT_EQ(pk[pt_prev_nonpad(pk, pf)].val, 0x05);
    /* IRETQ to IF = 1, the pending timer interrupt at once: CFE(IRET, IP = 1), FUP(the IRETQ),
     * MODE.Exec(IF = 1), TIP(after it), then CFE(INTR, 40H, IP = 0), FUP(after it),
     * MODE.Exec(IF = 0), TIP(the stub). */
    int q = -1;
    for (int i = pf; i < n && q < 0; i++)
        if (pk[i].kind == PT_FUP && pk[i].ip == (uint64_t)ev_iret_pending)
            q = i;
    ASSERT(q > 0);
    int seq[8], m = 0;
    seq[m++] = pt_prev_nonpad(pk, q);
    seq[m++] = q;
    while (m < 8)
        seq[m] = pt_next_nonpad(pk, n, seq[m - 1]), m++;
    ASSERT_EQ(pk[seq[0]].kind, PT_CFE);
    ASSERT_EQ(pk[seq[0]].val, 0x8200);
    ASSERT_EQ(pk[seq[2]].kind, PT_MODE);
    ASSERT_EQ(pk[seq[2]].val, 0x05);
    ASSERT_EQ(pk[seq[3]].kind, PT_TIP);
    ASSERT_EQ(pk[seq[3]].ip, (uint64_t)ev_after_iret);
    ASSERT_EQ(pk[seq[4]].kind, PT_CFE);
    ASSERT_EQ(pk[seq[4]].val, 0x0100 | TIMER_VECTOR);
    ASSERT_EQ(pk[seq[5]].kind, PT_FUP);
    ASSERT_EQ(pk[seq[5]].ip, (uint64_t)ev_after_iret);
    ASSERT_EQ(pk[seq[6]].kind, PT_MODE);
    ASSERT_EQ(pk[seq[6]].val, 0x01);
    ASSERT_EQ(pk[seq[7]].kind, PT_TIP);
    ASSERT_EQ(pk[seq[7]].ip, (uint64_t)isr_stubs + 16 * TIMER_VECTOR);
    /* INT $0x80 from ring 3: CFE(INTR, 80H). */
    ASSERT(find_cfe(n, pf, 1, 0x80) > 0);
    pt_dump(buf, len);
}
