/* PEBS layouts and helpers shared by the 64-bit PEBS guest tests (t_pebs*.c): the DS save area,
 * the record formats 0 (Core 2), 1 (Nehalem) and 3 (Skylake) (SDM Vol. 3B §20.3.1.1.1, seed 001
 * §5, §6.5-§6.7), the straight-line sequence whose records the tests check field by field, and
 * those checks. */
#ifndef GUEST_PEBS_H
#define GUEST_PEBS_H
#include "guest.h"

#define OVF_BUFFER (1ull << 62)       /* IA32_PERF_GLOBAL_STATUS[62] OvfBuffer */
#define CTR_FRZ    (1ull << 59)       /* IA32_PERF_GLOBAL_STATUS[59] CTR_Frz */
/* IA32_PERFEVTSELx: INST_RETIRED.ANY_P (event C0H, umask 0), [17] OS, [22] EN. */
#define PEBS_EVTSEL_INST_RETIRED (0xC0 | (1ull << 17) | (1ull << 22))
#define PEBS_FILL  0xA5               /* what the tests fill a buffer with: untouched bytes show */

/* 64-bit DS save area (SDM Vol. 3B Figure 18-9, seed 001 §5): BTS part, PEBS part, the GP counters'
 * reset values (DS + 40H + 8n) and the fixed counters' (DS + 60H + 8n, format 4). */
struct ds64 {
    uint64_t bts_base, bts_index, bts_max, bts_thr;
    uint64_t pebs_base, pebs_index, pebs_max, pebs_thr;
    uint64_t reset[4];
    uint64_t fixed_reset[4];
};

/* The first 144 bytes of formats 0-3: RFLAGS, RIP, then the 16 GPRs. */
#define PEBS_REC_REGS \
    uint64_t flags, ip, ax, bx, cx, dx, si, di, bp, sp, r8, r9, r10, r11, r12, r13, r14, r15

/* PEBS record format 0 (Intel Core microarchitecture, 144 bytes). */
struct pebs_rec_fmt0 { PEBS_REC_REGS; };
_Static_assert(sizeof(struct pebs_rec_fmt0) == 144, "format 0 record");

/* PEBS record format 1 (Nehalem, enhanced, 176 bytes): + IA32_PERF_GLOBAL_STATUS, data linear
 * address, data source, latency. */
struct pebs_rec_fmt1 { PEBS_REC_REGS; uint64_t status, dla, dse, lat; };
_Static_assert(sizeof(struct pebs_rec_fmt1) == 176, "format 1 record");

/* PEBS record format 3 (Skylake, 200 bytes): RFLAGS, IP, the GPRs, applicable counters, data
 * linear address, data source, latency, EventingIP, TSX, TSC. */
struct pebs_rec { PEBS_REC_REGS; uint64_t applicable, dla, dse, lat, eventing_ip, tsx, tsc; };
_Static_assert(sizeof(struct pebs_rec) == 200, "format 3 record");

/* The GPR values PEBS_RUN_ASM (and t_pebs_adaptive's run) load before enabling the counters
 * (RAX, RCX, RDX: the enabling WRMSR's; R12 counts the incs); RSP is stored in `rsp_var`. */
#define PEBS_KNOWN_GPRS_ASM(rsp_var)  \
    "  mov $0xB0B0, %ebx\n"           \
    "  mov $0x5151, %esi\n"           \
    "  mov $0xD1D1, %edi\n"           \
    "  mov $0xBEBE, %ebp\n"           \
    "  mov $0x8888, %r8d\n"           \
    "  mov $0x9999, %r9d\n"           \
    "  mov $0xAAAA, %r10d\n"          \
    "  mov $0xBBBB, %r11d\n"          \
    "  xor %r12d, %r12d\n"            \
    "  mov $0xDDDD, %r13d\n"          \
    "  mov $0xEEEE, %r14d\n"          \
    "  mov $0xFFFF, %r15d\n"          \
    "  mov %rsp, " rsp_var "(%rip)\n"

/* pebs_run(): the known registers, `before_enable`, IA32_PERF_GLOBAL_CTRL := `enable_eax` (the
 * enabling WRMSR, event 1), 38 x `inc %r12` from pebs_incs (events 2..39, 3 bytes each), xor
 * (event 40), IA32_PERF_GLOBAL_CTRL := 0, `after_disable`. */
extern uint64_t pebs_rsp;
#define PEBS_RUN_ASM(before_enable, enable_eax, after_disable)                                   \
    uint64_t pebs_rsp;                                                                           \
    extern void pebs_run(void);                                                                  \
    extern char pebs_incs[];                                                                     \
    asm(".text\n"                                                                                \
        ".globl pebs_run, pebs_incs\n"                                                           \
        "pebs_run:\n"                                                                            \
        "  push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15\n"                   \
        PEBS_KNOWN_GPRS_ASM("pebs_rsp")                                                          \
        before_enable                                                                            \
        "  mov $0x38f, %ecx\n"                                                                   \
        "  mov " enable_eax ", %eax\n"                                                           \
        "  xor %edx, %edx\n"                                                                     \
        "  wrmsr\n"                                                                              \
        "pebs_incs:\n"                                                                           \
        "  .rept 38\n"                                                                           \
        "  inc %r12\n"                                                                           \
        "  .endr\n"                                                                              \
        "  xor %eax, %eax\n"                                                                     \
        "  wrmsr\n"                                                                              \
        after_disable                                                                            \
        "  pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx\n"                         \
        "  ret\n")

/* RIP and the GPRs of a record of formats 0-3 written by pebs_run(): RIP = `ip`, the registers
 * after `inc %r12` number `inc` with EAX = `ax` (the value of the enabling WRMSR). RFLAGS and
 * the fields after R15 are the caller's. */
static inline void pebs_check_regs(const struct pebs_rec_fmt0 *r, uint64_t ip, uint64_t inc, uint64_t ax)
{
    ASSERT_EQ(r->ip, ip);                  /* trap-like: the next instruction */
    ASSERT_EQ(r->r12, inc);                /* registers after the triggering instruction */
    ASSERT_EQ(r->ax, ax);
    ASSERT_EQ(r->bx, 0xB0B0);
    ASSERT_EQ(r->cx, 0x38F);
    ASSERT_EQ(r->dx, 0);
    ASSERT_EQ(r->si, 0x5151);
    ASSERT_EQ(r->di, 0xD1D1);
    ASSERT_EQ(r->bp, 0xBEBE);
    ASSERT_EQ(r->sp, pebs_rsp);
    ASSERT_EQ(r->r8, 0x8888);
    ASSERT_EQ(r->r9, 0x9999);
    ASSERT_EQ(r->r10, 0xAAAA);
    ASSERT_EQ(r->r11, 0xBBBB);
    ASSERT_EQ(r->r13, 0xDDDD);
    ASSERT_EQ(r->r14, 0xEEEE);
    ASSERT_EQ(r->r15, 0xFFFF);
}

/* Counters off, overflow status cleared (and checked clear), `buf` filled with PEBS_FILL, and a
 * DS area whose PEBS buffer of `rec`-byte records starts at `base` (`buf`, or an address
 * elsewhere) with the absolute maximum after `max_records` and the interrupt threshold after
 * `thr_records`. The caller sets the reset fields and writes IA32_DS_AREA. */
static inline void pebs_ds_setup(struct ds64 *ds, uint8_t *buf, uint64_t buf_size, uint64_t base, uint64_t rec,
                                 uint64_t max_records, uint64_t thr_records)
{
    wrmsr(IA32_PERF_GLOBAL_CTRL, 0);
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, rdmsr(IA32_PERF_GLOBAL_STATUS));
    ASSERT_EQ(rdmsr(IA32_PERF_GLOBAL_STATUS), 0);
    memset(buf, PEBS_FILL, buf_size);
    memset(ds, 0, sizeof *ds);
    ds->pebs_base = ds->pebs_index = base;
    ds->pebs_max = base + max_records * rec;
    ds->pebs_thr = base + thr_records * rec;
}

/* Whether bytes [from, to) of `buf` still hold PEBS_FILL. */
static inline int pebs_untouched(const uint8_t *buf, uint64_t from, uint64_t to)
{
    for (uint64_t i = from; i < to; i++)
        if (buf[i] != PEBS_FILL)
            return 0;
    return 1;
}

/* support_enhancement_pebs() and the record length of seed 001 §6.7.1: 40 bytes without DTES64,
 * 176 with the enhanced format (PERF_CAPABILITIES[11:8] = 1), 144 otherwise. */
static inline uint64_t pebs_record_length(void)
{
    uint32_t r[4];
    cpuid(1, 0, r);
    if (!(r[2] & (1u << 2)))
        return 40;
    return ((rdmsr(IA32_PERF_CAPABILITIES) >> 8) & 0xF) == 1 ? 176 : 144;
}

/* seed 001 §9.2.2, the DS interrupt handler's work at the PEBS threshold (OvfBuffer): copy the
 * records to `saved`, reset the PEBS index to the base, clear OvfBuffer and the counter's
 * overflow bit `ovf` through IA32_PERF_GLOBAL_STATUS_RESET. */
static inline void pebs_drain(struct ds64 *ds, const uint8_t *buf, uint8_t *saved, uint64_t ovf)
{
    memcpy(saved, buf, ds->pebs_index - ds->pebs_base);
    ds->pebs_index = ds->pebs_base;
    wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, OVF_BUFFER | ovf);
}
#endif
