/* String functions, the page pool and the two page-table roots. */
#include "guest.h"

extern uint64_t pml4[], pml4_alt[];
extern char __image_end[];

static uint64_t pool_next = POOL_BASE, pool_end = POOL_BASE;
static spinlock_t pool_lock; /* APs allocate too */

void *memset(void *d, int c, size_t n)
{
    void *r = d;
    asm volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
    return r;
}

void *memcpy(void *d, const void *s, size_t n)
{
    void *r = d;
    asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    return r;
}

void *memmove(void *d, const void *s, size_t n)
{
    unsigned char *dp = d;
    const unsigned char *sp = s;
    if (dp <= sp || dp >= sp + n)
        return memcpy(d, s, n);
    while (n--)
        dp[n] = sp[n];
    return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (; n; n--, x++, y++)
        if (*x != *y)
            return *x - *y;
    return 0;
}

size_t strlen(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

/* ram_end: first byte above RAM (from the multiboot info). */
void pool_init(uint64_t ram_end)
{
    if ((uint64_t)__image_end > IMAGE_LIMIT)
        test_fail("kernel image above IMAGE_LIMIT");
    pool_end = ram_end < POOL_LIMIT ? ram_end : POOL_LIMIT;
    if (pool_end < POOL_BASE)
        pool_end = POOL_BASE;
}

void *alloc_aligned(size_t bytes, size_t align)
{
    if (align < 4096 || (align & (align - 1)))
        test_fail("alloc_aligned: alignment must be a power of two >= 4096");
    spin_lock(&pool_lock);
    uint64_t start = (pool_next + align - 1) & ~(uint64_t)(align - 1);
    uint64_t size = (bytes + 4095) & ~4095ULL;
    if (start + size > pool_end || start + size < start) {
        printf("alloc: %#lx bytes (align %#lx) do not fit in the pool (%#lx-%#lx)\n",
               (uint64_t)bytes, (uint64_t)align, pool_next, pool_end);
        test_fail("page pool exhausted");
    }
    pool_next = start + size;
    spin_unlock(&pool_lock);
    return memset((void *)start, 0, size);
}

void *alloc_pages(size_t npages)
{
    return alloc_aligned(npages * 4096, 4096);
}

/* pml4_alt shares every lower-level table with pml4 (set up in boot.S). */
uint64_t cr3_main(void) { return (uint64_t)pml4; }
uint64_t cr3_alt(void) { return (uint64_t)pml4_alt; }
