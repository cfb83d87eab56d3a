/* A trip between 64-bit mode and compatibility mode (IA32_EFER.LMA = 1, CS.L = 0, CS.D = 1)
 * under the 64-bit kernel, for the BTS and RTIT compatibility-mode tests (issue 12):
 *   64: iretq to SEL32:c32                 far transfer 64 -> compat
 *   c32: inc ecx; call f32 (near, 32-bit)  loop: dec/jnz three times; jmp over a byte
 *        ljmp SEL32:c32b                   far JMP compat -> compat
 *   c32b: lret                             far RET compat -> 64 (to back64)
 *   64: lcall to SEL32:c32c                far CALL 64 -> compat
 *   c32c: call f32; iretl to 08H:done64    IRET compat -> 64
 * SEL32 = 7F0H: code, DPL 0, base 0, 4 GiB, L = 0, D = 1, in a copy of the kernel's GDT
 * (compat_gdt_enter / compat_gdt_leave). The 32-bit code lies in [compat32_start, compat32_end). */
#ifndef GUEST_COMPAT_TRIP_H
#define GUEST_COMPAT_TRIP_H
#include "guest.h"

#define SEL32 0x7F0
#define GDT_ENTRIES 256

extern uint64_t gdt[];
extern char gdt_ptr[];
uint64_t my_gdt[GDT_ENTRIES] __attribute__((aligned(16)));

asm(".pushsection .rodata\n\t"
    ".balign 8\n"
    "compat_trip_far_ptr:\n\t"
    ".long c32c\n\t"
    ".word 0x7F0\n\t"
    ".popsection\n\t"
    ".text\n\t"
    ".code64\n\t"
    ".globl compat_trip_run\n"
    "compat_trip_run:\n\t"
    "push %rbx\n\t"
    "xor %ecx, %ecx\n\t"
    "lea back64(%rip), %rax\n\t"          /* the 32-bit far return frame c32b's LRET pops: */
    "mov $0x08, %edx\n\t"                 /* EIP = back64 at [esp], CS = 08H at [esp + 4] */
    "shl $32, %rdx\n\t"
    "or %rdx, %rax\n\t"
    "push %rax\n\t"
    "mov %rsp, %rax\n\t"
    "push $0x10\n\t"
    "push %rax\n\t"
    "pushfq\n\t"
    "push $0x7F0\n\t"
    "push $c32\n\t"
    "iretq\n"                              /* 64 -> compat */
    "back64:\n\t"
    "lcall *compat_trip_far_ptr(%rip)\n"    /* 64 -> compat */
    "done64:\n\t"
    "mov %ecx, %eax\n\t"
    "pop %rbx\n\t"
    "ret\n\t"
    ".code32\n\t"
    ".globl compat32_start, compat32_end, c32, c32b, c32c, f32\n"
    "compat32_start:\n"
    "c32:\n\t"
    "inc %ecx\n\t"
    "call f32\n\t"
    "mov $3, %ebx\n"
    "1:\n\t"
    "inc %ecx\n\t"
    "dec %ebx\n\t"
    "jnz 1b\n\t"
    "jmp 2f\n\t"
    ".byte 0xCC\n"
    "2:\n\t"
    "ljmp $0x7F0, $c32b\n"                 /* compat -> compat */
    "c32b:\n\t"
    "inc %ecx\n\t"
    "lret\n"                               /* compat -> 64 (08H:back64) */
    "c32c:\n\t"
    "call f32\n\t"
    "add $8, %esp\n\t"                     /* drop the far CALL's 32-bit frame (EIP, CS) */
    "pushfl\n\t"
    "pushl $0x08\n\t"
    "pushl $done64\n\t"
    "iretl\n"                              /* compat -> 64 */
    "f32:\n\t"
    "add $0x10, %ecx\n\t"
    "ret\n"
    "compat32_end:\n\t"
    ".code64\n");
uint32_t compat_trip_run(void);
/* ECX: c32 inc + f32 + 3 incs, c32b inc, c32c's f32: 1 + 0x10 + 3 + 1 + 0x10 */
#define TRIP_ECX (1 + 0x10 + 3 + 1 + 0x10)

struct __attribute__((packed)) gdtr { uint16_t limit; uint64_t base; };
static inline void load_gdt(const struct gdtr *g) { asm volatile("lgdt %0" : : "m"(*g) : "memory"); }

static struct gdtr compat_old_gdt;

/* Load a copy of the kernel's GDT with SEL32 added. */
static inline void compat_gdt_enter(void)
{
    memcpy(&compat_old_gdt, gdt_ptr, sizeof(compat_old_gdt));
    ASSERT((uint64_t)compat_old_gdt.limit + 1 <= SEL32);
    memcpy(my_gdt, gdt, (uint64_t)compat_old_gdt.limit + 1);
    my_gdt[SEL32 / 8] = 0x00CF9A000000FFFFull; /* G=1 D=1 L=0 P=1 DPL=0 code exec/read */
    struct gdtr mine = { sizeof(my_gdt) - 1, (uint64_t)my_gdt };
    load_gdt(&mine);
}

static inline void compat_gdt_leave(void) { load_gdt(&compat_old_gdt); }
#endif
