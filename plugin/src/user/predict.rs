//! User mode records only the blocks a static predictor did not foresee (issue 13 step 24).
//!
//! Each translated block gets, in this order (QEMU emits a translation's execute-time
//! instrumentation in the order it was registered):
//! 1. the execute callback, made conditional: it runs only when the vCPU's `expected` entry is
//!    not this block's key (`Shared::canonical_key`);
//! 2. an inline store of the address of the block its last instruction leads to when nothing at
//!    run time decides it, or 0 (`pttrace_core::successor_prediction`);
//! 3. an inline add of 1 to the vCPU's `blocks` entry.
//!
//! A block whose key the block before it stored runs without any callback: it is that block's
//! predicted successor, the one translation that carries its address as key. The vCPU appends,
//! before each block it records, how many blocks ran unrecorded since its last record (a
//! marker entry in the ring, `Slot::take_pending`); the model's side walks that many
//! predicted successors from the last block it ran (`Shared::expand`). The trace is the same
//! as with a callback per block (`tests/stream-digests.sh` runs both, and a switch between
//! them).
//!
//! The prediction is `pttrace_core::successor_prediction`: the static one of the BTS
//! "predicted" flag and BR_MISP_RETIRED (a backward Jcc taken, a forward one not taken). A RET,
//! an indirect or far transfer, INT n and SYSCALL predict nothing (0): the block after them is
//! always recorded.
//!
//! A run starts with a callback at every block and switches after `SWITCH_AFTER`
//! (`switch_due`, `Shared::start_predicting`). `PTTRACE_PREDICT=2`: from the start; `=0`: never.
//! Not with `drain=realtime:` (its drain credit must meet every block as it runs). With
//! `truth=1` the ground truth still logs every instruction from its own callbacks.

use qemu_plugin::sys::{qemu_plugin_u64, qemu_plugin_op, qemu_plugin_cond};
use qemu_plugin::{TranslationBlock, VCPUIndex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// The vCPUs' `expected` and `blocks` entries, on 128 bytes of their own per vCPU (inline
/// operations store to them at every block; see the system-mode `SCOREBOARD_STRIDE`).
#[repr(C)]
#[allow(dead_code)] // (QEMU allocates it; the plugin uses its layout)
struct PerVcpu {
    expected: u64,
    blocks: u64,
    _pad: [u64; 14],
}

pub(super) struct Prediction {
    expected: qemu_plugin_u64,
    blocks: qemu_plugin_u64,
}

// SAFETY: the scoreboard is owned by QEMU for the plugin's lifetime and indexed per vCPU.
unsafe impl Send for Prediction {}
unsafe impl Sync for Prediction {}

static PREDICTION: OnceLock<Prediction> = OnceLock::new();
/// Blocks are instrumented for prediction (`get`): from the start with `PTTRACE_PREDICT=2`,
/// else once the run has lasted `SWITCH_AFTER` (`switch_due`).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// When the switch to prediction is due (monotonic ns; u64::MAX: never), and whether it was
/// asked for.
static SWITCH_AT: AtomicU64 = AtomicU64::new(u64::MAX);
static SWITCH_ASKED: AtomicBool = AtomicBool::new(false);

/// How long a run goes with a callback at every block before it switches to prediction. Its
/// inline operations make each translation dearer (one more conditional branch, a store and an
/// add per block: the corpus' 6-thread program, 33 ms without a plugin and nearly all
/// translation, took 1.75x plain with them from the start against 1.54x without), and pay off
/// only for blocks that run many times. `PTTRACE_PREDICT_AFTER_MS` sets it (tests).
const SWITCH_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// Marker entries in a vCPU's ring: `count << 1 | 1` (a `BlockInfo` pointer is even).
pub(super) const MARKER: usize = 1;

/// The marker entry for `count` blocks that ran unrecorded.
#[inline(always)]
pub(super) fn marker(count: u64) -> *const super::BlockInfo {
    (((count as usize) << 1) | MARKER) as *const super::BlockInfo
}

/// A key no prediction names (user-mode addresses are below 2^47): the block is always
/// recorded.
pub(super) const UNPREDICTABLE: u64 = 1 << 63;

/// Allow prediction (at install, before any translation): `PTTRACE_PREDICT=2` from the start,
/// else after `SWITCH_AFTER`.
pub(super) fn enable(from_start: bool) {
    // SAFETY: plain allocation of one zeroed `PerVcpu` per vCPU, kept by QEMU.
    let score = unsafe { qemu_plugin::sys::qemu_plugin_scoreboard_new(std::mem::size_of::<PerVcpu>()) };
    let _ = PREDICTION.set(Prediction {
        expected: qemu_plugin_u64 { score, offset: std::mem::offset_of!(PerVcpu, expected) },
        blocks: qemu_plugin_u64 { score, offset: std::mem::offset_of!(PerVcpu, blocks) },
    });
    if from_start {
        ACTIVE.store(true, Ordering::Relaxed);
    } else {
        let after = std::env::var("PTTRACE_PREDICT_AFTER_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(SWITCH_AFTER, std::time::Duration::from_millis);
        SWITCH_AT.store(crate::monotonic_ns().saturating_add(after.as_nanos() as u64), Ordering::Relaxed);
    }
}

/// The prediction's scoreboard, once blocks are instrumented for it.
#[inline(always)]
pub(super) fn get() -> Option<&'static Prediction> {
    if ACTIVE.load(Ordering::Relaxed) {
        PREDICTION.get()
    } else {
        None
    }
}

/// True once, when the switch to prediction is due (checked by a vCPU every few thousand
/// blocks: it then asks QEMU to flush the translations, `Shared::start_predicting`).
pub(super) fn switch_due() -> bool {
    crate::monotonic_ns() >= SWITCH_AT.load(Ordering::Relaxed) && !SWITCH_ASKED.swap(true, Ordering::Relaxed)
}

/// Blocks are instrumented for prediction from now on (every vCPU stopped: the translations
/// were just flushed).
pub(super) fn activate() {
    ACTIVE.store(true, Ordering::Relaxed);
}

impl Prediction {
    /// Blocks `vcpu` has started so far (each adds 1 after its callback).
    #[inline(always)]
    pub(super) fn blocks(&self, vcpu: VCPUIndex) -> u64 {
        qemu_plugin::qemu_plugin_u64_get(self.blocks, vcpu)
    }

    /// Where `vcpu`'s `blocks` entry is now (until the scoreboard moves: a flush).
    pub(super) fn blocks_at(&self, vcpu: VCPUIndex) -> *mut u64 {
        // SAFETY: the scoreboard is live and has an entry per vCPU QEMU initialised.
        let base = unsafe { qemu_plugin::sys::qemu_plugin_scoreboard_find(self.blocks.score, vcpu) };
        base.cast::<u8>().wrapping_add(self.blocks.offset).cast::<u64>()
    }

    /// The next block of `vcpu` calls back whatever it is (a new thread on a reused vCPU
    /// index; a fatal signal wants every thread to stop at its next block).
    pub(super) fn forget_expected(&self, vcpu: VCPUIndex) {
        qemu_plugin::qemu_plugin_u64_set(self.expected, vcpu, 0);
    }

    /// Instrument `tb`: `cb` with `udata` unless `key` is what the block before predicted,
    /// then store `predicted` and count the block.
    pub(super) fn register(
        &self,
        tb: &TranslationBlock,
        cb: extern "C" fn(VCPUIndex, *mut std::ffi::c_void),
        udata: *mut std::ffi::c_void,
        key: u64,
        predicted: u64,
    ) {
        let tb = crate::tb_ptr(tb);
        // SAFETY: `tb` is the translation being instrumented; `cb` is a plain function valid for
        // the plugin's lifetime and `udata` outlives the translation; the entries belong to a
        // live scoreboard.
        unsafe {
            qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_cond_cb(
                tb,
                Some(cb),
                qemu_plugin::CallbackFlags::QEMU_PLUGIN_CB_R_REGS,
                qemu_plugin_cond::QEMU_PLUGIN_COND_NE,
                self.expected,
                key,
                udata,
            );
            qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, qemu_plugin_op::QEMU_PLUGIN_INLINE_STORE_U64, self.expected, predicted);
            qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64, self.blocks, 1);
        }
    }
}
