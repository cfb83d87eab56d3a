//! User mode (`qemu-x86_64`): one trace stream per guest thread (Intel PT, or Atom RTIT with
//! `trace=rtit`), written to host files.

use crate::guest;
use crate::output::{FileKey, Output};
use crate::{fail, forked_child, guarded, FORKED_CHILD};
use parking_lot::{Mutex, RwLock};
use pttrace_core::insn_class::{classify, BranchKind, ClassifiedInsn};
use pttrace_core::options::{Options, TraceKind};
use pttrace_core::pt::tracer::{Context, Tracer};
use pttrace_core::rtit::setup::RtitStream;
use pttrace_core::rtit::RtitOptions;
use pttrace_core::user_flow::{BlockEnd, UserFlow, UserTracer, KERNEL_ENTRY};
use qemu_plugin::install::Args;
use qemu_plugin::{CallbackFlags, PluginId, RegisterDescriptor, TranslationBlock, VCPUIndex};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

type SlotGuard = parking_lot::MutexGuard<'static, Option<VcpuTrace>>;

/// Blocks a thread runs while keeping its own vCPU slot locked (see `Slot::held`).
const HOLD_BLOCKS: u32 = 4096;

/// One vCPU (= one guest thread in user mode) of the per-vCPU table.
struct Slot {
    state: Mutex<Option<VcpuTrace>>,
    /// The lock on `state` that the vCPU's own thread keeps across consecutive callbacks, so the
    /// per-block hot path takes no lock (an uncontended lock/unlock pair cost ~25% of tracing
    /// time), with the number of blocks run under it. It is released every HOLD_BLOCKS callbacks
    /// and at every system call, so another thread that needs the slot (execve flush, exit)
    /// waits microseconds at most, and never for a thread blocked in the kernel. Only the
    /// owning thread touches it (qemu-user runs each vCPU on its own thread; the block and
    /// syscall callbacks of vCPU N run on N's thread), which is why it needs no thread-local
    /// lookup (`__tls_get_addr` in a cdylib) and no lock.
    held: UnsafeCell<Option<(SlotGuard, u32)>>,
    /// pthread_self() of the thread holding `held` (0: none), for `at_exit`, which runs on the
    /// exiting thread without knowing its vCPU index.
    holder: AtomicUsize,
}

// SAFETY: `held` is only accessed by the vCPU's own thread (see its documentation) and by
// `release_own`, which checks `holder` against the calling thread first.
unsafe impl Sync for Slot {}
// SAFETY: a held guard never leaves its thread: only the owner stores and drops it.
unsafe impl Send for Slot {}

impl Slot {
    /// Give up the held lock. Only the owning thread may call this.
    fn release_own(&self) {
        // SAFETY: called on the thread that owns this slot (see `held`).
        let held = unsafe { &mut *self.held.get() };
        if held.take().is_some() {
            self.holder.store(0, Ordering::Relaxed);
        }
    }

    /// Give up the held lock if the calling thread holds it (any slot, any thread).
    fn release_if_mine(&self) {
        if self.holder.load(Ordering::Relaxed) == this_thread() {
            self.release_own();
        }
    }
}

fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// vCPU indices the per-vCPU table can hold (qemu-x86_64 gives each guest thread a vCPU).
const MAX_VCPUS: usize = 4096;
/// Trace bytes a vCPU accumulates before handing them to the writer.
const HANDOFF_BYTES: usize = 256 * 1024;

/// What the execute callback of one translation block needs, computed at translation time.
struct BlockInfo {
    pc: u64,
    n_insns: u64,
    end: BlockEnd,
    /// RTIT range bases/limits at instructions after the block's first (reached sequentially
    /// inside the block: `RtitTracer::linear`); empty without RTIT ranges.
    edges: Box<[u64]>,
}

/// The trace hardware of one thread.
enum ThreadTracer {
    Pt(Tracer),
    Rtit(RtitStream),
}

struct VcpuTrace {
    thread: u32,
    tracer: ThreadTracer,
    flow: UserFlow,
    /// Retired instructions of this thread: the clock behind TSC packets (one tick per
    /// instruction, deterministic).
    icount: u64,
    rsp: Option<RegisterDescriptor<'static>>,
    /// Drain credit from the real-time drainer (`drain=realtime:`).
    credit: Option<pttrace_core::pt::internal_buffer::DrainCredit>,
    truth: Option<Vec<u8>>,
    last_truth_ip: u64,
}

struct SignalAction {
    handler: u64,
    restorer: u64,
}

pub struct Shared {
    opts: Options,
    /// trace=rtit with filter/stop ranges: the RTIT_LIPn addresses whose sequential execution
    /// signals a range edge (empty otherwise, so blocks carry no edge list).
    rtit_edges: Vec<u64>,
    out: Output,
    vcpus: Box<[Slot]>,
    next_thread: AtomicU32,
    handlers: RwLock<Vec<SignalAction>>,
    n_handlers: AtomicUsize,
    /// Translated code already written to code.img: block PC -> its bytes.
    code: crate::output::CodeImage,
    /// Pending mmap arguments per vCPU (for maps.txt).
    pending_mmap: Mutex<HashMap<VCPUIndex, (u64, u64, i64, u64)>>,
    maps: Mutex<Vec<String>>,
    totals: Mutex<Totals>,
    binary: OnceLock<String>,
    /// Background thread granting drain bandwidth from the wall clock (`drain=realtime:`).
    drainer: Option<pttrace_core::pt::internal_buffer::RealTimeDrainer>,
}

#[derive(Default)]
struct Totals {
    threads: u32,
    bytes: u64,
    packets: u64,
    psbs: u64,
    blocks: u64,
    signals: u64,
    unexplained: u64,
}

pub static SHARED: OnceLock<Shared> = OnceLock::new();

const SIGFRAME_RIP_OFFSET: u64 = 8 + 40 + 16 * 8;

impl Shared {
    /// Run `f` on this thread's own vCPU slot, through the lock it holds (see `Slot::held`).
    #[inline(always)]
    fn with_own_slot(&'static self, vcpu: VCPUIndex, f: impl FnOnce(&mut Option<VcpuTrace>)) {
        let Some(slot) = self.vcpus.get(vcpu as usize) else { return };
        // SAFETY: this callback runs on vCPU `vcpu`'s own thread (see `Slot::held`).
        let held = unsafe { &mut *slot.held.get() };
        match held {
            Some((guard, n)) if *n < HOLD_BLOCKS => {
                *n += 1;
                f(guard);
            }
            _ => {
                *held = None; // unlock first: it may be this very slot's lock
                let guard = slot.state.lock();
                slot.holder.store(this_thread(), Ordering::Relaxed);
                let (guard, _) = held.insert((guard, 1));
                f(guard);
            }
        }
    }

    #[inline(always)]
    fn on_block(&'static self, vcpu: VCPUIndex, info: &BlockInfo) {
        if forked_child() {
            return;
        }
        self.with_own_slot(vcpu, |slot| self.on_block_locked(slot, info));
    }

    /// Give up vCPU `vcpu`'s held slot lock; on its own thread (syscalls, thread exit).
    fn release_held(&self, vcpu: VCPUIndex) {
        if let Some(slot) = self.vcpus.get(vcpu as usize) {
            slot.release_own();
        }
    }

    /// Give up every slot lock the calling thread holds (exit, execve: they lock all slots).
    fn release_mine(&self) {
        for slot in self.vcpus.iter() {
            slot.release_if_mine();
        }
    }

    #[inline(always)]
    fn on_block_locked(&self, slot: &mut Option<VcpuTrace>, info: &BlockInfo) {
        let Some(v) = slot.as_mut() else { return };
        v.icount += info.n_insns;
        let rsp = v.rsp.as_ref();
        let mut probe = |pc: u64| self.signal_resume_ip(pc, rsp);
        match &mut v.tracer {
            ThreadTracer::Pt(t) => {
                t.set_tsc(v.icount);
                v.flow.block(t, info.pc, info.end, &mut probe);
                // Drain progress of the internal buffer (issue 7): the block's instructions
                // (deterministic) or the drainer thread's grant.
                if self.opts.buffer.is_some() {
                    match v.credit.as_mut() {
                        Some(c) => t.credit_from(c),
                        None => t.credit(info.n_insns),
                    }
                }
                if t.output().len() >= HANDOFF_BYTES {
                    self.out.send(FileKey::Pt(v.thread), t.take_output());
                }
            }
            ThreadTracer::Rtit(r) => {
                r.tracer.set_tsc(v.icount);
                v.flow.block(r, info.pc, info.end, &mut probe);
                for &ip in info.edges.iter() {
                    r.tracer.linear(ip);
                }
                if r.output_len() >= HANDOFF_BYTES {
                    self.out.send(FileKey::Rtit(v.thread), r.take_output());
                }
            }
        }
    }

    /// If `pc` is a registered signal handler and the stack holds a signal frame, return the
    /// interrupted IP saved in it.
    fn signal_resume_ip(&self, pc: u64, rsp: Option<&RegisterDescriptor<'static>>) -> Option<u64> {
        if self.n_handlers.load(Ordering::Acquire) == 0 {
            return None;
        }
        let restorer = {
            let hs = self.handlers.read();
            hs.iter().find(|h| h.handler == pc)?.restorer
        };
        let raw = rsp?.read().ok()?;
        let sp = u64::from_le_bytes(raw.get(..8)?.try_into().ok()?);
        let ret = guest::read_u64(sp)?;
        if restorer != 0 && ret != restorer {
            return None;
        }
        guest::read_u64(sp + SIGFRAME_RIP_OFFSET)
    }

    fn on_truth(&'static self, vcpu: VCPUIndex, ip: u64, rep_string: bool) {
        if forked_child() {
            return;
        }
        self.with_own_slot(vcpu, |slot| self.on_truth_locked(slot, ip, rep_string));
    }

    fn on_truth_locked(&self, slot: &mut Option<VcpuTrace>, ip: u64, rep_string: bool) {
        let Some(v) = slot.as_mut() else { return };
        // A REP string instruction re-entered for its next iterations retires only once.
        if rep_string && v.last_truth_ip == ip {
            return;
        }
        v.last_truth_ip = ip;
        if let Some(buf) = v.truth.as_mut() {
            let _ = writeln!(HexLine(buf), "{ip:x}");
            if buf.len() >= HANDOFF_BYTES {
                let full = std::mem::take(buf);
                self.out.send(FileKey::Truth(v.thread), full);
            }
        }
    }

    pub(crate) fn vcpu_init(&self, vcpu: VCPUIndex) {
        let Some(slot) = self.vcpus.get(vcpu as usize) else {
            eprintln!("pttrace: vCPU {vcpu} exceeds the {MAX_VCPUS} the plugin can trace; it is not traced");
            return;
        };
        if self.opts.trace == TraceKind::Off {
            return;
        }
        let thread = self.next_thread.fetch_add(1, Ordering::Relaxed);
        let mut flow = UserFlow::default();
        let tracer = match self.opts.trace {
            TraceKind::Off => return,
            TraceKind::Pt => {
                let mut t = Tracer::new(self.opts.config, Context::KERNEL64);
                if let Some(cfg) = self.opts.buffer.and_then(|b| b.config().ok()) {
                    t = t.with_internal_buffer(cfg);
                }
                flow.start(&mut t);
                ThreadTracer::Pt(t)
            }
            TraceKind::Rtit => {
                // The MSR values were accepted once at install.
                let Ok(mut r) = RtitStream::new(self.opts.rtit, RtitOptions { errata: self.opts.errata, ..RtitOptions::default() }, Context::KERNEL64, KERNEL_ENTRY)
                else {
                    eprintln!("pttrace: RTIT MSR programming refused; thread {thread} is not traced");
                    return;
                };
                flow.start(&mut r);
                ThreadTracer::Rtit(r)
            }
        };
        let rsp = qemu_plugin::qemu_plugin_get_registers()
            .ok()
            .and_then(|regs| regs.into_iter().find(|r| r.name == "rsp"));
        let v = VcpuTrace {
            thread,
            tracer,
            flow,
            icount: 0,
            rsp,
            credit: self.drainer.as_ref().map(|d| d.credit()),
            truth: self.opts.truth.then(Vec::new),
            last_truth_ip: u64::MAX,
        };
        self.release_held(vcpu);
        let old = slot.state.lock().replace(v);
        if let Some(old) = old {
            self.finish(old);
        }
    }

    pub(crate) fn vcpu_exit(&self, vcpu: VCPUIndex) {
        if forked_child() {
            return;
        }
        let Some(slot) = self.vcpus.get(vcpu as usize) else {
            return;
        };
        self.release_held(vcpu);
        let v = slot.state.lock().take();
        if let Some(v) = v {
            self.finish(v);
        }
    }

    fn finish(&self, mut v: VcpuTrace) {
        let key = v.tracer.key(v.thread);
        let (bytes, packets, psbs) = {
            let t = v.tracer.as_user_tracer();
            v.flow.finish(t);
            self.out.send(key, t.take_output());
            t.totals()
        };
        self.out.close(key);
        if let ThreadTracer::Pt(t) = &v.tracer {
            if let Some(st) = t.buffer_stats() {
                eprintln!("pttrace: thread {} internal buffer: {st}", v.thread);
            }
        }
        if let Some(buf) = v.truth.take() {
            self.out.send(FileKey::Truth(v.thread), buf);
            self.out.close(FileKey::Truth(v.thread));
        }
        let f = v.flow.stats();
        let mut t = self.totals.lock();
        t.threads += 1;
        t.bytes += bytes;
        t.packets += packets;
        t.psbs += psbs;
        t.blocks += f.blocks;
        t.signals += f.signals;
        t.unexplained += f.unexplained;
    }

    pub(crate) fn at_exit(&self) {
        if FORKED_CHILD.load(Ordering::Relaxed) {
            eprintln!(
                "pttrace: process {} was forked by the traced program; forked children are not traced",
                std::process::id()
            );
            return;
        }
        // Other threads give up their slots within HOLD_BLOCKS blocks or at their next syscall.
        self.release_mine();
        for slot in self.vcpus.iter() {
            let v = slot.state.lock().take();
            if let Some(v) = v {
                self.finish(v);
            }
        }
        self.write_sideband();
        let sync = self.out.sync();
        let t = self.totals.lock();
        eprintln!(
            "pttrace: {} thread(s), {} {} bytes, {} packets, {} PSBs, {} blocks, {} signals{} -> {}",
            t.threads,
            t.bytes,
            if self.opts.trace == TraceKind::Rtit { "RTIT" } else { "PT" },
            t.packets,
            t.psbs,
            t.blocks,
            t.signals,
            if t.unexplained > 0 { format!(", {} UNEXPLAINED transitions", t.unexplained) } else { String::new() },
            self.opts.out.display()
        );
        if let Err(e) = sync {
            eprintln!("pttrace: trace output incomplete: {e}");
        }
    }

    pub(crate) fn translate(&self, tb: &TranslationBlock) {
        self.binary.get_or_init(binary_meta);
        if self.opts.trace == TraceKind::Off {
            return;
        }
        let mut code = Vec::new();
        let mut insns: Vec<(u64, Vec<u8>)> = Vec::new();
        for insn in tb.instructions() {
            let bytes = insn.data();
            code.extend_from_slice(&bytes);
            insns.push((insn.vaddr(), bytes));
        }
        let Some((last_ip, last_bytes)) = insns.last() else {
            return;
        };
        let last = classify(last_bytes, *last_ip, 64).unwrap_or(ClassifiedInsn {
            ip: *last_ip,
            len: last_bytes.len() as u8,
            kind: BranchKind::None,
            rep_string: false,
        });
        let pc = tb.vaddr();
        self.record_code(pc, code);
        let edges: Box<[u64]> = if self.rtit_edges.is_empty() {
            Box::default()
        } else {
            insns.iter().skip(1).map(|(ip, _)| *ip).filter(|ip| self.rtit_edges.contains(ip)).collect()
        };
        // Kept for the life of the process: QEMU does not say when a translation is freed (the
        // qemu-plugin crate's closures are leaked the same way).
        let info: &'static BlockInfo = Box::leak(Box::new(BlockInfo {
            pc,
            n_insns: insns.len() as u64,
            end: BlockEnd::new(last),
            edges,
        }));
        // A plain C function with the block's record as user data: no boxed closure to call
        // through per block. R_REGS: the signal probe reads RSP.
        // SAFETY: `tb` is the translation being instrumented; `info` outlives it.
        unsafe {
            qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_cb(
                crate::tb_ptr(tb),
                Some(on_block_exec),
                CallbackFlags::QEMU_PLUGIN_CB_R_REGS,
                info as *const BlockInfo as *mut std::ffi::c_void,
            );
        }
        if self.opts.truth {
            for (i, insn) in tb.instructions().enumerate() {
                let ip = insns[i].0;
                let rep = classify(&insns[i].1, ip, 64).is_some_and(|c| c.rep_string);
                insn.register_execute_callback(move |vcpu| {
                    if let Some(sh) = SHARED.get() {
                        guarded("truth callback", || sh.on_truth(vcpu, ip, rep));
                    }
                });
            }
        }
    }

    /// Append the block's bytes to code.img unless identical bytes were already written there.
    fn record_code(&self, pc: u64, code: Vec<u8>) {
        self.code.record(&self.out, pc, code);
    }

    /// execve replaces the process without running atexit: the calling thread enters the kernel
    /// now (TIP.PGD), and every buffered byte is written before the syscall runs. If execve
    /// fails, the thread resumes with a TIP.PGE like after any syscall.
    fn flush_for_exec(&self, vcpu: VCPUIndex) {
        self.release_held(vcpu);
        for (i, slot) in self.vcpus.iter().enumerate() {
            let mut guard = slot.state.lock();
            let Some(v) = guard.as_mut() else { continue };
            let key = v.tracer.key(v.thread);
            let t = v.tracer.as_user_tracer();
            if i == vcpu as usize {
                v.flow.finish(t);
            }
            self.out.send(key, t.take_output());
            if let Some(buf) = v.truth.as_mut() {
                self.out.send(FileKey::Truth(v.thread), std::mem::take(buf));
            }
        }
        self.write_sideband();
        if let Err(e) = self.out.sync() {
            eprintln!("pttrace: trace output incomplete: {e}");
        }
    }

    fn write_sideband(&self) {
        if let Err(e) = std::fs::write(self.opts.out.join("maps.txt"), self.maps.lock().join("")) {
            eprintln!("pttrace: writing maps.txt: {e}");
        }
        if let Err(e) = write_meta(
            &self.opts,
            self.binary.get().map(String::as_str).unwrap_or(""),
        ) {
            eprintln!("pttrace: writing meta.txt: {e}");
        }
    }

    pub(crate) fn syscall(&self, vcpu: VCPUIndex, num: i64, a: [u64; 6]) {
        // The thread may block in the kernel now: nobody must wait for its slot meanwhile.
        self.release_held(vcpu);
        if forked_child() {
            return;
        }
        match num {
            // execve, execveat
            59 | 322 => self.flush_for_exec(vcpu),
            // rt_sigaction(sig, act, oact, sigsetsize): struct sigaction { handler, flags, restorer, mask }
            13 if a[1] != 0 => {
                let (Some(handler), Some(restorer)) =
                    (guest::read_u64(a[1]), guest::read_u64(a[1] + 16))
                else {
                    return;
                };
                if handler <= 1 {
                    return; // SIG_DFL, SIG_IGN
                }
                let mut hs = self.handlers.write();
                if let Some(h) = hs.iter_mut().find(|h| h.handler == handler) {
                    h.restorer = restorer;
                } else {
                    hs.push(SignalAction { handler, restorer });
                }
                self.n_handlers.store(hs.len(), Ordering::Release);
            }
            // mmap(addr, len, prot, flags, fd, off): executable file mappings go to maps.txt.
            9 if a[2] & 4 != 0 && (a[4] as i64) >= 0 => {
                self.pending_mmap
                    .lock()
                    .insert(vcpu, (a[1], a[2], a[4] as i64, a[5]));
            }
            _ => {}
        }
    }

    pub(crate) fn syscall_return(&self, vcpu: VCPUIndex, num: i64, ret: i64) {
        if num != 9 || forked_child() {
            return;
        }
        let Some((len, _prot, fd, off)) = self.pending_mmap.lock().remove(&vcpu) else {
            return;
        };
        if ret < 0 && ret > -4096 {
            return;
        }
        let path = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| format!("fd:{fd}"));
        let start = ret as u64;
        self.maps.lock().push(format!(
            "{:x} {:x} {:x} {}\n",
            start,
            start + len,
            off,
            path
        ));
    }
}

impl ThreadTracer {
    fn key(&self, thread: u32) -> FileKey {
        match self {
            ThreadTracer::Pt(_) => FileKey::Pt(thread),
            ThreadTracer::Rtit(_) => FileKey::Rtit(thread),
        }
    }

    /// For the cold paths (thread end, execve); the block callback matches on the kind once.
    fn as_user_tracer(&mut self) -> &mut dyn UserTracer {
        match self {
            ThreadTracer::Pt(t) => t,
            ThreadTracer::Rtit(r) => r,
        }
    }
}

/// The execute callback of every translated block (user data: its `BlockInfo`).
extern "C" fn on_block_exec(vcpu: VCPUIndex, info: *mut std::ffi::c_void) {
    // SAFETY: registered in `translate` with a leaked `&'static BlockInfo`.
    let info = unsafe { &*(info as *const BlockInfo) };
    if let Some(sh) = SHARED.get() {
        guarded("block callback", || sh.on_block(vcpu, info));
    }
}

/// `fmt::Write` over a byte buffer (hex formatting without allocation).
pub(crate) struct HexLine<'a>(pub(crate) &'a mut Vec<u8>);

impl std::fmt::Write for HexLine<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The guest binary's path and layout; only known once the guest is loaded (first translation).
fn binary_meta() -> String {
    let mut m = String::new();
    if let Ok(Some(p)) = qemu_plugin::qemu_plugin_path_to_binary() {
        let _ = writeln!(m, "binary={}", p.display());
    }
    if let (Some(s), Some(e)) = (
        qemu_plugin::qemu_plugin_start_code(),
        qemu_plugin::qemu_plugin_end_code(),
    ) {
        let _ = writeln!(m, "start_code={s:x}\nend_code={e:x}");
    }
    if let Some(e) = qemu_plugin::qemu_plugin_entry_code() {
        let _ = writeln!(m, "entry={e:x}");
    }
    m
}

fn write_meta(opts: &Options, binary: &str) -> std::io::Result<()> {
    let mut m = String::new();
    let _ = writeln!(m, "format=pttrace-1");
    let _ = writeln!(m, "mode=user");
    m.push_str(binary);
    let _ = writeln!(m, "trace={}", opts.trace.name());
    match opts.trace {
        // IA32_RTIT_CTL (570H) with TraceEn.
        TraceKind::Pt => {
            let _ = writeln!(m, "rtit_ctl={:#x}", opts.config.ctl.0 | 1);
        }
        // The Atom RTIT MSRs (768H RTIT_CTL with Trace_En, 76CH RTIT_EVENTS, 760H-763H
        // RTIT_LIP0-3, RTIT_PKT_CNT[17:16]); the decoder needs RTIT_CTL[1] Cycle_Acc.
        TraceKind::Rtit => {
            let r = &opts.rtit;
            let _ = writeln!(m, "rtit_ctl={:#x}", r.ctl_enabled().0);
            let _ = writeln!(m, "rtit_events={:#x}", r.events.0);
            let _ = writeln!(m, "rtit_lip={:#x},{:#x},{:#x},{:#x}", r.lip[0], r.lip[1], r.lip[2], r.lip[3]);
            let _ = writeln!(m, "rtit_pkt_mask={}", r.pkt_mask);
        }
        TraceKind::Off => {}
    }
    let _ = writeln!(m, "options={}", opts.raw.join(","));
    let mut f = std::fs::File::create(opts.out.join("meta.txt"))?;
    f.write_all(m.as_bytes())
}

/// Parse the options, prepare the output directory and install the user-mode callbacks.
pub fn install(id: PluginId, args: &Args) -> qemu_plugin::Result<()> {
    let opts = Options::parse(args.raw.iter().map(String::as_str)).unwrap_or_else(|e| fail(&e.0));
    if let Err(e) = std::fs::create_dir_all(&opts.out) {
        fail(&format!(
            "option 'out': cannot create {}: {e}",
            opts.out.display()
        ));
    }
    // A fresh directory per run: stale streams from an earlier run would be decoded too.
    if let Ok(rd) = std::fs::read_dir(&opts.out) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if (name.starts_with("thread-")
                && (name.ends_with(".pt") || name.ends_with(".rtit") || name.ends_with(".truth")))
                || name == "code.img"
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if let Err(e) = write_meta(&opts, "") {
        fail(&format!(
            "option 'out': cannot write {}: {e}",
            opts.out.join("meta.txt").display()
        ));
    }
    if opts.trace == TraceKind::Rtit
        && RtitStream::new(opts.rtit, RtitOptions::default(), Context::KERNEL64, KERNEL_ENTRY).is_err()
    {
        fail("trace=rtit: the RTIT MSR values derived from the options are refused by RTIT_CTL/RTIT_EVENTS/RTIT_LIPn");
    }
    let out = Output::start(&opts.out)
        .unwrap_or_else(|e| fail(&format!("cannot start writer thread: {e}")));
    out.send(FileKey::Code, b"PTCODE1\n".to_vec());
    let rtit_edges = if opts.trace == TraceKind::Rtit { opts.rtit.edge_addresses() } else { Vec::new() };
    let drainer = crate::start_buffer(opts.buffer);
    let shared = Shared {
        rtit_edges,
        opts,
        out,
        vcpus: (0..MAX_VCPUS)
            .map(|_| Slot { state: Mutex::new(None), held: UnsafeCell::new(None), holder: AtomicUsize::new(0) })
            .collect(),
        next_thread: AtomicU32::new(1),
        handlers: RwLock::new(Vec::new()),
        n_handlers: AtomicUsize::new(0),
        code: crate::output::CodeImage::default(),
        pending_mmap: Mutex::new(HashMap::new()),
        maps: Mutex::new(Vec::new()),
        totals: Mutex::new(Totals::default()),
        binary: OnceLock::new(),
        drainer,
    };
    if SHARED.set(shared).is_err() {
        fail("plugin loaded twice");
    }
    qemu_plugin::qemu_plugin_register_atexit_cb(id, |_| {
        if let Some(sh) = SHARED.get() {
            guarded("exit", || sh.at_exit());
        }
    })?;
    Ok(())
}
