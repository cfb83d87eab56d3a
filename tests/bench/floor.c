/* The floor of any per-block design (make bench): one empty execute callback per translated
 * block, registered with QEMU_PLUGIN_CB_NO_REGS. Whatever pttrace costs above this is what its
 * callback does, not the callback itself. */
#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static void on_exec(unsigned int vcpu, void *udata) { (void)vcpu; (void)udata; }

static void on_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS, NULL);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info; (void)argc; (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
    return 0;
}
