/* The floor of a record-then-encode design that records only the blocks the block before did not
 * predict (make bench, issue 13). Each translated block gets, in this order:
 *   - a conditional execute callback, called only when the vCPU's `expected` scoreboard entry is
 *     not this block's key (its address at translation): it appends the block's key to a per-vCPU
 *     ring of 8192 entries (no consumer reads it, the ring wraps), like tests/bench/record_floor.c;
 *   - an inline store of the key of the block the last instruction leads to when nothing else
 *     decides it (a fall-through, a direct JMP or CALL, a Jcc/JrCXZ/LOOP predicted taken), or 0
 *     (RET, indirect and far transfers, INT, SYSCALL: the next block is always recorded);
 *   - an inline add of 1 to the vCPU's block count, from which an encoder would learn how many
 *     predicted blocks ran between two recorded ones.
 * An encoder would walk the predicted successors itself. Keys are translation addresses: exact in
 * user mode; in full system they stand for whatever identifies a translation uniquely (the floor
 * measures the vCPU's cost, it is not a recorder). `predict=btfnt`: a Jcc predicts its target only
 * when it jumps backwards (a static predictor's rule), else falls through. At exit it prints
 * "predict-floor: recorded R of N blocks" to stderr. */
#include <qemu-plugin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define RING 8192
#define VCPUS 64
struct ring {
    uint64_t *pos, *end, recorded;
    uint64_t entry[RING];
} __attribute__((aligned(128)));
static struct ring rings[VCPUS];
struct per_vcpu {
    uint64_t expected, blocks, pad[14]; /* one vCPU's entries on a 128-byte pair of lines */
};
static struct qemu_plugin_scoreboard *board;
static qemu_plugin_u64 expected, blocks;
static int btfnt;

static void on_unpredicted(unsigned int vcpu, void *key)
{
    if (vcpu >= VCPUS) return;
    struct ring *r = &rings[vcpu];
    if (__builtin_expect(r->pos >= r->end, 0)) {
        r->pos = r->entry;
        r->end = r->entry + RING;
    }
    *r->pos++ = (uint64_t)(uintptr_t)key;
    r->recorded++;
}

/* The key of the block after `tb` when its last instruction alone decides it, else 0. */
static uint64_t predicted(struct qemu_plugin_tb *tb)
{
    struct qemu_plugin_insn *last = qemu_plugin_tb_get_insn(tb, qemu_plugin_tb_n_insns(tb) - 1);
    uint8_t b[16];
    size_t len = qemu_plugin_insn_size(last), i = 0;
    uint64_t next = qemu_plugin_insn_vaddr(last) + len;
    if (len > sizeof b || qemu_plugin_insn_data(last, b, len) != len) return 0;
    while (i < len && (b[i] == 0x66 || b[i] == 0x67 || b[i] == 0xf2 || b[i] == 0xf3 || b[i] == 0x2e || b[i] == 0x3e))
        i++;
    if (i < len && (b[i] & 0xf0) == 0x40) i++; /* REX */
    if (i + 1 >= len) return b[i] == 0xc3 || b[i] == 0xcf || b[i] == 0xcb || b[i] == 0xf4 ? 0 : next;
    uint8_t op = b[i];
    int32_t d32;
    int64_t d = 0;
    int jcc = 0;
    if ((op >= 0x70 && op <= 0x7f) || (op >= 0xe0 && op <= 0xe3)) { d = (int8_t)b[i + 1]; jcc = 1; }
    else if (op == 0x0f && b[i + 1] >= 0x80 && b[i + 1] <= 0x8f && i + 6 <= len) { memcpy(&d32, b + i + 2, 4); d = d32; jcc = 1; }
    else if (op == 0xeb) d = (int8_t)b[i + 1];
    else if ((op == 0xe9 || op == 0xe8) && i + 5 <= len) { memcpy(&d32, b + i + 1, 4); d = d32; }
    else if (op == 0xc2 || op == 0xca || op == 0xff || op == 0xcd || op == 0x0f || op == 0xea || op == 0x9a) return 0;
    else return next;
    if (jcc && btfnt && d >= 0) return next;
    return next + d;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    uint64_t key = qemu_plugin_tb_vaddr(tb);
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, on_unpredicted, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_NE,
                                              expected, key, (void *)(uintptr_t)key);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_STORE_U64, expected, predicted(tb));
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, blocks, 1);
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
    (void)id; (void)udata;
    uint64_t recorded = 0;
    for (int i = 0; i < VCPUS; i++) recorded += rings[i].recorded;
    fprintf(stderr, "predict-floor: recorded %llu of %llu blocks\n", (unsigned long long)recorded,
            (unsigned long long)qemu_plugin_u64_sum(blocks));
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "predict=btfnt")) btfnt = 1;
    board = qemu_plugin_scoreboard_new(sizeof(struct per_vcpu));
    expected = qemu_plugin_scoreboard_u64_in_struct(board, struct per_vcpu, expected);
    blocks = qemu_plugin_scoreboard_u64_in_struct(board, struct per_vcpu, blocks);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
