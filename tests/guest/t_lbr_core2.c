// pttrace-options: profile=core2
/* The 4-entry LBR stack of the Intel Core microarchitecture (profile=core2, Core 2 Duo E8400,
 * Penryn 06_17H; SDM Vol. 3B §18.5.1 "LBR Stack": MSR_LASTBRANCH_0..3_FROM_IP 40H-43H,
 * MSR_LASTBRANCH_0..3_TO_IP 60H-63H, TOS in bits 1:0 of MSR_LASTBRANCH_TOS 1C9H; no LBR_INFO, no
 * LBR_SELECT): enumeration (IA32_PERF_CAPABILITIES[5:0] = 1), #GP on the Skylake-class LBR MSRs
 * the part lacks (1C8H, 680H, 6C0H, DC0H) and on TOS values past 3, the read-back probe Linux
 * does under a hypervisor, the records of a hand-written sequence of 6 taken branches (only the
 * last 4 survive, youngest at TOS) started from every TOS value so that TOS wraps mod 4 at every
 * position, DEBUGCTL.LBR = 0 leaving the stack alone, and the legacy FREEZE_LBRS_ON_PMI of
 * perfmon version 2: the PMI of an overflowing counter clears DEBUGCTL.LBR, the youngest record
 * at the PMI is a branch of the loop that overflowed (not the PMI's delivery), the stack stays
 * frozen until software sets DEBUGCTL.LBR again. Ground truth: the addresses of the branch
 * instructions and their targets, from the labels below. */
#include "guest.h"
#include "work.h"

#define DEPTH 4
#define DEBUGCTL_LBR (1u << 0)
#define FREEZE_LBRS_ON_PMI (1u << 11)
#define PMI_VECTOR 0xF0

extern void c2_run(void);
extern char c2_jmp[], c2_l1[], c2_call[], c2_f[], c2_ret[], c2_after_call[], c2_jz[], c2_l3[], c2_loop[], c2_jnz[];

/* c2_run: DEBUGCTL.LBR = 1; jmp; call + ret; a taken jz; a 3-iteration loop (2 taken jnz);
 * DEBUGCTL.LBR = 0. Six taken branches, of which the stack keeps the last four. */
asm(".text\n"
    ".globl c2_run, c2_jmp, c2_l1, c2_call, c2_f, c2_ret, c2_after_call, c2_jz, c2_l3, c2_loop, c2_jnz\n"
    "c2_run:\n"
    "  mov $0x1d9, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "c2_jmp: jmp c2_l1\n"
    "  nop\n"
    "c2_l1: nop\n"
    "c2_call: call c2_f\n"
    "c2_after_call: xor %eax, %eax\n"
    "c2_jz: jz c2_l3\n"
    "  nop\n"
    "c2_l3: mov $3, %ecx\n"
    "c2_loop: dec %ecx\n"
    "c2_jnz: jnz c2_loop\n"
    "  mov $0x1d9, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "c2_f: nop\n"
    "c2_ret: ret\n");

struct rec { uint64_t from, to; };

/* The record k back from TOS (k = 0: the youngest). */
static struct rec youngest(int k)
{
    uint32_t i = (uint32_t)((rdmsr(MSR_LBR_TOS) + DEPTH - k) % DEPTH);
    return (struct rec){ rdmsr(MSR_CORE_LBR_FROM + i), rdmsr(MSR_CORE_LBR_TO + i) };
}

static void expect(int k, void *from, void *to)
{
    struct rec r = youngest(k);
    printf("LBR[-%d] %lx -> %lx\n", k, r.from, r.to);
    ASSERT_EQ(r.from, (uint64_t)from);
    ASSERT_EQ(r.to, (uint64_t)to);
}

static volatile uint64_t pmis, pmi_debugctl, pmi_tos;
static volatile struct rec pmi_rec;

static void pmi_handler(struct trap_frame *f)
{
    (void)f;
    pmis++;
    pmi_debugctl = rdmsr(IA32_DEBUGCTL);
    pmi_tos = rdmsr(MSR_LBR_TOS);
    struct rec r = youngest(0);
    pmi_rec.from = r.from;
    pmi_rec.to = r.to;
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    /* IA32_PERF_GLOBAL_OVF_CTRL (version 2); DEBUGCTL.LBR stays 0: the LBRs stay frozen. */
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    lapic_eoi();
}

void test_main(void)
{
    irq_disable();
    uint32_t r[4];
    uint64_t v;
    cpuid(1, 0, r);
    ASSERT_EQ(r[0] & 0x0FFF3FFF, 0x0001067A); /* Penryn 06_17H */
    ASSERT(r[2] & (1u << 15));                /* PDCM */
    uint64_t cap = rdmsr(IA32_PERF_CAPABILITIES);
    printf("PERF_CAPABILITIES %lx\n", cap);
    ASSERT_EQ(cap & 0x3F, 1);                 /* LBR format 1: 64-bit linear addresses */

    /* The Skylake-class LBR MSRs do not exist on this part; TOS holds 0 to 3. */
    static const uint32_t absent[] = { MSR_LBR_SELECT, MSR_LBR_FROM, MSR_LBR_FROM + 3, MSR_LBR_TO, MSR_LBR_TO + 31,
                                       MSR_LBR_INFO, MSR_LBR_INFO + 3 };
    for (unsigned i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        ASSERT(rdmsr_safe(absent[i], &v));
        ASSERT(wrmsr_safe(absent[i], 0));
    }
    ASSERT(wrmsr_safe(MSR_LBR_TOS, 4));
    ASSERT(wrmsr_safe(MSR_CORE_LBR_FROM, 0x0000800000000000ull)); /* not canonical */
    /* Linux's check_msr under the hypervisor bit: write value ^ mask, read back, restore (TOS
     * with mask 3, each FROM/TO with FFFFH); it turns the LBRs off unless all read back. */
    ASSERT(!rdmsr_safe(MSR_LBR_TOS, &v));
    wrmsr(MSR_LBR_TOS, v ^ 3);
    ASSERT_EQ(rdmsr(MSR_LBR_TOS), v ^ 3);
    wrmsr(MSR_LBR_TOS, v);
    for (int i = 0; i < DEPTH; i++) {
        uint32_t msrs[2] = { MSR_CORE_LBR_FROM + i, MSR_CORE_LBR_TO + i };
        for (int j = 0; j < 2; j++) {
            uint64_t old = rdmsr(msrs[j]);
            wrmsr(msrs[j], old ^ 0xFFFF);
            ASSERT_EQ(rdmsr(msrs[j]), old ^ 0xFFFF);
            wrmsr(msrs[j], old);
        }
    }

    /* Six taken branches from every TOS: the last four, youngest at (start + 6) mod 4. */
    for (uint64_t start = 0; start < DEPTH; start++) {
        wrmsr(MSR_LBR_TOS, start);
        c2_run();
        printf("TOS %lu -> %lu\n", start, rdmsr(MSR_LBR_TOS));
        ASSERT_EQ(rdmsr(MSR_LBR_TOS), (start + 6) % DEPTH);
        expect(0, c2_jnz, c2_loop);
        expect(1, c2_jnz, c2_loop);
        expect(2, c2_jz, c2_l3);
        expect(3, c2_ret, c2_after_call);
        ASSERT_EQ(rdmsr(IA32_DEBUGCTL) & DEBUGCTL_LBR, 0);
    }

    /* DEBUGCTL.LBR = 0: branches leave the stack alone. */
    uint64_t before[2 * DEPTH + 1];
    for (int i = 0; i < DEPTH; i++) {
        before[2 * i] = rdmsr(MSR_CORE_LBR_FROM + i);
        before[2 * i + 1] = rdmsr(MSR_CORE_LBR_TO + i);
    }
    before[2 * DEPTH] = rdmsr(MSR_LBR_TOS);
    volatile uint64_t sink = branchy(100);
    for (int i = 0; i < DEPTH; i++) {
        ASSERT_EQ(rdmsr(MSR_CORE_LBR_FROM + i), before[2 * i]);
        ASSERT_EQ(rdmsr(MSR_CORE_LBR_TO + i), before[2 * i + 1]);
    }
    ASSERT_EQ(rdmsr(MSR_LBR_TOS), before[2 * DEPTH]);

    /* Legacy FREEZE_LBRS_ON_PMI (perfmon version 2): PMC0 counts instructions with INT and
     * overflows inside branchy's loop; the PMI clears DEBUGCTL.LBR. */
    lapic_enable();
    set_handler(PMI_VECTOR, pmi_handler);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    wrmsr(IA32_PMC0, 0xFFFFFE0Cu); /* legacy write: -500, sign-extended to 40 bits */
    wrmsr(IA32_PERFEVTSEL0, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22)); /* instructions, OS, INT, EN */
    wrmsr(IA32_DEBUGCTL, DEBUGCTL_LBR | FREEZE_LBRS_ON_PMI);
    irq_enable();
    wrmsr(IA32_PERF_GLOBAL_CTRL, 1);
    sink = branchy(1000); /* ~5000 instructions: overflows early */
    irq_disable();
    uint64_t tos_after = rdmsr(MSR_LBR_TOS);
    printf("LBR freeze: %lu PMI, DEBUGCTL at the PMI %lx, TOS at the PMI %lu, after %lu, youngest %lx -> %lx (branchy at %lx)\n",
           pmis, pmi_debugctl, pmi_tos, tos_after, pmi_rec.from, pmi_rec.to, (uint64_t)branchy);
    ASSERT_EQ(pmis, 1);
    ASSERT_EQ(pmi_debugctl, FREEZE_LBRS_ON_PMI); /* LBR cleared by the PMI, FREEZE kept */
    /* Frozen at the PMI request: the youngest record is a branch of the loop, not the PMI's
     * delivery into the handler, nor the handler's own branches. */
    ASSERT(pmi_rec.from >= (uint64_t)branchy && pmi_rec.from < (uint64_t)branchy + 0x100);
    ASSERT(pmi_rec.to >= (uint64_t)branchy && pmi_rec.to < (uint64_t)branchy + 0x100);
    ASSERT_EQ(tos_after, pmi_tos); /* frozen through the rest of the loop */
    ASSERT_EQ(rdmsr(IA32_DEBUGCTL), FREEZE_LBRS_ON_PMI);
    /* Software sets DEBUGCTL.LBR again (as Linux does at the end of a PMI below version 4). */
    wrmsr(IA32_DEBUGCTL, DEBUGCTL_LBR);
    sink = branchy(10);
    wrmsr(IA32_DEBUGCTL, 0);
    (void)sink;
    ASSERT(rdmsr(MSR_LBR_TOS) != tos_after); /* recording again */
    struct rec y = youngest(0);
    ASSERT(y.from >= (uint64_t)branchy && y.from < (uint64_t)branchy + 0x100);
}
