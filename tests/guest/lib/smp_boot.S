/* Application-processor start-up (SDM Vol. 3A "Multiple-Processor (MP) Initialization"): after
 * INIT-SIPI-SIPI an AP starts in real mode at CS:IP = (vector << 8):0, i.e. at AP_TRAMPOLINE, where
 * smp_start() (smp.c) copied ap_tramp_start..ap_tramp_end. Real mode -> 32-bit protected mode
 * (trampoline GDT) -> IA-32e mode with the BSP's page tables -> the main GDT, the stack in
 * ap_boot_rsp -> ap_main() (smp.c), which loads the IDT and the CPU's TSS. */
#include "layout.h"

/* Copied below 1 MiB: only trampoline-relative references (DS = CS = AP_TRAMPOLINE >> 4) and
 * absolute addresses of kernel symbols. */
    .section .rodata.ap_tramp, "a"
    .code16
    .globl ap_tramp_start, ap_tramp_end
ap_tramp_start:
    cli
    cld
    mov %cs, %ax
    mov %ax, %ds
    lgdtl ap_tramp_gdtr - ap_tramp_start
    mov %cr0, %eax
    or $1, %eax                 /* CR0.PE */
    mov %eax, %cr0
    ljmpl $AP_CS32, $ap_pm32    /* 32-bit code in the kernel image (flat segment) */
    .balign 8
ap_tramp_gdtr:
    .word ap_gdt_end - ap_gdt - 1
    .long ap_gdt                /* 32-bit base: the kernel image is below 4 GiB */
ap_tramp_end:

    .text
    .code32
ap_pm32:
    mov $KERNEL_DS, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    /* As boot.S (SDM Vol. 3A "Initializing IA-32e Mode"): CR4.PAE (+ OSFXSR, OSXMMEXCPT), CR3 =
     * the BSP's root, EFER.LME, CR0.PG (+ WP, NE, MP; EM, CD, NW cleared: INIT sets CD and NW). */
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
    and $~((1 << 30) | (1 << 29) | (1 << 2)), %eax
    or $((1 << 31) | (1 << 16) | (1 << 5) | (1 << 1) | 1), %eax
    mov %eax, %cr0
    ljmp $KERNEL_CS, $ap_long_entry

    .code64
ap_long_entry:
    lgdt gdt_ptr(%rip)          /* the main GDT: same 0x08 and 0x10 descriptors, plus the TSSs */
    mov $KERNEL_DS, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov ap_boot_rsp(%rip), %rsp
    xor %ebp, %ebp
    call ap_main
1:  cli
    hlt
    jmp 1b

/* Trampoline GDT (SDM Vol. 3A §3.4.5): 0x08 and 0x10 as in the main GDT, 0x18 32-bit ring-0 code. */
    .section .rodata
    .balign 8
ap_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF /* 0x08 kernel code, 64-bit */
    .quad 0x00CF92000000FFFF /* 0x10 kernel data */
    .quad 0x00CF9A000000FFFF /* 0x18 (AP_CS32) 32-bit code, DPL 0 */
ap_gdt_end:
