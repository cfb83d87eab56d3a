/* Memory map, selectors and numbers shared by the assembly and C parts of the guest library. */
#ifndef GUEST_LAYOUT_H
#define GUEST_LAYOUT_H

#ifdef __ASSEMBLER__
#define U64(x) x
#else
#define U64(x) x##ULL
#endif

/* GDT selectors (SDM Vol. 3A §3.4.2). The order 0x18/0x20/0x28 is what SYSRET needs: with
 * STAR[63:48] = 0x18 it loads SS = 0x20|3 and CS = 0x28|3 (SDM Vol. 2B, SYSRET). */
#define KERNEL_CS 0x08
#define KERNEL_DS 0x10
#define USER32_CS 0x1B /* placeholder 32-bit user code, unused */
#define USER_DS   0x23
#define USER_CS   0x2B
#define TSS_SEL   0x30 /* CPU 0's TSS; CPU n's is TSS_SEL + 16 * n (smp.c) */

/* SMP (smp.c, smp_boot.S): at most MAX_CPUS CPUs; the APs' real-mode start-up code is copied
 * to AP_TRAMPOLINE (4 KiB aligned, below 1 MiB: SIPI vector AP_TRAMPOLINE >> 12). Its GDT has
 * the main GDT's 0x08 and 0x10 plus a 32-bit ring-0 code segment for the protected-mode step. */
#define MAX_CPUS      16
#define AP_TRAMPOLINE 0x8000
#define AP_CS32       0x18

/* Physical memory (RAM: -m 128). The kernel image must end below IMAGE_LIMIT. */
#define KERNEL_LOAD  0x00100000 /* 1 MiB: multiboot ELF load address */
#define IMAGE_LIMIT  0x00800000 /* 8 MiB */
#define POOL_BASE    0x01000000 /* 16 MiB: page pool for alloc_pages() ... */
#define POOL_LIMIT   0x07800000 /* ... up to 120 MiB (clipped to the RAM size) */

/* Virtual memory (4-level paging, 2 MiB pages). */
#define IDENTITY_SIZE     U64(0x40000000) /* 0..1 GiB: identity map, supervisor only */
#define USER_ALIAS_OFFSET U64(0x40000000) /* 1..2 GiB: user alias, virt = phys + 1 GiB, U/S = 1 */
#define UNMAPPED_ADDR     U64(0x80000000) /* 2..3 GiB: not present (page-fault tests) */
#define MMIO_BASE         U64(0xC0000000) /* 3..4 GiB: identity, supervisor, PCD|PWT */
#define LAPIC_BASE        U64(0xFEE00000)

/* System calls: SYSCALL or int $0x80, number in RAX, argument in RDI, result in RAX. */
#define SYSCALL_VECTOR  0x80
#define SYSCALL_FRAME   0x100 /* trap_frame.vector of a SYSCALL entry */
#define SYS_EXIT 0 /* leave ring 3: enter_user() returns RDI */
#define SYS_ECHO 1 /* returns RDI */
#define SYS_PUTS 2 /* prints the NUL-terminated string at RDI */

#define SPURIOUS_VECTOR 0xFF
#define TIMER_VECTOR    0x40 /* suggested LAPIC timer vector; 0x40-0x7F are free for tests */

/* isa-debug-exit codes: QEMU exits with status (code << 1) | 1. */
#define EXIT_PASS 0x10 /* status 33 */
#define EXIT_FAIL 0x11 /* status 35 */
#define EXIT_SKIP 0x12 /* status 37 */
#define DEBUG_EXIT_PORT 0xF4

#endif
