/* ToPA operational errors (SDM Vol. 3C §33.2.7.2 "ToPA Errors", seed 000; §33.3.10
 * "Operational Errors"; Table 33-3 "ToPA Table Entry Fields").
 *
 *  1. reserved bit set in an entry (bits 1, 3, 5, 11:10 of Figure 33-2);
 *  2. alignment: a) table base not 4 KiB aligned (from WRMSR IA32_RTIT_OUTPUT_BASE: bits 11:7
 *     are accepted by WRMSR), b) region base not aligned to the region size, c) entry base sets
 *     bits at or above MAXPHYADDR;
 *  3. illegal output offset: OutputOffset >= size of the current region;
 *  4. rule violations: a) END = 1 with STOP or INT, b) END in entry 0 of a table.
 * "In all cases, the error will be logged by setting IA32_RTIT_STATUS.Error, thereby disabling
 * tracing when the problematic ToPA entry is reached (when proc_trace_table_offset points to the
 * entry containing the error)." §33.3.10: Error = 1 makes TriggerEn 0 (no packets); software
 * must clear TraceEn, fix the problem and clear Error. TraceEn itself stays as software wrote it.
 * Also Table 33-5 / §33.2.7.4: a table pointer in restricted memory is an error (unbacked
 * physical memory reads as all ones on hardware, which sets reserved bits: an error either way).
 *
 * Each case checks: Error = 1 (and TriggerEn = 0) while TraceEn is still 1; nothing written past
 * the error (the regions after it stay zero); OUTPUT_BASE / MASK_PTRS after disabling point at
 * the bad entry with offset 0 (or keep the software-written values when the error is at
 * enable); Error stays set until software clears it.
 *
 * Errors found in a later entry: the earlier regions hold exactly the start of the stream. The
 * stream is known from a reference run of the same code path into a single range (no timing
 * packets: the bytes are reproducible, checked by running it twice). */
#include "pt.h"
#include "pt_churn.h"


static const uint64_t CTL_TOPA = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TOPA;
static const uint64_t CTL_SINGLE = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
#define REF_SIZE (64 * 1024)
static uint8_t *ref, *ref2;
static uint64_t n_fill, t_fill; /* iterations that make ~6 KiB, and that stream's length */

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
    ASSERT(t > 0 && t < REF_SIZE / 2);
    return t;
}

/* Where the pointers must be after the run, and how many stream bytes precede the error. */
struct expect { uint64_t base; uint64_t mask_ptrs; uint64_t written; };

/* Run the workload with the ToPA output at (table, mask_ptrs); `out` is the output memory
 * (`out_len` bytes, zero before the run). The first e.written bytes of `first` must be the start
 * of the stream; everything else in `out` must stay zero. */
static void run_error_case(const char *what, uint64_t table, uint64_t mask_ptrs, uint8_t *out,
                           uint64_t out_len, uint8_t *first, struct expect e)
{
    printf("%s\n", what);
    ASSERT_EQ(pt_first_nonzero(out, out_len), out_len);
    wrmsr(IA32_RTIT_OUTPUT_BASE, table);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, mask_ptrs);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_TOPA, n_fill);
    uint64_t base = rdmsr(IA32_RTIT_OUTPUT_BASE), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    printf("  STATUS at enable %lx, before disabling %lx, after %lx; OUTPUT_BASE %lx MASK_PTRS %lx"
           " (expected %lx %lx)\n", traced_status_at_enable, traced_status_on, st, base, mp, e.base, e.mask_ptrs);
    ASSERT_EQ(traced_ctl_on, CTL_TOPA | RTIT_CTL_TRACEEN); /* TraceEn stays 1 */
    /* traced_status_at_enable is only printed: §33.3.10 allows detection at enable or at first use. */
    ASSERT(traced_status_on & RTIT_STATUS_ERROR);
    ASSERT_EQ(traced_status_on & (RTIT_STATUS_TRIGGEREN | RTIT_STATUS_STOPPED), 0);
    ASSERT(st & RTIT_STATUS_ERROR);
    ASSERT_EQ(st & RTIT_STATUS_STOPPED, 0);
    ASSERT_EQ(base, e.base);
    ASSERT_EQ(mp, e.mask_ptrs);
    if (e.written) {
        ASSERT(e.written <= t_fill);
        ASSERT_EQ(memcmp(first, ref, e.written), 0);
    }
    /* Nothing else in the output memory. */
    for (uint64_t i = 0; i < out_len; i++) {
        uint8_t *p = out + i;
        if (p >= first && p < first + e.written)
            continue;
        if (*p) {
            printf("  byte written at %lx (%02x): past the error\n", (uint64_t)p, *p);
            ASSERT_EQ(*p, 0);
        }
    }
    /* Error is sticky: software clears it. */
    ASSERT(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR);
    wrmsr(IA32_RTIT_STATUS, 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR, 0);
    memset(out, 0, out_len);
}

void test_main(void)
{
    uint32_t r[4];
    cpuid(0x80000008, 0, r);
    const unsigned maxphy = r[0] & 0xFF;

    ref = alloc_aligned(REF_SIZE, REF_SIZE);
    ref2 = alloc_aligned(REF_SIZE, REF_SIZE);
    uint64_t t100 = reference_run(ref, 100), t300 = reference_run(ref, 300);
    ASSERT(t300 > t100);
    n_fill = 100 + (6000 - t100) * 200 / (t300 - t100);
    t_fill = reference_run(ref2, n_fill);
    ASSERT_EQ(reference_run(ref, n_fill), t_fill);
    ASSERT_EQ(memcmp(ref, ref2, t_fill), 0);
    printf("workload: %lu iterations -> %lu bytes\n", n_fill, t_fill);
    ASSERT(t_fill > 4096 + 512 && t_fill < 8192);

    /* Memory: a table page and 4 x 4 KiB output pages (16 KiB, 16 KiB aligned), all zero. */
    uint64_t *tab = alloc_pages(1), *tab2 = alloc_pages(1);
    uint8_t *rg = alloc_aligned(16384, 16384);
    const uint64_t T = (uint64_t)tab, T2 = (uint64_t)tab2, R = (uint64_t)rg;
#define ENTRY(addr, size) ((uint64_t)(addr) | TOPA_SIZE(size))

    /* ---- 1. reserved bits in entry 0: error at enable, nothing written ---- */
    static const uint8_t resv[] = { 1, 3, 5, 10, 11 };
    for (unsigned i = 0; i < sizeof(resv); i++) {
        tab[0] = ENTRY(R, 0) | (1ull << resv[i]);
        tab[1] = ENTRY(R + 4096, 0);
        tab[2] = T | TOPA_END;
        printf("entry 0 reserved bit %u: ", resv[i]);
        run_error_case("", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                       (struct expect){ T, pt_mask_ptrs(0, 0), 0 });
    }
    /* ---- reserved bit in entry 1: region 0 fills, then the error (pointer on entry 1) ---- */
    tab[0] = ENTRY(R, 0);
    tab[1] = ENTRY(R + 4096, 0) | (1ull << 1);
    tab[2] = ENTRY(R + 8192, 0);
    tab[3] = T | TOPA_END;
    run_error_case("entry 1 reserved bit 1 (reached when region 0 is full)", T, pt_mask_ptrs(0, 0),
                   rg, 16384, rg, (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });
    tab[1] = ENTRY(R + 4096, 0) | (1ull << 10);
    run_error_case("entry 1 reserved bit 10", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });
    /* reserved bit in an END entry */
    tab[0] = ENTRY(R, 0);
    tab[1] = T2 | TOPA_END | (1ull << 3);
    tab2[0] = ENTRY(R + 4096, 0);
    tab2[1] = T | TOPA_END;
    run_error_case("END entry (entry 1) with reserved bit 3", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });

    /* ---- 2a. table base not 4 KiB aligned (bits 11:7 of OUTPUT_BASE) ---- */
    memset(tab, 0, 4096);
    tab[16] = ENTRY(R, 0);               /* what a walker ignoring bits 11:7 would find at +0x80 */
    tab[17] = ENTRY(R + 4096, 0);
    tab[18] = T | TOPA_END;
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_OUTPUT_BASE, T + 0x80), 0); /* no #GP: operational error */
    run_error_case("table base 0x80 into a page (OUTPUT_BASE bits 11:7)", T + 0x80,
                   pt_mask_ptrs(0, 0), rg, 16384, rg, (struct expect){ T + 0x80, pt_mask_ptrs(0, 0), 0 });
    memset(tab, 0, 4096);

    /* ---- 2b. region base not aligned to the region size ---- */
    tab[0] = ENTRY(R + 4096, 1);         /* 8 KiB region at a 4K-aligned, not 8K-aligned base */
    tab[1] = ENTRY(R, 0);
    tab[2] = T | TOPA_END;
    run_error_case("entry 0: 8 KiB region at base % 8K = 4K", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(0, 0), 0 });
    tab[0] = ENTRY(R + 8192, 2);         /* 16 KiB region at base % 16K = 8K */
    run_error_case("entry 0: 16 KiB region at base % 16K = 8K", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(0, 0), 0 });
    tab[0] = ENTRY(R, 0);
    tab[1] = ENTRY(R + 4096, 1);         /* in entry 1: reached after region 0 fills */
    tab[2] = T | TOPA_END;
    run_error_case("entry 1: 8 KiB region at base % 8K = 4K", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });

    /* ---- 2c. entry base at or above MAXPHYADDR ---- */
    tab[0] = ENTRY((1ull << maxphy) | R, 0);
    tab[1] = ENTRY(R + 4096, 0);
    tab[2] = T | TOPA_END;
    run_error_case("entry 0 base with bit MAXPHYADDR set", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(0, 0), 0 });
    tab[0] = ENTRY(R, 0);
    tab[1] = (1ull << 51) | T2 | TOPA_END;
    run_error_case("END entry 1 pointing at a table above MAXPHYADDR (bit 51)", T, pt_mask_ptrs(0, 0),
                   rg, 16384, rg, (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });

    /* ---- 3. illegal output offset: >= the current region's size ---- */
    tab[0] = ENTRY(R, 0);
    tab[1] = ENTRY(R + 4096, 0);
    tab[2] = T | TOPA_END;
    run_error_case("output offset 4096 in a 4 KiB region", T, pt_mask_ptrs(0, 4096), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(0, 4096), 0 });
    run_error_case("output offset 0x10000 in a 4 KiB region (entry 1)", T, pt_mask_ptrs(1, 0x10000),
                   rg, 16384, rg, (struct expect){ T, pt_mask_ptrs(1, 0x10000), 0 });
    tab[0] = ENTRY(R, 1);                /* 8 KiB: offset 8192 is out, 4096 is in */
    tab[1] = ENTRY(R + 8192, 0);
    tab[2] = T | TOPA_END;
    run_error_case("output offset 8192 in an 8 KiB region", T, pt_mask_ptrs(0, 8192), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(0, 8192), 0 });
    /* control: offset 4096 inside the same 8 KiB region is legal */
    printf("control: output offset 4096 in an 8 KiB region\n");
    wrmsr(IA32_RTIT_OUTPUT_BASE, T);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, pt_mask_ptrs(0, 4096));
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_TOPA, n_fill);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(pt_first_nonzero(rg, 4096), 4096);
    ASSERT_EQ(memcmp(rg + 4096, ref, 4096), 0);
    ASSERT_EQ(memcmp(rg + 8192, ref + 4096, t_fill - 4096), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(1, t_fill - 4096));
    memset(rg, 0, 16384);

    /* ---- 4a. END with INT or STOP ---- */
    tab[0] = ENTRY(R, 0);
    tab[1] = T | TOPA_END | TOPA_INT;
    run_error_case("END entry 1 with INT", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });
    tab[1] = T | TOPA_END | TOPA_STOP;
    run_error_case("END entry 1 with STOP", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(1, 0), 4096 });
    /* Starting on the bad END entry: error at enable. */
    run_error_case("enable on END entry 1 with STOP", T, pt_mask_ptrs(1, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(1, 0), 0 });

    /* ---- 4b. END in entry 0 ---- */
    tab[0] = T2 | TOPA_END;
    tab2[0] = ENTRY(R, 0);
    tab2[1] = T | TOPA_END;
    run_error_case("END in entry 0 of the first table", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T, pt_mask_ptrs(0, 0), 0 });
    /* reached through a chain: A [4K, END -> B], B [END -> A]: B's entry 0 is END */
    tab[0] = ENTRY(R, 0);
    tab[1] = T2 | TOPA_END;
    tab2[0] = T | TOPA_END;
    tab2[1] = 0;
    run_error_case("END in entry 0 of the next table (A -> B)", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ T2, pt_mask_ptrs(0, 0), 4096 });

    /* ---- Table 33-5: the table pointer in memory that is not RAM (above the 128 MiB) ---- */
    tab[0] = ENTRY(R, 0);
    tab[1] = 0x20000000 | TOPA_END;      /* 512 MiB: no RAM there */
    run_error_case("END -> a table at 512 MiB (no memory)", T, pt_mask_ptrs(0, 0), rg, 16384, rg,
                   (struct expect){ 0x20000000, pt_mask_ptrs(0, 0), 4096 });

    /* ---- after an error, Error left set: re-enabling a good table writes nothing ---- */
    printf("good table, Error left set: nothing written\n");
    tab[0] = ENTRY(R, 0);
    tab[1] = ENTRY(R + 4096, 0);
    tab[2] = T | TOPA_END;
    wrmsr(IA32_RTIT_OUTPUT_BASE, T);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, pt_mask_ptrs(0, 0));
    wrmsr(IA32_RTIT_STATUS, RTIT_STATUS_ERROR);
    traced_run(CTL_TOPA, n_fill);
    ASSERT_EQ(traced_status_on & RTIT_STATUS_TRIGGEREN, 0);
    ASSERT(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR);
    ASSERT_EQ(pt_first_nonzero(rg, 16384), 16384);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(0, 0));
    /* ... and once cleared, the same table works. */
    printf("good table, Error cleared: the stream is written\n");
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL_TOPA, n_fill);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(memcmp(rg, ref, t_fill), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(1, t_fill - 4096));
}
