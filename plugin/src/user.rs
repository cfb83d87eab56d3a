//! User mode (`qemu-x86_64`): one trace stream per guest thread (Intel PT, or Atom RTIT with
//! `trace=rtit`), written to host files.

use crate::fatal_signal;
use crate::guest;
use crate::output::{FileKey, Output};
use crate::{fail, forked_child, guarded, FORKED_CHILD};
use parking_lot::{Mutex, RwLock};
use pttrace_core::model_placement::{ModelPlacement, Placement};
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
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

mod fork;
mod predict;
use fork::{is_process_dir, remove_process_dir};

/// One vCPU (= one guest thread in user mode) of the per-vCPU table. Aligned to a power of
/// two, so the execute callback finds a slot with a shift, not a multiplication.
#[repr(align(2048))]
struct Slot {
    state: Mutex<Option<VcpuTrace>>,
    ring: Ring,
    /// truth=1 only: the vCPU is inside a block it has recorded (set in the execute callback,
    /// cleared at system calls and when it parks). A fatal signal's finisher waits for it, so the
    /// trace and the truth log end at the same block (issue 20).
    in_block: std::sync::atomic::AtomicBool,
    /// The block the vCPU was about to run when it parked for a fatal signal (0: none): its
    /// trace ends with an interrupt there (`UserFlow::stopped_at`).
    stopped_at: std::sync::atomic::AtomicU64,
    /// Where this vCPU's recorded blocks run through the model (`model_placement`); only the
    /// owning thread decides, at `make_room`. `on_vcpu`: the encoder thread leaves the ring alone.
    placement: Mutex<ModelPlacement>,
    on_vcpu: std::sync::atomic::AtomicBool,
}

/// The executed blocks of one vCPU not yet run through the model (issue 13): a circular
/// single-producer ring. The vCPU's own thread appends to it in the execute callback without a
/// lock (`Shared::on_block`); whoever holds the slot's `state` lock runs the pending blocks
/// through the model (`Shared::drain`): the encoder thread while the vCPU keeps executing, the
/// vCPU itself when the ring is full or the trace becomes observable (system calls, signal
/// handlers, thread exit), other threads at execve and at process exit. Positions only grow
/// (an entry's index is its position modulo RING). The producer's fields share a cache line
/// that only the owning thread writes; the consumers' position lives on its own line, which the
/// producer reads only when its cached copy says the ring is full.
#[repr(align(128))]
struct Ring {
    /// RING entries (null: the vCPU is not traced), allocated at the vCPU's first start.
    entries: AtomicPtr<AtomicPtr<BlockInfo>>,
    /// Entries written; only the owning thread stores it (Release: the entries before it are
    /// visible to a drain on another thread).
    head: AtomicUsize,
    /// The position up to which the owner may append without reading `tail` again: its last
    /// reading of `tail` plus RING, or 0 while every block must take `Shared::on_block` (not
    /// traced yet, draining after every block, after a fork). Only the owning thread uses it;
    /// one comparison with `head` is the whole room check of the common case (issue 13).
    room_end: AtomicUsize,
    /// The owner drains after every block when this is set: the internal buffer's drain
    /// follows the wall clock, whose credit must meet the blocks as they execute.
    every_block: std::sync::atomic::AtomicBool,
    /// `head` as the encoder thread sees it: stored every PUBLISH entries (Release), on lines
    /// of its own. The encoder polls this, not `head`: each reading from another CPU takes the
    /// line from the owner, whose next store to it must take it back first and holds up its
    /// later stores meanwhile (see `block_ring::prefetch_for_write`); `head` is stored at every
    /// block, this once per PUBLISH blocks. Everyone else who runs the ring (the owner, and
    /// other threads at exit and execve, which must see every block) reads `head`.
    published: Padded,
    /// Entries already run through the model (stored under the `state` lock, Release: after
    /// the entries before it were read).
    tail: Padded,
    /// With prediction (`predict`): the vCPU's blocks the ring accounts for (recorded, or
    /// counted by a marker), against the `blocks` count the inline operations keep. The owner
    /// stores it; threads that finish the run read it.
    accounted: std::sync::atomic::AtomicU64,
    /// With prediction: where the vCPU's `blocks` count is (`predict`), set at its start and
    /// whenever the translations are flushed (QEMU moves its scoreboards only then, with no
    /// vCPU running: `Shared::on_flush`).
    blocks_at: AtomicPtr<u64>,
}

impl Slot {
    const fn new() -> Self {
        Slot {
            state: Mutex::new(None),
            ring: Ring {
                entries: AtomicPtr::new(std::ptr::null_mut()),
                head: AtomicUsize::new(0),
                room_end: AtomicUsize::new(0),
                every_block: std::sync::atomic::AtomicBool::new(false),
                published: Padded(AtomicUsize::new(0)),
                tail: Padded(AtomicUsize::new(0)),
                accounted: std::sync::atomic::AtomicU64::new(0),
                blocks_at: AtomicPtr::new(std::ptr::null_mut()),
            },
            in_block: std::sync::atomic::AtomicBool::new(false),
            stopped_at: std::sync::atomic::AtomicU64::new(0),
            placement: Mutex::new(ModelPlacement::new()),
            on_vcpu: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Slot {
    /// The vCPU index of this slot of `SLOTS`.
    fn index(&self) -> VCPUIndex {
        ((self as *const Slot as usize - SLOTS.as_ptr() as usize) / std::mem::size_of::<Slot>()) as VCPUIndex
    }

    /// With prediction: the blocks this vCPU ran since its ring last accounted for them (none
    /// recorded: each was the one the block before predicted), now accounted for by the caller.
    /// 0 without prediction. Called on the vCPU's own thread, or once it runs no more.
    fn take_pending(&self) -> u64 {
        let Some(p) = predict::get() else { return 0 };
        let n = p.blocks(self.index());
        // (Never below `accounted`: inside a block's callback, that block is accounted for
        // before its count is added.)
        n.saturating_sub(self.ring.accounted.fetch_max(n, Ordering::Relaxed))
    }

    /// The block whose callback runs now is accounted for (recorded, or run, or dropped).
    #[inline(always)]
    fn account_one(&self) {
        if predict::get().is_some() {
            self.ring.accounted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The per-vCPU table, at a fixed address: the execute callback's common case finds its
/// vCPU's ring without loading `SHARED` or a table pointer (issue 13). Zero-initialised and
/// mapped lazily: only the slots of vCPUs that ran take memory.
static SLOTS: [Slot; MAX_VCPUS] = [const { Slot::new() }; MAX_VCPUS];

impl Ring {
    /// Forget every pending block (a forked child: they are the parent's; only one thread
    /// exists there).
    fn discard(&self) {
        for p in [&self.head, &self.room_end, &*self.published, &*self.tail] {
            p.store(0, Ordering::Relaxed);
        }
    }

    /// The owner appends `info` at position `head` of `entries` (the ring's RING entries) and
    /// publishes it (to the encoder thread, every PUBLISH entries). The encoder thread reads the
    /// entries: their line `PREFETCH` entries on is taken back before a store needs it
    /// (`block_ring::prefetch_for_write`).
    ///
    /// # Safety
    /// On the owner's thread, with `entries` the ring's entries (never freed) and the entry at
    /// `head` consumed: no consumer reads it until `head` is published.
    #[inline(always)]
    unsafe fn append(&self, entries: *mut AtomicPtr<BlockInfo>, head: usize, info: *const BlockInfo) {
        pttrace_core::block_ring::prefetch_for_write(entries.wrapping_add(head.wrapping_add(PREFETCH) % RING));
        // SAFETY: the function's contract.
        unsafe { &*entries.add(head % RING) }.store(info as *mut BlockInfo, Ordering::Relaxed);
        let next = head.wrapping_add(1);
        self.head.store(next, Ordering::Release);
        if next % PUBLISH == 0 {
            self.published.store(next, Ordering::Release);
        }
    }

    /// The owner read the consumers' position `tail`: it may append up to `tail` + RING without
    /// looking again, unless it drains after every block.
    /// A pending fatal signal keeps `room_end` at 0 (`Shared::stop_appending`): the common case
    /// then never appends, and `Shared::on_block` parks the vCPU. Stored, then the signal
    /// looked for (Dekker-style with `stop_appending`, which stores 0 after the signal is set).
    fn saw_tail(&self, tail: usize) {
        let end = if self.every_block.load(Ordering::Relaxed) { 0 } else { tail.wrapping_add(RING) };
        self.room_end.store(end, Ordering::SeqCst);
        if fatal_signal::pending_seqcst() {
            self.room_end.store(0, Ordering::SeqCst);
        }
    }
}

/// A value alone on its cache lines (adjacent-line prefetch pairs 64-byte lines).
#[repr(align(128))]
struct Padded(AtomicUsize);

impl std::ops::Deref for Padded {
    type Target = AtomicUsize;
    fn deref(&self) -> &AtomicUsize {
        &self.0
    }
}

/// vCPU indices the per-vCPU table can hold (qemu-x86_64 gives each guest thread a vCPU).
const MAX_VCPUS: usize = 4096;
/// Executed blocks a vCPU's ring holds (a power of two): when it is full the vCPU runs the
/// pending blocks through the model itself (64 KiB per vCPU).
const RING: usize = 8192;
/// Pending blocks that make the encoder thread take a ring's lock (fewer: it leaves them for
/// later, so it does not fight the vCPU for the lock over a handful of blocks).
const CHUNK: usize = 512;
/// How often the owner publishes its position to the encoder thread (`Ring::published`).
const PUBLISH: usize = 256;
/// Entries ahead of `head` whose cache line the producer takes back early
/// (`block_ring::prefetch_for_write`).
const PREFETCH: usize = pttrace_core::block_ring::PREFETCH_BYTES / std::mem::size_of::<usize>();
/// How long a vCPU whose ring is full waits for the encoder thread before it runs the model
/// itself (the encoder may not be scheduled: the host has fewer CPUs than busy threads).
const WAIT_FOR_ENCODER: std::time::Duration = std::time::Duration::from_micros(200);
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
    /// The code.img version of the block's bytes, and their length.
    version: u32,
    len: u32,
    /// The block starts at a registered signal handler (set at translation, or when the
    /// handler is registered after the block was translated: see `Shared::syscall`, rt_sigaction).
    at_handler: std::sync::atomic::AtomicBool,
    /// The address of the block that follows when nothing at run time decides it (0: none;
    /// `pttrace_core::successor_prediction`) ...
    predicted: u64,
    /// ... and that block's record once the model looked it up (`Shared::predicted_after`) ...
    succ: AtomicPtr<BlockInfo>,
    /// ... and up to PREDICTED_CHAIN blocks of the predicted sequence from here, once a walk
    /// started here (`Shared::chain`): a walk copies them instead of chasing `succ` block by
    /// block (each step a load that depends on the one before).
    chain: OnceLock<Box<[&'static BlockInfo]>>,
}

/// Blocks of a predicted sequence kept per block a walk starts from (8 bytes each).
const PREDICTED_CHAIN: usize = 32;

impl pttrace_core::user_flow::ExecutedBlock for &'static BlockInfo {
    #[inline(always)]
    fn pc(&self) -> u64 {
        self.pc
    }
    #[inline(always)]
    fn end(&self) -> &'static BlockEnd {
        &self.end
    }
    #[inline(always)]
    fn n_insns(&self) -> u64 {
        self.n_insns
    }
}

/// A thread's position in the terms of code.img's versions (issue 19, `Shared::code_point`).
/// Its instruction count is the retired-instruction clock (`VcpuTrace::icount`, whole blocks)
/// less the REP re-entries the flow saw and the instructions of blocks that stopped early
/// (`adjust`): nothing is added per block while no code was rewritten.
struct CodeTrack {
    /// Instructions of blocks cut short that did not retire (`Shared::cut_short`).
    adjust: u64,
    /// Block address -> (version, end) of the SWITCH records this thread wrote and whose bytes
    /// no later SWITCH of the thread overwrote.
    current: std::collections::BTreeMap<u64, (u32, u64)>,
    /// OVF anchors (buffer= only): OVF packets seen, the tracer's resume point last seen, and
    /// the count at the instruction it names (None: not a block start).
    overflows: u64,
    resume_seq: u64,
    resume_count: Option<u64>,
    /// The previous block (a block that rewrote itself stops early, `cut_short`).
    prev: Option<&'static BlockInfo>,
}

impl CodeTrack {
    fn new() -> Self {
        CodeTrack {
            adjust: 0,
            current: std::collections::BTreeMap::new(),
            overflows: 0,
            resume_seq: 0,
            resume_count: Some(0),
            prev: None,
        }
    }
}

/// The longest block QEMU translates spans two pages: SWITCH records overlapping a new one
/// start at most this far below it.
const MAX_BLOCK_BYTES: u64 = 8192;

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
    /// Flush epoch at the last hand-off (`fatal_signal::FLUSH_INTERVAL`).
    epoch: u32,
    code: CodeTrack,
    /// With prediction: the blocks a drain runs, its ring's markers expanded (`Shared::expand`).
    expanded: Vec<&'static BlockInfo>,
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
    vcpus: &'static [Slot],
    next_thread: AtomicU32,
    /// One more than the highest vCPU index started (the encoder thread scans that many slots).
    n_slots: AtomicUsize,
    handlers: RwLock<Vec<SignalAction>>,
    n_handlers: AtomicUsize,
    /// Every block record made so far (a handler registered later marks its blocks); the lock
    /// also orders a translation against a handler's registration.
    block_infos: Mutex<Vec<&'static BlockInfo>>,
    /// Translated code already written to code.img: block PC -> its bytes.
    code: crate::output::CodeImage,
    /// With prediction: block address -> the record of the translation that has it as key
    /// (`canonical_key`).
    canonical: Mutex<HashMap<u64, &'static BlockInfo>>,
    /// Pending mmap arguments per vCPU (for maps.txt).
    pending_mmap: Mutex<HashMap<VCPUIndex, (u64, u64, i64, u64)>>,
    /// Every line written to this process's maps.txt: a forked child's maps.txt starts with them.
    maps_log: Mutex<Vec<u8>>,
    /// The run's output directory, absolute (a child may have changed its working directory
    /// before it forks): forked processes write to ROOT/proc-PID.
    root_dir: std::path::PathBuf,
    /// The encoder thread runs (a forked child starts its own).
    encoder: std::sync::atomic::AtomicBool,
    /// Slots whose lock the forking thread holds across fork() (`prepare_fork`).
    fork_locked: AtomicUsize,
    /// Set in a traced forked child until its streams start (`start_child`).
    fork_pending: std::sync::atomic::AtomicBool,
    /// Set once the streams are finished (normal exit or a fatal signal): `finish_run` runs once.
    finished: std::sync::atomic::AtomicBool,
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

/// This process's id, and its parent's if it is a traced forked child (0 for the root process).
static PID: AtomicU32 = AtomicU32::new(0);
static PPID: AtomicU32 = AtomicU32::new(0);

const SIGFRAME_RIP_OFFSET: u64 = 8 + 40 + 16 * 8;

impl Shared {
    /// The execute callback's work (issue 13): append the block's translation-time record to
    /// the vCPU's ring, and run the model over the ring when it is full. The model's result does
    /// not depend on when it runs, with one exception: a block that starts at a registered
    /// signal handler needs the guest's stack as it is now (the signal frame), so it runs through
    /// the model at once, after everything pending (`handler_block`). No lock, no allocation, no
    /// thread-local, no panic guard: nothing here can panic; the model runs guarded, once per
    /// batch.
    /// `TRUTH`: `truth=1` (the callback is chosen at translation, so the common case does not
    /// test the option per block).
    #[inline(always)]
    fn on_block<const TRUTH: bool>(&'static self, vcpu: VCPUIndex, info: &'static BlockInfo) {
        let Some(slot) = self.vcpus.get(vcpu as usize) else { return };
        if TRUTH {
            // Dekker-style with the finisher (`on_fatal_signal`): announce the block first, then
            // look for a pending signal; the finisher reads the flag after the signal is set.
            slot.in_block.store(true, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        if fatal_signal::pending() {
            // A default-fatal signal is being handled (issue 20): no more guest code here.
            slot.stopped_at.store(info.pc, Ordering::Relaxed);
            slot.in_block.store(false, Ordering::Release);
            fatal_signal::park();
        }
        // With prediction: the blocks that ran unrecorded before this one.
        let pending = slot.take_pending();
        slot.account_one();
        if info.at_handler.load(Ordering::Relaxed) {
            self.handler_block(slot, info, pending);
            return;
        }
        let ring = &slot.ring;
        let entries = ring.entries.load(Ordering::Relaxed);
        if entries.is_null() {
            return; // not traced
        }
        let mut head = ring.head.load(Ordering::Relaxed);
        if pending != 0 {
            if head >= ring.room_end.load(Ordering::Relaxed) && !self.make_room(slot, head) {
                return;
            }
            // SAFETY: as below.
            unsafe { ring.append(entries, head, predict::marker(pending)) };
            head = head.wrapping_add(1);
        }
        if head >= ring.room_end.load(Ordering::Relaxed) && !self.make_room(slot, head) {
            return;
        }
        // SAFETY: the owner's thread; the entry at `head` was consumed (`make_room`).
        unsafe { ring.append(entries, head, info) };
        if ring.every_block.load(Ordering::Relaxed) {
            self.drain_own(slot);
        }
    }

    /// The common case of `on_block` (truth=0): no fatal signal pending, not a handler's block,
    /// room in the ring by the owner's last reading, no drain after every block: append and
    /// return true. False, having done nothing: `on_block` must handle the block.
    #[inline(always)]
    fn try_append(vcpu: VCPUIndex, info: &'static BlockInfo) -> bool {
        let Some(slot) = SLOTS.get(vcpu as usize) else { return false };
        let ring = &slot.ring;
        let head = ring.head.load(Ordering::Relaxed);
        // (`room_end` > `head` only once `entries` exists, while no drain follows every block
        // and no fatal signal is pending: `Ring::saw_tail`, `stop_appending`.)
        if head >= ring.room_end.load(Ordering::Relaxed) || info.at_handler.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: the owner's thread; `head` < `room_end`, so the entry at `head` was consumed
        // and `entries` exists.
        unsafe { ring.append(ring.entries.load(Ordering::Relaxed), head, info) };
        true
    }

    /// `try_append` with prediction (`predict`): first a marker for the blocks that ran
    /// unrecorded since the last entry, if any.
    #[inline(always)]
    fn try_append_predicted(vcpu: VCPUIndex, info: &'static BlockInfo) -> bool {
        let Some(slot) = SLOTS.get(vcpu as usize) else { return false };
        let ring = &slot.ring;
        let mut head = ring.head.load(Ordering::Relaxed);
        // (Room for two entries.)
        if head.wrapping_add(1) >= ring.room_end.load(Ordering::Relaxed) || info.at_handler.load(Ordering::Relaxed) {
            return false;
        }
        let entries = ring.entries.load(Ordering::Relaxed);
        // SAFETY: set to the vCPU's entry in a live scoreboard before `room_end` first exceeds
        // `head` (`predict_started`, `vcpu_init`, then `make_room`), and again whenever the
        // scoreboard moves (`on_flush`); only this callback, registered once prediction is on,
        // reads it here.
        let n = unsafe { *ring.blocks_at.load(Ordering::Relaxed) };
        let pending = n.wrapping_sub(ring.accounted.load(Ordering::Relaxed));
        if pending != 0 {
            // SAFETY: as in `try_append`; `head` + 1 < `room_end`.
            unsafe { ring.append(entries, head, predict::marker(pending)) };
            head = head.wrapping_add(1);
        }
        // SAFETY: as in `try_append`.
        unsafe { ring.append(entries, head, info) };
        ring.accounted.store(n.wrapping_add(1), Ordering::Relaxed);
        true
    }

    /// The ring looked full from the owner's last reading of the consumers' position: read it
    /// again. If it is full while the encoder thread is consuming it (it holds the lock), wait
    /// for it (the model's state stays on the encoder's CPU; the vCPU waits at most
    /// WAIT_FOR_ENCODER), or else run the pending blocks through the model on this thread.
    /// False: nothing may be appended (a forked child that is not traced: a lock another
    /// thread held at the fork stays locked in the child, so it never waits for one and drops
    /// the blocks).
    #[cold]
    #[inline(never)]
    fn make_room(&self, slot: &Slot, head: usize) -> bool {
        if predict::switch_due() {
            self.start_predicting();
        }
        let ring = &slot.ring;
        let full = |tail: usize| head.wrapping_sub(tail) >= RING;
        let mut tail = ring.tail.load(Ordering::Acquire);
        if full(tail) && forked_child() {
            ring.tail.store(head, Ordering::Relaxed);
            ring.saw_tail(head);
            return false;
        }
        let beside = self.encoder.load(Ordering::Relaxed) && self.place_model(slot);
        if full(tail) && beside && slot.state.is_locked() {
            let start = std::time::Instant::now();
            'wait: while start.elapsed() < WAIT_FOR_ENCODER {
                for _ in 0..16 {
                    std::hint::spin_loop();
                    tail = ring.tail.load(Ordering::Acquire);
                    if !full(tail) {
                        break 'wait;
                    }
                }
                std::thread::yield_now();
            }
        }
        if full(tail) {
            if beside {
                // Time asleep on the lock the encoder holds is not time lost to other threads
                // (`model_placement`).
                let start = std::time::Instant::now();
                let mut state = slot.state.lock();
                slot.placement.lock().waited(start.elapsed().as_nanos() as u64);
                self.drain(&slot.ring, state.as_mut());
            } else {
                // (Only the ring: the block whose callback runs is accounted for already.)
                let mut state = slot.state.lock();
                self.drain(&slot.ring, state.as_mut());
            }
            tail = head;
        }
        ring.saw_tail(tail);
        true
    }

    /// A checkpoint of `slot`'s model placement (its owner's thread, every RING blocks or so):
    /// true while the encoder thread runs its recorded blocks. PTTRACE_ENCODER=2 keeps them
    /// beside the vCPU whatever the share of CPU time (for measurements).
    fn place_model(&self, slot: &Slot) -> bool {
        static ADAPT: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| std::env::var_os("PTTRACE_ENCODER").is_none_or(|v| v != "2"));
        static REPORT: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| std::env::var_os("PTTRACE_STATS").is_some());
        if !*ADAPT {
            return true;
        }
        let now = crate::monotonic_ns();
        let mut p = slot.placement.lock();
        let cpu = if p.wants_cpu_time(now) { crate::thread_cpu_ns() } else { None };
        if let Some(to) = p.at(now, cpu) {
            slot.on_vcpu.store(to == Placement::OnVcpu, Ordering::Relaxed);
            if *REPORT {
                eprintln!("pttrace: model placement {to:?}");
            }
        }
        p.placement() == Placement::Beside
    }

    /// The encoder thread (issue 13): runs the vCPUs' recorded blocks through the model while
    /// they keep executing, CHUNK blocks at a time under each slot's lock, so the model's work
    /// overlaps the guest's on a second host CPU. It never waits for a vCPU (try_lock); it reads
    /// a ring's published length once per pass (the producer's cache line moves at most once per
    /// pass, not per block), spins briefly while work may come, and sleeps when none did.
    fn encoder_loop(&'static self) {
        let mut backoff = pttrace_core::block_ring::ConsumerBackoff::default();
        loop {
            let slots = self.used_slots();
            let (mut worked, mut eligible) = (false, false);
            for slot in slots {
                if slot.on_vcpu.load(Ordering::Relaxed) {
                    continue;
                }
                eligible = true;
                let ring = &slot.ring;
                // (More than RING: the owner ran the ring itself past the published position.)
                let pending = ring.published.load(Ordering::Relaxed).wrapping_sub(ring.tail.load(Ordering::Relaxed));
                if (CHUNK..=RING).contains(&pending) {
                    if let Some(mut state) = slot.state.try_lock() {
                        self.drain_to(ring, state.as_mut(), ring.published.load(Ordering::Acquire), 0);
                        worked = true;
                    }
                }
            }
            if !eligible && !slots.is_empty() {
                // Every vCPU runs its own blocks (model_placement): nothing to poll for a while.
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            backoff.after_pass(worked);
        }
    }

    /// The slots of every vCPU started so far (`n_slots`). Only these: the table has MAX_VCPUS
    /// slots, and walking all of them at exit touched every page of it (8 MiB, a page fault each:
    /// 5 ms of a 36 ms run of the corpus' 6-thread program with `trace=off`).
    fn used_slots(&self) -> &'static [Slot] {
        &self.vcpus[..self.n_slots.load(Ordering::SeqCst).min(self.vcpus.len())]
    }

    /// The owning thread runs its ring through the model and empties it.
    #[inline(never)]
    fn drain_own(&self, slot: &Slot) {
        let mut state = slot.state.lock();
        let pending = slot.take_pending();
        self.drain_to(&slot.ring, state.as_mut(), slot.ring.head.load(Ordering::Acquire), pending);
    }

    /// A block at a registered signal handler: everything pending first, then this block with
    /// the signal probe, which reads the guest's stack now.
    #[cold]
    #[inline(never)]
    fn handler_block(&self, slot: &Slot, info: &'static BlockInfo, pending: u64) {
        if forked_child() {
            return;
        }
        let mut state = slot.state.lock();
        self.drain_to(&slot.ring, state.as_mut(), slot.ring.head.load(Ordering::Acquire), pending);
        let Some(v) = state.as_mut() else { return };
        let rsp = v.rsp.take();
        let mut probe = |pc: u64| self.signal_resume_ip(pc, rsp.as_ref());
        guarded("block callback", || self.run_block(v, info, &mut probe));
        v.rsp = rsp;
    }

    #[inline(never)]
    fn is_handler(&self, pc: u64) -> bool {
        self.handlers.read().iter().any(|h| h.handler == pc)
    }

    /// Run the pending blocks of `ring` through the model of `v`, oldest first (one panic guard
    /// per call), and mark them consumed. The caller holds the slot's `state` lock; the owner
    /// may be appending meanwhile.
    fn drain(&self, ring: &Ring, v: Option<&mut VcpuTrace>) {
        self.drain_to(ring, v, ring.head.load(Ordering::Acquire), 0);
    }

    /// `drain` up to position `head` (the encoder thread: `Ring::published`, read with Acquire;
    /// nothing when the ring was run past it already).
    /// `extra`: blocks that ran after the ring's last entry, each the predicted successor of the
    /// one before (`predict`; 0 without prediction).
    fn drain_to(&self, ring: &Ring, v: Option<&mut VcpuTrace>, head: usize, extra: u64) {
        let tail = ring.tail.load(Ordering::Relaxed);
        let entries = ring.entries.load(Ordering::Relaxed);
        if (head == tail && extra == 0) || head.wrapping_sub(tail) > RING || entries.is_null() {
            return;
        }
        let (Some(v), false) = (v, forked_child()) else {
            ring.tail.store(head, Ordering::Release);
            return;
        };
        let (from, n) = (tail % RING, head.wrapping_sub(tail).min(RING));
        // SAFETY: RING entries that are never freed; positions [tail, head) were written by the
        // owner before it published `head` (Acquire above), and it does not overwrite them
        // before `tail` passes them (Release below, after they were read). Each of them holds a
        // leaked `&'static BlockInfo` (`on_block` and `try_append` store only those, never
        // null), and an `AtomicPtr` has the representation of a pointer: the pending entries
        // are read as plain slices of references (issue 13: no null test or atomic access per
        // block in the model's loop).
        // With prediction the ring also holds markers (`predict::MARKER`), read as words and
        // expanded into the blocks they stand for (`expand`).
        let expanded = predict::get().map(|_| {
            // SAFETY: as below, read as words.
            let (a, b): (&[usize], &[usize]) = unsafe {
                let at = |i: usize, len: usize| std::slice::from_raw_parts(entries.add(i) as *const usize, len);
                if from + n <= RING { (at(from, n), &[]) } else { (at(from, RING - from), at(0, from + n - RING)) }
            };
            self.expand(v, a.iter().chain(b).copied(), extra)
        });
        let (first, wrapped): (&[&'static BlockInfo], &[&'static BlockInfo]) = match &expanded {
            Some(buf) => (buf, &[]),
            // SAFETY: see above; without prediction every entry is a block's record.
            None => unsafe {
                let at = |i: usize, len: usize| std::slice::from_raw_parts(entries.add(i) as *const &'static BlockInfo, len);
                if from + n <= RING { (at(from, n), &[]) } else { (at(from, RING - from), at(0, from + n - RING)) }
            },
        };
        let last = wrapped.last().or(first.last()).copied();
        guarded("trace encoder", || {
            let blocks = first.iter().chain(wrapped).copied();
            let mut no_signal = |_: u64| None;
            let mut icount = v.icount;
            // Loaded once per batch: a block recorded in the ring ran after its translation.
            // Code versions (issue 19) need work per block only once code was rewritten, and OVF
            // anchors only with an internal buffer; otherwise the loops below are the plain ones.
            let versions = self.code.rewritten();
            let ovf = self.opts.buffer.is_some();
            let thread = v.thread;
            match &mut v.tracer {
                ThreadTracer::Pt(t) if versions || ovf => {
                    for info in blocks {
                        let before = self.code_point(thread, &mut v.code, &mut v.flow, info, icount, versions);
                        icount += info.n_insns;
                        t.set_tsc(icount);
                        let pre = ovf.then(|| (t.resume_point(), v.code.resume_count, t.overflows().0));
                        v.flow.block(t, info.pc, &info.end, &mut no_signal);
                        if let Some(pre) = pre {
                            self.ovf_anchor(thread, &mut v.code, t, info, before, pre);
                        }
                        self.pt_credit(t, &mut v.credit, info);
                    }
                }
                // Without an internal buffer `pt_credit` has nothing to do.
                ThreadTracer::Pt(t) => {
                    v.flow.run(t, first, &mut icount);
                    v.flow.run(t, wrapped, &mut icount);
                }
                ThreadTracer::Rtit(r) if versions => {
                    for info in blocks {
                        self.code_point(thread, &mut v.code, &mut v.flow, info, icount, versions);
                        icount += info.n_insns;
                        r.tracer.set_tsc(icount);
                        v.flow.block(r, info.pc, &info.end, &mut no_signal);
                        for &ip in info.edges.iter() {
                            r.tracer.linear(ip);
                        }
                    }
                }
                // Without RTIT ranges no block has edges (`BlockInfo::edges`): the batch path.
                ThreadTracer::Rtit(r) if self.rtit_edges.is_empty() => {
                    v.flow.run(r, first, &mut icount);
                    v.flow.run(r, wrapped, &mut icount);
                }
                ThreadTracer::Rtit(r) => {
                    for info in blocks {
                        icount += info.n_insns;
                        r.tracer.set_tsc(icount);
                        v.flow.block(r, info.pc, &info.end, &mut no_signal);
                        for &ip in info.edges.iter() {
                            r.tracer.linear(ip);
                        }
                    }
                }
            }
            // The last entry is the block that ran last.
            v.code.prev = last;
            v.icount = icount;
            self.hand_off(v);
        });
        if let Some(buf) = expanded {
            v.expanded = buf;
        }
        ring.tail.store(head, Ordering::Release);
    }

    /// The blocks `entries` (and `extra` more at the end) stand for: a record as it is, a
    /// marker as that many predicted successors of the block before it, starting from the last
    /// block `v` ran (`CodeTrack::prev`). Into `v`'s reused buffer, taken out of `v`.
    fn expand(&self, v: &mut VcpuTrace, entries: impl Iterator<Item = usize>, extra: u64) -> Vec<&'static BlockInfo> {
        let mut buf = std::mem::take(&mut v.expanded);
        buf.clear();
        let mut last = v.code.prev;
        let walk = |buf: &mut Vec<&'static BlockInfo>, last: &mut Option<&'static BlockInfo>, mut k: u64| {
            let Some(mut b) = *last else { return Self::lost_predicted() };
            while k > 0 {
                let chain = self.chain(b);
                let Some(n) = (k as usize).min(chain.len()).checked_sub(1) else { return Self::lost_predicted() };
                buf.extend_from_slice(&chain[..=n]);
                b = chain[n];
                *last = Some(b);
                k -= n as u64 + 1;
            }
        };
        for e in entries {
            if e & predict::MARKER != 0 {
                walk(&mut buf, &mut last, (e >> 1) as u64);
            } else {
                // SAFETY: an even entry is a leaked `&'static BlockInfo` (`Ring::append`).
                let info: &'static BlockInfo = unsafe { &*(e as *const BlockInfo) };
                buf.push(info);
                last = Some(info);
            }
        }
        walk(&mut buf, &mut last, extra);
        buf
    }

    /// A block of `thread` is about to run through the model (`icount`: the thread's clock
    /// before it; called once code was rewritten, with an internal buffer, and for blocks at a
    /// signal handler): note a previous block that stopped early, and once code has been
    /// rewritten (`versions`), write a SWITCH record if the thread's decoder view of the
    /// block's bytes is not this version. Returns the thread's instruction count before it.
    #[inline(always)]
    fn code_point(&self, thread: u32, c: &mut CodeTrack, flow: &mut UserFlow, info: &'static BlockInfo, icount: u64, versions: bool) -> u64 {
        if let Some(prev) = c.prev {
            if versions && info.pc >= prev.pc && info.pc - prev.pc < u64::from(prev.len) {
                self.cut_short(c, flow, prev, info);
            }
        }
        c.prev = Some(info);
        let before = icount - flow.rep_reentries() - c.adjust;
        if versions && c.current.get(&info.pc).is_none_or(|e| e.0 != info.version) {
            self.switch_version(thread, c, info, before);
        }
        before
    }

    /// The block starts inside the previous one (or where it starts). If the previous block's
    /// last instruction cannot lead there, QEMU stopped that block early: an instruction wrote
    /// to the block's own page, QEMU invalidated the block and restarts that instruction as a
    /// block of its own (then translates the rest anew). The previous block's instructions
    /// from here on did not retire.
    #[cold]
    #[inline(never)]
    fn cut_short(&self, c: &mut CodeTrack, flow: &mut UserFlow, prev: &BlockInfo, info: &BlockInfo) {
        if !prev.end.excludes(info.pc) {
            return;
        }
        if let Some(n) = self.code.insns_from(prev.pc, prev.version, info.pc) {
            c.adjust += n;
            flow.cut_short();
        }
    }

    #[cold]
    #[inline(never)]
    fn switch_version(&self, thread: u32, c: &mut CodeTrack, info: &BlockInfo, before: u64) {
        let end = info.pc.saturating_add(u64::from(info.len));
        // The new overlay replaces the thread's view of [pc, end): entries overlapping it no
        // longer describe what the decoder sees.
        let stale: Vec<u64> = c
            .current
            .range(info.pc.saturating_sub(MAX_BLOCK_BYTES)..end)
            .filter(|(_, e)| e.1 > info.pc)
            .map(|(&a, _)| a)
            .collect();
        for a in stale {
            c.current.remove(&a);
        }
        c.current.insert(info.pc, (info.version, end));
        self.out.send(FileKey::Code, pttrace_core::code_img::switch_record(thread, before, info.version).to_vec());
    }

    /// After a block went through a tracer with an internal buffer: if an OVF was written,
    /// record the count at which the decoder resumes (the instruction named by the FUP, or the
    /// TIP.PGE target), and track the count at the tracer's resume point.
    #[inline(never)]
    fn ovf_anchor(&self, thread: u32, c: &mut CodeTrack, t: &Tracer, info: &BlockInfo, before: u64, pre: ((u64, u64), Option<u64>, u64)) {
        let ((pre_ip, _), pre_count, pre_ovf) = pre;
        let (n, fup) = t.overflows();
        for k in pre_ovf + 1..=n {
            let at = match fup {
                _ if k != n => None,
                Some(ip) if ip == pre_ip => pre_count,
                Some(ip) if ip == info.pc => Some(before),
                Some(_) => None,
                None => Some(before),
            };
            let rec = pttrace_core::code_img::ovf_record(thread, k as u32, at.unwrap_or(pttrace_core::code_img::UNKNOWN_COUNT));
            self.out.send(FileKey::Code, rec.to_vec());
        }
        c.overflows = n;
        let (ip, seq) = t.resume_point();
        if seq != c.resume_seq {
            c.resume_seq = seq;
            c.resume_count = (ip == info.pc).then_some(before);
        }
    }

    /// Drain progress of the internal buffer (issue 7) after a block: the block's instructions
    /// (deterministic) or the drainer thread's grant.
    #[inline(always)]
    fn pt_credit(&self, t: &mut Tracer, credit: &mut Option<pttrace_core::pt::internal_buffer::DrainCredit>, info: &BlockInfo) {
        if self.opts.buffer.is_some() {
            match credit.as_mut() {
                Some(c) => t.credit_from(c),
                None => t.credit(info.n_insns),
            }
        }
    }

    /// Hand the trace bytes to the writer once HANDOFF_BYTES have accumulated, and everything
    /// buffered (stream and truth) once per flush interval (issue 20).
    fn hand_off(&self, v: &mut VcpuTrace) {
        let epoch = fatal_signal::epoch();
        if epoch != v.epoch {
            v.epoch = epoch;
            self.hand_off_all(v);
            return;
        }
        let key = v.tracer.key(v.thread);
        let t = v.tracer.as_user_tracer();
        if t.output_len() >= HANDOFF_BYTES {
            self.out.send(key, t.take_output());
        }
    }

    /// One executed block through the sequencer and the trace model.
    fn run_block(&self, v: &mut VcpuTrace, info: &'static BlockInfo, probe: &mut impl FnMut(u64) -> Option<u64>) {
        let versions = self.code.rewritten();
        let thread = v.thread;
        let before = self.code_point(thread, &mut v.code, &mut v.flow, info, v.icount, versions);
        v.icount += info.n_insns;
        match &mut v.tracer {
            ThreadTracer::Pt(t) => {
                t.set_tsc(v.icount);
                let pre = self.opts.buffer.is_some().then(|| (t.resume_point(), v.code.resume_count, t.overflows().0));
                v.flow.block(t, info.pc, &info.end, probe);
                if let Some(pre) = pre {
                    self.ovf_anchor(thread, &mut v.code, t, info, before, pre);
                }
                self.pt_credit(t, &mut v.credit, info);
            }
            ThreadTracer::Rtit(r) => {
                r.tracer.set_tsc(v.icount);
                v.flow.block(r, info.pc, &info.end, probe);
                for &ip in info.edges.iter() {
                    r.tracer.linear(ip);
                }
            }
        }
        self.hand_off(v);
    }

    /// Give the writer this thread's buffered stream and truth bytes (issue 20).
    fn hand_off_all(&self, v: &mut VcpuTrace) {
        let key = v.tracer.key(v.thread);
        let bytes = v.tracer.as_user_tracer().take_output();
        self.out.send(key, bytes);
        if let Some(buf) = v.truth.as_mut() {
            self.out.send(FileKey::Truth(v.thread), std::mem::take(buf));
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

    fn on_truth(&'static self, vcpu: VCPUIndex, ip: u64, reentry: bool) {
        if forked_child() {
            return;
        }
        if let Some(slot) = self.vcpus.get(vcpu as usize) {
            self.on_truth_locked(&mut slot.state.lock(), ip, reentry);
        }
    }

    /// `reentry`: the instruction cannot follow itself, so a second callback at once is QEMU
    /// re-entering it (a REP string instruction's next iterations; an instruction restarted
    /// because it wrote to its own block), not a second retirement.
    fn on_truth_locked(&self, slot: &mut Option<VcpuTrace>, ip: u64, reentry: bool) {
        let Some(v) = slot.as_mut() else { return };
        // A REP string instruction re-entered for its next iterations retires only once.
        if reentry && v.last_truth_ip == ip {
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
        if self.opts.trace == TraceKind::Off || forked_child() {
            // A forked child that is not traced (`inherit=0`): nothing to set up, and a slot's
            // lock may have been held by a thread of the parent at the fork.
            return;
        }
        let thread = self.next_thread.fetch_add(1, Ordering::Relaxed);
        let rsp = qemu_plugin::qemu_plugin_get_registers()
            .ok()
            .and_then(|regs| regs.into_iter().find(|r| r.name == "rsp"));
        let Some(v) = self.new_trace(thread, rsp) else { return };
        let ring = &slot.ring;
        if ring.entries.load(Ordering::Relaxed).is_null() {
            // Kept for the process: a later thread may get this vCPU index again.
            let entries: &'static [AtomicPtr<BlockInfo>] =
                Box::leak((0..RING).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect());
            ring.entries.store(entries.as_ptr() as *mut AtomicPtr<BlockInfo>, Ordering::Relaxed);
        }
        ring.every_block.store(self.drainer.is_some(), Ordering::Relaxed);
        ring.room_end.store(0, Ordering::Relaxed);
        if let Some(p) = predict::get() {
            // A vCPU index a thread that ended had: its counts and prediction are not this
            // thread's, whose first block calls back.
            p.forget_expected(vcpu);
        }
        self.n_slots.fetch_max(vcpu as usize + 1, Ordering::Relaxed);
        slot.stopped_at.store(0, Ordering::Relaxed);
        let old = {
            let mut state = slot.state.lock();
            self.drain(ring, state.as_mut());
            if let Some(p) = predict::get() {
                ring.accounted.store(p.blocks(vcpu), Ordering::Relaxed);
                ring.blocks_at.store(p.blocks_at(vcpu), Ordering::Relaxed);
            }
            state.replace(v)
        };
        if let Some(old) = old {
            self.finish(old, None);
        }
    }

    /// A thread's trace hardware, enabled while the thread is in the kernel: its stream starts
    /// with PSB+ and, at its first user block, TIP.PGE.
    fn new_trace(&self, thread: u32, rsp: Option<RegisterDescriptor<'static>>) -> Option<VcpuTrace> {
        let mut flow = UserFlow::default();
        let tracer = match self.opts.trace {
            TraceKind::Off => return None,
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
                    return None;
                };
                flow.start(&mut r);
                ThreadTracer::Rtit(r)
            }
        };
        Some(VcpuTrace {
            thread,
            tracer,
            flow,
            icount: 0,
            rsp,
            credit: self.drainer.as_ref().map(|d| d.credit()),
            truth: self.opts.truth.then(Vec::new),
            last_truth_ip: u64::MAX,
            epoch: fatal_signal::epoch(),
            code: CodeTrack::new(),
            expanded: Vec::new(),
        })
    }

    pub(crate) fn vcpu_exit(&self, vcpu: VCPUIndex) {
        if forked_child() {
            return;
        }
        let Some(slot) = self.vcpus.get(vcpu as usize) else {
            return;
        };
        if let Some(v) = self.take_drained(slot) {
            self.finish(v, None);
        }
    }

    /// The slot's trace, with every block recorded so far run through the model.
    fn take_drained(&self, slot: &Slot) -> Option<VcpuTrace> {
        let mut state = slot.state.lock();
        // (The blocks it ran unrecorded too: on its own thread as it exits, or once the run
        // ends; a thread still running at a fatal signal, in a loop its prediction foresees,
        // ends its trace where the count stands now.)
        let pending = slot.take_pending();
        self.drain_to(&slot.ring, state.as_mut(), slot.ring.head.load(Ordering::Acquire), pending);
        state.take()
    }

    /// The end of a thread's trace: pending packets, the stream's last bytes, the counters.
    /// `stopped_at`: the thread parked for a fatal signal before the block at this address.
    fn finish(&self, mut v: VcpuTrace, stopped_at: Option<u64>) {
        let key = v.tracer.key(v.thread);
        let (bytes, packets, psbs) = {
            let t = v.tracer.as_user_tracer();
            match stopped_at {
                Some(pc) => v.flow.stopped_at(t, pc),
                None => v.flow.finish(t),
            }
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
        // `trace=off` has no translation callback, which otherwise notes the binary's layout.
        if self.binary.get().is_none() {
            let _ = self.binary.set(binary_meta());
        }
        self.finish_run("exit");
    }

    /// A default-fatal signal ends the run (`fatal_signal`): finish like at exit.
    fn on_fatal_signal(&self, sig: i32) {
        if let Some(p) = predict::get() {
            // A thread in a loop its prediction foresees calls back at no block: clear what its
            // blocks expect, so that its next block calls back and parks there (as every
            // block did without prediction). Again for 2 ms: a block running as it is cleared
            // stores its own prediction after.
            for _ in 0..20 {
                for slot in self.used_slots() {
                    p.forget_expected(slot.index());
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        // With truth=1, a vCPU in the middle of a block still logs its instructions: wait until
        // each has parked at its next block or system call (microseconds; bounded at 2 s).
        if self.opts.truth {
            std::sync::atomic::fence(Ordering::SeqCst);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            for slot in self.used_slots() {
                while slot.in_block.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        }
        self.finish_run(&format!("signal {sig}"));
    }

    /// The run has lasted long enough for prediction to pay (`predict::switch_due`): ask QEMU to
    /// stop every vCPU at its next block boundary, flush the translations and remove the
    /// callbacks (`on_predict_reset` registers them again). On a vCPU's thread, in a callback.
    fn start_predicting(&self) {
        // SAFETY: on a vCPU thread inside a callback (QEMU queues the flush as safe work on it);
        // `on_predict_reset` is a plain function valid for the plugin's lifetime.
        unsafe { qemu_plugin::sys::qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), Some(on_predict_reset)) };
    }

    /// Prediction starts (no vCPU runs): each vCPU's counts start where they stand, and its next
    /// block calls back.
    fn predict_started(&self) {
        let Some(p) = predict::get() else { return };
        if std::env::var_os("PTTRACE_STATS").is_some() {
            eprintln!("pttrace: translations flushed; prediction from here on");
        }
        self.on_flush();
        for slot in self.used_slots() {
            let vcpu = slot.index();
            slot.ring.accounted.store(p.blocks(vcpu), Ordering::Relaxed);
            p.forget_expected(vcpu);
        }
    }

    /// The translations were flushed (QEMU's flush callback: no vCPU runs). QEMU moves its
    /// scoreboards only with a flush (when a new vCPU outgrows them): each vCPU's `blocks` entry
    /// is found again.
    pub(crate) fn on_flush(&self) {
        if let Some(p) = predict::get() {
            for slot in self.used_slots() {
                slot.ring.blocks_at.store(p.blocks_at(slot.index()), Ordering::Relaxed);
            }
        }
    }

    /// A fatal signal is pending (called inside the signal handler: atomics only): no vCPU
    /// appends in the common case any more, so its next block takes `on_block`, which parks it,
    /// as when the common case looked at the signal itself. The slots used so far; a slot a new
    /// thread takes gets room only in `Ring::saw_tail`, which looks for the signal.
    fn stop_appending(&self) {
        for slot in self.used_slots() {
            slot.ring.room_end.store(0, Ordering::SeqCst);
        }
    }

    /// Every FLUSH_INTERVAL: hand off the bytes of threads that are not running (blocked in a
    /// system call: their slot is free) and write everything to the files.
    fn on_flush_tick(&self) {
        if forked_child() || self.finished.load(Ordering::Acquire) {
            return;
        }
        let n = (self.next_thread.load(Ordering::Relaxed) as usize).min(self.vcpus.len());
        for slot in self.vcpus.iter().take(n) {
            if let Some(mut g) = slot.state.try_lock() {
                if let Some(v) = g.as_mut() {
                    self.hand_off_all(v);
                }
            }
        }
        self.out.flush();
    }

    /// Finish every stream, write the sideband and wait for the writer; `end` goes to meta.txt
    /// (`end=exit` or `end=signal N`): a directory without it was cut short (SIGKILL, crash,
    /// disk full) and its streams may end mid-flow.
    fn finish_run(&self, end: &str) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        if FORKED_CHILD.load(Ordering::Relaxed) {
            eprintln!(
                "pttrace: process {} was forked by the traced program; forked children are not traced",
                std::process::id()
            );
            return;
        }
        // QEMU unregistered every callback before this one: no vCPU appends to its ring any more.
        for slot in self.used_slots() {
            if let Some(v) = self.take_drained(slot) {
                let stopped = slot.stopped_at.load(Ordering::Acquire);
                self.finish(v, (stopped != 0).then_some(stopped));
            }
        }
        let sync = self.out.sync();
        if sync.is_ok() {
            self.write_meta_end(Some(end));
        }
        let t = self.totals.lock();
        let ppid = PPID.load(Ordering::Relaxed);
        eprintln!(
            "pttrace: {}{} thread(s), {} {} bytes, {} packets, {} PSBs, {} blocks, {} signals{} -> {}",
            if ppid != 0 { format!("process {} (forked by {ppid}): ", PID.load(Ordering::Relaxed)) } else { String::new() },
            t.threads,
            t.bytes,
            if self.opts.trace == TraceKind::Rtit { "RTIT" } else { "PT" },
            t.packets,
            t.psbs,
            t.blocks,
            t.signals,
            if t.unexplained > 0 { format!(", {} UNEXPLAINED transitions", t.unexplained) } else { String::new() },
            if ppid != 0 { self.out.dir().display() } else { self.opts.out.display() }
        );
        if let Err(e) = sync {
            eprintln!("pttrace: trace output incomplete: {e}");
        }
    }

    pub(crate) fn translate(&self, tb: &TranslationBlock) {
        if self.binary.get().is_none() && self.binary.set(binary_meta()).is_ok() {
            // meta.txt with the binary's layout right away: a run cut short keeps it.
            self.write_meta_end(None);
        }
        if self.opts.trace == TraceKind::Off {
            return;
        }
        // The block's bytes in one buffer and each instruction's address and offset in it (no
        // allocation per instruction: translation is most of a short program's run).
        let mut code = Vec::with_capacity(256);
        let mut insns: Vec<(u64, usize)> = Vec::with_capacity(64);
        for insn in tb.instructions() {
            let at = code.len();
            code.resize(at + insn.size(), 0);
            let n = insn.read_data(&mut code[at..]);
            code.truncate(at + n);
            insns.push((insn.vaddr(), at));
        }
        let Some(&(last_ip, last_at)) = insns.last() else {
            return;
        };
        let last_bytes = &code[last_at..];
        let last = classify(last_bytes, last_ip, 64).unwrap_or(ClassifiedInsn {
            ip: last_ip,
            len: last_bytes.len() as u8,
            kind: BranchKind::None,
            rep_string: false,
        });
        let truth_insns: Vec<(u64, Vec<u8>)> = if self.opts.truth {
            insns.iter().enumerate().map(|(i, &(ip, at))| (ip, code[at..insns.get(i + 1).map_or(code.len(), |n| n.1)].to_vec())).collect()
        } else {
            Vec::new()
        };
        let pc = tb.vaddr();
        let len = code.len() as u32;
        let version = self.record_code(pc, code);
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
            version,
            len,
            at_handler: std::sync::atomic::AtomicBool::new(false),
            predicted: pttrace_core::successor_prediction::predicted_successor(&last),
            succ: AtomicPtr::new(std::ptr::null_mut()),
            chain: OnceLock::new(),
        }));
        {
            let mut infos = self.block_infos.lock();
            infos.push(info);
            if self.n_handlers.load(Ordering::Relaxed) != 0 && self.is_handler(pc) {
                info.at_handler.store(true, Ordering::Relaxed);
            }
        }
        // A plain C function with the block's record as user data: no boxed closure to call
        // through per block. R_REGS: the signal probe reads RSP.
        if let Some(p) = predict::get() {
            let key = self.canonical_key(info);
            let cb = if self.opts.truth { on_block_exec::<true> } else { on_block_predicted };
            p.register(tb, cb, info as *const BlockInfo as *mut std::ffi::c_void, key, info.predicted);
        } else {
            // SAFETY: `tb` is the translation being instrumented; `info` outlives it.
            unsafe {
                qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_cb(
                    crate::tb_ptr(tb),
                    Some(if self.opts.truth { on_block_exec::<true> } else { on_block_exec::<false> }),
                    CallbackFlags::QEMU_PLUGIN_CB_R_REGS,
                    info as *const BlockInfo as *mut std::ffi::c_void,
                );
            }
        }
        if self.opts.truth {
            for (i, insn) in tb.instructions().enumerate() {
                let ip = truth_insns[i].0;
                let rep = classify(&truth_insns[i].1, ip, 64).is_some_and(|c| {
                    c.rep_string
                        || match c.kind {
                            BranchKind::None => true,
                            BranchKind::Conditional { target } | BranchKind::DirectJump { target } | BranchKind::DirectCall { target } => target != ip,
                            _ => false,
                        }
                });
                insn.register_execute_callback(move |vcpu| {
                    if let Some(sh) = SHARED.get() {
                        guarded("truth callback", || sh.on_truth(vcpu, ip, rep));
                    }
                });
            }
        }
    }

    /// The key of `info`'s translation for prediction (`predict`): its address if it is the
    /// first translation there, or has the same bytes, length and instructions as the first
    /// (whose record the model then uses for it: `predicted_after`); else a key no block
    /// predicts, so it is always recorded (code rewritten at run time, issue 19). Blocks at a
    /// signal handler are always recorded (`handler_block` reads the stack as they start).
    fn canonical_key(&self, info: &'static BlockInfo) -> u64 {
        if info.pc == 0 || info.pc >= predict::UNPREDICTABLE || info.at_handler.load(Ordering::Relaxed) {
            return predict::UNPREDICTABLE;
        }
        match self.canonical.lock().entry(info.pc) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(info);
                info.pc
            }
            std::collections::hash_map::Entry::Occupied(e) => {
                let c = e.get();
                if c.version == info.version && c.len == info.len && c.n_insns == info.n_insns && c.edges == info.edges {
                    info.pc
                } else {
                    predict::UNPREDICTABLE
                }
            }
        }
    }

    /// Cannot happen: a block runs without its callback only after the block whose predicted
    /// successor it is (`predict`), so the model has a record for it.
    #[cold]
    fn lost_predicted() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| eprintln!("pttrace: internal error: a predicted block has no record; the trace misses blocks"));
    }

    /// The predicted sequence from `b` (`BlockInfo::chain`): its blocks as far as they were
    /// translated when first asked, up to PREDICTED_CHAIN (empty: none is known).
    fn chain(&self, b: &'static BlockInfo) -> &'static [&'static BlockInfo] {
        b.chain.get_or_init(|| {
            let mut chain = Vec::with_capacity(PREDICTED_CHAIN);
            let mut at = b;
            while chain.len() < PREDICTED_CHAIN {
                let Some(next) = self.predicted_after(at) else { break };
                chain.push(next);
                at = next;
            }
            chain.into_boxed_slice()
        })
    }

    /// The block that ran after `prev` without a callback: the translation whose key is
    /// `prev`'s predicted successor (`canonical_key`), looked up once per block.
    fn predicted_after(&self, prev: &'static BlockInfo) -> Option<&'static BlockInfo> {
        let cached = prev.succ.load(Ordering::Acquire);
        if !cached.is_null() {
            // SAFETY: only ever a leaked `&'static BlockInfo` (below).
            return Some(unsafe { &*cached });
        }
        let next: &'static BlockInfo = *self.canonical.lock().get(&prev.predicted).filter(|_| prev.predicted != 0)?;
        prev.succ.store(next as *const BlockInfo as *mut BlockInfo, Ordering::Release);
        Some(next)
    }

    /// Append the block's bytes to code.img unless identical bytes were already written there;
    /// returns their version id.
    fn record_code(&self, pc: u64, code: Vec<u8>) -> u32 {
        self.code.record(&self.out, pc, code)
    }

    /// execve replaces the process without running atexit: the calling thread enters the kernel
    /// now (TIP.PGD), and every buffered byte is written before the syscall runs. If execve
    /// fails, the thread resumes with a TIP.PGE like after any syscall.
    fn flush_for_exec(&self, vcpu: VCPUIndex) {
        for (i, slot) in self.used_slots().iter().enumerate() {
            let mut guard = slot.state.lock();
            // Other threads' blocks recorded so far go out too (they may keep running).
            self.drain(&slot.ring, guard.as_mut());
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
        let sync = self.out.sync();
        if sync.is_ok() {
            // The new program (or the resumed one, if execve fails) rewrites it.
            self.write_meta_end(Some("execve"));
        }
        if let Err(e) = sync {
            eprintln!("pttrace: trace output incomplete: {e}");
        }
    }

    /// meta.txt with the binary's layout, and `end=` once the run ended in order.
    fn write_meta_end(&self, end: Option<&str>) {
        if let Err(e) = write_meta(
            self.out.dir(),
            &self.opts,
            self.binary.get().map(String::as_str).unwrap_or(""),
            end,
        ) {
            eprintln!("pttrace: writing meta.txt: {e}");
        }
    }

    pub(crate) fn syscall(&'static self, vcpu: VCPUIndex, num: i64, a: [u64; 6]) {
        if forked_child() {
            return;
        }
        if let Some(slot) = self.vcpus.get(vcpu as usize) {
            slot.in_block.store(false, Ordering::Release);
        }
        if fatal_signal::pending() {
            fatal_signal::park();
        }
        // The system call may observe the trace (execve, exit) or block for long: the blocks
        // recorded so far go through the model now. Not before one that only reads the
        // process's own state (getppid, clock_gettime, ...): those blocks stay for the encoder
        // thread (issue 13: draining at each of them put the model back on the vCPU, ~1,900
        // instructions a getppid in `make bench`'s sys workload).
        if !returns_at_once(num) {
            if let Some(slot) = self.vcpus.get(vcpu as usize) {
                self.drain_own(slot);
            }
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
                let infos = self.block_infos.lock();
                let mut hs = self.handlers.write();
                if let Some(h) = hs.iter_mut().find(|h| h.handler == handler) {
                    h.restorer = restorer;
                    return;
                }
                hs.push(SignalAction { handler, restorer });
                self.n_handlers.store(hs.len(), Ordering::Release);
                drop(hs);
                // Blocks at the handler translated before (e.g. the function was also called).
                for info in infos.iter().filter(|i| i.pc == handler) {
                    info.at_handler.store(true, Ordering::Relaxed);
                }
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

    pub(crate) fn syscall_return(&'static self, vcpu: VCPUIndex, num: i64, ret: i64) {
        if self.fork_pending.load(Ordering::Relaxed) {
            // The first system call return of a forked child: fork's own (issue 19).
            self.start_child(vcpu);
        }
        if forked_child() {
            return;
        }
        if fatal_signal::pending() {
            // A signal the program sent itself: the thread dies in the kernel.
            fatal_signal::park();
        }
        // rt_sigaction: QEMU re-installed the host action of the signal (issue 20).
        if num == 13 && ret == 0 {
            fatal_signal::reclaim_defaults();
        }
        if num != 9 {
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
        let line = format!("{:x} {:x} {:x} {}\n", start, start + len, off, path);
        if self.opts.inherit {
            self.maps_log.lock().extend_from_slice(line.as_bytes());
        }
        self.out.send(FileKey::Maps, line.into_bytes());
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
extern "C" fn on_block_exec<const TRUTH: bool>(vcpu: VCPUIndex, info: *mut std::ffi::c_void) {
    // SAFETY: registered in `translate` with a leaked `&'static BlockInfo`.
    let info = unsafe { &*(info as *const BlockInfo) };
    if !TRUTH && Shared::try_append(vcpu, info) {
        return;
    }
    on_block_slow::<TRUTH>(vcpu, info);
}

/// The execute callback with prediction (`predict`): runs only for a block the block before did
/// not predict.
extern "C" fn on_block_predicted(vcpu: VCPUIndex, info: *mut std::ffi::c_void) {
    // SAFETY: registered in `translate` with a leaked `&'static BlockInfo`.
    let info = unsafe { &*(info as *const BlockInfo) };
    if Shared::try_append_predicted(vcpu, info) {
        return;
    }
    on_block_slow::<false>(vcpu, info);
}

/// Everything but the plain append (`Shared::try_append`): kept out of line so that the common
/// case calls nothing and saves no registers. `extern "C"` (cannot unwind, like the callback):
/// the callback needs no unwind edge around the call, and reaches it by a tail jump.
#[inline(never)]
extern "C" fn on_block_slow<const TRUTH: bool>(vcpu: VCPUIndex, info: &'static BlockInfo) {
    // SAFETY: only `Shared::translate` registers the execute callback, and it is reached only
    // through SHARED (lib.rs, `on_translation_block_translate`): no block runs before SHARED is
    // set, and it is never unset.
    let sh = unsafe { SHARED.get().unwrap_unchecked() };
    sh.on_block::<TRUTH>(vcpu, info);
}

/// x86-64 Linux system calls that only read the process's or the host's state and return at
/// once: they neither observe the trace (as execve, exit and fork do), nor block (so a kill
/// while the thread waits in the kernel cannot find blocks still in the ring), nor change
/// signal dispositions, masks or mappings. The blocks recorded before them need not go through
/// the model first.
fn returns_at_once(num: i64) -> bool {
    matches!(
        num,
        39 // getpid
            | 110 // getppid
            | 186 // gettid
            | 102 | 104 | 107 | 108 // getuid, getgid, geteuid, getegid
            | 111 | 121 | 124 // getpgrp, getpgid, getsid
            | 96 | 201 | 228 | 229 // gettimeofday, time, clock_gettime, clock_getres
            | 63 | 97 | 98 | 99 // uname, getrlimit, getrusage, sysinfo
    )
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

fn write_meta(dir: &std::path::Path, opts: &Options, binary: &str, end: Option<&str>) -> std::io::Result<()> {
    let mut m = String::new();
    let _ = writeln!(m, "format=pttrace-1");
    let _ = writeln!(m, "mode=user");
    let _ = writeln!(m, "pid={}", PID.load(Ordering::Relaxed));
    if PPID.load(Ordering::Relaxed) != 0 {
        // A forked child (issue 19): DIR/proc-PID of the run's directory.
        let _ = writeln!(m, "ppid={}", PPID.load(Ordering::Relaxed));
    }
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
    if let Some(end) = end {
        let _ = writeln!(m, "end={end}");
    }
    crate::output::replace_file(&dir.join("meta.txt"), m.as_bytes())
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
                || name == "maps.txt"
            {
                let _ = std::fs::remove_file(e.path());
            } else if is_process_dir(&name) {
                // A forked process of an earlier run (issue 19).
                remove_process_dir(&e.path());
            }
        }
    }
    let root_dir = std::fs::canonicalize(&opts.out).unwrap_or_else(|_| opts.out.clone());
    PID.store(std::process::id(), Ordering::Relaxed);
    if let Err(e) = write_meta(&opts.out, &opts, "", None) {
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
    out.send(FileKey::Code, pttrace_core::code_img::MAGIC_V2.to_vec());
    let rtit_edges = if opts.trace == TraceKind::Rtit { opts.rtit.edge_addresses() } else { Vec::new() };
    let drainer = crate::start_buffer(opts.buffer);
    let predict_env = std::env::var("PTTRACE_PREDICT").unwrap_or_default();
    if opts.trace != TraceKind::Off && drainer.is_none() && predict_env != "0" {
        predict::enable(predict_env == "2");
    }
    PLUGIN_ID.store(id, Ordering::Relaxed);
    let shared = Shared {
        rtit_edges,
        opts,
        out,
        vcpus: &SLOTS,
        next_thread: AtomicU32::new(1),
        n_slots: AtomicUsize::new(0),
        handlers: RwLock::new(Vec::new()),
        n_handlers: AtomicUsize::new(0),
        block_infos: Mutex::new(Vec::new()),
        code: crate::output::CodeImage::default(),
        canonical: Mutex::new(HashMap::new()),
        pending_mmap: Mutex::new(HashMap::new()),
        maps_log: Mutex::new(Vec::new()),
        root_dir,
        encoder: std::sync::atomic::AtomicBool::new(false),
        fork_locked: AtomicUsize::new(0),
        fork_pending: std::sync::atomic::AtomicBool::new(false),
        finished: std::sync::atomic::AtomicBool::new(false),
        totals: Mutex::new(Totals::default()),
        binary: OnceLock::new(),
        drainer,
    };
    if SHARED.set(shared).is_err() {
        fail("plugin loaded twice");
    }
    if let Some(sh) = SHARED.get() {
        if sh.opts.trace != TraceKind::Off {
            // An empty maps.txt exists from the start (the writer appends to it).
            let _ = std::fs::File::create(sh.opts.out.join("maps.txt"));
            fatal_signal::install(
                |sig| {
                    if let Some(sh) = SHARED.get() {
                        guarded("fatal signal", || sh.on_fatal_signal(sig));
                    }
                },
                || {
                    if let Some(sh) = SHARED.get() {
                        guarded("flush", || sh.on_flush_tick());
                    }
                },
                || {
                    if let Some(sh) = SHARED.get() {
                        sh.stop_appending();
                    }
                },
            )
            .unwrap_or_else(|e| fail(&format!("cannot start the finisher thread: {e}")));
        }
    }
    if let Some(sh) = SHARED.get().filter(|sh| sh.opts.trace != TraceKind::Off && sh.drainer.is_none()) {
        // PTTRACE_ENCODER=0 (for measurements): every block runs through the model on its vCPU.
        if std::env::var_os("PTTRACE_ENCODER").is_none_or(|v| v != "0") {
            if let Err(e) = sh.spawn_encoder() {
                fail(&format!("cannot start the encoder thread: {e}"));
            }
        }
    }
    register_callbacks(id)
}

/// The plugin's id (for `qemu_plugin_reset`).
static PLUGIN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The user-mode callbacks registered in `install` besides the common ones (lib.rs), again after
/// the switch to prediction (`on_predict_reset`).
fn register_callbacks(id: PluginId) -> qemu_plugin::Result<()> {
    extern "C" fn on_flush(_id: qemu_plugin::sys::qemu_plugin_id_t) {
        if let Some(sh) = SHARED.get() {
            guarded("flush", || sh.on_flush());
        }
    }
    // SAFETY: a plain function valid for the plugin's lifetime.
    unsafe { qemu_plugin::sys::qemu_plugin_register_flush_cb(id, Some(on_flush)) };
    qemu_plugin::qemu_plugin_register_atexit_cb(id, |_| {
        if let Some(sh) = SHARED.get() {
            guarded("exit", || sh.at_exit());
        }
    })?;
    Ok(())
}

/// QEMU flushed the translations and removed every callback for the switch to prediction
/// (`Shared::start_predicting`; no vCPU runs): blocks are instrumented for it from now on, and
/// the callbacks are registered again.
extern "C" fn on_predict_reset(id: qemu_plugin::sys::qemu_plugin_id_t) {
    predict::activate();
    if let Some(sh) = SHARED.get() {
        guarded("prediction", || sh.predict_started());
    }
    if let Err(e) = crate::register_user_callbacks(id).and_then(|()| register_callbacks(id)) {
        fail(&format!("cannot register callbacks again after a translation flush: {e}"));
    }
}
