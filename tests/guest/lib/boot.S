/* Multiboot v1 entry: 32-bit protected mode -> IA-32e (64-bit) mode -> lib_main().
 * QEMU's multiboot loader enters _start with EAX = 0x2BADB002, EBX = multiboot info, flat 32-bit
 * segments, paging and interrupts off (Multiboot spec 0.6.96 §3.2). */
#include "layout.h"

#define MB_MAGIC 0x1BADB002
#define MB_FLAGS 0x00000003 /* bit 0: page-align modules, bit 1: provide mem_lower/mem_upper */

#define PTE_P   0x001
#define PTE_RW  0x002
#define PTE_US  0x004
#define PTE_PWT 0x008
#define PTE_PCD 0x010
#define PTE_PS  0x080 /* 2 MiB page in a PDE (SDM Vol. 3A §4.5) */

    .section .multiboot, "a"
    .balign 4
    .long MB_MAGIC, MB_FLAGS, -(MB_MAGIC + MB_FLAGS)

    .section .text.boot, "ax"
    .code32
    .globl _start
_start:
    cli
    cld
    mov %eax, %esi
    mov %ebx, %ebp
    /* Zero .bss (page tables, stacks). */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    shr $2, %ecx
    xor %eax, %eax
    rep stosl
    mov %esi, mb_magic
    mov %ebp, mb_info
    mov $boot_stack_top, %esp

    /* 4-level page tables (SDM Vol. 3A §4.5): PML4[0] -> PDPT; PDPT[0] identity 0-1 GiB
     * (supervisor), PDPT[1] user alias of phys 0-1 GiB, PDPT[3] identity 3-4 GiB uncached
     * (LAPIC, IOAPIC). The U/S bit must be set at every level for a user access (§4.6), so the
     * upper levels allow it and the PDEs decide. pml4_alt is a second root with the same map. */
    movl $(pdpt + PTE_P + PTE_RW + PTE_US), pml4
    movl $(pdpt + PTE_P + PTE_RW + PTE_US), pml4_alt
    movl $(pd_kernel + PTE_P + PTE_RW + PTE_US), pdpt
    movl $(pd_user + PTE_P + PTE_RW + PTE_US), pdpt + 8
    movl $(pd_mmio + PTE_P + PTE_RW), pdpt + 24
    xor %ecx, %ecx
1:  mov %ecx, %eax
    shl $21, %eax
    lea (PTE_P + PTE_RW + PTE_PS)(%eax), %edx
    mov %edx, pd_kernel(, %ecx, 8)
    lea (PTE_P + PTE_RW + PTE_US + PTE_PS)(%eax), %edx
    mov %edx, pd_user(, %ecx, 8)
    lea (MMIO_BASE + PTE_P + PTE_RW + PTE_PWT + PTE_PCD + PTE_PS)(%eax), %edx
    mov %edx, pd_mmio(, %ecx, 8)
    inc %ecx
    cmp $512, %ecx
    jne 1b

    /* Enter IA-32e mode (SDM Vol. 3A "Initializing IA-32e Mode", §9.8.5 in
     * older editions): CR4.PAE, CR3,
     * EFER.LME, then CR0.PG; a far jump to a code segment with L=1 starts 64-bit mode. CR4
     * OSFXSR/OSXMMEXCPT and CR0.MP (EM clear) allow SSE; CR0.WP, CR0.NE as usual. */
    mov %cr4, %eax
    or $((1 << 5) | (1 << 9) | (1 << 10)), %eax
    mov %eax, %cr4
    mov $pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx /* IA32_EFER */
    rdmsr
    or $(1 << 8), %eax
    wrmsr
    mov %cr0, %eax
    and $~(1 << 2), %eax
    or $((1 << 31) | (1 << 16) | (1 << 5) | (1 << 1) | 1), %eax
    mov %eax, %cr0
    lgdt gdt_ptr
    ljmp $KERNEL_CS, $long_entry

    .code64
long_entry:
    mov $KERNEL_DS, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov $boot_stack_top, %rsp
    xor %ebp, %ebp
    call lib_main
2:  cli
    hlt
    jmp 2b

/* GDT (SDM Vol. 3A §3.4.5; 64-bit code segments: L=1, D=0, §5.2.1). */
    .section .data
    .balign 16
    .globl gdt
gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF /* 0x08 kernel code, 64-bit, DPL 0 */
    .quad 0x00CF92000000FFFF /* 0x10 kernel data, DPL 0 */
    .quad 0x00CFFA000000FFFF /* 0x18 user code, 32-bit, DPL 3 (unused; SYSRET layout) */
    .quad 0x00CFF2000000FFFF /* 0x20 user data, DPL 3 */
    .quad 0x00AFFA000000FFFF /* 0x28 user code, 64-bit, DPL 3 */
    .quad 0, 0               /* 0x30 64-bit TSS of CPU 0, filled in by gdt_init() */
    .skip 16 * (MAX_CPUS - 1) /* 0x40, 0x50, ...: TSS of CPU n at TSS_SEL + 16 n (smp.c) */
gdt_end:
    .balign 8
    .globl gdt_ptr
gdt_ptr:
    .word gdt_end - gdt - 1
    .quad gdt
    .balign 8
    .globl mb_magic, mb_info
mb_magic: .quad 0
mb_info:  .quad 0

    .section .bss
    .balign 4096
    .globl pml4, pml4_alt
pml4:      .skip 4096
pml4_alt:  .skip 4096
pdpt:      .skip 4096
pd_kernel: .skip 4096
pd_user:   .skip 4096
pd_mmio:   .skip 4096
    .globl boot_stack_top, rsp0_stack_top, ist_nmi_top, ist_df_top
boot_stack:  .skip 65536
boot_stack_top:
rsp0_stack:  .skip 16384 /* TSS.RSP0 and SYSCALL entry */
rsp0_stack_top:
ist_nmi:     .skip 16384 /* IST1: NMI (PMIs) */
ist_nmi_top:
ist_df:      .skip 16384 /* IST2: #DF */
ist_df_top:
