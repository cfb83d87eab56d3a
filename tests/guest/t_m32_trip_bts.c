/* Issue 12: Branch Trace Store across real mode, 16-bit and 32-bit protected mode (with and
 * without a guest LGDT) and the far JMP/CALL/RET and IRET between them (lib32/trip.h), in a
 * multiboot guest that starts in the loader's 32-bit protected mode. Two BTS windows: the whole
 * of Part A (loader's GDT, never replaced) and the 16-bit segment whose GDT entry was rewritten to
 * D = 1 without reloading CS, up to the end: re-enabling BTS there must keep the cached 16-bit
 * mode (the next CALL rel16 is 3 bytes, not a 5-byte CALL rel32).
 * BTS records hold linear addresses (seed 001 §6.6: "from and to ... linear addresses", as in the
 * LBR stack): FROM = the branch instruction, TO = its target, CS base included (the real-mode
 * segment 300H has base 3000H). The guest checks the record count and the records of every
 * far transfer and of the calls around the rewrite; the host compares every record with the
 * taken branches of the plugin's independent per-instruction log (pttrace bts-expect, told which
 * addresses hold 16-bit code: BTS records carry no mode). */
// bts-expect: --bits 32 --code16 3000-3fff
#define TRIP_W_START  "bts_enable_wrmsr_a"
#define TRIP_W_PAUSE  "bts_disable_wrmsr_a"
#define TRIP_W_RESUME "bts_enable_wrmsr_b"
#define TRIP_W_END    "bts_disable_wrmsr_b"
#include "lib32/trip.h"
#include "lib32/bts32.h"

#define SLOTS 256
static struct ds_area ds __attribute__((aligned(64)));
static struct bts_record rec[SLOTS] __attribute__((aligned(64)));

/* Records of the two windows: 26 in the first (Part A, B1, the call in b16, the JMP to the
 * PAUSE WRMSR), 27 in the second; each near CALL gives two (call, ret). */
#define EXPECTED_RECORDS 53

void m32_main(void)
{
    puts_serial("t_m32_trip_bts: BTS across real mode, 16- and 32-bit protected mode\n");
    m32_check_mode();
    m32_bts_check_dtes64();
    static const uint32_t msr[4] = { IA32_DEBUGCTL, IA32_DEBUGCTL, IA32_DEBUGCTL, IA32_DEBUGCTL };
    static const uint32_t val[4] = { DEBUGCTL_TR | DEBUGCTL_BTS, 0, DEBUGCTL_TR | DEBUGCTL_BTS, 0 };
    trip_setup(msr, val);
    m32_bts_setup(&ds, rec, SLOTS);
    trip_run();
    uint32_t n = m32_bts_log(&ds, rec, SLOTS);
    CHECK(n == EXPECTED_RECORDS);
    /* The far transfers and the calls around the rewrite, in order (linear FROM, TO). */
    const struct bts_want want[] = {
        { (uint32_t)trip_ljmp_a1, low(a16), "A1 ljmp 32 -> 16-bit PM (loader's 18H)" },
        { low(a16), low(f16), "call rel16 in 16-bit PM (3 bytes)" },
        { low(trip_ljmp_a2), low(real), "A2 ljmp into real mode" },
        { low(trip_call_real), low(f16), "call rel16 in real mode" },
        { low(trip_lcall_a3), low(rfar), "A3 lcall 0:IP -> 300H:IP (CS base 3000H)" },
        { low(trip_call_rfar), low(f16), "call rel16 at CS base 3000H" },
        { low(trip_lret_a4), low(trip_lcall_a3) + 5, "A4 lret to CS 0" },
        { low(trip_ljmp_a5), (uint32_t)a_back32, "A5 ljmpl real -> 32-bit" },
        { (uint32_t)trip_ljmp_b1, low(b16), "B1 ljmp 32 -> 16 (own 28H)" },
        { low(trip_call_b16), low(f16), "call rel16 before the rewrite" },
        { low(trip_call_after_resume), low(f16), "call rel16 after GDT[28H].D := 1 (CS not reloaded)" },
        { low(trip_ljmp_b2), (uint32_t)b_x32, "B2 ljmpl 28H reloaded: 16 -> 32" },
        { (uint32_t)trip_ljmp_b3, (uint32_t)b_c32, "B3 ljmp 32 -> 32" },
        { (uint32_t)trip_lcall_b4, low(c16), "B4 lcall 32 -> 16 (own 18H)" },
        { low(trip_lretl_b5), (uint32_t)b_ret32, "B5 lretl 16 -> 32" },
        { (uint32_t)trip_iretl_b6, low(d16), "B6 iretl 32 -> 16" },
        { low(trip_iretl_b7), (uint32_t)b_iret_back, "B7 iretl 16 -> 32" },
    };
    m32_bts_find_in_order(rec, n, want, sizeof(want) / sizeof(want[0]));
    m32_exit(1);
}
