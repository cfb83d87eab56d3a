/* Public API of the bare-metal guest test library. A test defines `void test_main(void)`;
 * returning from it prints PASS and exits QEMU with EXIT_PASS. See ../README.md. */
#ifndef GUEST_H
#define GUEST_H

#include <stddef.h>
#include <stdint.h>
#include "layout.h"
#include "x86.h"

/* ---- test control (main.c) ---- */
void test_main(void);
_Noreturn void exit_qemu(uint32_t code);
_Noreturn void test_pass(void);
/* KEY=<decimal> from the kernel command line (QEMU -append), or dflt. */
uint64_t cmdline_u64(const char *key, uint64_t dflt);
_Noreturn void test_fail(const char *why);
_Noreturn void test_skip(const char *why);
_Noreturn void assert_fail(const char *file, int line, const char *expr);
_Noreturn void assert_eq_fail(const char *file, int line, const char *a, const char *b,
                              uint64_t va, uint64_t vb);

#define ASSERT(c) do { if (!(c)) assert_fail(__FILE__, __LINE__, #c); } while (0)
#define ASSERT_EQ(a, b) do { uint64_t _a = (uint64_t)(a), _b = (uint64_t)(b); \
        if (_a != _b) assert_eq_fail(__FILE__, __LINE__, #a, #b, _a, _b); } while (0)

/* Set by the build for each t_*.c (TEST_NAME), printed in the banner. */
#ifdef TEST_NAME
const char test_name[] = TEST_NAME;
#endif

/* ---- serial console, COM1 (printf.c) ---- */
void putchar_serial(char c);
void puts_serial(const char *s);
int printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- traps (trap.c) ---- */
struct trap_frame {
    uint64_t r15, r14, r13, r12, r11, r10, r9, r8, rbp, rdi, rsi, rdx, rcx, rbx, rax;
    uint64_t vector, error_code;                /* error_code is 0 for vectors without one */
    uint64_t rip, cs, rflags, rsp, ss;          /* hardware frame; writable (resume state) */
};
typedef void (*trap_handler_t)(struct trap_frame *f);

trap_handler_t set_handler(uint8_t vector, trap_handler_t fn); /* returns the previous one */
void idt_set_dpl(uint8_t vector, int dpl);   /* 3: `int $vector` allowed from ring 3 */
void trap_dump(const struct trap_frame *f);

/* Filled whenever an exception-table fixup (rdmsr_safe, wrmsr_safe, EXTABLE_ENTRY) is taken. */
struct fault_info { uint64_t vector, error_code, rip, cr2, count; };
extern volatile struct fault_info last_fault;

/* ---- ring 3 (user.c) ---- */
typedef uint64_t (*user_fn_t)(void);
#define USER_RET_SYSCALL 0 /* fn's return goes through SYSCALL(SYS_EXIT) */
#define USER_RET_INT80   1 /* ... through int $0x80 (SYS_EXIT) */
/* Runs fn in ring 3 at its user-alias address on user_stack (NULL: a built-in 16 KiB stack;
 * identity addresses are converted to the alias). Returns fn's return value, or the argument of
 * SYS_EXIT. Not reentrant. */
uint64_t enter_user(user_fn_t fn, void *user_stack);
uint64_t enter_user_ret(user_fn_t fn, void *user_stack, int how);
/* Custom system calls (numbers >= 16) go to this hook; returns the previous one. */
typedef uint64_t (*syscall_hook_t)(struct trap_frame *f);
syscall_hook_t set_syscall_hook(syscall_hook_t fn);

static inline void *user_ptr(const void *p) /* identity address -> user alias */
{
    uint64_t a = (uint64_t)p;
    return (void *)(a < IDENTITY_SIZE ? a + USER_ALIAS_OFFSET : a);
}
static inline uint64_t user_syscall(uint64_t nr, uint64_t arg)
{
    uint64_t ret;
    asm volatile("syscall" : "=a"(ret) : "a"(nr), "D"(arg) : "rcx", "r11", "memory");
    return ret;
}
static inline uint64_t user_int80(uint64_t nr, uint64_t arg)
{
    uint64_t ret;
    asm volatile("int $0x80" : "=a"(ret) : "a"(nr), "D"(arg) : "memory");
    return ret;
}

/* ---- interrupt controllers (apic.c) ---- */
#define LAPIC_ID        0x020
#define LAPIC_EOI       0x0B0
#define LAPIC_SVR       0x0F0
#define LAPIC_ICR_LO    0x300
#define LAPIC_ICR_HI    0x310
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_PERF  0x340
#define LAPIC_TIMER_INIT 0x380
#define LAPIC_TIMER_CUR 0x390
#define LAPIC_TIMER_DIV 0x3E0
uint32_t lapic_read(uint32_t reg);
void lapic_write(uint32_t reg, uint32_t val);
void lapic_enable(void);                                 /* xAPIC mode, software-enabled */
void lapic_timer_oneshot(uint8_t vector, uint32_t count); /* divide by 1 */
void lapic_eoi(void);

/* ---- SMP (smp.c) ----
 * smp_start(fn, ncpus): starts CPUs 1..ncpus-1 (ncpus <= 0: every CPU QEMU has) with
 * INIT-SIPI-SIPI; each runs fn(cpu) on its own 64 KiB stack, with the shared IDT and handlers,
 * its own TSS (RSP0, IST1 NMI, IST2 #DF stacks) and its LAPIC enabled, then halts. Returns once
 * every AP is running fn, i.e. concurrently with the caller; fails the test if QEMU has fewer
 * CPUs (`// qemu-options: -smp N`). CPU n is LAPIC ID n; the BSP is CPU 0. At most once per test.
 * Ring 3 (enter_user) and last_fault are BSP-only (shared stacks / state). */
int smp_start(void (*fn)(int cpu), int ncpus);
void smp_join(void);     /* waits until every AP returned from fn */
void smp_barrier(void);  /* all smp_cpus() CPUs (BSP included) must call it */
int smp_cpus(void);      /* CPUs running: 1 before smp_start() */
int smp_cpu_count(void); /* CPUs QEMU has (fw_cfg) */
int cpu_id(void);        /* this CPU's LAPIC ID */

/* A test-and-set lock (not for handlers: they would spin on a lock their CPU holds). */
typedef struct { volatile uint32_t locked; } spinlock_t;
static inline void spin_lock(spinlock_t *l)
{
    while (__atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&l->locked, __ATOMIC_RELAXED))
            cpu_pause();
}
static inline void spin_unlock(spinlock_t *l) { __atomic_store_n(&l->locked, 0, __ATOMIC_RELEASE); }

/* ---- memory (mem.c) ---- */
void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);
void *memmove(void *d, const void *s, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
/* Zeroed, physically contiguous pages from the pool; virt == phys (identity map). Fails the
 * test when the pool is exhausted. align: power of two >= 4096 (e.g. a ToPA region's size). */
void *alloc_pages(size_t npages);
void *alloc_aligned(size_t bytes, size_t align);
uint64_t cr3_main(void); /* page-table root used at boot */
uint64_t cr3_alt(void);  /* second root, same mappings */

#endif
