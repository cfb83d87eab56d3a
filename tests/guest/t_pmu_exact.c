// qemu-accel: tcg,one-insn-per-tb=on
/* The overflow PMI at the exact instruction (issue 14, SDM Vol. 3B §20.2: a counter overflow with
 * IA32_PERFEVTSELx.INT raises the PMI through LVTPC). QEMU takes interrupts only between
 * translation blocks, so in a default run the PMI of an overflow in the middle of a block is
 * taken at the block's end (t_pmu_count's skid case). Run with -accel tcg,one-insn-per-tb=on
 * (the `qemu-accel` line above), every block is one instruction: an overflow at any instruction
 * of a straight line of 8 (after the enabling WRMSR and a JMP) must interrupt at the next
 * instruction, with the counter frozen at 0 (DEBUGCTL[12] FREEZE_PERFMON_ON_PMI). In a default
 * run this guest fails (the PMI is taken at exact_after). */
#include "guest.h"

#define EVT_OS  (1ull << 17)
#define EVT_INT (1ull << 20)
#define EVT_EN  (1ull << 22)
#define CTR_FRZ (1ull << 59)
#define PMI_VECTOR 0xF0

/* exact_line(): GLOBAL_CTRL = 1 (the WRMSR retires counted); jmp; then 8 instructions of one
 * block in a default run (nop, mov, add, nop, lea, xor, nop, jmp); exact_after: disable. */
extern void exact_line(void);
extern char exact_i1[], exact_i2[], exact_i3[], exact_i4[], exact_i5[], exact_i6[], exact_i7[], exact_i8[],
    exact_after[];
asm(".text\n"
    ".globl exact_line, exact_i1, exact_i2, exact_i3, exact_i4, exact_i5, exact_i6, exact_i7, exact_i8, exact_after\n"
    "exact_line:\n"
    "  mov $0x38f, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  jmp exact_i1\n"
    "exact_i1: nop\n"
    "exact_i2: mov $5, %r8d\n"
    "exact_i3: add $3, %r8d\n"
    "exact_i4: nop\n"
    "exact_i5: lea 1(%r8), %r9\n"
    "exact_i6: xor %r9d, %r8d\n"
    "exact_i7: nop\n"
    "exact_i8: jmp exact_after\n"
    "exact_after:\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  mov $0x38f, %ecx\n"
    "  wrmsr\n"
    "  ret\n");

static volatile uint64_t pmi_count, pmi_rip, pmi_status, pmi_ctr;

static void pmi_handler(struct trap_frame *f)
{
    pmi_count++;
    pmi_rip = f->rip;
    pmi_status = rdmsr(IA32_PERF_GLOBAL_STATUS);
    pmi_ctr = rdmsr(IA32_PMC0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, pmi_status);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    lapic_eoi();
}

void test_main(void)
{
    char *after[] = { exact_i2, exact_i3, exact_i4, exact_i5, exact_i6, exact_i7, exact_i8, exact_after };
    irq_disable();
    lapic_enable();
    set_handler(PMI_VECTOR, pmi_handler);
    lapic_write(LAPIC_LVT_PERF, PMI_VECTOR);
    for (int k = 1; k <= 8; k++) {
        /* Counted: the WRMSR, the JMP, then exact_i1..exact_ik: overflow at exact_ik. */
        wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
        wrmsr(IA32_PERFEVTSEL0, 0);
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
        wrmsr(IA32_DEBUGCTL, 1ull << 12); /* FREEZE_PERFMON_ON_PMI */
        wrmsr(IA32_A_PMC0, (1ull << 48) - (uint64_t)(2 + k));
        wrmsr(IA32_PERFEVTSEL0, 0x00C0 | EVT_OS | EVT_EN | EVT_INT);
        pmi_count = 0;
        irq_enable();
        exact_line();
        irq_disable();
        wrmsr(IA32_DEBUGCTL, 0);
        printf("overflow at instruction %d of the line: %lu PMI at %lx (next instruction %lx), status %lx, counter %lu\n",
               k, pmi_count, pmi_rip, (uint64_t)after[k - 1], pmi_status, pmi_ctr);
        ASSERT_EQ(pmi_count, 1);
        ASSERT_EQ(pmi_rip, (uint64_t)after[k - 1]);
        ASSERT_EQ(pmi_status, 1 | CTR_FRZ);
        ASSERT_EQ(pmi_ctr, 0);
    }
}
