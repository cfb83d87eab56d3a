/* Intel PT CR3 filtering: IA32_RTIT_CTL.CR3Filter = 1, IA32_RTIT_CR3_MATCH = cr3_alt(), OS = 1.
 * Code running with CR3 = cr3_main() is not traced (ContextEn = 0). SDM Vol. 3C "Intel Processor
 * Trace": "CR3 Filtering", "Packet Enable (PacketEn)", Table "Packet Generation under Different
 * Enable Conditions" (MOV CR3: ContextEn 0 -> 1 gives PIP(new CR3), MODE.Exec?, TIP.PGE(NLIP);
 * ContextEn 1 -> 0 gives TIP.PGD with the IP suppressed), TIP.PGE/TIP.PGD packet definitions,
 * IA32_RTIT_STATUS.ContextEn (bit 1). Checked on the bytes in guest memory; the windows are not
 * compared by the host (no pt_enable_wrmsr / pt_disable_wrmsr labels: parts are untraced).
 *  1. enable with CR3 = main (nothing but PSB+), switch to alt (PIP, MODE.Exec, TIP.PGE), trace,
 *     switch back (TIP.PGD), untraced code, disable; STATUS.ContextEn = 0 right after.
 *  2. enable with CR3 = alt (PSB+ with PIP(alt), MODE.Exec, TIP.PGE), disable in alt (FUP,
 *     TIP.PGD); STATUS.ContextEn = 1 right after.
 *  3. ring 3 under CR3 = alt with User = 1: traced like ring 0; under main not at all. */
#include "pt.h"

#define BUF_SIZE 65536
#define MAX_PKTS 8192

static uint8_t *buf;
static struct pt_pkt *pk;
static int npk, failures;
static volatile uint64_t sink;

#define CHECK(c) do { if (!(c)) { printf("  CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static const uint64_t CTL = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN | RTIT_CTL_CR3FILTER;

__attribute__((noinline)) static uint64_t work(int n)
{
    uint64_t acc = 0;
    for (int i = 0; i < n; i++)
        acc = i & 1 ? acc * 3 + i : acc ^ i;
    asm volatile("" : "+r"(acc) :: "memory"); /* not pure: every call runs (and is traced) */
    return acc;
}

/* MOV to CR3; returns its next linear IP (the TIP.PGE IP when ContextEn rises). */
static inline uint64_t mov_cr3(uint64_t root)
{
    uint64_t nlip;
    asm volatile("mov %1, %%cr3\n1:\tlea 1b(%%rip), %0" : "=r"(nlip) : "r"(root) : "memory");
    return nlip;
}

static void pt_on(void)
{
    memset(buf, 0, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1);
    wrmsr(IA32_RTIT_STATUS, 0);
    wrmsr(IA32_RTIT_CR3_MATCH, cr3_alt());
    wrmsr(IA32_RTIT_CTL, CTL | RTIT_CTL_TRACEEN);
}

/* Parses (and prints) the stream written so far; TraceEn must be 0. */
static void parse(const char *name, uint64_t status)
{
    uint64_t len = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) >> 32;
    printf("(%s) %lu bytes, STATUS after the disabling WRMSR %lx:\n", name, len, status);
    ASSERT(len < BUF_SIZE - 4096);
    npk = pt_parse_all(buf, len, pk, MAX_PKTS);
    if (pt_print(buf, len) < 0 || npk < 0)
        test_fail("unparsable trace");
    CHECK(pt_has_psb(buf));
}

static int count(enum pt_kind kind)
{
    int c = 0;
    for (int i = 0; i < npk; i++)
        c += pk[i].kind == kind;
    return c;
}
static int next_pkt(int i) /* npk if there is none */
{
    int j = pt_next_nonpad(pk, npk, i);
    return j < 0 ? npk : j;
}
static int psbend(void)
{
    int i = 0;
    while (i < npk && pk[i].kind != PT_PSBEND)
        i++;
    return i;
}
static int last_pkt(void) { return pt_prev_nonpad(pk, npk); }

static void window_main_to_alt_and_back(void)
{
    ASSERT_EQ(read_cr3(), cr3_main());
    pt_on();
    sink = work(20); /* untraced: CR3 = main */
    uint64_t st_main = rdmsr(IA32_RTIT_STATUS);
    uint64_t nlip = mov_cr3(cr3_alt());
    sink = work(20); /* traced */
    uint64_t st_alt = rdmsr(IA32_RTIT_STATUS);
    mov_cr3(cr3_main());
    sink = work(20); /* untraced */
    wrmsr(IA32_RTIT_CTL, CTL);
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    parse("1: main -> alt -> main, disabled in main", st);
    printf("  STATUS in main %lx, in alt %lx; NLIP of MOV CR3 %lx\n", st_main, st_alt, nlip);

    CHECK(st_main & RTIT_STATUS_TRIGGEREN);
    CHECK(!(st_main & RTIT_STATUS_CONTEXTEN));
    CHECK(st_alt & RTIT_STATUS_CONTEXTEN);
    CHECK(!(st & RTIT_STATUS_CONTEXTEN)); /* the context at the disabling WRMSR: main */
    CHECK(!(st & RTIT_STATUS_TRIGGEREN));

    /* Enabled with ContextEn = 0: PSB+ carries no MODE.Exec/FUP, nothing follows until the MOV
     * CR3 to alt: PIP(alt), MODE.Exec (none since the PSB), TIP.PGE(NLIP). */
    int i = psbend();
    for (int k = 0; k < i; k++)
        CHECK(pk[k].kind != PT_MODE && pk[k].kind != PT_FUP);
    i = next_pkt(i);
    CHECK(i < npk && pk[i].kind == PT_PIP && pk[i].val == cr3_alt());
    i = next_pkt(i);
    CHECK(i < npk && pk[i].kind == PT_MODE && pk[i].val == 0x01);
    i = next_pkt(i);
    CHECK(i < npk && pk[i].kind == PT_TIP_PGE && pk[i].ipbytes && pk[i].ip == nlip);
    /* The switch back: TIP.PGD, IP suppressed (ContextEn = 0 afterwards); nothing after it, the
     * disabling WRMSR included. */
    int l = last_pkt();
    CHECK(l >= 0 && pk[l].kind == PT_TIP_PGD && pk[l].ipbytes == 0);
    CHECK(count(PT_TIP_PGE) == 1);
    CHECK(count(PT_TIP_PGD) == 1);
    CHECK(count(PT_FUP) == 0);
    CHECK(count(PT_TNT) >= 1); /* the traced work() */
    ASSERT_EQ(read_cr3(), cr3_main());
}

static void window_in_alt(void)
{
    mov_cr3(cr3_alt());
    pt_on();
    uint64_t st_on = rdmsr(IA32_RTIT_STATUS);
    sink = work(20);
    asm volatile("wrmsr" :: "c"(IA32_RTIT_CTL), "a"((uint32_t)CTL), "d"((uint32_t)(CTL >> 32)));
    uint64_t st = rdmsr(IA32_RTIT_STATUS);
    mov_cr3(cr3_main());
    parse("2: enabled and disabled in alt", st);
    CHECK(st_on & RTIT_STATUS_CONTEXTEN);
    CHECK(st & RTIT_STATUS_CONTEXTEN); /* the context at the disabling WRMSR: alt */
    CHECK(!(st & RTIT_STATUS_TRIGGEREN));

    /* PSB+ with PIP(alt) (OS = 1, ContextEn = 1), then MODE.Exec, TIP.PGE(NLIP of the WRMSR). */
    int e = psbend(), pip = 0;
    for (int k = 0; k < e; k++)
        pip += pk[k].kind == PT_PIP && pk[k].val == cr3_alt();
    CHECK(pip == 1);
    int i = next_pkt(e);
    CHECK(i < npk && pk[i].kind == PT_MODE && pk[i].val == 0x01);
    i = next_pkt(i);
    CHECK(i < npk && pk[i].kind == PT_TIP_PGE);
    int l = last_pkt();
    CHECK(l > 0 && pk[l].kind == PT_TIP_PGD && pk[l].ipbytes == 0);
    CHECK(l > 0 && pk[l - 1].kind == PT_FUP); /* FUP(the WRMSR), TIP.PGD() */
}

/* Ring 3 with User = 1: traced only while CR3 = alt. */
static uint64_t user_code(void) { return work(10) + 1; }

static void window_user(void)
{
    pt_on();
    uint64_t r1 = enter_user(user_code, NULL); /* CR3 = main: nothing */
    uint64_t nlip = mov_cr3(cr3_alt());
    uint64_t r2 = enter_user(user_code, NULL); /* traced, ring 0 and ring 3 */
    mov_cr3(cr3_main());
    wrmsr(IA32_RTIT_CTL, CTL);
    parse("3: ring 3 under main, then under alt", rdmsr(IA32_RTIT_STATUS));
    CHECK(r1 == r2);
    int i = next_pkt(psbend());
    CHECK(i < npk && pk[i].kind == PT_PIP && pk[i].val == cr3_alt());
    i = next_pkt(i);
    CHECK(i < npk && pk[i].kind == PT_MODE);
    i = next_pkt(i);
    CHECK(i < npk && pk[i].kind == PT_TIP_PGE && pk[i].ip == nlip);
    int user_ips = 0;
    for (int k = 0; k < npk; k++)
        user_ips += pk[k].kind >= PT_TIP && pk[k].kind <= PT_FUP && pk[k].ipbytes &&
                    pk[k].ip >= USER_ALIAS_OFFSET && pk[k].ip < 2 * USER_ALIAS_OFFSET;
    CHECK(user_ips >= 2); /* the IRET into ring 3 and the SYSCALL's return path */
    CHECK(count(PT_TIP_PGE) == 1);
    CHECK(count(PT_TIP_PGD) == 1);
}

void test_main(void)
{
    buf = alloc_aligned(BUF_SIZE, BUF_SIZE);
    pk = alloc_pages(MAX_PKTS * sizeof(struct pt_pkt) / 4096);
    ASSERT(cr3_alt() != cr3_main());
    window_main_to_alt_and_back();
    window_in_alt();
    window_user();
    ASSERT_EQ(read_cr3(), cr3_main());
    if (failures) {
        printf("%d checks failed\n", failures);
        test_fail("PT CR3 filter checks");
    }
}
