/* Issue 12: Branch Trace Store in code segments with a non-zero base (lib32/based.h): 32-bit
 * protected mode with paging off and on, a 16-bit segment, INT n and IRET, a GDT entry rewritten
 * without reloading CS, real mode with a 32-bit CS (base F0000H) still cached and a real-mode far
 * JMP to segment 1000H. BTS records hold linear addresses (seed 001 §6.6: "from and to ...
 * linear addresses"; SDM Vol. 3B §18.4.8), the CS base included: FROM = the branch instruction,
 * TO = its target. Two windows: START..PAUSE (Parts 1 and 2, the start of Part 3) and
 * RESUME..END. The guest checks the record count and, in order, the records of the far transfers,
 * the indirect JMPs and the INT/IRET of both parts and of Part 3; the host compares every record
 * with the taken branches of the plugin's independent per-instruction log (pttrace bts-expect,
 * told which code is 16-bit: BTS records carry no mode). */
// bts-expect: --bits 32 --code16 @based16_start-@based16_end
#define BASED_W_START  "bts_enable_wrmsr_a"
#define BASED_W_PAUSE  "bts_disable_wrmsr_a"
#define BASED_W_RESUME "bts_enable_wrmsr_b"
#define BASED_W_END    "bts_disable_wrmsr_b"
#include "lib32/based.h"
#include "lib32/bts32.h"

#define SLOTS 256
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record rec[SLOTS] __attribute__((aligned(64)));

/* Records of the two windows: 43 in the first (each part 19: the CALL of based_part and its RET,
 * P1..P4, two near CALL/RET pairs, two taken JNZ, three indirect JMPs, INT, IRET; then R1, a
 * CALL/RET pair, the indirect JMP and the JMP to the PAUSE WRMSR), 11 in the second. */
#define EXPECTED_RECORDS 54

void m32_main(void)
{
    puts_serial("t_m32_based_bts: BTS in code segments with a non-zero base\n");
    m32_check_mode();
    m32_bts_check_dtes64();
    static const uint32_t msr[4] = { IA32_DEBUGCTL, IA32_DEBUGCTL, IA32_DEBUGCTL, IA32_DEBUGCTL };
    static const uint32_t val[4] = { DEBUGCTL_TR | DEBUGCTL_BTS, 0, DEBUGCTL_TR | DEBUGCTL_BTS, 0 };
    based_setup(msr, val, 0);
    m32_bts_setup(&ds, rec, SLOTS);
    based_run();
    uint32_t n = m32_bts_log(&ds, rec, SLOTS);
    CHECK(n == EXPECTED_RECORDS);
    /* The far transfers, indirect JMPs and INT/IRET, in order (linear FROM, TO). */
#define PART(p)                                                                                   \
        { (uint32_t)bp_ljmp1, (uint32_t)bp_s32, p " P1 ljmp flat -> 18H (base F0000H)" },          \
        { (uint32_t)bp_jmp32, (uint32_t)bp_ind32, p " jmp *%eax in 18H" },                         \
        { (uint32_t)bp_int, (uint32_t)bh32, p " int $0x30 into 18H" },                             \
        { (uint32_t)bp_iret, (uint32_t)bp_after_int, p " iret" },                                  \
        { (uint32_t)bp_jmp32b, (uint32_t)bp_ind32b, p " jmp *%eax after GDT[18H].base := 0" },     \
        { (uint32_t)bp_lcall, (uint32_t)bp_s16, p " P2 lcall 32 -> 16 (20H)" },                    \
        { (uint32_t)bp_jmp16, (uint32_t)bp_ind16, p " jmp *%ax in 20H" },                          \
        { (uint32_t)bp_lret, (uint32_t)bp_ret32, p " P3 lretl 16 -> 32 (18H)" },                   \
        { (uint32_t)bp_ljmp2, (uint32_t)bp_flat, p " P4 ljmp 18H -> flat" }
    const struct bts_want want[] = {
        PART("paging off:"),
        PART("paging on:"),
        { (uint32_t)r_ljmp1, (uint32_t)r32, "R1 ljmp flat -> 18H" },
        { (uint32_t)r_jmp1, (uint32_t)r32_ind, "jmp *%eax in real mode, CS base F0000H cached" },
        { (uint32_t)r_ljmp2, (uint32_t)rs32, "R2 real-mode ljmpl to 1000H (base 10000H)" },
        { (uint32_t)r_jmp2, (uint32_t)rs_ind, "jmp *%eax in real mode, CS base 10000H" },
        { (uint32_t)r_ljmp3, (uint32_t)r_back, "R3 ljmp -> flat" },
    };
    m32_bts_find_in_order(rec, n, want, sizeof(want) / sizeof(want[0]));
    m32_exit(1);
}
