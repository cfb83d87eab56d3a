/* Issue 12: Branch Trace Store in compatibility mode (IA32_EFER.LMA = 1, CS.L = 0, CS.D = 1)
 * under the 64-bit kernel. BTS records carry linear addresses and, in IA-32e mode, the 64-bit
 * record format (SDM Vol. 3B §18.4.8.2, Figure 18-9) whatever the code's mode: the FROM of a
 * branch in 32-bit code is the address of that branch decoded as 32-bit code (a 16- or 64-bit
 * decode of the same bytes gives other instruction boundaries: `inc ecx` = 41 is a REX prefix in
 * 64-bit code).
 *
 * The trip (SEL32 = 7F0H: code, DPL 0, base 0, 4 GiB, L = 0, D = 1):
 *   64: iretq to SEL32:c32                 far transfer 64 -> compat
 *   c32: inc ecx; call f32 (near, 32-bit)  loop: dec/jnz three times; jmp over a byte
 *        ljmp SEL32:c32b                   far JMP compat -> compat
 *   c32b: lret                             far RET compat -> 64 (to back64, pushed by a far CALL)
 *   64: lcall to SEL32:c32c                far CALL 64 -> compat
 *   c32c: call f32; iretl to 08H:done64    IRET compat -> 64
 * The host compares every record with the taken transfers of the ground truth, the code between
 * compat32_start and compat32_end decoded as 32-bit code (`bts-expect --code32`). */
// bts-expect: --code32 @compat32_start-@compat32_end
#include "bts.h"

#define SEL32 0x7F0
#define GDT_ENTRIES 256
#define SLOTS 256

extern uint64_t gdt[];
extern char gdt_ptr[];
uint64_t my_gdt[GDT_ENTRIES] __attribute__((aligned(16)));
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record buf[SLOTS] __attribute__((aligned(64)));

asm(".pushsection .rodata\n\t"
    ".balign 8\n"
    "bts_compat_far_ptr:\n\t"
    ".long c32c\n\t"
    ".word 0x7F0\n\t"
    ".popsection\n\t"
    ".text\n\t"
    ".code64\n\t"
    ".globl bts_compat_trip\n"
    "bts_compat_trip:\n\t"
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
    "lcall *bts_compat_far_ptr(%rip)\n"    /* 64 -> compat */
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
uint32_t bts_compat_trip(void);
/* ECX: c32 inc + f32 + 3 incs, c32b inc, c32c's f32: 1 + 0x10 + 3 + 1 + 0x10 */
#define TRIP_ECX (1 + 0x10 + 3 + 1 + 0x10)

struct __attribute__((packed)) gdtr { uint16_t limit; uint64_t base; };
static void load_gdt(const struct gdtr *g) { asm volatile("lgdt %0" : : "m"(*g) : "memory"); }
static volatile uint32_t trip_result;

void test_main(void)
{
    struct gdtr old;
    memcpy(&old, gdt_ptr, sizeof(old));
    ASSERT((uint64_t)old.limit + 1 <= SEL32);
    memcpy(my_gdt, gdt, (uint64_t)old.limit + 1);
    my_gdt[SEL32 / 8] = 0x00CF9A000000FFFFull; /* G=1 D=1 L=0 P=1 DPL=0 code exec/read */
    struct gdtr mine = { sizeof(my_gdt) - 1, (uint64_t)my_gdt };
    load_gdt(&mine);
    bts_setup(&ds, buf, SLOTS, SLOTS + 1);
    irq_disable();
    BTS_WRMSR("bts_enable_wrmsr", DEBUGCTL_TR | DEBUGCTL_BTS);
    trip_result = bts_compat_trip();
    BTS_WRMSR("bts_disable_wrmsr", 0);
    load_gdt(&old);
    uint64_t n = (ds.bts_index - ds.bts_base) / sizeof(struct bts_record);
    printf("compat trip: ecx %x (expected %x), %lu BTS records\n", trip_result, TRIP_ECX, n);
    ASSERT_EQ(trip_result, TRIP_ECX);
    ASSERT(n >= 12 && n < SLOTS);
    printf("BTSLOGCOUNT %lu\n", n);
    for (uint64_t i = 0; i < n; i++)
        bts_print_record("BTSLOG", i, &buf[i]);
}
