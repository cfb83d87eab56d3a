/* Issue 12: Atom RTIT (profile=silvermont, seed 002) in compatibility mode under the 64-bit
 * kernel (lib/compat_trip.h: IRETQ, far CALL/JMP/RET and IRET between 64-bit and compatibility
 * mode, near CALL/RET/Jcc/JMP in 32-bit code). One window over the trip into a single output
 * region; every MSR_RTIT_CTL write drains the internal buffer (§3.3.2), so MSR_RTIT_OFFSET is the stream
 * length after the disabling WRMSR. RTIT has no MODE packet: the decoder is told that the code
 * between compat32_start and compat32_end is 32-bit (`rtit-decode --code32`), and the host
 * checks the decoded flow against the ground truth and the bytes in memory against the plugin's
 * copy. */
// pttrace-options: profile=silvermont
// rtit-decode: --code32 @compat32_start-@compat32_end
#include "pt.h"
#include "compat_trip.h"

#include "rtit_region.h"

static volatile uint32_t trip_result;

void test_main(void)
{
    uint8_t *buf = alloc_aligned(4096, 4096);
    uint64_t ctl = rtit_single_region((uint64_t)buf);
    uint64_t on = ctl | ATOM_CTL_TRACE_EN | ATOM_CTL_TRACE_ACTIVE;
    compat_gdt_enter();
    irq_disable();
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"((uint32_t)on), "d"((uint32_t)(on >> 32)));
    trip_result = compat_trip_run();
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(MSR_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));
    compat_gdt_leave();
    uint64_t len = rdmsr(MSR_RTIT_OFFSET);
    printf("TNTBUFF %lx\n", rdmsr(MSR_RTIT_TNT_BUFF));
    printf("compat trip: ecx %x (expected %x), RTIT %lu bytes\n", trip_result, TRIP_ECX, len);
    ASSERT_EQ(trip_result, TRIP_ECX);
    ASSERT(len > 16 && len < 4096);
    ASSERT_EQ(buf[0], 0xC0); /* PSB */
    pt_dump(buf, len);
}
