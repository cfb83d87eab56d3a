/* Self-test of the guest library on plain QEMU TCG (no plugin). */
#include "guest.h"

static volatile uint64_t hit_rip, hit_cs, hit_err, hit_cr2, hits;
static volatile uint64_t pf_resume;

static void record(struct trap_frame *f)
{
    hit_rip = f->rip;
    hit_cs = f->cs;
    hit_err = f->error_code;
    hits++;
}
static void on_bp(struct trap_frame *f) { record(f); }
static void on_ud(struct trap_frame *f) { record(f); f->rip += 2; /* skip ud2 */ }
static void on_pf(struct trap_frame *f) { record(f); hit_cr2 = read_cr2(); f->rip = pf_resume; }

static volatile uint64_t timer_hits, timer_rip;
static void on_timer(struct trap_frame *f)
{
    timer_hits++;
    timer_rip = f->rip;
    lapic_eoi();
}

/* Ring-3 code: runs from the user alias (virt = phys + 1 GiB). */
static volatile uint64_t user_cs, user_rip, user_echo, user_msr_rc;
static uint64_t user_fn(void)
{
    uint64_t rip, v;
    asm volatile("lea 0(%%rip), %0" : "=r"(rip));
    user_cs = read_cs();
    user_rip = rip;
    user_syscall(SYS_PUTS, (uint64_t)"  hello from ring 3\n");
    user_echo = user_syscall(SYS_ECHO, 0x55) + user_int80(SYS_ECHO, 0x66);
    user_msr_rc = rdmsr_safe(0x10, &v); /* RDMSR at CPL 3: #GP, fixed up in the alias */
    return 0x1234;
}

static __attribute__((noinline)) uint64_t work(uint64_t n)
{
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i++)
        s += i * i;
    return s;
}

void test_main(void)
{
    /* 64-bit mode: EFER.LMA, paging, CS = 64-bit kernel code segment. */
    ASSERT(rdmsr(IA32_EFER) & EFER_LMA);
    ASSERT(read_cr0() & CR0_PG);
    ASSERT(read_cr4() & CR4_PAE);
    ASSERT_EQ(read_cs(), KERNEL_CS);
    printf("ok 64-bit mode, EFER %#lx\n", rdmsr(IA32_EFER));

    /* CPUID vendor. */
    uint32_t r[4];
    char vendor[13];
    cpuid(0, 0, r);
    memcpy(vendor, &r[1], 4);
    memcpy(vendor + 4, &r[3], 4);
    memcpy(vendor + 8, &r[2], 4);
    vendor[12] = 0;
    ASSERT(memcmp(vendor, "GenuineIntel", 12) == 0);
    printf("ok CPUID vendor %s, max leaf %#x\n", vendor, r[0]);

    /* wrmsr_safe: reserved bits 63:52 of IA32_APIC_BASE -> #GP(0), execution continues. */
    uint64_t apic_base = rdmsr(IA32_APIC_BASE), n = last_fault.count;
    ASSERT(wrmsr_safe(IA32_APIC_BASE, apic_base | 0xFFF0000000000000ULL) != 0);
    ASSERT_EQ(last_fault.count, n + 1);
    ASSERT_EQ(last_fault.vector, 13);
    ASSERT_EQ(last_fault.error_code, 0);
    ASSERT_EQ(rdmsr(IA32_APIC_BASE), apic_base);
    ASSERT_EQ(wrmsr_safe(IA32_APIC_BASE, apic_base), 0);
    printf("ok wrmsr_safe #GP(%lu) at %#lx, error code %lu\n", last_fault.vector,
           last_fault.rip, last_fault.error_code);

    /* rdmsr_safe of an MSR TCG does not know (IA32_RTIT_CTL): 0, no fault. */
    uint64_t v = 0xdead;
    n = last_fault.count;
    ASSERT_EQ(rdmsr_safe(0x570, &v), 0);
    ASSERT_EQ(v, 0);
    ASSERT_EQ(last_fault.count, n);
    printf("ok rdmsr_safe(0x570) = 0 without fault\n");

    /* Ring 3 and back, via SYSCALL and via int $0x80. */
    for (int how = USER_RET_SYSCALL; how <= USER_RET_INT80; how++) {
        user_cs = 0;
        n = last_fault.count;
        ASSERT_EQ(enter_user_ret(user_fn, NULL, how), 0x1234);
        ASSERT_EQ(user_cs & 3, 3);
        ASSERT_EQ(user_cs, USER_CS);
        ASSERT(user_rip >= USER_ALIAS_OFFSET && user_rip < USER_ALIAS_OFFSET + IDENTITY_SIZE);
        ASSERT_EQ(user_echo, 0x55 + 0x66);
        ASSERT(user_msr_rc != 0);
        ASSERT_EQ(last_fault.count, n + 1);
        ASSERT_EQ(last_fault.vector, 13);
        ASSERT_EQ(read_cs(), KERNEL_CS);
        printf("ok ring 3 (cs %#lx, rip %#lx), back via %s\n", user_cs, user_rip,
               how == USER_RET_SYSCALL ? "syscall" : "int $0x80");
    }

    /* int3: a trap, RIP points after it. */
    uint64_t after;
    set_handler(3, on_bp);
    asm volatile("int3\n1:\tlea 1b(%%rip), %0" : "=r"(after));
    ASSERT_EQ(hits, 1);
    ASSERT_EQ(hit_rip, after);
    ASSERT_EQ(hit_cs, KERNEL_CS);
    printf("ok int3 caught, rip %#lx\n", hit_rip);

    /* ud2: a fault, RIP points at it; the handler skips it. */
    uint64_t at;
    set_handler(6, on_ud);
    asm volatile("lea 1f(%%rip), %0\n1:\tud2" : "=r"(at));
    ASSERT_EQ(hits, 2);
    ASSERT_EQ(hit_rip, at);
    printf("ok #UD caught at %#lx and skipped\n", hit_rip);

    /* Page fault on an unmapped address: CR2, error code 0 (read, not present, ring 0). */
    uint64_t val = 0;
    set_handler(14, on_pf);
    asm volatile("lea 2f(%%rip), %%rax\n\t"
                 "mov %%rax, %[res]\n\t"
                 "lea 1f(%%rip), %[at]\n"
                 "1:\tmov (%[addr]), %[val]\n"
                 "2:"
                 : [val] "+r"(val), [res] "=m"(pf_resume), [at] "=&r"(at)
                 : [addr] "r"(UNMAPPED_ADDR + 0x123) : "rax", "memory");
    ASSERT_EQ(hits, 3);
    ASSERT_EQ(hit_rip, at);
    ASSERT_EQ(hit_cr2, UNMAPPED_ADDR + 0x123);
    ASSERT_EQ(hit_err, 0);
    printf("ok #PF caught, cr2 %#lx, error %lu\n", hit_cr2, hit_err);

    /* LAPIC timer interrupt. */
    lapic_enable();
    set_handler(TIMER_VECTOR, on_timer);
    lapic_timer_oneshot(TIMER_VECTOR, 100000);
    irq_enable();
    for (uint64_t i = 0; i < 200000000 && !timer_hits; i++)
        cpu_pause();
    irq_disable();
    ASSERT_EQ(timer_hits, 1);
    printf("ok LAPIC timer interrupt (vector %#x) at rip %#lx\n", TIMER_VECTOR, timer_rip);

    /* CR3 switch to the second root and back. */
    uint64_t root = read_cr3(), before = work(1000);
    ASSERT_EQ(root, cr3_main());
    ASSERT(cr3_alt() != cr3_main());
    load_cr3(cr3_alt());
    ASSERT_EQ(read_cr3(), cr3_alt());
    ASSERT_EQ(work(1000), before);
    uint64_t *page = alloc_pages(1);
    page[0] = 42;
    load_cr3(root);
    ASSERT_EQ(read_cr3(), cr3_main());
    ASSERT_EQ(page[0], 42);
    printf("ok CR3 %#lx -> %#lx -> %#lx, page %p\n", root, cr3_alt(), read_cr3(), page);
}
