/* Library entry (from boot.S), exit codes and assertions. */
#include "guest.h"

extern uint64_t mb_magic, mb_info;
extern const char test_name[] __attribute__((weak));
void serial_init(void);
void gdt_init(void);
void idt_init(void);
void pic_disable(void);
void syscall_init(void);
void pool_init(uint64_t ram_end);

/* Multiboot info (spec §3.3): flags bit 0 -> mem_upper = KiB of RAM above 1 MiB; bit 2 ->
 * cmdline = physical address of the command line (QEMU -append). */
struct mb_info { uint32_t flags, mem_lower, mem_upper, boot_device, cmdline; };

static const char *cmdline = "";

uint64_t cmdline_u64(const char *key, uint64_t dflt)
{
    size_t klen = 0;
    while (key[klen])
        klen++;
    for (const char *p = cmdline; *p; p++) {
        if ((p == cmdline || p[-1] == ' ') && p[klen] == '=') {
            size_t i = 0;
            while (i < klen && p[i] == key[i])
                i++;
            if (i == klen) {
                uint64_t v = 0;
                for (p += klen + 1; *p >= '0' && *p <= '9'; p++)
                    v = v * 10 + (uint64_t)(*p - '0');
                return v;
            }
        }
    }
    return dflt;
}

_Noreturn void lib_main(void)
{
    serial_init();
    gdt_init();
    idt_init();
    pic_disable();
    syscall_init();
    uint64_t ram_end = 0;
    const struct mb_info *mbi = (const struct mb_info *)mb_info;
    if (mb_magic == 0x2BADB002 && (mbi->flags & 1))
        ram_end = 0x100000 + (uint64_t)mbi->mem_upper * 1024;
    if (mb_magic == 0x2BADB002 && (mbi->flags & 4) && mbi->cmdline)
        cmdline = (const char *)(uint64_t)mbi->cmdline;
    pool_init(ram_end);
    printf("guest: test %s, RAM %lu MiB\n", &test_name ? test_name : "?", ram_end >> 20);
    test_main();
    test_pass();
}

/* isa-debug-exit (-device isa-debug-exit,iobase=0xf4,iosize=0x04): QEMU exits with
 * (code << 1) | 1. If the device is missing, halt forever (the runner's timeout fails it). */
_Noreturn void exit_qemu(uint32_t code)
{
    outl(DEBUG_EXIT_PORT, code);
    for (;;)
        asm volatile("cli; hlt");
}

_Noreturn void test_pass(void)
{
    puts_serial("PASS\n");
    exit_qemu(EXIT_PASS);
}

_Noreturn void test_fail(const char *why)
{
    printf("FAIL: %s\n", why);
    exit_qemu(EXIT_FAIL);
}

_Noreturn void test_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    exit_qemu(EXIT_SKIP);
}

_Noreturn void assert_fail(const char *file, int line, const char *expr)
{
    printf("%s:%d: assertion failed: %s\n", file, line, expr);
    test_fail("assertion");
}

_Noreturn void assert_eq_fail(const char *file, int line, const char *a, const char *b,
                              uint64_t va, uint64_t vb)
{
    printf("%s:%d: assertion failed: %s == %s (%#lx != %#lx)\n", file, line, a, b, va, vb);
    test_fail("assertion");
}
