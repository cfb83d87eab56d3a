/* Application processors (SDM Vol. 3A "Multiple-Processor (MP) Initialization", "MP
 * Initialization Protocol Algorithm"): the BSP starts each AP in turn with INIT-SIPI-SIPI through
 * the xAPIC ICR; the AP runs smp_boot.S (real mode -> long mode with the BSP's page tables), then
 * ap_main(): IDT, its own TSS (own RSP0/IST stacks), its LAPIC, then the test's function. */
#include "guest.h"

extern char ap_tramp_start[], ap_tramp_end[];
void tss_init(int cpu, uint64_t rsp0, uint64_t ist_nmi, uint64_t ist_df);
void idt_load(void);

#define AP_STACK   65536 /* kernel stack, as the BSP's boot stack */
#define AP_SMALL   16384 /* RSP0, IST1 (NMI), IST2 (#DF) */

/* xAPIC ICR (SDM Vol. 3A "Interrupt Command Register (ICR)"): delivery mode 10:8, delivery
 * status 12, level 14; destination (APIC ID) in ICR_HI 31:24. */
#define ICR_INIT        0x00000500
#define ICR_STARTUP     0x00000600
#define ICR_BUSY        0x00001000
#define ICR_LEVEL_ASSERT 0x00004000

/* QEMU fw_cfg, I/O interface (docs/specs/fw_cfg.rst): 16-bit selector at 0x510, data at 0x511. */
#define FW_CFG_PORT_SEL  0x510
#define FW_CFG_PORT_DATA 0x511
#define FW_CFG_SIGNATURE 0x00
#define FW_CFG_NB_CPUS   0x05

/* Generous TSC bounds (the TSC counts host cycles under TCG, ~1-4 GHz): INIT -> SIPI delay
 * (SDM: 10 ms), SIPI -> SIPI (200 us), and how long anything may take before the test fails. */
#define TSC_10MS    (10ull * 1000 * 1000)
#define TSC_200US   (200ull * 1000)
#define TSC_TIMEOUT (1ull << 35)

volatile uint64_t ap_boot_rsp;          /* stack of the AP being started (smp_boot.S) */
static volatile int ap_boot_cpu, ap_alive;
static void (*ap_fn)(int cpu);
static volatile int ncpus_running = 1, aps_done;
static volatile int bar_count, bar_gen;
int smp_active;                          /* APs were started: printf takes its lock */
static struct { uint64_t stack_top, rsp0, ist_nmi, ist_df; } percpu[MAX_CPUS];

int cpu_id(void) { return lapic_read(LAPIC_ID) >> 24; }
int smp_cpus(void) { return ncpus_running; }

static uint8_t fw_cfg_byte(void) { return inb(FW_CFG_PORT_DATA); }

int smp_cpu_count(void)
{
    outw(FW_CFG_PORT_SEL, FW_CFG_SIGNATURE);
    char sig[4];
    for (int i = 0; i < 4; i++)
        sig[i] = fw_cfg_byte();
    if (memcmp(sig, "QEMU", 4) != 0)
        return 1;
    outw(FW_CFG_PORT_SEL, FW_CFG_NB_CPUS);
    int n = fw_cfg_byte();
    n |= fw_cfg_byte() << 8;
    return n > 0 ? n : 1;
}

static void icr_send(int apic_id, uint32_t lo)
{
    lapic_write(LAPIC_ICR_HI, (uint32_t)apic_id << 24);
    lapic_write(LAPIC_ICR_LO, lo);
    uint64_t t0 = rdtsc();
    while (lapic_read(LAPIC_ICR_LO) & ICR_BUSY)
        if (rdtsc() - t0 > TSC_TIMEOUT)
            test_fail("smp: IPI stays pending in the ICR");
}

/* Waits until *flag != 0 or `ticks` TSC ticks passed; returns the flag. */
static int wait_flag(volatile int *flag, uint64_t ticks)
{
    uint64_t t0 = rdtsc();
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE) && rdtsc() - t0 < ticks)
        cpu_pause();
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

static void tsc_delay(uint64_t ticks)
{
    uint64_t t0 = rdtsc();
    while (rdtsc() - t0 < ticks)
        cpu_pause();
}

/* Called by smp_boot.S on the AP's own stack, in 64-bit mode with the main GDT. */
_Noreturn void ap_main(void)
{
    int cpu = ap_boot_cpu;
    idt_load();
    tss_init(cpu, percpu[cpu].rsp0, percpu[cpu].ist_nmi, percpu[cpu].ist_df);
    lapic_enable();
    if (cpu_id() != cpu) {
        printf("smp: CPU %d has LAPIC ID %d\n", cpu, cpu_id());
        test_fail("smp: LAPIC ID != CPU number");
    }
    __atomic_store_n(&ap_alive, 1, __ATOMIC_RELEASE);
    ap_fn(cpu);
    __atomic_add_fetch(&aps_done, 1, __ATOMIC_ACQ_REL);
    for (;;)
        asm volatile("cli; hlt");
}

int smp_start(void (*fn)(int cpu), int ncpus)
{
    int avail = smp_cpu_count();
    if (ncpus <= 0)
        ncpus = avail;
    if (ncpus > avail || ncpus > MAX_CPUS) {
        printf("smp_start: %d CPUs wanted, QEMU has %d (source line `// qemu-options: -smp %d`), "
               "the library at most %d\n", ncpus, avail, ncpus, MAX_CPUS);
        test_fail("smp_start: not enough CPUs");
    }
    if (smp_active)
        test_fail("smp_start: called twice");
    if (cpu_id() != 0)
        test_fail("smp_start: the BSP's LAPIC ID is not 0");
    lapic_enable();
    memcpy((void *)AP_TRAMPOLINE, ap_tramp_start, ap_tramp_end - ap_tramp_start);
    ap_fn = fn;
    ncpus_running = ncpus;
    smp_active = 1;
    /* QEMU numbers the LAPICs 0..N-1 (default topology): CPU n is LAPIC ID n. */
    for (int cpu = 1; cpu < ncpus; cpu++) {
        uint8_t *s = alloc_pages((AP_STACK + 3 * AP_SMALL) / 4096);
        percpu[cpu].stack_top = (uint64_t)s + AP_STACK;
        percpu[cpu].rsp0 = percpu[cpu].stack_top + AP_SMALL;
        percpu[cpu].ist_nmi = percpu[cpu].rsp0 + AP_SMALL;
        percpu[cpu].ist_df = percpu[cpu].ist_nmi + AP_SMALL;
        ap_boot_cpu = cpu;
        ap_boot_rsp = percpu[cpu].stack_top;
        __atomic_store_n(&ap_alive, 0, __ATOMIC_RELEASE);
        /* INIT (the firmware left the AP halted, not waiting for SIPI), 10 ms, SIPI, 200 us,
         * a second SIPI only if the AP has not come up (a running AP ignores it anyway). */
        icr_send(cpu, ICR_INIT | ICR_LEVEL_ASSERT);
        tsc_delay(TSC_10MS);
        for (int sipi = 0; sipi < 2 && !ap_alive; sipi++) {
            icr_send(cpu, ICR_STARTUP | ICR_LEVEL_ASSERT | (AP_TRAMPOLINE >> 12));
            wait_flag(&ap_alive, sipi == 0 ? TSC_200US : TSC_TIMEOUT);
        }
        if (!ap_alive) {
            printf("smp_start: CPU %d did not start\n", cpu);
            test_fail("smp_start: AP start-up");
        }
    }
    return ncpus;
}

void smp_join(void)
{
    uint64_t t0 = rdtsc();
    while (__atomic_load_n(&aps_done, __ATOMIC_ACQUIRE) < ncpus_running - 1) {
        if (rdtsc() - t0 > TSC_TIMEOUT) {
            printf("smp_join: %d of %d APs finished\n", aps_done, ncpus_running - 1);
            test_fail("smp_join: timeout");
        }
        cpu_pause();
    }
}

/* Generation barrier: the last CPU to arrive resets the count, then releases the others. */
void smp_barrier(void)
{
    int gen = __atomic_load_n(&bar_gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&bar_count, 1, __ATOMIC_ACQ_REL) == ncpus_running) {
        __atomic_store_n(&bar_count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&bar_gen, gen + 1, __ATOMIC_RELEASE);
        return;
    }
    uint64_t t0 = rdtsc();
    while (__atomic_load_n(&bar_gen, __ATOMIC_ACQUIRE) == gen) {
        if (rdtsc() - t0 > TSC_TIMEOUT) {
            printf("smp_barrier: CPU %d waited for %d of %d CPUs\n", cpu_id(),
                   ncpus_running - bar_count, ncpus_running);
            test_fail("smp_barrier: timeout");
        }
        cpu_pause();
    }
}
