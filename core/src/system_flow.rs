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
use crate::pt::tracer::{AsyncKind, Context, Tracer};

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
}

impl<B: BlockRef> Executed<B> {
    fn last(&self) -> ClassifiedInsn {
        self.block.last.relocated(self.delta)
    }

    fn contains_insn(&self, ip: u64) -> bool {
        self.block.insns.contains(&ip.wrapping_sub(self.delta))
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
        if let Position::After(prev) = std::mem::replace(&mut self.pos, Position::Start) {
            if last_started == prev.block.last.ip {
                self.retire_last(tracer, &prev, pc, cpu);
            } else {
                self.stats.cut_short += 1;
            }
        }
        let index = match tracer.mode() {
            ExecMode::Bit16 => 0,
            ExecMode::Bit32 => 1,
            ExecMode::Bit64 => 2,
        };
        self.pos = Position::After(Executed { block: by_mode[index].clone(), delta });
    }

    /// The last instruction of `prev` retired and execution continues at `next`.
    fn retire_last(&mut self, tracer: &mut impl RetireSink, prev: &Executed<B>, next: u64, cpu: &mut impl CpuView) {
        let last = prev.last();
        if last.rep_string && next == last.ip {
            return; // the REP string instruction continues
        }
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
            Position::After(prev) if exception && prev.contains_insn(from) => {
                // The block stopped at `from`: it faulted, or it is an INT n / INT3 / INTO.
                if from == prev.last().ip && prev.last().kind == BranchKind::SoftwareInterrupt {
                    int_nlip = Some(prev.last().nlip());
                    AsyncKind::SoftwareInterrupt { ip: from }
                } else {
                    AsyncKind::Fault { ip: from }
                }
            }
            Position::After(prev) => {
                // The block completed; its last instruction retired with `from` as successor
                // (unless QEMU left the block early, see `block`).
                if last_started == prev.block.last.ip {
                    self.retire_last(tracer, &prev, from, cpu);
                } else {
                    self.stats.cut_short += 1;
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
        let b = Arc::new(SysBlock {
            insns: insns.to_vec(),
            last: ClassifiedInsn { ip, len, kind, rep_string: false },
            writes_cr3: false,
        });
        [b.clone(), b.clone(), b]
    }

    fn u16ip(v: u64) -> IpPayload {
        IpPayload { compression: IpCompression::Update16, payload: v & 0xffff }
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
            Arc::new(SysBlock {
                insns: vec![0x8000],
                last: ClassifiedInsn { ip: 0x8000, len: 2, kind, rep_string: false },
                writes_cr3: false,
            })
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
