//! Full-system mode (`qemu-system-x86_64`): the guest enumerates Intel PT through CPUID, programs
//! it with WRMSR, and finds the trace in its own memory.
//!
//! - CPUID leaves 0, 7 and 14H are answered from the capability profile: the CPUID instruction
//!   runs normally and its result registers are rewritten before the next instruction.
//! - RDMSR/WRMSR of the IA32_RTIT_* MSRs (and IA32_PERF_GLOBAL_STATUS bit 55) go to the core's
//!   MSR file. RDMSR results are written into EDX:EAX after the instruction (TCG returns 0 for
//!   MSRs it does not know). A WRMSR that faults on hardware is steered to IA32_APIC_BASE with
//!   reserved bits set, which makes QEMU raise #GP(0) at that WRMSR; the guest's ECX/EDX are
//!   restored when the exception is delivered, so the handler sees the registers unchanged.
//! - Interrupts and exceptions come from QEMU's discontinuity callback (QEMU 10.2), which the
//!   qemu-plugin crate does not bind (declared here).
//! - Packet bytes go through the output unit (ToPA or single range) into guest-physical memory
//!   from vCPU context; with `out=DIR` they are also copied to DIR/thread-N.pt for vCPU N-1
//!   (the layout `pttrace decode` reads).

use crate::guest::{self, LinearMem, PhysMem};
use crate::output::{FileKey, Output};
use crate::regs::Regs;
use crate::{fail, guarded};
use pttrace_core::block_ring::BlockRing;
use pttrace_core::model_placement::{ModelPlacement, Placement};
use pttrace_core::vcpu_cell::VcpuCell;
use pttrace_core::bts::pebs::{self, PebsFormat, PebsOutcome, PebsState};
use pttrace_core::bts::{BranchTraceStore, DsFormat};
use pttrace_core::guest_mem::GuestMemory;
use pttrace_core::cs_base;
use pttrace_core::cs_cache::{self, CsLoad};
use pttrace_core::cpuid::NativeLeaves;
use pttrace_core::msr_map::MsrMap;
use pttrace_core::insn_class::{may_change_mode, choose_mode, classify, consistent_modes, loads_branch_target, memory_operand, operand_linear_address, pseudo_descriptor_base_len, system_op, BranchKind, ClassifiedInsn, ModeSet, SystemOp};
use pttrace_core::options::SystemOptions;
use pttrace_core::arch_lbr::{ArchLbr, ArchLbrCaps};
use pttrace_core::lbr::{BranchRecorder, LbrStack};
use pttrace_core::pmu::{tally::RetirementTally, Pmu, PmuCaps, PmuProfile, Retired};
use pttrace_core::pt::msr::{RtitMsrs, WriteEffect};
use pttrace_core::pt::output::OutputUnit;
use pttrace_core::pt::output_bound;
use pttrace_core::pt::packet::ExecMode;
use pttrace_core::pt::rtit_ctl::RtitCtl;
use pttrace_core::pt::tracer::{Context, TraceConfig, Tracer};
use pttrace_core::rtit::tracer::{RtitOptions, RtitTracer};
use pttrace_core::system_cpu::clock::{self, BatchClock, CycleClock};
use pttrace_core::system_cpu::discontinuity::{self, Discontinuity};
use pttrace_core::system_cpu::output::OutputHandoff;
use pttrace_core::system_cpu::retire::{BtsUnit, CountingSink, Retire};
use pttrace_core::system_cpu::{self, rdmsr::Rdmsr, rdpmc::Rdpmc as RdpmcOutcome, wrmsr::Wrmsr, GuestPort, MsrInsn, Reg, SystemCpu};
use pttrace_core::system_flow::{mode_slot, successor_pc, CpuView, RecordedBlock, SysBlock, SystemFlow};
use qemu_plugin::install::Args;
use qemu_plugin::{CallbackFlags, PluginId, TranslationBlock, VCPUIndex};
use std::fmt::Write as _;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

const MAX_VCPUS: usize = 1024;
/// Blocks a vCPU's ring holds (issue 13). Beside the encoder thread the vCPU stops to run what
/// is left only when it is full (or at a point the model must see): the larger, the rarer
/// (b_pt_loop, encoder thread: 1024 -> 191-204 M guest cycles, 4096 -> 160-162 M, 16384 ->
/// 128-129 M, 65536 -> 129-130 M).
const RING_BLOCKS: usize = 16384;
/// Blocks a vCPU records before it runs them itself while the model is on the vCPU
/// (`Placement::OnVcpu`): records read back while still in the nearest caches.
const ON_VCPU_BLOCKS: u32 = 1024;

/// How the encoder thread shares the vCPUs' recorded blocks with them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EncoderMode {
    /// Per vCPU, by its share of CPU time (`ModelPlacement`).
    Adaptive,
    /// Every vCPU beside it (PTTRACE_ENCODER=2).
    Always,
}
/// Recorded blocks the encoder thread takes from a ring at a time (fewer: it leaves them).
const ENCODER_CHUNK: usize = 256;
/// The most instructions a translation block holds (QEMU's `TCG_MAX_INSNS`, include/tcg/tcg.h):
/// the most retirement events one recorded block can add to a counter (`Pmu::blocks_before_pmi`).
const MAX_BLOCK_INSNS: u64 = 512;

/// With MTC on, recorded blocks carry the host TSC sampled by the vCPU every this many blocks
/// (reading it costs ~14 ns here, a block ~2 ns): MTC packets follow the time blocks executed
/// at, to this resolution, not the time the encoder runs them.
const MTC_SAMPLE_BLOCKS: u32 = 16;
/// IA32_APIC_BASE: QEMU raises #GP(0) for a WRMSR with its reserved bits 63:52 set.
const MSR_IA32_APIC_BASE: u64 = 0x1B;

/// x2APIC DFR (80EH): QEMU's RDMSR raises #GP(0) for it in every APIC mode (outside x2APIC mode
/// all x2APIC MSRs fault; in x2APIC mode DFR does not exist) and has no side effect.
const MSR_X2APIC_DFR: u64 = 0x80E;
/// xAPIC registers (default base 0xFEE00000): LVT performance-counter entry and ICR low.
const APIC_LVTPC: u64 = 0xFEE0_0340;
const APIC_ICR_LOW: u64 = 0xFEE0_0300;

struct BlockInfo {
    pc: u64,

    /// The block contains a WRMSR (which may enable tracing and needs the block's actual address).
    has_wrmsr: bool,
    /// The block's COFI classified as 16-, 32- and 64-bit code; the vCPU's current mode picks one
    /// (the translation callback does not know the mode QEMU translated in).
    by_mode: [&'static SysBlock; 3],
    /// The modes whose decoding matches the instruction boundaries QEMU translated the block
    /// with (the mode QEMU translated in is one of them).
    modes: ModeSet,
    /// Per mode slot, what the block callback needs of the block run in that mode (the fourth
    /// repeats the 64-bit one, so that `slot & 3` indexes without a bounds check).
    steps: [RecordStep; 4],
    /// Without and with IA32_EFER.LMA: the one mode whose decoding matches QEMU's instruction
    /// boundaries (it proves the mode, `Shared::prove_mode`), if only one does.
    proves: [Option<ExecMode>; 2],
}



/// A block as it ran in one mode slot, laid out for the block callback (issue 13): what the next
/// block's address follows from, and whether it may be only recorded.
struct RecordStep {
    /// The block as classified in this mode.
    block: &'static SysBlock,
    /// Its last instruction's address (`SysBlock::last`): the successors apply only to a block
    /// that ran to it (`successor_pc`).
    last_ip: u64,
    /// `SysBlock::page_successors` (zeros when there are none).
    succ: [u64; 2],
    /// The page offsets of `succ` when the next block's address follows from them by its page
    /// offset alone and the state in which blocks are only recorded continues after this one
    /// (`!ends`); else `KEY_NO_SUCCESSOR` twice. The block callback compares them with the next
    /// block's `key`: one compare per candidate tells that the successor follows, which one it
    /// is, and that the next block may be recorded (`pick_successor`'s choice, in that order).
    succ_key: [u64; 2],
    /// The page offset of the block's start, or `KEY_NOT_RECORDABLE` with it when the block may
    /// not be only recorded in this mode (`!recordable`).
    key: u64,
    /// The block's end leaves the recorded state (`ends_recording`: it may change the mode,
    /// writes CR3 or is a far transfer): the next block runs the model.
    ends: bool,
    /// The block ends in a near indirect transfer whose load returns the next block's RIP
    /// (`SysBlock::target_loaded`, `on_target_load`), and the recorded state continues after it
    /// (`!ends`): the next block's address is the loaded value.
    loads_next: bool,
    /// An instruction of the block may change CS, CR0.PE or IA32_EFER.LMA (`may_change_mode`).
    changes_mode: bool,
    /// The block may be only recorded when it runs in this mode (no WRMSR, and its decoding in
    /// the mode matches QEMU's instruction boundaries).
    recordable: bool,
}

/// `RecordStep::key` bit of a block that may not be only recorded: no successor key matches it.
const KEY_NOT_RECORDABLE: u64 = 1 << 12;
/// `RecordStep::succ_key` of a block whose successor does not follow by its page offset: no
/// block's key matches it.
const KEY_NO_SUCCESSOR: u64 = 1 << 13;

impl RecordStep {
    fn new(pc: u64, block: &'static SysBlock, changes_mode: bool, recordable: bool) -> Self {
        let ends = ends_recording(block, changes_mode);
        let succ = block.page_successors();
        let follows = !ends && succ.is_some();
        RecordStep {
            block,
            last_ip: block.last.ip,
            succ: succ.unwrap_or([0, 0]),
            succ_key: match succ {
                Some([a, b]) if follows => [a & 0xFFF, b & 0xFFF],
                _ => [KEY_NO_SUCCESSOR; 2],
            },
            key: (pc & 0xFFF) | if recordable { 0 } else { KEY_NOT_RECORDABLE },
            loads_next: !ends
                && block.target_loaded
                && matches!(block.last.kind, BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return),
            ends,
            changes_mode,
            recordable,
        }
    }
}

impl BlockInfo {
    /// `Vcpu::after` once the block ran in `mode` at `delta` from its translation: its end in
    /// that mode, unless the mode is 16-bit or its decoding does not match the mode.
    fn after(&'static self, mode: ExecMode, delta: u64) -> Option<(&'static RecordStep, u64)> {
        (mode != ExecMode::Bit16 && self.modes.contains(mode)).then(|| (&self.steps[mode_slot(mode)], delta))
    }

    /// The block as classified in `mode`.
    fn in_mode(&self, mode: ExecMode) -> &'static SysBlock {
        self.by_mode[mode_slot(mode)]
    }
}

/// Work left for "right after the current instruction".
#[derive(Default)]
struct Pending {
    /// CPUID (leaf, subleaf) whose result registers must be rewritten.
    cpuid: Option<(u32, u32)>,
    /// RDMSR whose EDX:EAX must be replaced (`pttrace_core::system_cpu::rdmsr`).
    rdmsr: Option<system_cpu::rdmsr::Fixup>,
    /// Guest RCX/RDX to restore after a steered (faulting) WRMSR.
    gp_restore: Option<(u64, u64)>,
    /// RDPMC about to execute (address, length): QEMU's TCG raises #UD for it.
    rdpmc: Option<(u64, u64)>,
    /// An RDTSC/RDTSCP executed (with the plugin's clock when it started): its EDX:EAX
    /// calibrates the guest TSC offset.
    rdtsc: Option<u64>,
}

impl Pending {
    /// Something `apply_pending` handles is waiting.
    #[inline]
    fn any(&self) -> bool {
        self.cpuid.is_some() || self.rdmsr.is_some() || self.rdtsc.is_some()
    }
}

struct Vcpu {
    index: u32,
    tracer: Tracer,
    flow: SystemFlow<&'static SysBlock>,
    msrs: RtitMsrs,
    /// The counting PMU (CPUID.0AH, the counter MSRs, RDPMC).
    pmu: Pmu,
    /// The Skylake-class LBR stack (not with `profile=silvermont` or `profile=sapphirerapids`).
    lbr: LbrStack,
    /// Architectural LBRs (`profile=sapphirerapids`).
    arch_lbr: ArchLbr,
    /// The instruction that triggered the due PEBS record (EventingIP).
    pebs_eventing: Option<u64>,
    /// PEBS records written, dropped at the absolute maximum, and aimed at memory that is not
    /// RAM / not mapped (reported at exit).
    pebs_stats: [u64; 3],
    /// A PMI was raised before the current block ran, for an overflow certain to happen in it
    /// (so that it is taken right after the block): the overflow itself raises no second one.
    pmi_prearmed: bool,
    /// The guest clock when cycles were last counted (None: not counting cycles).
    cycle_clock: CycleClock,
    /// The core clock when the block callback was last allowed to record with the LBRs on
    /// (`with_vcpu`): where the clock of the recorded blocks' LBR records starts
    /// (`run_recorded_counting`).
    record_clock: u64,
    output: OutputUnit,
    /// Branch Trace Store (IA32_DEBUGCTL, IA32_DS_AREA), writing through QEMU.
    bts: BtsUnit<LinearMem>,
    /// Atom RTIT (`profile=silvermont`); its output region is written by `drain`.
    rtit: Option<RtitTracer>,
    /// The output unit accepted the current TraceEn=1 configuration.
    output_active: bool,
    regs: Regs,
    /// GDTR.base as last loaded by LGDT (for CS.L / CS.D).
    gdt_base: Option<u64>,
    /// The modes the current block's translation is consistent with.
    cur_modes: ModeSet,
    /// The mode an unambiguous block proved, with the (CS, CR0.PE, EFER.LMA) it ran with: valid
    /// until one of them changes (far transfer, interrupt, IRET, MOV CR0, ...).
    proven: Option<(ExecMode, (u64, u64, u64))>,
    /// IA32_EFER.LMA at the last load of CS seen (`pttrace_core::cs_cache`): code run with
    /// LMA = 1 under a CS loaded with LMA = 0 is compatibility-mode code.
    cs_load: CsLoad,
    /// Blocks may have run unseen (no block callback) since the model last ran one: the
    /// tracer's context and `cur_modes` may be stale (set when the callbacks go off and at the
    /// end of a block run while they are off).
    blind: bool,
    /// The CS base of the descriptor cache (`pttrace_core::cs_base`): established at the first
    /// block that records after CS may have been loaded, kept until the next load (a GDT entry
    /// rewritten in memory or MOV CR0 does not change it), with the selector it was established
    /// for. `cs_base_valid` is false until then, and while blocks run unseen (a load of another
    /// selector is noticed by its value then).
    cs_base: u64,
    cs_base_sel: u64,
    cs_base_valid: bool,
    /// IDTR.base as last loaded by LIDT (to re-deliver a faulting RDPMC's #UD as #GP).
    idt_base: Option<u64>,
    pending: Pending,
    /// An exception or INT n was announced and not yet delivered.
    exception_pending: bool,
    /// Actual address of the current block minus its address at translation.
    pc_delta: u64,
    /// The block that ran last, as the flow classified it, its `pc_delta` and whether it may
    /// have changed the mode registers; None when its address was not exact or an event came
    /// after it. The next block's address follows from it after direct transfers
    /// (`successor_pc`), so RIP is read only after indirect and far transfers and events.
    after: Option<(&'static RecordStep, u64)>,
    /// CS, CR0 and IA32_EFER as last read: they change only at far transfers, events and the
    /// instructions `may_change_mode` finds, after which they are read again.
    mode_regs: Option<(u64, u64, u64)>,
    /// CPUID.0:EAX as QEMU answers it (before raising it to 14H/15H).
    native_leaves: NativeLeaves,
    /// Blocks since the guest TSC was last sampled (see `on_block`).
    blocks_since_tsc: u32,
    /// Drain credit from the real-time drainer thread (`drain=realtime:`).
    credit: Option<pttrace_core::pt::internal_buffer::DrainCredit>,
    /// The output hand-off (`pttrace_core::system_cpu::output`): bytes held back, lost after
    /// STOP (reported at exit), the deterministic drain credit.
    handoff: OutputHandoff,
    /// This vCPU's `last_started` entry, when scoreboards never move (`fixed_scoreboards`):
    /// the block callback then reads and resets it without looking the entry up.
    last_started_slot: Option<Slot>,
    /// The value last stored in this vCPU's `pebs_step` slot.
    pebs_steps: bool,
    /// The value last stored in this vCPU's `need_block_cb` slot.
    block_cb_flag: Option<bool>,
    truth: Option<Vec<u8>>,
}

/// One block as the block callback recorded it (issue 13): the translation, its actual address
/// and the vCPU's `last_started` when it began. The model runs it later (`Shared::run_block`).
#[derive(Clone, Copy)]
struct Recorded {
    info: &'static BlockInfo,
    pc: u64,
    last_started: u64,
    /// The host TSC as last sampled on the vCPU (every `MTC_SAMPLE_BLOCKS` blocks while MTC
    /// packets need the time of each block).
    tsc: u64,
}

impl RecordedBlock for Recorded {
    type Block = &'static SysBlock;
    #[inline(always)]
    fn pc(&self) -> u64 {
        self.pc
    }
    #[inline(always)]
    fn translated(&self) -> u64 {
        self.info.pc
    }
    #[inline(always)]
    fn last_started(&self) -> u64 {
        self.last_started
    }
    #[inline(always)]
    fn tsc(&self) -> u64 {
        self.tsc
    }
    #[inline(always)]
    fn block(&self, slot: usize) -> &&'static SysBlock {
        // (`steps[slot]` holds `by_mode[slot]`; four of them: no bounds check.)
        &self.info.steps[slot & 3].block
    }
}

/// What the block callback keeps for a vCPU outside the model's lock, used only on the vCPU's own
/// thread (issue 13): enough to find the next block's actual address after a direct transfer (or
/// read RIP after a near indirect one) and to record the block in the vCPU's ring. The fields
/// the common case reads come first (`repr(C)`: on one cache line).
#[repr(C)]
struct Front {
    last_started: Slot,
    /// The block that ran last in the mode it ran in (`no_step`: the next block's address does
    /// not follow from it; the model runs it) ...
    prev: &'static RecordStep,
    /// ... and its `pc_delta`.
    delta: u64,
    /// Where `BlockInfo::steps` holds the step of the tracked execution mode's slot
    /// (`mode_slot`; the model's context, unchanged while blocks are only recorded), in bytes
    /// from the start of a `BlockInfo` (`Front::step`).
    step_off: usize,
    /// The ring's length up to which the common case may record without looking further
    /// (`refill`): no more blocks than the budget, the ring's room and, with MTC, the blocks
    /// before the next sample of the host TSC. At or below the length: every block takes
    /// `Shared::record_block_general`.
    limit: usize,
    ring: &'static BlockRing<Recorded>,
    tsc: u64,
    /// The target the last near RET or indirect JMP/CALL through memory loaded
    /// (`on_target_load`), taken by the block after it: its new RIP without a register read.
    loaded_rip: Option<u64>,
    /// The ring's length when last refilled (`sync` counts the blocks recorded since).
    granted: usize,
    /// Blocks that may be recorded only before the model must run at a block boundary again
    /// (`Shared::record_budget`); 0: the next block runs the model. Up to date after `sync`.
    budget: u32,
    /// With MTC, blocks until the host TSC is sampled again (u32::MAX without). Up to date
    /// after `sync`.
    tsc_countdown: u32,
    /// IA32_RTIT_CTL.MTCEn: the host TSC is sampled as blocks execute (`tsc`, `tsc_countdown`).
    mtc: bool,
    /// The step `prev` holds while nothing follows (its last instruction matches no
    /// `last_started`, or no successor key and no loaded target).
    no_step: &'static RecordStep,
    /// RIP after near indirect transfers.
    regs: Regs,
    /// Where the vCPU's recorded blocks run through the model (`Shared::place_model`).
    placement: ModelPlacement,
}

impl Front {
    /// The block that ran last and its `pc_delta`, if the next block's address may follow.
    fn after(&self) -> Option<(&'static RecordStep, u64)> {
        (!std::ptr::eq(self.prev, self.no_step)).then_some((self.prev, self.delta))
    }

    fn set_after(&mut self, after: Option<(&'static RecordStep, u64)>) {
        (self.prev, self.delta) = after.unwrap_or((self.no_step, 0));
    }

    /// Track execution mode slot `slot` (`mode_slot`).
    fn set_slot(&mut self, slot: usize) {
        self.step_off = std::mem::offset_of!(BlockInfo, steps) + (slot & 3) * std::mem::size_of::<RecordStep>();
    }

    /// `info`'s step in the tracked mode slot.
    #[inline(always)]
    fn step(&self, info: &'static BlockInfo) -> &'static RecordStep {
        // SAFETY: `step_off` is the offset of one of `info.steps` (`set_slot`).
        unsafe { &*(info as *const BlockInfo).cast::<u8>().add(self.step_off).cast::<RecordStep>() }
    }

    /// `budget` and `tsc_countdown` less the blocks the common case recorded since `refill`.
    fn sync(&mut self) {
        let len = self.ring.len();
        let used = (len - self.granted) as u32;
        self.budget -= used;
        self.tsc_countdown -= used;
        self.granted = len;
    }

    /// `left` from `budget`, the ring's room and `tsc_countdown` (the block at which it reaches
    /// 0 samples the host TSC: `record_block_general`).
    fn refill(&mut self) {
        let left = self.budget.min(self.ring.room() as u32).min(self.tsc_countdown.saturating_sub(1));
        self.granted = self.ring.len();
        self.limit = self.granted + left as usize;
    }
}

struct FrontCell(UnsafeCell<Option<Front>>);

// SAFETY: a vCPU's `Front` is used only by callbacks on that vCPU's own thread (`Shared::front`).
unsafe impl Sync for FrontCell {}

/// The block's end leaves the state in which blocks are only recorded (`Shared::record_budget`):
/// it may change the mode (`changes_mode`), writes CR3 or is a far transfer.
fn ends_recording(block: &SysBlock, changes_mode: bool) -> bool {
    changes_mode || block.writes_cr3 || matches!(block.last.kind, BranchKind::Far(_))
}

/// Bytes per vCPU in a scoreboard: a u64 alone on an adjacent-line pair.
const SCOREBOARD_STRIDE: usize = 128;

/// One u64 per vCPU in a QEMU scoreboard: inline operations read and write it without a
/// callback, the plugin reads and writes it from the vCPU's own callbacks.
struct PerVcpuU64(qemu_plugin::sys::qemu_plugin_u64);

// SAFETY: the scoreboard is owned by QEMU for the plugin's lifetime and indexed per vCPU.
unsafe impl Send for PerVcpuU64 {}
unsafe impl Sync for PerVcpuU64 {}

/// A pointer to one vCPU's entry of a scoreboard (valid while the scoreboard does not move).
#[derive(Clone, Copy)]
struct Slot(*mut u64);

// SAFETY: only the owning vCPU's callbacks use it (the per-vCPU state is behind a mutex).
unsafe impl Send for Slot {}

impl Slot {
    /// The value, replaced by `reset`.
    #[inline]
    fn take(&self, reset: u64) -> u64 {
        // SAFETY: points into a live scoreboard (see `Shared::fixed_scoreboards`); only this
        // vCPU's thread (its translated code and its callbacks) accesses the entry.
        unsafe { std::ptr::replace(self.0, reset) }
    }
}

impl PerVcpuU64 {
    /// Where `vcpu`'s entry is now.
    fn slot(&self, vcpu: u32) -> Slot {
        // SAFETY: the scoreboard is live and has an entry per vCPU QEMU initialised.
        let base = unsafe { qemu_plugin::sys::qemu_plugin_scoreboard_find(self.0.score, vcpu) };
        Slot(base.cast::<u8>().wrapping_add(self.0.offset).cast::<u64>())
    }

    /// A zeroed slot per vCPU (never freed: it lives as long as QEMU). Each vCPU's entry on
    /// cache lines of its own (SCOREBOARD_STRIDE): inline operations store to it at every
    /// block, and entries of adjacent vCPUs on one line would move that line between the host
    /// CPUs of two running vCPUs at every block (stores that must take the line back hold up
    /// the vCPU's later stores: `block_ring::prefetch_for_write`).
    fn new() -> Self {
        // SAFETY: plain allocation of one SCOREBOARD_STRIDE-byte entry per vCPU.
        let score = unsafe { qemu_plugin::sys::qemu_plugin_scoreboard_new(SCOREBOARD_STRIDE) };
        PerVcpuU64(qemu_plugin::sys::qemu_plugin_u64 { score, offset: 0 })
    }

    fn get(&self, vcpu: u32) -> u64 {
        qemu_plugin::qemu_plugin_u64_get(self.0, vcpu)
    }

    fn set(&self, vcpu: u32, v: u64) {
        qemu_plugin::qemu_plugin_u64_set(self.0, vcpu, v)
    }

    /// Read the vCPU's slot and reset it to `reset`.
    fn take(&self, vcpu: u32, reset: u64) -> u64 {
        let v = self.get(vcpu);
        self.set(vcpu, reset);
        v
    }
}

pub struct Shared {
    opts: SystemOptions,
    /// Non-zero while anything needs the block callback (PT TraceEn, BTS, RTIT TriggerEn, ground
    /// truth, a pending result fix-up). Blocks run without any callback while it is 0, so a guest
    /// that does not trace pays only for the inline test (issue 8: configured but disabled).
    need_block_cb: PerVcpuU64,
    /// Non-zero while the current block's instructions each call `on_pebs_step` (a PEBS record
    /// may fall inside it): per-instruction conditional callbacks test it inline.
    pebs_step: PerVcpuU64,
    /// Count of instructions of the blocks started, added inline.
    insns: PerVcpuU64,
    /// Background thread granting drain bandwidth from the wall clock (`drain=realtime:`).
    drainer: Option<pttrace_core::pt::internal_buffer::RealTimeDrainer>,
    /// `-icount shift=N`: QEMU's TSC is virtual time, 2^N ns per instruction; the plugin's clock
    /// then counts instructions too, so timing packets are deterministic.
    icount_shift: Option<u32>,
    /// Host TSC minus guest TSC, learned from the guest's RDTSC results.
    tsc_offset: AtomicU64,
    /// `tsc_offset` has been learned from a guest RDTSC (see `translate`).
    tsc_offset_known: AtomicBool,
    /// Address of the last instruction that started, stored inline when a block's last
    /// instruction starts: tells whether QEMU left the block before its end.
    last_started: PerVcpuU64,
    /// OR of the IA32_RTIT_CTL values of every enabling WRMSR of the run (meta.txt records the
    /// settings a decoder must know, e.g. DisTNT).
    ctl_used: AtomicU64,
    /// Scoreboards never move (at most 16 vCPUs): a vCPU may keep pointers to its entries.
    fixed_scoreboards: bool,
    out: Option<Output>,
    vcpus: Box<[VcpuCell<Option<Vcpu>>]>,
    /// Per vCPU (with `fixed_scoreboards`): the block callback's state outside the lock, and the
    /// ring of recorded blocks (issue 13).
    fronts: Box<[FrontCell]>,
    rings: Box<[OnceLock<&'static BlockRing<Recorded>>]>,
    /// vCPUs whose ring exists (the encoder thread scans that many).
    n_rings: AtomicUsize,
    /// Per vCPU with a ring: the encoder thread runs its recorded blocks (`Placement::Beside`,
    /// decided on the vCPU's thread in `with_vcpu`).
    beside: Box<[AtomicBool]>,
    /// The encoder thread runs (PTTRACE_ENCODER unset, 1 or 2), and PTTRACE_ENCODER=2 keeps
    /// every vCPU beside it whatever the share of CPU time (for measurements).
    encoder: OnceLock<EncoderMode>,
    /// Recording is possible at all in this configuration (`record_budget`).
    may_record: bool,
    code: crate::output::CodeImageV1,
}

pub static SHARED: OnceLock<Shared> = OnceLock::new();

/// Per vCPU, its `Front` (set once by `vcpu_init`; null until then).
static FRONTS: [std::sync::atomic::AtomicPtr<Front>; MAX_VCPUS] = [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; MAX_VCPUS];

/// The host's time stamp counter. QEMU's TCG answers the guest's RDTSC from the host TSC minus
/// an offset fixed when the VM starts (cpu_get_ticks) plus IA32_TSC adjustments; the plugin
/// learns that offset from the guest's own RDTSC results, so TSC, TMA, MTC and CYC packets use
/// the clock the guest reads and perf can correlate them with its sideband. Hosts without a TSC
/// fall back to the retired-instruction count.
fn host_tsc() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// CpuView over the live registers of the current vCPU.
struct LiveCpu<'a> {
    regs: &'a Regs,
    gdt_base: Option<u64>,
    modes: ModeSet,
    proven: Option<(ExecMode, (u64, u64, u64))>,
    /// The mode before the transfer or event being reported (see `current_context`).
    cached: ExecMode,
    cs_load: CsLoad,
}

impl CpuView for LiveCpu<'_> {
    fn context(&mut self) -> Context {
        current_context_after_load(self.regs, self.gdt_base, self.modes, self.proven, self.cached, self.cs_load)
    }
}

/// CPL, CR3 and the execution mode (SDM §33.4.2.8 MODE.Exec: CS.L & IA32_EFER.LMA, CS.D) from the
/// registers and the CS descriptor in the GDT, checked against the modes the current block's
/// translation is consistent with (`modes`) and a mode proven since CS last changed (`proven`):
/// the remembered GDT may not be the one CS was loaded from (issue 12).
///
/// In real mode `cached` (the mode the model had before, i.e. the CS.D of the descriptor cache:
/// real-mode loads of CS change its selector and base only, and clearing CR0.PE keeps it) stands
/// for the descriptor: 32-bit code with CR0.PE = 0 is what QEMU translates then (issue 12).
fn current_context(
    regs: &Regs,
    gdt_base: Option<u64>,
    modes: ModeSet,
    proven: Option<(ExecMode, (u64, u64, u64))>,
    cached: ExecMode,
) -> Context {
    current_context_after_load(regs, gdt_base, modes, proven, cached, CsLoad::default())
}

/// `current_context`, knowing also IA32_EFER.LMA at the last load of CS (`cs_load`: code run
/// with LMA = 1 under a CS loaded with LMA = 0 is not 64-bit, `pttrace_core::cs_cache`).
fn current_context_after_load(
    regs: &Regs,
    gdt_base: Option<u64>,
    modes: ModeSet,
    proven: Option<(ExecMode, (u64, u64, u64))>,
    cached: ExecMode,
    cs_load: CsLoad,
) -> Context {
    let cs = regs.get("cs").unwrap_or(0);
    let cr0 = regs.get("cr0").unwrap_or(0);
    let cr3 = regs.get("cr3").unwrap_or(0);
    let efer = regs.get("efer").unwrap_or(0);
    let lma = efer & (1 << 10) != 0;
    let protected = cr0 & 1 != 0;
    let cpl = if protected { (cs & 3) as u8 } else { 0 };
    // None: no GDT seen, an LDT selector, or the descriptor is not in RAM (e.g. QEMU's
    // multiboot option ROM GDT): choose_mode falls back to the flat segments.
    let descriptor = if !protected {
        Some(cached)
    } else {
        gdt_base
            .filter(|_| cs & 4 == 0)
            .and_then(|b| guest::read_u64(b + (cs & !7)))
            .map(|desc| ExecMode::from_cs(lma, desc & (1 << 53) != 0, desc & (1 << 54) != 0))
    };
    let proven = proven.filter(|(_, key)| *key == mode_key(regs)).map(|(m, _)| m);
    // A mode proven since CS was last loaded is better knowledge than the LMA it was loaded with.
    let modes = if proven.is_some() { modes } else { cs_load.allowed(modes, lma) };
    let mode = choose_mode(descriptor, modes, lma, protected, proven);
    Context { cpl, cr3, mode }
}

/// What a proven mode depends on: CS and CR0.PE. Setting EFER.LMA (MOV CR0 enabling paging)
/// leaves the processor in compatibility mode with the same CS until a far transfer loads a
/// 64-bit CS (SDM Vol. 3A §10.8.5), so LMA does not invalidate it (choose_mode still allows
/// 64-bit only with LMA = 1).
fn mode_key(regs: &Regs) -> (u64, u64, u64) {
    (regs.get("cs").unwrap_or(0), regs.get("cr0").unwrap_or(0) & 1, 0)
}

/// `mode_key` and IA32_EFER.LMA from the mode registers last read (`Vcpu::mode_regs`: CS, CR0,
/// IA32_EFER).
fn mode_key_and_lma(mode_regs: Option<(u64, u64, u64)>) -> ((u64, u64, u64), bool) {
    let (cs, cr0, efer) = mode_regs.unwrap_or_default();
    ((cs, cr0 & 1, 0), efer & (1 << 10) != 0)
}

impl Shared {
    /// Run `f` on the vCPU's model, from a callback on the vCPU's own thread: the blocks only
    /// recorded so far run through the model first, and afterwards the block callback learns
    /// whether (and for how many blocks) it may record only.
    fn with_vcpu(&self, vcpu: VCPUIndex, f: impl FnOnce(&Shared, &mut Vcpu)) {
        let Some(slot) = self.vcpus.get(vcpu as usize) else { return };
        // SAFETY: on the vCPU's own thread (every caller is one of its callbacks); the reference
        // is not used after this function.
        let mut front = unsafe { front_of(vcpu) };
        let mut guard = match (slot.try_lock(), front.as_mut()) {
            (Some(g), _) => g,
            (None, Some(f)) => {
                // The encoder thread holds the model: the vCPU waits for it (not lost time for
                // the placement, see `ModelPlacement::waited`).
                let start = crate::monotonic_ns();
                let g = slot.lock();
                f.placement.waited(crate::monotonic_ns() - start);
                g
            }
            (None, None) => slot.lock(),
        };
        if let Some(v) = guard.as_mut() {
            if let Some(ring) = front.as_ref().map(|f| f.ring) {
                self.run_recorded(v, ring);
            }
            f(self, v);
            if let Some(front) = front {
                front.budget = self.record_budget(v, front.ring);
                // Blocks that may not run beside the vCPU (`may_run_beside`) take short batches
                // on the vCPU, as there.
                if !self.may_run_beside(v) || !self.place_model(vcpu, front) {
                    front.budget = front.budget.min(ON_VCPU_BLOCKS);
                }
                if front.budget != 0 && self.lbr_recording(v) {
                    v.record_clock = self.core_clock(v);
                }
                front.set_after(v.after.filter(|&(step, _)| !step.ends));
                front.set_slot(mode_slot(v.tracer.context().mode));
                front.mtc = v.msrs.ctl.mtc_en();
                if front.mtc {
                    front.tsc = host_tsc().unwrap_or(0);
                    front.tsc_countdown = MTC_SAMPLE_BLOCKS;
                } else {
                    front.tsc_countdown = u32::MAX;
                }
                front.refill();
            }
        }
    }

    /// Whether the encoder thread may run `v`'s recorded blocks. Not while the LBRs record:
    /// their LBR_INFO cycle counts take the clock as the model runs each block, which on the
    /// encoder thread, long after and in a burst, gave records of 0 cycles (t_lbr_batch). (With
    /// Intel PT on, LBR recording records no block at all: `record_room`.) Counting adds each
    /// block's retirement events whenever it runs (`run_recorded_counting`).
    fn may_run_beside(&self, v: &Vcpu) -> bool {
        !self.lbr_recording(v)
    }

    /// A checkpoint of the vCPU's model placement (on its own thread, whenever it takes its
    /// model): true while the encoder thread runs its recorded blocks.
    fn place_model(&self, vcpu: VCPUIndex, front: &mut Front) -> bool {
        let Some(beside) = self.beside.get(vcpu as usize) else { return false };
        match self.encoder.get() {
            None => false,
            Some(EncoderMode::Always) => true,
            Some(EncoderMode::Adaptive) => {
                let now = crate::monotonic_ns();
                let cpu = if front.placement.wants_cpu_time(now) { crate::thread_cpu_ns() } else { None };
                if let Some(to) = front.placement.at(now, cpu) {
                    beside.store(to == Placement::Beside, Ordering::Relaxed);
                }
                front.placement.placement() == Placement::Beside
            }
        }
    }

    /// Run the blocks recorded on this vCPU's thread through its model (on that thread: output
    /// may be stored as if each block had run the model when it executed).
    fn run_recorded(&self, v: &mut Vcpu, ring: &BlockRing<Recorded>) {
        // SAFETY: on the ring's producer thread, holding the vCPU's lock.
        unsafe { ring.take_own(|recs| { self.run_recorded_all(v, recs, true); }) };
    }

    /// Run `recs` through the model, oldest first (`may_store` as for `run_block`).
    fn run_recorded_all(&self, v: &mut Vcpu, recs: &[Recorded], may_store: bool) -> usize {
        if !v.tracer.trace_en() && (v.pmu.active() || self.lbr_recording(v)) && !recs.is_empty() {
            self.run_recorded_counting(v, recs);
            return recs.len();
        }
        // The output of the blocks run here is handed on once, after the last of them, as if
        // each had ended with `block_output` (the hold counts blocks): they were recorded
        // within the output unit's quiet room (`record_budget`), so storing their bytes later
        // changes nothing but when they arrive.
        let mut unhanded = 0u32;
        let mut i = 0;
        while i < recs.len() {
            let n = self.run_recorded_steady(v, &recs[i..]);
            i += n;
            unhanded += n as u32;
            if let Some(&r) = recs.get(i) {
                if v.tracer.trace_en() && v.output_active {
                    self.run_recorded_block(v, r);
                    unhanded += 1;
                } else {
                    self.output_after(v, unhanded, may_store);
                    unhanded = 0;
                    self.run_block(v, r.info, r.pc, r.last_started, may_store);
                }
                i += 1;
            }
        }
        self.output_after(v, unhanded, may_store);
        recs.len()
    }

    /// `block_output` for `blocks` blocks run without it (nothing for none).
    fn output_after(&self, v: &mut Vcpu, blocks: u32, may_store: bool) {
        if let Some(more) = blocks.checked_sub(1) {
            v.handoff.held_for(more);
            self.block_output(v, may_store);
        }
    }

    /// The longest prefix of `recs` that `SystemFlow::steady_records` can take (fixed
    /// successors, the tracer in its steady state: no timing packets beyond the MTCs of a moving
    /// clock, no filter ranges), run as `run_recorded_block` would run each of them; returns how
    /// many ran (issue 13).
    fn run_recorded_steady(&self, v: &mut Vcpu, recs: &[Recorded]) -> usize {
        // (Not with RTIT, whose clock `update_tsc` sets too: it never traces with Intel PT.)
        if !(v.tracer.trace_en() && v.output_active) || recs.is_empty() || v.rtit.is_some() {
            return 0;
        }
        // The time of each block as `run_recorded_block` gives it to the tracer: with MTC the
        // vCPU's sample (each record's `tsc` minus the offset). Otherwise the clock is read at
        // every 64th block (`blocks_since_tsc`; for the TSC of PSB+, the only packet of such a
        // run that carries the time): here where it may be used (before a PSB+ or a TIP), if
        // one of the blocks started by then was such a block, and at the end of the run.
        let mtc = v.msrs.ctl.mtc_en();
        let offset = self.tsc_offset.load(Ordering::Relaxed);
        let since = v.blocks_since_tsc;
        let mut read = 0;
        let mut sample = move |t: &mut Tracer, ran: usize| {
            let due = (since as usize + ran) / 64;
            if due > read {
                read = due;
                // (`update_tsc`: the host TSC, as `raw_clock` reads it on this path.)
                t.set_tsc(host_tsc().unwrap_or(0).wrapping_sub(offset));
            }
        };
        let mode = v.tracer.context().mode;
        let slot = mode_slot(mode);
        let n = if mtc {
            v.flow.steady_records(&mut v.tracer, recs, slot, Some(offset), |_, _| {})
        } else {
            let n = v.flow.steady_records(&mut v.tracer, recs, slot, None, &mut sample);
            sample(&mut v.tracer, n);
            v.blocks_since_tsc = ((since as usize + n) % 64) as u32;
            n
        };
        let Some(last) = n.checked_sub(1).map(|k| recs[k]) else { return 0 };
        // A block whose decoding matches only one mode proves it (`prove_mode`); the last such
        // block of the run is the one that counts (CS, CR0 and EFER do not change in it).
        let (key, lma) = mode_key_and_lma(v.mode_regs);
        if let Some(r) = recs[..n].iter().rev().find(|r| r.info.proves[usize::from(lma)].is_some()) {
            Self::prove_mode(&mut v.proven, r.info, key, lma);
        }
        v.pc_delta = last.pc.wrapping_sub(last.info.pc);
        v.cur_modes = last.info.modes;
        v.after = last.info.after(mode, v.pc_delta);
        n
    }

    /// `run_block` for a recorded block while the state `record_budget` allowed recording in
    /// still holds (TraceEn = 1 and the output unit running; the caller checks): Intel PT
    /// alone, so the flow reports to the tracer directly, and none of the PMU, LBR, BTS, RTIT,
    /// PEBS or ground-truth work applies. A recorded block followed a near transfer in the same
    /// mode, so no code segment load can have happened before it. Its output is left for the
    /// caller to hand on (`output_after`).
    #[inline]
    fn run_recorded_block(&self, v: &mut Vcpu, r: Recorded) {
        let info = r.info;
        if v.msrs.ctl.mtc_en() {
            // The time the vCPU sampled as the block executed (`Front::tsc`).
            v.tracer.set_tsc(r.tsc.wrapping_sub(self.tsc_offset.load(Ordering::Relaxed)));
        } else {
            v.blocks_since_tsc += 1;
            if v.blocks_since_tsc >= 64 {
                v.blocks_since_tsc = 0;
                self.update_tsc(v);
            }
        }
        v.pc_delta = r.pc.wrapping_sub(info.pc);
        v.cur_modes = info.modes;
        let (key, lma) = mode_key_and_lma(v.mode_regs);
        Self::prove_mode(&mut v.proven, info, key, lma);
        let mut cpu = LiveCpu { regs: &v.regs, gdt_base: v.gdt_base, modes: v.cur_modes, proven: v.proven, cached: v.tracer.context().mode, cs_load: v.cs_load };
        v.flow.block(&mut v.tracer, r.pc, &info.by_mode, v.pc_delta, r.last_started, &mut cpu);
        v.after = info.after(v.tracer.context().mode, v.pc_delta);
    }

    /// `run_block` for blocks recorded while only the counters see blocks (`record_budget`): the
    /// flow reports each block's retirements to the PMU, and none of the tracing, LBR, BTS,
    /// PEBS or ground-truth work applies; no counter with INT can overflow among them (the
    /// budget), so no PMI is raised or pre-armed. The clock's cycles are counted once, at the
    /// end: the blocks ran at one CPL (no far transfer or event among them), so the total is the
    /// same as counted block by block.
    fn run_recorded_counting(&self, v: &mut Vcpu, recs: &[Recorded]) {
        let (key, lma) = mode_key_and_lma(v.mode_regs);
        let cpl = v.tracer.context().cpl;
        let lbr_on = self.lbr_recording(v);
        // The LBR records' clock (CYC_CNT): the run model reads the clock once per block, at
        // the block's start. Recorded blocks were not timed one by one; the clock is taken to
        // advance in proportion to the instructions retired between the start of the block
        // before the run (`Vcpu::record_clock`, read when recording began) and now.
        let slot = mode_slot(v.tracer.context().mode);
        let clocks = lbr_on.then(|| {
            let now = self.core_clock(v);
            let start = v.record_clock.min(now);
            let before = v.after.map_or(0, |(step, _)| step.block.insns.len() as u64);
            let total = before + recs.iter().map(|r| r.info.by_mode[slot].insns.len() as u64).sum::<u64>();
            BatchClock::new(start, now - start, before, total)
        });
        let mut sink = CountingSink {
            inner: Retire {
                pt: &mut v.tracer,
                rtit: None,
                bts: &mut v.bts,
                bts_pmi: false,
                pmu: &mut v.pmu,
                lbr: None,
                lbr_clock: 0,
                lbr_freeze_after: false,
                pebs_eventing: &mut v.pebs_eventing,
            },
            tally: RetirementTally::default(),
            cpl,
            branch: None,
            lbr: lbr_on.then(|| Self::lbr_unit(self.opts.arch_lbr, &mut v.lbr, &mut v.arch_lbr)),
            lbr_clock: 0,
        };
        let mut delta = v.pc_delta;
        let mut retired = clocks.map_or(0, |c| c.before);
        for r in recs {
            let info = r.info;
            delta = r.pc.wrapping_sub(info.pc);
            Self::prove_mode(&mut v.proven, info, key, lma);
            if let Some(c) = clocks {
                sink.lbr_clock = c.at(retired);
                retired += info.by_mode[slot].insns.len() as u64;
            }
            if !v.flow.steady_block(&mut sink, r.pc, &info.by_mode, delta, r.last_started) {
                let mut cpu = LiveCpu { regs: &v.regs, gdt_base: v.gdt_base, modes: info.modes, proven: v.proven, cached: sink.inner.pt.context().mode, cs_load: v.cs_load };
                v.flow.block(&mut sink, r.pc, &info.by_mode, delta, r.last_started, &mut cpu);
            }
        }
        sink.commit();
        v.pc_delta = delta;
        if let Some(last) = recs.last() {
            v.cur_modes = last.info.modes;
            v.after = last.info.after(v.tracer.context().mode, v.pc_delta);
        }
        // (None: the budget keeps interrupting counters from overflowing; taken all the same.)
        let pmi = v.pmu.take_pmi();
        Self::counter_pmi(v, pmi);
        self.count_cycles(v);
    }

    /// The output at the end of a block run by the model: handed to guest memory as `drain`
    /// decides, or (`may_store` false: not in vCPU context) only a request that the vCPU store it.
    #[inline]
    fn block_output(&self, v: &mut Vcpu, may_store: bool) {
        if may_store {
            self.drain(v);
        } else if !Self::hold_pt_output(v) {
            if let Some(ring) = self.rings.get(v.index as usize).and_then(|r| r.get()) {
                ring.want_flush();
            }
        }
    }

    /// A block whose decoding matches only one mode proves it while CS, CR0.PE and EFER.LMA
    /// (`key`, `lma`) stay as they are (the descriptor cache, issue 12).
    #[inline]
    fn prove_mode(proven: &mut Option<(ExecMode, (u64, u64, u64))>, info: &BlockInfo, key: (u64, u64, u64), lma: bool) {
        if let Some(m) = info.proves[usize::from(lma)].filter(|_| key.1 != 0) {
            *proven = Some((m, key));
        }
    }

    /// Something records this block, so its actual address matters (with TraceEn = 0 and nothing
    /// else on no packet depends on it; a WRMSR may enable tracing inside the block).
    #[inline]
    fn needs_actual_pc(v: &Vcpu, info: &BlockInfo, rtit_on: bool, lbr_on: bool) -> bool {
        v.tracer.trace_en() || v.bts.active() || rtit_on || v.truth.is_some() || info.has_wrmsr || v.pmu.active() || lbr_on
    }

    /// For how many blocks the block callback may only record (0: none), decided when the model
    /// has run every recorded block. Only Intel PT alone, in a steady state the recording can
    /// follow: paging on, the mode known and unchanged (blocks that may change it end a run),
    /// nothing pending, no CYC packets (cycle counts need the clock at each block; MTC takes the
    /// vCPU's samples, `MTC_SAMPLE_BLOCKS`), no
    /// instruction-counted clock or drain model, no BTS, RTIT, counters, LBRs or ground truth.
    /// And never across an output event: each recorded block adds at most
    /// `output_bound::block_bytes` (and a PSB+ per PSB period, `output_bound::blocks_within`), so
    /// the bytes held back stay within the output unit's quiet room (no ToPA PMI, STOP or
    /// entry load moves to another block than the one it happens at when every block runs the
    /// model; stores made only to bound how long bytes are held back may come later, see
    /// `OUTPUT_HOLD_BYTES`).
    ///
    /// Or counting alone (issue 13/14: `perf stat`): Intel PT off, counters enabled without PEBS,
    /// for as many blocks as cannot overflow a counter with INT (`Pmu::blocks_before_pmi`), so
    /// every PMI is still raised at the block that overflows its counter; the recorded blocks'
    /// retirements are counted when they run through the model (`run_recorded_counting`),
    /// before anything can read a counter (RDMSR, RDPMC and WRMSR run the model first).
    fn record_budget(&self, v: &Vcpu, ring: &BlockRing<Recorded>) -> u32 {
        self.record_room(v).min(ring.room() as u64) as u32
    }

    /// `record_budget` before the ring's room: how many blocks may be recorded from the model's
    /// present state (0: none).
    fn record_room(&self, v: &Vcpu) -> u64 {
        if !self.may_record
            || v.after.is_none()
            || v.mode_regs.is_none()
            // `record_block` takes RIP for the linear address: only with a CS base of 0.
            || v.cs_base != 0
            || v.pending.any()
            || v.pending.gp_restore.is_some()
            || v.pending.rdpmc.is_some()
            || v.exception_pending
            || v.bts.active()
            || v.pebs_steps
            || v.rtit.as_ref().is_some_and(|r| r.trigger_en())
            || v.truth.is_some()
        {
            return 0;
        }
        let room = if v.tracer.trace_en() {
            if !v.output_active
                || v.msrs.ctl.cyc_en()
                // Event Trace reads RFLAGS.IF at every block entry (`run_block`).
                || v.msrs.ctl.event_en()
                || v.pmu.active()
                || self.lbr_recording(v)
            {
                return 0;
            }
            let held = v.tracer.output().len() as u64;
            let per_block = output_bound::block_bytes(v.msrs.ctl, self.opts.caps.num_addr_ranges as usize);
            output_bound::blocks_within(v.output.quiet_room().saturating_sub(held), per_block)
        } else if v.pmu.active() || self.lbr_recording(v) {
            // (Less 2: the block that just ran has not been counted yet.) The LBRs record the
            // recorded blocks' taken branches when the model runs them, before anything can
            // read the LBR MSRs, and no freeze (FREEZE_LBRS_ON_PMI) can fall among them.
            v.pmu.blocks_before_pmi(MAX_BLOCK_INSNS).saturating_sub(2)
        } else {
            return 0;
        };
        room
    }

    /// Recompute whether this vCPU's blocks need the block callback (see `need_block_cb`).
    /// Returns whether the vCPU needs to see blocks for a feature (not only for a fix-up).
    fn refresh_block_cb(&self, v: &mut Vcpu) -> bool {
        let p = &v.pending;
        let sees_blocks = v.tracer.trace_en()
            || v.bts.active()
            || v.rtit.as_ref().is_some_and(|r| r.trigger_en())
            || v.truth.is_some()
            || v.pmu.active()
            || self.lbr_recording(v);
        let needed = sees_blocks
            || p.cpuid.is_some()
            || p.rdmsr.is_some()
            || p.rdtsc.is_some();
        if !needed {
            // Blocks run unseen from now on: the next one seen cannot follow from this one.
            v.blind = true;
            v.after = None;
            v.mode_regs = None;
            v.cs_base_valid = false;
            if v.pebs_steps {
                v.pebs_steps = false;
                self.pebs_step.set(v.index, 0);
            }
        }
        if v.block_cb_flag != Some(needed) {
            v.block_cb_flag = Some(needed);
            self.need_block_cb.set(v.index, u64::from(needed));
        }
        sees_blocks
    }

    /// DEBUGCTL.LBR = 1 (the model-specific stack) or IA32_LBR_CTL.LBREn = 1 (Arch LBR), and
    /// the LBRs not frozen (GLOBAL_STATUS.LBR_Frz), on a part with LBRs.
    fn lbr_recording(&self, v: &Vcpu) -> bool {
        system_cpu::lbr_recording(self.opts.arch_lbr, self.opts.rtit, &v.bts, &v.arch_lbr, &v.pmu)
    }

    /// The LBR unit of the profile the retirement events feed.
    fn lbr_unit<'a>(arch: bool, lbr: &'a mut LbrStack, arch_lbr: &'a mut ArchLbr) -> &'a mut dyn BranchRecorder {
        if arch { arch_lbr } else { lbr }
    }

    fn vcpu_init(&self, vcpu: VCPUIndex) {
        let Some(slot) = self.vcpus.get(vcpu as usize) else {
            eprintln!("pttrace: vCPU {vcpu} exceeds the {MAX_VCPUS} the plugin can model; it has no Intel PT");
            return;
        };
        let regs = Regs::discover();
        let missing = regs.missing();
        if !missing.is_empty() {
            fail(&format!("QEMU does not expose registers {missing:?}; full-system mode needs them"));
        }
        let caps = self.opts.caps;
        let v = Vcpu {
            index: vcpu,
            tracer: {
                let t = Tracer::new(TraceConfig { num_ranges: caps.num_addr_ranges as usize, ..TraceConfig::default() }, Context::KERNEL64);
                match self.opts.buffer.and_then(|b| b.config().ok()) {
                    Some(cfg) => t.with_internal_buffer(cfg),
                    None => t,
                }
            },
            flow: SystemFlow::default(),
            msrs: RtitMsrs::default(),
            pmu: Pmu::new(self.pmu_caps()),
            lbr: LbrStack::new(self.opts.pmu.lbr_layout()),
            arch_lbr: ArchLbr::new(ArchLbrCaps::SAPPHIRE_RAPIDS),
            pmi_prearmed: false,
            pebs_eventing: None,
            pebs_stats: [0; 3],
            cycle_clock: CycleClock::default(),
            record_clock: 0,
            output: OutputUnit::new(caps),
            bts: BtsUnit::new(BranchTraceStore::new(self.opts.dtes64), LinearMem),
            rtit: self.opts.rtit.then(|| {
                // With buffer=, the RTIT internal buffer has that capacity and overflows
                // (RTIT_STATUS.Buffer_Overflow, FUP.BuffOvf: seed 002 §4.2.5) when the drain
                // (drain=) cannot keep up.
                let opts = RtitOptions {
                    internal_buffer: self.opts.buffer.map(|b| b.capacity),
                    errata: self.opts.errata,
                    ..RtitOptions::default()
                };
                let t = RtitTracer::new(opts, Context::KERNEL64);
                if self.out.is_some() {
                    t.with_byte_log()
                } else {
                    t
                }
            }),
            output_active: false,
            regs,
            gdt_base: None,
            cur_modes: ModeSet::ALL,
            proven: None,
            cs_base: 0,
            cs_base_sel: u64::MAX,
            cs_base_valid: false,
            cs_load: CsLoad::default(),
            blind: true,
            idt_base: None,
            pending: Pending::default(),
            exception_pending: false,
            pc_delta: 0,
            after: None,
            mode_regs: None,
            native_leaves: NativeLeaves::default(),
            blocks_since_tsc: 0,
            credit: self.drainer.as_ref().map(|d| d.credit()),
            handoff: OutputHandoff::default(),
            last_started_slot: self.fixed_scoreboards.then(|| self.last_started.slot(vcpu)),
            block_cb_flag: None,
            pebs_steps: false,
            truth: self.opts.truth.then(Vec::new),
        };
        let mut v = v;
        self.refresh_block_cb(&mut v);
        *slot.lock() = Some(v);
        if let (true, Some(cell), Some(ring)) = (self.may_record, self.fronts.get(vcpu as usize), self.rings.get(vcpu as usize)) {
            let ring: &'static BlockRing<Recorded> = ring.get_or_init(|| Box::leak(Box::new(BlockRing::new(RING_BLOCKS))));
            // SAFETY: on the vCPU's own thread (the vCPU-init callback), before its first block.
            // The step of no block: its last instruction's address is none that starts, and
            // nothing follows it.
            let nothing: &'static SysBlock = Box::leak(Box::new(SysBlock::new(
                vec![u64::MAX],
                ClassifiedInsn { ip: u64::MAX, len: 1, kind: BranchKind::IndirectJump, rep_string: false },
                false,
            )));
            let no_step: &'static RecordStep = Box::leak(Box::new(RecordStep::new(u64::MAX, nothing, true, false)));
            let mut front = Front {
                last_started: self.last_started.slot(vcpu),
                prev: no_step,
                delta: 0,
                step_off: 0,
                limit: 0,
                ring,
                tsc: 0,
                loaded_rip: None,
                granted: 0,
                budget: 0,
                tsc_countdown: u32::MAX,
                mtc: false,
                no_step,
                regs: Regs::discover(),
                placement: ModelPlacement::new(),
            };
            front.set_slot(mode_slot(ExecMode::Bit64));
            // SAFETY: on the vCPU's own thread (the vCPU-init callback), before its first block.
            unsafe {
                let cell = &mut *cell.0.get();
                *cell = Some(front);
                if let (Some(front), Some(ptr)) = (cell.as_mut(), FRONTS.get(vcpu as usize)) {
                    ptr.store(front, Ordering::Release);
                }
            }
            self.n_rings.fetch_max(vcpu as usize + 1, Ordering::Release);
        }
    }

    /// The block callback's own work while the vCPU may only record (issue 13): find the
    /// block's actual address without the model and append it to the ring. Returns false (nothing
    /// recorded, `last_started` handed back) when the model must run the block now: the budget
    /// is spent, a store is wanted, the address does not follow (after a far transfer, an
    /// event, a block QEMU left early), or the block holds a WRMSR or is not consistent with the
    /// tracked mode.
    ///
    /// The common case inline, with few registers and no call: the previous block ran to its
    /// last instruction, `left` allows a record, and the block's key matches a successor key of
    /// the previous block (a direct successor, chosen by page offset, of a recordable block), or
    /// the previous block loaded its target (near RET or indirect JMP/CALL through memory).
    /// Returns None for everything else, with `last_started` taken: `record_block_general`.
    #[inline(always)]
    fn record_block(front: &mut Front, info: &'static BlockInfo) -> Option<u64> {
        let last_started = front.last_started.take(u64::MAX);
        let prev = front.prev;
        let len = front.ring.len();
        if last_started != prev.last_ip || len >= front.limit {
            return Some(last_started);
        }
        let step = front.step(info);
        let pc = if step.key == prev.succ_key[0] {
            prev.succ[0].wrapping_add(front.delta)
        } else if step.key == prev.succ_key[1] {
            prev.succ[1].wrapping_add(front.delta)
        } else {
            // What `record_block_general` takes after such a transfer (a value in another page
            // falls through to it, and fails there).
            // (Cleared only here: a value left from a block whose successor was not recorded
            // here is never used, since a `loads_next` block sets it as it ends and every
            // user checks that `prev` is such a block that ended, as `record_block_slow` and
            // `on_block` do.)
            match front.loaded_rip {
                Some(rip) if prev.loads_next && step.recordable && (rip ^ info.pc) & 0xFFF == 0 => {
                    front.loaded_rip = None;
                    rip
                }
                _ => return Some(last_started),
            }
        };
        // SAFETY: on the vCPU's own thread, the ring's producer; its length < `limit` <= its
        // capacity (`refill`).
        unsafe { front.ring.push_at(len, Recorded { info, pc, last_started, tsc: front.tsc }) };
        // (A step that `ends` recording is never followed: its successor keys match no key.)
        front.prev = step;
        front.delta = pc.wrapping_sub(info.pc);
        None
    }

    /// `record_block` for every case (a near indirect transfer reads RIP, MTC samples the host
    /// TSC), out of line; `left` refilled after it.
    #[inline(never)]
    fn record_block_general(front: &mut Front, info: &'static BlockInfo, last_started: u64) -> Result<(), u64> {
        front.sync();
        if front.budget == 0 {
            // The encoder thread may have let the vCPU go further (`BlockRing::grant`).
            front.budget = front.ring.granted().saturating_sub(front.ring.len()).min(u32::MAX as usize) as u32;
        }
        let r = Self::record_block_slow(front, info, last_started);
        front.refill();
        r
    }

    fn record_block_slow(front: &mut Front, info: &'static BlockInfo, last_started: u64) -> Result<(), u64> {
        let ring = front.ring;
        let Some((step_prev, delta)) = front.after().filter(|(s, _)| !s.ends) else { return Err(last_started) };
        let prev = step_prev.block;
        let step = front.step(info);
        if front.budget == 0 || !step.recordable || ring.flush_wanted() {
            return Err(last_started);
        }
        let pc = match successor_pc(prev, delta, last_started, info.pc) {
            Some(pc) => pc,
            None if last_started == prev.last.ip
                && matches!(prev.last.kind, BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return) =>
            {
                // A near indirect transfer: RIP, exact at block entry, in the page the
                // translation says (CS and its base are unchanged). After a near RET or an
                // indirect JMP/CALL through memory, RIP is the value its load returned
                // (`on_target_load`, no register read).
                // (A RET is not predicted from the calls: a translation made in another address
                // space at the predicted address would pass any check short of reading RIP.)
                let loaded = if prev.target_loaded { front.loaded_rip.take() } else { None };
                match loaded.or_else(|| front.regs.get("rip")) {
                    Some(rip) if (rip ^ info.pc) & 0xFFF == 0 => rip,
                    _ => return Err(last_started),
                }
            }
            None => return Err(last_started),
        };
        front.tsc_countdown -= 1;
        if front.tsc_countdown == 0 {
            if front.mtc {
                front.tsc_countdown = MTC_SAMPLE_BLOCKS;
                front.tsc = host_tsc().unwrap_or(0);
            } else {
                front.tsc_countdown = u32::MAX;
            }
        }
        // SAFETY: on the vCPU's own thread, the ring's producer.
        if !unsafe { front.ring.push(Recorded { info, pc, last_started, tsc: front.tsc }) } {
            return Err(last_started);
        }
        front.budget -= 1;
        front.set_after(Some((step, pc.wrapping_sub(info.pc))));
        Ok(())
    }

    /// The encoder thread (issue 13): runs the vCPUs' recorded blocks through their models while
    /// they keep executing, `ENCODER_CHUNK` blocks at a time under each vCPU's lock, so the
    /// model's work overlaps the guest's on another host CPU. It never waits for a vCPU
    /// (`try_lock`) and never writes guest memory (`run_block` with `may_store` false).
    fn encoder_loop(&'static self) {
        let mut backoff = pttrace_core::block_ring::ConsumerBackoff::default();
        loop {
            let n = self.n_rings.load(Ordering::Acquire).min(self.rings.len());
            let mut worked = false;
            for (i, ring) in self.rings[..n].iter().enumerate() {
                let Some(ring) = ring.get() else { continue };
                if ring.pending_published() < ENCODER_CHUNK || !self.beside[i].load(Ordering::Relaxed) {
                    continue;
                }
                let Some(mut guard) = self.vcpus[i].try_lock() else { continue };
                let Some(v) = guard.as_mut() else { continue };
                if !self.may_run_beside(v) {
                    continue;
                }
                guarded("trace encoder", || {
                    // SAFETY: holding the vCPU's lock.
                    unsafe { ring.take_published(ENCODER_CHUNK, |recs| self.run_recorded_all(v, recs, false)) };
                    // The model now stands where the vCPU stood after the blocks consumed so
                    // far. From there `record_room` blocks may be recorded (those the vCPU has
                    // recorded since among them), often far more than the budget the vCPU took
                    // from an older state: the vCPU goes on without stopping
                    // (`record_block_general`).
                    let room = self.record_room(v);
                    if room != 0 {
                        ring.grant(ring.consumed().saturating_add(room.min(usize::MAX as u64) as usize));
                    }
                });
                worked = true;
            }
            backoff.after_pass(worked);
        }
    }

    fn translate(&self, tb: &TranslationBlock) {
        let mut insns = Vec::new();
        let mut code = Vec::new();
        for insn in tb.instructions() {
            let bytes = insn.data();
            code.extend_from_slice(&bytes);
            insns.push((insn.vaddr(), bytes));
        }
        let Some((last_ip, last_bytes)) = insns.last() else { return };
        let pc = tb.vaddr();
        if self.out.is_some() {
            self.record_code(pc, code);
        }
        // System instructions (CPUID, RDMSR, WRMSR, LGDT, MOV CR3) encode the same way in every mode
        // except for operand details handled at execution time.
        let bitness = 64;
        // Light instrumentation (`crate::instrumentation`): most blocks carry no block callback
        // while no vCPU needs to see blocks.
        let levels = &crate::instrumentation::INSTRUMENTATION;
        // RDTSC is watched only to learn QEMU's TSC offset from its result (the guest's TSC is
        // the host TSC plus an offset QEMU changes only when the VM stops or the host TSC goes
        // backwards, `cpu_get_ticks`). Its block always ends at it, so the result is seen by
        // the next block's callback: in a light translation that makes the next page offset a
        // fix-up successor, and flushes the translations when a block there was translated
        // without its callback. So light translations watch RDTSC only until the offset is
        // known; full ones (while something traces, counts or records) at every RDTSC.
        let watch_rdtsc = levels.full() || !self.tsc_offset_known.load(Ordering::Relaxed);
        let ops: Vec<Option<SystemOp>> = insns
            .iter()
            .map(|(_, b)| system_op(b, bitness).filter(|&op| op != SystemOp::Rdtsc || watch_rdtsc))
            .collect();
        let has_wrmsr = ops.contains(&Some(SystemOp::Wrmsr));
        if matches!(ops.last(), Some(Some(SystemOp::Cpuid | SystemOp::Rdmsr | SystemOp::Rdtsc))) {
            levels.fixup_successor(last_ip.wrapping_add(last_bytes.len() as u64));
        }
        let block_cb = levels.block_cb(pc, has_wrmsr);
        let full = levels.full();
        if block_cb {
            self.register_block_cb(tb, pc, &insns, has_wrmsr);
        }
        let count_insns = self.icount_shift.is_some()
            || host_tsc().is_none()
            || matches!(self.opts.buffer.map(|b| b.drain), Some(pttrace_core::pt::buffer_spec::DrainSpec::PerInstructions { .. }));
        if let Some(first) = tb.instructions().next().filter(|_| count_insns) {
            // The block's instruction count, added when its first instruction starts (only when
            // a clock or the drain model counts instructions: it costs every block).
            qemu_plugin::qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                first,
                qemu_plugin::sys::qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64,
                self.insns.0,
                insns.len() as u64,
            );
        }
        if let Some(last) = tb.instructions().last().filter(|_| block_cb) {
            qemu_plugin::qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                last,
                qemu_plugin::sys::qemu_plugin_op::QEMU_PLUGIN_INLINE_STORE_U64,
                self.last_started.0,
                *last_ip,
            );
        }
        let event_trace_caps = self.opts.caps.event_trace;
        for (i, insn) in tb.instructions().enumerate() {
            let ip = insns[i].0;
            // CLI only matters to Event Trace: other profiles do not instrument it.
            let op = ops[i].filter(|&o| o != SystemOp::Cli || event_trace_caps);
            if let Some(op) = op {
                let bytes = insns[i].1.clone();
                let len = bytes.len() as u64;
                insn.register_execute_callback_flags(
                    move |vcpu| {
                        if let Some(sh) = SHARED.get() {
                            guarded("system instruction", || sh.with_vcpu(vcpu, |sh, v| sh.before_op(v, op, ip, len, &bytes)));
                        }
                    },
                    CallbackFlags::QEMU_PLUGIN_CB_RW_REGS,
                );
            }
            if cs_cache::loads_cs(&insns[i].1) {
                // A far JMP/CALL/RET or IRET in a block the model may not see: it reloads CS
                // (`on_cs_load`). Runs only while this vCPU's blocks are unseen (the flow sees
                // the transfer otherwise).
                register_insn_cond_cb(tb, i, on_cs_load, CallbackFlags::QEMU_PLUGIN_CB_R_REGS, qemu_plugin::sys::qemu_plugin_cond::QEMU_PLUGIN_COND_EQ, &self.need_block_cb, 0);
            }
            // Results of the previous instruction's CPUID/RDMSR are patched before this one runs.
            let prev_needs_fixup = i > 0
                && matches!(ops[i - 1], Some(SystemOp::Cpuid | SystemOp::Rdmsr | SystemOp::Rdtsc));
            if prev_needs_fixup {
                insn.register_execute_callback_flags(
                    move |vcpu| {
                        if let Some(sh) = SHARED.get() {
                            guarded("fixup", || sh.with_vcpu(vcpu, |sh, v| sh.apply_pending(v)));
                        }
                    },
                    CallbackFlags::QEMU_PLUGIN_CB_RW_REGS,
                );
            }
            if i > 0 && self.opts.pebs && full {
                // PEBS: registered after the fix-ups above, so the registers it records are the
                // ones the guest sees. Runs only while `pebs_step` is set (see `arm_pebs_steps`).
                register_insn_cond_cb(tb, i, on_pebs_step, CallbackFlags::QEMU_PLUGIN_CB_RW_REGS, qemu_plugin::sys::qemu_plugin_cond::QEMU_PLUGIN_COND_NE, &self.pebs_step, ip);
            }
            if self.opts.truth {
                insn.register_execute_callback(move |vcpu| {
                    if let Some(sh) = SHARED.get() {
                        guarded("truth", || {
                            sh.with_vcpu(vcpu, |_, v| {
                                let actual = ip.wrapping_add(v.pc_delta);
                                if let Some(t) = v.truth.as_mut() {
                                    let _ = writeln!(crate::user::HexLine(t), "{actual:x}");
                                }
                            })
                        });
                    }
                });
            }
        }
    }

    /// The block's record (`BlockInfo`, classified in the three modes) and its execute
    /// callback: unconditional for a block that ends in a WRMSR, else while `need_block_cb`.
    fn register_block_cb(&self, tb: &TranslationBlock, pc: u64, insns: &[(u64, Vec<u8>)], has_wrmsr: bool) {
        let Some((last_ip, last_bytes)) = insns.last() else { return };
        let addrs: Vec<u64> = insns.iter().map(|i| i.0).collect();
        let modes = consistent_modes(insns.iter().map(|i| i.1.as_slice()));
        let for_mode = |bitness: u32| {
            let last = classify(last_bytes, *last_ip, bitness).unwrap_or(ClassifiedInsn {
                ip: *last_ip,
                len: last_bytes.len() as u8,
                kind: BranchKind::None,
                rep_string: false,
            });
            let writes_cr3 = system_op(last_bytes, bitness) == Some(SystemOp::MovToCr3);
            let mut block = SysBlock::new(addrs.clone(), last, writes_cr3);
            // The value of its load reaches the next block (`on_target_load`).
            block.target_loaded = self.may_record && loads_branch_target(last_bytes, bitness);
            // Lives as long as QEMU, like the callback closures the qemu-plugin crate hands QEMU
            // for every translation (QEMU never tells a plugin that a translation is freed), so
            // the per-block path holds plain references instead of counting them.
            &*Box::leak(Box::new(block))
        };
        let changes_mode = insns.iter().any(|(_, b)| may_change_mode(b));
        // Kept for the life of the process: QEMU does not say when a translation is freed (the
        // qemu-plugin crate's closures are leaked the same way).
        let by_mode = [for_mode(16), for_mode(32), for_mode(64)];
        let step = |slot: usize, m: ExecMode| RecordStep::new(pc, by_mode[slot], changes_mode, !has_wrmsr && modes.contains(m));
        let steps = [step(0, ExecMode::Bit16), step(1, ExecMode::Bit32), step(2, ExecMode::Bit64), step(2, ExecMode::Bit64)];
        let proves = [ModeSet(modes.0 & !4).single(), modes.single()];
        let loads_target = by_mode.iter().any(|b| b.target_loaded);
        let info: &'static BlockInfo = Box::leak(Box::new(BlockInfo { pc, has_wrmsr, by_mode, modes, steps, proves }));
        // A plain C function with the block's record as user data: no boxed closure per block.
        let udata = info as *const BlockInfo as *mut std::ffi::c_void;
        // SAFETY: `tb` is the translation being instrumented; `info` outlives it.
        unsafe {
            if has_wrmsr {
                // A WRMSR may start tracing in the middle of this block: the flow must know the
                // block whatever the flag says.
                qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_cb(
                    crate::tb_ptr(tb),
                    Some(on_block_exec),
                    CallbackFlags::QEMU_PLUGIN_CB_RW_REGS,
                    udata,
                );
            } else {
                qemu_plugin::sys::qemu_plugin_register_vcpu_tb_exec_cond_cb(
                    crate::tb_ptr(tb),
                    Some(on_block_exec),
                    CallbackFlags::QEMU_PLUGIN_CB_RW_REGS,
                    qemu_plugin::sys::qemu_plugin_cond::QEMU_PLUGIN_COND_NE,
                    self.need_block_cb.0,
                    0,
                    udata,
                );
            }
            if loads_target {
                // The value the RET pops or the indirect JMP/CALL loads: the next block's RIP
                // (`on_target_load`).
                let last = qemu_plugin::sys::qemu_plugin_tb_get_insn(crate::tb_ptr(tb), insns.len() - 1);
                qemu_plugin::sys::qemu_plugin_register_vcpu_mem_cb(
                    last,
                    Some(on_target_load),
                    CallbackFlags::QEMU_PLUGIN_CB_NO_REGS,
                    qemu_plugin::sys::qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_R,
                    std::ptr::null_mut(),
                );
            }
        }
    }

    fn record_code(&self, pc: u64, code: Vec<u8>) {
        if let Some(out) = &self.out {
            self.code.record(out, pc, code);
        }
    }

    /// A block is about to execute and the model runs it now (`last_started` already taken by
    /// the block callback, or None).
    fn on_block(&self, v: &mut Vcpu, info: &'static BlockInfo, last_started: Option<u64>, loaded: Option<u64>) {
        if v.pending.any() {
            self.apply_pending(v);
        }
        // x86 system-mode translations are PC-relative (CF_PCREL): QEMU runs one translation
        // for the same physical code at any virtual address it is mapped at (e.g. a shared
        // library in two processes). The actual address matters only while something records
        // (with TraceEn = 0 no packet depends on it; a block with a WRMSR, which may enable
        // tracing, needs it too); it follows from the previous block after direct transfers
        // (`successor_pc`), and RIP, exact at block entry, is read otherwise.
        let rtit_on = v.rtit.as_ref().is_some_and(|r| r.trigger_en());
        let lbr_on = self.lbr_recording(v);
        let last_started = last_started.unwrap_or_else(|| match &v.last_started_slot {
            Some(slot) => slot.take(u64::MAX),
            None => self.last_started.take(v.index, u64::MAX),
        });
        let exact = Self::needs_actual_pc(v, info, rtit_on, lbr_on);
        let after = v.after.take();
        if after.is_none_or(|(prev, _)| prev.changes_mode || matches!(prev.block.last.kind, BranchKind::Far(_))) {
            v.mode_regs = None;
        }
        let (cs, cr0, efer) = *v.mode_regs.get_or_insert_with(|| {
            (v.regs.get("cs").unwrap_or(0), v.regs.get("cr0").unwrap_or(0), v.regs.get("efer").unwrap_or(0))
        });
        // The CS base of the descriptor cache, where CS may just have been loaded (issue 12).
        let cs_loaded = v.flow.cs_may_have_been_loaded();
        let mut rip = None;
        if cs_loaded || !v.cs_base_valid {
            if !exact {
                v.cs_base_valid = false;
            } else if !cs_loaded && cr0 & (1 << 31) != 0 && cs == v.cs_base_sel {
                // Blocks ran unseen and CS holds the same selector: the cached base (with
                // paging the block's address does not tell it exactly).
                v.cs_base_valid = true;
            } else {
                rip = Some(Self::load_cs_base(v, info, cs, cr0, efer));
            }
        }
        // RIP is CS-relative and the block's address linear (CS base + EIP). Without paging
        // (CR0.PG = 0) linear = physical: a translation only runs at the address it was made
        // for, which is exact, CS base included (real mode, issue 12).
        let paging = cr0 & (1 << 31) != 0;
        // After a near RET or indirect JMP/CALL through memory that ran to its end, the value
        // it loaded is RIP (`on_target_load`).
        let loaded = loaded.filter(|&r| {
            after.is_some_and(|(prev, _)| prev.block.target_loaded && last_started == prev.last_ip)
                && (cs_base::linear(v.cs_base, r) ^ info.pc) & 0xFFF == 0
        });
        let pc = if paging && exact {
            after
                .and_then(|(prev, delta)| successor_pc(prev.block, delta, last_started, info.pc))
                .unwrap_or_else(|| rip.or(loaded).or_else(|| v.regs.get("rip")).map_or(info.pc, |rip| cs_base::linear(v.cs_base, rip)))
        } else {
            info.pc
        };
        self.run_block(v, info, pc, last_started, true);
    }

    /// What Intel PT IP payloads are relative to in code whose CS base is `base`: with
    /// CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0 they are effective addresses, offsets from the CS
    /// base (SDM Vol. 3C §33.3.1.1 "Packet Decoding of RIP versus LIP"), and the model's IPs are
    /// linear; with LIP = 1 linear.
    fn ip_base(&self, base: u64) -> u64 {
        if self.opts.caps.lip {
            0
        } else {
            base
        }
    }

    /// CS may just have been loaded (or nothing is known): establish the descriptor cache's base
    /// from what QEMU runs (`cs_base::base_at_load`). The descriptor is read only with paging
    /// (without, the block's address minus RIP is exact) and not for 64-bit kernels' flat code
    /// (IA-32e mode, translated at RIP: base 0 without a GDT read on every event). Returns the
    /// RIP it read.
    fn load_cs_base(v: &mut Vcpu, info: &BlockInfo, cs: u64, cr0: u64, efer: u64) -> u64 {
        let rip = v.regs.get("rip").unwrap_or(info.pc);
        let (pe, paging, lma) = (cr0 & 1 != 0, cr0 & (1 << 31) != 0, efer & (1 << 10) != 0);
        let descriptor = if paging && pe && !(lma && rip == info.pc) { Self::cs_descriptor(v, cs) } else { None };
        v.cs_base = cs_base::base_at_load(cs_base::CsLoad {
            translated_pc: info.pc,
            rip,
            translated_is_linear: !paging,
            pe,
            lma,
            descriptor,
        });
        v.cs_base_sel = cs;
        v.cs_base_valid = true;
        rip
    }

    /// The descriptor of selector `cs` in the GDT last loaded by LGDT, if it is in RAM.
    fn cs_descriptor(v: &Vcpu, cs: u64) -> Option<u64> {
        v.gdt_base.filter(|_| cs & 4 == 0).and_then(|b| guest::read_u64(b + (cs & !7)))
    }

    /// Before tracing starts at a WRMSR: the CS base when no block established it since blocks
    /// ran unseen (block callbacks were off). The cached one while CS holds the selector it was
    /// established for (e.g. real mode still using a protected-mode base), else
    /// `cs_base::base_from_selector`; a reload of the same selector with another base while no
    /// block was seen goes unnoticed (see README).
    fn ensure_cs_base(v: &mut Vcpu) {
        if !v.cs_base_valid {
            let cs = v.regs.get("cs").unwrap_or(0);
            if cs != v.cs_base_sel {
                let pe = v.regs.get("cr0").unwrap_or(0) & 1 != 0;
                let lma = v.regs.get("efer").unwrap_or(0) & (1 << 10) != 0;
                v.cs_base = cs_base::base_from_selector(cs, pe, lma, Self::cs_descriptor(v, cs));
                v.cs_base_sel = cs;
            }
            v.cs_base_valid = true;
        }
    }

    /// The model's work for a block that starts at `pc`, whether it runs as the block executes
    /// (`on_block`) or later from the vCPU's ring (issue 13: `Front`). With `may_store` false (the
    /// encoder thread, not in vCPU context) no output reaches guest memory: a store that would be
    /// due asks the vCPU to make it (`BlockRing::want_flush`).
    fn run_block(&self, v: &mut Vcpu, info: &'static BlockInfo, pc: u64, last_started: u64, may_store: bool) {
        // Reading the host TSC costs ~40 ns on virtualised hosts. MTC, CYC and RTIT's counters
        // need it at every block; otherwise only TSC packets in PSB+ use it, and a sample at most
        // 64 blocks old (microseconds) is taken (WRMSRs and events sample it afresh).
        v.blocks_since_tsc += 1;
        let fine = v.msrs.ctl.mtc_en() || v.msrs.ctl.cyc_en() || v.rtit.is_some();
        if fine || v.blocks_since_tsc >= 64 {
            v.blocks_since_tsc = 0;
            self.update_tsc(v);
        }
        let rtit_on = v.rtit.as_ref().is_some_and(|r| r.trigger_en());
        let lbr_on = self.lbr_recording(v);
        let exact = Self::needs_actual_pc(v, info, rtit_on, lbr_on);
        v.after = None;
        v.pc_delta = pc.wrapping_sub(info.pc);
        v.cur_modes = info.modes;
        let (key, lma) = mode_key_and_lma(v.mode_regs);
        // A far transfer or an event may have reloaded CS, even with the same selector value
        // (a rewritten GDT entry): the cached mode is re-established below (issue 12).
        let cs_loaded = v.flow.cs_may_have_been_loaded();
        if cs_loaded || v.proven.is_some_and(|(_, k)| k != key) {
            v.proven = None;
        }
        if cs_loaded && !v.blind {
            // The far transfer or event the flow is about to report loaded CS with this LMA
            // (the same on both sides of it).
            v.cs_load.loaded(lma);
        }
        Self::prove_mode(&mut v.proven, info, key, lma);
        let mut cpu = LiveCpu { regs: &v.regs, gdt_base: v.gdt_base, modes: v.cur_modes, proven: v.proven, cached: v.tracer.context().mode, cs_load: v.cs_load };
        if v.bts.active() && !v.bts.dtes64() {
            // The DS format without DTES64 follows IA-32e mode (IA32_EFER.LMA).
            v.bts.set_ia32e(lma);
        }
        // Event Trace: RFLAGS.IF at this block's entry, after whatever the previous block's
        // last instruction did (a far transfer's MODE.Exec reports it; STI and POPF end QEMU's
        // block, so a change without a transfer is reported here with FUP(this block)).
        let event_trace = v.tracer.trace_en() && v.tracer.event_en();
        if event_trace {
            v.tracer.stage_if(v.regs.get("eflags").unwrap_or(0) & (1 << 9) != 0);
        }
        let lbr_clock = if lbr_on { self.core_clock(v) } else { 0 };
        let mut sink = Retire {
            pt: &mut v.tracer,
            rtit: v.rtit.as_mut(),
            bts: &mut v.bts,
            bts_pmi: false,
            pmu: &mut v.pmu,
            lbr_clock,
            lbr: lbr_on.then(|| Self::lbr_unit(self.opts.arch_lbr, &mut v.lbr, &mut v.arch_lbr)),
            lbr_freeze_after: false,
            pebs_eventing: &mut v.pebs_eventing,
        };
        let delivered = v.flow.delivered_last();
        let far_before = v.flow.stats().far_transfers;
        // The IP payloads' base in this block's code segment: a far transfer into it reports
        // its TIP against it, then the block's own packets (SDM Vol. 3C §33.3.1.1).
        let ip_base = self.ip_base(v.cs_base);
        sink.pt.stage_ip_base(ip_base);
        v.flow.block(&mut sink, pc, &info.by_mode, v.pc_delta, last_started, &mut cpu);
        let bts_pmi = sink.bts_pmi;
        v.tracer.set_ip_base(ip_base);
        if event_trace {
            v.tracer.if_boundary(pc);
        }
        if v.pmu.pebs_due_at(v.tracer.context().cpl) {
            // The previous block's last instruction triggered it: this block's first instruction
            // is the next one, and the registers are those after the trigger. (A record due
            // only to cycle counters waits for a block at a CPL they count at.)
            self.pebs_record(v, pc);
        }
        // The descriptor cache: the mode chosen when CS was loaded (a far transfer retired just
        // now, or an event delivered) holds until the next load. Not after a block the flow did
        // not see retire (callbacks were off): the tracer's context may be stale then.
        let loaded_now = delivered || v.flow.stats().far_transfers != far_before;
        let was_blind = std::mem::replace(&mut v.blind, v.block_cb_flag != Some(true));
        if cs_cache::may_establish(cs_loaded, loaded_now, was_blind, key.1 != 0) && v.proven.is_none() {
            v.proven = Some((v.tracer.context().mode, key));
        }
        if bts_pmi {
            Self::deliver_pmi();
        }
        // The next block's address follows from this one only if the flow classified it in a
        // mode QEMU can have translated it in (before tracing starts, the tracked mode may be
        // stale, e.g. 64-bit while the firmware runs real-mode code), and not in 16-bit code,
        // whose branch targets wrap at 64 KiB in IP while QEMU reports linear addresses (CS
        // base added): RIP is read there.
        if exact {
            v.after = info.after(v.tracer.context().mode, v.pc_delta);
        }
        let pmu_pmi = v.pmu.take_pmi();
        Self::counter_pmi(v, pmu_pmi);
        if v.pmu.active() {
            self.count_cycles(v);
            Self::prearm_pmi(v, info);
        }
        self.arm_pebs_steps(v, info);
        self.refresh_block_cb(v);
        if let Some(r) = v.rtit.as_mut().filter(|r| r.trigger_en()) {
            // RTIT_LIPn range edges inside the block (seed 002 §3.3.5): reported when execution
            // reaches a base or limit sequentially. Approximation: the block's instructions are
            // reported at its start (exact unless the block is left early by an exception).
            let lips = r.range_addresses();
            if lips.iter().any(|&a| a != 0) {
                let delta = v.pc_delta;
                for &ip in info.by_mode[2].insns.iter().skip(1) {
                    let ip = ip.wrapping_add(delta);
                    if lips.contains(&ip) {
                        r.linear(ip);
                    }
                }
            }
        }
        self.block_output(v, may_store);
        if let (Some(out), Some(t)) = (&self.out, v.truth.as_mut()) {
            if t.len() >= 256 * 1024 {
                out.send(FileKey::Truth(v.index + 1), std::mem::take(t));
            }
        }
    }

    /// A counter overflow asked for a PMI: raise it, unless it was raised before the block ran
    /// (`prearm_pmi`). A pre-armed PMI belongs to the block that just ended.
    fn counter_pmi(v: &mut Vcpu, overflowed: bool) {
        let prearmed = std::mem::take(&mut v.pmi_prearmed);
        if overflowed && !prearmed {
            Self::deliver_pmi();
        }
    }

    /// QEMU takes interrupts only between translation blocks, and the block callback learns
    /// that a block completed when the next one starts. When the block about to run will
    /// certainly overflow a counter with INT (its instructions, and what its last instruction
    /// contributes whatever its outcome), the PMI is raised now, so it is taken right after this
    /// block instead of after the next one. (If the block faults before the overflow, that PMI
    /// arrives without an overflow bit, as a spurious PMI.)
    fn prearm_pmi(v: &mut Vcpu, info: &BlockInfo) {
        let b = info.in_mode(v.tracer.context().mode);
        let plain = b.insns.len() as u64 - 1;
        // A REP string instruction may not retire in this block (it iterates block by block).
        let last = (!b.last.rep_string).then(|| Retired::certain(b.last.kind));
        if v.pmu.pmi_within(plain, last, v.tracer.context().cpl) {
            Self::deliver_pmi();
            v.pmi_prearmed = true;
        }
    }

    /// Cycles of the emulated clock since they were last counted go to the cycle counters (at
    /// block granularity: the clock is read per block).
    fn count_cycles(&self, v: &mut Vcpu) {
        let (cpl, index) = (v.tracer.context().cpl, v.index);
        if v.cycle_clock.count(&mut v.pmu, cpl, || self.guest_tsc(index)) {
            Self::deliver_pmi();
        }
    }

    /// The instruction at `ip` (actual address) of the current block reads or writes the
    /// counters: the block's instructions before it retired (counted now), and the clock is
    /// brought up to date.
    fn count_to(&self, v: &mut Vcpu, ip: u64) {
        // Also while nothing counts: the instructions before an enabling WRMSR must not be
        // counted once it has enabled counting (the flow marks them as reported).
        let mut sink = Retire {
            pt: &mut v.tracer,
            rtit: v.rtit.as_mut(),
            bts: &mut v.bts,
            bts_pmi: false,
            pmu: &mut v.pmu,
            lbr: None,
            lbr_clock: 0,
            lbr_freeze_after: false,
            pebs_eventing: &mut v.pebs_eventing,
        };
        v.flow.catch_up(&mut sink, ip);
        if v.pmu.pebs_due_at(v.tracer.context().cpl) {
            self.pebs_record(v, ip);
        }
        if v.pmu.take_pmi() && !std::mem::take(&mut v.pmi_prearmed) {
            Self::deliver_pmi();
        }
        self.count_cycles(v);
    }

    /// The PMU of the profile: Silvermont's with `profile=silvermont`, Ice Lake's with
    /// `profile=icelake`, Skylake's otherwise (with PEBS only with `pebs=1`, which needs the
    /// Debug Store, `bts=1`).
    fn pmu_caps(&self) -> PmuCaps {
        if self.opts.rtit {
            PmuCaps::SILVERMONT
        } else if self.opts.arch_lbr {
            // IA32_PERF_CAPABILITIES[5:0] = 3FH: Arch LBR, no model-specific LBR format.
            pttrace_core::arch_lbr::pmu_caps(self.opts.pmu.caps(self.opts.pebs))
        } else {
            self.opts.pmu.caps(self.opts.pebs)
        }
    }

    /// Per-instruction callbacks for the block about to run (`on_pebs_step`): only when a PEBS
    /// record may fall inside it, so the record names the exact instruction and registers.
    fn arm_pebs_steps(&self, v: &mut Vcpu, info: &BlockInfo) {
        let on = v.pmu.pebs_active() && {
            let b = info.in_mode(v.tracer.context().mode);
            let last = (!b.last.rep_string).then(|| Retired::certain(b.last.kind));
            v.pmu.pebs_within(b.insns.len() as u64 - 1, last, v.tracer.context().cpl)
        };
        if on != v.pebs_steps {
            v.pebs_steps = on;
            self.pebs_step.set(v.index, u64::from(on));
        }
    }

    /// The PEBS assist (SDM Vol. 3B §20.3.1.1.1 / seed 001 §6.5-§6.7): the record of a due PEBS
    /// event in the format of the profile, trap-like: `ip` is the instruction after the one
    /// that triggered it (EventingIP) and the registers are read now, before `ip` executes. The
    /// applicable counters are reloaded from the DS area's reset fields; the threshold raises
    /// the PMI with GLOBAL_STATUS[62] OvfBuffer.
    fn pebs_record(&self, v: &mut Vcpu, ip: u64) {
        let applicable = v.pmu.take_pebs();
        let eventing_ip = v.pebs_eventing.take().unwrap_or(ip);
        let Some(fmt) = v.pmu.caps().pebs_format else { return };
        let regs = &v.regs;
        let r = |name: &str| regs.get(name).unwrap_or(0);
        let names = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"];
        let mut gprs = [0u64; 16];
        for (g, n) in gprs.iter_mut().zip(names) {
            *g = r(n);
        }
        let lma = r("efer") & (1 << 10) != 0;
        let rflags = r("eflags");
        let ds = DsFormat::select(v.bts.dtes64(), lma);
        let Some(mut f) = PebsFormat::select(ds, fmt) else { return };
        let tsc = self.core_clock(v);
        let status = f.status_field(v.pmu.global_status(), applicable);
        let mut state = PebsState { rflags, ip, gprs, status, eventing_ip, tsc, ..Default::default() };
        if let PebsFormat::Adaptive { groups } = &mut f {
            // Format 4: the groups of MSR_PEBS_DATA_CFG when an applicable counter has
            // Adaptive_Record set; XMM0-15 as QEMU holds them now (gdbstub's 128-bit xmmN
            // registers, memory byte order), the LBR stack youngest first.
            *groups = v.pmu.pebs_record_cfg(applicable);
            if groups.xmms() {
                for (i, x) in state.xmm.iter_mut().enumerate() {
                    *x = regs.xmm(i).unwrap_or_default();
                }
            }
            if groups.lbrs() {
                state.lbr = v.lbr.entries().collect();
            }
        }
        let a = pebs::assist(&mut LinearMem, v.bts.ds_area(), ds, f, &state, applicable);
        for (n, value) in a.resets {
            v.pmu.pebs_reload(n, value);
        }
        match a.outcome {
            PebsOutcome::Written { pmi } => {
                v.pebs_stats[0] += 1;
                if pmi {
                    v.pmu.set_ovf_buffer();
                }
            }
            PebsOutcome::Full => v.pebs_stats[1] += 1,
            PebsOutcome::Unwritable => v.pebs_stats[2] += 1,
        }
    }

    /// The per-instruction callback of a block in which a PEBS record may fall: the instructions
    /// before `ip` (actual address) retired, one at a time.
    fn pebs_step(&self, v: &mut Vcpu, ip: u64) {
        if v.pending.any() {
            self.apply_pending(v);
        }
        self.count_to(v, ip.wrapping_add(v.pc_delta));
    }

    /// The emulated core clock (what CPU_CLK_UNHALTED counts and the LBR records' cycle counts
    /// measure): the guest's TSC (`pttrace_core::system_cpu::clock`).
    fn core_clock(&self, v: &Vcpu) -> u64 {
        self.guest_tsc(v.index)
    }

    /// The guest's TSC of vCPU `index` now.
    #[inline]
    fn guest_tsc(&self, index: u32) -> u64 {
        clock::guest_tsc(self.raw_clock_of(index), self.tsc_offset.load(Ordering::Relaxed))
    }

    /// The clock behind the guest's TSC (`clock::raw_clock`), from QEMU's instruction count of
    /// the vCPU and the host TSC.
    fn raw_clock(&self, v: &Vcpu) -> u64 {
        self.raw_clock_of(v.index)
    }

    #[inline]
    fn raw_clock_of(&self, index: u32) -> u64 {
        clock::raw_clock(self.icount_shift, self.insns.get(index), host_tsc())
    }

    /// The guest's TSC now (see `host_tsc`): packets generated from here on carry this time.
    fn update_tsc(&self, v: &mut Vcpu) {
        let tsc = self.core_clock(v);
        v.tracer.set_tsc(tsc);
        if let Some(r) = v.rtit.as_mut() {
            r.set_tsc(tsc);
        }
    }

    /// Drain credit for the internal buffer (issue 7): instructions retired since the last credit
    /// (deterministic) or the bandwidth the drainer thread granted (real time).
    fn credit_drain(&self, v: &mut Vcpu) {
        if self.opts.buffer.is_none() || self.opts.rtit {
            return; // (RTIT drains with its own credit in `drain`)
        }
        if let Some(c) = v.credit.as_mut() {
            v.tracer.credit_from(c);
        } else {
            v.tracer.credit(v.handoff.insns_since_credit(self.insns.get(v.index)));
        }
    }

    /// Hand the generated packets to the output unit (guest memory) and the host mirror, holding
    /// back Intel PT bytes while that cannot change anything but their own arrival
    /// (`pttrace_core::system_cpu::output`).
    #[inline]
    fn drain(&self, v: &mut Vcpu) {
        // The common case at a block boundary, without a call: Intel PT alone (no drain model,
        // no RTIT), nothing to store yet.
        if self.opts.buffer.is_none() && v.rtit.is_none() && v.output_active && Self::hold_pt_output(v) {
            return;
        }
        self.drain_or_hold(v, false);
    }

    /// The Intel PT bytes generated so far stay held back for this block
    /// (`OutputHandoff::hold`). Only while the output unit runs.
    #[inline]
    fn hold_pt_output(v: &mut Vcpu) -> bool {
        let output = &v.output;
        v.handoff.hold(v.tracer.output().len() as u64, || output.quiet_room())
    }

    /// As `drain`, storing every byte now (TraceEn cleared).
    fn flush_output(&self, v: &mut Vcpu) {
        self.drain_or_hold(v, true);
    }

    /// Store the Intel PT bytes held back so far, without a drain step of the internal-buffer
    /// model (which runs at block boundaries and events): before the guest reads or writes a
    /// trace MSR and at HLT.
    fn store_held(&self, v: &mut Vcpu) {
        let mirror = self.pt_mirror(v.index);
        system_cpu::output::store_held(&mut QemuPort::new(self, v), mirror);
    }

    fn drain_or_hold(&self, v: &mut Vcpu, flush: bool) {
        self.credit_drain(v);
        if let Some(r) = v.rtit.as_mut() {
            // The RTIT internal buffer goes to its output region at every block boundary, or as
            // far as the drain bandwidth allows with buffer=/drain= (`OutputHandoff::
            // rtit_allowance`); the host copy mirrors every generated byte.
            match self.opts.buffer {
                None => r.drain(&mut PhysMem),
                Some(spec) => {
                    let credit = &mut v.credit;
                    let allowance =
                        v.handoff.rtit_allowance(spec.drain, self.insns.get(v.index), || credit.as_mut().map_or(0, |c| c.take()));
                    r.drain_up_to(&mut PhysMem, allowance);
                }
            }
            if let Some(out) = &self.out {
                let bytes = r.take_generated_bytes();
                if !bytes.is_empty() {
                    out.send(FileKey::Rtit(v.index + 1), bytes);
                }
            }
        }
        // Held, stored (the ToPA PMI, STOP and output errors) or lost after STOP:
        // `pttrace_core::system_cpu::output::output_step`.
        let mirror = self.pt_mirror(v.index);
        system_cpu::output::output_step(&mut QemuPort::new(self, v), flush, mirror);
    }

    /// The host copy of vCPU `index`'s Intel PT stream: the bytes an output step stored.
    #[inline]
    fn pt_mirror(&self, index: u32) -> impl FnOnce(&[u8]) + '_ {
        move |bytes: &[u8]| {
            if let Some(out) = &self.out {
                out.send(FileKey::Pt(index + 1), bytes.to_vec());
            }
        }
    }

    /// A PMI through the local APIC's LVT performance-counter entry (SDM §20.6.3): the DS
    /// interrupt of the BTS and the ToPA PMI both arrive this way. A masked LVTPC drops it.
    fn deliver_pmi() {
        let mut mem = guest::ApicMmio;
        let mut lvt = [0u8; 4];
        if mem.read_phys(APIC_LVTPC, &mut lvt).is_err() {
            return;
        }
        let lvt = u32::from_le_bytes(lvt);
        if lvt & (1 << 16) != 0 {
            return; // masked: no interrupt (a ToPA PMI stays visible in GLOBAL_STATUS)
        }
        let icr = match (lvt >> 8) & 7 {
            0b100 => 0x0004_4400,                  // NMI, assert, self
            0b000 => 0x0004_4000 | (lvt & 0xFF), // fixed vector, assert, self
            _ => return,
        };
        let _ = mem.write_phys(APIC_ICR_LOW, &icr.to_le_bytes());
        // The LVT entry is masked when a PMI is delivered (SDM §20.6.3, "LVTPC mask").
        let _ = mem.write_phys(APIC_LVTPC, &(lvt | (1 << 16)).to_le_bytes());
    }

    fn apply_pending(&self, v: &mut Vcpu) {
        if let Some((leaf, subleaf)) = v.pending.cpuid.take() {
            self.fix_cpuid(v, leaf, subleaf);
        }
        if let Some(host) = v.pending.rdtsc.take() {
            if let (Some(lo), Some(hi)) = (v.regs.get("rax"), v.regs.get("rdx")) {
                let offset = clock::tsc_offset_from_rdtsc(host, lo, hi);
                self.tsc_offset.store(offset, Ordering::Relaxed);
                self.tsc_offset_known.store(true, Ordering::Relaxed);
            }
        }
        if let Some(fixup) = v.pending.rdmsr.take() {
            system_cpu::rdmsr::complete(&mut QemuPort::new(self, v), &self.msr_map(), fixup);
        }
    }

    /// CPUID.0:EAX >= 14H, CPUID.(7,0):EBX[25] Intel PT, CPUID.14H from the profile.
    /// CPUID has executed: the profile's answer (`pttrace_core::cpuid`) replaces the registers
    /// QEMU's answer left that differ from it.
    fn fix_cpuid(&self, v: &mut Vcpu, leaf: u32, subleaf: u32) {
        let profile = self.opts.cpuid_profile(v.pmu.caps());
        system_cpu::cpuid::complete(&mut QemuPort::new(self, v), &profile, leaf, subleaf);
    }

    fn before_op(&self, v: &mut Vcpu, op: SystemOp, ip: u64, len: u64, bytes: &[u8]) {
        self.apply_pending(v);
        v.mode_regs = None;
        self.before_op_inner(v, op, ip, len, bytes);
        // A result to fix up (possibly in the next block) or a WRMSR that switched tracing.
        let sees_blocks = self.refresh_block_cb(v);
        // Whether the translations may be light (`crate::instrumentation`): a fix-up pending
        // outside IA-32e mode (IA32_EFER[10] LMA = 0) needs the next block seen.
        let legacy_fixup = v.pending.any() && v.regs.get("efer").unwrap_or(0) & (1 << 10) == 0;
        crate::instrumentation::INSTRUMENTATION.observe(v.index, sees_blocks, legacy_fixup);
    }

    fn before_op_inner(&self, v: &mut Vcpu, op: SystemOp, ip: u64, len: u64, bytes: &[u8]) {
        let ip = ip.wrapping_add(v.pc_delta);
        match op {
            SystemOp::Cpuid => v.pending.cpuid = Some(system_cpu::cpuid::leaf(&mut QemuPort::new(self, v))),
            SystemOp::Rdmsr => {
                // The facade decides (`pttrace_core::system_cpu::rdmsr`); the result is fixed up
                // after the instruction (`apply_pending`).
                if let Rdmsr::Fixup(fixup) = system_cpu::rdmsr::rdmsr(&mut QemuPort::new(self, v), &self.msr_map(), ip) {
                    v.pending.rdmsr = Some(fixup);
                }
            }
            SystemOp::Wrmsr => self.wrmsr(v, ip, ip + len),
            SystemOp::Lgdt => {
                if let Some(base) = self.table_base(v, ip, bytes) {
                    v.gdt_base = Some(base);
                }
            }
            SystemOp::Lidt => {
                if let Some(base) = self.table_base(v, ip, bytes) {
                    v.idt_base = Some(base);
                }
            }
            SystemOp::Rdpmc => {
                self.count_to(v, ip);
                v.pending.rdpmc = Some((ip, len));
            }
            SystemOp::Rdtsc => v.pending.rdtsc = Some(self.raw_clock(v)),
            SystemOp::MovToCr3 => {}
            SystemOp::Cli => {
                // Event Trace: CLI clears IF when CPL <= IOPL (else #GP, no change), in the
                // middle of a block: MODE.Exec(IF = 0) and FUP(NLIP) at the instruction.
                if v.tracer.trace_en() && v.tracer.event_en() {
                    let rflags = v.regs.get("eflags").unwrap_or(0);
                    let cpl = v.regs.get("cs").unwrap_or(0) & 3;
                    if cpl <= (rflags >> 12) & 3 {
                        v.tracer.stage_if(false);
                        v.tracer.if_boundary(ip + len);
                    }
                }
            }
            SystemOp::Hlt => {
                // CPU_CLK_UNHALTED: cycles up to the HLT count, the halted time does not (the
                // clock restarts at the next block, after the wake-up).
                self.count_to(v, ip);
                v.cycle_clock.stop();
                // Power event trace: the core enters C1 until an interrupt (`on_discon` sends
                // the PWRX). Before `store_held`: the packets reach memory during the halt.
                v.tracer.halt(ip);
                self.store_held(v);
            }
        }
    }

    /// The MSR map of the profile (`pttrace_core::msr_map`).
    fn msr_map(&self) -> MsrMap {
        MsrMap {
            caps: self.opts.caps,
            rtit: self.opts.rtit,
            bts: self.opts.bts,
            pebs_data_cfg: self.opts.pmu == PmuProfile::Icelake,
            arch_lbr: self.opts.arch_lbr,
            lbr: self.opts.pmu.lbr_layout(),
        }
    }

    /// WRMSR about to execute: the facade decides (`pttrace_core::system_cpu::wrmsr`), the
    /// plugin's `QemuPort` carries out what only QEMU can.
    fn wrmsr(&self, v: &mut Vcpu, ip: u64, nlip: u64) {
        let effect = system_cpu::wrmsr::wrmsr(&mut QemuPort::new(self, v), &self.msr_map(), ip, nlip);
        if effect == Wrmsr::Pt(WriteEffect::TraceEnabled) {
            // meta.txt: the settings of every enabling WRMSR (e.g. DisTNT) for the decoder.
            self.ctl_used.fetch_or(v.msrs.ctl.0, Ordering::Relaxed);
        }
    }

    /// QEMU's TCG does not implement RDPMC and has just delivered #UD for it: the facade
    /// completes it from the PMU or re-delivers the #GP(0) hardware raises
    /// (`pttrace_core::system_cpu::rdpmc`).
    fn complete_rdpmc(&self, v: &mut Vcpu, resume: u64) -> RdpmcOutcome {
        system_cpu::rdpmc::complete(&mut QemuPort::new(self, v), resume)
    }

    /// Make QEMU raise #GP(0) at the RDMSR or WRMSR about to execute: RDMSR of an MSR QEMU
    /// faults on, WRMSR of IA32_APIC_BASE with reserved bits set. The guest's RCX/RDX come back
    /// when the exception is delivered (`on_discon`).
    fn raise_gp(v: &mut Vcpu, insn: MsrInsn, rcx: u64, rdx: u64) {
        v.pending.gp_restore = Some((rcx, rdx));
        match insn {
            MsrInsn::Rdmsr => {
                v.regs.set("rcx", MSR_X2APIC_DFR);
            }
            MsrInsn::Wrmsr => {
                v.regs.set("rcx", MSR_IA32_APIC_BASE);
                v.regs.set("rdx", 0xFFFF_FFFF);
            }
        }
    }

    /// LGDT / LIDT m16&64 (or m16&32): the table base they load (GDTR.base for reading CS
    /// descriptors, IDTR.base for re-delivering RDPMC's #UD as #GP).
    fn table_base(&self, v: &Vcpu, ip: u64, bytes: &[u8]) -> Option<u64> {
        let cr0 = v.regs.get("cr0").unwrap_or(0);
        // The modes of the current block if the model saw it start, else the instruction's own.
        let modes = cs_cache::operand_modes(v.cur_modes, consistent_modes([bytes]), !v.blind);
        let bitness = match current_context_after_load(&v.regs, v.gdt_base, modes, v.proven, v.tracer.context().mode, v.cs_load).mode {
            ExecMode::Bit16 => 16,
            ExecMode::Bit32 => 32,
            ExecMode::Bit64 => 64,
        };
        let addr = operand_address(&v.regs, bytes, ip, bitness, cr0 & 1 == 0)?;
        let n = pseudo_descriptor_base_len(bytes, bitness)?;
        let mut b = [0u8; 8];
        guest::read_vaddr(addr + 2, &mut b[..n]).then(|| u64::from_le_bytes(b))
    }

    fn on_discon(&self, vcpu: VCPUIndex, ty: i32, from: u64, to: u64) {
        self.with_vcpu(vcpu, |sh, v| {
            // The next block is a handler (or the RDPMC's successor): read its address and the
            // mode registers.
            v.after = None;
            v.mode_regs = None;
            sh.apply_pending(v);
            if let Some((rcx, rdx)) = v.pending.gp_restore.take() {
                v.regs.set("rcx", rcx);
                v.regs.set("rdx", rdx);
            }
            let mut to = to;
            match discontinuity::classify(ty & DISCON_EXCEPTION != 0, v.exception_pending, &mut v.pending.rdpmc, from) {
                Discontinuity::Announced => {
                    v.flow.exception_announced();
                    v.exception_pending = true;
                    return;
                }
                Discontinuity::RdpmcUd { resume } => match sh.complete_rdpmc(v, resume) {
                    RdpmcOutcome::Completed => {
                        v.exception_pending = false;
                        v.flow.exception_cancelled();
                        return;
                    }
                    RdpmcOutcome::Gp(handler) => to = handler,
                    RdpmcOutcome::Unchanged => {}
                },
                Discontinuity::Delivered => {}
            }
            // The ground truth lists retired instructions: a faulting instruction and an INT n /
            // INT3 do not retire before the event (PT reports them with a FUP at their own
            // address, and decoders show the event before them).
            let exception = std::mem::take(&mut v.exception_pending);
            if exception {
                if let Some(t) = v.truth.as_mut() {
                    let line = format!("{from:x}\n");
                    if t.ends_with(line.as_bytes()) {
                        t.truncate(t.len() - line.len());
                    }
                }
            }
            // Annotation for BTS ground truth: the event as QEMU delivered it (QEMU's `from` is
            // the faulting instruction, the INT n, or the interrupted instruction that runs next).
            if let Some(t) = v.truth.as_mut() {
                let _ = writeln!(crate::user::HexLine(t), "#event {from:x} {to:x}");
            }
            discontinuity::before_delivery(&mut QemuPort::new(sh, v), to, exception);
            // The event loads CS (the handler's) with the current IA32_EFER.LMA.
            v.cs_load.loaded(v.regs.get("efer").unwrap_or(0) & (1 << 10) != 0);
            // The handler's block is not known yet: the descriptor decides (ModeSet::ALL).
            let mut cpu = LiveCpu { regs: &v.regs, gdt_base: v.gdt_base, modes: ModeSet::ALL, proven: v.proven, cached: v.tracer.context().mode, cs_load: v.cs_load };
            let last_started = sh.last_started.take(vcpu, u64::MAX);
            let lbr_on = sh.lbr_recording(v);
            let lbr_clock = if lbr_on { sh.core_clock(v) } else { 0 };
            let mut sink = Retire {
                pt: &mut v.tracer,
                rtit: v.rtit.as_mut(),
                bts: &mut v.bts,
                bts_pmi: false,
                pmu: &mut v.pmu,
                lbr_clock,
                lbr: lbr_on.then(|| Self::lbr_unit(sh.opts.arch_lbr, &mut v.lbr, &mut v.arch_lbr)),
                lbr_freeze_after: false,
                pebs_eventing: &mut v.pebs_eventing,
            };
            let lma = v.mode_regs.is_some_and(|(_, _, efer)| efer & (1 << 10) != 0);
            let (lip, regs) = (sh.opts.caps.lip, &v.regs);
            let handler_base = |t: &Tracer| discontinuity::handler_ip_base(t.context().mode, lma, lip, to, || regs.get("rip").unwrap_or(to));
            let seen = discontinuity::deliver(&mut v.flow, &mut sink, &mut cpu, from, to, last_started, handler_base);
            // The event loaded CS (the handler's): a mode proven for the interrupted code is
            // gone, also when the handler's blocks run unseen.
            v.proven = None;
            if seen.bts_pmi {
                Self::deliver_pmi();
            }
            if seen.pebs_due {
                sh.pebs_record(v, from);
            }
            let pmu_pmi = v.pmu.take_pmi();
            Self::counter_pmi(v, pmu_pmi);
            sh.drain(v);
        });
    }

    fn at_exit(&self) {
        crate::instrumentation::INSTRUMENTATION.report();
        for slot in self.vcpus.iter() {
            let mut guard = slot.lock();
            let Some(v) = guard.as_mut() else { continue };
            if let Some(ring) = self.rings.get(v.index as usize).and_then(|r| r.get()) {
                // Blocks recorded but not yet run through the model (the host copy gets their
                // bytes; guest memory is not written from this thread).
                // SAFETY: holding the vCPU's lock.
                unsafe { ring.take_shared(usize::MAX, |recs| self.run_recorded_all(v, recs, false)) };
            }
            // Everything still in the tracer (TNT bits, the internal buffer) is flushed.
            v.tracer.finish();
            if let Some(st) = v.tracer.buffer_stats() {
                eprintln!("pttrace: vCPU {} internal buffer: {st}", v.index);
            }
            if v.pebs_stats[1] + v.pebs_stats[2] > 0 {
                let [w, full, bad] = v.pebs_stats;
                eprintln!("pttrace: vCPU {} PEBS: {w} records written, {full} dropped at the absolute maximum, {bad} aimed at memory that is not RAM", v.index);
            }
            if v.output.restricted_bytes() + v.handoff.lost_after_stop() > 0 {
                eprintln!(
                    "pttrace: vCPU {}: {} trace bytes aimed at memory that is not RAM were dropped (SDM Table 33-5), {} generated after a ToPA STOP or output error were not written",
                    v.index,
                    v.output.restricted_bytes(),
                    v.handoff.lost_after_stop()
                );
            }
            if let Some(r) = v.rtit.as_ref() {
                let st = r.stats();
                eprintln!(
                    "pttrace: vCPU {} RTIT: {} packets, {} bytes, {} PSBs, {} buffer overflows, {} packets dropped during overflows, {} bytes not yet drained",
                    v.index,
                    st.packets,
                    st.bytes,
                    st.psbs,
                    st.overflows,
                    st.dropped,
                    r.pending_bytes().len()
                );
            }
            let st = v.bts.stats();
            if st.records + st.full + st.unwritable + st.filtered > 0 {
                eprintln!(
                    "pttrace: vCPU {} BTS: {} records written, {} DS interrupts, {} filtered by CPL, {} not written (buffer full, BTINT=1), {} not written (DS area or buffer unmapped)",
                    v.index, st.records, st.pmis, st.filtered, st.full, st.unwritable
                );
            }
            let Some(out) = &self.out else { continue };
            out.send(FileKey::Pt(v.index + 1), v.tracer.take_output());
            if let Some(r) = v.rtit.as_mut() {
                let bytes = r.take_generated_bytes();
                if !bytes.is_empty() {
                    out.send(FileKey::Rtit(v.index + 1), bytes);
                }
            }
            if let Some(t) = v.truth.take() {
                out.send(FileKey::Truth(v.index + 1), t);
            }
        }
        if let (Some(out), Some(dir)) = (&self.out, &self.opts.out) {
            match out.sync() {
                Err(e) => eprintln!("pttrace: host copy of the trace incomplete: {e}"),
                // Every stream is complete: say so (a directory without end= was cut short).
                Ok(()) => {
                    let meta = format!(
                        "{}{}end=exit\n",
                        system_meta(&self.opts),
                        decoder_meta(RtitCtl(self.ctl_used.load(Ordering::Relaxed)))
                    );
                    if let Err(e) = crate::output::replace_file(&dir.join("meta.txt"), meta.as_bytes()) {
                        eprintln!("pttrace: writing meta.txt: {e}");
                    }
                }
            }
        }
    }
}

/// meta.txt of a full-system run (`end=` is added once every stream is complete).
/// The facade's guest port (`pttrace_core::system_cpu`) on a vCPU, in vCPU context: registers
/// and memory through QEMU, #GP(0) by steering the instruction, PMIs through the local APIC, and
/// the plugin's block-granular sequencing (counting, storing held output).
struct QemuPort<'a> {
    sh: &'a Shared,
    v: &'a mut Vcpu,
    mem: PhysMem,
    linear: LinearMem,
}

impl<'a> QemuPort<'a> {
    fn new(sh: &'a Shared, v: &'a mut Vcpu) -> Self {
        QemuPort { sh, v, mem: PhysMem, linear: LinearMem }
    }
}

impl GuestPort for QemuPort<'_> {
    type Mem = PhysMem;
    type Linear = LinearMem;

    fn cpu(&mut self) -> SystemCpu<'_, PhysMem> {
        let v = &mut *self.v;
        SystemCpu {
            msrs: &mut v.msrs,
            tracer: &mut v.tracer,
            output: &mut v.output,
            output_active: &mut v.output_active,
            handoff: &mut v.handoff,
            pmu: &mut v.pmu,
            lbr: &mut v.lbr,
            arch_lbr: &mut v.arch_lbr,
            bts: &mut v.bts,
            rtit: v.rtit.as_mut(),
            mem: &mut self.mem,
            native_leaves: &mut v.native_leaves,
        }
    }

    fn reg(&mut self, reg: Reg) -> u64 {
        self.v.regs.get(reg_name(reg)).unwrap_or(0)
    }

    fn set_reg(&mut self, reg: Reg, value: u64) -> bool {
        self.v.regs.set(reg_name(reg), value)
    }

    fn idt_base(&mut self) -> Option<u64> {
        self.v.idt_base
    }

    fn linear(&mut self) -> &mut LinearMem {
        &mut self.linear
    }

    fn context(&mut self) -> Context {
        let v = &*self.v;
        current_context(&v.regs, v.gdt_base, v.cur_modes, v.proven, v.tracer.context().mode)
    }

    fn cs_base(&mut self) -> u64 {
        Shared::ensure_cs_base(self.v);
        self.v.cs_base
    }

    fn guest_tsc(&mut self) -> u64 {
        self.sh.core_clock(self.v)
    }

    fn raise_gp(&mut self, insn: MsrInsn, rcx: u64, rdx: u64) {
        Shared::raise_gp(self.v, insn, rcx, rdx);
    }

    fn deliver_pmi(&mut self) {
        Shared::deliver_pmi();
    }

    fn apic_base_written(&mut self, value: u64) {
        guest::set_apic_base(value);
    }

    fn count_to(&mut self, ip: u64) {
        self.sh.count_to(self.v, ip);
    }

    fn count_cycles(&mut self) {
        self.sh.count_cycles(self.v);
    }

    fn store_held(&mut self) {
        self.sh.store_held(self.v);
    }

    fn drain(&mut self) {
        self.sh.drain(self.v);
    }

    fn flush_output(&mut self) {
        self.sh.flush_output(self.v);
    }
}

/// The gdbstub name of a register the facade uses (`crate::regs`).
#[inline(always)]
fn reg_name(reg: Reg) -> &'static str {
    match reg {
        Reg::Rax => "rax",
        Reg::Rbx => "rbx",
        Reg::Rcx => "rcx",
        Reg::Rdx => "rdx",
        Reg::Rsp => "rsp",
        Reg::Rip => "rip",
        Reg::Rflags => "eflags",
        Reg::Cs => "cs",
        Reg::Ss => "ss",
        Reg::Cr0 => "cr0",
        Reg::Cr2 => "cr2",
        Reg::Cr4 => "cr4",
        Reg::Efer => "efer",
    }
}

fn system_meta(opts: &SystemOptions) -> String {
    format!("format=pttrace-1\nmode=system\noptions={}\n", opts.raw.join(","))
}

/// meta.txt lines for the IA32_RTIT_CTL settings that change how a trace decodes, from the OR
/// of every enabling CTL value of the run; nothing for traces without them (older meta.txt
/// files stay as they were).
fn decoder_meta(used: RtitCtl) -> String {
    let mut m = String::new();
    if used.dis_tnt() {
        // IA32_RTIT_CTL[55] DisTNT: no TNT packets, the instruction flow cannot be walked.
        m.push_str("dis_tnt=1\n");
    }
    if used.event_en() {
        // IA32_RTIT_CTL[31] EventEn: MODE.Exec carries RFLAGS.IF; libipt reports it with
        // enable_iflags_events, "Use this only when Event Tracing was enabled".
        m.push_str("event_trace=1\n");
    }
    m
}

/// Effective linear address of the memory operand of the instruction in `bytes` (flat segments
/// except FS/GS bases in 64-bit mode, DS.selector << 4 in real mode).
fn operand_address(regs: &Regs, bytes: &[u8], ip: u64, bitness: u32, real_mode: bool) -> Option<u64> {
    let m = memory_operand(bytes, ip, bitness)?;
    Some(operand_linear_address(&m, bitness, real_mode, |n| regs.get(n).unwrap_or(0)))
}

/// enum qemu_plugin_discon_type (qemu-plugin.h, QEMU 10.2).
const DISCON_INTERRUPT: i32 = 1;
const DISCON_EXCEPTION: i32 = 2;

type DisconCb = extern "C" fn(id: qemu_plugin::sys::qemu_plugin_id_t, vcpu: u32, ty: i32, from: u64, to: u64);

unsafe extern "C" {
    /// QEMU 10.2 plugin API; not bound by the qemu-plugin crate 10.1.0-v2.
    fn qemu_plugin_register_vcpu_discon_cb(id: qemu_plugin::sys::qemu_plugin_id_t, ty: i32, cb: DisconCb);
}

extern "C" fn discon(_id: qemu_plugin::sys::qemu_plugin_id_t, vcpu: u32, ty: i32, from: u64, to: u64) {
    if let Some(sh) = SHARED.get() {
        guarded("discontinuity callback", || sh.on_discon(vcpu, ty, from, to));
    }
}

/// QEMU's `-icount` shift (`clock::icount_shift`), from its command line.
fn icount_shift() -> Option<u32> {
    let cmdline = std::fs::read("/proc/self/cmdline").ok()?;
    let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    clock::icount_shift(&args)
}

/// Single-threaded TCG (`-accel tcg,thread=single`, or `-icount`) shares translated blocks between
/// vCPUs and QEMU 10.2 then passes the translating vCPU's index to execute callbacks
/// (accel/tcg/plugin-gen.c gen_cpu_index without CF_PARALLEL), so per-vCPU state would mix.
fn single_threaded_tcg() -> bool {
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else { return false };
    let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    args.iter().any(|a| a.contains("thread=single") || a == "-icount" || a == "--icount")
}

pub fn install(id: PluginId, args: &Args, smp_vcpus: i64, max_vcpus: i64) -> qemu_plugin::Result<()> {
    let opts = SystemOptions::parse(args.raw.iter().map(String::as_str)).unwrap_or_else(|e| fail(&e.0));
    if smp_vcpus > 1 && single_threaded_tcg() {
        fail(&format!(
            "{smp_vcpus} vCPUs with single-threaded TCG (thread=single or -icount): QEMU then reports a \
             wrong vCPU index to plugin callbacks; use the default multi-threaded TCG or -smp 1"
        ));
    }
    // Guest RAM, from QEMU's command line (issue 12): the plugin never accesses anything else.
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let qemu_args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    match pttrace_core::phys_map::PhysMap::from_qemu_args(&qemu_args) {
        Ok(map) => guest::set_phys_map(map),
        Err(e) => fail(&e),
    }
    let out = match &opts.out {
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                fail(&format!("option 'out': cannot create {}: {e}", dir.display()));
            }
            let o = Output::start(dir).unwrap_or_else(|e| fail(&format!("cannot start writer thread: {e}")));
            o.send(FileKey::Code, b"PTCODE1\n".to_vec());
            if let Err(e) = std::fs::write(dir.join("meta.txt"), system_meta(&opts)) {
                fail(&format!("option 'out': cannot write meta.txt: {e}"));
            }
            Some(o)
        }
        None => None,
    };
    let drainer = crate::start_buffer(opts.buffer);
    // Recording blocks for the model to run later (issue 13) needs fixed scoreboards (the block
    // callback keeps a pointer to its `last_started` entry), the host TSC as the clock (a clock
    // counting instructions must be read as each block starts), no drain model and no RTIT
    // (see `record_budget` for what is decided at run time: PEBS counters bound a budget as
    // interrupting ones do, `Pmu::blocks_before_pmi`). With ground truth the
    // per-instruction log runs the recorded blocks at once (`with_vcpu`), which is how the
    // guest tests check the recording's addresses against QEMU's.
    let may_record = max_vcpus <= 16
        && icount_shift().is_none()
        && host_tsc().is_some()
        && opts.buffer.is_none()
        && !opts.rtit
        // PTTRACE_RECORD=0 (tests and measurements): the model runs at every block, as before.
        && std::env::var_os("PTTRACE_RECORD").is_none_or(|v| v != "0");
    let shared = Shared {
        opts,
        out,
        vcpus: (0..MAX_VCPUS).map(|_| VcpuCell::new(None)).collect(),
        fronts: (0..16).map(|_| FrontCell(UnsafeCell::new(None))).collect(),
        rings: (0..16).map(|_| OnceLock::new()).collect(),
        n_rings: AtomicUsize::new(0),
        beside: (0..16).map(|_| AtomicBool::new(true)).collect(),
        encoder: OnceLock::new(),
        may_record,
        code: crate::output::CodeImageV1::default(),
        last_started: PerVcpuU64::new(),
        ctl_used: AtomicU64::new(0),
        // QEMU allocates scoreboards for 16 vCPUs and moves them only when a vCPU with a higher
        // index appears (plugins/core.c, plugin_grow_scoreboards__locked).
        fixed_scoreboards: max_vcpus <= 16,
        need_block_cb: PerVcpuU64::new(),
        pebs_step: PerVcpuU64::new(),
        insns: PerVcpuU64::new(),
        icount_shift: icount_shift(),
        drainer,
        tsc_offset: AtomicU64::new(0),
        tsc_offset_known: AtomicBool::new(false),
    };
    if SHARED.set(shared).is_err() {
        fail("plugin loaded twice");
    }
    // The encoder thread runs recorded blocks beside the vCPUs while each has a host CPU to
    // itself (`pttrace_core::model_placement`, as in user mode; issue 13 step 21).
    // PTTRACE_ENCODER=0 (measurements): no thread, every vCPU runs its recorded blocks itself;
    // PTTRACE_ENCODER=2: every vCPU beside the thread whatever its share of CPU time.
    let mode = match std::env::var("PTTRACE_ENCODER").as_deref() {
        Ok("0") => None,
        Ok("2") => Some(EncoderMode::Always),
        _ => Some(EncoderMode::Adaptive),
    };
    if let (true, Some(mode)) = (may_record, mode) {
        let sh: &'static Shared = SHARED.get().expect("set above");
        let _ = sh.encoder.set(mode);
        let spawned = std::thread::Builder::new().name("pttrace-encoder".into()).spawn(move || sh.encoder_loop());
        if let Err(e) = spawned {
            fail(&format!("cannot start the encoder thread: {e}"));
        }
    }
    let truth = SHARED.get().is_some_and(|sh| sh.opts.truth);
    crate::instrumentation::INSTRUMENTATION.start(id, truth);
    register_callbacks(id);
    Ok(())
}

/// The full-system callbacks besides translation and vCPU init/exit (at install and after
/// `qemu_plugin_reset`, `crate::instrumentation`).
pub fn register_callbacks(id: PluginId) {
    // SAFETY: plain extern "C" functions valid for the plugin's lifetime.
    unsafe {
        qemu_plugin_register_vcpu_discon_cb(id, DISCON_INTERRUPT | DISCON_EXCEPTION, discon);
        qemu_plugin::sys::qemu_plugin_register_atexit_cb(id, Some(at_exit), std::ptr::null_mut());
    }
}

extern "C" fn at_exit(_id: PluginId, _udata: *mut std::ffi::c_void) {
    if let Some(sh) = SHARED.get() {
        guarded("exit", || sh.at_exit());
    }
}

/// The execute callback of every translated block (user data: its `BlockInfo`).
extern "C" fn on_block_exec(vcpu: VCPUIndex, info: *mut std::ffi::c_void) {
    // SAFETY: registered in `translate` with a leaked `&'static BlockInfo`.
    let info: &'static BlockInfo = unsafe { &*(info as *const BlockInfo) };
    // SAFETY: the block callback runs on the vCPU's own thread; the reference ends here.
    let Some(front) = (unsafe { front_of(vcpu) }) else { return on_block_general(vcpu, info, 0, false) };
    match Shared::record_block(front, info) {
        None => {}
        Some(last_started) => on_block_general(vcpu, info, last_started, true),
    }
}

/// `Front` of `vcpu`, once it exists (issue 13: no test of SHARED, no bounds check of its
/// vector on the block callback's path).
///
/// # Safety
/// Only on `vcpu`'s own thread, and not while another reference from this call exists.
#[inline(always)]
unsafe fn front_of(vcpu: VCPUIndex) -> Option<&'static mut Front> {
    let ptr = FRONTS.get(vcpu as usize)?.load(Ordering::Relaxed);
    // SAFETY: set once by `vcpu_init` to the vCPU's `Front`, which is never moved or freed; see
    // the function's contract.
    unsafe { ptr.as_mut() }
}

/// The block callback past its common case (`Shared::record_block`): `record_block_general`,
/// then the model. `extern "C"` (cannot unwind, like the callback): the callback needs no
/// unwind edge around it, saves no registers, and reaches it by a tail jump. `taken`:
/// `last_started` was taken from the scoreboard already (the vCPU has a `Front`).
#[inline(never)]
extern "C" fn on_block_general(vcpu: VCPUIndex, info: &'static BlockInfo, last_started: u64, taken: bool) {
    let Some(sh) = SHARED.get() else { return };
    let (last_started, loaded) = match (taken, unsafe { front_of(vcpu) }) {
        // SAFETY: on the vCPU's own thread; the reference ends here.
        (true, Some(front)) => match Shared::record_block_general(front, info, last_started) {
            Ok(()) => return,
            Err(last_started) => (Some(last_started), front.loaded_rip.take()),
        },
        _ => (None, None),
    };
    on_block_model(sh, vcpu, info, last_started, loaded);
}

/// The block callback's path through the model, out of line so that recording a block (the
/// common case) saves no registers.
#[cold]
#[inline(never)]
fn on_block_model(sh: &'static Shared, vcpu: VCPUIndex, info: &'static BlockInfo, last_started: Option<u64>, loaded: Option<u64>) {
    guarded("block callback", || sh.with_vcpu(vcpu, |sh, v| sh.on_block(v, info, last_started, loaded)));
}

/// The load of a near RET (C3H / C2H iw: the return address it pops) or of a near indirect
/// JMP / CALL through memory (FF /4, FF /2; `insn_class::loads_branch_target`): the value is
/// the RIP the next block starts at (zero-extended from the operand size, as the instruction
/// loads it), kept for that block's callback (`Front::loaded_rip`) so that it need not read RIP.
/// Registered on every translation with a block callback whose last instruction is such a
/// transfer in a mode (`SysBlock::target_loaded`); the next block's callback takes the value
/// only when the previous block's last instruction, in the tracked mode, is one (so that
/// load ran and set it).
extern "C" fn on_target_load(vcpu: VCPUIndex, info: qemu_plugin::sys::qemu_plugin_meminfo_t, _vaddr: u64, _: *mut std::ffi::c_void) {
    use qemu_plugin::sys::qemu_plugin_mem_value_type as T;
    // SAFETY: on the vCPU's own thread (a memory callback of its instruction); `info` is the
    // access QEMU passes, valid during the callback; the union member read is the one `type_`
    // names.
    unsafe {
        let Some(front) = front_of(vcpu) else { return };
        let v = qemu_plugin::sys::qemu_plugin_mem_get_value(info);
        front.loaded_rip = Some(match v.type_ {
            T::QEMU_PLUGIN_MEM_VALUE_U8 => u64::from(v.data.u8_),
            T::QEMU_PLUGIN_MEM_VALUE_U16 => u64::from(v.data.u16_),
            T::QEMU_PLUGIN_MEM_VALUE_U32 => u64::from(v.data.u32_),
            T::QEMU_PLUGIN_MEM_VALUE_U64 => v.data.u64_,
            T::QEMU_PLUGIN_MEM_VALUE_U128 => v.data.u128_.low,
        });
    }
}

/// Registers `cb` on instruction `i` of `tb`, called only while the vCPU's `flag` entry compares
/// to 0 by `cond`, with `udata` (an address, or 0) as its user data.
fn register_insn_cond_cb(
    tb: &TranslationBlock,
    i: usize,
    cb: extern "C" fn(VCPUIndex, *mut std::ffi::c_void),
    flags: CallbackFlags,
    cond: qemu_plugin::sys::qemu_plugin_cond,
    flag: &PerVcpuU64,
    udata: u64,
) {
    // SAFETY: `tb` is the translation being instrumented and `i` one of its instructions (the
    // callers iterate over them); `cb` is a plain function valid for the plugin's lifetime.
    unsafe {
        let handle = qemu_plugin::sys::qemu_plugin_tb_get_insn(crate::tb_ptr(tb), i);
        qemu_plugin::sys::qemu_plugin_register_vcpu_insn_exec_cond_cb(handle, Some(cb), flags, cond, flag.0, 0, udata as usize as *mut std::ffi::c_void);
    }
}

/// A far JMP/CALL/RET or IRET is about to execute while the vCPU's blocks run unseen: CS is
/// reloaded (the selector may stay the same with another descriptor), so a mode proven for it
/// is gone, and CS is loaded with the current IA32_EFER.LMA (`pttrace_core::cs_cache`).
extern "C" fn on_cs_load(vcpu: VCPUIndex, _: *mut std::ffi::c_void) {
    if let Some(sh) = SHARED.get() {
        guarded("CS load", || {
            sh.with_vcpu(vcpu, |_, v| {
                v.proven = None;
                v.cs_load.loaded(v.regs.get("efer").unwrap_or(0) & (1 << 10) != 0);
            })
        });
    }
}

/// The per-instruction PEBS callback (user data: the instruction's address at translation).
extern "C" fn on_pebs_step(vcpu: VCPUIndex, ip: *mut std::ffi::c_void) {
    if let Some(sh) = SHARED.get() {
        guarded("PEBS step", || sh.with_vcpu(vcpu, |sh, v| sh.pebs_step(v, ip as usize as u64)));
    }
}

pub fn vcpu_init(vcpu: VCPUIndex) {
    if let Some(sh) = SHARED.get() {
        sh.vcpu_init(vcpu);
    }
}

pub fn translate(tb: &TranslationBlock) {
    if let Some(sh) = SHARED.get() {
        sh.translate(tb);
    }
}
