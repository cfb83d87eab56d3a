/* Issue 12: code segments with a non-zero base, for the 32-bit multiboot guests
 * (t_m32_based_*.c), traced by Intel PT, BTS or Atom RTIT. The guest defines the four WRMSR
 * labels (BASED_W_START, BASED_W_PAUSE, BASED_W_RESUME, BASED_W_END) before including this file
 * and gives based_setup the MSR and value written at each.
 *
 * With CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0, Intel PT IP payloads are offsets from the CS base
 * (SDM Vol. 3C §33.3.1.1 "Packet Decoding of RIP versus LIP"); BTS records (seed 001 §6.6) and
 * RTIT payloads (seed 002) are linear addresses (CS base + offset). No code is copied: each
 * segment's base lies below the image, so a label's offset is its address minus the base.
 *
 * The guest's GDT: 08H flat 32-bit code, 10H flat data, 18H 32-bit code with base F0000H, 20H
 * 16-bit code with base based16_start (the start of its code, not page aligned). IDT vector 30H: 32-bit interrupt gate into 18H.
 * Parts 1 and 2 run the same code (based_part), first with paging off, then with paging on
 * (CR4.PSE, one 4-MiB identity page):
 *   P1  ljmp $0x18        flat -> 18H (base F0000H); call rel32, a loop,
 *       jmp *%eax         indirect JMP (TIP: its target's offset),
 *       int $0x30         INT n into 18H (FUP: the INT's offset, TIP: the handler's), iret back,
 *                         GDT[18H].Base[23:16] := 0 in memory WITHOUT reloading CS: the
 *                         descriptor cache keeps base F0000H (SDM Vol. 3A §3.4.3),
 *       jmp *%eax         the next TIP is still an offset from F0000H; the entry is restored,
 *   P2  lcall $0x20       far CALL 32 -> 16 (base based16_start): call rel16, jmp *%ax,
 *   P3  lretl             far RET 16 -> 32 into 18H, call rel32,
 *   P4  ljmp $0x08        back to flat code.
 * Part 3, real mode with a 32-bit CS still cached (SDM Vol. 3A §9.9.2; QEMU translates 32-bit
 * code with CR0.PE = 0 then):
 *   R1  ljmp $0x18        flat -> 18H; MOV CR0 clearing PE: real mode, CS = 18H, base F0000H
 *                         and D = 1 still cached; call rel32, jmp *%eax (TIP: offset from
 *                         F0000H, not from CS << 4 = 180H); the PAUSE and RESUME WRMSRs in
 *                         blocks that decode alike as 16- and 32-bit code (the resume's PSB+
 *                         must say 32-bit), call rel32, a loop,
 *   R2  ljmp $0x1000      real-mode far JMP (EA ptr16:32): CS base 10000H, still 32-bit code;
 *                         call rel32, jmp *%eax (TIP: offset from 10000H); MOV CR0 setting PE,
 *   R3  ljmp $0x08        back to flat code; the END WRMSR.
 * SS stays the flat data segment (B = 1): real-mode pushes use ESP; IF = 0 throughout. */
#ifndef GUEST_M32_BASED_H
#define GUEST_M32_BASED_H
#include "lib32/m32.h"

#define BASED_B32 0xF0000u   /* base of 18H */
#define BASED_BR  0x10000u   /* real-mode segment 1000H */

/* ECX[0..3], then EAX[0..3] of the WRMSRs at START, PAUSE, RESUME, END; EDX of all four. */
uint32_t based_regs[8];
uint32_t based_edx;
uint64_t based_gdt[5] __attribute__((aligned(8))) = {
    0,
    0x00CF9A000000FFFFull, /* 08H: code, 32-bit, base 0, 4 GiB */
    0x00CF92000000FFFFull, /* 10H: data, flat */
    0x00CF9A0F0000FFFFull, /* 18H: code, 32-bit, base F0000H, 4 GiB */
    0x00009A000000FFFFull, /* 20H: code, 16-bit, 64 KiB, base based16_start (based_setup) */
};
uint64_t based_idt[0x31] __attribute__((aligned(8)));
uint32_t based_pd[1024] __attribute__((aligned(4096)));
struct __attribute__((packed)) based_dtr { uint16_t limit; uint32_t base; };
struct based_dtr based_gdtr = { sizeof(based_gdt) - 1, 0 };
struct based_dtr based_idtr = { sizeof(based_idt) - 1, 0 };
uint32_t based_bx; /* what the trip's BX work leaves */

#define O32(l) "(" #l " - 0xF0000)"
/* INT 30H; a guest may replace it (the RTIT guest: PUSHFL + far CALL build the same frame for
 * the handler's IRET; the ground truth does not list an INT n as executed, RTIT's FUP.FAR(NLIP)
 * does, seed 002 Table 1). */
#ifndef BASED_INT
#define BASED_INT "int $0x30"
#endif
#define O16(l) "(" #l " - based16_start)"
#define OR(l)  "(" #l " - 0x10000)"

asm(".text\n\t"
    ".code32\n\t"
    ".globl based_trip, based_part, bp_ljmp1, bp_s32, bp_jmp32, bp_ind32, bp_int, bh32, bp_iret,\n\t"
    ".globl bp_after_int, bp_jmp32b, bp_ind32b, bp_lcall, bp_ret32, bp_ljmp2, bp_flat, bf32,\n\t"
    ".globl based16_start, based16_end, bp_s16, bp_jmp16, bp_ind16, bp_lret, bf16,\n\t"
    ".globl r_ljmp1, r32, r_jmp1, r32_ind, r_after_resume, r_ljmp2, rs32, r_jmp2, rs_ind,\n\t"
    ".globl r_ljmp3, r_back\n"
    "based_trip:\n\t"
    "push %ebp\n\t"
    "push %ebx\n\t"
    "push %esi\n\t"
    "push %edi\n\t"
    "xor %ebx, %ebx\n\t"
    "mov based_edx, %edx\n\t"
    "mov based_regs, %ecx\n\t"
    "mov based_regs+16, %eax\n\t"
    "jmp 1f\n"
    "1:\n"
    ".globl " BASED_W_START "\n" BASED_W_START ": wrmsr\n\t"
    /* ---- Part 1: paging off ---- */
    "call based_part\n\t"
    /* ---- Part 2: paging on (identity, one 4-MiB page; CR3 loaded by based_setup) ---- */
    "mov %cr0, %eax\n\t"
    "or $0x80000000, %eax\n\t"
    "mov %eax, %cr0\n\t"
    "call based_part\n\t"
    "mov %cr0, %eax\n\t"
    "and $0x7FFFFFFF, %eax\n\t"
    "mov %eax, %cr0\n"
    /* ---- Part 3: real mode with the 32-bit CS 18H (base F0000H) cached ---- */
    "r_ljmp1: ljmp $0x18, $" O32(r32) "\n"
    "r32:\n\t"
    "mov %cr0, %eax\n\t"
    "and $0xFFFFFFFE, %eax\n\t"
    "mov %eax, %cr0\n\t"                 /* PE = 0: real mode, CS.D = 1 and base cached */
    "call bf32\n\t"
    "mov $" O32(r32_ind) ", %eax\n"
    "r_jmp1: jmp *%eax\n"
    "r32_ind:\n\t"
    "mov $based_regs, %ebp\n\t"
    "mov 4(%ebp), %ecx\n\t"
    "mov 20(%ebp), %eax\n\t"
    "jmp 1f\n"
    "1:\n"                               /* blocks that decode alike as 16- and 32-bit code */
    ".globl " BASED_W_PAUSE "\n" BASED_W_PAUSE ": wrmsr\n\t"
    "mov 8(%ebp), %ecx\n\t"
    "mov 24(%ebp), %eax\n"
    ".globl " BASED_W_RESUME "\n" BASED_W_RESUME ": wrmsr\n"
    "r_after_resume: call bf32\n\t"
    "mov $2, %ecx\n"
    "1:\t"
    "dec %ecx\n\t"
    "jnz 1b\n"
    "r_ljmp2: ljmpl $0x1000, $" OR(rs32) "\n"  /* real-mode far JMP: base 10000H, D stays 1 */
    "rs32:\n\t"
    "call bf32\n\t"
    "mov $" OR(rs_ind) ", %eax\n"
    "r_jmp2: jmp *%eax\n"
    "rs_ind:\n\t"
    "mov %cr0, %eax\n\t"
    "or $1, %al\n\t"
    "mov %eax, %cr0\n"                   /* PE = 1, CS still 1000H (cached) */
    "r_ljmp3: ljmp $0x08, $r_back\n"
    "r_back:\n\t"
    "call bf32\n\t"
    "mov based_regs+12, %ecx\n\t"
    "mov based_regs+28, %eax\n\t"
    "mov based_edx, %edx\n\t"
    "jmp 1f\n"
    "1:\n"
    ".globl " BASED_W_END "\n" BASED_W_END ": wrmsr\n\t"
    "mov %ebx, based_bx\n\t"
    "pop %edi\n\t"
    "pop %esi\n\t"
    "pop %ebx\n\t"
    "pop %ebp\n\t"
    "ret\n"
    /* Parts 1 and 2 (called from flat code). */
    "based_part:\n"
    "bp_ljmp1: ljmp $0x18, $" O32(bp_s32) "\n"
    "bp_s32:\n\t"                        /* CS 18H, base F0000H */
    "call bf32\n\t"
    "mov $3, %ecx\n"
    "1:\t"
    "dec %ecx\n\t"
    "jnz 1b\n\t"
    "mov $" O32(bp_ind32) ", %eax\n"
    "bp_jmp32: jmp *%eax\n"
    "bp_ind32:\n"
    "bp_int: " BASED_INT "\n"
    "bp_after_int:\n\t"
    "movb $0, based_gdt + 0x18 + 4\n\t"  /* GDT[18H] base := 0 in memory; CS not reloaded */
    "mov $" O32(bp_ind32b) ", %eax\n"
    "bp_jmp32b: jmp *%eax\n"
    "bp_ind32b:\n\t"
    "movb $0x0F, based_gdt + 0x18 + 4\n"  /* restored */
    "bp_lcall: lcall $0x20, $" O16(bp_s16) "\n"
    "bp_ret32:\n\t"
    "call bf32\n"
    "bp_ljmp2: ljmp $0x08, $bp_flat\n"
    "bp_flat:\n\t"
    "ret\n"
    "bh32:\n\t"                          /* INT 30H handler, CS 18H */
    "add $7, %ebx\n"
    "bp_iret: iret\n"
    "bf32:\n\t"
    "add $5, %ebx\n\t"
    "ret\n\t"
    ".code16\n"
    "based16_start:\n"
    "bp_s16:\n\t"                        /* CS 20H, base based16_start, 16-bit */
    "call bf16\n\t"
    "mov $" O16(bp_ind16) ", %ax\n"
    "bp_jmp16: jmp *%ax\n"
    "bp_ind16:\n"
    "bp_lret: lretl\n"
    "bf16:\n\t"
    "add $3, %bx\n\t"
    "ret\n"
    "based16_end:\n\t"
    ".code32\n");

void based_trip(void);
extern char based_part[], bp_ljmp1[], bp_s32[], bp_jmp32[], bp_ind32[], bp_int[], bh32[], bp_iret[],
    bp_after_int[], bp_jmp32b[], bp_ind32b[], bp_lcall[], bp_ret32[], bp_ljmp2[], bp_flat[], bf32[],
    based16_start[], based16_end[], bp_s16[], bp_jmp16[], bp_ind16[], bp_lret[], bf16[], r_ljmp1[],
    r32[], r_jmp1[], r32_ind[], r_after_resume[], r_ljmp2[], rs32[], r_jmp2[], rs_ind[], r_ljmp3[],
    r_back[];

/* The GDT (20H's base: based16_start), the IDT (vector 30H: 32-bit interrupt gate 18H:bh32 - F0000H), CR3 and CR4.PSE for
 * Part 2's paging; the WRMSRs' registers. */
static inline void based_setup(const uint32_t msr[4], const uint32_t value[4], uint32_t edx)
{
    based_edx = edx;
    uint32_t b16 = (uint32_t)based16_start;
    based_gdt[4] |= ((uint64_t)(b16 & 0xFFFFFF) << 16) | ((uint64_t)(b16 >> 24) << 56);
    CHECK((uint32_t)based_pd + 4096 <= 0x400000 && (uint32_t)based_regs < 0x400000);
    uint32_t h = (uint32_t)bh32 - BASED_B32;
    based_idt[0x30] = (h & 0xFFFF) | (0x18ull << 16) | (0x8E00ull << 32) | ((uint64_t)(h >> 16) << 48);
    based_gdtr.base = (uint32_t)based_gdt;
    based_idtr.base = (uint32_t)based_idt;
    based_pd[0] = 0x83; /* present, writable, 4 MiB page at 0 */
    asm volatile("lgdt %0; lidt %1; ljmp $0x08, $1f; 1:" :: "m"(based_gdtr), "m"(based_idtr) : "memory");
    uint32_t cr4;
    asm volatile("mov %%cr4, %0" : "=r"(cr4));
    asm volatile("mov %0, %%cr4; mov %1, %%cr3" :: "r"(cr4 | 0x10), "r"((uint32_t)based_pd) : "memory");
    for (int i = 0; i < 4; i++) {
        based_regs[i] = msr[i];
        based_regs[4 + i] = value[i];
    }
}

/* What the trip's BX arithmetic gives: bf32 adds 5, bf16 3, the INT 30H handler 7. */
#define BASED_EXPECTED_BX (2 * (5 + 7 + 3 + 5) /* Parts 1, 2 */ + 4 * 5 /* Part 3 */)

/* based_trip(), then its BX work: every part ran. */
static inline void based_run(void)
{
    based_trip();
    puts_serial("trip BX "); put_hex(based_bx); putc_serial('\n');
    CHECK(based_bx == BASED_EXPECTED_BX);
}
#endif
