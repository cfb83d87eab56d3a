// qemu-options: -icount shift=0,sleep=off
/* LBR_INFO[15:0] CYC_CNT exactly (Skylake-class LBRs, SDM Vol. 3B §18.13.1: "elapsed core clocks
 * since last update to the LBR stack"). Under -icount shift=0 the emulated core clock counts one
 * per instruction (README "LBR cycle counts"), so a record's count is the number of instructions
 * retired since the previous record: from the previous recorded branch (excluded) to this one
 * (included). Hand-written blocks of known lengths: the first record since RESET has no count (0);
 * a filtered branch (LBR_SELECT.JCC) is no update; the count saturates at FFFFH. */
#include "guest.h"

#define MISPRED (1ull << 63)

extern void cy_run(void);
extern void cs_run(uint64_t n);
extern char cy_j1[], cy_j2[], cy_j3[], cy_jnz[], cy_j4[], cs_j1[], cs_j2[];

/* cy_run: DEBUGCTL.LBR = 1; jmp; 3 nops + jmp; 7 nops + jmp; mov + a loop of 5 iterations of
 * nop, nop, dec, jnz (4 taken); jmp; DEBUGCTL.LBR = 0.
 * cs_run(n): DEBUGCTL.LBR = 1; jmp; mov + n iterations of dec, jnz; jmp; DEBUGCTL.LBR = 0. */
asm(".text\n"
    ".globl cy_run, cy_j1, cy_j2, cy_j3, cy_jnz, cy_j4, cs_run, cs_j1, cs_j2\n"
    "cy_run:\n"
    "  mov $0x1d9, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "cy_j1: jmp cy_t1\n"
    "cy_t1: nop\n nop\n nop\n"
    "cy_j2: jmp cy_t2\n"
    "cy_t2: nop\n nop\n nop\n nop\n nop\n nop\n nop\n"
    "cy_j3: jmp cy_t3\n"
    "cy_t3: mov $5, %ecx\n"
    "cy_loop: nop\n nop\n dec %ecx\n"
    "cy_jnz: jnz cy_loop\n"
    "cy_j4: jmp cy_t4\n"
    "cy_t4: mov $0x1d9, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "cs_run:\n"
    "  mov $0x1d9, %ecx\n"
    "  mov $1, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "cs_j1: jmp cs_t1\n"
    "cs_t1: mov %edi, %ecx\n"
    "cs_loop: dec %ecx\n"
    "  jnz cs_loop\n"
    "cs_j2: jmp cs_t2\n"
    "cs_t2: mov $0x1d9, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n");

/* The record k back from TOS: FROM, and LBR_INFO exactly. */
static void expect(int k, const void *from, uint64_t info)
{
    uint32_t i = (uint32_t)((rdmsr(MSR_LBR_TOS) + 32 - k) % 32);
    uint64_t f = rdmsr(MSR_LBR_FROM + i), inf = rdmsr(MSR_LBR_INFO + i);
    printf("LBR[-%d] from %lx info %lx (cycles %lu)\n", k, f, inf, inf & 0xFFFF);
    ASSERT_EQ(f, (uint64_t)from);
    ASSERT_EQ(inf, info);
}

void test_main(void)
{
    irq_disable();
    wrmsr(MSR_LBR_SELECT, 0);
    cy_run();
    expect(0, cy_j4, 5);                  /* the not-taken 5th iteration (4) + the jmp */
    expect(1, cy_jnz, 4);                 /* nop, nop, dec, jnz */
    expect(2, cy_jnz, 4);
    expect(3, cy_jnz, 4);
    expect(4, cy_jnz, 5);                 /* mov + the first iteration */
    expect(5, cy_j3, 8);                  /* 7 nops + jmp */
    expect(6, cy_j2, 4);                  /* 3 nops + jmp */
    expect(7, cy_j1, 0);                  /* the first record since RESET: no count */

    /* LBR_SELECT[2] JCC: the loop's jnz are not recorded and are no update of the stack. */
    wrmsr(MSR_LBR_SELECT, 1u << 2);
    cs_run(1000);
    expect(0, cs_j2, 2 * 1000 + 2);       /* mov, 1000 x (dec, jnz), jmp */
    /* cs_j1 counts from cy_run's last record: the printf and MSR reads in between (the exact
     * number depends on the compiled C code, deterministic but not asserted). */
    uint32_t i = (uint32_t)((rdmsr(MSR_LBR_TOS) + 31) % 32);
    ASSERT_EQ(rdmsr(MSR_LBR_FROM + i), (uint64_t)cs_j1);
    ASSERT(rdmsr(MSR_LBR_INFO + i) > 1000 && rdmsr(MSR_LBR_INFO + i) <= 0xFFFF);
    cs_run(32766);
    expect(0, cs_j2, 0xFFFE);             /* 65534 */
    cs_run(32767);
    expect(0, cs_j2, 0xFFFF);             /* 65536: saturated */
    cs_run(40000);
    expect(0, cs_j2, 0xFFFF);             /* 80002: saturated */
    wrmsr(MSR_LBR_SELECT, 0);
}
