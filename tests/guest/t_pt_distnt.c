// pttrace-options: profile=sapphirerapids
// host-check: dis-tnt
/* TNT disable (issue 15): IA32_RTIT_CTL[55] DisTNT, CPUID.(14H,0):EBX[8], profile=sapphirerapids.
 * Enumeration (CPUID.01H signature 06_8FH stepping 8, leaf 14H), the #GP rules of the new CTL bits
 * the profile does and does not enumerate, then two traced runs of the same code (an indirect
 * CALL in a loop with conditional branches in caller and callee) into one single range:
 *   run 1, DisTNT, RET compression on: MODE.Exec, TIP.PGE, TIP(callee) x 5, FUP, TIP.PGD; no TNT,
 *          and the compressed RETs leave no packet;
 *   run 2, DisTNT + DisRETC: each RET is a TIP to the return site.
 * The guest checks those exact sequences against its own symbol addresses. Host checks
 * (tests/run-guest.sh, "host-check: dis-tnt"): bytes in memory = host copy, libipt's packet
 * decoder finds no TNT packet in the stream, meta.txt records dis_tnt=1 and `pttrace decode`
 * refuses to reconstruct the flow (without TNT the code cannot be walked). */
#include "pt.h"

extern void distnt_body(uint64_t ctl);
extern char distnt_after_enable[], distnt_callee[], distnt_ret_site[], distnt_disable_wrmsr[];

/* rdi = IA32_RTIT_CTL with TraceEn; traces 5 iterations and disables before returning. */
asm(".text\n"
    ".globl distnt_body\n"
    "distnt_body:\n"
    "  mov %rdi, %rax\n  mov %rdi, %rdx\n  shr $32, %rdx\n  mov $0x570, %ecx\n"
    ".globl distnt_enable_wrmsr\n"
    "distnt_enable_wrmsr: wrmsr\n"
    ".globl distnt_after_enable\n"
    "distnt_after_enable:\n"
    "  mov $5, %r8d\n"
    "1: lea distnt_callee(%rip), %rax\n"
    ".globl distnt_icall\n"
    "distnt_icall: call *%rax\n"
    ".globl distnt_ret_site\n"
    "distnt_ret_site:\n"
    "  test $1, %r8d\n  jz 2f\n  nop\n"
    "2: dec %r8d\n  jnz 1b\n"
    "  mov %rdi, %rax\n  and $-2, %rax\n"
    ".globl distnt_disable_wrmsr\n"
    "distnt_disable_wrmsr: wrmsr\n"
    "  ret\n"
    ".globl distnt_callee\n"
    "distnt_callee:\n"
    "  cmp $3, %r8d\n  jne 3f\n  nop\n"
    "3:\n"
    ".globl distnt_callee_ret\n"
    "distnt_callee_ret: ret\n");

static struct pt_pkt pk[256];

/* The packets of one run (from its PSB on) must be exactly MODE.Exec 64-bit, TIP.PGE(after the
 * enabling WRMSR), per iteration TIP(callee) [and TIP(return site) with DisRETC], FUP(disabling
 * WRMSR), TIP.PGD(suppressed). Returns the offset where the run's packets end. */
static uint64_t check_run(const uint8_t *buf, uint64_t start, uint64_t end, int dis_retc)
{
    int n = pt_parse_all(buf + start, end - start, pk, 256);
    ASSERT(n > 0);
    ASSERT_EQ(pk[0].kind, PT_PSB);
    const struct pt_pkt *seq[64];
    int m = pt_after_psb(pk, n, seq, 64);
    int per = dis_retc ? 2 : 1;
    ASSERT_EQ(m, 2 + 5 * per + 2);
    ASSERT_EQ(seq[0]->kind, PT_MODE);
    ASSERT_EQ(seq[0]->val, 0x01);
    ASSERT_EQ(seq[1]->kind, PT_TIP_PGE);
    ASSERT_EQ(seq[1]->ip, (uint64_t)distnt_after_enable);
    for (int i = 0; i < 5; i++) {
        const struct pt_pkt *c = seq[2 + i * per];
        ASSERT_EQ(c->kind, PT_TIP);
        ASSERT_EQ(c->ip, (uint64_t)distnt_callee);
        if (dis_retc) {
            ASSERT_EQ(seq[3 + i * per]->kind, PT_TIP);
            ASSERT_EQ(seq[3 + i * per]->ip, (uint64_t)distnt_ret_site);
        }
    }
    ASSERT_EQ(seq[m - 2]->kind, PT_FUP);
    ASSERT_EQ(seq[m - 2]->ip, (uint64_t)distnt_disable_wrmsr);
    ASSERT_EQ(seq[m - 1]->kind, PT_TIP_PGD);
    ASSERT_EQ(seq[m - 1]->ipbytes, 0);
    for (int i = 0; i < n; i++)
        ASSERT(pk[i].kind != PT_TNT);
    return end;
}

void test_main(void)
{
    uint32_t r[4];
    cpuid(1, 0, r);
    ASSERT_EQ(r[0] & 0x0FFF3FFF, 0x000806F8); /* family 6, model 8FH, stepping 8 */
    cpuid(7, 0, r);
    ASSERT(r[1] & (1u << 25));
    cpuid(0x14, 0, r);
    ASSERT_EQ(r[0], 1);
    ASSERT(r[1] & (1u << 8));                  /* EBX[8] TNT disable */
    ASSERT_EQ(r[1] & (1u << 4), 0);            /* EBX[4] PTWRITE: never (QEMU's TCG has none) */
    ASSERT_EQ(r[1] & 0xF, 0xF);
    ASSERT_EQ(r[2], 0x7);
    cpuid(0x14, 1, r);
    ASSERT_EQ(r[0], 0x02490002);
    ASSERT_EQ(r[1], 0x003F3FFF);

    /* #GP rules: each new CTL bit is writable exactly when its CPUID bit is 1. */
    cpuid(0x14, 0, r);
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_DISTNT), 0);
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), RTIT_CTL_DISTNT);
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_PTWEN) != 0, !(r[1] & (1u << 4)));
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_FUPONPTW) != 0, !(r[1] & (1u << 4)));
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_PWREVTEN) != 0, !(r[1] & (1u << 5)));
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_INJECTPSBPMI) != 0, !(r[1] & (1u << 6)));
    ASSERT_EQ(wrmsr_safe(IA32_RTIT_CTL, RTIT_CTL_EVENTEN) != 0, !(r[1] & (1u << 7)));
    ASSERT(wrmsr_safe(IA32_RTIT_CTL, 1ull << 57) != 0); /* always reserved */
    ASSERT(wrmsr_safe(IA32_RTIT_CTL, 1ull << 54) != 0);
    wrmsr(IA32_RTIT_CTL, 0);

    uint8_t *buf = alloc_aligned(4096, 4096);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF);
    wrmsr(IA32_RTIT_STATUS, 0);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_BRANCHEN | RTIT_CTL_DISTNT; /* single range */
    distnt_body(ctl | RTIT_CTL_TRACEEN);
    uint64_t end1 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    ASSERT_EQ(rdmsr(IA32_RTIT_CTL), ctl);
    wrmsr(IA32_RTIT_STATUS, 0); /* PacketByteCnt 0: PSB+ at the next enable */
    distnt_body(ctl | RTIT_CTL_DISRETC | RTIT_CTL_TRACEEN);
    uint64_t end2 = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    printf("DisTNT: run 1 %lu bytes, run 2 (DisRETC) %lu bytes\n", end1, end2 - end1);
    pt_print(buf, end2);
    check_run(buf, 0, end1, 0);
    check_run(buf, end1, end2, 1);
    ASSERT_EQ(rdmsr(IA32_RTIT_STATUS) & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    pt_dump(buf, end2);
}
