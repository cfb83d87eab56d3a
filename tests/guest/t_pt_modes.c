/* Intel PT across code-segment mode changes in IA-32e mode: 64-bit -> 32-bit compatibility mode
 * -> 16-bit protected mode (compatibility mode with a 16-bit code segment) -> 32-bit -> 64-bit,
 * all inside ONE traced window (IA32_RTIT_CTL.OS = User = BranchEn = 1, no filters, 64 KiB single
 * range), so that the host (tests/run-guest.sh) also decodes it with libipt against the ground
 * truth between pt_enable_wrmsr and pt_disable_wrmsr.
 *
 * SDM Vol. 3C "Intel Processor Trace":
 *  - MODE.Exec (`99 xx`, leaf 000): bit 0 = CS.L & IA32_EFER.LMA, bit 1 = CS.D ("64-bit mode" 01,
 *    "32-bit" 02, "16-bit" 00). Generated on a far branch, interrupt or exception "if the mode
 *    changes", before the TIP that carries the target ("Packet Generation under Different Enable
 *    Conditions": far transfer = PIP?, MODE.Exec?, TIP(target); no FUP). A far transfer that keeps
 *    the mode gives a bare TIP.
 *  - IP payloads are effective addresses (offsets from the CS base: CPUID.(14H,0):ECX[31] LIP = 0);
 *    every code segment here has base 0, so they equal the linear addresses.
 *  - Near RETs stay compressed (TNT) in every mode; indirect near CALLs give TIP(target).
 *
 * The harness GDT (lib/boot.S) has no ring-0 32-bit or 16-bit code segment, so the test loads its
 * own copy of it (same selectors, so CS/SS/DS/TR stay valid) with two more descriptors:
 *   SEL32 = 0x7F0: code, DPL 0, base 0, limit 4 GiB, L = 0, D = 1 (32-bit);
 *   SEL16 = 0x7F8: code, DPL 0, base 0, limit 4 GiB, L = 0, D = 0 (16-bit);
 * and restores the harness GDT afterwards. SS stays the flat data segment 0x10 (B = 1): 16-bit
 * code uses ESP for its 2-byte pushes. 16-bit near branches truncate EIP to 16 bits (SDM JMP/CALL:
 * "IF OperandSize = 16 THEN EIP <- tempEIP AND 0000FFFFH"), so with a zero CS base the 16-bit code
 * must run below 64 KiB: it is copied to physical (= linear) COPY16 = 0x6000, conventional memory
 * that neither the harness (AP trampoline at 0x8000, unused here) nor QEMU's multiboot loader
 * (info at 0x9000, read at boot) uses once the test runs.
 *
 * The trip (mode_trip, in assembly):
 *   64: lcall *m16:32            -> MODE.Exec 02, TIP(entry32)          (far CALL, 64 -> 32)
 *   32: ljmp $SEL32, $same32     -> TIP(same32), no MODE                 (far JMP, 32 -> 32)
 *       loop: jcc, call *%ebx (TIP func32), ret (compressed), ...
 *       ljmp $SEL16, $COPY16     -> MODE.Exec 00, TIP(COPY16)            (far JMP, 32 -> 16)
 *   16: call rel16 (no packet), ret (compressed);
 *       loop: call *%si (TIP func16), jcc, ret (compressed)
 *       ljmpl $SEL32, $back32    -> MODE.Exec 02, TIP(back32)            (far JMP, 16 -> 32)
 *   32: call rel32 (no packet), ret (compressed);
 *       lret                     -> MODE.Exec 01, TIP(ret64)             (far RET, 32 -> 64)
 *   64: call *%r8                -> TIP(fn64)
 * The first block after each mode change ends in an instruction that decodes differently in the
 * previous mode (EA ptr16:32 is invalid in 64-bit code; E8 rel16 in 16-bit code is 3 bytes, E8
 * rel32 in 32-bit code 5; 41 FF D0 is INC ECX + CALL in 32-bit code): the plugin must classify
 * each block in the mode it executes in. */
#include "pt.h"

#define SEL32 0x7F0
#define SEL16 0x7F8
#define GDT_ENTRIES 256 /* the copy: 2 KiB, SEL32/SEL16 in its last two slots */
#define COPY16 0x6000
#define BUF_SIZE 65536
#define N32 9 /* iterations of the 32-bit loop */

extern uint64_t gdt[];
extern char gdt_ptr[];
extern char pt_enable_wrmsr[], pt_disable_wrmsr[];
extern char entry32[], same32[], back32[], func32[], ret64[], fn64[], code16_start[],
    code16_end[], func16[];

/* uint32_t mode_trip(uint32_t n): runs the trip above; returns EAX as the 32/16-bit code left it.
 * Saves every callee-saved register (SDM Vol. 1 "Register Operands in 64-Bit Mode": the upper
 * halves of GPRs are undefined after compatibility mode). */
asm(".pushsection .rodata\n\t"
    ".balign 8\n"
    "far32_ptr:\n\t"
    ".long entry32\n\t"
    ".word 0x7F0\n\t"
    ".popsection\n\t"
    ".text\n\t"
    ".code64\n\t"
    ".globl mode_trip, ret64, fn64\n"
    "mode_trip:\n\t"
    "push %rbx\n\t"
    "push %rbp\n\t"
    "push %r12\n\t"
    "push %r13\n\t"
    "push %r14\n\t"
    "push %r15\n\t"
    "mov %edi, %ecx\n\t"
    "mov $func32, %ebx\n\t"
    "mov $(0x6000 + func16 - code16_start), %esi\n\t"
    "xor %eax, %eax\n\t"
    "lcall *far32_ptr(%rip)\n"        /* FF /3, operand size 32: m16:32 */
    "ret64:\n\t"
    "lea fn64(%rip), %r8\n\t"
    "call *%r8\n\t"                    /* 41 FF D0: ends the first 64-bit block */
    "mov %eax, %eax\n\t"
    "pop %r15\n\t"
    "pop %r14\n\t"
    "pop %r13\n\t"
    "pop %r12\n\t"
    "pop %rbp\n\t"
    "pop %rbx\n\t"
    "ret\n"
    "fn64:\n\t"
    "add $0x1000, %eax\n\t"
    "ret\n\t"
    /* ---- 32-bit compatibility mode (CS = SEL32) ---- */
    ".code32\n\t"
    ".globl entry32, same32, back32, func32\n"
    "entry32:\n\t"
    "ljmp $0x7F0, $same32\n\t"          /* EA ptr16:32 (invalid in 64-bit code): first 32-bit block */
    "ud2\n"
    "same32:\n\t"
    "inc %eax\n"
    "1:\t"
    "test $1, %ecx\n\t"
    "jz 2f\n\t"
    "call *%ebx\n\t"                   /* indirect near call: TIP(func32) */
    "jmp 3f\n"
    "2:\t"
    "add %ecx, %eax\n"
    "3:\t"
    "dec %ecx\n\t"
    "jnz 1b\n\t"
    "ljmp $0x7F8, $0x6000\n"            /* far JMP into 16-bit code */
    "back32:\n\t"
    "call func32\n\t"                  /* E8 rel32: ends the first block back in 32-bit code */
    "add $0x100, %eax\n\t"
    "lret\n"                           /* far RET (32-bit operand size) to 64-bit code */
    "func32:\n\t"
    "add $7, %eax\n\t"
    "ret\n\t"
    /* ---- 16-bit code, copied to COPY16 and run there (CS = SEL16, base 0) ---- */
    ".code16\n\t"
    ".globl code16_start, code16_end, func16, after_call16\n"
    "code16_start:\n\t"
    "call func16\n"                    /* E8 rel16: ends the first 16-bit block */
    "after_call16:\n\t"
    "mov $5, %cx\n"
    "1:\t"
    "call *%si\n\t"                    /* indirect near call (16-bit): TIP(func16) */
    "test $1, %cl\n\t"
    "jz 2f\n\t"
    "add %cx, %ax\n"
    "2:\t"
    "dec %cx\n\t"
    "jnz 1b\n\t"
    "ljmpl $0x7F0, $back32\n"           /* 66 EA ptr16:32: far JMP back to 32-bit code */
    "func16:\n\t"
    "add $3, %ax\n\t"
    "ret\n"
    "code16_end:\n\t"
    ".code64\n");
uint32_t mode_trip(uint32_t n);

static uint32_t expected_eax(uint32_t n)
{
    uint32_t eax = 1;                  /* same32 */
    for (uint32_t c = n; c; c--)
        eax += (c & 1) ? 7 : c;
    uint16_t ax = (uint16_t)eax + 3;   /* call func16 */
    for (uint16_t cx = 5; cx; cx--) {
        ax += 3;
        if (cx & 1)
            ax += cx;
    }
    eax = (eax & 0xFFFF0000u) | ax;
    return eax + 7 + 0x100 + 0x1000;   /* call func32, back32, fn64 */
}

static uint64_t my_gdt[GDT_ENTRIES] __attribute__((aligned(16)));
struct __attribute__((packed)) gdtr { uint16_t limit; uint64_t base; };

static void load_gdt(const struct gdtr *g) { asm volatile("lgdt %0" : : "m"(*g) : "memory"); }

static volatile uint32_t trip_result;

__attribute__((noinline)) static void traced_body(void)
{
    trip_result = mode_trip(N32);
}

void test_main(void)
{
    /* The GDT copy: every harness descriptor (same selectors, TSS descriptors already busy),
     * then the 32-bit and 16-bit ring-0 code segments in the last two slots. */
    struct gdtr old;
    memcpy(&old, gdt_ptr, sizeof(old));
    ASSERT_EQ(old.base, (uint64_t)gdt);
    ASSERT((uint64_t)old.limit + 1 <= SEL32);
    memcpy(my_gdt, gdt, (uint64_t)old.limit + 1);
    my_gdt[SEL32 / 8] = 0x00CF9A000000FFFFull; /* G=1 D=1 L=0 P=1 DPL=0 code exec/read */
    my_gdt[SEL16 / 8] = 0x008F9A000000FFFFull; /* G=1 D=0 L=0 P=1 DPL=0 code exec/read */
    struct gdtr mine = { sizeof(my_gdt) - 1, (uint64_t)my_gdt };
    uint64_t n16 = (uint64_t)(code16_end - code16_start);
    ASSERT(n16 < 256);
    memcpy((void *)COPY16, code16_start, n16);
    const uint64_t f16 = COPY16 + (uint64_t)(func16 - code16_start);

    /* Untraced dry run: the trip works at all. */
    load_gdt(&mine);
    uint32_t dry = mode_trip(N32);
    load_gdt(&old);
    printf("mode trip (untraced): eax %x, expected %x\n", dry, expected_eax(N32));
    ASSERT_EQ(dry, expected_eax(N32));
    ASSERT_EQ(read_cs(), KERNEL_CS);

    uint8_t *buf = alloc_aligned(BUF_SIZE, BUF_SIZE);
    wrmsr(IA32_RTIT_OUTPUT_BASE, (uint64_t)buf);
    wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, BUF_SIZE - 1); /* single range, offset 0 */
    wrmsr(IA32_RTIT_STATUS, 0);
    uint64_t ctl = RTIT_CTL_OS | RTIT_CTL_USER | RTIT_CTL_BRANCHEN;
    load_gdt(&mine);
    asm volatile(".globl pt_enable_wrmsr\npt_enable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)(ctl | RTIT_CTL_TRACEEN)),
                    "d"((uint32_t)((ctl | RTIT_CTL_TRACEEN) >> 32)));
    traced_body();
    asm volatile(".globl pt_disable_wrmsr\npt_disable_wrmsr: wrmsr"
                 :: "c"(IA32_RTIT_CTL), "a"((uint32_t)ctl), "d"((uint32_t)(ctl >> 32)));
    load_gdt(&old);

    uint64_t mp = rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS), st = rdmsr(IA32_RTIT_STATUS);
    uint64_t len = mp >> 32;
    printf("modes: %lu bytes, MASK_PTRS %lx, STATUS %lx, eax %x\n", len, mp, st, trip_result);
    ASSERT_EQ(trip_result, expected_eax(N32));
    ASSERT_EQ(mp & 0xFFFFFFFF, BUF_SIZE - 1);
    ASSERT(len > 16 && len < BUF_SIZE / 2);
    ASSERT_EQ(st & (RTIT_STATUS_ERROR | RTIT_STATUS_STOPPED), 0);
    ASSERT(pt_has_psb(buf));

    struct pt_pkt *pk = alloc_pages((len * sizeof(struct pt_pkt) + 4095) / 4096);
    int n = pt_parse_all(buf, len, pk, (int)len);
    if (n < 0) {
        pt_print(buf, len);
        test_fail("unparsable trace");
    }
    pt_print(buf, len);

    /* Start: PSB+, MODE.Exec 64-bit, TIP.PGE(NLIP of the enabling WRMSR). */
    int i = 0;
    while (i < n && pk[i].kind != PT_PSBEND)
        i++;
    i = pt_next_nonpad(pk, n, i);
    ASSERT(i > 0);
    ASSERT_EQ(pk[i].kind, PT_MODE);
    ASSERT_EQ(pk[i].val, 0x01);
    i = pt_next_nonpad(pk, n, i);
    ASSERT_EQ(pk[i].kind, PT_TIP_PGE);
    ASSERT_EQ(pk[i].ip, (uint64_t)pt_enable_wrmsr + 2);
    int first = pt_next_nonpad(pk, n, i);

    /* End: FUP(the disabling WRMSR), TIP.PGD (suppressed). */
    int last = pt_prev_nonpad(pk, n);
    ASSERT_EQ(pk[last].kind, PT_TIP_PGD);
    ASSERT_EQ(pk[last].ipbytes, 0);
    int fup = pt_prev_nonpad(pk, last);
    ASSERT_EQ(pk[fup].kind, PT_FUP);
    ASSERT_EQ(pk[fup].ip, (uint64_t)pt_disable_wrmsr);

    /* Every MODE.Exec between them must be followed at once by the TIP of its far transfer. */
    static const char *const what[4] = {
        "far CALL 64 -> 32 (lcall m16:32): MODE.Exec CS.D=1 CS.L=0 (02)",
        "far JMP 32 -> 16 (ljmp ptr16:32): MODE.Exec CS.D=0 CS.L=0 (00)",
        "far JMP 16 -> 32 (ljmpl ptr16:32): MODE.Exec CS.D=1 CS.L=0 (02)",
        "far RET 32 -> 64 (lret): MODE.Exec CS.L=1 (01)",
    };
    const uint64_t want_mode[4] = { 0x02, 0x00, 0x02, 0x01 };
    const uint64_t want_ip[4] = { (uint64_t)entry32, COPY16, (uint64_t)back32, (uint64_t)ret64 };
    int w = 0, in_psb = 0, mode0 = -1;
    for (int k = first; k >= 0 && k < fup; k = pt_next_nonpad(pk, n, k)) {
        if (pk[k].kind == PT_PSB)
            in_psb = 1;
        else if (pk[k].kind == PT_PSBEND)
            in_psb = 0;
        if (pk[k].kind != PT_MODE || in_psb)
            continue;
        int t = pt_next_nonpad(pk, n, k);
        if (w >= 4) {
            printf("FAIL: MODE.Exec %02lx at %#lx: more MODE.Exec packets than mode changes\n",
                   pk[k].val, pk[k].off);
            test_fail("extra MODE.Exec");
        }
        printf("  %-62s: %02x %02lx at %#lx, then %s %lx (expected TIP %lx)\n", what[w],
               buf[pk[k].off], pk[k].val, pk[k].off, t < 0 ? "-" : pt_kind_name(pk[t].kind),
               t < 0 ? 0 : pk[t].ip, want_ip[w]);
        if (mode0 < 0)
            mode0 = k;
        ASSERT_EQ(buf[pk[k].off], 0x99);
        ASSERT_EQ(pk[k].val, want_mode[w]);
        ASSERT(t > 0);
        ASSERT_EQ(pk[t].kind, PT_TIP);
        ASSERT(pk[t].ipbytes != 0);
        ASSERT_EQ(pk[t].ip, want_ip[w]);
        w++;
    }
    ASSERT_EQ(w, 4);

    /* The whole trip, packet by packet, from the first MODE.Exec to the compressed RET of fn64:
     * 'M' MODE.Exec (payload), 'T' TIP (IP), 'b' one TNT bit (taken). Conditional branches and
     * compressed near RETs give TNT bits, indirect near CALLs and far transfers TIPs; direct
     * JMP/CALL nothing. Nothing else (no FUP: there is no event in the trip). */
    struct item { char k; uint64_t v; uint64_t off; };
    static struct item want[128], got[128];
    int nw = 0, ng = 0;
#define WANT(kind, val) (want[nw].k = (kind), want[nw].v = (val), nw++)
    WANT('M', 0x02);                           /* lcall */
    WANT('T', (uint64_t)entry32);
    WANT('T', (uint64_t)same32);               /* ljmp 32 -> 32: no MODE.Exec */
    for (uint32_t c = N32; c; c--) {
        WANT('b', !(c & 1));                   /* jz 2f */
        if (c & 1) {
            WANT('T', (uint64_t)func32);       /* call *%ebx */
            WANT('b', 1);                      /* ret, compressed */
        }
        WANT('b', c != 1);                     /* jnz 1b */
    }
    WANT('M', 0x00);                           /* ljmp 32 -> 16 */
    WANT('T', COPY16);
    WANT('b', 1);                              /* ret of the direct call func16 */
    for (uint32_t cx = 5; cx; cx--) {
        WANT('T', f16);                        /* call *%si */
        WANT('b', 1);                          /* ret */
        WANT('b', !(cx & 1));                  /* jz 2f */
        WANT('b', cx != 1);                    /* jnz 1b */
    }
    WANT('M', 0x02);                           /* ljmpl 16 -> 32 */
    WANT('T', (uint64_t)back32);
    WANT('b', 1);                              /* ret of the direct call func32 */
    WANT('M', 0x01);                           /* lret 32 -> 64 */
    WANT('T', (uint64_t)ret64);
    WANT('T', (uint64_t)fn64);                 /* call *%r8 */
    WANT('b', 1);                              /* ret */
#undef WANT
    for (int k = mode0; k >= 0 && k < fup && ng < nw; k = pt_next_nonpad(pk, n, k)) {
        if (pk[k].kind == PT_TNT) {
            int top = 7;
            while (top > 0 && !(pk[k].val >> top & 1))
                top--;
            for (int b = top - 1; b >= 1 && ng < nw; b--)
                got[ng].k = 'b', got[ng].v = pk[k].val >> b & 1, got[ng].off = pk[k].off, ng++;
            continue;
        }
        got[ng].k = pk[k].kind == PT_MODE ? 'M' : pk[k].kind == PT_TIP ? 'T' : '?';
        got[ng].v = pk[k].kind == PT_MODE ? pk[k].val : pk[k].ip;
        got[ng].off = pk[k].off;
        if (got[ng].k == '?')
            printf("  unexpected %s %lx at %#lx\n", pt_kind_name(pk[k].kind), pk[k].ip, pk[k].off);
        ng++;
    }
    int bad = -1;
    for (int k = 0; k < nw && bad < 0; k++)
        if (k >= ng || got[k].k != want[k].k || got[k].v != want[k].v)
            bad = k;
    if (bad >= 0) {
        printf("trip packets differ at item %d (of %d); expected | got:\n", bad, nw);
        for (int k = bad > 4 ? bad - 4 : 0; k < nw && k < bad + 8; k++)
            printf("  %3d %c %-8lx | %c %-8lx (packet at %#lx)%s\n", k, want[k].k, want[k].v,
                   k < ng ? got[k].k : '-', k < ng ? got[k].v : 0, k < ng ? got[k].off : 0,
                   k == bad ? "  <--" : "");
        pt_dump(buf, len);
        test_fail("trip packets");
    }
    printf("  trip: %d items (MODE.Exec, TIP, TNT bits) as expected\n", nw);
    for (int k = first; k >= 0 && k < fup; k = pt_next_nonpad(pk, n, k))
        if (pk[k].kind != PT_TNT && pk[k].kind != PT_TIP && pk[k].kind != PT_MODE &&
            pk[k].kind != PT_PSB && pk[k].kind != PT_PSBEND && pk[k].kind != PT_PIP &&
            pk[k].kind != PT_CBR) {
            printf("FAIL: %s %lx at %#lx in the traced window\n", pt_kind_name(pk[k].kind), pk[k].ip,
                   pk[k].off);
            test_fail("unexpected packet");
        }
    pt_dump(buf, len);
}
