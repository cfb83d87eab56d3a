/* Intel PT enable logic (PacketEn = TriggerEn & ContextEn & FilterEn & BranchEn), checked on the
 * bytes in guest memory with the in-guest packet parser (pt.h). The windows are not compared by
 * the host (no pt_enable_wrmsr / pt_disable_wrmsr labels): each leaves parts of the run untraced.
 *  (a) User=1, OS=0: ring 3 entered from ring 0 -> TIP.PGE at the ring-3 target; SYSCALL, int3
 *      and the exit leave with TIP.PGD (FUP(int3) first); no ring-0 IP anywhere.
 *  (b) OS=1, User=0: no IP of the ring-3 code (user alias, >= 1 GiB); IRET/SYSRET into ring 3
 *      give TIP.PGD, SYSCALL/int3 into ring 0 give TIP.PGE(handler) without FUP.
 *  (c) IP filter ADDR0 = one function (ADDR0_CFG = 1): TIP.PGE at its entry, TIP.PGD(target) on
 *      leaving it (a call out and the return), only IPs of the function otherwise.
 *  (d) TraceStop range ADDR1 (ADDR1_CFG = 2) on a function: STATUS.Stopped = 1, the stream ends
 *      with TIP.PGD, TraceStop and nothing follows.
 *  (e) BranchEn = 0: only PSB+ packets.
 * SDM Vol. 3C "Intel Processor Trace": "Trace Filtering" (CPL, IP filtering, TraceStop), "Packet
 * Enable (PacketEn)", TIP.PGE / TIP.PGD / TraceStop packet definitions, Table "Packet Generation
 * under Different Enable Conditions". */
#include "pt.h"

#define BUF_SIZE 65536
#define MAX_PKTS 8192

extern char isr_stubs[], syscall_entry[];

static uint8_t *buf;
static struct pt_pkt *pk;
static int npk, failures;
static volatile uint64_t sink, bp_hits;

static void on_bp(struct trap_frame *f) { (void)f; bp_hits++; }

#define CHECK(c) do { if (!(c)) { printf("  CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

/* Traces with IA32_RTIT_CTL = ctl | TraceEn into a fresh, zeroed 64 KiB single range. */
__attribute__((noinline)) static void pt_on(uint64_t ctl)
{
    memset(buf, 0, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
}

/* Clears TraceEn, parses the stream (printing it) and returns its length. */
__attribute__((noinline)) static uint64_t pt_off(uint64_t ctl, const char *name)
{
    wrmsr(IA32_RTIT_CTL, ctl);
    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), len = mp >> 32;
    printf("(%s) %lu bytes, STATUS %lx:\n", name, len, rdmsr(IA32_RTIT_STATUS));
    ASSERT(len < BUF_SIZE - 4096);
    npk = pt_parse_all(buf, len, pk, MAX_PKTS);
    if (pt_print(buf, len) < 0 || npk < 0)
        test_fail("unparsable trace");
    CHECK(pt_has_psb(buf));
    return len;
}

static int is_ip_pkt(const struct pt_pkt *k) { return k->kind >= PT_TIP && k->kind <= PT_FUP; }
static int in_user(uint64_t ip) { return ip >= USER_ALIAS_OFFSET && ip < 2 * USER_ALIAS_OFFSET; }
static int count(enum pt_kind kind)
{
    int c = 0;
    for (int i = 0; i < npk; i++)
        c += pk[i].kind == kind;
    return c;
}
/* Index of the first packet after PSB+ (after the first PSBEND), skipping PAD. */
static int after_psb(void)
{
    int i = 0;
    while (i < npk && pk[i].kind != PT_PSBEND)
        i++;
    int j = pt_next_nonpad(pk, npk, i);
    return j < 0 ? npk : j;
}
static int prev_pkt(int i) { return pt_prev_nonpad(pk, i); }
static int last_pkt(void) { return prev_pkt(npk); }

__attribute__((noinline)) static uint64_t work(int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++)
        acc = i & 1 ? acc * 3 + i : acc ^ i;
    asm volatile("" : "+r"(acc) :: "memory"); /* not pure: every call runs (and is traced) */
    return acc;
}

/* ---- ring-3 code for (a), (b), (e) ---- */
static volatile uint64_t u_int3_at;
static uint64_t user_code(void)
{
    uint64_t r = work(10) + user_syscall(SYS_ECHO, 3);
    uint64_t at;
    asm volatile("lea 1f(%%rip), %0\n1:\tint3" : "=r"(at));
    u_int3_at = at;
    return r + work(5);
}

/* ---- (c) the filtered function and its helpers, in assembly for known bounds ----
 * uint64_t filt_fn(uint64_t n): a loop (TNT), an indirect call inside the range (TIP), a direct
 * call out of the range (TIP.PGD) and back (TIP.PGE), RET out of the range (TIP.PGD). */
asm(".text\n"
    ".globl filt_fn, filt_fn_end, filt_inner, filt_after_out, filt_outside\n"
    "filt_fn:\n\t"
    "push %rbx\n\t"
    "mov %rdi, %rbx\n\t"
    "xor %eax, %eax\n"
    "1:\tadd %rbx, %rax\n\t"
    "dec %rbx\n\t"
    "jnz 1b\n\t"
    "lea filt_inner(%rip), %rcx\n\t"
    "call *%rcx\n\t"
    "call filt_outside\n"
    "filt_after_out:\n\t"
    "pop %rbx\n\t"
    "ret\n"
    "filt_inner:\n\t"
    "add $1, %rax\n\t"
    "ret\n"
    "filt_fn_end:\n\t"
    "int3\n"
    "filt_outside:\n\t"
    "add $2, %rax\n\t"
    "ret\n");
extern char filt_fn[], filt_fn_end[], filt_inner[], filt_after_out[], filt_outside[];

/* ---- (d) the TraceStop function ---- */
asm(".text\n"
    ".globl stop_fn, stop_fn_end\n"
    "stop_fn:\n\t"
    "mov $7, %eax\n\t"
    "ret\n"
    "stop_fn_end:\n\t"
    "int3\n");
uint64_t stop_fn(void);
extern char stop_fn_end[];

static void test_user_only(void)
{
    uint64_t ctl = RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    bp_hits = 0;
    pt_on(ctl);
    uint64_t r = enter_user(user_code, NULL);
    pt_off(ctl, "a: User=1 OS=0");
    CHECK(r == work(10) + 3 + work(5));
    CHECK(bp_hits == 1);

    /* Enabled in ring 0: PSB+ without PIP/MODE/FUP, then nothing until the IRET lands in ring 3:
     * MODE.Exec, TIP.PGE(ring-3 entry). */
    int i = after_psb();
    CHECK(i < npk && pk[i].kind == PT_MODE && pk[i].val == 0x01);
    CHECK(i + 1 < npk && pk[i + 1].kind == PT_TIP_PGE && pk[i + 1].ip == (uint64_t)user_ptr((void *)user_code));
    /* Ring 3 is left three times (SYSCALL(ECHO), int3, SYSCALL(EXIT)) and entered three times
     * (IRET, SYSRET, IRET from the #BP handler). */
    CHECK(count(PT_TIP_PGE) == 3);
    CHECK(count(PT_TIP_PGD) == 3);
    CHECK(count(PT_PIP) == 0); /* OS = 0 */
    for (int k = 0; k < npk; k++) {
        if (is_ip_pkt(&pk[k]) && pk[k].ipbytes && !in_user(pk[k].ip)) {
            printf("  ring-0 IP %lx in %s at %#lx\n", pk[k].ip, pt_kind_name(pk[k].kind), pk[k].off);
            CHECK(!"no ring-0 IP with User=1 OS=0");
        }
        if (pk[k].kind == PT_TIP_PGD)
            CHECK(pk[k].ipbytes == 0); /* ContextEn = 0 after the transfer: IP suppressed */
        if (pk[k].kind == PT_TIP_PGE)
            CHECK(in_user(pk[k].ip));
    }
    /* int3 in ring 3: FUP(the int3), TIP.PGD() (SDM: software interrupt, PacketEn 1 -> 0). */
    int found = 0;
    for (int k = 0; k + 1 < npk; k++)
        if (pk[k].kind == PT_FUP && pk[k].ip == u_int3_at && pk[k + 1].kind == PT_TIP_PGD)
            found = 1;
    CHECK(found);
    int l = last_pkt();
    CHECK(l >= 0 && pk[l].kind == PT_TIP_PGD); /* SYSCALL(EXIT); the disable adds nothing */
}

static void test_os_only(void)
{
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
    bp_hits = 0;
    pt_on(ctl);
    uint64_t r = enter_user(user_code, NULL);
    sink = work(7);
    pt_off(ctl, "b: OS=1 User=0");
    CHECK(r == work(10) + 3 + work(5));
    CHECK(bp_hits == 1);

    for (int k = 0; k < npk; k++) {
        if (is_ip_pkt(&pk[k]) && pk[k].ipbytes && in_user(pk[k].ip)) {
            printf("  ring-3 IP %lx in %s at %#lx\n", pk[k].ip, pt_kind_name(pk[k].kind), pk[k].off);
            CHECK(!"no ring-3 IP with OS=1 User=0");
        }
        if (pk[k].kind == PT_TIP_PGE && k > 0) {
            /* Entering ring 0 from untraced ring 3 is not preceded by a FUP. */
            int p = prev_pkt(k);
            CHECK(p >= 0 && pk[p].kind != PT_FUP);
        }
        if (pk[k].kind == PT_TIP_PGD)
            CHECK(pk[k].ipbytes == 0);
    }
    /* PGE: enable, SYSCALL(ECHO), #BP, SYSCALL(EXIT); PGD: IRET, SYSRET, IRET, disable. */
    CHECK(count(PT_TIP_PGE) == 4);
    CHECK(count(PT_TIP_PGD) == 4);
    int se = 0, bp = 0;
    for (int k = 0; k < npk; k++) {
        se += pk[k].kind == PT_TIP_PGE && pk[k].ip == (uint64_t)syscall_entry;
        bp += pk[k].kind == PT_TIP_PGE && pk[k].ip == (uint64_t)isr_stubs + 16 * 3;
    }
    CHECK(se == 2);
    CHECK(bp == 1);
    /* The disable: FUP(the WRMSR in pt_off), TIP.PGD(). */
    int l = last_pkt(), f = prev_pkt(l);
    CHECK(l >= 0 && pk[l].kind == PT_TIP_PGD && f >= 0 && pk[f].kind == PT_FUP);
}

static void test_ip_filter(void)
{
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN | RTIT_CTL_ADDR0_CFG(1);
    uint64_t a = (uint64_t)filt_fn, b = (uint64_t)filt_fn_end - 1, r, ret_at;
    wrmsr(IA32_RTIT_ADDR0_A, a);
    wrmsr(IA32_RTIT_ADDR0_B, b);
    pt_on(ctl);
    sink = work(9);
    asm volatile("lea 1f(%%rip), %1\n\t"
                 "call filt_fn\n"
                 "1:"
                 : "=a"(r), "=&r"(ret_at) : "D"(5ull) : "rcx", "rdx", "rsi", "memory", "cc");
    sink = work(9);
    pt_off(ctl, "c: IP filter ADDR0 = filt_fn");
    wrmsr(IA32_RTIT_CTL, 0);
    CHECK(r == 5 + 4 + 3 + 2 + 1 + 1 + 2);
    printf("  range [%lx, %lx], return address %lx, out-of-range callee %lx\n", a, b, ret_at,
           (uint64_t)filt_outside);

    int i = after_psb();
    CHECK(i < npk && pk[i].kind == PT_MODE);
    CHECK(i + 1 < npk && pk[i + 1].kind == PT_TIP_PGE && pk[i + 1].ip == a);
    CHECK(count(PT_TIP_PGE) == 2);
    CHECK(count(PT_TIP_PGD) == 2);
    CHECK(count(PT_FUP) == 0);
    int pgd = 0;
    for (int k = 0; k < npk; k++) {
        if (!is_ip_pkt(&pk[k]))
            continue;
        if (pk[k].kind == PT_TIP_PGD) {
            /* Leaving by a direct CALL / a RET: TIP.PGD carries the branch target. */
            uint64_t want = pgd++ == 0 ? (uint64_t)filt_outside : ret_at;
            if (!(pk[k].ipbytes && pk[k].ip == want))
                printf("  TIP.PGD #%d: want IP %lx\n", pgd, want);
            CHECK(pk[k].ipbytes && pk[k].ip == want);
        } else if (!(pk[k].ipbytes && pk[k].ip >= a && pk[k].ip <= b)) {
            printf("  IP %lx outside the range in %s at %#lx\n", pk[k].ip, pt_kind_name(pk[k].kind), pk[k].off);
            CHECK(!"only IPs inside the filter range");
        }
    }
    int second_pge = -1;
    for (int k = 0; k < npk; k++)
        if (pk[k].kind == PT_TIP_PGE && pk[k].ip == (uint64_t)filt_after_out)
            second_pge = k;
    CHECK(second_pge > 0);
    int tip_inner = 0;
    for (int k = 0; k < npk; k++)
        tip_inner += pk[k].kind == PT_TIP && pk[k].ip == (uint64_t)filt_inner;
    CHECK(tip_inner == 1);
    CHECK(count(PT_TNT) >= 1);
    int l = last_pkt();
    CHECK(l >= 0 && pk[l].kind == PT_TIP_PGD); /* disabled outside the range: no FUP/PGD */
}

static void test_trace_stop(void)
{
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN | RTIT_CTL_ADDR1_CFG(2);
    uint64_t a = (uint64_t)stop_fn, b = (uint64_t)stop_fn_end - 1;
    wrmsr(IA32_RTIT_ADDR1_A, a);
    wrmsr(IA32_RTIT_ADDR1_B, b);
    pt_on(ctl);
    sink = work(20);
    uint64_t before = rdmsr(IA32_RTIT_STATUS);
    uint64_t r = stop_fn();
    uint64_t mid = rdmsr(IA32_RTIT_STATUS);
    uint64_t mp_mid = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    sink = work(20) + enter_user(user_code, NULL);
    uint64_t len = pt_off(ctl, "d: TraceStop ADDR1 = stop_fn");
    uint64_t after = rdmsr(IA32_RTIT_STATUS);
    printf("  range [%lx, %lx]; STATUS before %lx, after stop_fn %lx, after disable %lx\n", a, b,
           before, mid, after);
    CHECK(r == 7);
    CHECK(!(before & RTIT_STATUS_STOPPED));
    CHECK(before & RTIT_STATUS_TRIGGEREN);
    CHECK(mid & RTIT_STATUS_STOPPED);        /* STATUS.Stopped = 1 ... */
    CHECK(!(mid & RTIT_STATUS_TRIGGEREN));   /* ... which clears TriggerEn */
    CHECK(!(mid & RTIT_STATUS_FILTEREN));    /* "The TraceStop action also forces FilterEn to 0" */
    CHECK(after & RTIT_STATUS_STOPPED);      /* only software clears it */
    CHECK((mp_mid >> 32) == len);            /* nothing written after the stop */

    int l = last_pkt(), p = prev_pkt(l);
    CHECK(l >= 0 && pk[l].kind == PT_TRACESTOP);
    CHECK(p >= 0 && pk[p].kind == PT_TIP_PGD);
    /* The TIP.PGD "may" carry the target IP of the branch that entered the region. */
    CHECK(p >= 0 && (pk[p].ipbytes == 0 || pk[p].ip == a));
    CHECK(count(PT_TRACESTOP) == 1);
    CHECK(pt_first_nonzero(buf + len, BUF_SIZE - len) == BUF_SIZE - len);

    /* TraceEn 0 -> 1 while Stopped is still 1: TriggerEn stays 0, so no packet (not even PSB+)
     * is written (SDM: IA32_RTIT_STATUS.Stopped "When this bit is set, TriggerEn is cleared to 0
     * and packet generation is disabled"; resuming needs TraceEn = 0, then Stopped = 0). */
    memset(buf, 0, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1);
    wrmsr(IA32_RTIT_CTL, RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN | RTIT_CTL_TRACEEN);
    sink = work(20);
    uint64_t st2 = rdmsr(IA32_RTIT_STATUS);
    wrmsr(IA32_RTIT_CTL, RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN);
    uint64_t off2 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    printf("  re-enabled with Stopped = 1: STATUS %lx, %lu bytes written\n", st2, off2);
    CHECK(st2 & RTIT_STATUS_STOPPED);
    CHECK(!(st2 & RTIT_STATUS_TRIGGEREN));
    CHECK(off2 == 0);
    CHECK(pt_first_nonzero(buf, BUF_SIZE) == BUF_SIZE);

    /* Resuming needs TraceEn = 0 then Stopped = 0 (STATUS written with TraceEn = 0). */
    wrmsr(IA32_RTIT_STATUS, 0);
    CHECK(!(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_STOPPED));
    wrmsr(IA32_RTIT_CTL, 0);
}

static void test_no_branch_en(void)
{
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER;
    pt_on(ctl);
    sink = work(30) + enter_user(user_code, NULL);
    pt_off(ctl, "e: BranchEn=0");
    for (int k = 0; k < npk; k++) {
        enum pt_kind t = pk[k].kind;
        if (!(t == PT_PSB || t == PT_PSBEND || t == PT_PIP || t == PT_CBR || t == PT_TSC || t == PT_PAD)) {
            printf("  %s at %#lx with BranchEn=0\n", pt_kind_name(t), pk[k].off);
            CHECK(!"only PSB+ packets with BranchEn=0");
        }
    }
    CHECK(count(PT_PSB) == 1 && count(PT_PSBEND) == 1);
}

void test_main(void)
{
    set_handler(3, on_bp);
    buf = alloc_aligned(BUF_SIZE, BUF_SIZE);
    pk = alloc_pages(MAX_PKTS * sizeof(struct pt_pkt) / 4096);
    test_user_only();
    test_os_only();
    test_ip_filter();
    test_trace_stop();
    test_no_branch_en();
    if (failures) {
        printf("%d checks failed\n", failures);
        test_fail("PT filter checks");
    }
}
