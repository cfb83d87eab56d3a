/* TSS, IDT, trap dispatch and exception-table fixups. */
#include "guest.h"

/* 64-bit TSS (SDM Vol. 3A "Task Management in 64-bit Mode"): only RSP0 and the IST
 * pointers are used. */
struct tss64 {
    uint32_t reserved0;
    uint64_t rsp[3];
    uint64_t reserved1;
    uint64_t ist[7];
    uint64_t reserved2;
    uint16_t reserved3, iomap_base;
} __attribute__((packed));

/* 64-bit IDT gate (SDM Vol. 3A §6.14.1 "64-Bit Mode IDT"). */
struct idt_gate {
    uint16_t off0, sel;
    uint8_t ist, type; /* type: P | DPL << 5 | 0xE (interrupt gate: clears IF) */
    uint16_t off1;
    uint32_t off2, reserved;
} __attribute__((packed));

struct extable_entry { uint64_t insn, fixup; };

extern uint64_t gdt[];
extern char isr_stubs[], rsp0_stack_top[], ist_nmi_top[], ist_df_top[];
extern const struct extable_entry __extable_start[], __extable_end[];

static struct tss64 tss[MAX_CPUS] __attribute__((aligned(16))); /* one per CPU (smp.c) */
static struct idt_gate idt[256] __attribute__((aligned(16)));
static trap_handler_t handlers[256];
volatile struct fault_info last_fault;

static const char *const exc_names[32] = {
    "#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "", "#TS", "#NP", "#SS",
    "#GP", "#PF", "", "#MF", "#AC", "#MC", "#XM", "#VE", "#CP",
};

/* Fills CPU `cpu`'s TSS and its 16-byte descriptor at TSS_SEL + 16 * cpu (SDM Vol. 3A "TSS
 * Descriptor in 64-bit mode"), loads TR. Each CPU needs its own descriptor: LTR marks it busy. */
void tss_init(int cpu, uint64_t rsp0, uint64_t ist_nmi, uint64_t ist_df)
{
    struct tss64 *t = &tss[cpu];
    uint64_t base = (uint64_t)t, limit = sizeof(*t) - 1;
    uint16_t sel = TSS_SEL + 16 * cpu;
    t->rsp[0] = rsp0;
    t->ist[0] = ist_nmi; /* IST1 */
    t->ist[1] = ist_df;  /* IST2 */
    t->iomap_base = sizeof(*t); /* no I/O bitmap: ring-3 IN/OUT fault */
    gdt[sel / 8] = (limit & 0xFFFF) | ((base & 0xFFFFFF) << 16) | (0x89ULL << 40) |
                   ((limit >> 16 & 0xF) << 48) | ((base >> 24 & 0xFF) << 56);
    gdt[sel / 8 + 1] = base >> 32;
    asm volatile("ltr %w0" : : "r"(sel));
}

void gdt_init(void)
{
    tss_init(0, (uint64_t)rsp0_stack_top, (uint64_t)ist_nmi_top, (uint64_t)ist_df_top);
}

static void set_gate(int v, int ist, int dpl)
{
    uint64_t off = (uint64_t)isr_stubs + 16 * v;
    idt[v] = (struct idt_gate){ .off0 = off & 0xFFFF, .sel = KERNEL_CS, .ist = ist,
                                .type = 0x8E | dpl << 5, .off1 = off >> 16 & 0xFFFF,
                                .off2 = off >> 32 };
}

/* LIDT of the shared IDT (every CPU, smp.c). */
void idt_load(void)
{
    struct { uint16_t limit; uint64_t base; } __attribute__((packed)) idtr = { sizeof(idt) - 1,
                                                                             (uint64_t)idt };
    asm volatile("lidt %0" : : "m"(idtr));
}

void idt_init(void)
{
    for (int v = 0; v < 256; v++)
        set_gate(v, v == 2 ? 1 : v == 8 ? 2 : 0, 0);
    idt_set_dpl(3, 3); /* int3 / into from ring 3 raise #BP / #OF, not #GP */
    idt_set_dpl(4, 3);
    idt_set_dpl(SYSCALL_VECTOR, 3);
    idt_load();
}

void idt_set_dpl(uint8_t vector, int dpl)
{
    idt[vector].type = 0x8E | (dpl & 3) << 5;
}

trap_handler_t set_handler(uint8_t vector, trap_handler_t fn)
{
    trap_handler_t old = handlers[vector];
    handlers[vector] = fn;
    return old;
}

void trap_dump(const struct trap_frame *f)
{
    printf("trap: vector %lu %s error %#lx\n", f->vector,
           f->vector < 32 ? exc_names[f->vector] : "", f->error_code);
    printf("  rip %016lx cs %04lx rflags %08lx rsp %016lx ss %04lx cr2 %016lx cr3 %lx\n",
           f->rip, f->cs, f->rflags, f->rsp, f->ss, read_cr2(), read_cr3());
    printf("  rax %016lx rbx %016lx rcx %016lx rdx %016lx\n", f->rax, f->rbx, f->rcx, f->rdx);
    printf("  rsi %016lx rdi %016lx rbp %016lx r8  %016lx\n", f->rsi, f->rdi, f->rbp, f->r8);
}

/* An exception at a RIP listed in __extable resumes at its fixup (the Linux scheme). */
static int extable_fixup(struct trap_frame *f)
{
    uint64_t off = f->rip >= USER_ALIAS_OFFSET && f->rip < USER_ALIAS_OFFSET + IDENTITY_SIZE
                       ? USER_ALIAS_OFFSET : 0;
    for (const struct extable_entry *e = __extable_start; e < __extable_end; e++) {
        if (e->insn + off != f->rip)
            continue;
        last_fault.vector = f->vector;
        last_fault.error_code = f->error_code;
        last_fault.rip = f->rip;
        last_fault.cr2 = f->vector == 14 ? read_cr2() : 0;
        last_fault.count++;
        f->rip = e->fixup + off;
        return 1;
    }
    return 0;
}

void trap_dispatch(struct trap_frame *f)
{
    if (f->vector < 32 && extable_fixup(f))
        return;
    if (handlers[f->vector]) {
        handlers[f->vector](f);
        return;
    }
    printf("unhandled ");
    trap_dump(f);
    test_fail("unhandled trap");
}
