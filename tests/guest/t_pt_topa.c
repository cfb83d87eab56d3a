/* ToPA output (SDM Vol. 3C §33.2.7.2 "Table of Physical Addresses (ToPA)"; seed 000, ToPA PMI
 * text in seed 003): circular and chained tables, the INT (PMI) and STOP entry attributes.
 *
 * The processor keeps proc_trace_table_base (read back in IA32_RTIT_OUTPUT_BASE),
 * proc_trace_table_offset (MASK_PTRS[31:7] = entry index) and proc_trace_output_offset
 * (MASK_PTRS[63:32]). A full region moves the pointer to the next entry with offset 0; an END
 * entry loads the table base from the entry, index 0, offset 0. After TraceEn is cleared the
 * MSRs hold the final values.
 *
 * Content check: no timing packets are enabled, so the same code path traced from the same
 * enabling WRMSR produces the same bytes every run (checked by tracing it twice). A reference
 * run into a 128 KiB single range gives the stream (length T); a ToPA run of the same workload
 * must hold stream byte p at position p mod C of the concatenated regions (C = their total size)
 * for the last C bytes, zeros where nothing was written, and leave the pointers at position
 * T mod C.
 *
 * PMI (seed 003; shared/reference/linux-guest.md): an INT=1 region that fills sets
 * IA32_PERF_GLOBAL_STATUS[55] (Trace_ToPA_PMI) and raises the PMI through the local APIC's
 * performance-counter LVT (0xFEE00340), here in NMI mode; writing bit 55 to
 * IA32_PERF_GLOBAL_STATUS_RESET (390H) clears it. The processor masks LVTPC when it delivers the
 * PMI (seed 001 §9.2.7: "entering the PMI handler the processor masks the LVT performance
 * monitor register and does not unmask it"; Linux re-arms LVTPC at the end of its handler).
 *
 * STOP (§33.2.7.2 "ToPA STOP"; Table 33-3): when a STOP=1 region fills, IA32_RTIT_STATUS.Stopped
 * is set (TriggerEn = 0), output ceases after the last byte of the region, OUTPUT_BASE holds
 * that table, MaskOrTableOffset that entry's index and OutputOffset the region size (the byte
 * after the end: English SDM and Linux pt.c agree; the seed's "size - 1" contradicts its own next
 * sentence). TraceEn stays 1 until software clears it; with Stopped still set, re-enabling
 * produces nothing; with Stopped cleared and the pointer still at offset = size, enabling is an
 * "Illegal ToPA Output Offset" operational error (ToPA Errors 3). */
#include "pt.h"
#include "pt_churn.h"


static const uint64_t CTL_TOPA = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TOPA;
static const uint64_t CTL_SINGLE = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
#define REF_SIZE (128 * 1024)
static uint8_t *ref, *ref2;
static uint64_t t_100, t_300; /* calibration: bytes for 100 and 300 iterations */

static uint64_t reference_run(uint8_t *buf, uint64_t n)
{
    memset(buf, 0, REF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, REF_SIZE - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_SINGLE, n);
    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT(pt_has_psb(buf));
    uint64_t t = pt_out_offset(mp);
    ASSERT(t > 0 && t < REF_SIZE / 2); /* no wrap: offset = byte count */
    return t;
}

/* Iterations for about `bytes` of trace; the reference stream of that run is left in `ref`
 * (checked reproducible against a second run). Returns the iteration count, *t the length. */
static uint64_t reference_for(uint64_t bytes, uint64_t *t)
{
    uint64_t n = 100 + (bytes > t_100 ? (bytes - t_100) * 200 / (t_300 - t_100) : 0);
    *t = reference_run(ref, n);
    ASSERT_EQ(reference_run(ref2, n), *t);
    ASSERT_EQ(memcmp(ref, ref2, *t), 0);
    return n;
}

/* One output region in the order the ToPA walk visits them, with the table and entry index
 * that point at it. */
struct region { uint8_t *base; uint64_t size; uint64_t table; uint32_t index; };

/* The regions (one cycle of the walk) hold the last C bytes of the t-byte reference stream at
 * position p mod C, zeros where nothing was written; the MSRs point at position t mod C. */
static void check_layout(const char *what, const struct region *r, int k, uint64_t t)
{
    uint64_t c = 0;
    for (int j = 0; j < k; j++)
        c += r[j].size;
    uint64_t pos = t % c, start = 0;
    int cur = -1;
    for (int j = 0; j < k; j++) {
        if (cur < 0 && pos < start + r[j].size)
            cur = j;
        for (uint64_t o = 0; o < r[j].size; o++) {
            uint64_t q = start + o;
            uint8_t want = q < t ? ref[q + (t - 1 - q) / c * c] : 0;
            if (r[j].base[o] != want) {
                printf("%s: region %d (entry %u of table %lx) byte %lx = %02x, expected %02x\n",
                       what, j, r[j].index, r[j].table, o, r[j].base[o], want);
                ASSERT_EQ(r[j].base[o], want);
            }
        }
        start += r[j].size;
    }
    start = 0;
    for (int j = 0; j < cur; j++)
        start += r[j].size;
    uint64_t base = rdmsr(IA32_RTIT_OUTPUT_BASE), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    printf("%s: %lu bytes, cycle %lu: OUTPUT_BASE %lx MASK_PTRS %lx (expected table %lx entry %u "
           "offset %lx), STATUS %lx\n", what, t, c, base, mp, r[cur].table, r[cur].index,
           pos - start, st);
    ASSERT(pt_has_psb(r[0].base) || t > c);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(base, r[cur].table);
    ASSERT_EQ(mp, pt_mask_ptrs(r[cur].index, pos - start));
}

static void start_topa(uint64_t *table, uint64_t index, uint64_t offset)
{
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)table);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, pt_mask_ptrs(index, offset));
    wrmsr(IA32_RTIT_STATUS, 0);
}

static volatile uint64_t nmi_count, nmi_gstatus, nmi_lvt, nmi_rtit_status;

static void nmi_handler(struct trap_frame *f)
{
    (void)f;
    nmi_count++;
    nmi_gstatus = rdmsr(IA32_PERF_GLOBAL_STATUS);
    nmi_lvt = lapic_read(LAPIC_LVT_PERF);
    nmi_rtit_status = rdmsr(IA32_RTIT_STATUS);
}

/* PMI skid: the NMI may arrive a few instructions after the region filled. */
static void wait_nmi(uint64_t count)
{
    for (int i = 0; i < 100000 && nmi_count < count; i++)
        cpu_pause();
}

void test_main(void)
{
    ref = alloc_aligned(REF_SIZE, REF_SIZE);
    ref2 = alloc_aligned(REF_SIZE, REF_SIZE);
    t_100 = reference_run(ref, 100);
    t_300 = reference_run(ref, 300);
    ASSERT(t_300 > t_100);
    printf("calibration: 100 iterations -> %lu bytes, 300 -> %lu\n", t_100, t_300);

    uint64_t t, n;
    /* ---- 1. circular: 3 x 4 KiB + END -> the table itself ---- */
    {
        uint64_t *tab = alloc_pages(1);
        uint8_t *rg = alloc_pages(3);
        for (int i = 0; i < 3; i++)
            tab[i] = (uint64_t)(rg + 4096 * i) | TOPA_SIZE(0);
        tab[3] = (uint64_t)tab | TOPA_END;
        struct region lay[3] = { { rg, 4096, (uint64_t)tab, 0 }, { rg + 4096, 4096, (uint64_t)tab, 1 },
                                 { rg + 8192, 4096, (uint64_t)tab, 2 } };
        n = reference_for(10000, &t);
        ASSERT(t > 8192 + 256 && t < 12288 - 256);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        ASSERT(pt_has_psb(rg));
        check_layout("circular 3x4K, no wrap", lay, 3, t);

        /* same table, ~20 KiB: wraps through END back to entry 0 */
        memset(rg, 0, 3 * 4096);
        n = reference_for(20000, &t);
        ASSERT(t > 12288 + 4096 + 256 && t < 2 * 12288 - 256);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        check_layout("circular 3x4K, wrapped", lay, 3, t);

        /* start in the middle: entry 1, offset 0x100 (Linux resumes this way) */
        memset(rg, 0, 3 * 4096);
        n = reference_for(3000, &t);
        start_topa(tab, 1, 0x100);
        traced_run(CTL_TOPA, n);
        ASSERT_EQ(pt_first_nonzero(rg, 4096 + 0x100), 4096 + 0x100);
        ASSERT(pt_has_psb(rg + 4096 + 0x100));
        ASSERT_EQ(memcmp(rg + 4096 + 0x100, ref, t), 0);
        ASSERT_EQ(pt_first_nonzero(rg + 4096 + 0x100 + t, 8192 - 0x100 - t), 8192 - 0x100 - t);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)tab);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS),
                  pt_mask_ptrs(1 + (0x100 + t) / 4096, (0x100 + t) % 4096));
        printf("circular 3x4K from entry 1 offset 0x100: %lu bytes, ok\n", t);
    }

    /* ---- 2. chained: table A [4K, END -> B], table B [4K, 4K, END -> A] ---- */
    {
        uint64_t *a = alloc_pages(1), *b = alloc_pages(1);
        uint8_t *rg = alloc_pages(3);
        a[0] = (uint64_t)rg | TOPA_SIZE(0);
        a[1] = (uint64_t)b | TOPA_END;
        b[0] = (uint64_t)(rg + 4096) | TOPA_SIZE(0);
        b[1] = (uint64_t)(rg + 8192) | TOPA_SIZE(0);
        b[2] = (uint64_t)a | TOPA_END;
        struct region lay[3] = { { rg, 4096, (uint64_t)a, 0 }, { rg + 4096, 4096, (uint64_t)b, 0 },
                                 { rg + 8192, 4096, (uint64_t)b, 1 } };
        n = reference_for(10000, &t);
        ASSERT(t > 8192 + 256 && t < 12288 - 256);
        start_topa(a, 0, 0);
        traced_run(CTL_TOPA, n);
        check_layout("chained A -> B, ends in B", lay, 3, t);

        memset(rg, 0, 3 * 4096);
        n = reference_for(14000, &t);
        ASSERT(t > 12288 + 256 && t < 12288 + 4096 - 256);
        start_topa(a, 0, 0);
        traced_run(CTL_TOPA, n);
        check_layout("chained A -> B -> A, ends in A", lay, 3, t);
    }

    /* ---- 3. a larger region: Size = 1 (8 KiB, 8 KiB aligned) then 4 KiB, circular ---- */
    {
        uint64_t *tab = alloc_pages(1);
        uint8_t *big = alloc_aligned(8192, 8192), *small = alloc_pages(1);
        tab[0] = (uint64_t)big | TOPA_SIZE(1);
        tab[1] = (uint64_t)small | TOPA_SIZE(0);
        tab[2] = (uint64_t)tab | TOPA_END;
        struct region lay[2] = { { big, 8192, (uint64_t)tab, 0 }, { small, 4096, (uint64_t)tab, 1 } };
        n = reference_for(10000, &t);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        check_layout("8K + 4K", lay, 2, t);
    }

    /* ---- 4. INT: PMI as an NMI through LVTPC when the INT region fills ---- */
    {
        uint64_t *tab = alloc_pages(1);
        uint8_t *rg = alloc_pages(3);
        tab[0] = (uint64_t)rg | TOPA_SIZE(0) | TOPA_INT;
        tab[1] = (uint64_t)(rg + 4096) | TOPA_SIZE(0);
        tab[2] = (uint64_t)(rg + 8192) | TOPA_SIZE(0) | TOPA_INT;
        tab[3] = (uint64_t)tab | TOPA_END;
        set_handler(2, nmi_handler);
        lapic_enable();
        lapic_write(LAPIC_LVT_PERF, 0x400); /* delivery mode NMI, unmasked */
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);

        /* Before the INT region is full: no PMI. */
        n = reference_for(2000, &t);
        ASSERT(t < 4096 - 256);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(1);
        uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        printf("INT: %lu bytes in the INT region: NMIs %lu, MASK_PTRS %lx\n", t, nmi_count, mp);
        ASSERT_EQ(nmi_count, 0);
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);
        ASSERT_EQ(mp, pt_mask_ptrs(0, t));

        /* Fill it: one NMI, GLOBAL_STATUS[55], LVTPC masked. */
        memset(rg, 0, 3 * 4096);
        n = reference_for(6000, &t);
        ASSERT(t > 4096 + 256 && t < 8192 - 1024);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(1);
        uint64_t gs = rdmsr(IA32_PERF_GLOBAL_STATUS);
        uint32_t lvt = lapic_read(LAPIC_LVT_PERF);
        mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        printf("INT: region 0 filled (%lu+ bytes): NMIs %lu (GLOBAL_STATUS in handler %lx, LVTPC "
               "%x), GLOBAL_STATUS %lx, LVTPC %x, MASK_PTRS %lx\n", t, nmi_count, nmi_gstatus,
               (uint32_t)nmi_lvt, gs, lvt, mp);
        ASSERT_EQ(nmi_count, 1);
        ASSERT(nmi_gstatus & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT(gs & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT(lvt & (1u << 16));                 /* LVTPC masked on delivery */
        ASSERT_EQ(lvt & 0x700, 0x400);            /* still NMI mode */
        ASSERT_EQ(pt_topa_index(mp), 1);          /* the handler's trace stays in region 1 */
        ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
        ASSERT_EQ(memcmp(rg, ref, 4096), 0);      /* region 0 is the start of the stream */
        /* IA32_PERF_GLOBAL_STATUS_RESET (390H) bit 55 clears it. */
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);

        /* Continue from where it stopped, LVTPC re-armed: region 1 (no INT) and region 2 (INT)
         * fill, the walk wraps to entry 0: exactly one more NMI. */
        lapic_write(LAPIC_LVT_PERF, 0x400);
        uint64_t used = 4096 + pt_out_offset(mp);
        n = reference_for(12288 - used + 1500, &t);
        /* (the reference run used the output MSRs: put back where the ToPA trace ended) */
        start_topa(tab, pt_topa_index(mp), pt_out_offset(mp));
        traced_run(CTL_TOPA, n);
        wait_nmi(2);
        gs = rdmsr(IA32_PERF_GLOBAL_STATUS);
        lvt = lapic_read(LAPIC_LVT_PERF);
        mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        printf("INT: regions 1 and 2 filled: NMIs %lu, GLOBAL_STATUS %lx, LVTPC %x, MASK_PTRS %lx\n",
               nmi_count, gs, lvt, mp);
        ASSERT_EQ(nmi_count, 2);
        ASSERT(gs & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT(lvt & (1u << 16));
        ASSERT_EQ(pt_topa_index(mp), 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)tab);
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);
        lapic_write(LAPIC_LVT_PERF, 0x10400);    /* masked from here on */

        /* LVTPC masked: the INT region still sets GLOBAL_STATUS[55], but no NMI is delivered. */
        memset(rg, 0, 3 * 4096);
        n = reference_for(6000, &t);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(3);
        gs = rdmsr(IA32_PERF_GLOBAL_STATUS);
        printf("INT with LVTPC masked: NMIs %lu, GLOBAL_STATUS %lx\n", nmi_count, gs);
        ASSERT_EQ(nmi_count, 2);
        ASSERT(gs & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT_EQ(memcmp(rg, ref, t), 0);        /* the trace itself is unaffected */
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);
    }

    /* ---- 5. STOP ---- */
    {
        uint64_t *tab = alloc_pages(1);
        uint8_t *rg = alloc_pages(3);
        tab[0] = (uint64_t)rg | TOPA_SIZE(0);
        tab[1] = (uint64_t)(rg + 4096) | TOPA_SIZE(0) | TOPA_STOP;
        tab[2] = (uint64_t)(rg + 8192) | TOPA_SIZE(0);
        tab[3] = (uint64_t)tab | TOPA_END;
        n = reference_for(12000, &t);
        ASSERT(t > 8192 + 1024);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        uint64_t ctl_on = traced_ctl_on, st_on = traced_status_on;
        uint64_t base = rdmsr(IA32_RTIT_OUTPUT_BASE), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        uint64_t st = rdmsr(IA32_RTIT_STATUS);
        printf("STOP: %lu bytes of work; before disabling CTL %lx STATUS %lx; after: OUTPUT_BASE "
               "%lx MASK_PTRS %lx STATUS %lx\n", t, ctl_on, st_on, base, mp, st);
        ASSERT_EQ(ctl_on, CTL_TOPA | RTIT_CTL_TRACEEN);     /* TraceEn stays 1 */
        ASSERT(st_on & RTIT_STATUS_STOPPED);
        ASSERT_EQ(st_on & RTIT_STATUS_TRIGGEREN, 0);
        ASSERT_EQ(st_on & RTIT_STATUS_ERROR, 0);
        ASSERT(st & RTIT_STATUS_STOPPED);                    /* until software clears it */
        ASSERT_EQ(st & RTIT_STATUS_ERROR, 0);
        ASSERT_EQ(base, (uint64_t)tab);
        ASSERT_EQ(mp, pt_mask_ptrs(1, 4096));                /* STOP entry, offset = size */
        ASSERT_EQ(memcmp(rg, ref, 8192), 0);                  /* both regions full, in order */
        ASSERT_EQ(pt_first_nonzero(rg + 8192, 4096), 4096);  /* nothing after the STOP region */

        /* Re-enabling with Stopped still set: no packets, nothing written, no error. */
        traced_run(CTL_TOPA, 300);
        st = rdmsr(IA32_RTIT_STATUS);
        printf("STOP: re-enabled with Stopped = 1: STATUS %lx MASK_PTRS %lx\n", st,
               rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS));
        ASSERT(st & RTIT_STATUS_STOPPED);
        ASSERT_EQ(st & RTIT_STATUS_ERROR, 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(1, 4096));
        ASSERT_EQ(memcmp(rg, ref, 8192), 0);
        ASSERT_EQ(pt_first_nonzero(rg + 8192, 4096), 4096);

        /* Stopped cleared, pointer still at offset = size: Illegal ToPA Output Offset. */
        wrmsr(IA32_RTIT_STATUS, 0);
        traced_run(CTL_TOPA, 300);
        st = rdmsr(IA32_RTIT_STATUS);
        printf("STOP: Stopped cleared, offset left at 4096: STATUS %lx MASK_PTRS %lx\n", st,
               rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS));
        ASSERT(st & RTIT_STATUS_ERROR);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)tab);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(1, 4096));
        ASSERT_EQ(memcmp(rg, ref, 8192), 0);
        ASSERT_EQ(pt_first_nonzero(rg + 8192, 4096), 4096);

        /* Software moves the pointer to the next entry and clears STATUS: tracing resumes. */
        n = reference_for(1000, &t);
        start_topa(tab, 2, 0);
        traced_run(CTL_TOPA, n);
        st = rdmsr(IA32_RTIT_STATUS);
        printf("STOP: resumed at entry 2: STATUS %lx MASK_PTRS %lx\n", st,
               rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS));
        ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(2, t));
        ASSERT_EQ(memcmp(rg + 8192, ref, t), 0);
    }

    /* ---- 6. STOP together with INT on the same entry: Stopped is already set when the PMI
     * handler runs (Table 33-3, INT row: "STOP ... before INT"). ---- */
    {
        uint64_t *tab = alloc_pages(1);
        uint8_t *rg = alloc_pages(2);
        tab[0] = (uint64_t)rg | TOPA_SIZE(0) | TOPA_STOP | TOPA_INT;
        tab[1] = (uint64_t)(rg + 4096) | TOPA_SIZE(0);
        tab[2] = (uint64_t)tab | TOPA_END;
        nmi_count = 0;
        lapic_write(LAPIC_LVT_PERF, 0x400);
        n = reference_for(6000, &t);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(1);
        uint64_t st = rdmsr(IA32_RTIT_STATUS);
        printf("STOP+INT: NMIs %lu, STATUS %lx, MASK_PTRS %lx\n", nmi_count, st,
               rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS));
        ASSERT_EQ(nmi_count, 1);
        ASSERT(nmi_gstatus & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT(nmi_rtit_status & RTIT_STATUS_STOPPED);   /* STOP took effect before the PMI */
        ASSERT(st & RTIT_STATUS_STOPPED);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(0, 4096));
        ASSERT_EQ(memcmp(rg, ref, 4096), 0);
        ASSERT_EQ(pt_first_nonzero(rg + 4096, 4096), 4096);
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
        lapic_write(LAPIC_LVT_PERF, 0x10400);
        wrmsr(IA32_RTIT_STATUS, 0);
    }
}
