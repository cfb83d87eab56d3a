//! The per-CPU facade of full-system mode (issue 13, "plugin/ becomes thin"): the units of one
//! modelled CPU (Intel PT's MSR file, tracer and output unit, Atom RTIT, the PMU, the LBRs and the
//! Debug Store) and what an instruction the plugin intercepts does to them, decided here. What
//! only the emulator can do (read and write the guest's registers and memory, make the guest take
//! an exception or an interrupt) and the block-granular sequencing the plugin still runs (counting
//! the retired instructions before an instruction, storing held-back output) are reached through
//! a small trait, [`GuestPort`]; the plugin implements it with QEMU calls, the tests with a fake.
//!
//! - [`clock`]: the guest's TSC and the core clock the cycle counters and the LBRs measure.
//! - [`cpuid`]: CPUID: the profile's answer written over QEMU's.
//! - [`discontinuity`]: an interrupt or exception QEMU reports: what it is, what the units see.
//! - [`event`]: what an interrupt's or exception's delivery tells Event Trace.
//! - [`wrmsr`]: WRMSR (SDM Vol. 4 MSR map; Vol. 3C §33.2.8 IA32_RTIT_CTL, Vol. 3B §20.2 PMU).
//! - [`rdmsr`]: RDMSR: the decision before it executes (the model's MSR, #GP(0)) and EDX:EAX
//!   replaced after it.
//! - [`store_output`]: the output step's store into guest memory, with the ToPA PMI, STOP and
//!   errors it brings.
//! - [`output`]: the hand-off around it: Intel PT bytes held back or stored, lost after STOP, and
//!   the internal-buffer models' drain credit.
//! - [`rdpmc`]: RDPMC, which QEMU's TCG does not implement (it raises #UD): completed from the
//!   PMU, or re-delivered as the #GP(0) hardware raises.
//! - [`retire`]: the retirement events of executed blocks fanned out to Intel PT, RTIT, BTS, the
//!   LBRs and the counters.

pub mod clock;
pub mod cpuid;
pub mod discontinuity;
pub mod event;
pub mod output;
pub mod rdmsr;
pub mod rdpmc;
pub mod retire;
pub mod wrmsr;

use crate::arch_lbr::ArchLbr;
use crate::bts::BranchTraceStore;
use crate::cpuid::NativeLeaves;
use crate::guest_mem::{GuestMemory, LinearMemory};
use crate::lbr::LbrStack;
use crate::pmu::{Pmu, STATUS_LBR_FRZ};
use crate::pt::caps::PtCaps;
use crate::pt::enable::store_packets;
use crate::pt::msr::RtitMsrs;
use crate::pt::output::OutputUnit;
use crate::pt::tracer::{Context, TraceConfig, Tracer};
use crate::rtit::tracer::RtitTracer;

/// The units of one CPU, borrowed for one step of the facade.
pub struct SystemCpu<'a, M> {
    /// Intel PT's IA32_RTIT_* registers.
    pub msrs: &'a mut RtitMsrs,
    /// Intel PT's packet generation.
    pub tracer: &'a mut Tracer,
    /// Intel PT's output unit (ToPA or single range).
    pub output: &'a mut OutputUnit,
    /// The output unit accepted the current TraceEn = 1 configuration.
    pub output_active: &'a mut bool,
    /// What the output steps hold back, lost bytes and the drain credit.
    pub handoff: &'a mut output::OutputHandoff,
    /// The counting PMU.
    pub pmu: &'a mut Pmu,
    /// The model-specific LBR stack.
    pub lbr: &'a mut LbrStack,
    /// Architectural LBRs.
    pub arch_lbr: &'a mut ArchLbr,
    /// IA32_DEBUGCTL and the Debug Store (BTS).
    pub bts: &'a mut BranchTraceStore,
    /// Atom RTIT (`profile=silvermont`).
    pub rtit: Option<&'a mut RtitTracer>,
    /// Guest-physical memory: the output regions.
    pub mem: &'a mut M,
    /// QEMU's own maximum basic CPUID leaf, as the guest's last CPUID.0 showed it.
    pub native_leaves: &'a mut NativeLeaves,
}

/// A guest register the facade reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reg {
    Rax,
    Rbx,
    Rcx,
    Rdx,
    Rsp,
    Rip,
    Rflags,
    Cs,
    Ss,
    Cr0,
    Cr2,
    Cr4,
    /// IA32_EFER.
    Efer,
}

/// The instruction a #GP(0) is raised at (an emulator may make each fault its own way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsrInsn {
    Rdmsr,
    Wrmsr,
}

/// What the facade needs from the emulator around one instruction of the guest.
pub trait GuestPort {
    type Mem: GuestMemory;
    type Linear: LinearMemory;

    /// The CPU's units (borrowed until the next call of the port).
    fn cpu(&mut self) -> SystemCpu<'_, Self::Mem>;

    // The guest's registers.

    /// The register's value (zero-extended).
    fn reg(&mut self, reg: Reg) -> u64;
    /// Write the register (with its own width); false if the emulator refused.
    fn set_reg(&mut self, reg: Reg, value: u64) -> bool;
    /// IDTR.base as the guest last loaded it (LIDT), if known.
    fn idt_base(&mut self) -> Option<u64>;
    /// Guest linear memory of the current CPU (its page tables; an unmapped page fails the
    /// access, no #PF).
    fn linear(&mut self) -> &mut Self::Linear;
    /// CPL, CR3 and the execution mode at the current instruction (SDM §33.4.2.8).
    fn context(&mut self) -> Context;
    /// CS.base of the descriptor cache at the current instruction.
    fn cs_base(&mut self) -> u64;
    /// The guest's TSC now: packets generated from here on carry this time.
    fn guest_tsc(&mut self) -> u64;

    // What the guest sees happen.

    /// The `insn` about to execute raises #GP(0) instead of executing, and the handler sees
    /// RCX = `rcx` and RDX = `rdx` (the guest's values at the instruction).
    fn raise_gp(&mut self, insn: MsrInsn, rcx: u64, rdx: u64);
    /// A PMI through the local APIC's LVT performance-counter entry (SDM §20.6.3).
    fn deliver_pmi(&mut self);
    /// IA32_APIC_BASE was written with `value` (the emulator executes the WRMSR): trace output
    /// must avoid the APIC page at its new place (§33.2.7.4).
    fn apic_base_written(&mut self, value: u64);

    // The plugin's block-granular sequencing, brought up to the current instruction.

    /// The instructions of the current block before the one at `ip` retire (the PMU, LBRs, BTS
    /// and the tracers see them), and the cycle counters catch up.
    fn count_to(&mut self, ip: u64);
    /// The cycle counters catch up with the clock (after the PMU's configuration changed).
    fn count_cycles(&mut self);
    /// Intel PT bytes held back so far reach the output region (before a trace MSR is read or
    /// written).
    fn store_held(&mut self);
    /// The output step of a block boundary: generated bytes go to the output units as the
    /// internal-buffer model and the hold-back rule allow.
    fn drain(&mut self);
    /// Every generated byte reaches the output region now (TraceEn cleared).
    fn flush_output(&mut self);
}

/// The tracer configuration IA32_RTIT_CTL, the CR3 filter and the address ranges select.
pub fn trace_config(msrs: &RtitMsrs, caps: &PtCaps) -> TraceConfig {
    TraceConfig {
        ctl: msrs.ctl,
        cr3_match: msrs.cr3_match,
        addr: msrs.addr,
        num_ranges: caps.num_addr_ranges as usize,
        cbr: TraceConfig::default().cbr,
    }
}

/// The LBRs record: IA32_DEBUGCTL[0] LBR = 1 (the model-specific stack, on a part with one: not
/// with Atom RTIT; not cleared by a legacy Freeze_LBRs_On_PMI since it was written) or
/// IA32_LBR_CTL[0] LBREn = 1 (`arch_lbr`), and the LBRs not frozen (IA32_PERF_GLOBAL_STATUS[58]
/// LBR_Frz, nor a freeze requested by a PMI).
#[inline]
pub fn lbr_recording(arch_lbr: bool, rtit: bool, bts: &BranchTraceStore, arch: &ArchLbr, pmu: &Pmu) -> bool {
    let enabled = if arch_lbr { arch.ctl().lbr_en() } else { !rtit && bts.debugctl().lbr() && !pmu.debugctl_lbr_cleared() };
    enabled && pmu.global_status() & STATUS_LBR_FRZ == 0 && !pmu.lbr_freeze_requested()
}

/// The output step's store (SDM §33.2.7): the Intel PT bytes generated so far go through the
/// output unit (ToPA or single range) to guest memory, `mirror` receiving the bytes stored (the
/// host copy). What the guest sees follow from it: a ToPA region with INT = 1 that filled raises
/// the ToPA PMI (after STOP took effect, Table 33-3); STOP sets IA32_RTIT_STATUS[5] Stopped and
/// an operational error [4] Error (§33.3.10), both ending packet generation; an error also stops
/// the output unit. Returns the bytes lost (generated after a STOP or an error).
pub fn store_output<P: GuestPort>(port: &mut P, mirror: impl FnOnce(&[u8])) -> usize {
    let cpu = port.cpu();
    let stored = store_packets(cpu.msrs, cpu.tracer, cpu.output, cpu.mem, mirror);
    if stored.topa_pmi {
        raise_topa_pmi(port);
    }
    if !stored.output_active {
        *port.cpu().output_active = false;
    }
    stored.lost
}

/// ToPA PMI (SDM §33.2.7.2, seed 003): IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI, and a PMI
/// through the local APIC as a counter overflow would raise.
pub fn raise_topa_pmi<P: GuestPort>(port: &mut P) {
    let cpu = port.cpu();
    cpu.msrs.topa_pmi_triggered();
    cpu.pmu.set_topa_pmi();
    port.deliver_pmi();
}
