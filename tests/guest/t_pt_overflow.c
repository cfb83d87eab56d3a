// qemu-options: -icount shift=3,sleep=off
// pttrace-options: buffer=256,drain=1/16,truth=1
// host-check: rerun
// host-check: decode
/* Internal buffer overflow (issue 7): a 256-byte internal buffer that drains one byte per 16
 * instructions (deterministic: drain progress follows retired instructions) cannot keep up with
 * a workload of indirect calls and conditional branches, so the processor model drops packets and
 * writes OVF followed by FUP (PacketEn = 1) once space frees up (SDM "Overflow (OVF)"; libipt's
 * ovf-fup.ptt). In the guest: PSB first, several OVF packets, every OVF followed by a FUP (or,
 * when TraceEn is cleared during the overflow, ending the stream: libipt's ovf.ptt), STATUS
 * without Error. On the host: bytes in memory = host copy,
 * libipt decodes the whole stream without an error (resynchronising at every OVF/FUP), and a
 * second run under -icount gives identical bytes. */
#include "pt.h"
#include "pt_churn.h"

static volatile uint64_t sink;

void test_main(void)
{
    uint8_t *buf = alloc_aligned(1 << 16, 1 << 16);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, (1 << 16) - 1);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN;
    wrmsr(IA32_RTIT_CTL, ctl | RTIT_CTL_TRACEEN);
    sink = churn(4000);
    wrmsr(IA32_RTIT_CTL, ctl);
    uint64_t len = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & RTIT_STATUS_ERROR, 0);
    ASSERT(len > 64 && len < (1 << 16) - 256);
    ASSERT(pt_has_psb(buf));
    static struct pt_pkt pk[1 << 15];
    int n = pt_parse_all(buf, len, pk, 1 << 15);
    ASSERT(n > 0);
    int ovf = 0, ovf_fup = 0, ovf_last = 0;
    for (int i = 0; i < n; i++) {
        if (pk[i].kind != PT_OVF)
            continue;
        ovf++;
        int j = pt_next_nonpad(pk, n, i);
        ovf_fup += j >= 0 && pk[j].kind == PT_FUP;
        ovf_last += j < 0; /* TraceEn cleared during an overflow: a lone OVF ends the stream */
    }
    printf("OVERFLOW %d bytes, %d packets, %d OVF, %d followed by FUP, %d ending the stream\n", (int)len, n,
           ovf, ovf_fup, ovf_last);
    ASSERT(ovf >= 3);
    ASSERT_EQ(ovf_fup + ovf_last, ovf); /* PacketEn stayed 1: OVF, FUP(next IP) */
    pt_dump(buf, len);
}
