//! User mode: a trace survives a default-fatal signal (issue 20).
//!
//! QEMU 10.2's linux-user installs host handlers only for the signals that dump core
//! (`signal_init`, `core_dump_signal`); those end through `dump_core_and_abort`, which runs the
//! plugin's exit callback. Every other default-fatal signal that the guest leaves at SIG_DFL
//! (SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGALRM, SIGUSR1/2, ...) is SIG_DFL on the host too and
//! kills qemu-x86_64 at once: no exit callback, everything buffered lost.
//!
//! Design:
//! - For each such signal whose host disposition is SIG_DFL, the plugin installs its own host
//!   handler (`on_signal`). The guest's view is untouched: QEMU keeps the guest's dispositions in
//!   its own table (`sigact_table`), which answers the guest's rt_sigaction queries, and it only
//!   reads the host disposition once, in `signal_init`, before any vCPU runs.
//! - When the guest sets a disposition, QEMU's `do_sigaction` installs the matching host action
//!   (SIG_DFL, SIG_IGN or its own handler), replacing the plugin's. After every rt_sigaction
//!   the plugin looks at the host disposition again and re-installs its handler where QEMU left
//!   SIG_DFL (`after_guest_sigaction`). A guest handler or SIG_IGN is never replaced.
//! - A guest-blocked signal stays blocked on the host as well (QEMU mirrors the guest mask into
//!   the host mask), so the handler runs exactly when SIG_DFL would have killed the process.
//! - The handler is async-signal-safe: it records the signal and writes it to a pipe. A
//!   finisher thread (all signals blocked) wakes up, lets the plugin finish every stream and its
//!   sideband (`on_fatal`), restores SIG_DFL and re-raises the signal on itself, so the process
//!   dies of that signal with the exit status it would have had without the plugin.
//! - Meanwhile no vCPU thread runs further guest code or system calls: each parks at its next
//!   block or system-call callback (`park`), after giving up its slot. A signal the program
//!   raises itself (kill, raise, tgkill) arrives while its thread is inside that system call, so
//!   the thread parks at the system call's return: the trace ends in the kernel, as on silicon.
//! - The same thread also ticks the bounded-interval flush (`FLUSH_INTERVAL`): see `epoch`.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Default-fatal signals that do not dump core (signal(7): action "Term"). x86_64 guests on
/// x86_64 hosts number them alike (QEMU's target_to_host_signal is the identity for 1..31).
pub const TERM_SIGNALS: [c_int; 12] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGSTKFLT,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGPWR,
];

/// How often buffered trace, truth and sideband bytes are handed to the writer and written to
/// the files: what a SIGKILL, the OOM killer or a dead machine can lose is bounded by this
/// interval (plus what the kernel has not yet written back).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// The fatal signal being handled (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);
/// Write end of the finisher's pipe.
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
/// Read end of the finisher's pipe (a forked child closes the parent's and makes its own).
static PIPE_R: AtomicI32 = AtomicI32::new(-1);
/// Incremented every FLUSH_INTERVAL; a vCPU hands off its buffered bytes when it sees a new value.
static EPOCH: AtomicU32 = AtomicU32::new(0);

struct Hooks {
    /// Finish every stream and the sideband; called once on the finisher thread.
    on_fatal: fn(c_int),
    /// Periodic flush; called every FLUSH_INTERVAL on the finisher thread.
    on_tick: fn(),
    /// Called inside the signal handler once the signal is pending (atomic stores only): stop
    /// the vCPUs' common case, whose next block then looks at `pending` and parks.
    on_pending: fn(),
}
static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// A fatal signal is being handled: the calling vCPU thread must not run guest code.
#[inline(always)]
pub fn pending() -> bool {
    PENDING.load(Ordering::Relaxed) != 0
}

/// `pending` as a sequentially consistent load (for a Dekker-style check against a store the
/// caller just made).
pub fn pending_seqcst() -> bool {
    PENDING.load(Ordering::SeqCst) != 0
}

/// The flush epoch (see `FLUSH_INTERVAL`).
#[inline(always)]
pub fn epoch() -> u32 {
    EPOCH.load(Ordering::Relaxed)
}

/// Park the calling vCPU thread for good: the finisher ends the process. The caller must have
/// given up every lock it holds.
#[cold]
pub fn park() -> ! {
    loop {
        // SAFETY: plain sleep; signals arriving meanwhile run `on_signal`, which returns.
        unsafe { libc::pause() };
    }
}

extern "C" fn on_signal(sig: c_int) {
    // SAFETY: errno of this thread, saved and restored around the write (async-signal-safe).
    let errno = unsafe { *libc::__errno_location() };
    if PENDING.compare_exchange(0, sig, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
        if let Some(h) = HOOKS.get() {
            (h.on_pending)();
        }
        let fd = PIPE_W.load(Ordering::Acquire);
        let bytes = sig.to_ne_bytes();
        // SAFETY: write(2) is async-signal-safe; the buffer lives on this stack.
        unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    }
    unsafe { *libc::__errno_location() = errno };
}

/// The host disposition of `sig` (None if it cannot be read).
fn host_handler(sig: c_int) -> Option<libc::sighandler_t> {
    // SAFETY: queries only.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(sig, std::ptr::null(), &mut old) == 0).then_some(old.sa_sigaction)
    }
}

/// Install the plugin's handler for `sig` if its host disposition is SIG_DFL.
fn claim_if_default(sig: c_int) {
    if host_handler(sig) != Some(libc::SIG_DFL) {
        return;
    }
    // SAFETY: installs a plain function as handler. SA_RESTART: a host system call QEMU is
    // blocked in resumes as if nothing happened.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_signal as extern "C" fn(c_int) as usize;
        act.sa_flags = libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}

/// Claim every default-fatal signal still at SIG_DFL and start the finisher thread. Call once,
/// after QEMU's `signal_init` (from the first vCPU's init).
pub fn install(on_fatal: fn(c_int), on_tick: fn(), on_pending: fn()) -> std::io::Result<()> {
    if HOOKS.set(Hooks { on_fatal, on_tick, on_pending }).is_err() {
        return Ok(());
    }
    let mut fds = [0 as c_int; 2];
    // SAFETY: creates a pipe into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    PIPE_W.store(fds[1], Ordering::Release);
    PIPE_R.store(fds[0], Ordering::Release);
    spawn_finisher()?;
    for sig in TERM_SIGNALS {
        claim_if_default(sig);
    }
    Ok(())
}

/// After a guest rt_sigaction returned: QEMU may just have installed a host SIG_DFL (the guest
/// set SIG_DFL, e.g. after its own handler); claim every such signal again. Guest handlers and
/// SIG_IGN stay as QEMU installed them.
pub fn reclaim_defaults() {
    if HOOKS.get().is_none() || pending() {
        return;
    }
    for sig in TERM_SIGNALS {
        claim_if_default(sig);
    }
}

/// In a forked child (not traced; the finisher thread does not exist there): give the claimed
/// signals back their default action, so the child dies of them as without the plugin and never
/// wakes the parent's finisher through the inherited pipe. Async-signal-safe.
pub fn forked_child() {
    for sig in TERM_SIGNALS {
        if host_handler(sig) == Some(on_signal as extern "C" fn(c_int) as usize) {
            // SAFETY: restores the default action.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
    PIPE_W.store(-1, Ordering::Release);
}

fn spawn_finisher() -> std::io::Result<()> {
    let read_fd = PIPE_R.load(Ordering::Acquire);
    crate::output::with_all_signals_blocked(|| {
        std::thread::Builder::new()
            .name("pttrace-finisher".into())
            .spawn(move || finisher(read_fd))
    })?;
    Ok(())
}

/// In a traced forked child, at once after fork() (issue 19): the parent's finisher does not
/// exist here, and a signal written to the inherited pipe would wake the *parent's* finisher.
/// The child gets its own pipe now; signals meanwhile wait in it until `start_in_child` starts
/// the child's finisher. The claimed signals keep the plugin's handler. Async-signal-safe.
pub fn reset_in_child() {
    PENDING.store(0, Ordering::Release);
    for fd in [&PIPE_R, &PIPE_W] {
        let old = fd.swap(-1, Ordering::AcqRel);
        if old >= 0 {
            // SAFETY: the inherited copy of this module's pipe.
            unsafe { libc::close(old) };
        }
    }
    let mut fds = [0 as c_int; 2];
    // SAFETY: creates a pipe into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
        PIPE_R.store(fds[0], Ordering::Release);
        PIPE_W.store(fds[1], Ordering::Release);
    }
}

/// The forked child's finisher thread (after `reset_in_child`).
pub fn start_in_child() -> std::io::Result<()> {
    if HOOKS.get().is_none() || PIPE_R.load(Ordering::Acquire) < 0 {
        return Ok(());
    }
    spawn_finisher()
}

fn finisher(fd: c_int) {
    let hooks = HOOKS.get().expect("hooks set before the thread starts");
    let timeout = FLUSH_INTERVAL.as_millis() as c_int;
    loop {
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: polls one descriptor of this module.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if n == 0 || (n < 0 && PENDING.load(Ordering::Acquire) == 0) {
            EPOCH.fetch_add(1, Ordering::Relaxed);
            (hooks.on_tick)();
            continue;
        }
        let sig = PENDING.load(Ordering::Acquire);
        if sig == 0 {
            continue;
        }
        (hooks.on_fatal)(sig);
        die_of(sig);
    }
}

/// End the process with `sig`, as SIG_DFL would have.
fn die_of(sig: c_int) -> ! {
    // SAFETY: resets the disposition, unblocks the signal for this thread only and sends it to
    // this thread: the default action terminates the whole process with that signal.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), sig);
        // Not reached unless the signal was ignored meanwhile.
        libc::_exit(128 + sig);
    }
}
