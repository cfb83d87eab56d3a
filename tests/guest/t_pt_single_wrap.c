/* Single-range output wrapping around a 256-byte range, and the single-range operational errors.
 *
 * SDM Vol. 3C §33.2.7.1 "Single Range Output" (seed 000; English page in seed 004): the range is
 * circular, "when the write reaches the end of the buffer it restarts at the base";
 *   trace_store_phys_addr := (OutputBase & ~OutputMask) + (OutputOffset & OutputMask)
 * with OutputMask = MASK_PTRS[31:0], OutputOffset = MASK_PTRS[63:32].
 * "Single-Range Output Errors": a non-contiguous mask, base and mask with overlapping bits set
 * (IA32_RTIT_OUTPUT_BASE & mask != 0), and an output offset greater than the mask signal an
 * operational error (§33.3.10: IA32_RTIT_STATUS.Error = 1, TriggerEn = 0, no packets; TraceEn
 * stays as software wrote it).
 *
 * The wrap check: no timing packets are enabled (no TSC/MTC/CYC), so the same code path traced
 * from the same enabling WRMSR produces the same bytes every time (checked by tracing it twice
 * into a 128 KiB range). The stream of length T from that reference run must then appear in the
 * 256-byte range as: byte p of the stream at offset p % 256 for the last 256 bytes, and
 * MASK_PTRS[63:32] = T % 256 after disabling. Nothing outside the 256 bytes may be written.
 *
 * Host side: the guest prints "SRWRAP offset=N total=T" and dumps the 256-byte range as it is in
 * memory (PTDUMP lines, range order, not stream order): the last T % 256 bytes of the stream are
 * at [0, N), the 256 - N bytes before them at [N, 256). The wrap run is the last traced run of
 * this test, so the plugin's host copy (thread-1.pt) ends with the same 256 bytes. */
#include "pt.h"
#include "pt_churn.h"

static volatile uint64_t sink;

/* A workload that produces trace bytes quickly: an indirect call (TIP) through a table, a
 * compressed RET and loop/condition branches (TNT). */

static const uint64_t CTL = RTIT_CTL_OS | RTIT_CTL_BRANCHEN; /* ToPA = 0: single range */
#define REF_SIZE (128 * 1024)

/* Trace n iterations into a fresh 128 KiB single range; returns the byte count. */
static uint64_t reference_run(uint8_t *ref, uint64_t n)
{
    memset(ref, 0, REF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)ref);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, REF_SIZE - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL, n);
    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(mp & 0xFFFFFFFF, REF_SIZE - 1);
    ASSERT(pt_has_psb(ref));
    uint64_t t = pt_out_offset(mp);
    /* The range is far from full: the stream did not wrap, so offset = byte count. */
    ASSERT(t > 0 && t < REF_SIZE / 2);
    return t;
}

/* Enable with a bad single-range configuration: Error = 1, TriggerEn = 0, nothing written, the
 * output MSRs keep the values software wrote. `page` (4 KiB, zero) holds the range. */
static void expect_error(const char *what, uint8_t *page, uint64_t base, uint64_t mask_ptrs)
{
    printf("error case: %s: OUTPUT_BASE %lx, MASK_PTRS %lx\n", what, base, mask_ptrs);
    ASSERT_EQ(pt_first_nonzero(page, 4096), 4096);
    wrmsr(IA32_RTIT_OUTPUT_BASE, base);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, mask_ptrs);
    wrmsr(IA32_RTIT_STATUS, 0);
    wrmsr(IA32_RTIT_CTL, CTL | RTIT_CTL_TRACEEN);
    uint64_t st_on = rdmsr(IA32_RTIT_STATUS);
    uint64_t ctl_on = rdmsr(IA32_RTIT_CTL);
    sink = churn(300);
    uint64_t st_tr = rdmsr(IA32_RTIT_STATUS);
    wrmsr(IA32_RTIT_CTL, CTL);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    /* Hardware may detect the error at enable or when the output is first used (§33.3.10:
     * "the timing of error detection may not be predictable"): checked after the workload. */
    printf("  STATUS right after enabling %lx, after the workload %lx, after disabling %lx\n",
           st_on, st_tr, st);
    ASSERT_EQ(ctl_on, CTL | RTIT_CTL_TRACEEN);              /* TraceEn stays 1 */
    ASSERT(st_tr & RTIT_STATUS_ERROR);                       /* signalled while enabled */
    ASSERT_EQ(st_tr & RTIT_STATUS_TRIGGEREN, 0);
    ASSERT(st & RTIT_STATUS_ERROR);                          /* sticky until software clears it */
    ASSERT_EQ(st & RTIT_STATUS_STOPPED, 0);
    ASSERT_EQ(pt_first_nonzero(page, 4096), 4096);          /* no byte written */
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), base);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), mask_ptrs | 0x7F);
    wrmsr(IA32_RTIT_STATUS, 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR, 0);
}

void test_main(void)
{
    uint8_t *ref = alloc_aligned(REF_SIZE, REF_SIZE);
    uint8_t *ref2 = alloc_aligned(REF_SIZE, REF_SIZE);

    /* Size the workload: bytes per iteration from two runs, then aim at ~2500 bytes (the range
     * wraps about 10 times). */
    uint64_t t1 = reference_run(ref, 100), t2 = reference_run(ref, 300);
    ASSERT(t2 > t1);
    uint64_t n = 100 + (2500 > t1 ? (2500 - t1) * 200 / (t2 - t1) : 0);
    uint64_t total = reference_run(ref, n);
    memcpy(ref2, ref, total);
    ASSERT_EQ(reference_run(ref, n), total);
    printf("reference: %lu iterations -> %lu bytes (100 -> %lu, 300 -> %lu)\n", n, total, t1, t2);
    ASSERT_EQ(memcmp(ref, ref2, total), 0); /* the stream is reproducible */
    ASSERT(total > 1000 && total < 8000);

    /* ---- error cases (no bytes may reach memory) ---- */
    uint8_t *page = alloc_aligned(4096, 4096);
    /* Mask 0x17F: bit 8 set above a clear bit 7 ("a 0 in a less significant bit position than
     * the most significant bit containing a 1"). */
    expect_error("non-contiguous mask 0x17F", page, (uint64_t)page, 0x17F);
    expect_error("non-contiguous mask 0xF0FF", page, (uint64_t)page, 0xF0FF);
    /* 4 KiB range at a base that is 128-byte but not 4 KiB aligned: base & mask = 0x800. */
    expect_error("base 0x800 into a 4 KiB range (mask 0xFFF)", page, (uint64_t)page + 0x800, 0xFFF);
    expect_error("base 0x80 into a 256 B range (mask 0xFF)", page, (uint64_t)page + 0x80, 0xFF);
    /* OutputOffset greater than the mask. */
    expect_error("offset 0x100 > mask 0xFF", page, (uint64_t)page, pt_mask_ptrs(1, 0x100));
    expect_error("offset 0x80000000 > mask 0xFFF", page, (uint64_t)page, 0x80000000ull << 32 | 0xFFF);

    /* Error still set from a previous run: enabling writes nothing until software clears it
     * (TriggerEn = TraceEn & !Error & !Stopped). */
    printf("Error left set, valid range: nothing written\n");
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)page);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, RTIT_STATUS_ERROR);
    traced_run(CTL, 300);
    ASSERT(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR);
    ASSERT_EQ(pt_first_nonzero(page, 4096), 4096);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0xFFF);

    /* Legal edge: OutputOffset == mask starts at the last byte, then wraps to the base. */
    printf("offset == mask (0xFF): first byte at base + 0xFF, then base + 0\n");
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)page + 0x100);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, pt_mask_ptrs(1, 0xFF));
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL, 10);
    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(mp & 0xFFFFFFFF, 0xFF);
    ASSERT(pt_out_offset(mp) > 15 && pt_out_offset(mp) < 0xFF);
    ASSERT_EQ(page[0x1FF], 0x02);                  /* PSB starts in the last byte ... */
    for (int i = 0; i < 15; i++)                   /* ... and continues at the base */
        ASSERT_EQ(page[0x100 + i], i % 2 ? 0x02 : 0x82);
    ASSERT_EQ(pt_first_nonzero(page, 0x100), 0x100);           /* below the range: untouched */
    ASSERT_EQ(pt_first_nonzero(page + 0x200, 0xE00), 0xE00);   /* above the range: untouched */
    memset(page, 0, 4096);

    /* ---- the wrap: 256-byte range inside a zeroed page, at page + 0x200 ---- */
    uint8_t *wpage = alloc_aligned(4096, 4096);
    uint8_t *range = wpage + 0x200;
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)range);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    traced_run(CTL, n);
    mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    uint64_t offset = pt_out_offset(mp);
    printf("SRWRAP offset=%lu total=%lu MASK_PTRS=%lx STATUS=%lx\n", offset, total, mp, st);
    pt_dump(range, 256);
    ASSERT_EQ(mp & 0xFFFFFFFF, 0xFF);
    ASSERT(offset < 256);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)range);
    ASSERT_EQ(pt_first_nonzero(wpage, 0x200), 0x200);           /* nothing below the range */
    ASSERT_EQ(pt_first_nonzero(range + 256, 0xD00), 0xD00);     /* nothing above it */
    ASSERT_EQ(offset, total % 256);
    for (uint64_t p = total - 256; p < total; p++) {
        if (range[p % 256] != ref[p]) {
            printf("stream byte %lu (range offset %lu): %02x, reference %02x\n", p, p % 256,
                   range[p % 256], ref[p]);
            ASSERT_EQ(range[p % 256], ref[p]);
        }
    }
}
