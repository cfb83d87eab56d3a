/* Helpers for the 32-bit protected-mode guests (t_m32_*.c, entry.S): serial output on COM1,
 * PASS/FAIL through isa-debug-exit (tests/guest/run.sh), MSR access from 32-bit code. */
#ifndef GUEST_M32_H
#define GUEST_M32_H
#include "lib/msr.h" /* MSR numbers, shared with the 64-bit guests */
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

static inline void outb(uint16_t port, uint8_t v) { asm volatile("outb %0, %1" :: "a"(v), "Nd"(port)); }
static inline void outl(uint16_t port, uint32_t v) { asm volatile("outl %0, %1" :: "a"(v), "Nd"(port)); }
static inline uint64_t rdmsr(uint32_t msr)
{
    uint32_t lo, hi;
    asm volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
    return ((uint64_t)hi << 32) | lo;
}
static inline void wrmsr(uint32_t msr, uint64_t v)
{
    asm volatile("wrmsr" :: "c"(msr), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}
static inline void putc_serial(char c) { outb(0x3f8, (uint8_t)c); }
static inline void puts_serial(const char *s) { while (*s) putc_serial(*s++); }
static inline void put_hex(uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    int started = 0;
    for (int sh = 60; sh >= 0; sh -= 4) {
        int d = (v >> sh) & 15;
        if (d || started || sh == 0) { putc_serial(hex[d]); started = 1; }
    }
}
static inline void hex_dump(const char *tag, const uint8_t *buf, uint32_t len)
{
    static const char hex[] = "0123456789abcdef";
    for (uint32_t i = 0; i < len; i += 32) {
        puts_serial(tag);
        for (uint32_t j = i; j < len && j < i + 32; j++) {
            putc_serial(hex[buf[j] >> 4]);
            putc_serial(hex[buf[j] & 15]);
        }
        putc_serial('\n');
    }
}
/* isa-debug-exit: QEMU exits with (v << 1) | 1: 0x10 PASS (33), 0x11 FAIL (35). */
static inline __attribute__((noreturn)) void m32_exit(int pass)
{
    puts_serial(pass ? "PASS\n" : "FAIL\n");
    outl(0xf4, pass ? 0x10 : 0x11);
    for (;;) asm volatile("hlt");
}
#define CHECK(c) do { if (!(c)) { puts_serial("check failed: " #c "\n"); m32_exit(0); } } while (0)

/* A loop with calls and conditional branches (near CALL rel32 at 32-bit operand size: 5 bytes,
 * 3 if it were 16-bit code). */
static volatile uint32_t m32_sink;
static __attribute__((noinline)) uint32_t m32_step(uint32_t x)
{
    if (x & 1)
        return x * 3 + 1;
    return x >> 1;
}
static __attribute__((noinline, unused)) uint32_t m32_work(uint32_t n)
{
    uint32_t acc = 0;
    for (uint32_t i = 1; i <= n; i++) {
        uint32_t x = i + 7;
        while (x != 1 && x < 1000)
            x = m32_step(x);
        acc += x;
    }
    return acc;
}

/* The code segment is the loader's (no LGDT here): check it is a 32-bit one (CS.D, SDM Vol. 3A
 * §3.4.5) so the test proves the case of issue 12. */
static inline void m32_check_mode(void)
{
    uint32_t cr0, cs;
    asm volatile("mov %%cr0, %0; mov %%cs, %1" : "=r"(cr0), "=r"(cs));
    CHECK(cr0 & 1);
    CHECK(!(cr0 & 0x80000000u));
}
#endif
