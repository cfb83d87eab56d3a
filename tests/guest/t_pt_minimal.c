// pttrace-options: profile=minimal
/* The smallest Intel PT implementation (plugin profile "minimal"): ToPA output with ONE output
 * region per table and nothing else — no CR3 filtering, no configurable PSB / cycle-accurate mode,
 * no IP filtering / TraceStop, no MTC, no single-range output, no trace transport.
 *
 * Enumeration (SDM Vol. 3C §33.3.1, Table 33-11 "CPUID Leaf 14H Enumeration of Intel Processor
 * Trace Capabilities"): CPUID.(7,0):EBX[25] = 1 (Intel PT); CPUID.(14H,0) = {EAX 0 (no subleaf
 * 1), EBX 0, ECX 1 (ToPA only: ECX[1] multi-entry ToPA = 0, ECX[2] single range = 0), EDX 0};
 * sub-leaf 1 is not enumerated and reads as zeros.
 *
 * #GP (SDM §33.2.8 "Enabling and Configuration MSRs", Table 33-6 IA32_RTIT_CTL, Table 33-11): every
 * IA32_RTIT_CTL bit or field whose capability is absent is reserved — CYCEn, CycThresh, PSBFreq
 * (EBX[1]), CR3Filter (EBX[0]), MTCEn, MTCFreq (EBX[3]), ADDRn_CFG (EBX[2]; CPUID.(14H,1):EAX[2:0]
 * = 0 ranges), PTWEn/FUPonPTW (EBX[4]), PwrEvtEn (EBX[5]), FabricEn (ECX[3]), ... ; TraceEn with
 * ToPA = 0 (and FabricEn = 0) #GPs when ECX[2] = 0 ("WRMSR to IA32_RTIT_CTL that sets TraceEn but
 * clears this bit and FabricEn would cause #GP, if CPUID.(EAX=14H, ECX=0):ECX.SNGLRGNOUT[bit 2] =
 * 0"); IA32_RTIT_CR3_MATCH does not exist with EBX[0] = 0 ("any access to IA32_RTIT_CR3_MATCH
 * will #GP"), nor any IA32_RTIT_ADDRn_A/B with 0 ranges (§33.2.8.5); STATUS.PacketByteCnt
 * cannot be written non-zero with EBX[1] = 0. Each faulting WRMSR goes through one instruction
 * (gp_wrmsr_insn) with a custom #GP handler: vector 13, error code 0, RIP at the WRMSR, RCX/RDX/RAX
 * unchanged, the MSR unchanged (as t_pt_gp.c). RDMSR of an absent MSR also #GPs on hardware;
 * QEMU's TCG RDMSR cannot fault for the plugin (README "Deviations"): printed, not asserted.
 *
 * Single output region ToPA (SDM §33.2.7.2 "Single Output Region ToPA Implementation"; seed 000):
 * "If CPUID.(EAX=14H,ECX=0):ECX.MENTRY[bit 1] = 0, ToPA tables can hold only one output entry,
 * which must be followed by an END=1 entry which points back to the base of the table", i.e. a
 * circular buffer. ToPA Errors 4.c: "For processors that support only a single ToPA entry (see
 * above), two additional illegal settings apply: ToPA table entry 1 with END=0; ToPA table
 * entry 1 with base address not matching the table base." Errors are logged in
 * IA32_RTIT_STATUS.Error (TriggerEn = 0) "when the problematic ToPA entry is reached".
 *
 * INT / STOP on the single region (Table 33-3; seed 003 "ToPA PMI and Single Output Region ToPA
 * Implementation"): "The single output entry may have INT or STOP set"; INT: the PMI (here an NMI
 * through the local APIC's LVTPC) with IA32_PERF_GLOBAL_STATUS[55]; STOP: IA32_RTIT_STATUS.Stopped
 * when the region fills, output ends after its last byte, OutputOffset = region size. For INT the
 * SDM adds: "if INT=1, the PMI will actually be delivered before the region is filled" and "will
 * attempt to signal a ToPA PMI interrupt before the output wraps and overwrites the top of the
 * buffer. To support this functionality, the PMI handler should disable packet generation as
 * soon as possible. Due to PMI skid, it is possible, in rare cases, that the wrap will have
 * occurred before the PMI is delivered." The last section checks exactly that.
 *
 * Content checks: no timing packets, so the same code path traced from the same enabling WRMSR
 * gives the same bytes every run (checked twice). The reference stream comes from a run into a
 * single-entry table with one 64 KiB region (no single range on this profile). No host-side
 * comparison (no pt_enable_wrmsr/pt_disable_wrmsr): the wrapped runs overwrite their own start. */
#include "pt.h"
#include "gp_probe.h"
#include "pt_churn.h"

static void expect_gp(const char *what, uint32_t msr, uint64_t value)
{
    uint64_t rcx = 0x0BADC0DE00000000ull | msr, rax = 0x1111111100000000ull | (value & 0xFFFFFFFF);
    uint64_t rdx = 0x2222222200000000ull | (value >> 32);
    /* CR3_MATCH / ADDRn do not exist here: their RDMSR is not checked (see the header). */
    int readable = msr == IA32_RTIT_CTL || msr == IA32_RTIT_STATUS ||
                   msr == IA32_RTIT_OUTPUT_BASE || msr == IA32_RTIT_OUTPUT_MASK_PTRS;
    uint64_t old = readable ? rdmsr(msr) : 0;
    printf("  #GP   %-48s WRMSR %x <- %016lx\n", what, msr, value);
    expect_gp_frame(rcx, rax, rdx);
    if (readable)
        ASSERT_EQ(rdmsr(msr), old);
}

static void expect_ok(const char *what, uint32_t msr, uint64_t value, uint64_t readback)
{
    printf("  ok    %-48s WRMSR %x <- %016lx, reads %016lx\n", what, msr, value, readback);
    ASSERT_EQ(raw_wrmsr(msr, value & 0xFFFFFFFF, value >> 32), 0);
    uint64_t ignore = msr == IA32_RTIT_STATUS ? RTIT_STATUS_FILTEREN | RTIT_STATUS_CONTEXTEN : 0;
    ASSERT_EQ(rdmsr(msr) & ~ignore, readback);
}

/* ---------------- traced runs: traced_run() from pt_churn.h ---------------- */

static const uint64_t CTL_TOPA = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TOPA;
#define REF_SIZE (64 * 1024)
static uint8_t *ref, *ref2;
static uint64_t *ref_tab;
static uint64_t t_100, t_300;

static void start_topa(uint64_t *table, uint64_t index, uint64_t offset)
{
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)table);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, pt_mask_ptrs(index, offset));
    wrmsr(IA32_RTIT_STATUS, 0);
}

/* The reference: a single-entry table [64 KiB region, END -> itself]; no wrap. */
static uint64_t reference_run(uint8_t *buf, uint64_t n)
{
    memset(buf, 0, REF_SIZE);
    ref_tab[0] = (uint64_t)buf | TOPA_SIZE(4);
    ref_tab[1] = (uint64_t)ref_tab | TOPA_END;
    start_topa(ref_tab, 0, 0);
    traced_run(CTL_TOPA, n);
    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)ref_tab);
    ASSERT_EQ(pt_topa_index(mp), 0);
    ASSERT(pt_has_psb(buf));
    uint64_t t = pt_out_offset(mp);
    ASSERT(t > 0 && t < REF_SIZE / 2);
    return t;
}

static uint64_t reference_for(uint64_t bytes, uint64_t *t)
{
    uint64_t n = 100 + (bytes > t_100 ? (bytes - t_100) * 200 / (t_300 - t_100) : 0);
    *t = reference_run(ref, n);
    ASSERT_EQ(reference_run(ref2, n), *t);
    ASSERT_EQ(memcmp(ref, ref2, *t), 0);
    return n;
}

/* A 4 KiB circular single region after a t-byte run: byte p of the stream at p mod 4096 for the
 * last 4096 bytes, zero where nothing was written; the pointer at (table, 0, t mod 4096). */
static void check_circular(const char *what, const uint8_t *rg, uint64_t *tab, uint64_t t)
{
    for (uint64_t o = 0; o < 4096; o++) {
        uint8_t want = o < t ? ref[o + (t - 1 - o) / 4096 * 4096] : 0;
        if (rg[o] != want) {
            printf("%s: region byte %lx = %02x, expected %02x\n", what, o, rg[o], want);
            ASSERT_EQ(rg[o], want);
        }
    }
    uint64_t base = rdmsr(IA32_RTIT_OUTPUT_BASE), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    printf("%s: %lu bytes: OUTPUT_BASE %lx MASK_PTRS %lx (expected %lx %lx), STATUS %lx\n", what, t,
           base, mp, (uint64_t)tab, pt_mask_ptrs(0, t % 4096), st);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(base, (uint64_t)tab);
    ASSERT_EQ(mp, pt_mask_ptrs(0, t % 4096));
}

/* An operational error: Error = 1 and TriggerEn = 0 while TraceEn is still 1, the pointers at the
 * bad entry, the first `written` bytes of the stream in `first`, nothing else in `out`. */
static void check_error(const char *what, uint64_t *tab, uint64_t mask_ptrs, uint8_t *out,
                        uint64_t out_len, uint8_t *first, uint64_t written)
{
    uint64_t base = rdmsr(IA32_RTIT_OUTPUT_BASE), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    printf("%s: STATUS before disabling %lx, after %lx; OUTPUT_BASE %lx MASK_PTRS %lx (expected "
           "%lx %lx)\n", what, traced_status_on, st, base, mp, (uint64_t)tab, mask_ptrs);
    ASSERT_EQ(traced_ctl_on, CTL_TOPA | RTIT_CTL_TRACEEN);
    ASSERT(traced_status_on & RTIT_STATUS_ERROR);
    ASSERT_EQ(traced_status_on & (RTIT_STATUS_TRIGGEREN | RTIT_STATUS_STOPPED), 0);
    ASSERT(st & RTIT_STATUS_ERROR);
    ASSERT_EQ(base, (uint64_t)tab);
    ASSERT_EQ(mp, mask_ptrs);
    ASSERT_EQ(memcmp(first, ref, written), 0);
    for (uint64_t i = 0; i < out_len; i++) {
        uint8_t *p = out + i;
        if ((p < first || p >= first + written) && *p) {
            printf("  byte written at %lx (%02x): past the error\n", (uint64_t)p, *p);
            ASSERT_EQ(*p, 0);
        }
    }
    wrmsr(IA32_RTIT_STATUS, 0);
    memset(out, 0, out_len);
}

/* ---------------- PMI ---------------- */
static volatile uint64_t nmi_count, nmi_gstatus, nmi_lvt, nmi_mask_ptrs, nmi_base, nmi_ctl;
static volatile int nmi_disable; /* the handler clears TraceEn first, as the SDM recommends */

static void nmi_handler(struct trap_frame *f)
{
    (void)f;
    if (nmi_disable) {
        nmi_ctl = rdmsr(IA32_RTIT_CTL);
        wrmsr(IA32_RTIT_CTL, nmi_ctl & ~RTIT_CTL_TRACEEN);
    }
    nmi_count++;
    nmi_gstatus = rdmsr(IA32_PERF_GLOBAL_STATUS);
    nmi_lvt = lapic_read(LAPIC_LVT_PERF);
    nmi_mask_ptrs = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
    nmi_base = rdmsr(IA32_RTIT_OUTPUT_BASE);
}

static void wait_nmi(uint64_t count)
{
    for (int i = 0; i < 100000 && nmi_count < count; i++)
        cpu_pause();
}

void test_main(void)
{
    uint32_t r[4];
    /* ---------------- enumeration ---------------- */
    cpuid(0, 0, r);
    ASSERT(r[0] >= 0x14);
    cpuid(7, 0, r);
    printf("CPUID.(7,0):EBX = %08x (bit 25 Intel PT)\n", r[1]);
    ASSERT(r[1] & (1u << 25));
    cpuid(0x14, 0, r);
    printf("CPUID.(14H,0) = %x %x %x %x\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0], 0);
    ASSERT_EQ(r[1], 0);
    ASSERT_EQ(r[2], 1);
    ASSERT_EQ(r[3], 0);
    cpuid(0x14, 1, r);
    printf("CPUID.(14H,1) = %x %x %x %x (not enumerated)\n", r[0], r[1], r[2], r[3]);
    ASSERT_EQ(r[0] | r[1] | r[2] | r[3], 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), 0x7F);

    /* ---------------- #GP ---------------- */
    set_handler(13, gp_handler);
    const uint64_t base_ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_TOPA;
    printf("IA32_RTIT_CTL: fields of absent capabilities are reserved:\n");
    expect_gp("bit 1 CYCEn (EBX[1] = 0)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_CYCEN);
    expect_gp("CycThresh = 1 (EBX[1] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 19));
    expect_gp("PSBFreq = 1 (EBX[1] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 24));
    expect_gp("PSBFreq = 15 (EBX[1] = 0)", IA32_RTIT_CTL, base_ctl | (15ull << 24));
    expect_gp("bit 7 CR3Filter (EBX[0] = 0)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_CR3FILTER);
    expect_gp("bit 9 MTCEn (EBX[3] = 0)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_MTCEN);
    expect_gp("MTCFreq = 3 (EBX[3] = 0)", IA32_RTIT_CTL, base_ctl | (3ull << 14));
    expect_gp("MTCEn + MTCFreq = 0 (EBX[3] = 0)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_MTCEN);
    expect_gp("ADDR0_CFG = 1 (EBX[2] = 0, 0 ranges)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_ADDR0_CFG(1));
    expect_gp("ADDR0_CFG = 2 (TraceStop, EBX[2] = 0)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_ADDR0_CFG(2));
    expect_gp("ADDR1_CFG = 1 (0 ranges)", IA32_RTIT_CTL, base_ctl | RTIT_CTL_ADDR1_CFG(1));
    expect_gp("bit 4 PwrEvtEn (EBX[5] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 4));
    expect_gp("bit 5 FUPonPTW (EBX[4] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 5));
    expect_gp("bit 6 FabricEn (ECX[3] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 6));
    expect_gp("bit 12 PTWEn (EBX[4] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 12));
    expect_gp("bit 31 EventEn (EBX[7] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 31));
    expect_gp("bit 55 DisTNT (EBX[8] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 55));
    expect_gp("bit 56 InjectPsbPmiOnEnable (EBX[6] = 0)", IA32_RTIT_CTL, base_ctl | (1ull << 56));
    expect_gp("always-reserved bit 18", IA32_RTIT_CTL, base_ctl | (1ull << 18));
    expect_gp("always-reserved bit 63", IA32_RTIT_CTL, base_ctl | (1ull << 63));
    expect_gp("TraceEn, ToPA = 0 (no single range, ECX[2] = 0)", IA32_RTIT_CTL,
              RTIT_CTL_TRACEEN | RTIT_CTL_OS | RTIT_CTL_BRANCHEN);
    expect_gp("TraceEn, ToPA = 0, User only", IA32_RTIT_CTL,
              RTIT_CTL_TRACEEN | RTIT_CTL_USER | RTIT_CTL_BRANCHEN | RTIT_CTL_TSCEN);
    expect_gp("TraceEn + ToPA + CYCEn", IA32_RTIT_CTL, base_ctl | RTIT_CTL_TRACEEN | RTIT_CTL_CYCEN);
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), 0);
    printf("IA32_RTIT_CTL: what the profile has reads back exactly (TraceEn = 0):\n");
    uint64_t all = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_TOPA | RTIT_CTL_TSCEN |
                   RTIT_CTL_DISRETC | RTIT_CTL_BRANCHEN;
    expect_ok("OS User ToPA TSCEn DisRETC BranchEn", IA32_RTIT_CTL, all, all);
    expect_ok("ToPA = 0 without TraceEn", IA32_RTIT_CTL, RTIT_CTL_OS | RTIT_CTL_BRANCHEN,
              RTIT_CTL_OS | RTIT_CTL_BRANCHEN);
    expect_ok("zero", IA32_RTIT_CTL, 0, 0);

    printf("MSRs the profile does not have (WRMSR):\n");
    expect_gp("CR3_MATCH = 0 (EBX[0] = 0)", IA32_RTIT_CR3_MATCH, 0);
    expect_gp("CR3_MATCH = CR3", IA32_RTIT_CR3_MATCH, read_cr3() & ~0xFFFull);
    expect_gp("ADDR0_A = 0 (0 ranges)", IA32_RTIT_ADDR0_A, 0);
    expect_gp("ADDR0_A = 0x100000", IA32_RTIT_ADDR0_A, 0x100000);
    expect_gp("ADDR0_B = 0", IA32_RTIT_ADDR0_B, 0);
    expect_gp("ADDR1_A = 0", IA32_RTIT_ADDR1_A, 0);
    expect_gp("ADDR1_B = 0", IA32_RTIT_ADDR1_B, 0);
    static const uint32_t absent[] = { IA32_RTIT_CR3_MATCH, IA32_RTIT_ADDR0_A,
                                       IA32_RTIT_ADDR0_B };
    for (unsigned i = 0; i < sizeof(absent) / sizeof(absent[0]); i++) {
        uint64_t v = 0;
        int faulted = rdmsr_safe(absent[i], &v);
        printf("  KNOWN DEVIATION: RDMSR %x %s (hardware: #GP)\n", absent[i],
               faulted ? "faulted" : "read 0, no #GP");
    }
    printf("IA32_RTIT_STATUS (PacketByteCnt not writable with EBX[1] = 0):\n");
    expect_gp("PacketByteCnt = 1", IA32_RTIT_STATUS, 1ull << 32);
    expect_gp("PacketByteCnt = 0x1234", IA32_RTIT_STATUS, 0x1234ull << 32);
    expect_gp("bit 6 PendPSB (EBX[6] = 0)", IA32_RTIT_STATUS, 1ull << 6);
    expect_ok("Error | Stopped", IA32_RTIT_STATUS, RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED,
              RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED);
    expect_ok("0", IA32_RTIT_STATUS, 0, 0);
    printf("IA32_RTIT_OUTPUT_BASE / OUTPUT_MASK_PTRS exist (ToPA):\n");
    expect_ok("OUTPUT_BASE = 0x200000", IA32_RTIT_OUTPUT_BASE, 0x200000, 0x200000);
    expect_ok("OUTPUT_MASK_PTRS = entry 1, offset 0x10", IA32_RTIT_OUTPUT_MASK_PTRS,
              pt_mask_ptrs(1, 0x10), pt_mask_ptrs(1, 0x10));
    expect_gp("OUTPUT_BASE bit 0", IA32_RTIT_OUTPUT_BASE, 0x200001);
    expect_ok("OUTPUT_BASE = 0", IA32_RTIT_OUTPUT_BASE, 0, 0);
    expect_ok("OUTPUT_MASK_PTRS = 0", IA32_RTIT_OUTPUT_MASK_PTRS, 0, 0x7F);

    /* ---------------- single-output-region ToPA ---------------- */
    ref = alloc_aligned(REF_SIZE, REF_SIZE);
    ref2 = alloc_aligned(REF_SIZE, REF_SIZE);
    ref_tab = alloc_pages(1);
    /* CPUID.(14H,0):EBX[1] = 0: "If trace packet generation is enabled by setting TraceEn, a PSB
     * is always generated" (Table 33-11; with EBX[1] = 1 only if PacketByteCnt = 0, and software
     * could write it; here PacketByteCnt cannot be written, STATUS = 0 is all software does). */
    printf("PSB at every enable (EBX[1] = 0):\n");
    int no_psb = 0, restore_gp = 0;
    for (int run = 0; run < 3; run++) {
        memset(ref, 0, REF_SIZE);
        ref_tab[0] = (uint64_t)ref | TOPA_SIZE(4);
        ref_tab[1] = (uint64_t)ref_tab | TOPA_END;
        start_topa(ref_tab, 0, 0);
        traced_run(CTL_TOPA, 50 + 100 * run);
        uint64_t st = rdmsr(IA32_RTIT_STATUS);
        int psb = pt_has_psb(ref);
        printf("  run %d (STATUS = 0 before): %u bytes, first bytes %02x %02x %02x %02x (%s), "
               "STATUS after %lx\n", run, pt_out_offset(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS)),
               ref[0], ref[1], ref[2], ref[3], psb ? "PSB" : "NO PSB", st);
        no_psb += !psb;
        /* PacketByteCnt does not exist with EBX[1] = 0 (a non-zero write #GPs): the value STATUS
         * reads must be writable back (save/restore, e.g. XSAVES/XRSTORS of the PT state). */
        int gp = raw_wrmsr(IA32_RTIT_STATUS, st & 0xFFFFFFFF, st >> 32);
        printf("  STATUS %lx written back (save/restore): %s\n", st, gp ? "#GP" : "ok");
        restore_gp += gp;
    }
    if (no_psb)
        printf("FAIL: %d of 3 enables produced no PSB (EBX[1] = 0: \"a PSB is always generated\")\n",
               no_psb);
    if (restore_gp)
        printf("FAIL: %d of 3 STATUS values read back could not be written back (#GP)\n", restore_gp);
    if (no_psb || restore_gp)
        test_fail("PSB / PacketByteCnt with CPUID.(14H,0):EBX[1] = 0");
    t_100 = reference_run(ref, 100);
    t_300 = reference_run(ref, 300);
    ASSERT(t_300 > t_100);
    printf("calibration: 100 iterations -> %lu bytes, 300 -> %lu\n", t_100, t_300);
    /* Tracing on a single-entry table while tracing: the #GP rules still hold. */
    {
        start_topa(ref_tab, 0, 0);
        wrmsr(IA32_RTIT_CTL, CTL_TOPA | RTIT_CTL_TRACEEN);
        expect_gp("while tracing: set CYCEn", IA32_RTIT_CTL, CTL_TOPA | RTIT_CTL_TRACEEN | RTIT_CTL_CYCEN);
        expect_gp("while tracing: STATUS = 0", IA32_RTIT_STATUS, 0);
        expect_gp("while tracing: CR3_MATCH = 0", IA32_RTIT_CR3_MATCH, 0);
        expect_ok("while tracing: clear TraceEn", IA32_RTIT_CTL, CTL_TOPA, CTL_TOPA);
        wrmsr(IA32_RTIT_STATUS, 0);
    }

    uint64_t *tab = alloc_pages(1), *tab2 = alloc_pages(1);
    uint8_t *rg = alloc_aligned(16384, 16384);
    uint64_t t, n;
    printf("single region: table [4 KiB region, END -> table]\n");
    tab[0] = (uint64_t)rg | TOPA_SIZE(0);
    tab[1] = (uint64_t)tab | TOPA_END;
    n = reference_for(2500, &t);
    ASSERT(t > 1024 && t < 4096 - 256);
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    ASSERT(pt_has_psb(rg));
    check_circular("  no wrap", rg, tab, t);
    ASSERT_EQ(pt_first_nonzero(rg + 4096, 12288), 12288);

    memset(rg, 0, 4096);
    n = reference_for(6000, &t);
    ASSERT(t > 4096 + 256 && t < 8192 - 256);
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    check_circular("  wrapped once (END -> the table base)", rg, tab, t);
    ASSERT_EQ(pt_first_nonzero(rg + 4096, 12288), 12288);

    memset(rg, 0, 4096);
    n = reference_for(11000, &t);
    ASSERT(t > 8192 + 256 && t < 12288 - 256);
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    check_circular("  wrapped twice", rg, tab, t);
    ASSERT_EQ(pt_first_nonzero(rg + 4096, 12288), 12288);

    /* A larger single region: 8 KiB (Size = 1, 8 KiB aligned). */
    memset(rg, 0, 16384);
    tab[0] = (uint64_t)rg | TOPA_SIZE(1);
    n = reference_for(6000, &t);
    ASSERT(t > 4096 + 256 && t < 8192 - 256);
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    ASSERT_EQ(memcmp(rg, ref, t), 0);
    ASSERT_EQ(pt_first_nonzero(rg + t, 16384 - t), 16384 - t);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(0, t));
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    printf("  8 KiB single region: %lu bytes, ok\n", t);

    /* Resuming at offset 0x800 of the region (as a driver resumes after disabling). */
    memset(rg, 0, 16384);
    tab[0] = (uint64_t)rg | TOPA_SIZE(0);
    n = reference_for(3000, &t);
    ASSERT(t > 2048 + 256 && t < 4096 - 256);
    start_topa(tab, 0, 0x800);
    traced_run(CTL_TOPA, n);
    ASSERT_EQ(memcmp(rg + 0x800, ref, 0x800), 0);
    ASSERT_EQ(memcmp(rg, ref + 0x800, t - 0x800), 0);
    ASSERT_EQ(pt_first_nonzero(rg + t - 0x800, 0x1000 - t), 0x1000 - t);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(0, t - 0x800));
    printf("  from offset 0x800: %lu bytes wrap to offset %lx, ok\n", t, t - 0x800);

    /* ---------------- ToPA errors specific to single-entry tables ---------------- */
    n = reference_for(6000, &t);
    ASSERT(t > 4096 + 256 && t < 8192 - 256);
    printf("errors (ToPA Errors 4.c):\n");
    /* i) entry 1 with END = 0: region 0 fills, then the error on entry 1. */
    tab[0] = (uint64_t)rg | TOPA_SIZE(0);
    tab[1] = (uint64_t)(rg + 4096) | TOPA_SIZE(0);
    tab[2] = (uint64_t)tab | TOPA_END;
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    check_error("  two output entries [4K, 4K, END]", tab, pt_mask_ptrs(1, 0), rg, 16384, rg, 4096);
    /* ... and the same table entered at entry 1: the error at enable, nothing written. */
    start_topa(tab, 1, 0);
    traced_run(CTL_TOPA, n);
    check_error("  [4K, 4K, END] enabled at entry 1", tab, pt_mask_ptrs(1, 0), rg, 16384, rg, 0);
    /* ii) END not pointing back to the table base. */
    tab[0] = (uint64_t)rg | TOPA_SIZE(0);
    tab[1] = (uint64_t)tab2 | TOPA_END;
    tab[2] = 0;
    tab2[0] = (uint64_t)(rg + 4096) | TOPA_SIZE(0);
    tab2[1] = (uint64_t)tab2 | TOPA_END;
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    check_error("  [4K, END -> another table]", tab, pt_mask_ptrs(1, 0), rg, 16384, rg, 4096);
    /* Control: the other table on its own is a valid single-entry table. */
    start_topa(tab2, 0, 0);
    traced_run(CTL_TOPA, n);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)tab2);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(0, t - 4096));
    ASSERT_EQ(memcmp(rg + 4096, ref + 4096, t - 4096), 0);
    printf("  control: [4K, END -> itself] in the other table: ok\n");
    memset(rg, 0, 16384);

    /* ---------------- STOP ---------------- */
    printf("STOP on the single region:\n");
    tab[0] = (uint64_t)rg | TOPA_SIZE(0) | TOPA_STOP;
    tab[1] = (uint64_t)tab | TOPA_END;
    start_topa(tab, 0, 0);
    traced_run(CTL_TOPA, n);
    {
        uint64_t st = rdmsr(IA32_RTIT_STATUS), mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        printf("  before disabling CTL %lx STATUS %lx; after: STATUS %lx OUTPUT_BASE %lx MASK_PTRS "
               "%lx\n", traced_ctl_on, traced_status_on, st, rdmsr(IA32_RTIT_OUTPUT_BASE), mp);
        ASSERT_EQ(traced_ctl_on, CTL_TOPA | RTIT_CTL_TRACEEN);
        ASSERT(traced_status_on & RTIT_STATUS_STOPPED);
        ASSERT_EQ(traced_status_on & (RTIT_STATUS_TRIGGEREN | RTIT_STATUS_ERROR), 0);
        ASSERT(st & RTIT_STATUS_STOPPED);
        ASSERT_EQ(st & RTIT_STATUS_ERROR, 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)tab);
        ASSERT_EQ(mp, pt_mask_ptrs(0, 4096));          /* offset = region size */
        ASSERT_EQ(memcmp(rg, ref, 4096), 0);            /* no wrap */
        ASSERT_EQ(pt_first_nonzero(rg + 4096, 12288), 12288);
        /* Resume: software clears Stopped and resets the pointer. */
        memset(rg, 0, 4096);
        uint64_t t2;
        uint64_t n2 = reference_for(2000, &t2);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n2);
        ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
        ASSERT_EQ(memcmp(rg, ref, t2), 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), pt_mask_ptrs(0, t2));
        printf("  resumed after clearing Stopped: %lu bytes, ok\n", t2);
    }
    memset(rg, 0, 16384);

    /* ---------------- INT: PMI ---------------- */
    printf("INT on the single region (PMI = NMI through LVTPC):\n");
    set_handler(2, nmi_handler);
    lapic_enable();
    lapic_write(LAPIC_LVT_PERF, 0x400);
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);
    tab[0] = (uint64_t)rg | TOPA_SIZE(0) | TOPA_INT;
    tab[1] = (uint64_t)tab | TOPA_END;
    {
        /* A quarter of the region: no PMI (however early before the end it is signalled). */
        n = reference_for(1000, &t);
        ASSERT(t < 1024 + 256);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(1);
        printf("  %lu bytes: NMIs %lu, GLOBAL_STATUS %lx\n", t, nmi_count,
               rdmsr(IA32_PERF_GLOBAL_STATUS));
        ASSERT_EQ(nmi_count, 0);
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);
        ASSERT_EQ(memcmp(rg, ref, t), 0);

        /* Past the end: one PMI, GLOBAL_STATUS[55], LVTPC masked; the trace goes on wrapping. */
        memset(rg, 0, 4096);
        n = reference_for(6000, &t);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(1);
        uint64_t gs = rdmsr(IA32_PERF_GLOBAL_STATUS);
        uint32_t lvt = lapic_read(LAPIC_LVT_PERF);
        printf("  %lu bytes: NMIs %lu (GLOBAL_STATUS in handler %lx, LVTPC %x, MASK_PTRS %lx), "
               "GLOBAL_STATUS %lx, LVTPC %x, MASK_PTRS %lx\n", t, nmi_count, nmi_gstatus,
               (uint32_t)nmi_lvt, nmi_mask_ptrs, gs, lvt, rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS));
        ASSERT_EQ(nmi_count, 1);
        ASSERT(nmi_gstatus & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT(gs & PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT(lvt & (1u << 16));
        ASSERT_EQ(lvt & 0x700, 0x400);
        ASSERT_EQ(nmi_base, (uint64_t)tab);
        ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
        ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)tab);
        ASSERT_EQ(pt_topa_index(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS)), 0);
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
        ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS) & PERF_GLOBAL_STATUS_TOPA_PMI, 0);

        /* LVTPC masked: GLOBAL_STATUS[55] is still set, no NMI. */
        memset(rg, 0, 4096);
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(2);
        gs = rdmsr(IA32_PERF_GLOBAL_STATUS);
        printf("  LVTPC masked: NMIs %lu, GLOBAL_STATUS %lx\n", nmi_count, gs);
        ASSERT_EQ(nmi_count, 1);
        ASSERT(gs & PERF_GLOBAL_STATUS_TOPA_PMI);
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
    }

    /* ---------------- INT: the PMI comes before the wrap ----------------
     * The handler clears TraceEn at once (SDM: "the PMI handler should disable packet generation
     * as soon as possible"). On a single-output-region implementation the PMI is signalled
     * "before the output wraps and overwrites the top of the buffer" (only PMI skid, "in rare
     * cases", lets the wrap happen first): the region must still hold the start of the stream
     * (PSB at offset 0) and the pointer must not have wrapped. */
    printf("INT on the single region, handler disabling tracing: no wrap before the PMI\n");
    {
        memset(rg, 0, 4096);
        lapic_write(LAPIC_LVT_PERF, 0x400);
        nmi_disable = 1;
        uint64_t c0 = nmi_count;
        start_topa(tab, 0, 0);
        traced_run(CTL_TOPA, n);
        wait_nmi(c0 + 1);
        nmi_disable = 0;
        uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS);
        printf("  NMIs %lu; in the handler: CTL %lx, after disabling MASK_PTRS %lx; region starts "
               "with a PSB: %s; now MASK_PTRS %lx STATUS %lx\n", nmi_count - c0, nmi_ctl,
               nmi_mask_ptrs, pt_has_psb(rg) ? "yes" : "no", mp, rdmsr(IA32_RTIT_STATUS));
        ASSERT_EQ(nmi_count, c0 + 1);
        ASSERT(nmi_ctl & RTIT_CTL_TRACEEN);            /* the PMI came while tracing */
        ASSERT_EQ(mp, nmi_mask_ptrs);                  /* nothing written after the handler's WRMSR */
        if (memcmp(rg, ref, 256) != 0) {
            printf("FAIL: the output wrapped (offset now %x, the start of the stream overwritten) "
                   "before the PMI of the single INT region was delivered\n", pt_out_offset(mp));
            test_fail("single-region ToPA PMI after the wrap");
        }
        wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, PERF_GLOBAL_STATUS_TOPA_PMI);
        lapic_write(LAPIC_LVT_PERF, 0x10400);
    }
}
