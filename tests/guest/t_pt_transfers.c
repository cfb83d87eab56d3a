/* Intel PT across control-flow transfers in full-system mode, all inside ONE traced window
 * (IA32_RTIT_CTL.OS = User = BranchEn = 1, no filters, 64 KiB single range):
 *  - ring 3 entered by IRET (enter_user), leaving by SYSCALL and by int $0x80; SYSCALL/SYSRET
 *    inside ring 3 (SYS_ECHO); a #GP fault in ring 3 (RDMSR) fixed up by the exception table;
 *  - int3 in ring 0 and in ring 3, #UD (ud2 skipped by its handler), #PF on UNMAPPED_ADDR resumed
 *    after the faulting load (exception table), a LAPIC timer interrupt while a loop runs;
 *  - indirect CALL and JMP, a recursion deeper than the 64-entry RET-compression stack;
 *  - MOV CR3 to the second root and back.
 * SDM Vol. 3C "Intel Processor Trace": Table "COFI Type for Branch Instructions" / "Packet
 * Generation under Different Enable Conditions": far transfers (SYSCALL, SYSRET, IRET) give
 * TIP(target) without FUP; INT n / INT3 give FUP(the INT instruction), TIP(handler); faults give
 * FUP(faulting instruction), TIP(handler); external interrupts FUP(next instruction), TIP(handler);
 * MOV CR3 with OS=1 gives PIP(new CR3). The guest checks those packets in its own memory; the
 * host (tests/run-guest.sh) compares the dump with the plugin's copy and libipt's decoded flow
 * with the per-instruction ground truth between pt_enable_wrmsr and pt_disable_wrmsr. */
#include "pt.h"
#include "work.h"

extern char isr_stubs[], syscall_entry[], pt_enable_wrmsr[], pt_disable_wrmsr[];
extern char rec_ret[];

#define BUF_SIZE 65536
#define REC_DEPTH 100
#define RET_STACK 64 /* RET-compression stack depth (SDM "Indirect Transfer Compression for Returns") */

static volatile uint64_t sink;
static volatile uint64_t bp_hits, bp_rip, ud_hits, ud_rip, timer_hits, timer_rip;

static void on_bp(struct trap_frame *f) { bp_hits++; bp_rip = f->rip; }
static void on_ud(struct trap_frame *f) { ud_hits++; ud_rip = f->rip; f->rip += 2; }
static void on_timer(struct trap_frame *f) { timer_hits++; timer_rip = f->rip; lapic_eoi(); }

/* uint64_t rec_fn(uint64_t n): recursion of depth n, 1 + n(n+1)/2; every inner call returns to
 * rec_ret. Written in assembly so that the return site is a known address. */
asm(".text\n"
    ".globl rec_fn, rec_ret\n"
    "rec_fn:\n\t"
    "test %rdi, %rdi\n\t"
    "jz 1f\n\t"
    "push %rdi\n\t"
    "dec %rdi\n\t"
    "call rec_fn\n"
    "rec_ret:\n\t"
    "pop %rdi\n\t"
    "add %rdi, %rax\n\t"
    "ret\n"
    "1:\tmov $1, %eax\n\t"
    "ret\n");
uint64_t rec_fn(uint64_t n);

/* void mmio_poke(uint64_t addr, uint32_t v): a store to device memory (here the LAPIC TPR) that
 * is not the last instruction of its translation block. mmio_poke_next is reached only by
 * falling through the store, so no TIP/FUP/TIP.PGE may ever carry that IP. */
asm(".text\n"
    ".globl mmio_poke, mmio_poke_next\n"
    "mmio_poke:\n\t"
    "movl %esi, (%rdi)\n"
    "mmio_poke_next:\n\t"
    "nop\n\t"
    "ret\n");
void mmio_poke(uint64_t addr, uint32_t v);
extern char mmio_poke_next[];

__attribute__((noinline)) static uint64_t f_add(uint64_t x) { sink++; return x + 1; }
__attribute__((noinline)) static uint64_t f_mul(uint64_t x) { sink++; return x * 3; }
__attribute__((noinline)) static uint64_t f_xor(uint64_t x) { sink++; return x ^ 0x55; }
typedef uint64_t (*op_fn)(uint64_t);

/* Indirect calls through pointers the compiler cannot see through (computed in this function
 * with RIP-relative LEA, so they also work in ring 3 from the user alias). */
__attribute__((noinline)) static uint64_t indirect_calls(uint64_t x)
{
    for (int i = 0; i < 6; i++) {
        op_fn f = i % 3 == 0 ? f_add : i % 3 == 1 ? f_mul : f_xor;
        asm volatile("" : "+r"(f));
        x = f(x);
    }
    return x;
}

/* Ring 3, returns through SYSCALL(SYS_EXIT). */
static volatile uint64_t user_int3_at, user_rdmsr_rc;
static uint64_t user_syscall_path(void)
{
    uint64_t r = user_syscall(SYS_ECHO, 5) + user_int80(SYS_ECHO, 6);
    uint64_t at, v;
    asm volatile("lea 1f(%%rip), %0\n1:\tint3" : "=r"(at));
    user_int3_at = at;
    user_rdmsr_rc = rdmsr_safe(0x10, &v); /* #GP at CPL 3, fixed up in the alias */
    r += indirect_calls(1) + rec_fn(10);
    return r;
}

/* Ring 3, returns through int $0x80 (SYS_EXIT). */
static uint64_t user_int80_path(void)
{
    return user_int80(SYS_ECHO, 7) + work(30);
}

static volatile uint64_t int3_at, ud2_at, pf_at, pf_val, ijmp_to;
static volatile uint64_t user_ret1, user_ret2, rec_result, ind_result;

__attribute__((noinline)) static void traced_body(void)
{
    uint64_t at;

    /* Ring 3 and back (IRET in, SYSCALL / int $0x80 out, SYSCALL+SYSRET and int $0x80+IRET inside). */
    user_ret1 = enter_user(user_syscall_path, NULL);
    user_ret2 = enter_user_ret(user_int80_path, NULL, USER_RET_INT80);

    /* int3 in ring 0: FUP(int3), TIP(handler). */
    asm volatile("lea 1f(%%rip), %0\n1:\tint3" : "=r"(at));
    int3_at = at;

    /* #UD: FUP(ud2), TIP(handler); the handler skips the ud2. */
    asm volatile("lea 1f(%%rip), %0\n1:\tud2" : "=r"(at));
    ud2_at = at;

    /* #PF on an unmapped address: FUP(the load), TIP(handler); resumes after it. */
    uint64_t val = 0x1111;
    asm volatile("lea 1f(%%rip), %[at]\n"
                 "1:\tmov (%[addr]), %[val]\n"
                 "2:\n\t"
                 EXTABLE_ENTRY(1b, 2b)
                 : [val] "+r"(val), [at] "=&r"(at)
                 : [addr] "r"(UNMAPPED_ADDR + 0x40) : "memory");
    pf_at = at;
    pf_val = val;

    /* A store to the LAPIC (TPR = 0, harmless) in the middle of a translation block. */
    mmio_poke(LAPIC_BASE + 0x80, 0);

    /* LAPIC timer interrupt while a loop runs: FUP(next instruction), TIP(handler). */
    lapic_timer_oneshot(TIMER_VECTOR, 20000);
    irq_enable();
    for (uint64_t i = 0; i < 2000000 && !timer_hits; i++)
        cpu_pause();
    irq_disable();

    /* Indirect CALLs, an indirect JMP, a recursion deeper than the RET-compression stack. */
    ind_result = indirect_calls(2);
    asm volatile("lea 1f(%%rip), %0\n\tjmp *%0\n\tud2\n1:" : "=&r"(at));
    ijmp_to = at;
    rec_result = rec_fn(REC_DEPTH);

    /* MOV CR3 to the second root and back: PIP(new CR3) each time (OS = 1). */
    load_cr3(cr3_alt());
    sink = work(40);
    load_cr3(cr3_main());
}

static int in_user(uint64_t ip) { return ip >= USER_ALIAS_OFFSET && ip < 2 * USER_ALIAS_OFFSET; }

/* Index of the first packet at or after `from` that is `kind` with IP `ip`; -1 if none. */
static int find_ip(const struct pt_pkt *pk, int n, int from, enum pt_kind kind, uint64_t ip)
{
    for (int i = from; i < n; i++)
        if (pk[i].kind == kind && pk[i].ipbytes && pk[i].ip == ip)
            return i;
    return -1;
}

/* An event delivered with FUP(fup) must be followed by TIP(handler) (no PIP/MODE here). A PSB+
 * may carry a FUP with the same IP earlier (the timer's loop IP): the first FUP(fup) followed by
 * a TIP counts. */
static void check_event(const struct pt_pkt *pk, int n, const char *what, uint64_t fup, uint64_t handler)
{
    int i = find_ip(pk, n, 0, PT_FUP, fup);
    int j = i < 0 ? -1 : pt_next_nonpad(pk, n, i);
    while (i >= 0 && (j < 0 || pk[j].kind != PT_TIP)) {
        i = find_ip(pk, n, i + 1, PT_FUP, fup);
        j = i < 0 ? -1 : pt_next_nonpad(pk, n, i);
    }
    printf("  %-28s FUP %lx at %#lx -> TIP %lx\n", what, fup, i < 0 ? 0 : pk[i].off, handler);
    if (i < 0 || j < 0 || pk[j].kind != PT_TIP || pk[j].ip != handler) {
        printf("FAIL: %s: no FUP(%#lx) followed by TIP(%#lx)\n", what, fup, handler);
        test_fail("event packets");
    }
}

void test_main(void)
{
    set_handler(3, on_bp);
    set_handler(6, on_ud);
    set_handler(TIMER_VECTOR, on_timer);
    lapic_enable();

    uint8_t *buf = alloc_aligned(BUF_SIZE, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1); /* single range, offset 0 */
    wrmsr(IA32_RTIT_STATUS, 0);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl | RTIT_CTL_TRACEEN) >> 32)));
    traced_body();
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));

    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), st = rdmsr(IA32_RTIT_STATUS);
    uint64_t len = mp >> 32;
    printf("transfers: %lu bytes, MASK_PTRS %lx, STATUS %lx\n", len, mp, st);

    /* The guest-side effects happened as the handlers saw them. */
    ASSERT_EQ(user_ret1, 5 + 6 + indirect_calls(1) + rec_fn(10));
    ASSERT_EQ(user_ret2, 7 + work(30));
    ASSERT(user_rdmsr_rc != 0);
    ASSERT_EQ(bp_hits, 2);
    ASSERT_EQ(bp_rip, int3_at + 1);
    ASSERT_EQ(ud_hits, 1);
    ASSERT_EQ(ud_rip, ud2_at);
    ASSERT_EQ(pf_val, 0x1111);
    ASSERT_EQ(last_fault.vector, 14);
    ASSERT_EQ(last_fault.rip, pf_at);
    ASSERT_EQ(timer_hits, 1);
    ASSERT_EQ(rec_result, 1 + REC_DEPTH * (REC_DEPTH + 1) / 2);
    ASSERT_EQ(read_cr3(), cr3_main());

    ASSERT_EQ(mp & 0xFFFFFFFF, BUF_SIZE - 1);
    ASSERT(len > 16 && len < BUF_SIZE - 4096); /* no wrap */
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT(pt_has_psb(buf));

    struct pt_pkt *pk = alloc_pages((len * sizeof(struct pt_pkt) + 4095) / 4096);
    int n = pt_parse_all(buf, len, pk, (int)len);
    if (n < 0) {
        pt_print(buf, len);
        test_fail("unparsable trace");
    }

    /* Start: PSB+ (PSB, PIP, CBR, PSBEND), then MODE.Exec (64-bit: 0x01), TIP.PGE(NLIP of the
     * enabling WRMSR). SDM "Enabling and Disabling Packet Generation with TraceEn", TIP.PGE. */
    int i = 0, saw_pip_in_psb = 0;
    while (i < n && pk[i].kind != PT_PSBEND) {
        if (pk[i].kind == PT_PIP && pk[i].val == cr3_main())
            saw_pip_in_psb = 1;
        i++;
    }
    ASSERT(saw_pip_in_psb); /* PSB+ has PIP when OS = 1 (and ContextEn) */
    i = pt_next_nonpad(pk, n, i);
    ASSERT(i > 0);
    ASSERT_EQ(pk[i].kind, PT_MODE);
    ASSERT_EQ(pk[i].val, 0x01);
    i = pt_next_nonpad(pk, n, i);
    ASSERT_EQ(pk[i].kind, PT_TIP_PGE);
    ASSERT_EQ(pk[i].ip, (uint64_t)pt_enable_wrmsr + 2);
    printf("  start: PSB+ with PIP, MODE.Exec 64-bit, TIP.PGE %lx\n", pk[i].ip);

    /* End: FUP(the disabling WRMSR), TIP.PGD (IP suppressed). */
    int last = pt_prev_nonpad(pk, n); /* the last packet that is not PAD */
    ASSERT_EQ(pk[last].kind, PT_TIP_PGD);
    ASSERT_EQ(pk[last].ipbytes, 0);
    int fup = pt_prev_nonpad(pk, last);
    ASSERT_EQ(pk[fup].kind, PT_FUP);
    ASSERT_EQ(pk[fup].ip, (uint64_t)pt_disable_wrmsr);

    /* Events: FUP then TIP(IDT stub of the vector). */
    check_event(pk, n, "int3 ring 0 (FUP = int3)", int3_at, (uint64_t)isr_stubs + 16 * 3);
    check_event(pk, n, "int3 ring 3 (FUP = int3)", user_int3_at, (uint64_t)isr_stubs + 16 * 3);
    check_event(pk, n, "#UD (FUP = ud2)", ud2_at, (uint64_t)isr_stubs + 16 * 6);
    check_event(pk, n, "#PF (FUP = the load)", pf_at, (uint64_t)isr_stubs + 16 * 14);
    check_event(pk, n, "timer (FUP = next insn)", timer_rip, (uint64_t)isr_stubs + 16 * TIMER_VECTOR);

    /* Far transfers send no FUP: SYSCALL -> TIP(syscall_entry), IRET/SYSRET into ring 3 -> TIP. */
    int syscalls = 0, to_user = 0, int80 = 0;
    for (int k = 0; k < n; k++) {
        if (pk[k].kind != PT_TIP)
            continue;
        int p = pt_prev_nonpad(pk, k);
        if (pk[k].ip == (uint64_t)syscall_entry) {
            syscalls++;
            ASSERT(p >= 0 && pk[p].kind != PT_FUP);
        } else if (in_user(pk[k].ip) && p >= 0 && pk[p].kind == PT_FUP) {
            printf("FAIL: FUP %lx before TIP %lx into ring 3 at %#lx\n", pk[p].ip, pk[k].ip, pk[k].off);
            test_fail("far transfer with FUP");
        } else if (pk[k].ip == (uint64_t)isr_stubs + 16 * SYSCALL_VECTOR) {
            int80++;
            ASSERT(p >= 0 && pk[p].kind == PT_FUP && in_user(pk[p].ip)); /* int $0x80 = INT n */
        }
        if (in_user(pk[k].ip))
            to_user++;
    }
    printf("  far: %d TIP(syscall_entry), %d TIP(int 0x80 stub), %d TIPs into ring 3\n", syscalls, int80, to_user);
    ASSERT_EQ(syscalls, 2); /* SYS_ECHO and SYS_EXIT from user_syscall_path */
    ASSERT_EQ(int80, 3);    /* SYS_ECHO x2, SYS_EXIT from user_int80_path */
    ASSERT(to_user >= 2 + 3 + 1); /* 2 IRET entries, SYSRET, 3 IRETs from handlers */

    /* Indirect JMP: TIP(target). Recursion: REC_DEPTH - RET_STACK returns to rec_ret are not
     * compressed (the oldest entries fell off the stack), the others are TNT bits. */
    int ij = find_ip(pk, n, 0, PT_TIP, ijmp_to);
    ASSERT(ij >= 0);
    int tip_rec = 0, psb_in_rec = 0;
    for (int k = ij; k < n; k++) {
        if (pk[k].kind == PT_TIP && pk[k].ip == (uint64_t)rec_ret)
            tip_rec++;
        if (pk[k].kind == PT_PSB && tip_rec < REC_DEPTH - RET_STACK)
            psb_in_rec = 1; /* a PSB clears the stack: more RETs go uncompressed */
    }
    printf("  recursion depth %d: %d uncompressed RETs to rec_ret%s\n", REC_DEPTH, tip_rec,
           psb_in_rec ? " (a PSB+ interrupted it)" : "");
    if (psb_in_rec)
        ASSERT(tip_rec >= REC_DEPTH - RET_STACK);
    else
        ASSERT_EQ(tip_rec, REC_DEPTH - RET_STACK);

    /* MOV CR3: PIP(cr3_alt) then PIP(cr3_main), outside PSB+. */
    int in_psb = 0, pip_alt = -1, pip_main = -1;
    for (int k = 0; k < n; k++) {
        if (pk[k].kind == PT_PSB)
            in_psb = 1;
        else if (pk[k].kind == PT_PSBEND)
            in_psb = 0;
        else if (pk[k].kind == PT_PIP && !in_psb) {
            if (pk[k].val == cr3_alt() && pip_alt < 0)
                pip_alt = k;
            else if (pk[k].val == cr3_main() && pip_alt >= 0 && pip_main < 0)
                pip_main = k;
        }
    }
    printf("  MOV CR3: PIP(%lx) at %#lx, PIP(%lx) at %#lx\n", cr3_alt(), pip_alt < 0 ? 0 : pk[pip_alt].off,
           cr3_main(), pip_main < 0 ? 0 : pk[pip_main].off);
    ASSERT(pip_alt >= 0);
    ASSERT(pip_main > pip_alt);
    ASSERT(buf[pk[pip_alt].off] == 0x02 && buf[pk[pip_alt].off + 1] == 0x43);

    pt_dump(buf, len);

    /* Straight-line execution past a device-memory store is not a branch: no IP packet may name
     * mmio_poke_next (nor the instruction after any other MMIO store in lapic_* helpers). */
    for (int k = 0; k < n; k++)
        if (pk[k].kind >= PT_TIP && pk[k].kind <= PT_FUP && pk[k].ipbytes && pk[k].ip == (uint64_t)mmio_poke_next) {
            printf("FAIL: %s with IP %lx (the instruction after an MMIO store) at %#lx\n",
                   pt_kind_name(pk[k].kind), pk[k].ip, pk[k].off);
            test_fail("spurious IP packet after an MMIO store");
        }
}
