// pttrace-options: profile=sapphirerapids
/* Architectural LBRs (SDM Vol. 3B §18.1), profile=sapphirerapids: enumeration in
 * CPUID.(7,0):EDX[19] and leaf 1CH; the #GP and read-back rules of IA32_LBR_CTL (14CEH),
 * IA32_LBR_DEPTH (14CFH) and the record MSRs (FROM 1500H+, TO 1600H+, INFO 1200H+), the
 * model-specific LBR MSRs absent; the records of hand-written branch sequences (record 0 the
 * youngest, BR_TYPE and the static predictor's MISPRED in INFO) against the assembler's labels;
 * branch-type and CPL filters (ring 3 code under USR only); call-stack mode; a depth write
 * clearing the records, LBREn = 0 keeping them; FREEZE_LBRS_ON_PMI; timed LBRs (CPUID.1CH:ECX[1]):
 * INFO[15:0] CYC_CNT with [60] CYC_CNT_VALID, the core clocks since the previous record (the host
 * TSC without -icount, not deterministic): no count (VALID = 0, CYC_CNT = 0) for the first record
 * after a depth write, a nonzero count for every other (each branch here ends a block). */
#include "guest.h"
#include "work.h"

#define MISPRED (1ull << 63)
#define BR(t) ((uint64_t)(t) << 56)
#define CYC_CNT 0xFFFFull
#define CYC_CNT_VALID (1ull << 60)
enum { COND = 0, IND_JMP = 1, REL_JMP = 2, IND_CALL = 3, REL_CALL = 4, RET = 5, OTHER = 8 };
#define CTL_EN   1u
#define CTL_OS   2u
#define CTL_USR  4u
#define CTL_CALL_STACK 8u
#define T_COND     (1u << 16)
#define T_REL_JMP  (1u << 17)
#define T_IND_JMP  (1u << 18)
#define T_REL_CALL (1u << 19)
#define T_IND_CALL (1u << 20)
#define T_RET      (1u << 21)
#define T_OTHER    (1u << 22)
#define T_ALL      (0x7Fu << 16)

extern void al_run(uint64_t ctl);
extern char al_jmp[], al_l1[], al_call[], al_f[], al_ret[], al_after_call[], al_jz[], al_l3[], al_loop[], al_jnz[],
    al_ijmp[], al_l4[], al_icall[], al_g[], al_gret[], al_after_icall[];

/* al_run(ctl): IA32_LBR_CTL = ctl; jmp; call + ret; a forward taken jz (mispredicted); a 3-iteration
 * loop (2 taken backward jnz, predicted); an indirect jmp and an indirect call + ret (indirect
 * branches mispredicted); IA32_LBR_CTL = 0. 9 taken branches. */
asm(".text\n"
    ".globl al_run, al_jmp, al_l1, al_call, al_f, al_ret, al_after_call, al_jz, al_l3, al_loop, al_jnz\n"
    ".globl al_ijmp, al_l4, al_icall, al_g, al_gret, al_after_icall\n"
    "al_run:\n"
    "  mov $0x14ce, %ecx\n"
    "  mov %edi, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "al_jmp: jmp al_l1\n"
    "  nop\n"
    "al_l1: nop\n"
    "al_call: call al_f\n"
    "al_after_call: xor %eax, %eax\n"
    "al_jz: jz al_l3\n"
    "  nop\n"
    "al_l3: mov $3, %ecx\n"
    "al_loop: dec %ecx\n"
    "al_jnz: jnz al_loop\n"
    "  lea al_l4(%rip), %rax\n"
    "al_ijmp: jmp *%rax\n"
    "  nop\n"
    "al_l4: lea al_g(%rip), %rax\n"
    "al_icall: call *%rax\n"
    "al_after_icall: mov $0x14ce, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "al_f: nop\n"
    "al_ret: ret\n"
    "al_g: nop\n"
    "al_gret: ret\n");

/* cs_run: call-stack mode. main -> cs_a (call), cs_a -> cs_b (call), cs_b returns (pops),
 * cs_a -> cs_c (indirect call); cs_c turns the LBRs off with those two calls on the stack. */
extern void cs_run(void);
extern char cs_call_a[], cs_a[], cs_icall_c[], cs_c[];
asm(".text\n"
    ".globl cs_run, cs_call_a, cs_a, cs_icall_c, cs_c\n"
    "cs_run:\n"
    "  mov $0x14ce, %ecx\n"
    "  mov $0x38000f, %eax\n" /* EN | OS | USR | CALL_STACK | REL_CALL | IND_CALL | RET */
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "cs_call_a: call cs_a\n"
    "  ret\n"
    "cs_a: call cs_b\n"
    "  lea cs_c(%rip), %rax\n"
    "cs_icall_c: call *%rax\n"
    "  ret\n"
    "cs_b: nop\n"
    "  ret\n"
    "cs_c: mov $0x14ce, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n");

/* u_run (ring 3, at its user alias): jmp; call + ret; then returns to enter_user's exit path. */
extern uint64_t u_run(void);
extern char u_jmp[], u_l1[], u_call[], u_f[], u_ret[], u_after[], u_done[];
asm(".text\n"
    ".globl u_run, u_jmp, u_l1, u_call, u_f, u_ret, u_after, u_done\n"
    "u_run:\n"
    "u_jmp: jmp u_l1\n"
    "  nop\n"
    "u_l1: nop\n"
    "u_call: call u_f\n"
    "u_after: mov $7, %eax\n"
    "u_done: ret\n"
    "u_f: nop\n"
    "u_ret: ret\n");

static uint64_t scratch;

struct rec { uint64_t from, to, info; };

static struct rec record(uint32_t x)
{
    return (struct rec){ rdmsr(IA32_LBR_FROM + x), rdmsr(IA32_LBR_TO + x), rdmsr(IA32_LBR_INFO + x) };
}

/* A record with a cycle count has a nonzero one; one without has CYC_CNT = 0. */
static void check_cycles(uint64_t info)
{
    if (info & CYC_CNT_VALID)
        ASSERT(info & CYC_CNT);
    else
        ASSERT_EQ(info & CYC_CNT, 0);
}

/* Record x: its addresses and INFO's flags exactly, its cycle count plausible. */
static uint64_t expect(uint32_t x, const void *from, const void *to, uint64_t info)
{
    struct rec r = record(x);
    printf("LBR_%u %lx -> %lx info %lx\n", x, r.from, r.to, r.info);
    ASSERT_EQ(r.from, (uint64_t)from);
    ASSERT_EQ(r.to, (uint64_t)to);
    ASSERT_EQ(r.info & ~(CYC_CNT | CYC_CNT_VALID), info);
    check_cycles(r.info);
    return r.info;
}

static void expect_empty(uint32_t x)
{
    ASSERT_EQ(expect(x, 0, 0, 0), 0);
}

/* The 10 records al_run leaves with every type enabled, youngest first, from record `at`. */
static void expect_al_run(uint32_t at)
{
    expect(at + 0, al_gret, al_after_icall, BR(RET));
    expect(at + 1, al_icall, al_g, BR(IND_CALL) | MISPRED);
    expect(at + 2, al_ijmp, al_l4, BR(IND_JMP) | MISPRED);
    expect(at + 3, al_jnz, al_loop, BR(COND));            /* backward taken: predicted */
    expect(at + 4, al_jnz, al_loop, BR(COND));
    expect(at + 5, al_jz, al_l3, BR(COND) | MISPRED);     /* forward taken: mispredicted */
    expect(at + 6, al_ret, al_after_call, BR(RET));
    expect(at + 7, al_call, al_f, BR(REL_CALL));
    expect(at + 8, al_jmp, al_l1, BR(REL_JMP));
}

#define LBR_FRZ (1ull << 58)
#define PMI_VECTOR 0xF0

static volatile uint64_t pmis, pmi_status, pmi_from, pmi_to;

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    pmi_from = rdmsr(IA32_LBR_FROM);
    pmi_to = rdmsr(IA32_LBR_TO);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, pmi_status & ~LBR_FRZ); /* keep the LBRs frozen */
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    lapic_eoi();
}

void test_main(void)
{
    irq_disable();
    uint32_t r[4];

    /* ---- enumeration ---- */
    cpuid(0, 0, r);
    ASSERT(r[0] >= 0x1C);
    cpuid(7, 0, r);
    ASSERT(r[3] & (1u << 19));               /* Arch_LBR */
    cpuid(0x1C, 0, r);
    printf("CPUID.1CH: %x %x %x %x\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0] & 0xFF, 0x0F);            /* depths 8, 16, 24, 32 */
    ASSERT_EQ(r[1] & 7, 7);                  /* CPL filtering, branch filtering, call-stack mode */
    ASSERT_EQ(r[2] & 7, 7);                  /* mispredict bit, timed LBRs, branch type */
    uint32_t depth = 8 * (32 - __builtin_clz(r[0] & 0xFF));
    ASSERT_EQ(depth, 32);

    ASSERT_EQ(rdmsr(0x345) & 0x3F, 0x3F);     /* IA32_PERF_CAPABILITIES.LBR_FMT: Arch LBR */

    /* ---- MSR rules ---- */
    ASSERT_EQ(rdmsr(IA32_LBR_DEPTH), depth);  /* reset value: the deepest */
    ASSERT_EQ(rdmsr(IA32_LBR_CTL), 0);
    ASSERT(rdmsr_safe(MSR_LBR_TOS, &scratch));    /* no model-specific LBRs */
    ASSERT(rdmsr_safe(MSR_LBR_SELECT, &scratch));
    ASSERT(wrmsr_safe(MSR_LBR_FROM, 0));
    ASSERT(rdmsr_safe(MSR_LBR_INFO + 31, &scratch));
    static const unsigned reserved_ctl[] = { 4, 8, 15, 23, 31, 32, 63 };
    for (unsigned i = 0; i < sizeof reserved_ctl / sizeof reserved_ctl[0]; i++)
        ASSERT(wrmsr_safe(IA32_LBR_CTL, 1ull << reserved_ctl[i]));
    wrmsr(IA32_LBR_CTL, T_ALL | CTL_USR | CTL_OS | CTL_CALL_STACK);
    ASSERT_EQ(rdmsr(IA32_LBR_CTL), T_ALL | CTL_USR | CTL_OS | CTL_CALL_STACK);
    wrmsr(IA32_LBR_CTL, 0);
    static const uint64_t bad_depth[] = { 0, 1, 7, 12, 33, 40, 64, 0x100000010ull };
    for (unsigned i = 0; i < sizeof bad_depth / sizeof bad_depth[0]; i++)
        ASSERT(wrmsr_safe(IA32_LBR_DEPTH, bad_depth[i]));
    for (uint64_t d = 8; d <= 32; d += 8) {
        wrmsr(IA32_LBR_DEPTH, d);
        ASSERT_EQ(rdmsr(IA32_LBR_DEPTH), d);
        uint64_t v;
        ASSERT(!rdmsr_safe(IA32_LBR_FROM + (uint32_t)d - 1, &v));
        if (d < 32) {                         /* records at or past the depth: #GP */
            ASSERT(rdmsr_safe(IA32_LBR_FROM + (uint32_t)d, &scratch));
            ASSERT(rdmsr_safe(IA32_LBR_INFO + 31, &scratch));
            ASSERT(wrmsr_safe(IA32_LBR_TO + (uint32_t)d, 0));
        }
    }
    ASSERT(rdmsr_safe(IA32_LBR_TO + 32, &scratch)); /* beyond the deepest */
    /* Record MSRs read back what is written (Linux's context-switch restore). */
    wrmsr(IA32_LBR_FROM + 31, 0xFFFFFFFF81000000ull);
    ASSERT_EQ(rdmsr(IA32_LBR_FROM + 31), 0xFFFFFFFF81000000ull);
    wrmsr(IA32_LBR_INFO + 5, MISPRED | BR(RET) | 0x1234);
    ASSERT_EQ(rdmsr(IA32_LBR_INFO + 5), MISPRED | BR(RET) | 0x1234);
    ASSERT(wrmsr_safe(IA32_LBR_TO + 1, 0x0000800000000000ull)); /* not canonical */
    ASSERT(wrmsr_safe(IA32_LBR_INFO + 3, 1ull << 40));          /* INFO[55:16] reserved */
    /* Writing IA32_LBR_DEPTH clears every record. */
    wrmsr(IA32_LBR_DEPTH, 32);
    expect_empty(31);
    expect_empty(5);

    /* ---- every branch type, both rings ---- */
    al_run(CTL_EN | CTL_OS | CTL_USR | T_ALL);
    expect_al_run(0);
    expect_empty(9);
    /* Timed LBRs: the first record since the depth write has no count, the later ones have. */
    ASSERT_EQ(record(8).info & CYC_CNT_VALID, 0);
    for (uint32_t x = 0; x < 8; x++)
        ASSERT(record(x).info & CYC_CNT_VALID);
    ASSERT_EQ(rdmsr(IA32_LBR_CTL), 0);
    /* LBREn = 0 changes nothing: a second run shifts the first one down by 9. */
    al_run(CTL_EN | CTL_OS | CTL_USR | T_ALL);
    expect_al_run(0);
    expect_al_run(9);
    /* 3 more runs: 45 branches, the oldest 13 are gone from the 32 records. */
    for (int i = 0; i < 3; i++)
        al_run(CTL_EN | CTL_OS | CTL_USR | T_ALL);
    expect_al_run(0);
    expect_al_run(18);
    expect(27, al_gret, al_after_icall, BR(RET));
    expect(31, al_jnz, al_loop, BR(COND));

    /* ---- depth 8: the ring holds 8 ---- */
    wrmsr(IA32_LBR_DEPTH, 8);
    al_run(CTL_EN | CTL_OS | CTL_USR | T_ALL);
    expect(0, al_gret, al_after_icall, BR(RET));
    expect(7, al_call, al_f, BR(REL_CALL));
    ASSERT(rdmsr_safe(IA32_LBR_FROM + 8, &scratch));
    wrmsr(IA32_LBR_DEPTH, 32);

    /* ---- branch-type filters ---- */
    al_run(CTL_EN | CTL_OS | T_COND);
    expect(0, al_jnz, al_loop, BR(COND));
    expect(1, al_jnz, al_loop, BR(COND));
    expect(2, al_jz, al_l3, BR(COND) | MISPRED);
    expect_empty(3);
    wrmsr(IA32_LBR_DEPTH, 32);
    al_run(CTL_EN | CTL_OS | T_REL_JMP | T_IND_CALL | T_RET);
    expect(0, al_gret, al_after_icall, BR(RET));
    expect(1, al_icall, al_g, BR(IND_CALL) | MISPRED);
    expect(2, al_ret, al_after_call, BR(RET));
    expect(3, al_jmp, al_l1, BR(REL_JMP));
    expect_empty(4);
    wrmsr(IA32_LBR_DEPTH, 32);
    al_run(CTL_EN | CTL_OS | T_IND_JMP | T_REL_CALL);
    expect(0, al_ijmp, al_l4, BR(IND_JMP) | MISPRED);
    expect(1, al_call, al_f, BR(REL_CALL));
    expect_empty(2);

    /* ---- CPL filter: USR only records nothing in ring 0 ---- */
    wrmsr(IA32_LBR_DEPTH, 32);
    al_run(CTL_EN | CTL_USR | T_ALL);
    expect_empty(0);

    /* ---- call-stack mode ---- */
    cs_run();
    expect(0, cs_icall_c, cs_c, BR(IND_CALL) | MISPRED);
    expect(1, cs_call_a, cs_a, BR(REL_CALL));
    expect_empty(2); /* cs_b's call was popped by its return */

    /* ---- ring 3 under USR only: the user code's branches and the transfer into ring 3,
     * not the SYSCALL back into ring 0 nor anything in the kernel. ---- */
    wrmsr(IA32_LBR_DEPTH, 32);
    wrmsr(IA32_LBR_CTL, CTL_EN | CTL_USR | T_ALL);
    uint64_t ret = enter_user(u_run, NULL);
    wrmsr(IA32_LBR_CTL, 0);
    ASSERT_EQ(ret, 7);
    struct rec r0 = record(0);
    printf("LBR_0 %lx -> %lx info %lx\n", r0.from, r0.to, r0.info);
    ASSERT_EQ(r0.from, (uint64_t)user_ptr(u_done));   /* u_run's return into enter_user's exit path */
    ASSERT(r0.to >= USER_ALIAS_OFFSET && r0.to < USER_ALIAS_OFFSET + IDENTITY_SIZE);
    ASSERT_EQ(r0.info & ~(CYC_CNT | CYC_CNT_VALID), BR(RET));
    check_cycles(r0.info);
    expect(1, user_ptr(u_ret), user_ptr(u_after), BR(RET));
    expect(2, user_ptr(u_call), user_ptr(u_f), BR(REL_CALL));
    expect(3, user_ptr(u_jmp), user_ptr(u_l1), BR(REL_JMP));
    int n = 0, into_user = 0;
    for (uint32_t x = 0; x < 32; x++) {
        struct rec e = record(x);
        if (!e.from)
            break;
        n++;
        ASSERT(e.to >= USER_ALIAS_OFFSET && e.to < USER_ALIAS_OFFSET + IDENTITY_SIZE); /* ends in ring 3 */
        if (e.from < USER_ALIAS_OFFSET || e.from >= USER_ALIAS_OFFSET + IDENTITY_SIZE) {
            ASSERT_EQ(e.info & BR(0xF), BR(OTHER));                             /* IRETQ / SYSRET */
            into_user++;
        }
        check_cycles(e.info);
    }
    printf("ring 3 run: %d records, %d from ring 0\n", n, into_user);
    ASSERT_EQ(into_user, 1);

    /* ---- FREEZE_LBRS_ON_PMI: the PMI of an overflowing counter sets LBR_Frz and the records
     * stop; clearing LBR_Frz resumes. ---- */
    wrmsr(IA32_LBR_DEPTH, 32);
    lapic_enable();
    set_handler(PMI_VECTOR, pmi_handler);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    wrmsr(IA32_A_PMC0, (1ull << 48) - 500);
    wrmsr(IA32_PERFEVTSEL0, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22)); /* instructions, OS, INT, EN */
    wrmsr(IA32_DEBUGCTL, 1u << 11);
    wrmsr(IA32_LBR_CTL, CTL_EN | CTL_OS | T_ALL);
    irq_enable();
    wrmsr(IA32_PERF_GLOBAL_CTRL, 1);
    volatile uint64_t sink = branchy(1000);
    (void)sink;
    irq_disable();
    struct rec after = record(0);
    printf("LBR freeze: %lu PMI, status %lx, youngest at the PMI %lx -> %lx, after %lx -> %lx (branchy at %lx)\n",
           pmis, pmi_status, pmi_from, pmi_to, after.from, after.to, (uint64_t)branchy);
    ASSERT_EQ(pmis, 1);
    ASSERT(pmi_status & LBR_FRZ);
    ASSERT(pmi_from >= (uint64_t)branchy && pmi_from < (uint64_t)branchy + 0x100);
    ASSERT_EQ(after.from, pmi_from);             /* frozen through the rest of the loop */
    ASSERT_EQ(after.to, pmi_to);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, LBR_FRZ);
    al_run(CTL_EN | CTL_OS | T_ALL);              /* recording again */
    expect_al_run(0);
    wrmsr(IA32_DEBUGCTL, 0);
}
