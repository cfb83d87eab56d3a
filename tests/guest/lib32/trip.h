/* Issue 12: a trip through every legacy execution mode for the 32-bit multiboot guests
 * (t_m32_trip_*.c), traced by Intel PT, BTS or Atom RTIT. The guest defines the four WRMSR labels
 * (TRIP_W_START, TRIP_W_PAUSE, TRIP_W_RESUME, TRIP_W_END) before including this file and gives
 * trip_setup the MSR and value written at each.
 *
 * Part A, QEMU's multiboot GDT (its option ROM's LGDT; the guest has executed no LGDT): selector
 * 08H = 32-bit code, 18H = 16-bit conforming code, base 0, limit FFFFH (pc-bios/optionrom/
 * multiboot.S). That GDT lies in the option ROM, outside RAM: the plugin cannot read a
 * descriptor and must take the mode from QEMU's instruction boundaries.
 *   A1  32-bit:  ljmp $0x18, a16                  far JMP 32 -> 16-bit protected mode (CS.D = 0)
 *   16-bit PM:   call rel16, loop (dec/jnz), MOV CR0 clearing PE (SDM Vol. 3A §9.9.2)
 *   A2  ljmp $0, real                              far JMP into real mode (CS base 0)
 *   real mode:   call rel16, A3 lcall $0x300, rfar (CS base 3000H), call rel16, A4 lret,
 *                loop (dec/jnz), MOV CR0 setting PE
 *   A5  ljmpl $0x08, a_back32                      far JMP (66 EA ptr16:32) real -> 32-bit
 * Part B, the guest's own GDT (LGDT): 08H 32-bit code, 10H data, 18H 16-bit code (D = 0), 28H a
 * 16-bit code segment (D = 0) that the trip rewrites.
 *   B1  32-bit:  lgdt; ljmp $0x28, b16             far JMP 32 -> 16
 *   16-bit:      call rel16 (proves 16-bit code), then GDT[28H].D := 1 in memory WITHOUT reloading
 *                CS: the descriptor cache keeps CS.D = 0 (SDM Vol. 3A §3.4.3 "segment registers
 *                ... hidden part"), the code stays 16-bit. The PAUSE and RESUME WRMSRs run here,
 *                each in a block whose bytes decode alike as 16- and 32-bit code, so only the
 *                cached mode tells the model which; then call rel16 and a loop.
 *   B2  ljmpl $0x28, b_x32                         the same selector reloaded: now 32-bit code
 *   32-bit:      GDT[28H].D := 0 again in memory (CS keeps D = 1), call rel32
 *   B3  ljmp $0x08, b_c32                          far JMP 32 -> 32 (no mode change)
 *   B4  lcall $0x18, c16                           far CALL 32 -> 16; c16: call rel16,
 *   B5  lretl                                      far RET 16 -> 32 (66 CB)
 *   B6  iretl to 18H:d16                           IRET 32 -> 16; d16: call rel16, jmp,
 *   B7  iretl to 08H:b_iret_back                   IRET 16 -> 32 (66 CF)
 *   32-bit:      lgdt back to the loader's GDTR, call rel32, the END WRMSR.
 * 16-bit and real-mode code is copied to TRIP_LOW (below 64 KiB, where 16-bit near branches keep
 * it: SDM JMP/CALL "IF OperandSize = 16 THEN EIP <- tempEIP AND 0000FFFFH"); every address in
 * [TRIP_LOW, TRIP_LOW + 4 KiB) is 16-bit code, everything else 32-bit (the hosts' decoders of BTS
 * and RTIT, which carry no mode, are told so: `--bits 32 --code16 3000-3fff`). The real-mode
 * segment 300H has base 3000H = TRIP_LOW, so its code has the same linear addresses. SS stays the
 * flat 32-bit data segment (B = 1): 16-bit and real-mode pushes use ESP; IF = 0 throughout. */
#ifndef GUEST_M32_TRIP_H
#define GUEST_M32_TRIP_H
#include "lib32/m32.h"

#define TRIP_LOW 0x3000u
#define TRIP_LOW_SIZE 0x1000u
#define TRIP_RSEG 0x300u /* real-mode segment with base TRIP_LOW */

/* ECX[0..3], then EAX[0..3] of the WRMSRs at START, PAUSE, RESUME, END (EDX = 0). */
uint32_t trip_regs[8];
uint64_t own_gdt[6] __attribute__((aligned(8))) = {
    0,
    0x00CF9A000000FFFFull, /* 08H: code, 32-bit (D = 1), base 0, 4 GiB */
    0x00CF92000000FFFFull, /* 10H: data, flat */
    0x008F9A000000FFFFull, /* 18H: code, 16-bit (D = 0), base 0, 4 GiB */
    0x008F92000000FFFFull, /* 20H: data, 16-bit */
    0x008F9A000000FFFFull, /* 28H: code, 16-bit (D = 0): rewritten to D = 1 and back */
};
struct __attribute__((packed)) trip_gdtr { uint16_t limit; uint32_t base; };
struct trip_gdtr own_gdtr = { sizeof(own_gdt) - 1, 0 };
struct trip_gdtr loader_gdtr;
uint32_t trip_bx; /* what the trip's BX work leaves */

#define TRIP_STR2(x) #x
#define TRIP_STR(x) TRIP_STR2(x)
#define LOWADDR(l) "(0x3000 + " #l " - low_start)"

asm(".text\n\t"
    ".code32\n\t"
    ".globl trip, a_back32, b_x32, b_c32, b_ret32, b_iret_back, a_f32, trip_ljmp_a1, trip_ljmp_b1\n\t"
    ".globl trip_ljmp_b3, trip_lcall_b4, trip_iretl_b6\n"
    "trip:\n\t"
    "push %ebp\n\t"
    "push %ebx\n\t"
    "push %esi\n\t"
    "push %edi\n\t"
    "xor %ebx, %ebx\n\t"
    "xor %edx, %edx\n\t"
    "mov trip_regs, %ecx\n\t"
    "mov trip_regs+16, %eax\n\t"
    "jmp 1f\n"
    "1:\n"
    ".globl " TRIP_W_START "\n" TRIP_W_START ": wrmsr\n"
    /* ---- Part A: the loader's GDT ---- */
    "trip_ljmp_a1: ljmp $0x18, $" LOWADDR(a16) "\n"
    "a_back32:\n\t"
    "call a_f32\n\t"
    /* ---- Part B: own GDT ---- */
    "lgdt own_gdtr\n\t"
    "xor %edx, %edx\n"
    "trip_ljmp_b1: ljmp $0x28, $" LOWADDR(b16) "\n"
    "b_x32:\n\t"
    "call a_f32\n\t"
    "andb $0xBF, own_gdt + 0x28 + 6\n\t" /* GDT[28H].D := 0; CS keeps D = 1 */
    "call a_f32\n\t"
    "trip_ljmp_b3: ljmp $0x08, $b_c32\n"
    "b_c32:\n\t"
    "trip_lcall_b4: lcall $0x18, $" LOWADDR(c16) "\n"
    "b_ret32:\n\t"
    "call a_f32\n\t"
    "pushfl\n\t"
    "pushl $0x18\n\t"
    "pushl $" LOWADDR(d16) "\n\t"
    "trip_iretl_b6: iretl\n"
    "b_iret_back:\n\t"
    "lgdt loader_gdtr\n\t"
    "call a_f32\n\t"
    "mov trip_regs+12, %ecx\n\t"
    "mov trip_regs+28, %eax\n\t"
    "xor %edx, %edx\n\t"
    "jmp 1f\n"
    "1:\n"
    ".globl " TRIP_W_END "\n" TRIP_W_END ": wrmsr\n\t"
    "mov %ebx, trip_bx\n\t"
    "pop %edi\n\t"
    "pop %esi\n\t"
    "pop %ebx\n\t"
    "pop %ebp\n\t"
    "ret\n"
    "a_f32:\n\t"
    "add $5, %ebx\n\t"
    "ret\n\t"
    /* ---- 16-bit and real-mode code, run at TRIP_LOW ---- */
    ".code16\n\t"
    ".globl low_start, low_end, a16, real, rfar, f16, b16, c16, d16, trip_ljmp_a2, trip_lcall_a3,\n\t"
    ".globl trip_lret_a4, trip_ljmp_a5, trip_call_b16, trip_call_after_resume, trip_ljmp_b2,\n\t"
    ".globl trip_lretl_b5, trip_iretl_b7, trip_call_real, trip_call_rfar\n"
    "low_start:\n"
    "a16:\n\t"                             /* 16-bit protected mode, loader's 18H */
    "call f16\n\t"
    "mov $3, %cx\n"
    "1:\t"
    "call f16\n\t"
    "dec %cx\n\t"
    "jnz 1b\n\t"
    "mov %cr0, %eax\n\t"
    "and $0xFFFFFFFE, %eax\n\t"
    "mov %eax, %cr0\n"                     /* PE = 0: real mode */
    "trip_ljmp_a2: ljmp $0, $" LOWADDR(real) "\n"
    "real:\n"
    "trip_call_real: call f16\n"
    "trip_lcall_a3: lcall $0x300, $(rfar - low_start)\n\t"
    "mov $2, %cx\n"
    "1:\t"
    "dec %cx\n\t"
    "jnz 1b\n\t"
    "mov %cr0, %eax\n\t"
    "or $1, %al\n\t"
    "mov %eax, %cr0\n"                     /* PE = 1, CS still the real-mode one */
    "trip_ljmp_a5: ljmpl $0x08, $a_back32\n"
    "rfar:\n"                              /* real mode, CS = 300H (base 3000H) */
    "trip_call_rfar: call f16\n"
    "trip_lret_a4: lret\n"
    "f16:\n\t"
    "add $3, %bx\n\t"
    "ret\n"
    "b16:\n"                               /* own GDT, CS = 28H, D = 0 */
    "trip_call_b16: call f16\n\t"
    "mov $(own_gdt + 0x28 + 6), %ebp\n\t"
    "orb $0x40, (%ebp)\n\t"                /* GDT[28H].D := 1 in memory, CS not reloaded */
    "mov $trip_regs, %ebp\n\t"
    "mov 4(%ebp), %ecx\n\t"
    "mov 20(%ebp), %eax\n\t"
    "jmp 1f\n"
    "1:\n"                                 /* blocks that decode alike as 16- and 32-bit code */
    "trip_w_pause: wrmsr\n\t"
    "mov 8(%ebp), %ecx\n\t"
    "mov 24(%ebp), %eax\n"
    "trip_w_resume: wrmsr\n"
    "trip_call_after_resume: call f16\n\t"
    "mov $2, %cx\n"
    "1:\t"
    "call f16\n\t"
    "dec %cx\n\t"
    "jnz 1b\n"
    "trip_ljmp_b2: ljmpl $0x28, $b_x32\n"  /* CS reloaded: GDT[28H] now says D = 1 */
    "c16:\n\t"                             /* own 18H via lcall */
    "call f16\n"
    "trip_lretl_b5: lretl\n"
    "d16:\n\t"                             /* own 18H via iretl */
    "call f16\n\t"
    "jmp 1f\n"
    "1:\t"
    "pushfl\n\t"
    "pushl $0x08\n\t"
    "pushl $b_iret_back\n"
    "trip_iretl_b7: iretl\n"
    "low_end:\n\t"
    /* The hosts find the WRMSRs by symbol: absolute symbols at the address they run at. */
    ".globl " TRIP_W_PAUSE ", " TRIP_W_RESUME "\n\t"
    ".set " TRIP_W_PAUSE ", 0x3000 + (trip_w_pause - low_start)\n\t"
    ".set " TRIP_W_RESUME ", 0x3000 + (trip_w_resume - low_start)\n\t"
    ".code32\n");

void trip(void);
extern char low_start[], low_end[], a16[], real[], rfar[], f16[], b16[], c16[], d16[], a_back32[],
    b_x32[], b_c32[], b_ret32[], b_iret_back[], a_f32[], trip_ljmp_a1[], trip_ljmp_a2[],
    trip_lcall_a3[], trip_lret_a4[], trip_ljmp_a5[], trip_ljmp_b1[], trip_call_b16[],
    trip_call_after_resume[], trip_ljmp_b2[], trip_lretl_b5[], trip_iretl_b7[], trip_call_real[],
    trip_call_rfar[], trip_ljmp_b3[], trip_lcall_b4[], trip_iretl_b6[];

/* Linear address at which a label of the low code runs. */
static inline uint32_t low(const char *label) { return TRIP_LOW + (uint32_t)(label - low_start); }

static inline void *trip_memcpy(void *d, const void *s, uint32_t n)
{
    uint8_t *dd = d;
    const uint8_t *ss = s;
    while (n--)
        *dd++ = *ss++;
    return d;
}

/* Copy the low code, remember the loader's GDTR (SGDT: its GDT is the option ROM's). */
static inline void trip_setup(const uint32_t msr[4], const uint32_t value[4])
{
    uint32_t n = (uint32_t)(low_end - low_start);
    CHECK(n < TRIP_LOW_SIZE);
    trip_memcpy((void *)TRIP_LOW, low_start, n);
    asm volatile("sgdt %0" : "=m"(loader_gdtr));
    CHECK(loader_gdtr.limit == 5 * 8 - 1); /* the option ROM's GDT: 5 descriptors */
    own_gdtr.base = (uint32_t)own_gdt;
    for (int i = 0; i < 4; i++) {
        trip_regs[i] = msr[i];
        trip_regs[4 + i] = value[i];
    }
}

/* What the trip's BX arithmetic gives: a_f32 adds 5 to EBX, f16 adds 3 to BX. */
#define TRIP_EXPECTED_BX (4 * 3 /* a16 */ + 2 * 3 /* real, rfar */ + 5 /* a_back32 */ \
    + 4 * 3 /* b16 */ + 2 * 5 /* b_x32 */ + 3 + 5 /* c16, b_ret32 */ + 3 + 5 /* d16, b_iret_back */)

/* trip(), then its BX work: every part ran. */
static inline void trip_run(void)
{
    trip();
    puts_serial("trip BX "); put_hex(trip_bx); putc_serial('\n');
    CHECK(trip_bx == TRIP_EXPECTED_BX);
}
#endif
