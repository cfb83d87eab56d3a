/* Issue 12: Intel PT in compatibility mode (IA32_EFER.LMA = 1, CS.L = 0, CS.D = 1) under the
 * 64-bit kernel, entered and left by IRETQ/IRET, far CALL/RET and far JMP, and a GDT entry
 * rewritten in memory without reloading CS (t_pt_modes covers far CALL/JMP/RET between 64-, 32-
 * and 16-bit code). One traced window (single range, OS = BranchEn = 1), paused and resumed in
 * compatibility mode after SEL32's descriptor was rewritten to L = 1: the descriptor cache keeps
 * CS.L = 0 (SDM Vol. 3A §3.4.3), so the resume's PSB+ must carry MODE.Exec 32-bit, and the code
 * must decode as 32-bit code until CS is reloaded.
 *
 * The trip (compat_trip, assembly; SEL32 = 7F0H: code, DPL 0, base 0, 4 GiB, L = 0, D = 1):
 *   64: iretq to SEL32:c32                  MODE.Exec 32, TIP(c32)     (IRET 64 -> compat)
 *   c32: inc ecx; call f32                  41 would be a REX prefix in 64-bit code: 32-bit proven
 *        GDT[SEL32] := L = 1, D = 0 in memory, CS not reloaded
 *        pt_pause_wrmsr / pt_resume_wrmsr   blocks alike in 32- and 64-bit code: PSB+ MODE.Exec 32
 *        inc ecx; call f32                  still 32-bit code
 *        ljmp $SEL32, $x64                  MODE.Exec 64, TIP(x64)     (CS reloaded: now 64-bit)
 *   x64: GDT[SEL32] := L = 0, D = 1 again (CS keeps L = 1); lretq to 08H (64 -> 64: TIP only);
 *        call *%r8 (41 FF D0)
 *        lcall *m16:32 to SEL32:c32b       MODE.Exec 32, TIP(c32b)    (far CALL 64 -> compat)
 *   c32b: inc ecx; call f32; lret           MODE.Exec 64, TIP          (far RET compat -> 64)
 *   64: iretq to SEL32:c32c                 MODE.Exec 32, TIP(c32c)
 *   c32c: inc ecx; call f32; iretl to 08H   MODE.Exec 64, TIP          (IRET compat -> 64)
 * The host checks the bytes in memory against the plugin's copy, libipt's flow against the ground
 * truth (without the pause) and the MODE.Exec payloads in order. */
// host-check: modes 64 32 32 64 32 64 32 64
#include "pt.h"

#define SEL32 0x7F0
#define GDT_ENTRIES 256
#define BUF_SIZE 65536

extern uint64_t gdt[];
extern char gdt_ptr[];
uint64_t my_gdt[GDT_ENTRIES] __attribute__((aligned(16)));
uint32_t trip_ctl_off, trip_ctl_on;
uint64_t trip_rsp, trip_rsp_end;

/* uint32_t compat_trip(void): returns ECX (each inc adds 1, each f32 call adds 0x10). */
asm(".pushsection .rodata\n\t"
    ".balign 8\n"
    "compat_far_ptr:\n\t"
    ".long c32b\n\t"
    ".word 0x7F0\n\t"
    ".popsection\n\t"
    ".text\n\t"
    ".code64\n\t"
    ".globl compat_trip, x64, back64a, back64b, fn64\n"
    "compat_trip:\n\t"
    "push %rbx\n\t"
    "push %rbp\n\t"
    "push %r12\n\t"
    "push %r13\n\t"
    "push %r14\n\t"
    "push %r15\n\t"
    "xor %ecx, %ecx\n\t"
    "mov %rsp, trip_rsp(%rip)\n\t"
    "mov %rsp, %rax\n\t"
    "push $0x10\n\t"
    "push %rax\n\t"
    "pushfq\n\t"
    "push $0x7F0\n\t"
    "push $c32\n\t"
    "iretq\n"                              /* C1: IRET 64 -> compatibility mode */
    "x64:\n\t"
    "movb $0xCF, my_gdt + 0x7F0 + 6\n\t"   /* GDT[SEL32]: L = 0, D = 1 again (CS is 64-bit) */
    "push $0x08\n\t"                      /* CS is still SEL32 (64-bit since the reload): */
    "lea x64k(%rip), %rax\n\t"            /* back to the kernel's CS before SEL32's descriptor */
    "push %rax\n\t"                       /* is used again (far RET 64 -> 64: no MODE.Exec) */
    "lretq\n"
    "x64k:\n\t"
    "lea fn64(%rip), %r8\n\t"
    "call *%r8\n\t"                        /* 41 FF D0 */
    "lcall *compat_far_ptr(%rip)\n"        /* C3: far CALL 64 -> compat */
    "back64a:\n\t"
    "mov %rsp, %rax\n\t"
    "push $0x10\n\t"
    "push %rax\n\t"
    "pushfq\n\t"
    "push $0x7F0\n\t"
    "push $c32c\n\t"
    "iretq\n"                              /* C5: IRET 64 -> compat */
    "back64b:\n\t"
    "mov %rsp, trip_rsp_end(%rip)\n\t"

    "mov %ecx, %eax\n\t"
    "pop %r15\n\t"
    "pop %r14\n\t"
    "pop %r13\n\t"
    "pop %r12\n\t"
    "pop %rbp\n\t"
    "pop %rbx\n\t"
    "ret\n"
    "fn64:\n\t"
    "add $0x100, %ecx\n\t"
    "ret\n\t"
    ".code32\n\t"
    ".globl c32, c32b, c32c, f32, compat_ljmp, compat_lret, compat_iretl, compat_call_after_resume\n"
    "c32:\n\t"
    "inc %ecx\n\t"
    "call f32\n\t"
    "movb $0xAF, my_gdt + 0x7F0 + 6\n\t"   /* GDT[SEL32]: L = 1, D = 0 in memory; CS not reloaded */
    "mov %ecx, %ebx\n\t"
    "mov $0x570, %ecx\n\t"
    "xor %edx, %edx\n\t"
    "mov trip_ctl_off, %eax\n\t"
    "mov trip_ctl_on, %esi\n\t"
    "jmp 1f\n"
    "1:\n"
    ".globl pt_pause_wrmsr, pt_resume_wrmsr\n"
    "pt_pause_wrmsr: wrmsr\n\t"
    "mov %esi, %eax\n"
    "pt_resume_wrmsr: wrmsr\n\t"
    "mov %ebx, %ecx\n"
    "compat_call_after_resume:\n\t"
    "inc %ecx\n\t"
    "call f32\n"
    "compat_ljmp: ljmp $0x7F0, $x64\n"     /* C2: CS reloaded, GDT[SEL32] says 64-bit now */
    "c32b:\n\t"
    "inc %ecx\n\t"
    "call f32\n"
    "compat_lret: lret\n"                  /* C4: far RET compat -> 64 */
    "c32c:\n\t"
    "inc %ecx\n\t"
    "call f32\n\t"
    "pushfl\n\t"
    "pushl $0x08\n\t"
    "pushl $back64b\n"
    "compat_iretl: iretl\n"                /* C6: IRET compat -> 64 (same CPL: no SS:ESP) */
    "f32:\n\t"
    "add $0x10, %ecx\n\t"
    "ret\n\t"
    ".code64\n");
uint32_t compat_trip(void);
#define TRIP_ECX (4 * 1 + 4 * 0x10 + 0x100)

struct __attribute__((packed)) gdtr { uint16_t limit; uint64_t base; };
static void load_gdt(const struct gdtr *g) { asm volatile("lgdt %0" : : "m"(*g) : "memory"); }
static volatile uint32_t trip_result;

void test_main(void)
{
    struct gdtr old;
    memcpy(&old, gdt_ptr, sizeof(old));
    ASSERT_EQ(old.base, (uint64_t)gdt);
    ASSERT((uint64_t)old.limit + 1 <= SEL32);
    memcpy(my_gdt, gdt, (uint64_t)old.limit + 1);
    my_gdt[SEL32 / 8] = 0x00CF9A000000FFFFull; /* G=1 D=1 L=0 P=1 DPL=0 code exec/read */
    struct gdtr mine = { sizeof(my_gdt) - 1, (uint64_t)my_gdt };
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
    trip_ctl_off = (uint32_t)ctl;
    trip_ctl_on = (uint32_t)(ctl | RTIT_CTL_TRACEEN);

    uint8_t *buf = alloc_aligned(BUF_SIZE, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    load_gdt(&mine);
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)), "d"(0) : "memory");
    trip_result = compat_trip();
    ASSERT_EQ(trip_rsp_end, trip_rsp);
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"(0) : "memory");
    load_gdt(&old);
    ASSERT_EQ(read_cs(), KERNEL_CS);
    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), st = rdmsr(IA32_RTIT_STATUS);
    uint64_t len = mp >> 32;
    printf("compat trip: ecx %x (expected %x), %lu bytes, STATUS %lx\n", trip_result, TRIP_ECX, len, st);
    ASSERT_EQ(trip_result, TRIP_ECX);
    ASSERT_EQ(my_gdt[SEL32 / 8], 0x00CF9A000000FFFFull);
    ASSERT(len > 16 && len < BUF_SIZE / 2);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT(pt_has_psb(buf));
    pt_dump(buf, len);
}
