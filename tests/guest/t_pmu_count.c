/* The counting PMU (SDM Vol. 3B §20.2, perfmon version 4 of the Skylake profile):
 * enumeration, the MSRs' #GP and read-back rules, exact counts of hand-written loops (instructions,
 * branches by umask, the static predictor's mispredictions), RDPMC and RDMSR in the middle of a
 * block, USR/OS filtering across SYSCALL/SYSRET and INT/IRET, and the overflow PMI through
 * LVTPC with its interrupted RIP, freeze (DEBUGCTL[12], GLOBAL_STATUS.CTR_Frz) and unfreeze.
 * The measured code is assembly, so every expected count is known exactly. Convention: the
 * WRMSR that enables counting retires under the new configuration (counted), the one that
 * disables it does not. */
#include "guest.h"


#define EVT_USR (1ull << 16)
#define EVT_OS  (1ull << 17)
#define EVT_INT (1ull << 20)
#define EVT_EN  (1ull << 22)
#define CTR_FRZ (1ull << 59)
#define PMI_VECTOR 0xF0

/* GLOBAL_CTRL value the assembly loads when it enables counting. */
uint64_t pmu_on;
uint64_t pmu_user_n;
uint64_t rdpmc_mid, rdmsr_mid;
/* RFLAGS right after a ring-0 RDPMC run with CF, PF, ZF and DF set, and after the code then
 * cleared them (pmu_rdpmc_flags_k). */
uint64_t rdpmc_flags_after, rdpmc_flags_later;
extern void pmu_rdpmc_flags_k(void);

/* pmu_loop(n): enable, n x (dec; jnz), disable. Counted: wrmsr, mov, 2n, xor, xor, mov = 2n + 5
 * instructions; n conditional branches, n - 1 taken, 1 not taken (mispredicted: backward). */
extern void pmu_loop(uint64_t n);
/* pmu_mid(): enable; 5 x nop; xor; RDPMC (reads 7); shl; or; mov; mov; RDMSR PMC0 (reads 12);
 * ...; disable. */
extern void pmu_mid(void);
/* Ring 3: mov; n x (dec; jnz); SYSCALL (SYS_ECHO); INT 0x80 (SYS_ECHO); ret = 2n + 8, then
 * enter_user's SYSCALL(SYS_EXIT) trampoline (3 more): 2n + 11 user instructions, n + 4 branches
 * of which 3 far (SYSCALL, INT, SYSCALL) and 1 near return. */
extern uint64_t pmu_user_fn(void);
/* pmu_ovf(): enable; jmp 1f; 1: nop; nop; nop; jmp pmu_ovf_after; pmu_ovf_after: disable. */
extern void pmu_ovf(void);
extern char pmu_ovf_after[];
/* Ring 3: nop; nop; UD2 (#UD, the kernel's fixup resumes after it); nop; ret: 4 instructions
 * retire (the faulting UD2 does not), + 3 of the exit trampoline. */
extern uint64_t pmu_user_fault(void);
/* pmu_rep(): enable; lea; mov; xor; REP STOSB x 100; xor; xor; mov; disable: 8 instructions
 * (the REP once). */
extern void pmu_rep(void);
/* Ring 3: xor ecx, ecx; RDPMC; shl; or; ret -> counter 0 as RDPMC read it (1 user instruction
 * before it); RAX = -1 if RDPMC faulted (the fixup), the vector in last_fault. */
extern uint64_t pmu_user_rdpmc(void);
/* RDPMC with ECX = the argument in ring 0; -1 if it faulted. */
extern uint64_t pmu_rdpmc_k(uint64_t ecx);
uint8_t rep_buf[128];

asm(".text\n"
    ".globl pmu_loop\n"
    "pmu_loop:\n"
    "  mov %rdi, %r8\n"
    "  mov $0x38f, %ecx\n"
    "  mov pmu_on(%rip), %eax\n"
    "  mov pmu_on+4(%rip), %edx\n"
    "  wrmsr\n"
    "  mov %r8, %rcx\n"
    "1: dec %rcx\n"
    "  jnz 1b\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  mov $0x38f, %ecx\n"
    "  wrmsr\n"
    "  ret\n"
    ".globl pmu_mid\n"
    "pmu_mid:\n"
    "  mov $0x38f, %ecx\n"
    "  mov pmu_on(%rip), %eax\n"
    "  mov pmu_on+4(%rip), %edx\n"
    "  wrmsr\n"
    "  nop; nop; nop; nop; nop\n"
    "  xor %ecx, %ecx\n"
    "  rdpmc\n"
    "  shl $32, %rdx\n"
    "  or %rdx, %rax\n"
    "  mov %rax, %r9\n"
    "  mov $0xc1, %ecx\n"
    "  rdmsr\n"
    "  shl $32, %rdx\n"
    "  or %rdx, %rax\n"
    "  mov %rax, %r10\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  mov $0x38f, %ecx\n"
    "  wrmsr\n"
    "  mov %r9, rdpmc_mid(%rip)\n"
    "  mov %r10, rdmsr_mid(%rip)\n"
    "  ret\n"
    ".globl pmu_user_fn\n"
    "pmu_user_fn:\n"
    "  mov pmu_user_n(%rip), %rcx\n"
    "1: dec %rcx\n"
    "  jnz 1b\n"
    "  mov $1, %eax\n"
    "  mov $7, %edi\n"
    "  syscall\n"
    "  mov $1, %eax\n"
    "  mov $8, %edi\n"
    "  int $0x80\n"
    "  ret\n"
    ".globl pmu_ovf, pmu_ovf_after\n"
    "pmu_ovf:\n"
    "  mov $0x38f, %ecx\n"
    "  mov pmu_on(%rip), %eax\n"
    "  mov pmu_on+4(%rip), %edx\n"
    "  wrmsr\n"
    "  jmp 1f\n"
    "1: nop\n"
    "  nop\n"
    "  nop\n"
    "  jmp pmu_ovf_after\n"
    "pmu_ovf_after:\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  mov $0x38f, %ecx\n"
    "  wrmsr\n"
    "  ret\n"
    ".globl pmu_user_fault\n"
    "pmu_user_fault:\n"
    "  nop\n"
    "  nop\n"
    "1: ud2\n"
    "2: nop\n"
    "  ret\n"
    EXTABLE_ENTRY(1b, 2b)
    ".globl pmu_rep\n"
    "pmu_rep:\n"
    "  mov $0x38f, %ecx\n"
    "  mov pmu_on(%rip), %eax\n"
    "  mov pmu_on+4(%rip), %edx\n"
    "  wrmsr\n"
    "  lea rep_buf(%rip), %rdi\n"
    "  mov $100, %ecx\n"
    "  xor %eax, %eax\n"
    "  rep stosb\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  mov $0x38f, %ecx\n"
    "  wrmsr\n"
    "  ret\n"
    ".globl pmu_user_rdpmc\n"
    "pmu_user_rdpmc:\n"
    "  xor %ecx, %ecx\n"
    "3: rdpmc\n"
    "  shl $32, %rdx\n"
    "  or %rdx, %rax\n"
    "  ret\n"
    "4: mov $-1, %rax\n"
    "  ret\n"
    EXTABLE_ENTRY(3b, 4b)
    ".globl pmu_rdpmc_k\n"
    "pmu_rdpmc_k:\n"
    "  mov %rdi, %rcx\n"
    "5: rdpmc\n"
    "  shl $32, %rdx\n"
    "  or %rdx, %rax\n"
    "  ret\n"
    "6: mov $-1, %rax\n"
    "  ret\n"
    EXTABLE_ENTRY(5b, 6b)
    ".globl pmu_rdpmc_flags_k\n"
    "pmu_rdpmc_flags_k:\n"
    "  xor %ecx, %ecx\n"
    "  stc\n"
    "  std\n"
    "  rdpmc\n"
    "  pushf\n"
    "  pop %rax\n"
    "  cld\n"
    "  mov $1, %ecx\n"
    "  add $1, %ecx\n"
    "  pushf\n"
    "  pop %rdx\n"
    "  mov %rax, rdpmc_flags_after(%rip)\n"
    "  mov %rdx, rdpmc_flags_later(%rip)\n"
    "  ret\n");

static void clear_counters(void)
{
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    for (int i = 0; i < 4; i++) {
        wrmsr(IA32_PERFEVTSEL0 + i, 0);
        wrmsr(IA32_A_PMC0 + i, 0);
    }
    wrmsr(IA32_FIXED_CTR_CTRL, 0);
    for (int i = 0; i < 3; i++)
        wrmsr(IA32_FIXED_CTR0 + i, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
}

static void check_enumeration_and_msr_rules(void)
{
    uint32_t r[4];
    cpuid(0xA, 0, r);
    printf("CPUID.0AH: %08x %08x %08x %08x\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0] & 0xFF, 4);          /* version 4 */
    ASSERT_EQ((r[0] >> 8) & 0xFF, 4);   /* 4 GP counters */
    ASSERT_EQ((r[0] >> 16) & 0xFF, 48); /* 48 bits */
    ASSERT_EQ(r[1] & 0x7F, 0x18);       /* LLC references/misses unavailable, the rest counted */
    ASSERT_EQ(r[3], 0x603);             /* 3 fixed counters of 48 bits */
    cpuid(1, 0, r);
    ASSERT(r[2] & (1u << 15));          /* PDCM: IA32_PERF_CAPABILITIES */
    ASSERT_EQ(rdmsr(IA32_PERF_CAPABILITIES), (1u << 13) | 5); /* FW_WRITE, LBR format 5 */

    uint64_t v;
    ASSERT(rdmsr_safe(IA32_PMC0 + 4, &v));            /* no PMC4 */
    ASSERT(wrmsr_safe(IA32_PERFEVTSEL0 + 4, 0));
    ASSERT(rdmsr_safe(IA32_FIXED_CTR0 + 3, &v));
    ASSERT(wrmsr_safe(IA32_PERFEVTSEL0, 1ull << 32)); /* reserved */
    ASSERT(wrmsr_safe(IA32_FIXED_CTR_CTRL, 0x1000));
    ASSERT(wrmsr_safe(IA32_PERF_GLOBAL_CTRL, 1ull << 4));
    ASSERT(wrmsr_safe(IA32_PERF_GLOBAL_STATUS, 0));   /* read-only */
    ASSERT(wrmsr_safe(IA32_PERF_GLOBAL_INUSE, 0));
    ASSERT(wrmsr_safe(IA32_PERF_CAPABILITIES, 0));
    ASSERT(wrmsr_safe(IA32_A_PMC0, 1ull << 48));      /* wider than the counter */
    ASSERT(wrmsr_safe(IA32_FIXED_CTR0, 1ull << 48));
    ASSERT(wrmsr_safe(IA32_PERF_GLOBAL_STATUS_RESET, 1ull << 5)); /* no PMC5 */
    /* Legacy writes sign-extend bit 31; IA32_A_PMCx write the full width. */
    wrmsr(IA32_PMC0, 0x80000000);
    ASSERT_EQ(rdmsr(IA32_PMC0), 0xFFFF80000000ull);
    wrmsr(IA32_PMC0 + 1, 0x1234ffffffffull);
    ASSERT_EQ(rdmsr(IA32_PMC0 + 1), 0xFFFFFFFFFFFFull);
    wrmsr(IA32_A_PMC0 + 2, 0x123480000000ull);
    ASSERT_EQ(rdmsr(IA32_PMC0 + 2), 0x123480000000ull);
    wrmsr(IA32_PERFEVTSEL0 + 3, 0x1080C0 | EVT_USR | (1ull << 21));
    ASSERT_EQ(rdmsr(IA32_PERFEVTSEL0 + 3), 0x1080C0 | EVT_USR | (1ull << 21));
    wrmsr(IA32_FIXED_CTR_CTRL, 0xA00);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_INUSE), (1ull << 3) | (1ull << 34) | (1ull << 63));
    wrmsr(IA32_PERF_GLOBAL_STATUS_SET, 0x5 | (1ull << 33) | (1ull << 62));
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 0x5 | (1ull << 33) | (1ull << 62));
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, 0x1 | (1ull << 62));
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 0x4 | (1ull << 33));
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS_RESET), 0);
    clear_counters();
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 0);
}

static void check_loop_counts(uint64_t n)
{
    clear_counters();
    wrmsr(IA32_PERFEVTSEL0 + 0, 0x00C4 | EVT_OS | EVT_EN); /* BR_INST_RETIRED.ALL_BRANCHES */
    wrmsr(IA32_PERFEVTSEL0 + 1, 0x20C4 | EVT_OS | EVT_EN); /* ... NEAR_TAKEN */
    wrmsr(IA32_PERFEVTSEL0 + 2, 0x10C4 | EVT_OS | EVT_EN); /* ... NOT_TAKEN */
    wrmsr(IA32_PERFEVTSEL0 + 3, 0x00C5 | EVT_OS | EVT_EN); /* BR_MISP_RETIRED.ALL_BRANCHES */
    wrmsr(IA32_FIXED_CTR_CTRL, 0x1);                       /* INST_RETIRED.ANY, OS */
    pmu_on = 0x10000000Full;
    pmu_loop(n);
    uint64_t insns = rdmsr(IA32_FIXED_CTR0), br = rdmsr(IA32_PMC0), taken = rdmsr(IA32_PMC0 + 1);
    uint64_t not_taken = rdmsr(IA32_PMC0 + 2), misp = rdmsr(IA32_PMC0 + 3);
    printf("loop of %lu: %lu instructions, %lu branches (%lu taken, %lu not taken), %lu mispredicted\n",
           n, insns, br, taken, not_taken, misp);
    ASSERT_EQ(insns, 2 * n + 5);
    ASSERT_EQ(br, n);
    ASSERT_EQ(taken, n - 1);
    ASSERT_EQ(not_taken, 1);
    ASSERT_EQ(misp, 1);
    /* Counting stopped with GLOBAL_CTRL = 0. */
    pmu_loop(n);
    ASSERT_EQ(rdmsr(IA32_FIXED_CTR0), 2 * n + 5 + 2 * n + 5);
    wrmsr(IA32_FIXED_CTR_CTRL, 0x2); /* USR only: ring-0 code does not count */
    pmu_loop(n);
    ASSERT_EQ(rdmsr(IA32_FIXED_CTR0), 4 * n + 10);
}

static void check_mid_block_reads(void)
{
    clear_counters();
    wrmsr(IA32_PERFEVTSEL0, 0x00C0 | EVT_OS | EVT_EN); /* INST_RETIRED.ANY_P */
    pmu_on = 1;
    pmu_mid();
    printf("RDPMC mid-block %lu, RDMSR mid-block %lu\n", rdpmc_mid, rdmsr_mid);
    ASSERT_EQ(rdpmc_mid, 7);
    ASSERT_EQ(rdmsr_mid, 12);
}

static void run_user(uint64_t n, uint64_t out[4])
{
    clear_counters();
    wrmsr(IA32_PERFEVTSEL0 + 0, 0x00C0 | EVT_USR | EVT_EN); /* instructions, user */
    wrmsr(IA32_PERFEVTSEL0 + 1, 0x00C0 | EVT_OS | EVT_EN);  /* instructions, kernel */
    wrmsr(IA32_PERFEVTSEL0 + 2, 0x00C4 | EVT_USR | EVT_EN); /* branches, user */
    wrmsr(IA32_PERFEVTSEL0 + 3, 0x40C4 | EVT_USR | EVT_EN); /* far branches, user */
    pmu_user_n = n;
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0xF);
    enter_user(pmu_user_fn, NULL);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    for (int i = 0; i < 4; i++)
        out[i] = rdmsr(IA32_PMC0 + i);
    printf("ring 3 loop of %lu: user %lu, kernel %lu instructions; user branches %lu, far %lu\n", n,
           out[0], out[1], out[2], out[3]);
}

static void check_usr_os(void)
{
    uint64_t a[4], b[4];
    run_user(10, a);
    run_user(1000, b);
    ASSERT_EQ(a[0], 2 * 10 + 11);
    ASSERT_EQ(b[0], 2 * 1000 + 11);
    ASSERT_EQ(a[2], 10 + 4);
    ASSERT_EQ(b[2], 1000 + 4);
    ASSERT_EQ(a[3], 3);
    ASSERT_EQ(b[3], 3);
    ASSERT(a[1] > 20);       /* the kernel's entry/exit and system-call paths ... */
    ASSERT_EQ(a[1], b[1]);   /* ... the same whatever the user loop did */
}

static void check_faults_rep_and_rdpmc_rules(void)
{
    /* A faulting instruction does not retire; its handler (ring 0) is not user time. */
    clear_counters();
    wrmsr(IA32_PERFEVTSEL0, 0x00C0 | EVT_USR | EVT_EN);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 1);
    uint64_t faults = last_fault.count;
    enter_user(pmu_user_fault, NULL);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    ASSERT_EQ(last_fault.count, faults + 1);
    ASSERT_EQ(last_fault.vector, 6);
    printf("ring 3 with a #UD: %lu user instructions\n", rdmsr(IA32_PMC0));
    ASSERT_EQ(rdmsr(IA32_PMC0), 4 + 3);

    /* REP STOSB of 100 bytes retires once. */
    clear_counters();
    wrmsr(IA32_PERFEVTSEL0, 0x00C0 | EVT_OS | EVT_EN);
    pmu_on = 1;
    pmu_rep();
    printf("REP STOSB x 100 block: %lu instructions\n", rdmsr(IA32_PMC0));
    ASSERT_EQ(rdmsr(IA32_PMC0), 8);
    ASSERT_EQ(rep_buf[99], 0);

    /* RDPMC: a counter that does not exist #GPs (QEMU raises #UD, re-delivered as #GP(0)). */
    faults = last_fault.count;
    ASSERT_EQ(pmu_rdpmc_k(4), (uint64_t)-1);
    ASSERT_EQ(last_fault.count, faults + 1);
    ASSERT_EQ(last_fault.vector, 13);
    ASSERT_EQ(last_fault.error_code, 0);
    ASSERT_EQ(pmu_rdpmc_k(0x40000003), (uint64_t)-1);
    ASSERT_EQ(last_fault.vector, 13);
    wrmsr(IA32_FIXED_CTR0 + 2, 0x123456789ull);
    ASSERT_EQ(pmu_rdpmc_k(0x40000002), 0x123456789ull);
    ASSERT_EQ(pmu_rdpmc_k(0xC0000002), 0x23456789ull); /* fast read: low 32 bits */
    /* RDPMC changes no flag, and its completion (QEMU's #UD undone) leaves none behind: PUSHF
     * after the code cleared CF, PF, ZF and DF shows them clear. (Written back as the #UD frame
     * held them, they stayed in every later RFLAGS image: in the Linux guest an NMI after the
     * handler's RDPMC returned to user code with ZF = 1, README "Core 2 profile".) */
    pmu_rdpmc_flags_k();
    printf("RFLAGS after RDPMC %lx, after clearing the status flags and DF %lx\n", rdpmc_flags_after, rdpmc_flags_later);
    ASSERT_EQ(rdpmc_flags_after & 0xCD5, 0x445);
    ASSERT_EQ(rdpmc_flags_later & 0xCD5, 0);
    /* Ring 3: CR4.PCE = 1 allows it, CR4.PCE = 0 is #GP(0). */
    clear_counters();
    wrmsr(IA32_PERFEVTSEL0, 0x00C0 | EVT_USR | EVT_EN);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 1);
    write_cr4(read_cr4() | (1u << 8));
    uint64_t v = enter_user(pmu_user_rdpmc, NULL);
    printf("ring 3 RDPMC with CR4.PCE = 1: %lu\n", v);
    ASSERT_EQ(v, 1);
    write_cr4(read_cr4() & ~(1ull << 8));
    faults = last_fault.count;
    v = enter_user(pmu_user_rdpmc, NULL);
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    ASSERT_EQ(v, (uint64_t)-1);
    ASSERT_EQ(last_fault.count, faults + 1);
    ASSERT_EQ(last_fault.vector, 13);
    ASSERT_EQ(last_fault.rip, (uint64_t)user_ptr((void *)pmu_user_rdpmc) + 2);
}

static void check_cycles(void)
{
    /* CPU_CLK_UNHALTED.THREAD and REF_TSC from the emulated clock (the guest TSC): the model's
     * core clock runs at the TSC rate, so both count the same; ring-0 code gives a USR-only
     * counter nothing. */
    clear_counters();
    wrmsr(IA32_FIXED_CTR_CTRL, 0x110);                      /* fixed 1 and 2, OS */
    wrmsr(IA32_PERFEVTSEL0, 0x003C | EVT_USR | EVT_EN);     /* core cycles, USR */
    uint64_t t0 = rdtsc();
    pmu_on = 0x600000001ull;
    pmu_loop(100000);
    uint64_t t1 = rdtsc();
    uint64_t core = rdmsr(IA32_FIXED_CTR0 + 1), ref = rdmsr(IA32_FIXED_CTR0 + 2);
    printf("cycles: core %lu, ref %lu, TSC delta %lu, USR %lu\n", core, ref, t1 - t0, rdmsr(IA32_PMC0));
    ASSERT(core > 0);
    ASSERT_EQ(core, ref);
    ASSERT(core <= t1 - t0);
    ASSERT_EQ(rdmsr(IA32_PMC0), 0);
}

static volatile uint64_t pmi_count, pmi_rip, pmi_status, pmi_ctr, pmi_lvt;

static void pmi_handler(struct trap_frame *f)
{
    pmi_count++;
    pmi_rip = f->rip;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    pmi_ctr = rdmsr(IA32_PMC0);
    pmi_lvt = lapic_read(LAPIC_LVT_PERF);
    /* Frozen: the handler's own instructions are not counted until CTR_Frz is cleared. */
    ASSERT_EQ(rdmsr(IA32_PMC0), pmi_ctr);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, pmi_status);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    lapic_eoi();
}

static void check_overflow(uint64_t before_overflow, uint64_t expect_ctr)
{
    clear_counters();
    wrmsr(IA32_DEBUGCTL, 1ull << 12); /* FREEZE_PERFMON_ON_PMI */
    wrmsr(IA32_A_PMC0, (1ull << 48) - before_overflow);
    wrmsr(IA32_PERFEVTSEL0, 0x00C0 | EVT_OS | EVT_EN | EVT_INT);
    pmi_count = 0;
    pmu_on = 1;
    irq_enable();
    pmu_ovf();
    irq_disable();
    wrmsr(IA32_DEBUGCTL, 0);
    printf("overflow after %lu: %lu PMI at %lx (after the block: %lx), status %lx, counter %lu\n",
           before_overflow, pmi_count, pmi_rip, (uint64_t)pmu_ovf_after, pmi_status, pmi_ctr);
    ASSERT_EQ(pmi_count, 1);
    ASSERT_EQ(pmi_rip, (uint64_t)pmu_ovf_after);
    ASSERT_EQ(pmi_status, 1 | CTR_FRZ);
    ASSERT_EQ(pmi_ctr, expect_ctr);
    ASSERT(pmi_lvt & (1u << 16)); /* LVTPC masked by the delivery */
    /* Unfrozen by the handler: counting went on (the handler's and the disabling path's). */
    ASSERT(rdmsr(IA32_PMC0) > expect_ctr);
}

void test_main(void)
{
    irq_disable();
    lapic_enable();
    set_handler(PMI_VECTOR, pmi_handler);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    check_enumeration_and_msr_rules();
    check_loop_counts(1);
    check_loop_counts(1000);
    check_mid_block_reads();
    check_usr_os();
    check_faults_rep_and_rdpmc_rules();
    check_cycles();
    /* Counted in pmu_ovf: wrmsr, jmp, then the block nop; nop; nop; jmp. Overflowing at that
     * block's last instruction: the PMI is taken right after it, the counter frozen at 0. */
    check_overflow(6, 0);
    /* Overflowing at its second nop: the PMI is taken at the end of the block (QEMU takes
     * interrupts between translation blocks), the counter frozen there: 2 past the overflow. */
    check_overflow(4, 2);
}
