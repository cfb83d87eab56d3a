/* The floor of a record-then-encode design (make bench, issue 13): one C execute callback per
 * translated block that appends the block's 8-byte handle to a per-vCPU ring of 8192 entries
 * (QEMU_PLUGIN_CB_NO_REGS; no consumer reads it, the ring wraps). This is the least any design
 * that records every executed block for an encoder pays on the vCPU, before any modelling;
 * tests/bench/floor.c (an empty callback) is the cost of the call alone. */
#include <qemu-plugin.h>
#include <stdint.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define RING 8192
#define VCPUS 64
struct ring {
    void **pos, **end;
    void *entry[RING];
} __attribute__((aligned(128)));
static struct ring rings[VCPUS];

static void __attribute__((noinline)) wrap(struct ring *r)
{
    r->pos = r->entry;
    r->end = r->entry + RING;
}

static void on_exec(unsigned int vcpu, void *udata)
{
    if (vcpu >= VCPUS) return;
    struct ring *r = &rings[vcpu];
    if (__builtin_expect(r->pos >= r->end, 0)) wrap(r);
    *r->pos++ = udata;
}

static void on_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)qemu_plugin_tb_vaddr(tb));
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info; (void)argc; (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
    return 0;
}
