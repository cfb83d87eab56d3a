//! User-mode retirement sequencing: turns "block starting at PC P began executing" into the
//! retirement events the PT model needs, the way a CPU traced with `perf record -e intel_pt//u`
//! would see them.
//!
//! Under `qemu-x86_64` the kernel is QEMU itself, so the kernel side of every transition is
//! implied: a SYSCALL (or INT n) is a far transfer into ring 0, where User-only tracing has no
//! context (ContextEn = 0, TIP.PGD with the IP suppressed), and whatever user code runs next —
//! the instruction after the SYSCALL, a signal handler, a new thread — is a far transfer back
//! into ring 3 (TIP.PGE). Asynchronous signals are interrupts: FUP(the interrupted IP, as saved
//! in the signal frame), TIP.PGD, then TIP.PGE at the handler (SDM Table 33-23: the FUP of an
//! interrupt is the next instruction that would have executed).
//!
//! QEMU ends a translation block at every COFI, so only a block's last instruction can change the
//! flow, and the next block's PC is that instruction's outcome.
//!
//! The sequencer drives any [`UserTracer`]: the Intel PT [`Tracer`] and the Atom RTIT
//! [`RtitStream`] receive the same events.

use crate::insn_class::{BranchKind, ClassifiedInsn, FarKind};
use crate::pt::tracer::{AsyncKind, Context, Tracer};
use crate::rtit::setup::RtitStream;

/// A ring-0 address standing for "somewhere in the kernel". It is never emitted: with User-only
/// tracing every transfer into the kernel produces a TIP.PGD with the IP suppressed (RTIT:
/// FUP.PGD with the user NLIP and no TIP).
pub const KERNEL_ENTRY: u64 = 0xffff_ffff_8100_0000;

/// The kernel's return to user mode (SYSRET/IRET, 3 bytes with REX.W) as an instruction address:
/// RTIT attributes a FUP.PCC after an instruction to its NLIP; never emitted otherwise.
pub const KERNEL_EXIT: u64 = KERNEL_ENTRY + 0x1000;
const KERNEL_EXIT_NLIP: u64 = KERNEL_EXIT + 3;

/// The retirement events of a user-mode thread, as [`UserFlow`] produces them.
pub trait UserTracer {
    /// Turn tracing on while the thread is still in the kernel (as perf does at exec/clone).
    fn start_in_kernel(&mut self);
    /// The instruction at `ip` (NLIP `nlip`) of class `kind` retired; execution continues at
    /// `next` in the same context.
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64);
    /// Fast path for the block end `end` whose fixed successor `next` was taken (a
    /// non-interrupted `branch` of no-COFI, conditional, direct JMP or CALL class): returns false,
    /// having done nothing, when the tracer cannot take a shortcut and `branch` must run.
    #[inline]
    fn direct(&mut self, end: &BlockEnd, next: u64) -> bool {
        let _ = (end, next);
        false
    }
    /// The far-transfer instruction at `ip` retired into context `to` at `next`.
    fn far_transfer(&mut self, ip: u64, nlip: u64, kind: FarKind, next: u64, to: Context);
    /// INT n at `ip` trapped to `handler` in context `to`.
    fn software_interrupt(&mut self, ip: u64, nlip: u64, handler: u64, to: Context);
    /// An asynchronous interrupt (a signal) with `resume_ip` the next instruction that would have
    /// executed, delivered to `handler` in context `to`.
    fn interrupt(&mut self, resume_ip: u64, handler: u64, to: Context);
    /// End of the thread's trace: write out what is pending.
    fn finish(&mut self);
    /// The clock behind timing packets.
    fn set_tsc(&mut self, tsc: u64);
    /// Bytes generated and not yet taken.
    fn output_len(&self) -> usize;
    /// Take the bytes generated so far.
    fn take_output(&mut self) -> Vec<u8>;
    /// (bytes, packets, PSBs) generated so far.
    fn totals(&self) -> (u64, u64, u64);
}

impl UserTracer for Tracer {
    fn start_in_kernel(&mut self) {
        Tracer::far_transfer(self, FarKind::Syscall, KERNEL_ENTRY, Context::KERNEL64);
        self.enable(KERNEL_ENTRY);
    }
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
        Tracer::branch(self, ip, nlip, kind, next)
    }
    #[inline(always)]
    fn direct(&mut self, end: &BlockEnd, next: u64) -> bool {
        let d = &end.direct;
        self.direct_steady(next, d.conditional, next != d.fall, d.push)
    }
    fn far_transfer(&mut self, _ip: u64, _nlip: u64, kind: FarKind, next: u64, to: Context) {
        Tracer::far_transfer(self, kind, next, to)
    }
    fn software_interrupt(&mut self, ip: u64, _nlip: u64, handler: u64, to: Context) {
        self.async_event(AsyncKind::SoftwareInterrupt { ip }, handler, to)
    }
    fn interrupt(&mut self, resume_ip: u64, handler: u64, to: Context) {
        self.async_event(AsyncKind::Interrupt { resume_ip }, handler, to)
    }
    fn finish(&mut self) {
        Tracer::finish(self)
    }
    fn set_tsc(&mut self, tsc: u64) {
        Tracer::set_tsc(self, tsc)
    }
    fn output_len(&self) -> usize {
        self.output().len()
    }
    fn take_output(&mut self) -> Vec<u8> {
        Tracer::take_output(self)
    }
    fn totals(&self) -> (u64, u64, u64) {
        let s = self.stats();
        (s.bytes, s.packets, s.psbs)
    }
}

/// A [`UserTracer`] with a steady state for runs of recorded blocks (issue 13), which
/// [`UserFlow::run`] uses.
pub trait BatchTracer: UserTracer {
    /// The blocks of `blocks`, oldest first, after the block that ended with `prev`, for as long
    /// as the tracer's steady state explains each from the one before: exactly what `set_tsc`
    /// with `clock` advanced by the block's instruction count, then `UserFlow::block`, do for
    /// each. `clock` and `prev` follow the blocks taken. Returns how many were taken, and whether
    /// the steady state may go on with the next (`again`); without that, the next block (if
    /// any) is for the general path.
    fn steady_blocks<B: ExecutedBlock>(&mut self, prev: &mut &'static BlockEnd, blocks: &[B], clock: &mut u64) -> (usize, bool);
}

impl BatchTracer for Tracer {
    #[inline]
    fn steady_blocks<B: ExecutedBlock>(&mut self, prev: &mut &'static BlockEnd, blocks: &[B], clock: &mut u64) -> (usize, bool) {
        let Some((n, psb_due)) = self.steady_run().map(|mut run| run.user_blocks(prev, blocks, clock)) else {
            return (0, false);
        };
        if psb_due {
            self.set_tsc(*clock);
            self.psb_if_due(blocks[n - 1].pc());
        } else if n == blocks.len() {
            self.set_tsc(*clock);
        }
        (n, psb_due)
    }
}

impl BatchTracer for RtitStream {
    #[inline]
    fn steady_blocks<B: ExecutedBlock>(&mut self, prev: &mut &'static BlockEnd, blocks: &[B], clock: &mut u64) -> (usize, bool) {
        (self.tracer.user_blocks(prev, blocks, clock), false)
    }
}

/// RTIT: the FUP.PGD of a transfer into the kernel carries the NLIP of the user instruction
/// (Table 1), so the flow reports instruction lengths; the kernel's own return instruction is at
/// [`KERNEL_EXIT`].
impl UserTracer for RtitStream {
    fn start_in_kernel(&mut self) {
        self.tracer.set_context(Context::KERNEL64);
        // The configuration was accepted when the stream was programmed; enabling only sets
        // Trace_En in the same value.
        let _ = self.config.enable(&mut self.tracer, KERNEL_ENTRY, &mut self.out);
    }
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
        self.tracer.branch(ip, nlip, kind, next)
    }
    #[inline]
    fn direct(&mut self, end: &BlockEnd, next: u64) -> bool {
        // RTIT remembers the NLIP of every direct CALL, the `call next; pop` idiom included.
        let last = end.last;
        let (conditional, call) = match last.kind {
            BranchKind::None | BranchKind::AlwaysFaults | BranchKind::DirectJump { .. } => (false, false),
            BranchKind::Conditional { .. } => (true, false),
            BranchKind::DirectCall { .. } => (false, true),
            _ => return false,
        };
        let nlip = last.nlip();
        self.tracer.direct_steady(conditional, next != nlip, call.then_some(nlip))
    }
    fn far_transfer(&mut self, ip: u64, nlip: u64, kind: FarKind, next: u64, to: Context) {
        self.tracer.far_transfer(ip, nlip, kind, next, to)
    }
    fn software_interrupt(&mut self, ip: u64, nlip: u64, handler: u64, to: Context) {
        self.tracer.software_interrupt(ip, nlip, handler, to)
    }
    fn interrupt(&mut self, resume_ip: u64, handler: u64, to: Context) {
        self.tracer.async_event(AsyncKind::Interrupt { resume_ip }, handler, to)
    }
    fn finish(&mut self) {
        self.tracer.finish()
    }
    fn set_tsc(&mut self, tsc: u64) {
        self.tracer.set_tsc(tsc)
    }
    fn output_len(&self) -> usize {
        RtitStream::output_len(self)
    }
    fn take_output(&mut self) -> Vec<u8> {
        RtitStream::take_output(self)
    }
    fn totals(&self) -> (u64, u64, u64) {
        let s = self.tracer.stats();
        (s.bytes, s.packets, s.psbs)
    }
}

/// What the tracer needs to know about the last instruction of an executed block, with what the
/// per-block path needs precomputed at translation time (issue 13): the block's possible
/// successors when they are fixed (straight-line code and direct branches) and what such a
/// successor means for the trace (a TNT bit, a RET-compression push), so that the common case
/// costs two compares and no dispatch on the instruction class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockEnd {
    /// The block's last instruction. When it is a REP string instruction QEMU re-enters it as a
    /// new block for further iterations, but it retires once.
    pub last: ClassifiedInsn,
    pub(crate) direct: DirectFlow,
    /// A near RET, not a REP string instruction: it may compress (`SteadyRun::user_blocks`).
    pub(crate) compressible_ret: bool,
    /// A near indirect JMP, CALL or RET, not a REP string instruction: any successor is
    /// explained, by a TIP unless the RET compresses (the RTIT steady run,
    /// `RtitTracer::user_blocks`).
    pub(crate) indirect: bool,
    /// RTIT: the RTIT_LAST_CALL_NLIP value a near CALL leaves behind (NLIP_Valid and its
    /// NLIP[47:0], §4.2.3.2; every near CALL, `call next` included); 0 for other classes.
    pub(crate) rtit_call: u64,
}

/// The outcome of a block whose last instruction has only fixed successors (no COFI, a
/// conditional branch, a direct JMP or CALL), in the form [`UserTracer::direct`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectFlow {
    /// Successors that need no further explanation (the same one twice for a single
    /// successor: `target` = `fall` unless `conditional`, which `SteadyRun::user_blocks`
    /// relies on); `NONE` for other classes (indirect transfers, far transfers, software
    /// interrupts, REP string instructions), which take the general path.
    pub target: u64,
    pub fall: u64,
    /// A conditional branch: one TNT bit, taken iff the successor is not `fall` (the NLIP).
    pub conditional: bool,
    /// The NLIP a direct CALL with a non-zero displacement pushes on the RET-compression stack
    /// (§33.4.2.2: the `call next; pop` idiom is not pushed); 0 for none.
    pub push: u64,
}

impl DirectFlow {
    const NONE: u64 = u64::MAX;

    /// No fixed successor: the general path explains the next block.
    pub(crate) const fn none() -> Self {
        DirectFlow { target: Self::NONE, fall: Self::NONE, conditional: false, push: 0 }
    }

    pub(crate) fn of(last: &ClassifiedInsn) -> Self {
        let nlip = last.nlip();
        let none = Self::none();
        if last.rep_string {
            return none;
        }
        match last.kind {
            BranchKind::None | BranchKind::AlwaysFaults => DirectFlow { target: nlip, fall: nlip, conditional: false, push: 0 },
            BranchKind::Conditional { target } => DirectFlow { target, fall: nlip, conditional: true, push: 0 },
            BranchKind::DirectJump { target } => DirectFlow { target, fall: target, conditional: false, push: 0 },
            BranchKind::DirectCall { target } => {
                DirectFlow { target, fall: target, conditional: false, push: if target != nlip { nlip } else { 0 } }
            }
            _ => none,
        }
    }

    /// Is `next` one of the fixed successors?
    #[inline]
    pub fn explains(&self, next: u64) -> bool {
        (next == self.target) | (next == self.fall)
    }

    /// The same outcome for the code run `delta` bytes from where it was classified (a
    /// PC-relative translation in full-system mode).
    #[inline]
    pub fn relocated(&self, delta: u64) -> Self {
        DirectFlow {
            target: self.target.wrapping_add(delta),
            fall: self.fall.wrapping_add(delta),
            conditional: self.conditional,
            push: if self.push != 0 { self.push.wrapping_add(delta) } else { 0 },
        }
    }
}

impl BlockEnd {
    pub fn new(last: ClassifiedInsn) -> Self {
        let indirect = matches!(last.kind, BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return) && !last.rep_string;
        let rtit_call = match last.kind {
            BranchKind::DirectCall { .. } | BranchKind::IndirectCall if !last.rep_string => {
                crate::rtit::msr::RtitLastCallNlip::holding(last.nlip()).0
            }
            _ => 0,
        };
        BlockEnd {
            last,
            direct: DirectFlow::of(&last),
            compressible_ret: last.kind == BranchKind::Return && !last.rep_string,
            indirect,
            rtit_call,
        }
    }

    /// Is `next` a possible successor of the last instruction without any interruption?
    fn explains(&self, next: u64) -> bool {
        let nlip = self.last.nlip();
        match self.last.kind {
            BranchKind::None | BranchKind::AlwaysFaults => next == nlip,
            BranchKind::Conditional { target } => next == target || next == nlip,
            BranchKind::DirectJump { target } | BranchKind::DirectCall { target } => next == target,
            BranchKind::IndirectJump
            | BranchKind::IndirectCall
            | BranchKind::Return
            | BranchKind::Far(_)
            | BranchKind::SoftwareInterrupt => true,
        }
    }

    /// No successor of the last instruction can be `next`: it has only fixed successors
    /// (straight-line code, conditional and direct branches) and `next` is none of them.
    pub fn excludes(&self, next: u64) -> bool {
        matches!(
            self.last.kind,
            BranchKind::None | BranchKind::AlwaysFaults | BranchKind::Conditional { .. } | BranchKind::DirectJump { .. } | BranchKind::DirectCall { .. }
        ) && !self.explains(next)
    }

    /// Could the block have been left through a signal even though `next` is explained?
    /// Only indirect transfers can land on a handler address by themselves.
    fn ambiguous(&self) -> bool {
        matches!(
            self.last.kind,
            BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return | BranchKind::Far(_)
        )
    }

    fn enters_kernel(&self) -> bool {
        matches!(
            self.last.kind,
            BranchKind::Far(FarKind::Syscall) | BranchKind::Far(FarKind::Sysenter) | BranchKind::SoftwareInterrupt
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Position {
    /// Not yet in user code (thread start) or inside the kernel (after SYSCALL).
    Kernel,
    /// The block with this end has been executed; its successor is not yet known. Block ends
    /// are translation-time records that live as long as the process (the plugin keeps one per
    /// translation), so the sequencer holds a reference, not a copy.
    After(&'static BlockEnd),
    /// The previous block stopped before its end (QEMU ends a block that rewrote its own code
    /// after the writing instruction): the next block continues it in sequence.
    Inside,
}

/// Counters of how transitions were explained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    pub blocks: u64,
    pub kernel_entries: u64,
    pub signals: u64,
    /// Transitions that neither the last instruction nor a signal frame explained.
    pub unexplained: u64,
    /// Blocks that re-entered the REP string instruction the previous block ended with: one
    /// instruction retired for both (code versions count instructions, issue 19).
    pub rep_reentries: u64,
}

/// Per-thread sequencer in front of a [`UserTracer`].
#[derive(Clone, Debug)]
pub struct UserFlow {
    pos: Position,
    stats: FlowStats,
}

impl Default for UserFlow {
    fn default() -> Self {
        UserFlow { pos: Position::Kernel, stats: FlowStats::default() }
    }
}

/// One executed block, as [`UserFlow::run`] takes them: where it started, its last
/// instruction, and how many instructions it retired.
pub trait ExecutedBlock {
    fn pc(&self) -> u64;
    fn end(&self) -> &'static BlockEnd;
    fn n_insns(&self) -> u64;
}

/// Answers "did the kernel just deliver a signal whose handler starts at `pc`?" by looking at the
/// guest's stack; returns the interrupted IP saved in the signal frame.
pub trait SignalProbe {
    fn signal_resume_ip(&mut self, pc: u64) -> Option<u64>;
}

impl<F: FnMut(u64) -> Option<u64>> SignalProbe for F {
    fn signal_resume_ip(&mut self, pc: u64) -> Option<u64> {
        self(pc)
    }
}

impl UserFlow {
    pub fn stats(&self) -> FlowStats {
        self.stats
    }

    /// `FlowStats::rep_reentries` so far.
    #[inline]
    pub fn rep_reentries(&self) -> u64 {
        self.stats.rep_reentries
    }

    /// Start tracing a thread: TraceEn is set while the thread is still in the kernel (as perf
    /// does at exec/clone), so the stream starts with PSB+ and the first user instruction gets a
    /// TIP.PGE.
    pub fn start<T: UserTracer + ?Sized>(&mut self, tracer: &mut T) {
        tracer.start_in_kernel();
        self.pos = Position::Kernel;
    }

    /// A block starting at `pc` is about to execute; `end` describes its last instruction.
    #[inline(always)]
    pub fn block<T: UserTracer + ?Sized>(&mut self, tracer: &mut T, pc: u64, end: &'static BlockEnd, probe: &mut impl SignalProbe) {
        self.stats.blocks += 1;
        if let Position::After(prev) = self.pos {
            // The common case: a fixed successor of straight-line code or a direct branch (a
            // signal delivered there would be unexplained: see `resolve`).
            if prev.direct.explains(pc) && tracer.direct(prev, pc) {
                self.pos = Position::After(end);
                return;
            }
        }
        match self.pos {
            Position::Kernel => tracer.far_transfer(KERNEL_EXIT, KERNEL_EXIT_NLIP, FarKind::Sysret, pc, Context::USER64),
            Position::After(prev) => self.resolve(tracer, prev, pc, probe),
            Position::Inside => {}
        }
        self.pos = Position::After(end);
    }

    /// Run executed blocks through the model, oldest first, exactly as `block` one at a time
    /// with the clock set before each (`clock` advanced by the block's instruction count, then
    /// `tracer.set_tsc(clock)`), and no signal probe. Runs of blocks the tracer's steady state
    /// explains go through it with its bookkeeping in registers (issue 13: most blocks of a
    /// user-mode trace, [`BatchTracer::steady_blocks`]); the rest take the general path.
    pub fn run<T: BatchTracer, B: ExecutedBlock>(&mut self, tracer: &mut T, blocks: &[B], clock: &mut u64) {
        let mut no_signal = |_: u64| None;
        let mut at = 0;
        while at < blocks.len() {
            if let Position::After(mut prev) = self.pos {
                let (n, again) = tracer.steady_blocks(&mut prev, &blocks[at..], clock);
                at += n;
                self.stats.blocks += n as u64;
                self.pos = Position::After(prev);
                if again || at == blocks.len() {
                    continue;
                }
            }
            // The general path for the block at `at` (its predecessor's fixed successors do not
            // explain it, or the tracer is not in its steady state).
            let b = &blocks[at];
            at += 1;
            *clock += b.n_insns();
            tracer.set_tsc(*clock);
            self.block(tracer, b.pc(), b.end(), &mut no_signal);
        }
    }

    fn resolve<T: UserTracer + ?Sized>(&mut self, tracer: &mut T, prev: &BlockEnd, pc: u64, probe: &mut impl SignalProbe) {
        let last = prev.last;
        if prev.enters_kernel() {
            self.stats.kernel_entries += 1;
            self.enter_kernel(tracer, prev);
            tracer.far_transfer(KERNEL_EXIT, KERNEL_EXIT_NLIP, FarKind::Sysret, pc, Context::USER64);
            return;
        }
        if prev.last.rep_string && pc == last.ip {
            self.stats.rep_reentries += 1;
            return; // the same REP string instruction continues
        }
        let explained = prev.explains(pc);
        let resume = if !explained || prev.ambiguous() { probe.signal_resume_ip(pc) } else { None };
        match resume {
            None if explained => tracer.branch(last.ip, last.nlip(), last.kind, pc),
            None => {
                // Nothing explains the transition: report it as an interrupt at the fall-through
                // so the stream stays decodable, and count it.
                self.stats.unexplained += 1;
                tracer.interrupt(last.nlip(), KERNEL_ENTRY, Context::KERNEL64);
                tracer.far_transfer(KERNEL_EXIT, KERNEL_EXIT_NLIP, FarKind::Iret, pc, Context::USER64);
            }
            Some(resume) => {
                self.stats.signals += 1;
                // The block's last instruction retired with `resume` as its outcome, unless the
                // signal interrupted the block before it (then `resume` lies inside the block).
                if prev.explains(resume) && !(prev.last.rep_string && resume == last.ip) {
                    tracer.branch(last.ip, last.nlip(), last.kind, resume);
                }
                tracer.interrupt(resume, KERNEL_ENTRY, Context::KERNEL64);
                tracer.far_transfer(KERNEL_EXIT, KERNEL_EXIT_NLIP, FarKind::Iret, pc, Context::USER64);
            }
        }
    }

    fn enter_kernel<T: UserTracer + ?Sized>(&mut self, tracer: &mut T, prev: &BlockEnd) {
        let (ip, nlip) = (prev.last.ip, prev.last.nlip());
        match prev.last.kind {
            BranchKind::SoftwareInterrupt => tracer.software_interrupt(ip, nlip, KERNEL_ENTRY, Context::KERNEL64),
            BranchKind::Far(kind) => tracer.far_transfer(ip, nlip, kind, KERNEL_ENTRY, Context::KERNEL64),
            _ => {}
        }
    }

    /// The last block stopped early, before the instruction at which the next block starts
    /// (the caller knows from the block's instructions): no instruction after that retired.
    pub fn cut_short(&mut self) {
        if let Position::After(_) = self.pos {
            self.pos = Position::Inside;
        }
    }

    /// The thread is stopped for good just before the block at `pc` (a default-fatal signal
    /// ends the process while the thread was about to run it, issue 20): the previous block's
    /// last instruction retired with `pc` as its outcome, then an interrupt that never returns
    /// (FUP(`pc`), TIP.PGD: SDM Table 33-23, the FUP of an interrupt is the next instruction
    /// that would have executed). Without it a block ending in a direct CALL or JMP would leave
    /// the stream ending after that branch, and a decoder follows a direct branch without a
    /// packet: it would report the target's instructions up to the next conditional or
    /// indirect branch as executed. A transition nothing explains ends like `finish`.
    pub fn stopped_at<T: UserTracer + ?Sized>(&mut self, tracer: &mut T, pc: u64) {
        if let Position::After(prev) = self.pos {
            let last = prev.last;
            if prev.enters_kernel() {
                // The thread never came back from the kernel.
                self.enter_kernel(tracer, prev);
            } else if last.rep_string && pc == last.ip {
                // Stopped between two iterations of the REP string instruction.
                tracer.interrupt(pc, KERNEL_ENTRY, Context::KERNEL64);
            } else if prev.explains(pc) && !matches!(last.kind, BranchKind::Far(_)) {
                // After a near indirect branch `pc` is taken as its target (the thread stops
                // before the model could read a signal frame there).
                tracer.branch(last.ip, last.nlip(), last.kind, pc);
                tracer.interrupt(pc, KERNEL_ENTRY, Context::KERNEL64);
            } else {
                return self.finish(tracer);
            }
        } else if self.pos == Position::Inside {
            tracer.interrupt(pc, KERNEL_ENTRY, Context::KERNEL64);
        }
        self.pos = Position::Kernel;
        tracer.finish();
    }

    /// The thread ends (exit, exit_group, or the process is torn down). A pending SYSCALL enters
    /// the kernel for good; a block that ended without a COFI is interrupted at its fall-through.
    /// A branch whose outcome was never observed produces nothing.
    pub fn finish<T: UserTracer + ?Sized>(&mut self, tracer: &mut T) {
        if let Position::After(prev) = self.pos {
            if prev.enters_kernel() {
                self.enter_kernel(tracer, prev);
            } else if matches!(prev.last.kind, BranchKind::None) {
                tracer.interrupt(prev.last.nlip(), KERNEL_ENTRY, Context::KERNEL64);
            }
        }
        self.pos = Position::Kernel;
        tracer.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::packet::{IpCompression, IpPayload, Packet};
    use crate::pt::rtit_ctl::RtitCtl;
    use crate::pt::tracer::TraceConfig;

    fn user_tracer() -> Tracer {
        let mut ctl = RtitCtl::default();
        ctl.set_user(true).set_branch_en(true);
        Tracer::new(TraceConfig { ctl, ..TraceConfig::default() }, Context::USER64).with_packet_log()
    }

    fn end(ip: u64, len: u8, kind: BranchKind, rep_string: bool) -> &'static BlockEnd {
        Box::leak(Box::new(BlockEnd::new(ClassifiedInsn { ip, len, kind, rep_string })))
    }

    fn no_signal(_: u64) -> Option<u64> {
        None
    }

    #[test]
    fn rep_string_reentered_as_a_new_block_produces_no_packets() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        let rep = end(0x401010, 2, BranchKind::None, true);
        f.block(&mut t, 0x401000, rep, &mut no_signal);
        t.take_packet_log();
        // QEMU re-enters `rep movsb` at its own address for the next chunk of iterations.
        f.block(&mut t, 0x401010, rep, &mut no_signal);
        f.block(&mut t, 0x401012, end(0x401012, 1, BranchKind::Return, false), &mut no_signal);
        assert_eq!(f.stats().unexplained, 0);
        assert!(t.take_packet_log().is_empty());
    }

    #[test]
    fn block_cut_short_by_its_own_store_continues_without_packets() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        // A block whose first instruction writes to its own code: QEMU stops it there and
        // restarts that instruction as a block of its own, then the rest as a new block.
        let cond = end(0x40100e, 2, BranchKind::Conditional { target: 0x401012 }, false);
        assert!(cond.excludes(0x401000) && cond.excludes(0x401007));
        assert!(!cond.excludes(0x401012) && !end(0x401010, 1, BranchKind::Return, false).excludes(0x401000));
        f.block(&mut t, 0x401000, cond, &mut no_signal);
        t.take_packet_log();
        f.cut_short();
        f.block(&mut t, 0x401000, end(0x401000, 7, BranchKind::None, false), &mut no_signal);
        f.block(&mut t, 0x401007, end(0x40100e, 2, BranchKind::Conditional { target: 0x401012 }, false), &mut no_signal);
        assert_eq!(f.stats().unexplained, 0);
        assert!(t.take_packet_log().is_empty());
    }

    #[test]
    fn unexplained_transition_is_counted_and_kept_decodable() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        f.block(&mut t, 0x401000, end(0x401008, 2, BranchKind::None, false), &mut no_signal);
        t.take_packet_log();
        f.block(&mut t, 0x409000, end(0x409000, 1, BranchKind::Return, false), &mut no_signal);
        assert_eq!(f.stats().unexplained, 1);
        let fup = IpPayload { compression: IpCompression::Update16, payload: 0x100a };
        let pge = IpPayload { compression: IpCompression::Update16, payload: 0x9000 };
        assert_eq!(
            t.take_packet_log(),
            [Packet::Fup(fup), Packet::TipPgd(IpPayload::SUPPRESSED), Packet::TipPge(pge)]
        );
    }

    #[test]
    fn thread_stopped_after_a_direct_call_ends_with_fup_at_the_target() {
        // Issue 20: a fatal signal stops the thread as it is about to run the called function.
        // Without FUP+TIP.PGD a decoder would follow the CALL and report the callee's first
        // instructions as executed.
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        f.block(&mut t, 0x401000, end(0x401008, 5, BranchKind::DirectCall { target: 0x402000 }, false), &mut no_signal);
        t.take_packet_log();
        f.stopped_at(&mut t, 0x402000);
        let fup = IpPayload { compression: IpCompression::Update16, payload: 0x2000 };
        assert_eq!(t.take_packet_log(), [Packet::Fup(fup), Packet::TipPgd(IpPayload::SUPPRESSED)]);
    }

    #[test]
    fn thread_stopped_after_a_taken_conditional_branch_reports_the_outcome_first() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        let jcc = end(0x401008, 2, BranchKind::Conditional { target: 0x401000 }, false);
        f.block(&mut t, 0x401000, jcc, &mut no_signal);
        t.take_packet_log();
        f.stopped_at(&mut t, 0x401000);
        let fup = IpPayload { compression: IpCompression::Update16, payload: 0x1000 };
        assert_eq!(
            t.take_packet_log(),
            [Packet::Tnt { bits: 1, count: 1 }, Packet::Fup(fup), Packet::TipPgd(IpPayload::SUPPRESSED)]
        );
    }

    #[test]
    fn thread_stopped_after_a_system_call_ends_in_the_kernel() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        f.block(&mut t, 0x401000, end(0x401005, 2, BranchKind::Far(FarKind::Syscall), false), &mut no_signal);
        t.take_packet_log();
        f.stopped_at(&mut t, 0x401007);
        assert_eq!(t.take_packet_log(), [Packet::TipPgd(IpPayload::SUPPRESSED)]);
    }

    #[test]
    fn signal_probe_is_not_consulted_for_explained_direct_flow() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        let mut asked = 0;
        let mut probe = |_pc: u64| {
            asked += 1;
            None
        };
        let jcc = end(0x401008, 2, BranchKind::Conditional { target: 0x401000 }, false);
        f.block(&mut t, 0x401000, jcc, &mut probe);
        f.block(&mut t, 0x401000, jcc, &mut probe);
        f.block(&mut t, 0x40100a, end(0x40100a, 1, BranchKind::Return, false), &mut probe);
        assert_eq!(asked, 0);
    }

    /// The packets of an RTIT stream as "NAME ADDR" (PSB alone), from the RTIT packet dump.
    fn rtit_packets(bytes: &[u8]) -> Vec<String> {
        let text = crate::rtit::decode::dump(bytes, false, crate::rtit::errata::Errata::default());
        text.lines()
            .filter_map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                let k = t.iter().position(|w| w.starts_with("FUP") || w.starts_with("TIP") || *w == "PSB")?;
                Some(if t[k] == "PSB" { "PSB".to_string() } else { format!("{} {}", t[k], t[k + 1]) })
            })
            .collect()
    }

    #[test]
    fn rtit_user_transitions_are_fup_pgd_with_the_nlip_and_fup_pge() {
        use crate::rtit::setup::{RtitConfig, RtitStream};
        let mut t = RtitStream::new(RtitConfig::user_default(), crate::rtit::RtitOptions::default(), Context::KERNEL64, KERNEL_ENTRY)
            .unwrap();
        let mut f = UserFlow::default();
        f.start(&mut t);
        f.block(&mut t, 0x401000, end(0x401005, 2, BranchKind::Far(FarKind::Syscall), false), &mut no_signal);
        f.block(&mut t, 0x401007, end(0x401010, 2, BranchKind::IndirectJump, false), &mut no_signal);
        // A signal whose frame says the jmp had gone to 0x401020: TIP, then the interrupt.
        let mut signal = |pc: u64| (pc == 0x402000).then_some(0x401020);
        f.block(&mut t, 0x402000, end(0x402005, 1, BranchKind::SoftwareInterrupt, false), &mut signal);
        f.block(&mut t, 0x402006, end(0x402010, 2, BranchKind::Far(FarKind::Syscall), false), &mut no_signal);
        f.finish(&mut t);
        assert_eq!(f.stats().signals, 1);
        assert_eq!(
            rtit_packets(&t.take_output()),
            [
                "PSB",
                // First user instruction; SYSCALL: FUP.PGD with its NLIP (Table 1), no TIP.
                "FUP.PGE 0x401000",
                "FUP.PGD 0x401007",
                "FUP.PGE 0x401007",
                // The interrupted jmp's TIP, the interrupt at the resume IP, the handler.
                "TIP 0x401020",
                "FUP.PGD 0x401020",
                "FUP.PGE 0x402000",
                // INT3 traps with its NLIP; the exit SYSCALL ends the stream.
                "FUP.PGD 0x402006",
                "FUP.PGE 0x402006",
                "FUP.PGD 0x402012",
            ]
        );
    }

    #[test]
    fn thread_exit_syscall_ends_the_stream_with_tip_pgd() {
        let mut t = user_tracer();
        let mut f = UserFlow::default();
        f.start(&mut t);
        f.block(&mut t, 0x401000, end(0x401005, 2, BranchKind::Far(FarKind::Syscall), false), &mut no_signal);
        t.take_packet_log();
        f.finish(&mut t);
        assert_eq!(t.take_packet_log(), [Packet::TipPgd(IpPayload::SUPPRESSED)]);
    }
}
