/* The Skylake-class LBR stack (SDM Vol. 3B §18.4.8, §18.11.2) over long runs of blocks: the
 * plugin's block callback only records blocks while the LBRs (and counters) are on and runs them
 * through the model in batches (issue 13). Whatever the batching, the stack must hold exactly
 * the youngest 32 taken branches, the TOS must have moved once per taken branch, and
 * FREEZE_LBRS_ON_PMI must stop the stack at the branch that overflowed an interrupting counter.
 * The loop below is hand-written, so every taken branch, its order and its count are known:
 *
 *   lbrb_run(n, debugctl): DEBUGCTL = debugctl; GLOBAL_CTRL = 1; n times { call f; ret; jnz };
 *                          DEBUGCTL = 0
 *
 * Taken branches, in order: call (1), ret (2), jnz (3), call (4), ... - 3n - 1 in all (the last
 * jnz falls through). CYC_CNT is host time here (not deterministic): only nonzero is checked. */
#include "guest.h"

#define CYC_CNT 0xFFFFull
#define DEPTH 32

#define LBR_FRZ (1ull << 58)
#define PMI_VECTOR 0xF0

extern void lbrb_run(uint64_t n, uint64_t debugctl);
extern char lbrb_call[], lbrb_back[], lbrb_jnz[], lbrb_f[], lbrb_ret[];

asm(".text\n"
    ".globl lbrb_run, lbrb_call, lbrb_back, lbrb_jnz, lbrb_f, lbrb_ret\n"
    "lbrb_run:\n"
    "  mov %rsi, %rax\n"
    "  mov $0x1d9, %ecx\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  mov $0x38f, %ecx\n"
    "  mov $1, %eax\n"
    "  wrmsr\n"
    "lbrb_call: call lbrb_f\n"
    "lbrb_back: dec %rdi\n"
    "lbrb_jnz: jnz lbrb_call\n"
    "  mov $0x1d9, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "lbrb_f: nop\n"
    "lbrb_ret: ret\n");

struct rec { uint64_t from, to, info; };

/* The taken branch number k (1-based) of lbrb_run's loop. */
static struct rec branch(uint64_t k)
{
    switch (k % 3) {
    case 1: return (struct rec){ (uint64_t)lbrb_call, (uint64_t)lbrb_f, 0 };
    case 2: return (struct rec){ (uint64_t)lbrb_ret, (uint64_t)lbrb_back, 0 };
    default: return (struct rec){ (uint64_t)lbrb_jnz, (uint64_t)lbrb_call, 0 }; /* backward: predicted */
    }
}

static struct rec stack[DEPTH];
static uint64_t stack_tos;

static void read_stack(void)
{
    stack_tos = rdmsr(MSR_LBR_TOS);
    for (int k = 0; k < DEPTH; k++) {
        uint32_t i = (uint32_t)((stack_tos + DEPTH - k) % DEPTH);
        stack[k] = (struct rec){ rdmsr(MSR_LBR_FROM + i), rdmsr(MSR_LBR_TO + i), rdmsr(MSR_LBR_INFO + i) };
    }
}

/* The stack as read holds the taken branches youngest-1 .. youngest-31 before `youngest`, in
 * order; with `only_calls`, only the calls among them (LBR_SELECT filters the rest). */
static void check_stack(uint64_t youngest, int only_calls, const char *what)
{
    uint64_t k = youngest;
    for (int j = 0; j < DEPTH; j++, k--) {
        if (only_calls)
            while (k % 3 != 1)
                k--;
        struct rec want = branch(k);
        if (stack[j].from != want.from || stack[j].to != want.to || (stack[j].info & ~CYC_CNT) != want.info ||
            (stack[j].info & CYC_CNT) == 0) {
            printf("%s: LBR[-%d] %lx -> %lx info %lx, expected branch %lu: %lx -> %lx info %lx\n", what, j,
                   stack[j].from, stack[j].to, stack[j].info, k, want.from, want.to, want.info);
            ASSERT(0);
        }
    }
    printf("%s: the 32 records are taken branches %lu..%lu of the loop\n", what, k + 1, youngest);
}

static volatile uint64_t pmis, pmi_status;

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    read_stack();
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, pmi_status & ~LBR_FRZ); /* keep the LBRs frozen */
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    lapic_eoi();
}

void test_main(void)
{
    irq_disable();
    wrmsr(MSR_LBR_SELECT, 0);

    /* No counter: the stack after 20000 iterations (59999 taken branches). */
    uint64_t n = 20000, tos0 = rdmsr(MSR_LBR_TOS);
    lbrb_run(n, 1);
    read_stack();
    ASSERT_EQ(stack_tos, (tos0 + 3 * n - 1) % DEPTH);
    check_stack(3 * n - 1, 0, "no counter");

    /* LBR_SELECT (SDM Table 18-13): [2] JCC, [4] NEAR_IND_CALL, [5] NEAR_RET, [6] NEAR_IND_JMP,
     * [7] NEAR_REL_JMP, [8] FAR_BRANCH suppressed; [3] NEAR_REL_CALL clear: only the calls. */
    wrmsr(MSR_LBR_SELECT, (1u << 2) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 8));
    tos0 = rdmsr(MSR_LBR_TOS);
    n = 3000;
    lbrb_run(n, 1);
    read_stack();
    ASSERT_EQ(stack_tos, (tos0 + n) % DEPTH);
    check_stack(3 * n - 2, 1, "calls only");
    wrmsr(MSR_LBR_SELECT, 0);

    /* A counter of branches (BR_INST_RETIRED.ALL_BRANCHES, C4H/00H) with INT, started at -N by
     * lbrb_run's GLOBAL_CTRL write, and FREEZE_LBRS_ON_PMI: it overflows at taken branch N (every
     * branch before the loop's last jnz is taken), whose own record is the stack's last. */
    uint64_t N = 3 * 20000 + 2; /* a ret */
    lapic_enable();
    set_handler(PMI_VECTOR, pmi_handler);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_A_PMC0, (1ull << 48) - N);
    wrmsr(IA32_PERFEVTSEL0, 0xC4 | (1u << 17) | (1u << 20) | (1u << 22)); /* OS, INT, EN */
    tos0 = rdmsr(MSR_LBR_TOS);
    irq_enable();
    lbrb_run(30000, 1 | (1u << 11));
    irq_disable();
    uint64_t tos_after = rdmsr(MSR_LBR_TOS);
    printf("PMI: %lu, status %lx, TOS %lu at the PMI, %lu after\n", pmis, pmi_status, stack_tos, tos_after);
    ASSERT_EQ(pmis, 1);
    ASSERT(pmi_status & LBR_FRZ);
    ASSERT(pmi_status & 1);
    ASSERT_EQ(stack_tos, (tos0 + N) % DEPTH);
    ASSERT_EQ(tos_after, stack_tos); /* frozen through the rest of the loop */
    check_stack(N, 0, "frozen at the overflow");
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, LBR_FRZ);
    wrmsr(IA32_PERFEVTSEL0, 0);
}
