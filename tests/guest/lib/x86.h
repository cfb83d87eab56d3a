/* Inline wrappers for privileged and special x86 instructions. */
#ifndef GUEST_X86_H
#define GUEST_X86_H

#include <stdint.h>
#include "msr.h"

#define EFER_SCE (1ULL << 0)
#define EFER_LME (1ULL << 8)
#define EFER_LMA (1ULL << 10)

#define CR0_PE (1ULL << 0)
#define CR0_PG (1ULL << 31)
#define CR4_PAE (1ULL << 5)

#define RFLAGS_IF (1ULL << 9)

static inline void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t out[4])
{
    asm volatile("cpuid" : "=a"(out[0]), "=b"(out[1]), "=c"(out[2]), "=d"(out[3])
                 : "a"(leaf), "c"(subleaf));
}

static inline uint64_t rdmsr(uint32_t msr)
{
    uint32_t lo, hi;
    asm volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
    return lo | ((uint64_t)hi << 32);
}

static inline void wrmsr(uint32_t msr, uint64_t val)
{
    asm volatile("wrmsr" : : "c"(msr), "a"((uint32_t)val), "d"((uint32_t)(val >> 32)) : "memory");
}

/* Exception table: if the instruction at `insn` faults, the trap handler resumes at `fixup`
 * (see trap.c). Entries hold absolute (identity-map) addresses; a fault in the user alias is
 * matched too and resumes at the alias of `fixup`. */
#define EXTABLE_ENTRY(insn, fixup) \
    ".pushsection __extable, \"a\"\n\t.balign 8\n\t.quad " #insn ", " #fixup "\n\t.popsection\n\t"

/* 0 on success; non-zero if RDMSR/WRMSR faulted (details in last_fault). */
static inline int rdmsr_safe(uint32_t msr, uint64_t *val)
{
    uint32_t lo = 0, hi = 0;
    int err = 0;
    asm volatile("1: rdmsr\n"
                 "2:\n\t"
                 ".pushsection .fixup, \"ax\"\n"
                 "3:\tmovl $1, %[err]\n\t"
                 "jmp 2b\n\t"
                 ".popsection\n\t"
                 EXTABLE_ENTRY(1b, 3b)
                 : [err] "+r"(err), "+a"(lo), "+d"(hi) : "c"(msr) : "memory");
    *val = err ? 0 : (lo | ((uint64_t)hi << 32));
    return err;
}

static inline int wrmsr_safe(uint32_t msr, uint64_t val)
{
    int err = 0;
    asm volatile("1: wrmsr\n"
                 "2:\n\t"
                 ".pushsection .fixup, \"ax\"\n"
                 "3:\tmovl $1, %[err]\n\t"
                 "jmp 2b\n\t"
                 ".popsection\n\t"
                 EXTABLE_ENTRY(1b, 3b)
                 : [err] "+r"(err)
                 : "c"(msr), "a"((uint32_t)val), "d"((uint32_t)(val >> 32)) : "memory");
    return err;
}

#define DEFINE_READ_CR(n) \
    static inline uint64_t read_cr##n(void) { uint64_t v; asm volatile("mov %%cr" #n ", %0" : "=r"(v)); return v; }
#define DEFINE_WRITE_CR(n) \
    static inline void write_cr##n(uint64_t v) { asm volatile("mov %0, %%cr" #n : : "r"(v) : "memory"); }
DEFINE_READ_CR(0) DEFINE_READ_CR(2) DEFINE_READ_CR(3) DEFINE_READ_CR(4)
DEFINE_WRITE_CR(0) DEFINE_WRITE_CR(3) DEFINE_WRITE_CR(4)

static inline void load_cr3(uint64_t root) { write_cr3(root); }

static inline uint16_t read_cs(void)
{
    uint16_t v;
    asm volatile("mov %%cs, %0" : "=r"(v));
    return v;
}

static inline uint64_t read_rflags(void)
{
    uint64_t v;
    asm volatile("pushfq; popq %0" : "=r"(v));
    return v;
}

static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return lo | ((uint64_t)hi << 32);
}

static inline void outb(uint16_t port, uint8_t v) { asm volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outw(uint16_t port, uint16_t v) { asm volatile("outw %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outl(uint16_t port, uint32_t v) { asm volatile("outl %0, %1" : : "a"(v), "Nd"(port)); }
static inline uint8_t inb(uint16_t port)
{
    uint8_t v;
    asm volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}

static inline void irq_enable(void) { asm volatile("sti" : : : "memory"); }
static inline void irq_disable(void) { asm volatile("cli" : : : "memory"); }
static inline void cpu_pause(void) { asm volatile("pause" : : : "memory"); }
static inline void barrier(void) { asm volatile("" : : : "memory"); }

static inline uint32_t mmio_read32(uint64_t addr) { return *(volatile uint32_t *)addr; }
static inline void mmio_write32(uint64_t addr, uint32_t v) { *(volatile uint32_t *)addr = v; }

#endif
