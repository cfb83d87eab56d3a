//! libpttrace.so: QEMU TCG plugin glue for the pttrace hardware model.
//!
//! All hardware behaviour lives in `pttrace-core`; this crate only
//! - classifies each instruction once at translation time (iced-x86, via the core),
//! - registers one execute callback per translation block (QEMU ends a block at every COFI, so
//!   the next block's PC is the outcome of the previous block's last instruction),
//! - keeps per-vCPU model state in a table indexed by vCPU (no global lock on the hot path),
//! - hands filled trace buffers to a writer thread (`output`).

mod fatal_signal;
mod glib;
mod guest;
mod instrumentation;
mod output;
mod regs;
mod system;
mod user;

use qemu_plugin::install::{Args, Info};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::{PluginId, TranslationBlock, VCPUIndex};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in the child of a guest fork() that is not traced (`inherit=0`, `drain=realtime:`,
/// `trace=off`): nothing is recorded there (reported at exit).
pub(crate) static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

/// fork() of a traced process (issue 19), in the forking thread before the fork: hold every lock
/// the child needs, so no lock another thread held at that moment stays locked in the child.
extern "C" fn on_fork_prepare() {
    if let Some(sh) = user::SHARED.get().filter(|sh| sh.inherits()) {
        sh.prepare_fork();
    }
}

extern "C" fn on_fork_parent() {
    if let Some(sh) = user::SHARED.get().filter(|sh| sh.inherits()) {
        sh.after_fork_parent();
    }
}

extern "C" fn on_fork_child() {
    match user::SHARED.get().filter(|sh| sh.inherits()) {
        Some(sh) => {
            // The child's own streams start where it returns from fork (`Shared::syscall_return`).
            fatal_signal::reset_in_child();
            sh.after_fork_child();
        }
        None => {
            FORKED_CHILD.store(true, Ordering::Release);
            fatal_signal::forked_child();
        }
    }
}

unsafe extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> std::os::raw::c_int;
}

pub(crate) fn forked_child() -> bool {
    FORKED_CHILD.load(Ordering::Relaxed) || BROKEN.load(Ordering::Relaxed)
}

/// Set after a panic inside a callback: tracing stops (the message says so) but QEMU keeps
/// running; a panic must never unwind into QEMU's C frames.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// Check the `buffer=`/`drain=` configuration and start the real-time drainer thread if asked.
pub(crate) fn start_buffer(
    spec: Option<pttrace_core::pt::buffer_spec::BufferSpec>,
) -> Option<pttrace_core::pt::internal_buffer::RealTimeDrainer> {
    let spec = spec?;
    if let Err(e) = spec.config() {
        fail(&e);
    }
    spec.spawn_drainer().unwrap_or_else(|e| fail(&format!("cannot start the drainer thread: {e}")))
}

pub(crate) fn guarded(what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
        && !BROKEN.swap(true, Ordering::AcqRel)
    {
        // Not eprintln!: it panics when stderr is gone (a closed pipe), and this runs outside
        // the guard (on the finisher thread that would end the thread, never the process).
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "pttrace: internal error in {what}; tracing stopped, the trace written so far is incomplete");
    }
}

/// `[rsp]` at a signal handler's first instruction holds the return address (sa_restorer); the
/// interrupted RIP is in the rt_sigframe's ucontext: 8 (pretcode) + 40 (uc_flags, uc_link,

#[derive(Default)]
struct PtTrace;

impl Register for PtTrace {
    /// The callbacks without the crate's global lock (see `HasCallbacks for PtTrace`).
    fn register_default(&mut self, id: PluginId, args: &Args, info: &Info) -> qemu_plugin::Result<()> {
        SYSTEM_MODE.store(info.system.is_some(), Ordering::Relaxed);
        qemu_plugin::qemu_plugin_register_vcpu_init_cb(id, Some(on_vcpu_init))?;
        qemu_plugin::qemu_plugin_register_vcpu_exit_cb(id, Some(on_vcpu_exit))?;
        self.register(id, args, info)?;
        // User mode with `trace=off` (the cost baseline, issue 13's `trace=off` <= 1.03x)
        // registers neither a translation callback (QEMU then runs its plugin instrumentation
        // pass over every block: ~15 M instructions on the 6-thread corpus program) nor
        // system-call callbacks (~230 instructions each). Tracing runs need both: system calls
        // end runs, start forked children and note code mappings.
        if info.system.is_some() || user::SHARED.get().is_some_and(|sh| sh.traces()) {
            qemu_plugin::qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translation_block_translate))?;
        }
        if user::SHARED.get().is_some_and(|sh| sh.traces()) {
            register_syscall_callbacks(id);
        }
        Ok(())
    }

    fn register(&mut self, id: PluginId, args: &Args, info: &Info) -> qemu_plugin::Result<()> {
        if info.target_name != "x86_64"
            && info.target_name != "x86_64-linux-user"
            && info.target_name != "x86_64-softmmu"
        {
            fail(&format!("target '{}' is not x86_64", info.target_name));
        }
        if info.system.is_some() {
            let smp = info.system.as_ref().map_or(1, |s| s.smp_vcpus);
            let max = info.system.as_ref().map_or(1, |s| s.max_vcpus);
            return system::install(id, args, smp, max);
        }
        // SAFETY: registers plain functions; called by the C library around fork() (the prepare
        // handler in the forking thread, the others in the parent and the child after it).
        unsafe { pthread_atfork(Some(on_fork_prepare), Some(on_fork_parent), Some(on_fork_child)) };
        user::install(id, args)
    }
}

/// The callbacks a full-system run registers at install (`register_default`) and again after a
/// reset.
fn register_common_callbacks(id: PluginId) -> qemu_plugin::Result<()> {
    qemu_plugin::qemu_plugin_register_vcpu_init_cb(id, Some(on_vcpu_init))?;
    qemu_plugin::qemu_plugin_register_vcpu_exit_cb(id, Some(on_vcpu_exit))?;
    qemu_plugin::qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translation_block_translate))?;
    Ok(())
}

/// Full-system mode, after `qemu_plugin_reset` removed every callback
/// (`instrumentation::on_reset`): the same callbacks as at install.
/// The callbacks `register_default` registers in user mode, again after a translation flush
/// (`user::on_predict_reset`).
pub(crate) fn register_user_callbacks(id: PluginId) -> qemu_plugin::Result<()> {
    register_common_callbacks(id)?;
    register_syscall_callbacks(id);
    Ok(())
}

fn register_syscall_callbacks(id: PluginId) {
    qemu_plugin::qemu_plugin_register_vcpu_syscall_cb(id, Some(on_syscall));
    qemu_plugin::qemu_plugin_register_vcpu_syscall_ret_cb(id, Some(on_syscall_return));
}

pub(crate) fn register_system_callbacks(id: PluginId) {
    if let Err(e) = register_common_callbacks(id) {
        fail(&format!("cannot register callbacks again after a translation flush: {e}"));
    }
    system::register_callbacks(id);
}

/// Report a configuration error and stop QEMU with a non-zero status (a panic here would abort
/// QEMU with a core dump instead of a message).
pub(crate) fn fail(msg: &str) -> ! {
    eprintln!("pttrace: {msg}");
    std::process::exit(1);
}
/// The plugin's callbacks are plain `extern "C"` functions registered through the sys layer
/// (`register_default`), not the qemu-plugin crate's `HasCallbacks` handlers: those run every
/// callback under one process-wide `std::sync::Mutex` (the crate's `PLUGIN`). A vCPU thread
/// inside a system call's callback at the moment another thread forks would leave it locked in
/// the child for good, and the child's first callback would wait forever (issue 19). User mode
/// needs no such lock (every structure has its own); full-system mode keeps the serialization it
/// had under the crate's lock (`SYSTEM_CALLBACKS`).
impl HasCallbacks for PtTrace {}

/// Full-system mode: callbacks run one at a time, as they did under the qemu-plugin crate's lock.
static SYSTEM_CALLBACKS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
static SYSTEM_MODE: AtomicBool = AtomicBool::new(false);

pub(crate) fn serialized() -> Option<parking_lot::MutexGuard<'static, ()>> {
    SYSTEM_MODE.load(Ordering::Relaxed).then(|| SYSTEM_CALLBACKS.lock())
}

extern "C" fn on_vcpu_init(_id: PluginId, vcpu: VCPUIndex) {
    let _s = serialized();
    if let Some(sh) = user::SHARED.get() {
        guarded("vcpu init", || sh.vcpu_init(vcpu));
    }
    guarded("vcpu init", || system::vcpu_init(vcpu));
}

extern "C" fn on_vcpu_exit(_id: PluginId, vcpu: VCPUIndex) {
    let _s = serialized();
    if let Some(sh) = user::SHARED.get() {
        guarded("vcpu exit", || sh.vcpu_exit(vcpu));
    }
}

extern "C" fn on_translation_block_translate(_id: PluginId, tb: *mut qemu_plugin::sys::qemu_plugin_tb) {
    let _s = serialized();
    let tb = TranslationBlock::from(tb);
    if let Some(sh) = user::SHARED.get() {
        guarded("translation", || sh.translate(&tb));
    }
    guarded("translation", || system::translate(&tb));
}

#[allow(clippy::too_many_arguments)]
extern "C" fn on_syscall(
    _id: PluginId,
    vcpu: VCPUIndex,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    _a7: u64,
    _a8: u64,
) {
    let _s = serialized();
    if let Some(sh) = user::SHARED.get() {
        guarded("syscall", || sh.syscall(vcpu, num, [a1, a2, a3, a4, a5, a6]));
    }
}

extern "C" fn on_syscall_return(_id: PluginId, vcpu: VCPUIndex, num: i64, ret: i64) {
    let _s = serialized();
    if let Some(sh) = user::SHARED.get() {
        guarded("syscall return", || sh.syscall_return(vcpu, num, ret));
    }
}

#[ctor::ctor]
fn register() {
    qemu_plugin::plugin::register_plugin(PtTrace);
}

/// CPU time of the calling thread (None if the clock is unavailable).
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    (unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Host monotonic nanoseconds since the first call, at least 1 (callers keep 0 for "never"):
/// the time marks of the instrumentation switch and of the model placement.
pub(crate) fn monotonic_ns() -> u64 {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64 + 1
}

/// The QEMU handle of a translation block, for registering plain `extern "C"` callbacks through
/// the sys layer (the qemu-plugin crate only registers boxed closures and keeps the handle
/// private). `TranslationBlock` is that handle plus a lifetime marker.
pub(crate) fn tb_ptr(tb: &TranslationBlock) -> *mut qemu_plugin::sys::qemu_plugin_tb {
    const _: () = assert!(std::mem::size_of::<TranslationBlock>() == std::mem::size_of::<usize>());
    // SAFETY: same size (checked above); the struct's only non-zero-sized field is the handle.
    unsafe { std::mem::transmute_copy::<TranslationBlock, usize>(tb) as *mut qemu_plugin::sys::qemu_plugin_tb }
}
