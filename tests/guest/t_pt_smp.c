// qemu-options: -smp 4
/* Intel PT on four CPUs at once. The IA32_RTIT_* MSRs and the trace are per logical processor
 * (SDM Vol. 3C "Intel Processor Trace": "Software ... configures each logical processor"), and
 * under MTTCG QEMU runs the four vCPUs in parallel host threads.
 *  - The BSP programs its MSRs before any AP runs; every AP then finds the reset values (nothing
 *    of the BSP's configuration leaked) and programs its own: a distinct 64 KiB single-range
 *    buffer (OUTPUT_BASE), and distinct inert CR3_MATCH / ADDR0_A / ADDR0_B values. After a
 *    barrier (everyone has written) each CPU reads back exactly its own values.
 *  - ROUNDS lock-stepped rounds, all CPUs tracing at the same time (OS = BranchEn = 1): enable,
 *    a branchy loop with a CPU-specific iteration count, an indirect call to a CPU-specific leaf,
 *    MOV CR3 to the second root and back, a LAPIC timer interrupt (sti; hlt), disable.
 *  - Per CPU (checked by the BSP afterwards): PSB first, MASK_PTRS offset = the end of the last
 *    packet and nothing written past it, STATUS without Error/Stopped; ROUNDS x TIP.PGE at the
 *    enabling WRMSR's next IP, TIP.PGD, PIP(cr3_alt), PIP(cr3_main), TIP(timer stub); the leaf
 *    TIP of its own CPU only; every MODE.Exec says 64-bit; the streams of all CPUs differ.
 *  - The BSP dumps CPU n's buffer as lines "PTDUMP<n> <hex>"; tests/run-guest.sh compares each
 *    with the plugin's host copy of vCPU n (thread-<n+1>.pt). */
#include "pt.h"

#define NCPUS    4
#define BUF_SIZE 65536
#define ROUNDS   3

extern char isr_stubs[], pt_enable_wrmsr[], pt_disable_wrmsr[];

static uint8_t *bufs[NCPUS];
static volatile uint64_t timer_hits[NCPUS], sink[NCPUS];
static struct { uint64_t mp, status, base, ctl; } res[NCPUS];
static const uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN; /* ToPA = 0: single range */

static uint64_t cr3_match_of(int cpu) { return (uint64_t)(cpu + 1) << 12; }
static uint64_t addr_a_of(int cpu) { return 0x100000ull * (cpu + 1); }
static uint64_t addr_b_of(int cpu) { return 0x100000ull * (cpu + 1) + 0xFFF; }

static void on_timer(struct trap_frame *f)
{
    (void)f;
    timer_hits[cpu_id()]++;
    lapic_eoi();
}

__attribute__((noinline)) static uint64_t work(int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0)
            acc += i;
        else if (i % 5 == 1)
            acc ^= acc << 1;
        else
            acc -= 7;
    }
    return acc;
}

/* One leaf per CPU: its indirect call gives TIP(leaf) in that CPU's stream only. */
__attribute__((noinline)) static uint64_t leaf0(uint64_t x) { return x + 1; }
__attribute__((noinline)) static uint64_t leaf1(uint64_t x) { return x * 3; }
__attribute__((noinline)) static uint64_t leaf2(uint64_t x) { return x ^ 0x55; }
__attribute__((noinline)) static uint64_t leaf3(uint64_t x) { return x - 9; }
typedef uint64_t (*leaf_fn)(uint64_t);

static leaf_fn leaf_of(int cpu)
{
    leaf_fn f = cpu == 0 ? leaf0 : cpu == 1 ? leaf1 : cpu == 2 ? leaf2 : leaf3;
    asm volatile("" : "+r"(f));
    return f;
}

/* The enabling and disabling WRMSRs, each at one known address. */
__attribute__((noinline, noclone)) static void trace_on(uint64_t v)
{
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}
__attribute__((noinline, noclone)) static void trace_off(uint64_t v)
{
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}

static void check_reset_values(void)
{
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), 0);
    /* FilterEn and ContextEn are the processor's view of the current IP/context (as t_pt_gp). */
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & ~(RTIT_STATUS_FILTEREN | RTIT_STATUS_CONTEXTEN), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0x7F);
    ASSERT_EQ(rdmsr(IA32_RTIT_CR3_MATCH), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR0_A), 0);
}

static void program(int cpu)
{
    bufs[cpu] = alloc_aligned(BUF_SIZE, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)bufs[cpu]);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1); /* 64 KiB range, offset 0 */
    wrmsr(IA32_RTIT_STATUS, 0);
    wrmsr(IA32_RTIT_CR3_MATCH, cr3_match_of(cpu));  /* inert: CR3Filter = 0 */
    wrmsr(IA32_RTIT_ADDR0_A, addr_a_of(cpu));       /* inert: ADDR0_CFG = 0 */
    wrmsr(IA32_RTIT_ADDR0_B, addr_b_of(cpu));
}

static void check_own_values(int cpu)
{
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)bufs[cpu]);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) & 0xFFFFFFFF, BUF_SIZE - 1);
    ASSERT_EQ(rdmsr(IA32_RTIT_CR3_MATCH), cr3_match_of(cpu));
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR0_A), addr_a_of(cpu));
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR0_B), addr_b_of(cpu));
}

static int iterations(int cpu, int round) { return 3000 + 1000 * cpu + 37 * round; }

static void per_cpu(int cpu)
{
    if (cpu != 0) {
        check_reset_values(); /* the BSP's MSRs are programmed by now */
        program(cpu);
    }
    smp_barrier(); /* every CPU has programmed its MSRs */
    check_own_values(cpu);
    for (int round = 0; round < ROUNDS; round++) {
        smp_barrier(); /* all CPUs trace at the same time */
        uint64_t hits = timer_hits[cpu];
        trace_on(ctl | RTIT_CTL_TRACEEN);
        sink[cpu] += work(iterations(cpu, round));
        sink[cpu] += leaf_of(cpu)(round);
        load_cr3(cr3_alt());
        sink[cpu] += work(50 + cpu);
        load_cr3(cr3_main());
        lapic_timer_oneshot(TIMER_VECTOR, 20000 + 5000 * cpu);
        while (timer_hits[cpu] == hits)
            asm volatile("sti; hlt; cli" ::: "memory");
        trace_off(ctl);
        ASSERT_EQ(timer_hits[cpu], hits + 1);
        ASSERT_EQ(rdmsr(IA32_RTIT_CTL), ctl);
        ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    }
    smp_barrier();
    check_own_values(cpu);
    res[cpu].mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    res[cpu].status = rdmsr(IA32_RTIT_STATUS);
    res[cpu].base = rdmsr(IA32_RTIT_OUTPUT_BASE);
    res[cpu].ctl = rdmsr(IA32_RTIT_CTL);
    printf("cpu %d (LAPIC ID %d): %lu bytes at %p, MASK_PTRS %lx, STATUS %lx\n", cpu, cpu_id(),
           res[cpu].mp >> 32, bufs[cpu], res[cpu].mp, res[cpu].status);
}

static int count_tip(const struct pt_pkt *pk, int n, enum pt_kind kind, uint64_t ip)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        c += pk[i].kind == kind && pk[i].ipbytes && pk[i].ip == ip;
    return c;
}

static void check_stream(int cpu, struct pt_pkt *pk, int max)
{
    const uint8_t *buf = bufs[cpu];
    uint64_t len = res[cpu].mp >> 32;
    ASSERT_EQ(res[cpu].base, (uint64_t)buf);
    ASSERT_EQ(res[cpu].ctl, ctl);
    ASSERT_EQ(res[cpu].mp & 0xFFFFFFFF, BUF_SIZE - 1);
    ASSERT_EQ(res[cpu].status & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT(len > 16 && len < BUF_SIZE - 4096); /* no wrap */
    ASSERT(pt_has_psb(buf));
    /* The offset is where the stream ends: packets up to it, nothing written after it. */
    ASSERT_EQ(pt_first_nonzero(buf + len, BUF_SIZE - len), BUF_SIZE - len);
    int n = pt_parse_all(buf, len, pk, max);
    if (n < 0) {
        pt_print(buf, len);
        printf("cpu %d: ", cpu);
        test_fail("unparsable trace");
    }
    int pge = 0, pgd = 0, pip_alt = 0, pip_main = 0, in_psb = 0, last = -1;
    for (int i = 0; i < n; i++) {
        const struct pt_pkt *k = &pk[i];
        if (k->kind != PT_PAD)
            last = i;
        if (k->kind == PT_PSB)
            in_psb = 1;
        else if (k->kind == PT_PSBEND)
            in_psb = 0;
        else if (k->kind == PT_TIP_PGE) {
            pge++;
            ASSERT_EQ(k->ip, (uint64_t)pt_enable_wrmsr + 2);
        } else if (k->kind == PT_TIP_PGD)
            pgd++;
        else if (k->kind == PT_PIP && !in_psb) {
            pip_alt += k->val == cr3_alt();
            pip_main += k->val == cr3_main();
        } else if (k->kind == PT_MODE && (k->val >> 5) == 0 && k->val != 0x01) {
            printf("cpu %d: MODE.Exec %lx at %#lx (expected 64-bit, 0x01)\n", cpu, k->val, k->off);
            test_fail("MODE.Exec");
        }
    }
    int timer = count_tip(pk, n, PT_TIP, (uint64_t)isr_stubs + 16 * TIMER_VECTOR);
    printf("cpu %d: %d packets: %d TIP.PGE, %d TIP.PGD, PIP alt/main %d/%d, %d timer TIPs, leaf TIPs",
           cpu, n, pge, pgd, pip_alt, pip_main, timer);
    for (int j = 0; j < NCPUS; j++)
        printf(" %d", count_tip(pk, n, PT_TIP, (uint64_t)leaf_of(j)));
    printf("\n");
    ASSERT_EQ(pge, ROUNDS);
    ASSERT_EQ(pgd, ROUNDS);
    ASSERT_EQ(pip_alt, ROUNDS);
    ASSERT_EQ(pip_main, ROUNDS);
    ASSERT_EQ(timer, ROUNDS);
    for (int j = 0; j < NCPUS; j++)
        ASSERT_EQ(count_tip(pk, n, PT_TIP, (uint64_t)leaf_of(j)), j == cpu ? ROUNDS : 0);
    /* The stream ends with the last disabling WRMSR: FUP(pt_disable_wrmsr), TIP.PGD. */
    ASSERT(last > 0);
    ASSERT_EQ(pk[last].kind, PT_TIP_PGD);
    int fup = pt_prev_nonpad(pk, last);
    ASSERT(fup >= 0);
    ASSERT_EQ(pk[fup].kind, PT_FUP);
    ASSERT_EQ(pk[fup].ip, (uint64_t)pt_disable_wrmsr);
}

void test_main(void)
{
    set_handler(TIMER_VECTOR, on_timer);
    lapic_enable();
    ASSERT_EQ(cpu_id(), 0);
    check_reset_values();
    program(0); /* before any AP runs */

    ASSERT_EQ(smp_start(per_cpu, NCPUS), NCPUS);
    ASSERT_EQ(smp_cpus(), NCPUS);
    per_cpu(0);
    smp_join();

    uint64_t max_len = 0;
    for (int cpu = 0; cpu < NCPUS; cpu++)
        if (res[cpu].mp >> 32 > max_len)
            max_len = res[cpu].mp >> 32;
    ASSERT(max_len < BUF_SIZE);
    struct pt_pkt *pk = alloc_pages((max_len * sizeof(struct pt_pkt) + 4095) / 4096);
    for (int cpu = 0; cpu < NCPUS; cpu++)
        check_stream(cpu, pk, (int)max_len);
    for (int i = 0; i < NCPUS; i++)
        for (int j = i + 1; j < NCPUS; j++)
            ASSERT(res[i].mp >> 32 != res[j].mp >> 32 ||
                   memcmp(bufs[i], bufs[j], res[i].mp >> 32) != 0);

    for (int cpu = 0; cpu < NCPUS; cpu++) {
        char tag[] = "PTDUMP0";
        tag[6] = (char)('0' + cpu);
        pt_dump_tagged(tag, bufs[cpu], res[cpu].mp >> 32);
    }
}
