/* Intel PT helpers for guest tests: MSR numbers, IA32_RTIT_CTL bits, and a hex dump of a trace
 * buffer to the serial port (lines "PTDUMP <hex>", 32 bytes each) that the host test extracts. */
#ifndef PT_H
#define PT_H
#include "guest.h"

#define RTIT_CTL_TRACEEN   (1ull << 0)
#define RTIT_CTL_CYCEN     (1ull << 1)
#define RTIT_CTL_OS        (1ull << 2)
#define RTIT_CTL_USER      (1ull << 3)
#define RTIT_CTL_CR3FILTER (1ull << 7)
#define RTIT_CTL_TOPA      (1ull << 8)
#define RTIT_CTL_MTCEN     (1ull << 9)
#define RTIT_CTL_TSCEN     (1ull << 10)
#define RTIT_CTL_DISRETC   (1ull << 11)
#define RTIT_CTL_BRANCHEN  (1ull << 13)

#define RTIT_STATUS_ERROR   (1ull << 4)
#define RTIT_STATUS_STOPPED (1ull << 5)

static inline void pt_dump(const uint8_t *buf, uint64_t len)
{
    static const char hex[] = "0123456789abcdef";
    for (uint64_t i = 0; i < len; i += 32) {
        puts_serial("PTDUMP ");
        for (uint64_t j = i; j < len && j < i + 32; j++) {
            putchar_serial(hex[buf[j] >> 4]);
            putchar_serial(hex[buf[j] & 15]);
        }
        putchar_serial('\n');
    }
}

/* As pt_dump, with lines "TAG <hex>": tests/run-guest.sh compares the lines "PTDUMP<n> <hex>"
 * (tag "PTDUMP0", "PTDUMP1", ...) with the plugin's copy of vCPU n's stream. */
static inline void pt_dump_tagged(const char *tag, const uint8_t *buf, uint64_t len)
{
    static const char hex[] = "0123456789abcdef";
    for (uint64_t i = 0; i < len; i += 32) {
        puts_serial(tag);
        putchar_serial(' ');
        for (uint64_t j = i; j < len && j < i + 32; j++) {
            putchar_serial(hex[buf[j] >> 4]);
            putchar_serial(hex[buf[j] & 15]);
        }
        putchar_serial('\n');
    }
}

static inline int pt_has_psb(const uint8_t *p)
{
    for (int i = 0; i < 16; i += 2)
        if (p[i] != 0x02 || p[i + 1] != 0x82)
            return 0;
    return 1;
}
/* ---- a minimal packet parser for in-guest checks ----
 * Knows the packets a configuration without CYC/MTC/PTWRITE/power events produces: PAD, PSB,
 * PSBEND, short TNT, TIP/TIP.PGE/TIP.PGD/FUP (with last-IP decompression, SDM "IP Compression"),
 * MODE, PIP, CBR, TSC, TraceStop, OVF. Anything else is an error. */
#ifndef RTIT_CTL_ADDR0_CFG
#define RTIT_CTL_ADDR0_CFG(v) ((uint64_t)(v) << 32) /* 1: filter range, 2: TraceStop range */
#define RTIT_CTL_ADDR1_CFG(v) ((uint64_t)(v) << 36)
#endif

enum pt_kind { PT_PAD, PT_PSB, PT_PSBEND, PT_TNT, PT_TIP, PT_TIP_PGE, PT_TIP_PGD, PT_FUP,
               PT_MODE, PT_PIP, PT_CBR, PT_TSC, PT_TRACESTOP, PT_OVF,
               /* power event trace (issue 15) */
               PT_EXSTOP, PT_MWAIT, PT_PWRE, PT_PWRX,
               /* event trace (issue 15) */
               PT_CFE, PT_EVD };
struct pt_pkt {
    uint64_t off;      /* offset of the packet in the buffer */
    uint32_t len;      /* its size in bytes */
    enum pt_kind kind;
    uint32_t ipbytes;  /* TIP family: the IPBytes field (0: IP suppressed) */
    uint64_t ip;       /* TIP family with ipbytes != 0: the decompressed IP */
    uint64_t val;      /* TNT: the byte; MODE: its payload byte; PIP: CR3; CBR: the ratio */
};
struct pt_parser { const uint8_t *buf; uint64_t len, pos, last_ip; };

static inline void pt_parser_init(struct pt_parser *p, const uint8_t *buf, uint64_t len)
{
    p->buf = buf;
    p->len = len;
    p->pos = 0;
    p->last_ip = 0;
}

/* 1: *k is the next packet; 0: end of the buffer; -1: unknown or truncated packet at p->pos. */
static inline int pt_next(struct pt_parser *p, struct pt_pkt *k)
{
    static const uint8_t ip_len[8] = { 0, 2, 4, 6, 6, 0xFF, 8, 0xFF };
    const uint8_t *b = p->buf + p->pos;
    uint64_t left = p->len - p->pos;
    if (p->pos >= p->len)
        return 0;
    k->off = p->pos;
    k->ipbytes = 0;
    k->ip = 0;
    k->val = 0;
    if (b[0] == 0x00) {
        k->kind = PT_PAD, k->len = 1;
    } else if (b[0] == 0x02) {
        if (left < 2)
            return -1;
        switch (b[1]) {
        case 0x82:
            if (left < 16 || !pt_has_psb(b))
                return -1;
            k->kind = PT_PSB, k->len = 16;
            p->last_ip = 0;
            break;
        case 0x23: k->kind = PT_PSBEND, k->len = 2; break;
        case 0x83: k->kind = PT_TRACESTOP, k->len = 2; break;
        case 0xF3: k->kind = PT_OVF, k->len = 2; p->last_ip = 0; break;
        case 0x03: k->kind = PT_CBR, k->len = 4; break;
        case 0x43: k->kind = PT_PIP, k->len = 8; break;
        case 0x62: case 0xE2: k->kind = PT_EXSTOP, k->len = 2; break; /* val: IP bit */
        case 0xC2: k->kind = PT_MWAIT, k->len = 10; break;            /* val: hints | ext << 32 */
        case 0x22: k->kind = PT_PWRE, k->len = 4; break;              /* val: payload[15:0] */
        case 0xA2: k->kind = PT_PWRX, k->len = 7; break;              /* val: payload[15:0] */
        case 0x13: k->kind = PT_CFE, k->len = 4; break;  /* val: IP << 15 | type << 8 | vector */
        case 0x53: k->kind = PT_EVD, k->len = 11; break; /* val: payload; ipbytes: type */
        default: return -1;
        }
        if (left < k->len)
            return -1;
        if (k->kind == PT_CBR)
            k->val = b[2];
        if (k->kind == PT_EXSTOP)
            k->val = b[1] >> 7;
        if (k->kind == PT_PWRE || k->kind == PT_PWRX)
            k->val = b[2] | (uint64_t)b[3] << 8;
        if (k->kind == PT_MWAIT)
            for (int i = 7; i >= 0; i--)
                k->val = k->val << 8 | b[2 + i];
        if (k->kind == PT_CFE)
            k->val = (uint64_t)(b[2] >> 7) << 15 | (uint64_t)(b[2] & 0x1F) << 8 | b[3];
        if (k->kind == PT_EVD) {
            k->ipbytes = b[2] & 0x1F;
            for (int i = 7; i >= 0; i--)
                k->val = k->val << 8 | b[3 + i];
        }
        if (k->kind == PT_PIP) {
            uint64_t f = 0;
            for (int i = 5; i >= 0; i--)
                f = f << 8 | b[2 + i];
            k->val = (f >> 1) << 5;
        }
    } else if (!(b[0] & 1)) {
        k->kind = PT_TNT, k->len = 1, k->val = b[0];
    } else if (b[0] == 0x99) {
        if (left < 2)
            return -1;
        k->kind = PT_MODE, k->len = 2, k->val = b[1];
    } else if (b[0] == 0x19) {
        if (left < 8)
            return -1;
        k->kind = PT_TSC, k->len = 8;
    } else if ((b[0] & 3) != 3 && ((b[0] & 0x1F) == 0x0D || (b[0] & 0x1F) == 0x11 ||
                                   (b[0] & 0x1F) == 0x01 || (b[0] & 0x1F) == 0x1D)) {
        uint32_t ipb = b[0] >> 5, n = ip_len[ipb];
        if (n == 0xFF || left < 1 + n)
            return -1;
        k->kind = (b[0] & 0x1F) == 0x0D ? PT_TIP : (b[0] & 0x1F) == 0x11 ? PT_TIP_PGE
                : (b[0] & 0x1F) == 0x01 ? PT_TIP_PGD : PT_FUP;
        k->len = 1 + n;
        k->ipbytes = ipb;
        uint64_t v = 0;
        for (int i = (int)n - 1; i >= 0; i--)
            v = v << 8 | b[1 + i];
        uint64_t last = p->last_ip;
        switch (ipb) {
        case 0: break;
        case 1: v = (last & ~0xFFFFull) | v; break;
        case 2: v = (last & ~0xFFFFFFFFull) | v; break;
        case 3: v = (uint64_t)((int64_t)(v << 16) >> 16); break;
        case 4: v = (last & ~0xFFFFFFFFFFFFull) | v; break;
        default: break; /* 6: full 64-bit IP */
        }
        if (ipb) {
            k->ip = v;
            p->last_ip = v;
        }
    } else {
        return -1;
    }
    p->pos += k->len;
    return 1;
}

static inline const char *pt_kind_name(enum pt_kind k)
{
    static const char *const names[] = { "PAD", "PSB", "PSBEND", "TNT", "TIP", "TIP.PGE",
        "TIP.PGD", "FUP", "MODE", "PIP", "CBR", "TSC", "TraceStop", "OVF", "EXSTOP", "MWAIT",
        "PWRE", "PWRX", "CFE", "EVD" };
    return names[k];
}

/* Prints every packet ("  off KIND [ip|value]") and returns the number parsed, or -1 (after
 * printing the offset) if an unknown packet stops the parse. */
static inline int pt_print(const uint8_t *buf, uint64_t len)
{
    struct pt_parser p;
    struct pt_pkt k;
    int n = 0, r;
    pt_parser_init(&p, buf, len);
    while ((r = pt_next(&p, &k)) > 0) {
        n++;
        if (k.kind == PT_PAD)
            continue;
        printf("  %04lx %s", k.off, pt_kind_name(k.kind));
        if (k.kind >= PT_TIP && k.kind <= PT_FUP && k.ipbytes)
            printf(" %lx", k.ip);
        else if (k.kind >= PT_TIP && k.kind <= PT_FUP)
            printf(" (suppressed)");
        else if (k.kind == PT_TNT || k.kind == PT_MODE || k.kind == PT_PIP || k.kind == PT_CBR ||
                 k.kind >= PT_EXSTOP)
            printf(" %lx", k.val);
        printf("\n");
    }
    if (r < 0) {
        printf("  %04lx unknown packet %02x\n", p.pos, buf[p.pos]);
        return -1;
    }
    return n;
}
/* Parses the whole buffer into out[0..max); returns the packet count, or -1 if an unknown or
 * truncated packet (or more than max packets) stops the parse. */
static inline int pt_parse_all(const uint8_t *buf, uint64_t len, struct pt_pkt *out, int max)
{
    struct pt_parser p;
    int n = 0, r;
    pt_parser_init(&p, buf, len);
    while (n < max && (r = pt_next(&p, &out[n])) > 0)
        n++;
    return p.pos == len ? n : -1;
}

/* ---- more MSRs, STATUS bits and ToPA entry fields (t_pt_gp, t_pt_topa*, t_pt_single_wrap) ---- */
#ifndef RTIT_STATUS_FILTEREN
#define RTIT_STATUS_FILTEREN  (1ull << 0)
#endif
#ifndef RTIT_STATUS_CONTEXTEN
#define RTIT_STATUS_CONTEXTEN (1ull << 1)
#endif
#ifndef RTIT_STATUS_TRIGGEREN
#define RTIT_STATUS_TRIGGEREN (1ull << 2)
#endif
#ifndef PERF_GLOBAL_STATUS_TOPA_PMI
#define PERF_GLOBAL_STATUS_TOPA_PMI (1ull << 55) /* IA32_PERF_GLOBAL_STATUS.Trace_ToPA_PMI */
#endif
/* ToPA table entry (SDM "ToPA Table Entry Format", Figure/Table 33-2/33-3): bit 0 END, 2 INT,
 * 4 STOP, 9:6 Size (4 KiB << Size), MAXPHYADDR-1:12 base; bits 1, 3, 5, 11:10 reserved. */
#ifndef TOPA_END
#define TOPA_END        (1ull << 0)
#define TOPA_INT        (1ull << 2)
#define TOPA_STOP       (1ull << 4)
#define TOPA_SIZE(n)    ((uint64_t)(n) << 6)
#endif

/* IA32_RTIT_OUTPUT_MASK_PTRS fields. Single range: [31:0] mask; ToPA: [31:7] entry index.
 * [63:32] output offset. Bits 6:0 always read 1. */
static inline uint64_t pt_mask_ptrs(uint64_t index, uint64_t offset)
{
    return 0x7F | (index << 7) | (offset << 32);
}
static inline uint32_t pt_topa_index(uint64_t mask_ptrs) { return (mask_ptrs >> 7) & 0x1FFFFFF; }
static inline uint32_t pt_out_offset(uint64_t mask_ptrs) { return mask_ptrs >> 32; }

/* Index of the first byte != 0 in buf[0..len), or len. */
static inline uint64_t pt_first_nonzero(const uint8_t *buf, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        if (buf[i])
            return i;
    return len;
}

/* Index of the first packet after pk[i] that is not PAD, or -1 if there is none. */
static inline int pt_next_nonpad(const struct pt_pkt *pk, int n, int i)
{
    for (i++; i < n; i++)
        if (pk[i].kind != PT_PAD)
            return i;
    return -1;
}

/* Index of the last packet before pk[i] that is not PAD, or -1 if there is none. */
static inline int pt_prev_nonpad(const struct pt_pkt *pk, int i)
{
    for (i--; i >= 0; i--)
        if (pk[i].kind != PT_PAD)
            return i;
    return -1;
}

/* ---- the newer IA32_RTIT_CTL / STATUS bits (profile=sapphirerapids; SDM Table 33-6/33-7) ---- */
#define RTIT_CTL_PWREVTEN   (1ull << 4)  /* CPUID.(14H,0):EBX[5] power event trace */
#define RTIT_CTL_FUPONPTW   (1ull << 5)  /* EBX[4] PTWRITE */
#define RTIT_CTL_PTWEN      (1ull << 12) /* EBX[4] PTWRITE */
#define RTIT_CTL_EVENTEN    (1ull << 31) /* EBX[7] event trace */
#define RTIT_CTL_DISTNT     (1ull << 55) /* EBX[8] TNT disable */
#define RTIT_CTL_INJECTPSBPMI (1ull << 56) /* EBX[6] PSB and PMI preservation */
#define RTIT_STATUS_PENDPSB     (1ull << 6)
#define RTIT_STATUS_PENDTOPAPMI (1ull << 7)

/* The non-PAD packets after the first PSB+ (PSB ... PSBEND) of pk[0..n): their kinds in order,
 * into out[0..max); returns the count. */
static inline int pt_after_psb(const struct pt_pkt *pk, int n, const struct pt_pkt **out, int max)
{
    int i = 0, m = 0;
    while (i < n && pk[i].kind != PT_PSBEND)
        i++;
    for (i++; i < n && m < max; i++)
        if (pk[i].kind != PT_PAD)
            out[m++] = &pk[i];
    return m;
}
#endif

