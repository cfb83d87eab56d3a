/* Multiboot entry of the 32-bit guests (t_m32_*.c): no LGDT, no mode switch. QEMU's multiboot
 * loader enters here in 32-bit protected mode with the flat segments of its own GDT (loaded by
 * its option ROM), CR0.PG = 0, IF = 0 (Multiboot spec §3.2). Issue 12: the plugin must trace this
 * as 32-bit code although the only LGDT it saw was the option ROM's real-mode one. */
#define MB_MAGIC 0x1BADB002
#define MB_FLAGS 0x00000003
    .section .multiboot, "a"
    .align 4
    .long MB_MAGIC, MB_FLAGS, -(MB_MAGIC + MB_FLAGS)
    .text
    .code32
    .globl _start
_start:
    mov $stack_top, %esp
    call m32_main
1:  hlt
    jmp 1b
    .bss
    .align 16
    .space 16384
stack_top:
