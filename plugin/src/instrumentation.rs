//! Full-system instrumentation level (issue 13): translation blocks carry no per-block callback
//! while no vCPU needs to see blocks.
//!
//! A conditional per-block callback costs a scoreboard load and a branch in every block even
//! while its flag is 0; the issue asks for a plugin whose guest never enables tracing (or only
//! configures it with TraceEn = 0) to run within 5% of plain QEMU, and for a Linux boot within
//! 10%. So the translations are *light* whenever that is safe: only the instructions the plugin
//! must answer or watch (CPUID, RDMSR, WRMSR, RDPMC, LGDT, LIDT, HLT, MOV CR3, and RDTSC until
//! QEMU's TSC offset is known: `Shared::translate`) carry callbacks, plus the blocks that end in a WRMSR (a WRMSR may enable tracing in the middle of the
//! flow) and the blocks that may follow a block ending in an instruction whose result the plugin
//! rewrites (`fixup_successor`). Otherwise they are *full*: every block has its (conditional)
//! callback, as before.
//!
//! Full is required while a vCPU needs to see blocks (Intel PT TraceEn, BTS, RTIT, a counting
//! PMU, LBRs, ground truth). With full instrumentation and no such feature, the model still sees
//! the blocks that end in a WRMSR (instrumented either way) and the block after each CPUID, RDMSR
//! or RDTSC whose result it fixes up (the flag stays set until a block callback clears it).
//! Outside IA-32e mode the execution mode (CS.D, a cached CS base) is inferred from the blocks
//! the model sees, and later MODE.Exec decisions may rest on those blocks (the m32 guests showed
//! it), so a fix-up pending outside IA-32e mode makes the translations full before the next
//! block runs, and keeps them full for `LIGHT_AFTER`. In IA-32e mode the mode follows from
//! CS.L/CS.D in the GDT; the record-identity test checks that light and full instrumentation
//! produce the same bytes.
//!
//! A switch is `qemu_plugin_reset`: QEMU stops every vCPU at its next block boundary, flushes the
//! translation cache and removes the plugin's callbacks; `on_reset` registers them again. Going
//! full happens inside a system instruction's callback, before anything the model would see
//! runs: that instruction's block ends under the old translations (a WRMSR ends its block; the
//! next block exits at its `icount_decr` check, emitted before any plugin callback), and the next
//! block is translated anew with its callback. Going light waits `LIGHT_AFTER` after the last
//! vCPU stopped needing blocks (Linux's perf disables and enables tracing at every context
//! switch; a flush costs ~0.5 ms plus retranslation).
//!
//! Translations are PC-relative in full-system mode (a block may run at another virtual address
//! with the same page offset), so fix-up successors are kept by page offset: a few more blocks
//! than needed get the conditional callback, never fewer.

use crate::monotonic_ns;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// How long every vCPU must have needed no blocks before the translations go light again.
const LIGHT_AFTER: Duration = Duration::from_millis(500);

/// 4096 page offsets, one bit each.
struct OffsetSet([AtomicU64; 64]);

impl OffsetSet {
    const fn new() -> Self {
        OffsetSet([const { AtomicU64::new(0) }; 64])
    }

    fn contains(&self, offset: u64) -> bool {
        let o = (offset & 0xFFF) as usize;
        self.0[o / 64].load(Ordering::Relaxed) & (1 << (o % 64)) != 0
    }

    /// Adds the offset; true when it was not there.
    fn insert(&self, offset: u64) -> bool {
        let o = (offset & 0xFFF) as usize;
        let bit = 1 << (o % 64);
        self.0[o / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0
    }
}

pub(crate) struct Instrumentation {
    /// Every block has its callback.
    full: AtomicBool,
    /// Page offsets of the instructions that follow a block-ending CPUID, RDMSR or RDTSC: the
    /// block there applies the pending result (`Shared::apply_pending`).
    fixup_successors: OffsetSet,
    /// Page offsets of the blocks translated without a block callback.
    light_starts: OffsetSet,
    plugin_id: AtomicU64,
    /// Full for the whole run (ground truth, PTTRACE_LIGHT=0, more than 64 vCPUs).
    pinned: AtomicBool,
    /// Per vCPU (bit = index): needs to see blocks.
    needs_blocks: AtomicU64,
    /// Per vCPU: when it last had a fix-up pending outside IA-32e mode (`monotonic_ns`,
    /// 0: never). Another vCPU's mark keeps the translations full for `LIGHT_AFTER` (until the
    /// block after its instruction has surely run).
    legacy: [AtomicU64; 64],
    /// Host time spent light and full (PTTRACE_STATS), from the last switch.
    spent: parking_lot::Mutex<(Duration, Duration, Option<Instant>)>,
    /// When the last vCPU stopped needing blocks (`monotonic_ns`, 0: not since start).
    quiet_since: AtomicU64,
    /// PTTRACE_STATS, read at start: 1 prints a summary at exit, 2 also each switch.
    stats: AtomicU8,
    /// Translation flushes requested (`qemu_plugin_reset`), and for which reason.
    flushes_light: AtomicU64,
    flushes_full: AtomicU64,
    flushes_fixup: AtomicU64,
    /// Blocks translated (each flush makes QEMU translate the working set again).
    translations: AtomicU64,
}

pub(crate) static INSTRUMENTATION: Instrumentation = Instrumentation {
    full: AtomicBool::new(false),
    fixup_successors: OffsetSet::new(),
    light_starts: OffsetSet::new(),
    plugin_id: AtomicU64::new(0),
    pinned: AtomicBool::new(false),
    needs_blocks: AtomicU64::new(0),
    legacy: [const { AtomicU64::new(0) }; 64],
    quiet_since: AtomicU64::new(0),
    stats: AtomicU8::new(0),
    spent: parking_lot::Mutex::new((Duration::ZERO, Duration::ZERO, None)),
    flushes_light: AtomicU64::new(0),
    flushes_full: AtomicU64::new(0),
    flushes_fixup: AtomicU64::new(0),
    translations: AtomicU64::new(0),
};

impl Instrumentation {
    /// At install. The translations start full (firmware and boot code run outside IA-32e
    /// mode), and go light at the first system instruction that allows it; `pinned`: full for the whole run (ground truth, `PTTRACE_LIGHT=0` for
    /// measurements and the record-identity test, more vCPUs than the masks hold).
    pub(crate) fn start(&self, id: u64, pinned: bool) {
        self.plugin_id.store(id, Ordering::Relaxed);
        let forced = std::env::var_os("PTTRACE_LIGHT").is_some_and(|v| v == "0");
        self.pinned.store(pinned || forced, Ordering::Relaxed);
        let stats = std::env::var("PTTRACE_STATS").ok().and_then(|v| v.parse::<u8>().ok()).unwrap_or(0);
        self.stats.store(stats, Ordering::Relaxed);
        monotonic_ns();
        self.full.store(true, Ordering::Relaxed);
        self.spent.lock().2 = Some(Instant::now());
    }

    /// Accounts the time since the last switch to the level that ends now (`was_full`).
    fn switched(&self, was_full: bool) {
        if self.stats.load(Ordering::Relaxed) >= 2 {
            eprintln!("pttrace: {:?} -> {} needs={:x}", self.spent.lock().2.map(|t| t.elapsed()), if was_full { "light" } else { "full" }, self.needs_blocks.load(Ordering::Relaxed));
        }
        let mut spent = self.spent.lock();
        let now = Instant::now();
        let d = spent.2.map_or(Duration::ZERO, |t| now - t);
        if was_full {
            spent.1 += d;
        } else {
            spent.0 += d;
        }
        spent.2 = Some(now);
    }

    pub(crate) fn full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// Whether a block starting at `pc` (ending in a WRMSR or not) gets the block callback, and
    /// the note of a block translated without one.
    pub(crate) fn block_cb(&self, pc: u64, has_wrmsr: bool) -> bool {
        self.translations.fetch_add(1, Ordering::Relaxed);
        let cb = has_wrmsr || self.full() || self.fixup_successors.contains(pc);
        if !cb {
            self.light_starts.insert(pc);
        }
        cb
    }

    /// A block ends in an instruction whose result is fixed up before the next one runs; the
    /// next one is at `successor`. If a block at that page offset was already translated
    /// without its callback, the translations are flushed (rare: CPUID and RDMSR end a block
    /// only at a page boundary or QEMU's block size limit).
    pub(crate) fn fixup_successor(&self, successor: u64) {
        if self.fixup_successors.insert(successor) && !self.full() && self.light_starts.contains(successor) {
            self.flushes_fixup.fetch_add(1, Ordering::Relaxed);
            self.reset();
        }
    }

    /// A system instruction's callback saw this vCPU's state (callbacks run one at a time in
    /// full-system mode): whether it needs to see blocks, and whether a result fix-up is pending
    /// outside IA-32e mode (the next block must be seen, as with full instrumentation).
    pub(crate) fn observe(&self, vcpu: u32, needs_blocks: bool, legacy_fixup: bool) {
        if vcpu >= 64 {
            self.pinned.store(true, Ordering::Relaxed);
        }
        if self.pinned.load(Ordering::Relaxed) {
            return; // full for the whole run: nothing to decide
        }
        let bit = 1u64 << (vcpu % 64);
        let was_needed = if needs_blocks {
            self.needs_blocks.fetch_or(bit, Ordering::Relaxed)
        } else {
            self.needs_blocks.fetch_and(!bit, Ordering::Relaxed)
        } & bit != 0;
        let now = monotonic_ns();
        let after = LIGHT_AFTER.as_nanos() as u64;
        self.legacy[(vcpu % 64) as usize].store(if legacy_fixup { now } else { 0 }, Ordering::Relaxed);
        if needs_blocks || legacy_fixup {
            self.go_full();
            return;
        }
        let quiet = self.needs_blocks.load(Ordering::Relaxed) == 0;
        if was_needed && quiet {
            self.quiet_since.store(now, Ordering::Relaxed);
        }
        if !self.full() || !quiet {
            return;
        }
        let recent = |t: u64| t != 0 && now - t < after;
        if self.legacy.iter().any(|t| recent(t.load(Ordering::Relaxed))) {
            return;
        }
        if !recent(self.quiet_since.load(Ordering::Relaxed)) {
            self.full.store(false, Ordering::Relaxed);
            self.switched(true);
            self.flushes_light.fetch_add(1, Ordering::Relaxed);
            self.reset();
        }
    }

    fn go_full(&self) {
        if !self.full.swap(true, Ordering::Relaxed) {
            self.switched(false);
            self.flushes_full.fetch_add(1, Ordering::Relaxed);
            self.reset();
        }
    }

    /// With PTTRACE_STATS=1 or 2, at exit: what the instrumentation did.
    pub(crate) fn report(&self) {
        if self.stats.load(Ordering::Relaxed) != 0 {
            self.switched(self.full());
            let (light, full, _) = *self.spent.lock();
            eprintln!(
                "pttrace: instrumentation light {:.2} s, full {:.2} s (host time); {} flushes to light, {} to full, {} for result fix-ups; {} blocks translated",
                light.as_secs_f64(),
                full.as_secs_f64(),
                self.flushes_light.load(Ordering::Relaxed),
                self.flushes_full.load(Ordering::Relaxed),
                self.flushes_fixup.load(Ordering::Relaxed),
                self.translations.load(Ordering::Relaxed)
            );
        }
    }

    fn reset(&self) {
        // SAFETY: called from a vCPU callback (QEMU queues the flush as safe work on the vCPU);
        // `on_reset` is a plain function valid for the plugin's lifetime.
        unsafe { qemu_plugin::sys::qemu_plugin_reset(self.plugin_id.load(Ordering::Relaxed), Some(on_reset)) };
    }
}

/// QEMU has flushed the translations and removed the plugin's callbacks (every vCPU stopped):
/// register them again.
extern "C" fn on_reset(id: u64) {
    crate::register_system_callbacks(id);
}
