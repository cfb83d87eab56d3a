//! Forked children (issue 19): every process of the run gets its own streams, as perf's inherit.
//!
//! Layout: the process the run started with writes to DIR as before; every process it forks,
//! and every process those fork in turn, writes to its own directory DIR/proc-PID (flat: a
//! grandchild is DIR/proc-PID too; its meta.txt names its parent with `ppid=`), with its own
//! meta.txt, thread-N streams (threads numbered from 1 in each process), code.img and maps.txt.
//!
//! fork() under qemu-x86_64 is the host's fork(), with every other vCPU stopped (QEMU's
//! `fork_start`), but the plugin's own threads (encoder, writer, finisher) and vCPU threads inside
//! a system-call callback keep running. Only the forking thread exists in the child, so:
//! - Locks: the forking thread takes every lock of the plugin's state before fork() and gives it
//!   up after it, in the parent and in the child (`prepare_fork`, pthread_atfork), so the child
//!   never finds a lock that a thread which does not exist there held. Lock order: the slots in
//!   index order, then code.img's versions, the signal handlers, pending mmaps, totals, maps,
//!   stderr. (The plugin's callbacks take no lock of the qemu-plugin crate: see lib.rs.)
//! - Threads: the child starts its own writer (`Output::restart`), encoder and finisher.
//! - Bytes: whatever the parent had buffered (every thread's packets and truth lines not yet
//!   handed off, the writer's queue) is the parent's and stays unwritten in the child.
//! - The child's stream starts where it returns from fork (its first system-call return,
//!   `start_child`): like a new thread, PSB+ and then TIP.PGE at the instruction after the
//!   SYSCALL. Its instruction count (the code-version key) starts at 0 there.
//! - code.img starts with every VERSION record the parent wrote, in the same order, so the
//!   version ids of the translations the child inherits from QEMU's cache stay right. If code was
//!   rewritten before the fork, SWITCH records at count 0 give the child's thread the view of
//!   memory the forking thread had; then the child's own translations follow (mmap, dlopen, JIT
//!   after the fork). maps.txt starts with the parent's lines.

use super::*;

thread_local! {
    /// stderr's lock, held by the forking thread across fork() (`prepare_fork`): a thread of the
    /// parent printing at that moment would leave it locked in the child, whose messages (its
    /// summary at exit) would then wait forever.
    static STDERR_HELD: std::cell::RefCell<Option<std::io::StderrLock<'static>>> = const { std::cell::RefCell::new(None) };
}

impl Shared {
    /// Does this run trace at all (not `trace=off`)?
    pub(crate) fn traces(&self) -> bool {
        self.opts.trace != TraceKind::Off
    }

    /// Are forked children traced? `inherit=1` (default), something traced, and a drain that
    /// does not depend on the real-time drainer thread (which the child would not have).
    pub(crate) fn inherits(&self) -> bool {
        self.opts.inherit && self.traces() && self.drainer.is_none()
    }

    /// pthread_atfork prepare handler, on the forking thread: take every lock (order above).
    pub(crate) fn prepare_fork(&self) {
        let slots = self.used_slots();
        for slot in slots {
            std::mem::forget(slot.state.lock());
        }
        self.fork_locked.store(slots.len(), Ordering::Relaxed);
        self.code.lock_for_fork();
        std::mem::forget(self.handlers.write());
        std::mem::forget(self.pending_mmap.lock());
        std::mem::forget(self.totals.lock());
        std::mem::forget(self.maps_log.lock());
        // Last: a thread may print while it holds one of the locks above, never the reverse.
        STDERR_HELD.with(|h| *h.borrow_mut() = Some(std::io::stderr().lock()));
    }

    /// Give up `prepare_fork`'s locks (in the parent, and in the child, where the forking
    /// thread's copy is the only thread).
    fn unlock_after_fork(&self) {
        STDERR_HELD.with(|h| drop(h.borrow_mut().take()));
        // SAFETY: every lock below was taken by `prepare_fork` on this thread (in the child: on
        // the thread this one continues) and its guard forgotten.
        unsafe {
            self.maps_log.force_unlock();
            self.totals.force_unlock();
            self.pending_mmap.force_unlock();
            self.handlers.force_unlock_write();
            self.code.unlock_after_fork();
            for slot in &self.vcpus[..self.fork_locked.load(Ordering::Relaxed)] {
                slot.state.force_unlock();
            }
        }
    }

    pub(crate) fn after_fork_parent(&self) {
        self.unlock_after_fork();
    }

    /// pthread_atfork child handler: the locks are free again; the streams start at the
    /// child's first system-call return. Nothing else runs in the child meanwhile.
    pub(crate) fn after_fork_child(&self) {
        self.unlock_after_fork();
        self.fork_pending.store(true, Ordering::Release);
    }

    /// The encoder thread (`encoder_loop`), all signals blocked.
    pub(crate) fn spawn_encoder(&'static self) -> std::io::Result<()> {
        crate::output::with_all_signals_blocked(|| {
            std::thread::Builder::new().name("pttrace-encoder".into()).spawn(move || self.encoder_loop())
        })?;
        self.encoder.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// In a forked child, where fork returns (on its only thread, `vcpu`): its own directory,
    /// writer, sideband, stream and helper threads. If any of that fails, the child is not
    /// traced (and says so), the parent's trace is untouched.
    #[cold]
    #[inline(never)]
    pub(crate) fn start_child(&'static self, vcpu: VCPUIndex) {
        self.fork_pending.store(false, Ordering::Relaxed);
        let pid = std::process::id();
        PPID.store(PID.swap(pid, Ordering::Relaxed), Ordering::Relaxed);
        let started = process_dir(&self.root_dir, pid).and_then(|dir| {
            self.out.restart(&dir)?;
            // An empty maps.txt exists from the start, as in the root directory.
            std::fs::File::create(dir.join("maps.txt"))?;
            Ok(dir)
        });
        let dir = match started {
            Ok(d) => d,
            Err(e) => {
                eprintln!("pttrace: process {pid} (forked): cannot start its trace: {e}; it is not traced");
                FORKED_CHILD.store(true, Ordering::Release);
                fatal_signal::forked_child();
                return;
            }
        };
        let mut code = pttrace_core::code_img::MAGIC_V2.to_vec();
        code.extend_from_slice(&self.code.version_records());
        self.out.send(FileKey::Code, code);
        let maps = self.maps_log.lock().clone();
        self.out.send(FileKey::Maps, maps);
        *self.totals.lock() = Totals::default();
        self.next_thread.store(1, Ordering::Relaxed);
        // Every other thread's trace, and this one's buffered bytes, are the parent's.
        let mut forking = None;
        for (i, slot) in self.used_slots().iter().enumerate() {
            let mut state = slot.state.lock();
            slot.ring.discard();
            // (With prediction: the blocks counted so far are the parent's.)
            slot.take_pending();
            slot.in_block.store(false, Ordering::Relaxed);
            let old = state.take();
            if i == vcpu as usize {
                forking = old;
            }
        }
        if let (Some(old), Some(slot)) = (forking, self.vcpus.get(vcpu as usize)) {
            let thread = self.next_thread.fetch_add(1, Ordering::Relaxed);
            if let Some(mut v) = self.new_trace(thread, old.rsp) {
                if self.code.rewritten() {
                    // The forking thread's view of rewritten code, from the child's first
                    // instruction on.
                    for (&pc, &(version, end)) in &old.code.current {
                        v.code.current.insert(pc, (version, end));
                        self.out.send(FileKey::Code, pttrace_core::code_img::switch_record(thread, 0, version).to_vec());
                    }
                }
                *slot.state.lock() = Some(v);
            }
        }
        self.write_meta_end(None);
        let threads = fatal_signal::start_in_child().and_then(|()| {
            if self.encoder.load(Ordering::Relaxed) {
                self.spawn_encoder()
            } else {
                Ok(())
            }
        });
        if let Err(e) = threads {
            eprintln!("pttrace: process {pid} (forked): cannot start its helper threads: {e}; {} is incomplete", dir.display());
        }
    }
}

/// The forked process's directory (`pttrace_core::process_dir`): `proc-PID`, or `proc-PID.K` if
/// a process of this run had that pid before. Never an existing one: its files would be another
/// process's.
pub(crate) fn process_dir(root: &std::path::Path, pid: u32) -> std::io::Result<std::path::PathBuf> {
    let mut k = 1u32;
    loop {
        let dir = root.join(pttrace_core::process_dir::name(pid, k));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 1000 => k += 1,
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))),
        }
    }
}

/// A forked process's directory name.
pub(crate) fn is_process_dir(name: &str) -> bool {
    pttrace_core::process_dir::parse(name).is_some()
}

/// Remove a forked process's directory of an earlier run: only the files the plugin writes, then
/// the directory if that left it empty.
pub(crate) fn remove_process_dir(dir: &std::path::Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if (name.starts_with("thread-")
                && (name.ends_with(".pt") || name.ends_with(".rtit") || name.ends_with(".truth")))
                || matches!(name.as_str(), "code.img" | "maps.txt" | "meta.txt")
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}
