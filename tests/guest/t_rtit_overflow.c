// qemu-options: -icount shift=3,sleep=off
// pttrace-options: profile=silvermont,buffer=128,drain=1/16,truth=1
// host-check: rerun
// host-check: rtit-buffovf
/* RTIT internal buffer overflow (seed 002 §4.2.5; issue 7): a 128-byte internal buffer drained at
 * one byte per 16 instructions cannot keep up with a workload of indirect calls, so
 * MSR_RTIT_STATUS[3] Buffer_Overflow sets and packets are dropped; once the buffer has drained, the
 * next instruction sends FUP.BuffOvf with where execution continues and tracing resumes.
 * In the guest: Buffer_Overflow seen set while tracing, PSB first in the region. On the host: the
 * region equals the plugin's copy, the RTIT decoder finds FUP.BuffOvf packets, and a second run
 * under -icount gives identical bytes. */
#include "guest.h"
#include "pt.h"
#include "pt_churn.h"


static volatile uint64_t sink;

void test_main(void)
{
    uint8_t *buf = alloc_aligned(1 << 16, 1 << 16);
    ASSERT_EQ(rdmsr(MSR_RTIT_CTL), 0);
    wrmsr(MSR_RTIT_BASE_ADDR, (uint64_t)buf);
    wrmsr(MSR_RTIT_LIMIT_MASK, 0xFFFF);
    wrmsr(MSR_RTIT_OFFSET, 0);
    wrmsr(MSR_RTIT_EVENTS, 7 | (6 << 3));
    uint64_t ctl = (1u << 2) | (1u << 3) | (1u << 8); /* OS, User, Dest */
    wrmsr(MSR_RTIT_CTL, ctl);
    wrmsr(MSR_RTIT_CTL, ctl | 1 | (1u << 13)); /* Trace_En, TraceActive */
    int seen = 0;
    for (int i = 0; i < 40; i++) {
        sink += churn(50);
        seen += (rdmsr(MSR_RTIT_STATUS) >> 3) & 1;
    }
    wrmsr(MSR_RTIT_CTL, ctl);
    uint64_t len = rdmsr(MSR_RTIT_OFFSET);
    printf("RTIT overflow: Buffer_Overflow seen %d times, %lu bytes, STATUS %lx\n", seen, len,
           rdmsr(MSR_RTIT_STATUS));
    ASSERT(seen > 0);
    ASSERT(len > 64 && len < (1 << 16) - 256);
    ASSERT_EQ(buf[0], 0xC0); /* PSB */
    pt_dump(buf, len);
}
