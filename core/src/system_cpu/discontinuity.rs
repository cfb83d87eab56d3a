//! Interrupts and exceptions as QEMU's discontinuity callback reports them (QEMU 10.2: an
//! exception or INT n is announced before its delivery, with a `from` that can be stale; every
//! delivery is reported with the address the event is attributed to and the handler's), and
//! what the units see of one (SDM Vol. 3C §33.3.2.2 Table 33-23 for Intel PT, FUP then TIP or
//! TIP.PGD; Vol. 3B §18.4.8.1 LBRs, §18.4.9 BTS, §20.3.1.1.1 PEBS):
//!
//! - [`classify`]: an announcement, the #UD QEMU delivers for an RDPMC it does not implement
//!   (completed by [`super::rdpmc::complete`]), or a delivery.
//! - [`before_delivery`]: the time packets carry from here, the PWRX of a HLT the event ends,
//!   Event Trace's vector, CR2 and RFLAGS.IF ([`super::event::delivered`]).
//! - [`handler_ip_base`]: the code segment base the event's TIP is reported against.
//! - [`deliver`]: the event through the flow to every unit ([`super::retire::Retire`]), and what
//!   the emulator must do next (a DS interrupt, a due PEBS record).

use super::event;
use super::retire::Retire;
use super::GuestPort;
use crate::cs_base;
use crate::guest_mem::LinearMemory;
use crate::pt::packet::{ExecMode, PWRX_WAKE_INTERRUPT};
use crate::pt::tracer::Tracer;
use crate::system_flow::{BlockRef, CpuView, SystemFlow};

/// What one discontinuity callback is, given what the vCPU had pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discontinuity {
    /// An exception or INT n is about to be delivered: the current block did not finish
    /// (`SystemFlow::exception_announced`); nothing is seen before the delivery.
    Announced,
    /// The delivery of the #UD QEMU's TCG raises for the RDPMC at `from` (it does not implement
    /// RDPMC): completed from the PMU or re-delivered as #GP(0) (`rdpmc::complete`); the
    /// instruction's successor is at `resume`.
    RdpmcUd { resume: u64 },
    /// An interrupt, or the exception or INT n announced before, delivered to its handler.
    Delivered,
}

/// What the callback (`announced`: an exception's announcement rather than a delivery) at
/// `from` is, with an exception announced before (`exception_pending`) and the RDPMC about to
/// execute when it was (`rdpmc`: address and length; taken by any delivery of an exception).
pub fn classify(announced: bool, exception_pending: bool, rdpmc: &mut Option<(u64, u64)>, from: u64) -> Discontinuity {
    if !announced && exception_pending {
        if let Some((ip, len)) = rdpmc.take() {
            if from == ip {
                return Discontinuity::RdpmcUd { resume: ip + len };
            }
        }
    }
    if announced {
        Discontinuity::Announced
    } else {
        Discontinuity::Delivered
    }
}

/// Before the flow reports the event delivered to `handler` (`exception`: announced before):
/// packets generated from here on carry the guest's TSC now, an interrupt ends a HLT's C1 (power
/// event trace: PWRX before the event's FUP and TIP; nothing unless a PWRE was sent), and Event
/// Trace learns the vector, CR2 and RFLAGS.IF.
pub fn before_delivery<P: GuestPort>(port: &mut P, handler: u64, exception: bool) {
    let tsc = port.guest_tsc();
    let cpu = port.cpu();
    cpu.tracer.set_tsc(tsc);
    if let Some(r) = cpu.rtit {
        r.set_tsc(tsc);
    }
    cpu.tracer.wake(PWRX_WAKE_INTERRUPT);
    event::delivered(port, handler, exception);
}

/// The base the event's TIP to the handler at linear address `to` is reported against (SDM Vol.
/// 3C §33.3.1.1): 0 when the interrupted code ran in IA-32e mode (`interrupted` 64-bit, or
/// IA32_EFER.LMA = 1 known: `lma`; the handler is 64-bit code) or the profile reports linear
/// addresses (`lip`, CPUID.(14H,0):ECX[31] LIP); else the handler's CS base, `to` minus its
/// offset in RIP (`rip`, real mode: the IVT's CS).
pub fn handler_ip_base(interrupted: ExecMode, lma: bool, lip: bool, to: u64, rip: impl FnOnce() -> u64) -> u64 {
    let base = if interrupted == ExecMode::Bit64 || lma { 0 } else { cs_base::base_at_event(to, rip()) };
    if lip {
        0
    } else {
        base
    }
}

/// What the emulator does after an event's delivery was seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// A BTS record reached the interrupt threshold: the DS interrupt (a PMI through LVTPC).
    pub bts_pmi: bool,
    /// A PEBS record is due at the interrupted code's CPL: the instruction before the event
    /// triggered it, `from` is the next one (its registers are the ones now).
    pub pebs_due: bool,
}

/// The event attributed to `from` (the faulting instruction, the INT n, or the interrupted
/// code's next instruction) delivered to `to`: the flow reports it to every unit through `sink`
/// (`last_started` and `cpu` as for a block; the handler's context read from `cpu`). With
/// TraceEn = 1 its TIP is staged against `handler_base` (`handler_ip_base`); with TraceEn = 0
/// no IP payload depends on it (the handler's block sets it).
pub fn deliver<B: BlockRef, L: LinearMemory>(
    flow: &mut SystemFlow<B>,
    sink: &mut Retire<'_, L>,
    cpu: &mut impl CpuView,
    from: u64,
    to: u64,
    last_started: u64,
    handler_base: impl FnOnce(&Tracer) -> u64,
) -> Seen {
    // The interrupted code's CPL (the tracer's context until the flow delivers).
    let from_cpl = sink.pt.context().cpl;
    if sink.pt.trace_en() {
        let base = handler_base(sink.pt);
        sink.pt.stage_ip_base(base);
    }
    flow.delivered(sink, from, to, last_started, cpu);
    Seen { bts_pmi: sink.bts_pmi, pebs_due: sink.pmu.pebs_due_at(from_cpl) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bts::{BranchTraceStore, BtsRecord, DsFormat, IA32_DEBUGCTL, IA32_DS_AREA};
    use crate::guest_mem::{GuestMemory, SparseMemory};
    use crate::insn_class::{BranchKind, ClassifiedInsn};
    use crate::lbr::{BranchRecorder, LbrStack};
    use crate::pmu::{Pmu, PmuCaps};
    use crate::pt::packet::{IpCompression, IpPayload, Packet};
    use crate::pt::rtit_ctl::RtitCtl;
    use crate::pt::tracer::{Context, TraceConfig};
    use crate::system_cpu::retire::BtsUnit;
    use crate::system_flow::SysBlock;
    use std::sync::Arc;

    const KERNEL: Context = Context { cpl: 0, cr3: 0x1000, mode: ExecMode::Bit64 };
    const USER: Context = Context { cpl: 3, cr3: 0x1000, mode: ExecMode::Bit64 };
    const DS: u64 = 0x1000;
    const BUF: u64 = 0x2000;

    struct Cpu(Context);
    impl CpuView for Cpu {
        fn context(&mut self) -> Context {
            self.0
        }
    }

    /// The units of a CPU running user code at 1000H: Intel PT tracing user mode only
    /// (IA32_RTIT_CTL USER = 1, OS = 0, BranchEn), the LBRs and BTS (4 records, threshold 1).
    struct Units {
        pt: Tracer,
        pmu: Pmu,
        lbr: LbrStack,
        bts: BtsUnit<SparseMemory>,
        pebs_eventing: Option<u64>,
        flow: SystemFlow<Arc<SysBlock>>,
    }

    impl Units {
        fn user_code() -> Self {
            let mut ctl = RtitCtl::default();
            ctl.set_os(false).set_user(true).set_branch_en(true);
            let mut pt = Tracer::new(TraceConfig { ctl, ..TraceConfig::default() }, USER).with_packet_log();
            pt.enable(0x1000);
            pt.take_packet_log();
            let mut mem = SparseMemory::new();
            mem.add_ram(0x1000, 0x2000);
            for (i, v) in [BUF, BUF, BUF + 24 * 4, BUF + 24].iter().enumerate() {
                mem.write_u64(DS + 8 * i as u64, *v).unwrap();
            }
            let mut bts = BtsUnit::new(BranchTraceStore::new(true), mem);
            bts.write_msr(IA32_DS_AREA, DS).unwrap();
            bts.write_msr(IA32_DEBUGCTL, 0xC0).unwrap(); // TR, BTS
            let mut u = Units { pt, pmu: Pmu::new(PmuCaps::SKYLAKE), lbr: LbrStack::default(), bts, pebs_eventing: None, flow: SystemFlow::default() };
            // `L: dec ecx; jnz L` at 1000H completes, its branch taken.
            let b = Arc::new(SysBlock::new(vec![0x1000, 0x1002], ClassifiedInsn { ip: 0x1002, len: 2, kind: BranchKind::Conditional { target: 0x1000 }, rep_string: false }, false));
            let mut flow = std::mem::take(&mut u.flow);
            flow.block(&mut u.retire(), 0x1000, &[b.clone(), b.clone(), b], 0, 0, &mut Cpu(USER));
            u.flow = flow;
            u
        }

        fn retire(&mut self) -> Retire<'_, SparseMemory> {
            Retire {
                pt: &mut self.pt,
                rtit: None,
                bts: &mut self.bts,
                bts_pmi: false,
                pmu: &mut self.pmu,
                lbr: Some(&mut self.lbr as &mut dyn BranchRecorder),
                lbr_clock: 0,
                lbr_freeze_after: false,
                pebs_eventing: &mut self.pebs_eventing,
            }
        }

        /// The timer interrupt taken after the block (attributed to 1000H, the next
        /// instruction), into the kernel's handler at 9000H.
        fn interrupt(&mut self, base: impl FnOnce(&Tracer) -> u64) -> Seen {
            let mut flow = std::mem::take(&mut self.flow);
            let seen = deliver(&mut flow, &mut self.retire(), &mut Cpu(KERNEL), 0x1000, 0x9000, 0x1002, base);
            self.flow = flow;
            seen
        }
    }

    fn u16ip(v: u64) -> IpPayload {
        IpPayload { compression: IpCompression::Update16, payload: v & 0xffff }
    }

    #[test]
    fn an_announced_exception_is_only_noted_until_its_delivery() {
        let mut rdpmc = Some((0x1000, 2));
        assert_eq!(classify(true, false, &mut rdpmc, 0x1000), Discontinuity::Announced);
        assert_eq!(classify(true, true, &mut rdpmc, 0x1000), Discontinuity::Announced);
        assert_eq!(rdpmc, Some((0x1000, 2)), "the RDPMC stays pending for the delivery");
    }

    #[test]
    fn the_ud_delivered_at_a_pending_rdpmc_completes_it_and_any_other_delivery_forgets_it() {
        let mut rdpmc = Some((0x1000, 2));
        assert_eq!(classify(false, true, &mut rdpmc, 0x1000), Discontinuity::RdpmcUd { resume: 0x1002 });
        assert_eq!(rdpmc, None);
        let mut rdpmc = Some((0x1000, 2));
        assert_eq!(classify(false, false, &mut rdpmc, 0x1000), Discontinuity::Delivered, "an interrupt, no exception announced");
        assert_eq!(rdpmc, Some((0x1000, 2)));
        assert_eq!(classify(false, true, &mut rdpmc, 0x2000), Discontinuity::Delivered, "an exception elsewhere");
        assert_eq!(rdpmc, None);
    }

    #[test]
    fn interrupt_in_user_mode_emits_fup_and_tip_pgd() {
        let mut u = Units::user_code();
        let seen = u.interrupt(|_| 0);
        // The block's branch retires first (TNT), then the interrupt: FUP at the next
        // instruction and TIP.PGD into the kernel, which USER-only tracing filters out.
        assert_eq!(u.pt.take_packet_log(), [Packet::Tnt { bits: 1, count: 1 }, Packet::Fup(u16ip(0x1000)), Packet::TipPgd(IpPayload { compression: IpCompression::Suppressed, payload: 0 })]);
        // LBR and BTS: the block's branch, then the interrupt from the instruction it returns to.
        let lbrs: Vec<(u64, u64)> = u.lbr.entries().filter(|e| e.0 != 0).map(|(f, t, _)| (f, t)).collect();
        assert_eq!(lbrs, vec![(0x1000, 0x9000), (0x1002, 0x1000)]);
        let rec = |m: &mut SparseMemory, slot: u64| BtsRecord::decode(&m.bytes(BUF + 24 * slot, 24), DsFormat::Bits64).unwrap();
        assert_eq!((rec(&mut u.bts.linear, 1).from, rec(&mut u.bts.linear, 1).to), (0x1000, 0x9000));
        assert_eq!(seen, Seen { bts_pmi: true, pebs_due: false }, "two records: past the threshold of one");
    }

    #[test]
    fn the_handlers_tip_is_staged_against_the_handlers_base_only_while_tracing() {
        // Tracing the kernel too: TIP(9000H) against a base of 8000H.
        let mut u = Units::user_code();
        let mut ctl = RtitCtl::default();
        ctl.set_os(true).set_user(true).set_branch_en(true);
        u.pt = Tracer::new(TraceConfig { ctl, ..TraceConfig::default() }, USER).with_packet_log();
        u.pt.enable(0x1002);
        u.pt.take_packet_log();
        u.interrupt(|t| {
            assert_eq!(t.context(), USER, "asked with the interrupted code's context");
            0x8000
        });
        // The block's branch (reported at the delivery), FUP, TIP with 9000H - 8000H.
        assert_eq!(u.pt.take_packet_log(), [Packet::Tnt { bits: 1, count: 1 }, Packet::Fup(u16ip(0x1000)), Packet::Tip(u16ip(0x1000))]);
        // TraceEn = 0: not asked.
        let mut u = Units::user_code();
        u.pt = Tracer::new(TraceConfig::default(), USER);
        u.interrupt(|_| panic!("no TIP depends on the handler's base"));
    }

    #[test]
    fn a_cycles_pebs_record_due_in_user_code_is_written_at_an_interrupt_from_it() {
        // cycles:up (C0H, INV, CMASK = 16: core cycles; USR only) with PEBS, past its overflow
        // in the user code the interrupt leaves: due at the interrupted code's CPL 3, not at the
        // handler's CPL 0 (`Pmu::pebs_due_at`).
        let mut u = Units::user_code();
        u.pmu.write(crate::pmu::IA32_A_PMC0, (1 << 48) - 100).unwrap();
        u.pmu.write(crate::pmu::IA32_PERFEVTSEL0, 0x1080_00C0 | (1 << 16) | (1 << 22)).unwrap();
        u.pmu.write(crate::pmu::IA32_PEBS_ENABLE, 1).unwrap();
        u.pmu.write(crate::pmu::IA32_PERF_GLOBAL_CTRL, 1).unwrap();
        u.pmu.cycles(150, 3);
        assert!(u.interrupt(|_| 0).pebs_due);
    }

    #[test]
    fn a_handler_after_ia32e_code_has_base_0_and_one_after_real_mode_the_ivts_cs_base() {
        let no_read = || panic!("RIP is not read");
        assert_eq!(handler_ip_base(ExecMode::Bit64, false, false, 0x9000, no_read), 0);
        assert_eq!(handler_ip_base(ExecMode::Bit32, true, false, 0x9000, no_read), 0, "LMA = 1: compatibility mode");
        // Real mode: the handler F000:0100 at linear F0100H.
        assert_eq!(handler_ip_base(ExecMode::Bit16, false, false, 0xF_0100, || 0x100), 0xF_0000);
        assert_eq!(handler_ip_base(ExecMode::Bit16, false, true, 0xF_0100, || 0x100), 0, "LIP: linear addresses");
    }
}
