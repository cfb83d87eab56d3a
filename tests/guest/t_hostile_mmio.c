/* Trace output that never reaches a device (issue 12; SDM Vol. 3C §33.2.7.4 "Restricted Memory
 * Access", seed 000; Table 33-5).
 *
 * "Packet output cannot be steered to the 4-KByte local APIC MMIO page defined by IA32_APIC_BASE;
 * such stores are dropped and generate no error." The plugin treats every other non-RAM target
 * (IOAPIC, HPET, ROM, unassigned) the same way for output regions, and a ToPA *table* outside RAM
 * as the operational error of Table 33-5 (pt/output/mod.rs). BTS records aimed at non-RAM are
 * not written (counted at exit). In every case no store and no read reaches the device:
 *
 *  1. ToPA output region on the APIC page (FEE00000H), 2 regions: the APIC registers read back
 *     unchanged, no error, the output pointer moves on into the RAM region after it.
 *  2. ToPA table on the APIC page: operational error (STATUS.Error), APIC unchanged.
 *  3. Output region on the IOAPIC (FEC00000H) and HPET (FED00000H) pages, and a single range on
 *     the IOAPIC: their registers read back unchanged, no error.
 *  4. IA32_APIC_BASE relocated onto a RAM page: the region there is the APIC page now, so the
 *     bytes are dropped (a sentinel pattern in that RAM stays), the next region gets the rest.
 *  5. BTS buffer on the APIC page: APIC unchanged, the index does not move.
 *  6. x2APIC mode, region on FEE00000H: APIC state (read through the x2APIC MSRs) unchanged.
 * After each case a sane single-range configuration traces normally (PSB, no error).
 * Every trace byte aimed at non-RAM is accounted for: the guest adds up the bytes its output
 * pointers moved over non-RAM (a full 4 KiB first region in cases 1, 3a, 3b, 4, 6; the single
 * range's offset in case 3) and prints RESTRICTED_BYTES; the host requires the plugin's exit
 * counter ("N trace bytes aimed at memory that is not RAM were dropped") to equal it. */
// host-check: restricted-bytes
#include "bts.h"
#include "pt.h"
#include "pt_churn.h"

#define IOAPIC_BASE 0xFEC00000ull
#define HPET_BASE   0xFED00000ull
#define APIC_BASE_EN  (1ull << 11)
#define APIC_BASE_BSP (1ull << 8)
#define APIC_BASE_EXTD (1ull << 10)

static const uint64_t CTL_TOPA = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TOPA;
static const uint64_t CTL_SINGLE = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
static const uint32_t apic_regs[] = { 0x080 /* TPR */, 0x0F0 /* SVR */, 0x300, 0x310 /* ICR */,
                                      0x320, 0x340, 0x350, 0x360, 0x370 /* LVTs */, 0x3E0, 0x380 };
#define N_APIC (sizeof apic_regs / sizeof apic_regs[0])

struct devices { uint32_t apic[N_APIC]; uint32_t ioapic[2 + 48]; uint64_t hpet[4]; };

static uint32_t ioapic_read(uint32_t reg)
{
    mmio_write32(IOAPIC_BASE, reg);
    return mmio_read32(IOAPIC_BASE + 0x10);
}

static void snapshot(struct devices *d)
{
    for (unsigned i = 0; i < N_APIC; i++)
        d->apic[i] = lapic_read(apic_regs[i]);
    d->ioapic[0] = ioapic_read(0);
    d->ioapic[1] = ioapic_read(1);
    for (unsigned i = 0; i < 48; i++)
        d->ioapic[2 + i] = ioapic_read(0x10 + i);
    static const uint32_t hpet_regs[4] = { 0x000, 0x010, 0x100, 0x108 };
    for (unsigned i = 0; i < 4; i++)
        d->hpet[i] = *(volatile uint64_t *)(HPET_BASE + hpet_regs[i]);
}

static void check_unchanged(const char *what, const struct devices *before)
{
    struct devices now;
    snapshot(&now);
    for (unsigned i = 0; i < N_APIC; i++)
        if (now.apic[i] != before->apic[i]) {
            printf("%s: APIC register %x changed: %x -> %x\n", what, apic_regs[i], before->apic[i], now.apic[i]);
            test_fail("APIC register changed");
        }
    for (unsigned i = 0; i < 50; i++)
        if (now.ioapic[i] != before->ioapic[i]) {
            printf("%s: IOAPIC register %u changed: %x -> %x\n", what, i, before->ioapic[i], now.ioapic[i]);
            test_fail("IOAPIC register changed");
        }
    for (unsigned i = 0; i < 4; i++)
        if (now.hpet[i] != before->hpet[i]) {
            printf("%s: HPET register %u changed: %lx -> %lx\n", what, i, before->hpet[i], now.hpet[i]);
            test_fail("HPET register changed");
        }
    printf("%s: APIC, IOAPIC and HPET registers unchanged\n", what);
}

/* Two 4 KiB regions, `first` then `second`, END back to the table (circular). */
static uint64_t *table;
static void topa_two(uint64_t first, uint64_t second)
{
    table[0] = first | TOPA_SIZE(0);
    table[1] = second | TOPA_SIZE(0);
    table[2] = (uint64_t)table | TOPA_END;
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)table);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F);
    wrmsr(IA32_RTIT_STATUS, 0);
}

/* A sane single range afterwards traces normally. */
static uint8_t *sane;
static void sane_run(void)
{
    memset(sane, 0, 4096);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)sane);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_SINGLE, 20);
    ASSERT(pt_has_psb(sane));
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT((rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32) > 16);
}

/* ~5 KiB of trace: the first region fills, the second gets the rest. */
static uint64_t n_5k;

/* Trace bytes the output pointers moved over non-RAM. */
static uint64_t restricted;

static void expect_dropped_then_second(const char *what, uint8_t *second)
{
    restricted += 4096; /* the whole first region, then entry 1 */
    uint64_t st = rdmsr(IA32_RTIT_STATUS), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    printf("%s: STATUS %lx MASK_PTRS %lx\n", what, st, mp);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(((mp >> 7) & 0x1FFFFFF), 1); /* proc_trace_table_offset: entry 1 */
    ASSERT((mp >> 32) > 0);
    ASSERT(pt_first_nonzero(second, 4096) < 4096);
}

void test_main(void)
{
    irq_disable();
    lapic_enable();
    /* Distinctive values in the writable APIC registers. */
    lapic_write(0x080, 0x20);
    lapic_write(LAPIC_LVT_TIMER, 0x10000 | 0x45);
    lapic_write(LAPIC_LVT_PERF, 0x10000 | 0x46);
    lapic_write(LAPIC_TIMER_DIV, 0x3);
    struct devices dev;
    snapshot(&dev);
    table = alloc_aligned(4096, 4096);
    sane = alloc_aligned(4096, 4096);
    uint8_t *second = alloc_aligned(4096, 4096);

    /* How many churn iterations make ~5 KiB. */
    memset(second, 0, 4096);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)second);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    traced_run(CTL_SINGLE, 100);
    uint64_t per100 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    ASSERT(per100 > 16);
    n_5k = 100 * 5000 / per100;
    printf("%lu bytes per 100 iterations; %lu iterations for ~5 KiB\n", per100, n_5k);

    /* 1. */
    memset(second, 0, 4096);
    topa_two(LAPIC_BASE, (uint64_t)second);
    traced_run(CTL_TOPA, n_5k);
    expect_dropped_then_second("1. ToPA region on the APIC page", second);
    check_unchanged("1", &dev);
    sane_run();

    /* 2. */
    wrmsr(IA32_RTIT_OUTPUT_BASE, LAPIC_BASE);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_TOPA, 50);
    printf("2. ToPA table on the APIC page: STATUS while on %lx\n", traced_status_on);
    ASSERT(traced_status_on & RTIT_STATUS_ERROR);
    check_unchanged("2", &dev);
    sane_run();

    /* 3. */
    memset(second, 0, 4096);
    topa_two(IOAPIC_BASE, (uint64_t)second);
    traced_run(CTL_TOPA, n_5k);
    expect_dropped_then_second("3a. ToPA region on the IOAPIC page", second);
    memset(second, 0, 4096);
    topa_two(HPET_BASE, (uint64_t)second);
    traced_run(CTL_TOPA, n_5k);
    expect_dropped_then_second("3b. ToPA region on the HPET page", second);
    wrmsr(IA32_RTIT_OUTPUT_BASE, IOAPIC_BASE);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_SINGLE, 100 * 3000 / per100); /* ~3000 bytes: no wrap in the 4 KiB range */
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR, 0);
    uint64_t single = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    printf("3c. single range on the IOAPIC page: %lu bytes\n", single);
    ASSERT(single > 0 && single < 4096);
    restricted += single;
    check_unchanged("3", &dev);
    sane_run();

    /* 4. The APIC page moved onto RAM. */
    uint8_t *moved = alloc_aligned(4096, 4096);
    memset(moved, 0xA5, 4096);
    uint64_t apic_base = rdmsr(IA32_APIC_BASE);
    wrmsr(IA32_APIC_BASE, (uint64_t)moved | (apic_base & 0xFFF));
    ASSERT_EQ(rdmsr(IA32_APIC_BASE) & ~0xFFFull, (uint64_t)moved);
    memset(second, 0, 4096);
    topa_two((uint64_t)moved, (uint64_t)second);
    traced_run(CTL_TOPA, n_5k);
    wrmsr(IA32_APIC_BASE, apic_base);
    expect_dropped_then_second("4. ToPA region on the relocated APIC page", second);
    for (int i = 0; i < 4096; i++)
        if (moved[i] != 0xA5) {
            printf("relocated APIC page written at %d: %x\n", i, moved[i]);
            test_fail("trace bytes stored on the APIC page");
        }
    check_unchanged("4", &dev);
    sane_run();

    /* 5. BTS buffer on the APIC page (DS area in RAM). */
    struct ds_area *ds = alloc_aligned(4096, 4096);
    ds->bts_base = ds->bts_index = LAPIC_BASE;
    ds->bts_max = LAPIC_BASE + 16 * sizeof(struct bts_record);
    ds->bts_threshold = ds->bts_max + sizeof(struct bts_record);
    wrmsr(IA32_DS_AREA, (uint64_t)ds);
    wrmsr(IA32_DEBUGCTL, DEBUGCTL_TR | DEBUGCTL_BTS);
    churn_sink = churn(20);
    wrmsr(IA32_DEBUGCTL, 0);
    printf("5. BTS buffer on the APIC page: index %lx\n", ds->bts_index);
    ASSERT_EQ(ds->bts_index, LAPIC_BASE);
    check_unchanged("5", &dev);

    /* 6. x2APIC mode (kept to the end: leaving it resets the APIC). */
    uint32_t r[4];
    cpuid(1, 0, r);
    if (r[2] & (1u << 21)) {
        wrmsr(IA32_APIC_BASE, apic_base | APIC_BASE_EXTD);
        uint64_t x2[4] = { rdmsr(0x808), rdmsr(0x80F), rdmsr(0x832), rdmsr(0x834) };
        memset(second, 0, 4096);
        topa_two(LAPIC_BASE, (uint64_t)second);
        traced_run(CTL_TOPA, n_5k);
        expect_dropped_then_second("6. x2APIC mode, ToPA region on FEE00000H", second);
        uint64_t now[4] = { rdmsr(0x808), rdmsr(0x80F), rdmsr(0x832), rdmsr(0x834) };
        for (int i = 0; i < 4; i++)
            ASSERT_EQ(now[i], x2[i]);
        printf("6: x2APIC TPR/SVR/LVT timer/LVTPC unchanged\n");
        sane_run();
    } else {
        test_fail("CPUID.1:ECX[21] x2APIC missing under -cpu max");
    }
    printf("hostile output targets: guest, devices and QEMU unchanged\n");
    printf("RESTRICTED_BYTES %lu\n", restricted);
}
