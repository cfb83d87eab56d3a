/* Probing WRMSR/RDMSR for #GP: a #GP handler that records what the guest saw (vector, error code,
 * RIP, and RCX/RDX/RAX in the trap frame) for the one WRMSR at gp_wrmsr_insn (or RDMSR at
 * gp_rdmsr_insn) and skips it.
 * Install with set_handler(13, gp_handler). Shared by t_pt_gp.c and t_pt_minimal.c. */
#ifndef GP_PROBE_H
#define GP_PROBE_H
#include "guest.h"

static volatile uint64_t gp_count, gp_vector, gp_error, gp_rip, gp_rcx, gp_rdx, gp_rax;
extern char gp_wrmsr_insn[];
extern char gp_rdmsr_insn[] __attribute__((weak)); /* only where raw_rdmsr is used */

static void gp_handler(struct trap_frame *f)
{
    if (f->rip != (uint64_t)gp_wrmsr_insn && f->rip != (uint64_t)gp_rdmsr_insn) {
        trap_dump(f);
        test_fail("#GP outside the tested WRMSR");
    }
    gp_count++;
    gp_vector = f->vector;
    gp_error = f->error_code;
    gp_rip = f->rip;
    gp_rcx = f->rcx;
    gp_rdx = f->rdx;
    gp_rax = f->rax;
    f->rip += 2; /* skip WRMSR (0F 30) / RDMSR (0F 32) */
}

/* RDMSR with exactly these RCX/RDX; 1 if it raised #GP (the frame is in gp_*). */
__attribute__((noinline, unused)) static int raw_rdmsr(uint64_t rcx, uint64_t rdx)
{
    uint64_t before = gp_count, rax = 0;
    asm volatile(".globl gp_rdmsr_insn\ngp_rdmsr_insn: rdmsr"
                 : "+a"(rax), "+d"(rdx) : "c"(rcx) : "memory");
    return gp_count != before;
}

/* WRMSR with exactly these 64-bit RCX/RAX/RDX; 1 if it raised #GP. */
__attribute__((noinline)) static int raw_wrmsr(uint64_t rcx, uint64_t rax, uint64_t rdx)
{
    uint64_t before = gp_count;
    asm volatile(".globl gp_wrmsr_insn\ngp_wrmsr_insn: wrmsr"
                 :: "c"(rcx), "a"(rax), "d"(rdx) : "memory");
    return gp_count != before;
}

/* The WRMSR with these RCX/RAX/RDX raised exactly one #GP(0) at gp_wrmsr_insn, and the handler saw
 * the registers the test loaded (the plugin steers a faulting WRMSR and must restore them). */
static void expect_gp_frame(uint64_t rcx, uint64_t rax, uint64_t rdx)
{
    uint64_t n = gp_count;
    ASSERT(raw_wrmsr(rcx, rax, rdx));
    ASSERT_EQ(gp_count, n + 1);
    ASSERT_EQ(gp_vector, 13);
    ASSERT_EQ(gp_error, 0);
    ASSERT_EQ(gp_rip, (uint64_t)gp_wrmsr_insn);
    ASSERT_EQ(gp_rcx, rcx);
    ASSERT_EQ(gp_rdx, rdx);
    ASSERT_EQ(gp_rax, rax);
}
#endif
