/* #GP(0) on WRMSR to the IA32_RTIT_* MSRs, and the legal writes that must not fault.
 *
 * Every faulting case goes through one WRMSR instruction (gp_wrmsr_insn) with a custom #GP
 * handler (not the exception table), which records the vector, the error code, the faulting RIP
 * and the guest's RCX/RDX/RAX from the trap frame, then skips the 2-byte WRMSR. The frame's
 * registers must equal what the test loaded: a fault is raised before the instruction changes
 * any state (SDM Vol. 3A "Exception Classifications": a fault reports the state before the
 * faulting instruction), however the emulator produces it. The MSR must also keep its old value.
 *
 * Rules (SDM Vol. 3C §33.2.8 "Enabling and Configuration MSRs"; shared/reference/pt-packets.md
 * §6-§8), for the default Skylake-class profile: CPUID.(14H,0) EBX = 0xF, ECX = 0x7;
 * CPUID.(14H,1) EAX = 0x02490002 (2 address ranges, MTC period bitmap 0x249),
 * EBX = 0x003F3FFF (CycThresh bitmap 0x3FFF, PSBFreq bitmap 0x3F); MAXPHYADDR 39.
 * - IA32_RTIT_CTL: always-reserved bits 18, 23, 30:28, 54:48, 63:57; bits whose CPUID
 *   capability is 0 (4 PwrEvtEn, 5 FUPonPTW, 6 FabricEn, 12 PTWEn, 31 EventEn, 55 DisTNT,
 *   56 InjectPsbPmiOnEnable, ADDR2_CFG/ADDR3_CFG); ADDRn_CFG > 2; MTCFreq/CycThresh/PSBFreq
 *   encodings outside their CPUID bitmaps ("Use of unsupported encodings will result in a #GP");
 *   any change while TraceEn = 1 unless the same write clears TraceEn ("Other Writes to
 *   IA32_RTIT_CTL"); writing the current value while TraceEn = 1 does not fault.
 * - STATUS, OUTPUT_BASE, OUTPUT_MASK_PTRS, CR3_MATCH, ADDRn_A/B: #GP while TraceEn = 1.
 * - STATUS: bit 3, 31:8 (incl. PendPSB/PendToPAPMI 7:6 without CPUID.(14H,0):EBX[6]), 63:49
 *   reserved; FilterEn/ContextEn/TriggerEn writes ignored.
 * - OUTPUT_BASE: bits 6:0 and 63:MAXPHYADDR reserved, MAXPHYADDR = CPUID.80000008H:EAX[7:0] as
 *   the guest sees it. OUTPUT_MASK_PTRS: no reserved bits, bits 6:0 read as 1.
 * - CR3_MATCH: bits 4:0 reserved. ADDRn: canonical (57-bit if CPUID enumerates LA57, else 48).
 * - ADDR2/3_A/B do not exist on a 2-range part: RDMSR/WRMSR #GP like any unimplemented MSR.
 * - STATUS.PacketByteCnt (EBX[1] = 1) is writable and reads back while TraceEn = 0.
 * The checks that depend on the last three points come last (see the end of test_main). */
#include "pt.h"
#include "gp_probe.h"


/* "prefix" followed by the decimal bit number (a static buffer: use before the next call). */
static const char *bit_name(const char *prefix, int bit)
{
    static char name[64];
    int k = 0;
    while (*prefix && k < 60)
        name[k++] = *prefix++;
    if (bit >= 10)
        name[k++] = '0' + bit / 10;
    name[k++] = '0' + bit % 10;
    name[k] = 0;
    return name;
}

static int trace_on(void) { return rdmsr(IA32_RTIT_CTL) & RTIT_CTL_TRACEEN; }

/* MSRs whose value only software changes (the processor updates STATUS, and the OUTPUT_* MSRs
 * while tracing), so a faulting write must leave them as they were. */
static int stable_msr(uint32_t msr)
{
    if (msr == IA32_RTIT_CTL || msr == IA32_RTIT_CR3_MATCH ||
        (msr >= IA32_RTIT_ADDR0_A && msr <= IA32_RTIT_ADDR1_B))
        return 1;
    return !trace_on() && (msr == IA32_RTIT_OUTPUT_BASE || msr == IA32_RTIT_OUTPUT_MASK_PTRS);
}

/* The WRMSR with these full registers must raise #GP(0) at gp_wrmsr_insn with the registers
 * preserved in the frame, and leave the MSR unchanged. */
static void expect_gp_regs(const char *what, uint64_t rcx, uint64_t rax, uint64_t rdx)
{
    uint32_t msr = (uint32_t)rcx;
    uint64_t old = 0;
    int stable = stable_msr(msr);
    if (stable)
        old = rdmsr(msr);
    printf("  #GP   %-44s WRMSR %x <- %08lx:%08lx\n", what, msr, rdx & 0xFFFFFFFF,
           rax & 0xFFFFFFFF);
    expect_gp_frame(rcx, rax, rdx);
    if (stable)
        ASSERT_EQ(rdmsr(msr), old);
}

static void expect_gp(const char *what, uint32_t msr, uint64_t value)
{
    expect_gp_regs(what, msr, value & 0xFFFFFFFF, value >> 32);
}

/* The WRMSR must not fault, and RDMSR must return `readback`. For STATUS, FilterEn and
 * ContextEn (bits 1:0) are the processor's view of the current IP and context and are not
 * compared; TriggerEn (bit 2) is, since it implies TraceEn. */
static void expect_ok(const char *what, uint32_t msr, uint64_t value, uint64_t readback)
{
    uint64_t ignore = msr == IA32_RTIT_STATUS ? RTIT_STATUS_FILTEREN | RTIT_STATUS_CONTEXTEN : 0;
    printf("  ok    %-44s WRMSR %x <- %016lx, reads %016lx\n", what, msr, value, readback);
    ASSERT_EQ(raw_wrmsr(msr, value & 0xFFFFFFFF, value >> 32), 0);
    ASSERT_EQ(rdmsr(msr) & ~ignore, readback);
}

void test_main(void)
{
    uint32_t r[4];
    cpuid(0x14, 0, r);
    ASSERT_EQ(r[1], 0xF);  /* CR3 filter, PSB/CYC, IP filter, MTC; no PTWRITE/PwrEvt/PMI-pres. */
    ASSERT_EQ(r[2], 0x7);  /* ToPA, multi-entry ToPA, single range; no trace transport */
    cpuid(0x14, 1, r);
    ASSERT_EQ(r[0], 0x02490002);
    ASSERT_EQ(r[1], 0x003F3FFF);
    cpuid(0x80000008, 0, r);
    const unsigned maxphy = r[0] & 0xFF; /* MAXPHYADDR, CPUID.80000008H:EAX[7:0] */
    printf("MAXPHYADDR (CPUID.80000008H:EAX[7:0]) = %u\n", maxphy);
    ASSERT(maxphy >= 36 && maxphy <= 52);
    cpuid(7, 0, r);
    /* Linear addresses written to MSRs must be 57-bit canonical on a processor that supports
     * 5-level paging, 48-bit canonical otherwise, whatever CR4.LA57 is (Intel ISE, LAM chapter:
     * "Processors that support LAM continue to require the addresses written to control
     * registers or MSRs be 57-bit canonical if the processor supports 5-level paging or 48-bit
     * canonical if it supports only 4-level paging"). */
    const unsigned la57 = (r[2] >> 16) & 1;
    printf("CPUID.7.0:ECX.LA57 = %u\n", la57);

    set_handler(13, gp_handler);
    const uint64_t base_ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;

    /* ---------------- IA32_RTIT_CTL, TraceEn = 0 ---------------- */
    printf("IA32_RTIT_CTL reserved bits and encodings (TraceEn = 0):\n");
    static const uint8_t always_reserved[] = { 18, 23, 28, 29, 30, 48, 49, 50, 51, 52, 53, 54,
                                               57, 58, 59, 60, 61, 62, 63 };
    for (unsigned i = 0; i < sizeof(always_reserved); i++)
        expect_gp(bit_name("always-reserved bit ", always_reserved[i]), IA32_RTIT_CTL,
                  base_ctl | (1ull << always_reserved[i]));
    expect_gp("bit 4 PwrEvtEn (CPUID.14.0:EBX[5]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 4));
    expect_gp("bit 5 FUPonPTW (EBX[4]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 5));
    expect_gp("bit 6 FabricEn (ECX[3]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 6));
    expect_gp("bit 12 PTWEn (EBX[4]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 12));
    expect_gp("bit 31 EventEn (EBX[7]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 31));
    expect_gp("bit 55 DisTNT (EBX[8]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 55));
    expect_gp("bit 56 InjectPsbPmiOnEnable (EBX[6]=0)", IA32_RTIT_CTL, base_ctl | (1ull << 56));
    expect_gp("ADDR2_CFG = 1 (only 2 ranges)", IA32_RTIT_CTL, base_ctl | (1ull << 40));
    expect_gp("ADDR2_CFG = 2 (only 2 ranges)", IA32_RTIT_CTL, base_ctl | (2ull << 40));
    expect_gp("ADDR3_CFG = 1 (only 2 ranges)", IA32_RTIT_CTL, base_ctl | (1ull << 44));
    expect_gp("ADDR0_CFG = 3", IA32_RTIT_CTL, base_ctl | (3ull << 32));
    expect_gp("ADDR0_CFG = 15", IA32_RTIT_CTL, base_ctl | (15ull << 32));
    expect_gp("ADDR1_CFG = 3", IA32_RTIT_CTL, base_ctl | (3ull << 36));
    expect_gp("MTCEn, MTCFreq = 1 (bitmap 0x249)", IA32_RTIT_CTL,
              base_ctl | RTIT_CTL_MTCEN | (1ull << 14));
    expect_gp("MTCEn, MTCFreq = 2 (bitmap 0x249)", IA32_RTIT_CTL,
              base_ctl | RTIT_CTL_MTCEN | (2ull << 14));
    expect_gp("MTCEn, MTCFreq = 15 (bitmap 0x249)", IA32_RTIT_CTL,
              base_ctl | RTIT_CTL_MTCEN | (15ull << 14));
    expect_gp("CYCEn, CycThresh = 14 (bitmap 0x3FFF)", IA32_RTIT_CTL,
              base_ctl | RTIT_CTL_CYCEN | (14ull << 19));
    expect_gp("PSBFreq = 6 (bitmap 0x3F)", IA32_RTIT_CTL, base_ctl | (6ull << 24));
    expect_gp("TraceEn with a reserved bit", IA32_RTIT_CTL,
              base_ctl | RTIT_CTL_TRACEEN | (1ull << 18));
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), 0); /* nothing was written, tracing never started */

    printf("IA32_RTIT_CTL legal values (TraceEn = 0) read back exactly:\n");
    uint64_t all_legal = RTIT_CTL_CYCEN | RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_CR3FILTER |
                         RTIT_CTL_TOPA | RTIT_CTL_MTCEN | RTIT_CTL_TSCEN | RTIT_CTL_DISRETC |
                         RTIT_CTL_BRANCHEN | (9ull << 14) | (13ull << 19) | (5ull << 24) |
                         (1ull << 32) | (2ull << 36);
    expect_ok("every enumerated field, legal encodings", IA32_RTIT_CTL, all_legal, all_legal);
    expect_ok("MTCEn, MTCFreq = 3", IA32_RTIT_CTL, base_ctl | RTIT_CTL_MTCEN | (3ull << 14),
              base_ctl | RTIT_CTL_MTCEN | (3ull << 14));
    expect_ok("MTCEn, MTCFreq = 6", IA32_RTIT_CTL, base_ctl | RTIT_CTL_MTCEN | (6ull << 14),
              base_ctl | RTIT_CTL_MTCEN | (6ull << 14));
    expect_ok("ADDR0_CFG = 2, ADDR1_CFG = 1", IA32_RTIT_CTL,
              base_ctl | (2ull << 32) | (1ull << 36), base_ctl | (2ull << 32) | (1ull << 36));
    expect_ok("zero", IA32_RTIT_CTL, 0, 0);

    /* ---------------- other MSRs, TraceEn = 0 ---------------- */
    printf("IA32_RTIT_OUTPUT_BASE (bits 6:0 and 63:MAXPHYADDR reserved):\n");
    for (int b = 0; b < 7; b++)
        expect_gp(bit_name("bit set: ", b), IA32_RTIT_OUTPUT_BASE, 0x100000 | (1ull << b));
    expect_gp("2^MAXPHYADDR", IA32_RTIT_OUTPUT_BASE, 1ull << maxphy);
    expect_gp("2^MAXPHYADDR + 0x1000", IA32_RTIT_OUTPUT_BASE, (1ull << maxphy) | 0x1000);
    expect_gp("bit 51", IA32_RTIT_OUTPUT_BASE, 1ull << 51);
    expect_gp("bit 63", IA32_RTIT_OUTPUT_BASE, 1ull << 63);
    expect_ok("2^38 - 0x80", IA32_RTIT_OUTPUT_BASE, (1ull << 38) - 0x80, (1ull << 38) - 0x80);
    expect_ok("0x100080 (bits 11:7 are legal for WRMSR)", IA32_RTIT_OUTPUT_BASE, 0x100080,
              0x100080);
    expect_ok("0", IA32_RTIT_OUTPUT_BASE, 0, 0);

    printf("IA32_RTIT_OUTPUT_MASK_PTRS (no reserved bits; 6:0 read as 1):\n");
    expect_ok("0", IA32_RTIT_OUTPUT_MASK_PTRS, 0, 0x7F);
    expect_ok("offset 0x12345678, mask 0xF80", IA32_RTIT_OUTPUT_MASK_PTRS,
              0x1234567800000F80ull, 0x1234567800000FFFull);
    expect_ok("all ones", IA32_RTIT_OUTPUT_MASK_PTRS, ~0ull, ~0ull);
    expect_ok("0x7F", IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F, 0x7F);

    printf("IA32_RTIT_CR3_MATCH:\n");
    for (int b = 0; b < 5; b++)
        expect_gp(bit_name("bit set: ", b), IA32_RTIT_CR3_MATCH, 0x123456000ull | (1ull << b));
    expect_ok("0x123456FE0", IA32_RTIT_CR3_MATCH, 0x123456FE0ull, 0x123456FE0ull);
    expect_ok("CR3 of this guest", IA32_RTIT_CR3_MATCH, read_cr3() & ~0xFFFull,
              read_cr3() & ~0xFFFull);
    expect_ok("0", IA32_RTIT_CR3_MATCH, 0, 0);

    printf("IA32_RTIT_ADDRn_A/B (canonical):\n");
    if (!la57) {
        expect_gp("ADDR0_A = 0x0000800000000000", IA32_RTIT_ADDR0_A, 0x0000800000000000ull);
        expect_gp("ADDR0_B = 0xFFFF7FFFFFFFFFFF", IA32_RTIT_ADDR0_B, 0xFFFF7FFFFFFFFFFFull);
    }
    /* non-canonical at 48 and at 57 bits */
    expect_gp("ADDR0_A = 0x0100000000000000", IA32_RTIT_ADDR0_A, 0x0100000000000000ull);
    expect_gp("ADDR0_B = 0xFEFFFFFFFFFFFFFF", IA32_RTIT_ADDR0_B, 0xFEFFFFFFFFFFFFFFull);
    expect_gp("ADDR1_A = 0x8000000000000000", IA32_RTIT_ADDR1_A, 0x8000000000000000ull);
    expect_gp("ADDR1_B = 0x7FFF000000000000", IA32_RTIT_ADDR1_B, 0x7FFF000000000000ull);
    expect_ok("ADDR0_A = 0xFFFF800000000000", IA32_RTIT_ADDR0_A, 0xFFFF800000000000ull,
              0xFFFF800000000000ull);
    expect_ok("ADDR0_B = 0x00007FFFFFFFFFFF", IA32_RTIT_ADDR0_B, 0x00007FFFFFFFFFFFull,
              0x00007FFFFFFFFFFFull);
    expect_ok("ADDR1_A = 0xFFFFFFFFFFFFFFFF", IA32_RTIT_ADDR1_A, ~0ull, ~0ull);
    expect_ok("ADDR1_B = 0x100000", IA32_RTIT_ADDR1_B, 0x100000, 0x100000);

    printf("IA32_RTIT_STATUS:\n");
    expect_gp("bit 3 (reserved)", IA32_RTIT_STATUS, 1ull << 3);
    expect_gp("bit 6 PendPSB (CPUID.14.0:EBX[6]=0)", IA32_RTIT_STATUS, 1ull << 6);
    expect_gp("bit 7 PendToPAPMI (EBX[6]=0)", IA32_RTIT_STATUS, 1ull << 7);
    expect_gp("bit 8 (reserved)", IA32_RTIT_STATUS, 1ull << 8);
    expect_gp("bit 31 (reserved)", IA32_RTIT_STATUS, 1ull << 31);
    expect_gp("bit 49 (reserved)", IA32_RTIT_STATUS, 1ull << 49);
    expect_gp("bit 63 (reserved)", IA32_RTIT_STATUS, 1ull << 63);
    expect_ok("Error | Stopped", IA32_RTIT_STATUS, RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED,
              RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED);
    expect_ok("0", IA32_RTIT_STATUS, 0, 0);
    /* FilterEn/ContextEn/TriggerEn: writes ignored, no fault. TriggerEn reads 0 with TraceEn = 0
     * (TriggerEn implies TraceEn); FilterEn/ContextEn are the processor's view, not checked. */
    printf("  ok    %-44s WRMSR 571 <- 7\n", "FilterEn|ContextEn|TriggerEn (ignored)");
    ASSERT_EQ(raw_wrmsr(IA32_RTIT_STATUS, 7, 0), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & ~(RTIT_STATUS_FILTEREN | RTIT_STATUS_CONTEXTEN), 0);

    /* Upper halves of RCX, RAX and RDX are ignored by WRMSR (SDM Vol. 2B WRMSR: "the high-order
     * 32 bits of RCX, RAX, and RDX are ignored"), and a #GP preserves all 64 bits. */
    printf("upper halves of RCX/RAX/RDX:\n");
    printf("  ok    CTL via RCX/RAX/RDX with junk upper halves\n");
    ASSERT_EQ(raw_wrmsr(0xA5A5A5A500000000ull | IA32_RTIT_CTL,
                        0x5A5A5A5A00000000ull | (uint32_t)base_ctl, 0xC3C3C3C300000000ull), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), base_ctl);
    expect_gp_regs("CTL bit 18 with junk upper halves", 0xA5A5A5A500000000ull | IA32_RTIT_CTL,
                   0x5A5A5A5A00000000ull | (uint32_t)(base_ctl | (1u << 18)),
                   0xC3C3C3C300000000ull);
    expect_gp_regs("CTL bit 57 with junk upper halves", 0x1234567800000000ull | IA32_RTIT_CTL,
                   0xFFFFFFFF00000000ull | (uint32_t)base_ctl, 0xFFFFFFFF02000000ull);
    expect_ok("zero", IA32_RTIT_CTL, 0, 0);

    /* ---------------- TraceEn = 1 ---------------- */
    printf("TraceEn = 1 (single-range output, 64 KiB):\n");
    uint8_t *buf = alloc_aligned(65536, 65536);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    wrmsr(IA32_RTIT_CR3_MATCH, 0x2000);
    wrmsr(IA32_RTIT_ADDR0_A, 0x1000);
    wrmsr(IA32_RTIT_ADDR0_B, 0x1FFF);
    wrmsr(IA32_RTIT_ADDR1_A, 0x3000);
    wrmsr(IA32_RTIT_ADDR1_B, 0x3FFF);
    uint64_t on = base_ctl | RTIT_CTL_TRACEEN;
    expect_ok("enable: TraceEn | OS | BranchEn", IA32_RTIT_CTL, on, on);
    expect_gp("set User while tracing", IA32_RTIT_CTL, on | RTIT_CTL_USER);
    expect_gp("clear BranchEn while tracing", IA32_RTIT_CTL, on & ~RTIT_CTL_BRANCHEN);
    expect_gp("set ToPA while tracing", IA32_RTIT_CTL, on | RTIT_CTL_TOPA);
    expect_gp("ADDR0_CFG = 1 while tracing", IA32_RTIT_CTL, on | (1ull << 32));
    expect_gp("reserved bit 18 while tracing", IA32_RTIT_CTL, on | (1ull << 18));
    expect_gp("clear TraceEn + reserved bit 18", IA32_RTIT_CTL, base_ctl | (1ull << 18));
    expect_gp("clear TraceEn + ADDR0_CFG = 3", IA32_RTIT_CTL, base_ctl | (3ull << 32));
    ASSERT(trace_on());
    expect_ok("same value while tracing (no change)", IA32_RTIT_CTL, on, on);
    expect_gp("STATUS = 0 while tracing", IA32_RTIT_STATUS, 0);
    expect_gp("STATUS = Error while tracing", IA32_RTIT_STATUS, RTIT_STATUS_ERROR);
    expect_gp("OUTPUT_BASE (same value) while tracing", IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    expect_gp("OUTPUT_MASK_PTRS (same) while tracing", IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFFF);
    expect_gp("CR3_MATCH (same value) while tracing", IA32_RTIT_CR3_MATCH, 0x2000);
    expect_gp("CR3_MATCH = 0 while tracing", IA32_RTIT_CR3_MATCH, 0);
    expect_gp("ADDR0_A (same value) while tracing", IA32_RTIT_ADDR0_A, 0x1000);
    expect_gp("ADDR0_B = 0 while tracing", IA32_RTIT_ADDR0_B, 0);
    expect_gp("ADDR1_A = 0 while tracing", IA32_RTIT_ADDR1_A, 0);
    expect_gp("ADDR1_B = 0 while tracing", IA32_RTIT_ADDR1_B, 0);
    ASSERT(trace_on());
    /* §33.2.8.3: a write that clears TraceEn may change the other bits at the same time. */
    uint64_t off = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_TSCEN | RTIT_CTL_BRANCHEN | (1ull << 32);
    expect_ok("clear TraceEn + set User/TSCEn/ADDR0_CFG", IA32_RTIT_CTL, off, off);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_BASE), (uint64_t)buf);
    ASSERT_EQ(rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) & 0xFFFFFFFF, 0xFFFF);
    ASSERT_EQ(rdmsr(IA32_RTIT_CR3_MATCH), 0x2000);
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR0_A), 0x1000);
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR0_B), 0x1FFF);
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR1_A), 0x3000);
    ASSERT_EQ(rdmsr(IA32_RTIT_ADDR1_B), 0x3FFF);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED | RTIT_STATUS_TRIGGEREN), 0);
    ASSERT(pt_has_psb(buf)); /* tracing really ran into the buffer */
    /* With TraceEn = 0 again, the same writes are legal. */
    printf("  ok    %-44s WRMSR 571 <- 0\n", "STATUS = 0 after disabling");
    ASSERT_EQ(raw_wrmsr(IA32_RTIT_STATUS, 0, 0), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & 0xFC, 0); /* PacketByteCnt: checked at the end */
    expect_ok("CR3_MATCH = 0 after disabling", IA32_RTIT_CR3_MATCH, 0, 0);
    expect_ok("ADDR0_A = 0 after disabling", IA32_RTIT_ADDR0_A, 0, 0);
    expect_ok("OUTPUT_MASK_PTRS = 0xFFF after disabling", IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF,
              0xFFF);
    expect_ok("CTL = 0", IA32_RTIT_CTL, 0, 0);

    /* ---------------- MSRs the profile does not have ---------------- */
    /* §33.2.8.5: only the ADDRn pairs that CPUID.(14H,1):EAX[2:0] enumerates exist; an access to
     * an MSR the processor does not implement #GPs (SDM Vol. 2B RDMSR/WRMSR: "If the value in
     * ECX specifies a reserved or unimplemented MSR address", #GP(0)). */
    printf("IA32_RTIT_ADDR2_A (not enumerated: 2 ranges):\n");
    expect_gp("WRMSR ADDR2_A = 0", IA32_RTIT_ADDR2_A, 0);
    /* RDMSR of ADDR2_A #GPs too: the plugin steers the RDMSR to an MSR QEMU's RDMSR faults on
     * (x2APIC DFR, 80EH) and restores RCX at delivery; the handler sees #GP(0) at the RDMSR with
     * RCX = the MSR asked for and RDX unchanged. */
    uint64_t rdx_marker = 0x1234567890ull;
    ASSERT(raw_rdmsr(IA32_RTIT_ADDR2_A, rdx_marker));
    ASSERT_EQ(gp_vector, 13);
    ASSERT_EQ(gp_error, 0);
    ASSERT_EQ(gp_rip, (uint64_t)gp_rdmsr_insn);
    ASSERT_EQ(gp_rcx, IA32_RTIT_ADDR2_A);
    ASSERT_EQ(gp_rdx, rdx_marker);
    ASSERT(!raw_rdmsr(IA32_RTIT_ADDR1_A, 0)); /* enumerated: no #GP */
    printf("  RDMSR ADDR2_A: #GP(0) at the RDMSR, RCX/RDX as loaded\n");

    /* OUTPUT_BASE accepts every address below MAXPHYADDR as the CPU enumerates it (Table 33-8:
     * only bits 63:MAXPHYADDR are reserved, MAXPHYADDR = CPUID.80000008H:EAX[7:0]). */
    printf("IA32_RTIT_OUTPUT_BASE at the top of the enumerated MAXPHYADDR:\n");
    expect_ok("2^MAXPHYADDR - 0x80 (highest legal)", IA32_RTIT_OUTPUT_BASE,
              (1ull << maxphy) - 0x80, (1ull << maxphy) - 0x80);
    expect_ok("2^(MAXPHYADDR-1)", IA32_RTIT_OUTPUT_BASE, 1ull << (maxphy - 1),
              1ull << (maxphy - 1));
    expect_ok("0", IA32_RTIT_OUTPUT_BASE, 0, 0);

    /* With LA57 enumerated, 0x0000800000000000 is 57-bit canonical: legal (see above). */
    if (la57) {
        printf("IA32_RTIT_ADDRn with CPUID.7.0:ECX.LA57 = 1 (57-bit canonical):\n");
        expect_ok("ADDR0_A = 0x0000800000000000", IA32_RTIT_ADDR0_A, 0x0000800000000000ull,
                  0x0000800000000000ull);
        expect_ok("ADDR0_B = 0xFFFF7FFFFFFFFFFF", IA32_RTIT_ADDR0_B, 0xFFFF7FFFFFFFFFFFull,
                  0xFFFF7FFFFFFFFFFFull);
        expect_ok("ADDR0_A = 0", IA32_RTIT_ADDR0_A, 0, 0);
        expect_ok("ADDR0_B = 0", IA32_RTIT_ADDR0_B, 0, 0);
    }

    /* STATUS.PacketByteCnt is writable with CPUID.(14H,0):EBX[1] = 1 (Table 33-11: "can be set
     * to a non-zero value") and reads back while TraceEn = 0 (nothing counts then). */
    printf("IA32_RTIT_STATUS.PacketByteCnt (CPUID.14.0:EBX[1] = 1):\n");
    expect_ok("0 (after the trace above)", IA32_RTIT_STATUS, 0, 0);
    expect_ok("PacketByteCnt = 0x1234", IA32_RTIT_STATUS, 0x1234ull << 32, 0x1234ull << 32);
    expect_ok("0", IA32_RTIT_STATUS, 0, 0);
}
