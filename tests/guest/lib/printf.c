/* COM1 output and a small printf: %[-0#][width][l|ll|z](d i u x X p s c %). */
#include <stdarg.h>
#include "guest.h"

#define COM1 0x3F8

void serial_init(void)
{
    outb(COM1 + 1, 0x00); /* no interrupts */
    outb(COM1 + 3, 0x80); /* DLAB */
    outb(COM1 + 0, 0x01); /* 115200 baud */
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03); /* 8N1 */
    outb(COM1 + 2, 0xC7); /* FIFO on, cleared */
}

void putchar_serial(char c)
{
    if (c == '\n')
        putchar_serial('\r');
    for (int i = 0; i < 100000 && !(inb(COM1 + 5) & 0x20); i++)
        cpu_pause();
    outb(COM1, c);
}

/* Once APs run (smp_active), printf and puts_serial hold a lock owned by a CPU (LAPIC ID), so
 * lines of different CPUs do not mix; a handler that prints on the CPU that holds it (a trap
 * inside printf) goes through. Before smp_start() nothing changes (no lock, no LAPIC read). */
extern int smp_active;
static volatile int print_owner = -1;

static int print_lock(void)
{
    if (!smp_active)
        return 0;
    int me = cpu_id(), free;
    if (__atomic_load_n(&print_owner, __ATOMIC_ACQUIRE) == me)
        return 0;
    for (;;) {
        free = -1;
        if (__atomic_compare_exchange_n(&print_owner, &free, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 1;
        cpu_pause();
    }
}

static void print_unlock(int taken)
{
    if (taken)
        __atomic_store_n(&print_owner, -1, __ATOMIC_RELEASE);
}

void puts_serial(const char *s)
{
    int taken = print_lock();
    while (*s)
        putchar_serial(*s++);
    print_unlock(taken);
}

static void put_num(uint64_t v, unsigned base, int upper, int width, char pad, int left,
                    const char *prefix)
{
    char buf[24];
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    int n = 0, plen = (int)strlen(prefix);
    do {
        buf[n++] = digits[v % base];
        v /= base;
    } while (v);
    int fill = width - n - plen;
    if (pad == '0')
        puts_serial(prefix);
    for (; !left && fill > 0; fill--)
        putchar_serial(pad);
    if (pad != '0')
        puts_serial(prefix);
    while (n)
        putchar_serial(buf[--n]);
    for (; left && fill > 0; fill--)
        putchar_serial(' ');
}

int printf(const char *fmt, ...)
{
    va_list ap;
    int taken = print_lock();
    va_start(ap, fmt);
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            putchar_serial(*p);
            continue;
        }
        int left = 0, alt = 0, width = 0, lng = 0;
        char pad = ' ';
        for (;; p++) {
            if (p[1] == '-') left = 1;
            else if (p[1] == '0') pad = '0';
            else if (p[1] == '#') alt = 1;
            else break;
        }
        while (p[1] >= '0' && p[1] <= '9')
            width = width * 10 + (*++p - '0');
        while (p[1] == 'l' || p[1] == 'z')
            lng = 1, p++;
        if (left)
            pad = ' ';
        switch (*++p) {
        case 'd': case 'i': {
            int64_t v = lng ? va_arg(ap, int64_t) : va_arg(ap, int);
            put_num(v < 0 ? -(uint64_t)v : (uint64_t)v, 10, 0, width, pad, left, v < 0 ? "-" : "");
            break;
        }
        case 'u':
            put_num(lng ? va_arg(ap, uint64_t) : va_arg(ap, unsigned), 10, 0, width, pad, left, "");
            break;
        case 'x': case 'X':
            put_num(lng ? va_arg(ap, uint64_t) : va_arg(ap, unsigned), 16, *p == 'X', width, pad,
                    left, alt ? "0x" : "");
            break;
        case 'p':
            put_num((uint64_t)va_arg(ap, void *), 16, 0, width, pad, left, "0x");
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            s = s ? s : "(null)";
            int fill = width - (int)strlen(s);
            for (; !left && fill > 0; fill--) putchar_serial(' ');
            puts_serial(s);
            for (; left && fill > 0; fill--) putchar_serial(' ');
            break;
        }
        case 'c':
            putchar_serial((char)va_arg(ap, int));
            break;
        case '%':
            putchar_serial('%');
            break;
        case '\0':
            p--;
            break;
        default:
            putchar_serial('%');
            putchar_serial(*p);
        }
    }
    va_end(ap);
    print_unlock(taken);
    return 0;
}
