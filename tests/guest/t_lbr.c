/* The Skylake-class LBR stack (SDM Vol. 3B §18.4.8, §18.11.2, LBR format 5): enumeration in
 * IA32_PERF_CAPABILITIES[5:0], the MSRs' #GP and read-back rules (the probe Linux does under a
 * hypervisor), the records of a hand-written sequence of taken branches (youngest at TOS, the
 * static predictor's MISPRED bit in LBR_INFO), and LBR_SELECT suppressing conditional branches.
 * LBR_INFO[15:0] CYC_CNT counts the emulated core clock (the host TSC without -icount, not
 * deterministic): exact only for the first record since RESET (0), nonzero for the others. */
#include "guest.h"
#include "work.h"

#define MISPRED (1ull << 63)
#define CYC_CNT 0xFFFFull

extern void lbr_run(void);
extern char lbr_jmp[], lbr_l1[], lbr_call[], lbr_f[], lbr_ret[], lbr_after_call[], lbr_jz[], lbr_l3[],
    lbr_loop[], lbr_jnz[];

/* lbr_run: DEBUGCTL.LBR = 1; jmp; call + ret; a forward taken jz (mispredicted); a 3-iteration
 * loop (2 taken backward jnz); DEBUGCTL.LBR = 0. */
asm(".text\n"
    ".globl lbr_run, lbr_jmp, lbr_l1, lbr_call, lbr_f, lbr_ret, lbr_after_call, lbr_jz, lbr_l3, lbr_loop, lbr_jnz\n"
    "lbr_run:\n"
    "  mov $0x1d9, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "lbr_jmp: jmp lbr_l1\n"
    "  nop\n"
    "lbr_l1: nop\n"
    "lbr_call: call lbr_f\n"
    "lbr_after_call: xor %eax, %eax\n"
    "lbr_jz: jz lbr_l3\n"
    "  nop\n"
    "lbr_l3: mov $3, %ecx\n"
    "lbr_loop: dec %ecx\n"
    "lbr_jnz: jnz lbr_loop\n"
    "  mov $0x1d9, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "lbr_f: nop\n"
    "lbr_ret: ret\n");

#define LBR_FRZ (1ull << 58)
#define PMI_VECTOR 0xF0

struct rec { uint64_t from, to, info; };

static volatile uint64_t pmis, pmi_status, pmi_tos, pmi_from, pmi_to;
static struct rec youngest(int k);

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    pmi_tos = rdmsr(MSR_LBR_TOS);
    struct rec r = youngest(0);
    pmi_from = r.from;
    pmi_to = r.to;
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, pmi_status & ~LBR_FRZ); /* keep the LBRs frozen */
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    lapic_eoi();
}

static struct rec youngest(int k)
{
    uint64_t tos = rdmsr(MSR_LBR_TOS);
    uint32_t i = (uint32_t)((tos + 32 - k) % 32);
    return (struct rec){ rdmsr(MSR_LBR_FROM + i), rdmsr(MSR_LBR_TO + i), rdmsr(MSR_LBR_INFO + i) };
}

/* The record k back from TOS: its addresses and LBR_INFO's flags exactly; its cycle count is
 * returned. */
static uint64_t expect(int k, void *from, void *to, uint64_t info)
{
    struct rec r = youngest(k);
    printf("LBR[-%d] %lx -> %lx info %lx\n", k, r.from, r.to, r.info);
    ASSERT_EQ(r.from, (uint64_t)from);
    ASSERT_EQ(r.to, (uint64_t)to);
    ASSERT_EQ(r.info & ~CYC_CNT, info);
    return r.info & CYC_CNT;
}

void test_main(void)
{
    irq_disable();
    ASSERT_EQ(rdmsr(IA32_PERF_CAPABILITIES) & 0x3F, 5);
    ASSERT(wrmsr_safe(MSR_LBR_SELECT, 1ull << 10));
    ASSERT(wrmsr_safe(MSR_LBR_TOS, 32));
    ASSERT(wrmsr_safe(MSR_LBR_FROM, 0x0000800000000000ull)); /* not canonical */
    ASSERT(wrmsr_safe(MSR_LBR_INFO + 3, 1ull << 40));
    /* Linux's check_msr: write value ^ mask, read back. */
    wrmsr(MSR_LBR_TOS, rdmsr(MSR_LBR_TOS) ^ 3);
    ASSERT_EQ(rdmsr(MSR_LBR_TOS), 3);
    wrmsr(MSR_LBR_FROM + 31, 0xFFFFFFFF81000000ull);
    ASSERT_EQ(rdmsr(MSR_LBR_FROM + 31), 0xFFFFFFFF81000000ull);
    wrmsr(MSR_LBR_SELECT, 0);

    lbr_run();
    /* CYC_CNT: core clocks since the previous record; each of these branches ends a block, so
     * the clock advanced between any two of them. The first record since RESET has no previous
     * update to count from: 0. */
    ASSERT(expect(0, lbr_jnz, lbr_loop, 0) != 0);          /* backward taken: predicted */
    ASSERT(expect(1, lbr_jnz, lbr_loop, 0) != 0);
    ASSERT(expect(2, lbr_jz, lbr_l3, MISPRED) != 0);       /* forward taken: mispredicted */
    ASSERT(expect(3, lbr_ret, lbr_after_call, 0) != 0);
    ASSERT(expect(4, lbr_call, lbr_f, 0) != 0);
    ASSERT_EQ(expect(5, lbr_jmp, lbr_l1, 0), 0);
    ASSERT_EQ(rdmsr(MSR_LBR_TOS), (3 + 6) % 32);
    ASSERT_EQ(rdmsr(IA32_DEBUGCTL) & 1, 0);

    /* LBR_SELECT[2] JCC: conditional branches are not recorded. */
    wrmsr(MSR_LBR_SELECT, 1u << 2);
    lbr_run();
    ASSERT(expect(0, lbr_ret, lbr_after_call, 0) != 0);
    ASSERT(expect(1, lbr_call, lbr_f, 0) != 0);
    ASSERT(expect(2, lbr_jmp, lbr_l1, 0) != 0);   /* since the previous run's last record */
    ASSERT_EQ(rdmsr(MSR_LBR_TOS), (9 + 3) % 32);

    /* FREEZE_LBRS_ON_PMI (DEBUGCTL[11], version 4): the PMI of an overflowing counter sets
     * GLOBAL_STATUS.LBR_Frz and the stack stops; clearing it through STATUS_RESET resumes. */
    wrmsr(MSR_LBR_SELECT, 0);
    lapic_enable();
    set_handler(PMI_VECTOR, pmi_handler);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    wrmsr(IA32_A_PMC0, (1ull << 48) - 500);
    wrmsr(IA32_PERFEVTSEL0, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22)); /* instructions, OS, INT, EN */
    wrmsr(IA32_DEBUGCTL, 1 | (1u << 11));
    irq_enable();
    wrmsr(IA32_PERF_GLOBAL_CTRL, 1);
    volatile uint64_t sink = branchy(1000); /* ~5000 instructions: overflows early */
    (void)sink;
    irq_disable();
    uint64_t tos_after = rdmsr(MSR_LBR_TOS);
    printf("LBR freeze: %lu PMI, status %lx, TOS at the PMI %lu, after %lu, youngest %lx -> %lx (branchy at %lx)\n",
           pmis, pmi_status, pmi_tos, tos_after, pmi_from, pmi_to, (uint64_t)branchy);
    ASSERT_EQ(pmis, 1);
    /* The stack froze at the PMI request (the overflow inside branchy's loop): its youngest
     * record is a branch of the loop, not the PMI's own delivery into the handler. */
    ASSERT(pmi_from >= (uint64_t)branchy && pmi_from < (uint64_t)branchy + 0x100);
    ASSERT(pmi_to >= (uint64_t)branchy && pmi_to < (uint64_t)branchy + 0x100);
    ASSERT(pmi_status & LBR_FRZ);
    ASSERT(pmi_status & 1);
    ASSERT_EQ(tos_after, pmi_tos);              /* frozen through the rest of the loop */
    ASSERT(rdmsr(IA32_PERF_GLOBAL_STATUS) & LBR_FRZ);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, LBR_FRZ);
    sink = branchy(10);
    ASSERT(rdmsr(MSR_LBR_TOS) != tos_after);  /* recording again */
    wrmsr(IA32_DEBUGCTL, 0);
}
