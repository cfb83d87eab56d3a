//! Full-system retirement sequencing: turns QEMU's view of execution (translation blocks starting,
//! interrupts and exceptions delivered) into the PT model's retirement events.
//!
//! - A block's last instruction is its only possible COFI; the next block's PC is its outcome.
//! - Far transfers (SYSCALL, SYSRET, IRET, far JMP/CALL/RET) change the context: the caller's
//!   `CpuView` reads CPL, CR3 and the code-segment mode when one retires.
//! - MOV to CR3 ends a block in QEMU; the next block start reports the new CR3 (Table 33-50).
//! - QEMU reports every delivery of an interrupt or exception (from = the IP the event is
//!   attributed to, to = the handler). Exceptions and INT n are additionally announced before
//!   delivery; hardware interrupts are not. That tells apart an exception inside the current
//!   block (the block did not finish: FUP at the faulting instruction, or at the INT itself)
//!   from an interrupt taken after the block completed (its last instruction retired first,
//!   then FUP at the next instruction), SDM Table 33-23.

use crate::insn_class::{BranchKind, ClassifiedInsn, FarKind};
use crate::pt::packet::ExecMode;
use crate::pt::tracer::{AsyncKind, Context, SystemStop, Tracer};
use crate::user_flow::DirectFlow;

/// Where retirement events go: the Intel PT tracer, and in the plugin also the Branch Trace
/// Store (and the RTIT tracer), each deciding what its hardware records for the event.
pub trait RetireSink {
    /// The execution mode after the last retired instruction (picks the block classification).
    fn mode(&self) -> ExecMode;
    /// The COFI (or plain instruction, `kind` None) at `ip` retired; execution continues at `next`.
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64);
    /// The far transfer at `ip` (next sequential instruction `nlip`) retired into context `to`
    /// at `next`.
    fn far_transfer(&mut self, ip: u64, nlip: u64, kind: FarKind, next: u64, to: Context);
    /// A MOV to CR3 retired; execution continues at `next` (its NLIP).
    fn mov_cr3(&mut self, next: u64, cr3: u64);
    /// An interrupt, exception or INT n was delivered to `handler` in context `to`.
    fn async_event(&mut self, why: AsyncKind, handler: u64, to: Context);
    /// INT n / INT3 / INTO at `ip` (next instruction `nlip`) delivered to `handler`: Intel PT
    /// reports it like any event (FUP at the instruction); RTIT's FUP.FAR carries the NLIP
    /// (seed 002 Table 1).
    fn software_interrupt(&mut self, ip: u64, nlip: u64, handler: u64, to: Context) {
        let _ = nlip;
        self.async_event(AsyncKind::SoftwareInterrupt { ip }, handler, to)
    }
    /// `n` instructions that are not a block's last (hence not branches) retired, in the
    /// context of the current block, the last of them at (actual) address `last_ip`. For the
    /// performance counters (`last_ip`: PEBS's EventingIP); default: nothing.
    fn plain_retired(&mut self, n: u64, last_ip: u64) {
        let _ = (n, last_ip);
    }
    /// A block's last instruction (class `kind` at `ip`, next sequential `nlip`) retired and
    /// execution continues at `next`. Reported before the transfer it makes (`branch`,
    /// `far_transfer`, ...), so the context is still the one it retired in. Default: nothing.
    fn last_retired(&mut self, kind: BranchKind, ip: u64, nlip: u64, next: u64) {
        let _ = (kind, ip, nlip, next);
    }
}

impl RetireSink for Tracer {
    fn mode(&self) -> ExecMode {
        self.context().mode
    }
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
        Tracer::branch(self, ip, nlip, kind, next)
    }
    fn far_transfer(&mut self, _ip: u64, _nlip: u64, kind: FarKind, next: u64, to: Context) {
        Tracer::far_transfer(self, kind, next, to)
    }
    fn mov_cr3(&mut self, next: u64, cr3: u64) {
        Tracer::mov_cr3(self, next, cr3)
    }
    fn async_event(&mut self, why: AsyncKind, handler: u64, to: Context) {
        Tracer::async_event(self, why, handler, to)
    }
}

/// The guest state the sequencer reads lazily (only at far transfers, CR3 writes and events).
pub trait CpuView {
    fn context(&mut self) -> Context;
}

/// What is known about an executed block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysBlock {
    /// Addresses of the block's instructions, in order.
    pub insns: Vec<u64>,
    pub last: ClassifiedInsn,
    /// The last instruction is a MOV to CR3.
    pub writes_cr3: bool,
    /// The last instruction's fixed successors (none for a MOV to CR3, whose context change
    /// takes the general path), for `SystemFlow::steady_run`.
    pub direct: DirectFlow,
    /// The candidates `successor_pc` chooses from (translation addresses): two, or the same one
    /// twice; `NO_SUCCESSOR` twice when the last instruction has no successor known at
    /// translation (indirect and far transfers, software interrupts).
    succ: [u64; 2],
    /// The last instruction takes its target from memory with its one load
    /// (`insn_class::loads_branch_target`): the value loaded is the next RIP. Set by the
    /// embedder that sees the load (false from `new`).
    pub target_loaded: bool,
    /// The last instruction is a near RET and not a REP string instruction: it may compress
    /// (`SteadyRun::system_blocks`).
    pub compressible_ret: bool,
}

const NO_SUCCESSOR: u64 = u64::MAX;

impl SysBlock {
    pub fn new(insns: Vec<u64>, last: ClassifiedInsn, writes_cr3: bool) -> Self {
        let direct = if writes_cr3 { DirectFlow::none() } else { DirectFlow::of(&last) };
        let nlip = last.nlip();
        let succ = match last.kind {
            // A REP string instruction repeats or ends.
            BranchKind::None if last.rep_string => [last.ip, nlip],
            BranchKind::None => [nlip, nlip],
            BranchKind::Conditional { target } => [target, nlip],
            BranchKind::DirectJump { target } | BranchKind::DirectCall { target } => [target, target],
            _ => [NO_SUCCESSOR, NO_SUCCESSOR],
        };
        let compressible_ret = last.kind == BranchKind::Return && !last.rep_string;
        SysBlock { insns, last, writes_cr3, direct, succ, target_loaded: false, compressible_ret }
    }
}

/// The slot of a block classified as 16-, 32- and 64-bit code (`by_mode` of `SystemFlow::block`)
/// that holds its classification in `mode`.
pub const fn mode_slot(mode: ExecMode) -> usize {
    match mode {
        ExecMode::Bit16 => 0,
        ExecMode::Bit32 => 1,
        ExecMode::Bit64 => 2,
    }
}

/// A block as the full-system plugin recorded it when it executed (issue 13), run later by
/// `SystemFlow::steady_records`.
pub trait RecordedBlock {
    type Block: BlockRef;
    /// Its actual start (`pc` of `SystemFlow::block`).
    fn pc(&self) -> u64;
    /// Its start at translation (`pc` minus the `delta` of `SystemFlow::block`).
    fn translated(&self) -> u64;
    /// `last_started` as `SystemFlow::block` takes it.
    fn last_started(&self) -> u64;
    /// The clock sample it carries (its time with `steady_records`' `time_offset`).
    fn tsc(&self) -> u64;
    /// Its classification in mode slot `slot` (`mode_slot`).
    fn block(&self, slot: usize) -> &Self::Block;
}

/// How the sequencer holds a translated block: `Arc<SysBlock>` (tests), or `&'static SysBlock`
/// in the plugin, whose per-translation data lives as long as QEMU (no reference counting on the
/// per-block path).
pub trait BlockRef: Clone + std::ops::Deref<Target = SysBlock> {}
impl<T: Clone + std::ops::Deref<Target = SysBlock>> BlockRef for T {}

/// A block as it executed this time: `delta` = actual address - address at translation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Executed<B> {
    block: B,
    delta: u64,
    /// Instructions at the start of the block already reported as retired (`catch_up`).
    counted: usize,
}

impl<B: BlockRef> Executed<B> {
    fn last(&self) -> ClassifiedInsn {
        self.block.last.relocated(self.delta)
    }

    fn contains_insn(&self, ip: u64) -> bool {
        self.index_of(ip).is_some()
    }

    /// Position of the instruction at (actual) address `ip` in the block.
    fn index_of(&self, ip: u64) -> Option<usize> {
        let ip = ip.wrapping_sub(self.delta);
        self.block.insns.iter().position(|&a| a == ip)
    }

    /// Report the instructions before index `k` not yet reported.
    fn retire_before(&mut self, sink: &mut impl RetireSink, k: usize) {
        if k > self.counted {
            sink.plain_retired((k - self.counted) as u64, self.block.insns[k - 1].wrapping_add(self.delta));
            self.counted = k;
        }
    }

    fn explains(&self, next: u64) -> bool {
        let last = self.last();
        let nlip = last.nlip();
        match last.kind {
            BranchKind::None | BranchKind::AlwaysFaults => next == nlip || (last.rep_string && next == last.ip),
            BranchKind::Conditional { target } => next == target || next == nlip,
            BranchKind::DirectJump { target } | BranchKind::DirectCall { target } => next == target,
            _ => true,
        }
    }
}

/// Where execution continues after `prev` when its last instruction ended it along a path known
/// at translation: fall-through, a direct JMP/CALL, either way of a conditional branch, a REP
/// string instruction repeating or not. `delta` is `prev`'s actual address minus its address at
/// translation, as `block` takes it. The next block, translated at `next_translated`, tells which
/// candidate it is: x86 system-mode translations are PC-relative, so a block's linear address at
/// run time differs from its linear address at translation by a multiple of the page size, and
/// only a candidate with the same page offset (compared at translation, in linear addresses: a
/// near transfer keeps CS and its base) can be it. Returns the candidate moved by `delta`, or
/// None when that does not decide (an indirect or far transfer, a block QEMU left early,
/// `last_started` not its last instruction, no or two candidates with that page offset): the
/// caller reads RIP.
#[inline]
pub fn successor_pc(prev: &SysBlock, delta: u64, last_started: u64, next_translated: u64) -> Option<u64> {
    if last_started != prev.last.ip {
        return None;
    }
    pick_successor(prev.page_successors()?, delta, next_translated)
}

/// `successor_pc`'s choice among `candidates` (`SysBlock::page_successors`) for a block ended at
/// its last instruction: the one with the page offset of `next_translated`, moved by `delta`.
#[inline(always)]
pub fn pick_successor(candidates: [u64; 2], delta: u64, next_translated: u64) -> Option<u64> {
    let [a, b] = candidates;
    let found = if (a ^ next_translated) & 0xFFF == 0 {
        a
    } else if (b ^ next_translated) & 0xFFF == 0 {
        b
    } else {
        return None;
    };
    Some(found.wrapping_add(delta))
}

impl SysBlock {
    /// The successors of the block's last instruction that the next block's page offset decides
    /// between (`successor_pc`), as translation addresses: two, or the same one twice. None when
    /// it cannot decide: no successor known at translation (indirect and far transfers, software
    /// interrupts), or two different ones with the same page offset.
    pub fn page_successors(&self) -> Option<[u64; 2]> {
        let [a, b] = self.succ;
        (a != NO_SUCCESSOR && (a == b || (a ^ b) & 0xFFF != 0)).then_some([a, b])
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Position<B> {
    /// Nothing executed yet.
    Start,
    After(Executed<B>),
    /// An event was delivered; the next block is its handler.
    Delivered,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SystemFlowStats {
    pub blocks: u64,
    pub interrupts: u64,
    pub exceptions: u64,
    pub far_transfers: u64,
    pub unexplained: u64,
    /// Blocks QEMU left before their last instruction (no retirement to report).
    pub cut_short: u64,
}

#[derive(Clone, Debug)]
pub struct SystemFlow<B = std::sync::Arc<SysBlock>> {
    pos: Position<B>,
    exception_announced: bool,
    stats: SystemFlowStats,
}

impl<B> Default for SystemFlow<B> {
    fn default() -> Self {
        SystemFlow { pos: Position::Start, exception_announced: false, stats: SystemFlowStats::default() }
    }
}

impl<B: BlockRef> SystemFlow<B> {
    pub fn stats(&self) -> SystemFlowStats {
        self.stats
    }

    /// Whether the code segment register may have been loaded since the last block started: the
    /// last block ended in a far transfer (or one QEMU's report does not explain), an event was
    /// delivered (false before the first block: nothing is known). A mode proven for the current CS selector (descriptor
    /// cache, SDM Vol. 3A §3.4.3) is stale then, even when the selector value is the same: a far
    /// JMP to the same selector after its GDT entry was rewritten loads the new descriptor.
    pub fn cs_may_have_been_loaded(&self) -> bool {
        match &self.pos {
            Position::Start => false,
            Position::Delivered => true,
            Position::After(prev) => !matches!(
                prev.block.last.kind,
                BranchKind::None
                    | BranchKind::AlwaysFaults
                    | BranchKind::Conditional { .. }
                    | BranchKind::DirectJump { .. }
                    | BranchKind::DirectCall { .. }
                    | BranchKind::IndirectJump
                    | BranchKind::IndirectCall
                    | BranchKind::Return
            ),
        }
    }

    /// The last thing reported was the delivery of an interrupt or exception (its handler's
    /// context is the one the caller gave `delivered`).
    pub fn delivered_last(&self) -> bool {
        matches!(self.pos, Position::Delivered)
    }

    /// A block starting at `pc` is about to execute. `last_started` is the address of the last
    /// instruction whose execution began in the previous block (QEMU may abandon a block in the
    /// middle, e.g. to re-execute an MMIO access on its own; then the previous block's last
    /// instruction never ran and nothing retired).
    ///
    /// `by_mode` is the block classified as 16-, 32- and 64-bit code: the one matching the
    /// execution mode after the previous block's last instruction retired is used (a far
    /// transfer may just have switched modes).
    ///
    /// `delta` is the block's actual start minus its address at translation (non-zero when QEMU
    /// runs a PC-relative translation of the same physical code at another virtual address).
    /// `last_started` is compared with translation-time addresses.
    #[allow(clippy::too_many_arguments)]
    pub fn block(
        &mut self,
        tracer: &mut impl RetireSink,
        pc: u64,
        by_mode: &[B; 3],
        delta: u64,
        last_started: u64,
        cpu: &mut impl CpuView,
    ) {
        self.stats.blocks += 1;
        if let Position::After(mut prev) = std::mem::replace(&mut self.pos, Position::Start) {
            if last_started == prev.block.last.ip {
                self.retire_last(tracer, &mut prev, pc, cpu);
            } else {
                self.stats.cut_short += 1;
                // QEMU left the block before its last instruction and resumes inside it (an
                // instruction re-executed on its own, or one completed by the plugin): the
                // instructions before the resume point retired.
                if let Some(k) = prev.index_of(pc) {
                    prev.retire_before(tracer, k);
                }
            }
        }
        self.pos = Position::After(Executed { block: by_mode[mode_slot(tracer.mode())].clone(), delta, counted: 0 });
    }

    /// `block` for a block whose predecessor ran to its end and ended in a near transfer (or
    /// none) that explains `pc`: its retirement and branch reported as `block` reports them,
    /// without `block`'s general cases (issue 13: the recorded blocks of a counting run, one call
    /// per block). Returns false, having done nothing, for any other block: the caller then calls
    /// `block`.
    #[inline]
    pub fn steady_block(&mut self, sink: &mut impl RetireSink, pc: u64, by_mode: &[B; 3], delta: u64, last_started: u64) -> bool {
        let Position::After(prev) = &mut self.pos else { return false };
        let last = &prev.block.last;
        if last_started != last.ip || prev.block.writes_cr3 || matches!(last.kind, BranchKind::Far(_)) || !prev.explains(pc) {
            return false;
        }
        let last = prev.last();
        prev.retire_before(sink, prev.block.insns.len() - 1);
        // (A REP string instruction that continues retires later, once.)
        if !(last.rep_string && pc == last.ip) {
            sink.last_retired(last.kind, last.ip, last.nlip(), pc);
            sink.branch(last.ip, last.nlip(), last.kind, pc);
        }
        self.stats.blocks += 1;
        self.pos = Position::After(Executed { block: by_mode[mode_slot(sink.mode())].clone(), delta, counted: 0 });
        true
    }

    /// A run of recorded blocks (issue 13: the full-system plugin's ring), each reached from the
    /// one before along a fixed successor (fall-through, direct JMP or CALL, either way of a Jcc)
    /// or by a RET that compresses, while the tracer is in its steady state: what `block` does
    /// for each of them with Intel PT as the only sink, in the out-of-line loop
    /// `SteadyRun::system_blocks` (the tracer's per-block bookkeeping in registers). The blocks
    /// are classified in mode slot `slot` (a run has no far transfer, so the mode does not
    /// change). With `time_offset`, each block's time is its `tsc()` minus it (an MTC a new time
    /// calls for goes out in the run, `SteadyRun::retired_at`; a time that needs more, TSC + TMA
    /// or an MTC reaching the PSB period, ends it); without, the time is the tracer's, and
    /// `clock` may set it (`Tracer::set_tsc`) wherever the run may use it, given how many of
    /// `recs` have started by then: before each PSB+ and each near indirect transfer (a caller
    /// that samples its clock every so many blocks samples it there, where the time is used).
    /// A near indirect JMP or CALL, or a RET that does not compress, goes to `Tracer::branch`
    /// (its TIP) between two runs, as `block` reports it. Returns how many blocks ran; the first
    /// one not run (if any) is for `block`, after `set_tsc` with its time.
    pub fn steady_records<R: RecordedBlock<Block = B>>(
        &mut self,
        tracer: &mut Tracer,
        recs: &[R],
        slot: usize,
        time_offset: Option<u64>,
        mut clock: impl FnMut(&mut Tracer, usize),
    ) -> usize {
        let Position::After(prev) = &self.pos else { return 0 };
        let mut cur: (&SysBlock, u64) = (&prev.block, prev.delta);
        let mut n = 0;
        // What ended a run of the tracer's steady state.
        enum Then {
            Psb,
            Indirect,
        }
        'runs: while n < recs.len() {
            let Some(mut run) = tracer.steady_run_at_fixed_time() else { break };
            let then = loop {
                let (k, stop) = run.system_blocks(&mut cur, &recs[n..], slot, time_offset);
                n += k;
                match stop {
                    SystemStop::End => break 'runs,
                    SystemStop::Psb => break Then::Psb,
                    SystemStop::General => {
                        // A near indirect JMP or CALL, or a RET that does not compress, that ran
                        // to its end (its target explains any next block): `block` reports it
                        // to `Tracer::branch` alone (a TIP), below, between two runs. Anything
                        // else is for `block`.
                        let (r, last) = (&recs[n], &cur.0.last);
                        let indirect = matches!(last.kind, BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return);
                        if !indirect || last.rep_string || cur.0.writes_cr3 || r.last_started() != last.ip {
                            break 'runs;
                        }
                        break Then::Indirect;
                    }
                    SystemStop::Time => {
                        // (`system_blocks` checked `last_started`.)
                        let r = &recs[n];
                        let (pc, tsc) = (r.pc(), r.tsc().wrapping_sub(time_offset.unwrap_or(0)));
                        let end = cur.0.direct.explains(pc.wrapping_sub(cur.1)).then(|| cur.0.direct.relocated(cur.1));
                        let Some(more) = run.retired_at(&cur.0.last, end.as_ref(), pc, tsc) else { break 'runs };
                        n += 1;
                        cur = (&**r.block(slot), pc.wrapping_sub(r.translated()));
                        if !more {
                            break Then::Psb;
                        }
                    }
                }
            };
            drop(run);
            match then {
                Then::Psb => {
                    // The PSB period was reached with the last block that ran.
                    clock(tracer, n);
                    tracer.psb_if_due(recs[n - 1].pc());
                }
                Then::Indirect => {
                    // At the block's time (`set_tsc`, as for `block`).
                    let r = &recs[n];
                    match time_offset {
                        Some(offset) => tracer.set_tsc(r.tsc().wrapping_sub(offset)),
                        None => clock(tracer, n + 1),
                    }
                    let (last, pc) = (cur.0.last.relocated(cur.1), r.pc());
                    Tracer::branch(tracer, last.ip, last.nlip(), last.kind, pc);
                    n += 1;
                    cur = (&**r.block(slot), pc.wrapping_sub(r.translated()));
                }
            }
        }
        let delta = cur.1;
        if let Some(last) = n.checked_sub(1) {
            self.stats.blocks += n as u64;
            self.pos = Position::After(Executed { block: recs[last].block(slot).clone(), delta, counted: 0 });
        }
        n
    }

    /// The instruction at (actual) address `ip` of the current block is about to execute (an
    /// RDPMC, RDMSR or WRMSR of the counters): report the block's instructions before it as
    /// retired, so counters read there hold exactly the events before it.
    pub fn catch_up(&mut self, tracer: &mut impl RetireSink, ip: u64) {
        if let Position::After(cur) = &mut self.pos {
            if let Some(k) = cur.index_of(ip) {
                cur.retire_before(tracer, k);
            }
        }
    }

    /// The last instruction of `prev` retired and execution continues at `next`.
    fn retire_last(&mut self, tracer: &mut impl RetireSink, prev: &mut Executed<B>, next: u64, cpu: &mut impl CpuView) {
        let last = prev.last();
        prev.retire_before(tracer, prev.block.insns.len() - 1);
        if last.rep_string && next == last.ip {
            return; // the REP string instruction continues (it retires once, at its end)
        }
        tracer.last_retired(last.kind, last.ip, last.nlip(), next);
        match last.kind {
            BranchKind::Far(kind) => {
                self.stats.far_transfers += 1;
                let ctx = cpu.context();
                tracer.far_transfer(last.ip, last.nlip(), kind, next, ctx);
            }
            _ if prev.block.writes_cr3 => {
                let ctx = cpu.context();
                tracer.mov_cr3(next, ctx.cr3);
                if next != last.nlip() {
                    self.stats.unexplained += 1;
                }
            }
            _ if prev.explains(next) => tracer.branch(last.ip, last.nlip(), last.kind, next),
            _ => {
                // Nothing QEMU reported explains the jump; keep the stream decodable.
                self.stats.unexplained += 1;
                let ctx = cpu.context();
                tracer.async_event(AsyncKind::Interrupt { resume_ip: last.nlip() }, next, ctx);
            }
        }
    }

    /// QEMU is about to deliver an exception or INT n (announced before delivery).
    pub fn exception_announced(&mut self) {
        self.exception_announced = true;
    }

    /// The announced exception was undone by the caller (an instruction QEMU does not implement
    /// was completed instead, e.g. RDPMC): no event happened.
    pub fn exception_cancelled(&mut self) {
        self.exception_announced = false;
    }

    /// An interrupt or exception was delivered: attributed to `from`, handler at `to`;
    /// `last_started` as for `block`.
    pub fn delivered(&mut self, tracer: &mut impl RetireSink, from: u64, to: u64, last_started: u64, cpu: &mut impl CpuView) {
        let exception = std::mem::take(&mut self.exception_announced);
        let mut int_nlip = None;
        let kind = match std::mem::replace(&mut self.pos, Position::Delivered) {
            Position::After(mut prev) if exception && prev.contains_insn(from) => {
                // The block stopped at `from`: it faulted, or it is an INT n / INT3 / INTO.
                // The instructions before it retired; a faulting instruction does not, INT n does.
                let k = prev.index_of(from).unwrap_or(0);
                prev.retire_before(tracer, k);
                if from == prev.last().ip && prev.last().kind == BranchKind::SoftwareInterrupt {
                    let last = prev.last();
                    tracer.last_retired(last.kind, last.ip, last.nlip(), to);
                    int_nlip = Some(last.nlip());
                    AsyncKind::SoftwareInterrupt { ip: from }
                } else {
                    AsyncKind::Fault { ip: from }
                }
            }
            Position::After(mut prev) => {
                // The block completed; its last instruction retired with `from` as successor
                // (unless QEMU left the block early, see `block`).
                if last_started == prev.block.last.ip {
                    self.retire_last(tracer, &mut prev, from, cpu);
                } else {
                    self.stats.cut_short += 1;
                    if let Some(k) = prev.index_of(from) {
                        prev.retire_before(tracer, k);
                    }
                }
                if exception {
                    AsyncKind::Fault { ip: from }
                } else {
                    AsyncKind::Interrupt { resume_ip: from }
                }
            }
            Position::Start | Position::Delivered => {
                if exception {
                    AsyncKind::Fault { ip: from }
                } else {
                    AsyncKind::Interrupt { resume_ip: from }
                }
            }
        };
        if exception {
            self.stats.exceptions += 1;
        } else {
            self.stats.interrupts += 1;
        }
        let ctx = cpu.context();
        match (kind, int_nlip) {
            (AsyncKind::SoftwareInterrupt { ip }, Some(nlip)) => tracer.software_interrupt(ip, nlip, to, ctx),
            _ => tracer.async_event(kind, to, ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn_class::FarKind;
    use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};
    use crate::pt::rtit_ctl::RtitCtl;
    use crate::pt::tracer::TraceConfig;
    use std::sync::Arc;

    struct Cpu(Context);
    impl CpuView for Cpu {
        fn context(&mut self) -> Context {
            self.0
        }
    }

    const KERNEL: Context = Context { cpl: 0, cr3: 0x1000, mode: ExecMode::Bit64 };
    const USER: Context = Context { cpl: 3, cr3: 0x1000, mode: ExecMode::Bit64 };

    fn tracer(os: bool, user: bool) -> Tracer {
        let mut ctl = RtitCtl::default();
        ctl.set_os(os).set_user(user).set_branch_en(true);
        Tracer::new(TraceConfig { ctl, ..TraceConfig::default() }, KERNEL).with_packet_log()
    }

    fn block(insns: &[u64], len: u8, kind: BranchKind) -> [Arc<SysBlock>; 3] {
        let ip = *insns.last().unwrap();
        let b = Arc::new(SysBlock::new(insns.to_vec(), ClassifiedInsn { ip, len, kind, rep_string: false }, false));
        [b.clone(), b.clone(), b]
    }

    fn u16ip(v: u64) -> IpPayload {
        IpPayload { compression: IpCompression::Update16, payload: v & 0xffff }
    }

    fn ended_by(kind: BranchKind, rep_string: bool) -> SysBlock {
        SysBlock::new(vec![0x1000, 0x1004], ClassifiedInsn { ip: 0x1004, len: 2, kind, rep_string }, false)
    }

    #[test]
    fn successor_of_a_conditional_branch_is_the_candidate_with_the_next_blocks_page_offset() {
        let b = ended_by(BranchKind::Conditional { target: 0x1800 }, false);
        // Run 0x7000 bytes above its translation; the next translation is at another address too.
        assert_eq!(successor_pc(&b, 0x7000, 0x1004, 0x3800), Some(0x8800), "taken");
        assert_eq!(successor_pc(&b, 0x7000, 0x1004, 0x1006), Some(0x8006), "not taken");
        assert_eq!(successor_pc(&b, 0, 0x1004, 0x1234), None, "neither: read RIP");
        assert_eq!(successor_pc(&b, 0, 0x1000, 0x1800), None, "left before its last instruction");
        let same = ended_by(BranchKind::Conditional { target: 0x2006 }, false);
        assert_eq!(successor_pc(&same, 0, 0x1004, 0x2006), None, "both candidates have one page offset");
    }

    #[test]
    fn successor_in_real_mode_with_a_cs_base_that_is_not_page_aligned() {
        // CS = 0034H: base 340H. QEMU reports linear addresses, RIP holds the offset (EIP), so
        // `delta` = EIP - linear = -340H; page offsets match in linear addresses only.
        let b = ended_by(BranchKind::Conditional { target: 0x1800 }, false);
        let delta = 0u64.wrapping_sub(0x340);
        assert_eq!(successor_pc(&b, delta, 0x1004, 0x1800), Some(0x14C0), "taken: EIP 14C0H");
        assert_eq!(successor_pc(&b, delta, 0x1004, 0x1006), Some(0xCC6), "not taken: EIP 0CC6H");
    }

    #[test]
    fn successor_after_fall_through_direct_jump_and_rep_string() {
        assert_eq!(successor_pc(&ended_by(BranchKind::None, false), 0, 0x1004, 0x1006), Some(0x1006));
        assert_eq!(successor_pc(&ended_by(BranchKind::DirectCall { target: 0x5000 }, false), 0x1000, 0x1004, 0x5000), Some(0x6000));
        let rep = ended_by(BranchKind::None, true);
        assert_eq!(successor_pc(&rep, 0, 0x1004, 0x1004), Some(0x1004), "repeats");
        assert_eq!(successor_pc(&rep, 0, 0x1004, 0x1006), Some(0x1006), "done");
        for kind in [BranchKind::IndirectJump, BranchKind::Return, BranchKind::Far(FarKind::Iret), BranchKind::SoftwareInterrupt] {
            assert_eq!(successor_pc(&ended_by(kind, false), 0, 0x1004, 0x1006), None, "{kind:?}");
        }
    }

    #[test]
    fn page_fault_inside_a_block_is_fup_of_the_faulting_instruction_and_no_branch() {
        let mut t = tracer(true, true);
        let mut cpu = Cpu(KERNEL);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        f.block(&mut t, 0x1000, &block(&[0x1000, 0x1004, 0x1008], 2, BranchKind::Conditional { target: 0x1000 }), 0, 0, &mut cpu);
        f.exception_announced();
        f.delivered(&mut t, 0x1004, 0x9000, 0x1004, &mut cpu);
        assert_eq!(t.take_packet_log(), [Packet::Fup(u16ip(0x1004)), Packet::Tip(u16ip(0x9000))]);
        assert_eq!(f.stats().exceptions, 1);
    }

    #[test]
    fn interrupt_after_a_completed_block_retires_its_branch_first() {
        let mut t = tracer(true, true);
        let mut cpu = Cpu(KERNEL);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        // `L: dec ecx; jnz L` completes with the branch taken, then a timer interrupt arrives.
        f.block(&mut t, 0x1000, &block(&[0x1000, 0x1002], 2, BranchKind::Conditional { target: 0x1000 }), 0, 0, &mut cpu);
        f.delivered(&mut t, 0x1000, 0x9000, 0x1002, &mut cpu);
        assert_eq!(
            t.take_packet_log(),
            [Packet::Tnt { bits: 1, count: 1 }, Packet::Fup(u16ip(0x1000)), Packet::Tip(u16ip(0x9000))]
        );
        assert_eq!(f.stats().interrupts, 1);
    }

    #[test]
    fn int_n_sends_fup_of_the_int_and_tip_of_the_handler() {
        let mut t = tracer(true, true);
        let mut cpu = Cpu(USER);
        t.far_transfer(FarKind::Iret, 0x1000, USER);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        f.block(&mut t, 0x1000, &block(&[0x1000, 0x1003], 2, BranchKind::SoftwareInterrupt), 0, 0, &mut cpu);
        f.exception_announced();
        cpu.0 = KERNEL;
        f.delivered(&mut t, 0x1003, 0x9000, 0x1003, &mut cpu);
        assert_eq!(t.take_packet_log(), [Packet::Fup(u16ip(0x1003)), Packet::Tip(u16ip(0x9000))]);
    }

    #[test]
    fn syscall_to_untraced_kernel_and_sysret_back() {
        let mut t = tracer(false, true);
        let mut cpu = Cpu(USER);
        t.far_transfer(FarKind::Sysret, 0x1000, USER);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        f.block(&mut t, 0x1000, &block(&[0x1000], 2, BranchKind::Far(FarKind::Syscall)), 0, 0, &mut cpu);
        cpu.0 = KERNEL;
        f.block(&mut t, 0x9000, &block(&[0x9000], 3, BranchKind::Far(FarKind::Sysret)), 0, 0x1000, &mut cpu);
        cpu.0 = USER;
        f.block(&mut t, 0x1002, &block(&[0x1002], 1, BranchKind::Return), 0, 0x9000, &mut cpu);
        assert_eq!(
            t.take_packet_log(),
            [Packet::TipPgd(IpPayload::SUPPRESSED), Packet::TipPge(u16ip(0x1002))]
        );
    }

    #[test]
    fn block_abandoned_before_its_last_instruction_retires_nothing() {
        // QEMU re-executes an MMIO store on its own and resumes at the next instruction: the
        // first block's RET never ran, so no TIP may appear.
        let mut t = tracer(true, true);
        let mut cpu = Cpu(KERNEL);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        f.block(&mut t, 0x1000, &block(&[0x1000, 0x1004, 0x1008], 1, BranchKind::Return), 0, 0, &mut cpu);
        f.block(&mut t, 0x1008, &block(&[0x1008], 1, BranchKind::Return), 0, 0, &mut cpu);
        assert!(t.take_packet_log().is_empty());
        assert_eq!(f.stats().cut_short, 1);
        f.block(&mut t, 0x5000, &block(&[0x5000], 1, BranchKind::Return), 0, 0x1008, &mut cpu);
        assert_eq!(t.take_packet_log(), [Packet::Tip(u16ip(0x5000))]);
    }

    #[test]
    fn far_jmp_to_the_same_selector_after_a_gdt_rewrite_may_load_a_new_mode() {
        // Issue 12: `ljmp $0x28, x` with GDT[28H] rewritten keeps the selector value, so only
        // the far transfer (or an event) tells the caller that CS's descriptor cache was reloaded.
        let mut t = tracer(true, true);
        let mut cpu = Cpu(KERNEL);
        let mut f: SystemFlow = SystemFlow::default();
        assert!(!f.cs_may_have_been_loaded()); // nothing known yet
        f.block(&mut t, 0x1000, &block(&[0x1000], 3, BranchKind::DirectCall { target: 0x2000 }), 0, 0, &mut cpu);
        assert!(!f.cs_may_have_been_loaded()); // a near CALL keeps CS
        f.block(&mut t, 0x2000, &block(&[0x2000], 1, BranchKind::Return), 0, 0x1000, &mut cpu);
        assert!(!f.cs_may_have_been_loaded());
        f.block(&mut t, 0x1003, &block(&[0x1003], 8, BranchKind::Far(FarKind::FarJmp)), 0, 0x2000, &mut cpu);
        assert!(f.cs_may_have_been_loaded()); // the next block runs after the far JMP
        f.block(&mut t, 0x3000, &block(&[0x3000], 2, BranchKind::None), 0, 0x1003, &mut cpu);
        assert!(!f.cs_may_have_been_loaded());
        assert!(!f.delivered_last());
        f.delivered(&mut t, 0x3002, 0x9000, 0x3000, &mut cpu);
        assert!(f.cs_may_have_been_loaded()); // an interrupt loads the handler's CS
        assert!(f.delivered_last());
    }

    #[test]
    fn block_after_a_far_transfer_into_32bit_code_is_classified_as_32bit() {
        let mut t = tracer(true, true);
        let mut cpu = Cpu(KERNEL);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        f.block(&mut t, 0x1000, &block(&[0x1000], 7, BranchKind::Far(FarKind::FarCall)), 0, 0, &mut cpu);
        cpu.0.mode = ExecMode::Bit32;
        // The same bytes classify differently per mode; only the 32-bit variant ends in a JMP.
        let as_mode = |kind| {
            Arc::new(SysBlock::new(vec![0x8000], ClassifiedInsn { ip: 0x8000, len: 2, kind, rep_string: false }, false))
        };
        let variants = [as_mode(BranchKind::None), as_mode(BranchKind::IndirectJump), as_mode(BranchKind::None)];
        f.block(&mut t, 0x8000, &variants, 0, 0x1000, &mut cpu);
        f.block(&mut t, 0x9000, &block(&[0x9000], 1, BranchKind::Return), 0, 0x8000, &mut cpu);
        assert_eq!(f.stats().unexplained, 0);
        assert_eq!(
            t.take_packet_log(),
            [
                Packet::ModeExec { mode: ExecMode::Bit32, if_flag: false },
                Packet::Tip(u16ip(0x8000)),
                Packet::Tip(u16ip(0x9000)),
            ]
        );
    }

    #[test]
    fn translation_reused_at_another_address_reports_the_actual_ips() {
        // A PC-relative translation made at 0x1000 runs at 0x5000 (same physical code mapped
        // twice): the Jcc's TNT and the next TIP use the addresses where it ran.
        let mut t = tracer(true, true);
        let mut cpu = Cpu(KERNEL);
        t.enable(0x5000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        f.block(&mut t, 0x5000, &block(&[0x1000, 0x1002], 2, BranchKind::Conditional { target: 0x1000 }), 0x4000, 0x1002, &mut cpu);
        f.block(&mut t, 0x5000, &block(&[0x1000, 0x1002], 2, BranchKind::Conditional { target: 0x1000 }), 0x4000, 0x1002, &mut cpu);
        f.block(&mut t, 0x5004, &block(&[0x1004], 1, BranchKind::Return), 0x4000, 0x1002, &mut cpu);
        f.block(&mut t, 0x9000, &block(&[0x9000], 1, BranchKind::Return), 0, 0x1004, &mut cpu);
        assert_eq!(f.stats().unexplained, 0);
        assert_eq!(
            t.take_packet_log(),
            [Packet::Tnt { bits: 0b10, count: 2 }, Packet::Tip(u16ip(0x9000))]
        );
    }

    /// Records what the performance counters would be told.
    #[derive(Default)]
    struct Counted {
        plain: u64,
        last: Vec<(BranchKind, u64)>,
    }
    impl RetireSink for Counted {
        fn mode(&self) -> ExecMode {
            ExecMode::Bit64
        }
        fn branch(&mut self, _: u64, _: u64, _: BranchKind, _: u64) {}
        fn far_transfer(&mut self, _: u64, _: u64, _: FarKind, _: u64, _: Context) {}
        fn mov_cr3(&mut self, _: u64, _: u64) {}
        fn async_event(&mut self, _: AsyncKind, _: u64, _: Context) {}
        fn plain_retired(&mut self, n: u64, _: u64) {
            self.plain += n;
        }
        fn last_retired(&mut self, kind: BranchKind, _: u64, _: u64, next: u64) {
            self.last.push((kind, next));
        }
    }

    fn retired(c: &Counted) -> u64 {
        c.plain + c.last.len() as u64
    }

    /// Everything a sink is told, in order.
    #[derive(Default)]
    struct Told(Vec<String>);
    impl RetireSink for Told {
        fn mode(&self) -> ExecMode {
            ExecMode::Bit64
        }
        fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
            self.0.push(format!("branch {ip:x} {nlip:x} {kind:?} {next:x}"));
        }
        fn far_transfer(&mut self, ip: u64, _: u64, kind: FarKind, next: u64, _: Context) {
            self.0.push(format!("far {ip:x} {kind:?} {next:x}"));
        }
        fn mov_cr3(&mut self, next: u64, cr3: u64) {
            self.0.push(format!("cr3 {next:x} {cr3:x}"));
        }
        fn async_event(&mut self, why: AsyncKind, handler: u64, _: Context) {
            self.0.push(format!("async {why:?} {handler:x}"));
        }
        fn plain_retired(&mut self, n: u64, last_ip: u64) {
            self.0.push(format!("plain {n} {last_ip:x}"));
        }
        fn last_retired(&mut self, kind: BranchKind, ip: u64, nlip: u64, next: u64) {
            self.0.push(format!("last {kind:?} {ip:x} {nlip:x} {next:x}"));
        }
    }

    #[test]
    fn steady_block_tells_what_block_tells_and_declines_the_general_cases() {
        let jcc = block(&[0x1000, 0x1003, 0x1006], 2, BranchKind::Conditional { target: 0x1000 });
        let call = block(&[0x1008], 5, BranchKind::DirectCall { target: 0x2000 });
        let rep = {
            let b = Arc::new(SysBlock::new(vec![0x2000, 0x2004], ClassifiedInsn { ip: 0x2004, len: 2, kind: BranchKind::None, rep_string: true }, false));
            [b.clone(), b.clone(), b]
        };
        let ret = block(&[0x2006], 1, BranchKind::Return);
        let far = block(&[0x100D], 2, BranchKind::Far(FarKind::Iret));
        // (pc, block, delta, last_started): a loop run 0x7000 above its translation, a call, a
        // REP string instruction that repeats then ends, a RET, an IRET, the IRET's block again
        // after QEMU left it early, a Jcc after the IRET, and a block the Jcc does not explain.
        let d = 0x7000;
        let seq: Vec<(u64, &[Arc<SysBlock>; 3], u64, u64)> = vec![
            (0x8000, &jcc, d, 0),
            (0x8000, &jcc, d, 0x1006),
            (0x8000, &jcc, d, 0x1006),
            (0x8008, &call, d, 0x1006),
            (0x9000, &rep, d, 0x1008),
            (0x9004, &rep, d, 0x2004),
            (0x9006, &ret, d, 0x2004),
            (0x800D, &far, d, 0x2006),
            (0x800D, &far, d, 0x1234),
            (0x3000, &jcc, 0, 0x100D),
            (0x3006, &ret, 0, 0x1006),
        ];
        let (mut each, mut fast) = (Told::default(), Told::default());
        let (mut f1, mut f2) = (SystemFlow::default(), SystemFlow::default());
        let mut cpu = Cpu(KERNEL);
        let mut declined = vec![];
        for (i, &(pc, b, delta, ls)) in seq.iter().enumerate() {
            f1.block(&mut each, pc, b, delta, ls, &mut cpu);
            if !f2.steady_block(&mut fast, pc, b, delta, ls) {
                declined.push(i);
                f2.block(&mut fast, pc, b, delta, ls, &mut cpu);
            }
        }
        assert_eq!(fast.0, each.0);
        assert_eq!(f2.stats(), f1.stats());
        // The first block (nothing before it), the block after one QEMU left early, the IRET's
        // successor, and a block nothing explains (the Jcc's successor is neither of its two).
        assert_eq!(declined, [0, 8, 9, 10]);
        assert!(each.0.iter().any(|t| t.starts_with("far")));
    }

    #[test]
    fn every_instruction_of_a_completed_block_retires_once() {
        let mut c = Counted::default();
        let mut cpu = Cpu(KERNEL);
        let mut f = SystemFlow::default();
        let jcc = BranchKind::Conditional { target: 0x1000 };
        let b = block(&[0x1000, 0x1003, 0x1006], 2, jcc);
        for _ in 0..10 {
            f.block(&mut c, 0x1000, &b, 0, 0x1006, &mut cpu);
        }
        f.block(&mut c, 0x1008, &block(&[0x1008], 1, BranchKind::Return), 0, 0x1006, &mut cpu);
        assert_eq!(retired(&c), 30);
        assert_eq!(c.last.iter().filter(|l| l.1 == 0x1000).count(), 9);
        assert_eq!(c.last.last(), Some(&(jcc, 0x1008)));
    }

    #[test]
    fn a_faulting_instruction_does_not_retire_and_int_n_does() {
        let mut c = Counted::default();
        let mut cpu = Cpu(KERNEL);
        let mut f = SystemFlow::default();
        f.block(&mut c, 0x1000, &block(&[0x1000, 0x1004, 0x1008], 2, BranchKind::Return), 0, 0, &mut cpu);
        f.exception_announced();
        f.delivered(&mut c, 0x1004, 0x9000, 0x1004, &mut cpu);
        assert_eq!((c.plain, c.last.len()), (1, 0), "only the instruction before the fault");
        f.block(&mut c, 0x9000, &block(&[0x9000, 0x9001], 2, BranchKind::SoftwareInterrupt), 0, 0, &mut cpu);
        f.exception_announced();
        f.delivered(&mut c, 0x9001, 0xA000, 0x9001, &mut cpu);
        assert_eq!((c.plain, c.last.len()), (2, 1), "INT n and the instruction before it");
    }

    #[test]
    fn rep_string_retires_once_and_the_instructions_before_it_at_once() {
        let mut c = Counted::default();
        let mut cpu = Cpu(KERNEL);
        let mut f = SystemFlow::default();
        let rep = |insns: &[u64]| {
            let b = Arc::new(SysBlock::new(insns.to_vec(), ClassifiedInsn { ip: 0x1004, len: 2, kind: BranchKind::None, rep_string: true }, false));
            [b.clone(), b.clone(), b]
        };
        f.block(&mut c, 0x1000, &rep(&[0x1000, 0x1004]), 0, 0, &mut cpu);
        for _ in 0..5 {
            f.block(&mut c, 0x1004, &rep(&[0x1004]), 0, 0x1004, &mut cpu); // iterations
        }
        assert_eq!(retired(&c), 1);
        f.block(&mut c, 0x1006, &block(&[0x1006], 1, BranchKind::Return), 0, 0x1004, &mut cpu);
        assert_eq!(retired(&c), 2);
    }

    #[test]
    fn catch_up_reports_the_instructions_before_a_counter_read_exactly_once() {
        let mut c = Counted::default();
        let mut cpu = Cpu(KERNEL);
        let mut f = SystemFlow::default();
        let b = block(&[0x1000, 0x1001, 0x1002, 0x1003, 0x1005], 1, BranchKind::Return);
        f.block(&mut c, 0x1000, &b, 0, 0, &mut cpu);
        f.catch_up(&mut c, 0x1003); // RDMSR at 0x1003
        assert_eq!(retired(&c), 3);
        f.catch_up(&mut c, 0x1003);
        assert_eq!(retired(&c), 3);
        f.block(&mut c, 0x7000, &block(&[0x7000], 1, BranchKind::Return), 0, 0x1005, &mut cpu);
        assert_eq!(retired(&c), 5);
        // An RDPMC at 0x7100 completed by the plugin: QEMU resumes at the next instruction in a
        // new block, the first block having been left before its last instruction.
        let mut c = Counted::default();
        let b = block(&[0x7100, 0x7102, 0x7105], 1, BranchKind::Return);
        f.block(&mut c, 0x7100, &b, 0, 0x7000, &mut cpu);
        f.catch_up(&mut c, 0x7100);
        f.block(&mut c, 0x7102, &block(&[0x7102, 0x7105], 1, BranchKind::Return), 0, 0x7100, &mut cpu);
        assert_eq!(retired(&c), 2, "the block before and the RDPMC");
    }

    #[test]
    fn mov_cr3_with_os_tracing_sends_pip() {
        let mut t = tracer(true, false);
        let mut cpu = Cpu(KERNEL);
        t.enable(0x1000);
        t.take_packet_log();
        let mut f = SystemFlow::default();
        let mut b = (*block(&[0x1000], 3, BranchKind::None)[2]).clone();
        b.writes_cr3 = true;
        let b = Arc::new(b);
        f.block(&mut t, 0x1000, &[b.clone(), b.clone(), b], 0, 0, &mut cpu);
        cpu.0.cr3 = 0x2000;
        f.block(&mut t, 0x1003, &block(&[0x1003], 1, BranchKind::Return), 0, 0x1000, &mut cpu);
        assert_eq!(t.take_packet_log(), [Packet::Pip { cr3: 0x2000, nr: false }]);
    }
}
