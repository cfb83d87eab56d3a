// pttrace-options: profile=sapphirerapids
// qemu-options: -icount shift=0,sleep=off
/* Timed Arch LBRs exactly (CPUID.1CH:ECX[1]; IA32_LBR_x_INFO[15:0] CYC_CNT, [60] CYC_CNT_VALID).
 * Under -icount shift=0 the emulated core clock counts one per instruction (README "LBR cycle
 * counts"): a record's count is the number of instructions since the previous update of the
 * records. The first record after an IA32_LBR_DEPTH write has none (VALID = 0); in call-stack
 * mode a RET's pop is an update the next record counts from. */
#include "guest.h"

#define VALID (1ull << 60)
#define BR(t) ((uint64_t)(t) << 56)
enum { COND = 0, REL_JMP = 2, REL_CALL = 4 };
#define CTL_EN_OS      3u
#define CTL_CALL_STACK 8u
#define T_ALL      (0x7Fu << 16)
#define T_REL_JMP  (1u << 17)
#define T_REL_CALL (1u << 19)
#define T_RET      (1u << 21)

extern void ty_run(uint64_t ctl), tk_run(uint64_t ctl);
extern char ty_j1[], ty_j2[], ty_jnz[], ty_j3[], tk_j1[], tk_j2[];

/* ty_run(ctl): IA32_LBR_CTL = ctl; jmp; 3 nops + jmp; mov + 3 iterations of dec, jnz (2 taken);
 * jmp; IA32_LBR_CTL = 0.
 * tk_run(ctl): IA32_LBR_CTL = ctl; jmp; call f (f: 2 nops, ret); nop, call g (g: nop, ret); jmp;
 * IA32_LBR_CTL = 0. */
asm(".text\n"
    ".globl ty_run, ty_j1, ty_j2, ty_jnz, ty_j3, tk_run, tk_j1, tk_j2\n"
    "ty_run:\n"
    "  mov $0x14ce, %ecx\n"
    "  mov %edi, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "ty_j1: jmp ty_t1\n"
    "ty_t1: nop\n nop\n nop\n"
    "ty_j2: jmp ty_t2\n"
    "ty_t2: mov $3, %ecx\n"
    "ty_loop: dec %ecx\n"
    "ty_jnz: jnz ty_loop\n"
    "ty_j3: jmp ty_t3\n"
    "ty_t3: mov $0x14ce, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "tk_run:\n"
    "  mov $0x14ce, %ecx\n"
    "  mov %edi, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "tk_j1: jmp tk_t1\n"
    "tk_t1: call tk_f\n"
    "  nop\n"
    "  call tk_g\n"
    "tk_j2: jmp tk_t2\n"
    "tk_t2: mov $0x14ce, %ecx\n"
    "  xor %eax, %eax\n"
    "  xor %edx, %edx\n"
    "  wrmsr\n"
    "  ret\n"
    "tk_f: nop\n nop\n ret\n"
    "tk_g: nop\n ret\n");

static void expect(uint32_t x, const void *from, uint64_t info)
{
    uint64_t f = rdmsr(IA32_LBR_FROM + x), inf = rdmsr(IA32_LBR_INFO + x);
    printf("LBR_%u from %lx info %lx (valid %lu, cycles %lu)\n", x, f, inf, (inf >> 60) & 1, inf & 0xFFFF);
    ASSERT_EQ(f, (uint64_t)from);
    ASSERT_EQ(inf, info);
}

void test_main(void)
{
    irq_disable();
    uint32_t r[4];
    cpuid(0x1C, 0, r);
    ASSERT(r[2] & 2);                              /* timed LBRs */
    wrmsr(IA32_LBR_DEPTH, 32);
    ty_run(CTL_EN_OS | T_ALL);
    expect(0, ty_j3, VALID | BR(REL_JMP) | 3);     /* dec, jnz (not taken), jmp */
    expect(1, ty_jnz, VALID | BR(COND) | 2);       /* dec, jnz */
    expect(2, ty_jnz, VALID | BR(COND) | 3);       /* mov, dec, jnz */
    expect(3, ty_j2, VALID | BR(REL_JMP) | 4);     /* 3 nops + jmp */
    expect(4, ty_j1, BR(REL_JMP));                 /* first after the depth write: no count */
    expect(5, 0, 0);

    /* Call-stack mode: each RET pops its CALL; the pop is an update of the records. The final
     * jmp counts 1 (itself, since g's RET popped), not 3 (since the CALL of g). */
    wrmsr(IA32_LBR_DEPTH, 32);
    tk_run(CTL_EN_OS | CTL_CALL_STACK | T_REL_JMP | T_REL_CALL | T_RET);
    expect(0, tk_j2, VALID | BR(REL_JMP) | 1);
    expect(1, tk_j1, BR(REL_JMP));
    expect(2, 0, 0);
}
