//! The MSR address space of the modelled part (issue 13's per-CPU facade): which unit answers
//! RDMSR and WRMSR of an index, RDMSR itself, and WRMSR of the units without an enable sequence
//! of their own (PMU, LBRs, Debug Store; Intel PT's and RTIT's writes go through `pt::enable` and
//! `rtit`). TCG ignores WRMSR of an MSR it does not know
//! and reads it as 0, so every index a unit below claims is answered by the model, and every
//! other one is left to QEMU.

use crate::bts::debugctl::IA32_DEBUGCTL;
use crate::bts::BranchTraceStore;
use crate::arch_lbr::ArchLbr;
use crate::lbr::{LbrLayout, LbrStack};
use crate::pmu::{Pmu, MSR_PEBS_DATA_CFG};
use crate::pt::caps::PtCaps;
use crate::pt::msr::{is_rtit_index, Fault, RtitMsrs};
use crate::rtit::tracer::RtitTracer;

/// The unit of the modelled CPU an MSR index belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsrUnit {
    /// The counting PMU (SDM Vol. 3B §20.2): counters, event selects, IA32_PERF_GLOBAL_*,
    /// IA32_PERF_CAPABILITIES, IA32_PEBS_ENABLE.
    Pmu,
    /// The model-specific LBR stack (MSR_LBR_SELECT, TOS, FROM/TO/INFO).
    Lbr,
    /// Architectural LBRs (IA32_LBR_CTL/DEPTH, IA32_LBR_x_FROM_IP/TO_IP/INFO).
    ArchLbr,
    /// A model-specific LBR MSR on a part with Arch LBR (PERF_CAPABILITIES enumerates no
    /// model-specific stack and SDM Vol. 4 lists none for 06_8FH), or a Skylake-class LBR MSR
    /// on the Core 2 part (1C8H, 680H+, 6C0H+, DC0H+; `LbrLayout::lacks`): #GP(0).
    LbrAbsent,
    /// The Debug Store: IA32_DEBUGCTL and IA32_DS_AREA (`bts=1`).
    DebugStore,
    /// An IA32_RTIT_* index on a part without Intel PT (`profile=silvermont`): #GP(0).
    PtAbsent,
    /// Atom RTIT's MSRs 760H-77DH (seed 002).
    Rtit,
    /// Intel PT's IA32_RTIT_* registers.
    Pt,
    /// Not modelled: QEMU's own MSR.
    Qemu,
}

/// The MSR map of a capability profile.
#[derive(Clone, Copy, Debug)]
pub struct MsrMap {
    pub caps: PtCaps,
    /// Atom RTIT instead of Intel PT.
    pub rtit: bool,
    /// The Debug Store (BTS, PEBS) exists.
    pub bts: bool,
    /// MSR_PEBS_DATA_CFG (3F2H) is the PMU's (the Ice Lake PMU, adaptive PEBS); with the other
    /// profiles it stays QEMU's.
    pub pebs_data_cfg: bool,
    /// Architectural LBRs instead of the model-specific stack (`profile=sapphirerapids`).
    pub arch_lbr: bool,
    /// The model-specific stack's layout (without `arch_lbr` and `rtit`): Skylake-class, or the
    /// Core microarchitecture's 4 entries at 40H/60H (`profile=core2`), whose part #GPs on the
    /// Skylake-class MSRs.
    pub lbr: LbrLayout,
}

impl MsrMap {
    /// The unit that answers `index`. The units' index sets are disjoint except for
    /// IA32_PERF_GLOBAL_STATUS/RESET/SET, which the PMU answers (it holds the ToPA PMI bit 55 as
    /// well as the counters' bits).
    pub fn unit(&self, index: u32) -> MsrUnit {
        let pt_index = RtitMsrs::owns(index, &self.caps) || is_rtit_index(index);
        if Pmu::owns(index) && (index != MSR_PEBS_DATA_CFG || self.pebs_data_cfg) {
            MsrUnit::Pmu
        } else if self.arch_lbr && ArchLbr::owns(index) {
            MsrUnit::ArchLbr
        } else if self.arch_lbr && LbrStack::owns(index) {
            MsrUnit::LbrAbsent
        } else if !self.rtit && self.lbr.owns(index) {
            MsrUnit::Lbr
        } else if !self.rtit && self.lbr.lacks(index) {
            MsrUnit::LbrAbsent
        } else if self.bts && BranchTraceStore::owns(index) {
            MsrUnit::DebugStore
        } else if self.rtit && pt_index {
            MsrUnit::PtAbsent
        } else if self.rtit && RtitTracer::owns(index) {
            MsrUnit::Rtit
        } else if pt_index {
            MsrUnit::Pt
        } else {
            MsrUnit::Qemu
        }
    }

    /// The model answers RDMSR/WRMSR of `index` (else QEMU does).
    pub fn owns(&self, index: u32) -> bool {
        self.unit(index) != MsrUnit::Qemu
    }
}

/// The units' state as RDMSR sees it.
pub struct MsrUnits<'a> {
    pub pmu: &'a Pmu,
    pub lbr: &'a LbrStack,
    pub arch_lbr: &'a ArchLbr,
    pub bts: &'a BranchTraceStore,
    pub rtit: Option<&'a RtitTracer>,
    pub pt: &'a RtitMsrs,
}

impl MsrUnits<'_> {
    /// RDMSR of `index` (an index the map owns): its value, or the #GP(0) hardware raises.
    pub fn rdmsr(&self, map: &MsrMap, index: u32) -> Result<u64, Fault> {
        match map.unit(index) {
            MsrUnit::Pmu => self.pmu.read(index),
            MsrUnit::Lbr => self.lbr.read(index),
            MsrUnit::ArchLbr => self.arch_lbr.read(index),
            MsrUnit::LbrAbsent => Err(Fault::Gp),
            MsrUnit::DebugStore => match self.bts.read_msr(index) {
                // [0] LBR as a legacy Freeze_LBRs_On_PMI left it (`Pmu::debugctl_read`).
                Some(v) if index == IA32_DEBUGCTL => Ok(self.pmu.debugctl_read(v)),
                v => v.ok_or(Fault::Gp),
            },
            MsrUnit::PtAbsent => Err(Fault::Gp),
            MsrUnit::Rtit => match self.rtit {
                Some(r) => r.try_rdmsr(index),
                None => Err(Fault::Gp),
            },
            MsrUnit::Pt | MsrUnit::Qemu => self.pt.read(index, &map.caps),
        }
    }
}

/// The units WRMSR changes directly.
pub struct MsrUnitsMut<'a> {
    pub pmu: &'a mut Pmu,
    pub lbr: &'a mut LbrStack,
    pub arch_lbr: &'a mut ArchLbr,
    pub bts: &'a mut BranchTraceStore,
}

/// What a WRMSR accepted by one of those units did, for the caller's sequencing (the context the
/// retirement events filter on must be current when counting or recording starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitWrite {
    /// A counter, event select or global control: `counting_started` when no counter counted
    /// before this write and one does now.
    Pmu { counting_started: bool },
    /// The model-specific LBR stack.
    Lbr,
    /// Architectural LBRs.
    ArchLbr,
    /// IA32_DEBUGCTL (`debugctl`; its FREEZE_LBRS_ON_PMI [11] and FREEZE_PERFMON_ON_PMI [12]
    /// also reach the PMU) or IA32_DS_AREA; `bts_started`: BTS became active.
    DebugStore { debugctl: bool, bts_started: bool },
    /// Not one of these units: Intel PT, Atom RTIT, or QEMU's own MSR.
    Other,
}

impl MsrUnitsMut<'_> {
    /// WRMSR of `value` to `index`: the unit's new state and what it started, or the #GP(0)
    /// hardware raises (nothing changed then).
    pub fn wrmsr(&mut self, map: &MsrMap, index: u32, value: u64) -> Result<UnitWrite, Fault> {
        match map.unit(index) {
            MsrUnit::Pmu => {
                let was_active = self.pmu.active();
                self.pmu.write(index, value)?;
                Ok(UnitWrite::Pmu { counting_started: self.pmu.active() && !was_active })
            }
            MsrUnit::Lbr => self.lbr.write(index, value).map(|()| UnitWrite::Lbr),
            MsrUnit::ArchLbr => self.arch_lbr.write(index, value).map(|()| UnitWrite::ArchLbr),
            MsrUnit::LbrAbsent | MsrUnit::PtAbsent => Err(Fault::Gp),
            MsrUnit::DebugStore => {
                let was_active = self.bts.active();
                self.bts.write_msr(index, value)?;
                let debugctl = index == IA32_DEBUGCTL;
                if debugctl {
                    self.pmu.set_debugctl(value);
                }
                Ok(UnitWrite::DebugStore { debugctl, bts_started: self.bts.active() && !was_active })
            }
            MsrUnit::Rtit | MsrUnit::Pt | MsrUnit::Qemu => Ok(UnitWrite::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmu::PmuCaps;

    const IA32_RTIT_CTL: u32 = 0x570;
    const IA32_RTIT_ADDR3_B: u32 = 0x587;
    const IA32_PERF_GLOBAL_STATUS: u32 = 0x38E;
    const IA32_DEBUGCTL: u32 = 0x1D9;
    const IA32_DS_AREA: u32 = 0x600;
    const MSR_LBR_TOS: u32 = 0x1C9;
    const MSR_LASTBRANCH_31_TO_IP: u32 = 0x6DF;
    const RTIT_CTL_ATOM: u32 = 0x768;
    const IA32_APIC_BASE: u32 = 0x1B;

    fn skylake() -> MsrMap {
        MsrMap { caps: PtCaps::SKYLAKE, rtit: false, bts: true, pebs_data_cfg: false, arch_lbr: false, lbr: LbrLayout::Skylake }
    }

    fn silvermont() -> MsrMap {
        MsrMap { caps: PtCaps::MINIMAL, rtit: true, bts: true, pebs_data_cfg: false, arch_lbr: false, lbr: LbrLayout::Skylake }
    }

    #[test]
    fn skylake_answers_pt_lbr_debug_store_and_pmu_msrs_and_leaves_the_rest_to_qemu() {
        let m = skylake();
        assert_eq!(m.unit(IA32_RTIT_CTL), MsrUnit::Pt);
        assert_eq!(m.unit(IA32_RTIT_ADDR3_B), MsrUnit::Pt, "an address range the profile lacks: PT's #GP rule");
        assert_eq!(m.unit(IA32_PERF_GLOBAL_STATUS), MsrUnit::Pmu);
        assert_eq!(m.unit(MSR_LBR_TOS), MsrUnit::Lbr);
        assert_eq!(m.unit(MSR_LASTBRANCH_31_TO_IP), MsrUnit::Lbr);
        assert_eq!(m.unit(IA32_DEBUGCTL), MsrUnit::DebugStore);
        assert_eq!(m.unit(IA32_DS_AREA), MsrUnit::DebugStore);
        assert_eq!(m.unit(RTIT_CTL_ATOM), MsrUnit::Qemu, "Atom RTIT exists only on Silvermont");
        assert_eq!(m.unit(IA32_APIC_BASE), MsrUnit::Qemu);
        assert!(!MsrMap { bts: false, ..m }.owns(IA32_DS_AREA));
        assert_eq!(m.unit(MSR_PEBS_DATA_CFG), MsrUnit::Qemu, "adaptive PEBS only with the Ice Lake PMU");
        assert_eq!(MsrMap { pebs_data_cfg: true, ..m }.unit(MSR_PEBS_DATA_CFG), MsrUnit::Pmu);
    }

    #[test]
    fn silvermont_has_rtit_no_intel_pt_and_no_model_specific_lbrs() {
        let m = silvermont();
        assert_eq!(m.unit(RTIT_CTL_ATOM), MsrUnit::Rtit);
        assert_eq!(m.unit(IA32_RTIT_CTL), MsrUnit::PtAbsent);
        assert_eq!(m.unit(IA32_PERF_GLOBAL_STATUS), MsrUnit::Pmu);
        assert_eq!(m.unit(MSR_LBR_TOS), MsrUnit::Qemu);
    }

    #[test]
    fn arch_lbr_part_answers_the_arch_lbr_msrs_and_faults_the_model_specific_ones() {
        let m = MsrMap { arch_lbr: true, ..skylake() };
        assert_eq!(m.unit(crate::arch_lbr::IA32_LBR_CTL), MsrUnit::ArchLbr);
        assert_eq!(m.unit(crate::arch_lbr::IA32_LBR_0_INFO + 31), MsrUnit::ArchLbr);
        assert_eq!(m.unit(crate::arch_lbr::IA32_LBR_0_TO_IP + 63), MsrUnit::ArchLbr);
        assert_eq!(m.unit(MSR_LBR_TOS), MsrUnit::LbrAbsent);
        assert_eq!(m.unit(MSR_LASTBRANCH_31_TO_IP), MsrUnit::LbrAbsent);
        assert_eq!(m.unit(IA32_DEBUGCTL), MsrUnit::DebugStore);
        assert_eq!(skylake().unit(crate::arch_lbr::IA32_LBR_CTL), MsrUnit::Qemu, "no Arch LBR on Skylake");
    }

    #[test]
    fn rdmsr_reads_each_unit_and_faults_where_the_part_has_no_such_msr() {
        let pmu = Pmu::new(PmuCaps::SKYLAKE);
        let lbr = LbrStack::default();
        let mut bts = BranchTraceStore::new(true);
        bts.write_msr(IA32_DS_AREA, 0x1234_5000).unwrap();
        let pt = RtitMsrs::default();
        let arch = ArchLbr::new(crate::arch_lbr::ArchLbrCaps::SAPPHIRE_RAPIDS);
        let units = MsrUnits { pmu: &pmu, lbr: &lbr, arch_lbr: &arch, bts: &bts, rtit: None, pt: &pt };
        assert_eq!(units.rdmsr(&skylake(), IA32_DS_AREA), Ok(0x1234_5000));
        assert_eq!(units.rdmsr(&skylake(), IA32_RTIT_CTL), Ok(0));
        assert_eq!(units.rdmsr(&skylake(), IA32_RTIT_ADDR3_B), Err(Fault::Gp), "Skylake has 2 ranges");
        assert_eq!(units.rdmsr(&skylake(), MSR_LBR_TOS), Ok(0));
        assert_eq!(units.rdmsr(&silvermont(), IA32_RTIT_CTL), Err(Fault::Gp));
        assert_eq!(units.rdmsr(&silvermont(), RTIT_CTL_ATOM), Err(Fault::Gp), "no RTIT unit");
        let spr = MsrMap { arch_lbr: true, ..skylake() };
        assert_eq!(units.rdmsr(&spr, crate::arch_lbr::IA32_LBR_DEPTH), Ok(32));
        assert_eq!(units.rdmsr(&spr, MSR_LBR_TOS), Err(Fault::Gp));
    }

    #[test]
    fn wrmsr_reports_counting_and_bts_starting_and_faults_msrs_the_part_lacks() {
        const IA32_PERF_GLOBAL_CTRL: u32 = 0x38F;
        const IA32_FIXED_CTR_CTRL: u32 = 0x38D;
        let mut pmu = Pmu::new(PmuCaps::SKYLAKE);
        let mut lbr = LbrStack::default();
        let mut arch = ArchLbr::new(crate::arch_lbr::ArchLbrCaps::SAPPHIRE_RAPIDS);
        let mut bts = BranchTraceStore::new(true);
        let mut units = MsrUnitsMut { pmu: &mut pmu, lbr: &mut lbr, arch_lbr: &mut arch, bts: &mut bts };
        let m = skylake();
        // Fixed counter 0 counting user instructions (IA32_FIXED_CTR_CTRL[1:0] = 2), enabled by
        // IA32_PERF_GLOBAL_CTRL[32] (whose reset value enables every counter, SDM Vol. 3B
        // §20.2.2, so it is cleared first): counting starts with the third write only.
        assert_eq!(units.wrmsr(&m, IA32_PERF_GLOBAL_CTRL, 0), Ok(UnitWrite::Pmu { counting_started: false }));
        assert_eq!(units.wrmsr(&m, IA32_FIXED_CTR_CTRL, 2), Ok(UnitWrite::Pmu { counting_started: false }));
        assert_eq!(units.wrmsr(&m, IA32_PERF_GLOBAL_CTRL, 1 << 32), Ok(UnitWrite::Pmu { counting_started: true }));
        assert_eq!(units.wrmsr(&m, IA32_PERF_GLOBAL_CTRL, 1 << 32), Ok(UnitWrite::Pmu { counting_started: false }));
        assert_eq!(units.wrmsr(&m, IA32_PERF_GLOBAL_STATUS, 0), Err(Fault::Gp), "GLOBAL_STATUS is read-only");
        // DS area, then DEBUGCTL.TR | BTS (bits 6, 7): BTS starts.
        assert_eq!(units.wrmsr(&m, IA32_DS_AREA, 0x1000), Ok(UnitWrite::DebugStore { debugctl: false, bts_started: false }));
        let debugctl = (1 << 6) | (1 << 7);
        assert_eq!(units.wrmsr(&m, IA32_DEBUGCTL, debugctl), Ok(UnitWrite::DebugStore { debugctl: true, bts_started: true }));
        assert_eq!(units.wrmsr(&m, IA32_DEBUGCTL, 1 << 63), Err(Fault::Gp), "a reserved DEBUGCTL bit");
        assert_eq!(units.wrmsr(&m, MSR_LBR_TOS, 3), Ok(UnitWrite::Lbr));
        assert_eq!(units.wrmsr(&m, IA32_RTIT_CTL, 1), Ok(UnitWrite::Other), "Intel PT has its own sequence");
        assert_eq!(units.wrmsr(&silvermont(), IA32_RTIT_CTL, 0), Err(Fault::Gp), "no Intel PT on Silvermont");
        let spr = MsrMap { arch_lbr: true, ..skylake() };
        assert_eq!(units.wrmsr(&spr, MSR_LBR_TOS, 0), Err(Fault::Gp), "no model-specific LBRs with Arch LBR");
        assert_eq!(units.wrmsr(&spr, crate::arch_lbr::IA32_LBR_DEPTH, 16), Ok(UnitWrite::ArchLbr));
        assert_eq!(units.wrmsr(&spr, crate::arch_lbr::IA32_LBR_DEPTH, 12), Err(Fault::Gp), "not an enumerated depth");
    }

    #[test]
    fn core2_answers_the_4_lbrs_at_40h_60h_and_faults_the_skylake_class_lbr_msrs() {
        let m = MsrMap { lbr: LbrLayout::Core, ..skylake() };
        for index in [0x40, 0x43, 0x60, 0x63, MSR_LBR_TOS] {
            assert_eq!(m.unit(index), MsrUnit::Lbr, "{index:#x}");
        }
        for index in [0x1C8, 0x680, 0x69F, 0x6C0, MSR_LASTBRANCH_31_TO_IP, 0xDC0, 0xDDF] {
            assert_eq!(m.unit(index), MsrUnit::LbrAbsent, "{index:#x}");
        }
        assert_eq!(m.unit(0x44), MsrUnit::Qemu);
        assert_eq!(skylake().unit(0x40), MsrUnit::Qemu, "the Skylake profile leaves 40H to QEMU");
        let pmu = Pmu::new(PmuCaps::CORE2);
        let mut lbr = LbrStack::new(LbrLayout::Core);
        lbr.record(None, 0x1000, 0x2000, 0, false, 0);
        let (bts, pt) = (BranchTraceStore::new(true), RtitMsrs::default());
        let arch = ArchLbr::new(crate::arch_lbr::ArchLbrCaps::SAPPHIRE_RAPIDS);
        let units = MsrUnits { pmu: &pmu, lbr: &lbr, arch_lbr: &arch, bts: &bts, rtit: None, pt: &pt };
        assert_eq!(units.rdmsr(&m, MSR_LBR_TOS), Ok(1));
        assert_eq!((units.rdmsr(&m, 0x41), units.rdmsr(&m, 0x61)), (Ok(0x1000), Ok(0x2000)));
        assert_eq!(units.rdmsr(&m, 0x680), Err(Fault::Gp));
        assert_eq!(units.rdmsr(&m, 0x1C8), Err(Fault::Gp));
        let (mut pmu, mut bts) = (pmu, bts);
        let mut arch = arch;
        let mut units = MsrUnitsMut { pmu: &mut pmu, lbr: &mut lbr, arch_lbr: &mut arch, bts: &mut bts };
        assert_eq!(units.wrmsr(&m, MSR_LBR_TOS, 3), Ok(UnitWrite::Lbr));
        assert_eq!(units.wrmsr(&m, 0xDC0, 0), Err(Fault::Gp));
        assert_eq!(units.wrmsr(&m, 0x1C8, 0), Err(Fault::Gp), "no LBR_SELECT on Core 2");
    }

    #[test]
    fn debugctl_reads_lbr_0_after_a_legacy_freeze_lbrs_on_pmi_until_written() {
        const IA32_PERFEVTSEL0: u32 = 0x186;
        const IA32_PMC0: u32 = 0xC1;
        let m = MsrMap { lbr: LbrLayout::Core, ..skylake() };
        let mut pmu = Pmu::new(PmuCaps::CORE2);
        let mut lbr = LbrStack::new(LbrLayout::Core);
        let mut arch = ArchLbr::new(crate::arch_lbr::ArchLbrCaps::SAPPHIRE_RAPIDS);
        let mut bts = BranchTraceStore::new(true);
        let debugctl = 1 | (1 << 11); // LBR | FREEZE_LBRS_ON_PMI
        {
            let mut units = MsrUnitsMut { pmu: &mut pmu, lbr: &mut lbr, arch_lbr: &mut arch, bts: &mut bts };
            units.wrmsr(&m, IA32_DEBUGCTL, debugctl).unwrap();
            units.wrmsr(&m, IA32_PMC0, 0xFF_FFFF_FFFF).unwrap(); // legacy write: -1, 40 bits
            units.wrmsr(&m, IA32_PERFEVTSEL0, 0xC0 | (1 << 17) | (1 << 20) | (1 << 22)).unwrap();
        }
        assert!(crate::system_cpu::lbr_recording(false, false, &bts, &arch, &pmu));
        pmu.retire(1, crate::pmu::Retired::PLAIN, 0);
        assert!(pmu.take_pmi());
        assert!(!crate::system_cpu::lbr_recording(false, false, &bts, &arch, &pmu), "frozen by the PMI");
        let pt = RtitMsrs::default();
        let read = |pmu: &Pmu, lbr: &LbrStack, arch: &ArchLbr, bts: &BranchTraceStore| {
            MsrUnits { pmu, lbr, arch_lbr: arch, bts, rtit: None, pt: &pt }.rdmsr(&m, IA32_DEBUGCTL)
        };
        assert_eq!(read(&pmu, &lbr, &arch, &bts), Ok(1 << 11), "DEBUGCTL.LBR cleared, FREEZE_LBRS_ON_PMI kept");
        // The handler sets DEBUGCTL.LBR again (Linux's __intel_pmu_lbr_enable(pmi = true)).
        MsrUnitsMut { pmu: &mut pmu, lbr: &mut lbr, arch_lbr: &mut arch, bts: &mut bts }.wrmsr(&m, IA32_DEBUGCTL, debugctl).unwrap();
        assert_eq!(read(&pmu, &lbr, &arch, &bts), Ok(debugctl));
        assert!(crate::system_cpu::lbr_recording(false, false, &bts, &arch, &pmu));
    }
}
