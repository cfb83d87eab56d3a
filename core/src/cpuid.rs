//! CPUID as the modelled part answers it (SDM Vol. 2A, "CPUID—CPU Identification"), issue 13's
//! per-CPU facade: QEMU's TCG executes CPUID first, then the leaves the capability profile owns
//! replace or amend what it returned. The plugin only reads the four registers after the
//! instruction and writes back the ones that changed.

use crate::arch_lbr::ArchLbrCaps;
use crate::pmu::PmuCaps;
use crate::pt::caps::{CpuSignature, PtCaps};

/// What the answers depend on: the Intel PT capability profile, the part it models, the Debug
/// Store options and the counting PMU.
#[derive(Clone, Copy, Debug)]
pub struct CpuidProfile {
    pub caps: PtCaps,
    /// CPUID.01H family/model/stepping; None keeps QEMU's own (`profile=minimal`).
    pub signature: Option<CpuSignature>,
    /// The Debug Store with BTS: CPUID.1:EDX[21] DS and ECX[4] DS-CPL.
    pub bts: bool,
    /// CPUID.1:ECX[2] DTES64 (with `bts`).
    pub dtes64: bool,
    /// Atom RTIT (seed 002) instead of Intel PT: Silvermont 06_4DH, no leaf 14H.
    pub rtit: bool,
    pub pmu: PmuCaps,
    /// Architectural LBRs (`profile=sapphirerapids`): CPUID.(7,0):EDX[19] and leaf 1CH.
    pub arch_lbr: Option<ArchLbrCaps>,
}

/// What one CPU remembers between CPUID executions: QEMU's own CPUID.0:EAX, from the last
/// leaf 0 (leaves above it up to the raised maximum are QEMU's out-of-range answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeLeaves {
    pub max_leaf: u32,
}

impl Default for NativeLeaves {
    /// Before the guest's first CPUID.0 the raised maximum is assumed to be QEMU's own.
    fn default() -> Self {
        NativeLeaves { max_leaf: 0x14 }
    }
}

const EAX: usize = 0;
const EBX: usize = 1;
const ECX: usize = 2;
const EDX: usize = 3;

impl CpuidProfile {
    /// CPUID.0:EAX must reach leaf 14H (and 15H for the MTC clock ratio, 1CH for Arch LBR).
    pub fn max_leaf(&self) -> u32 {
        if self.arch_lbr.is_some() {
            0x1C
        } else if self.caps.mtc {
            0x15
        } else {
            0x14
        }
    }

    /// {EAX, EBX, ECX, EDX} of CPUID(`leaf`, `subleaf`) given what QEMU answered (`native`).
    pub fn answer(&self, leaf: u32, subleaf: u32, native: [u32; 4], seen: &mut NativeLeaves) -> [u32; 4] {
        let mut r = native;
        let max_leaf = self.max_leaf();
        if leaf == 1 {
            // CPUID.1:ECX[15] PDCM: IA32_PERF_CAPABILITIES exists (full-width counter writes).
            let pdcm = self.pmu.perf_capabilities().is_some();
            r[ECX] = (r[ECX] & !(1 << 15)) | (u32::from(pdcm) << 15);
            if self.caps.power_events {
                // CPUID.1:ECX[3] MONITOR/MWAIT: QEMU's TCG MWAIT halts like HLT on one vCPU and
                // is a no-op with several, and MONITOR arms nothing, so the MWAIT power events
                // (MWAIT hints, the hinted C-state, wake by a store) cannot be faithful: a part
                // with power event trace advertises no MONITOR/MWAIT here (README "Newest parts").
                r[ECX] &= !(1 << 3);
            }
            if let Some(sig) = self.signature {
                // The family/model/stepping of the part the profile models (EAX[31:28] and
                // [15:14] are reserved and kept).
                r[EAX] = (r[EAX] & 0xF000_C000) | sig.cpuid_01_eax();
            }
        }
        match leaf {
            0 => {
                seen.max_leaf = r[EAX];
                if r[EAX] < max_leaf && !self.rtit {
                    r[EAX] = max_leaf;
                }
            }
            // Leaves QEMU does not implement that are now below the raised maximum: QEMU would
            // answer them with its highest leaf's values (Intel's out-of-range rule); they are
            // reserved and read as 0.
            l if l > seen.max_leaf && l <= max_leaf && l != 0x14 && l != 0x15 && l != 0x1C && !self.rtit => r = [0; 4],
            1 if self.bts || self.rtit => {
                if self.rtit {
                    // RTIT is not enumerated by CPUID: software recognises the part by its
                    // family/model signature (seed 002 §1.2), here Silvermont 06_4DH.
                    r[EAX] = (r[EAX] & 0xF000_C000) | crate::rtit::SILVERMONT.cpuid_01_eax();
                }
                if self.bts {
                    // CPUID.1:EDX[21] DS, ECX[4] DS-CPL, ECX[2] DTES64 (SDM Vol. 2A Tables 3-10 and
                    // 3-11): the Debug Store with BTS and CPL-qualified BTS (BTS_OFF_OS/USR).
                    r[EDX] |= 1 << 21;
                    r[ECX] = ((r[ECX] | (1 << 4)) & !(1 << 2)) | (u32::from(self.dtes64) << 2);
                }
            }
            7 if subleaf == 0 && self.rtit => r[EBX] &= !(1 << 25), // no Intel PT on Silvermont
            0x14 if self.rtit => r = [0; 4],
            7 if subleaf == 0 => {
                // CPUID.(7,0):EBX[25] Intel PT.
                r[EBX] |= 1 << 25;
                // CPUID.(7,0):ECX[16] LA57: a Skylake-class part has no 5-level paging, and with
                // it the RTIT address MSRs would have to accept 57-bit canonical addresses.
                r[ECX] &= !(1 << 16);
                if self.arch_lbr.is_some() {
                    // CPUID.(7,0):EDX[19] Arch_LBR (SDM Vol. 3B §18.1).
                    r[EDX] |= 1 << 19;
                }
            }
            // CPUID.1CH: the Arch LBR capabilities (depths, filters, INFO fields).
            0x1C => {
                if let Some(a) = self.arch_lbr {
                    r = a.cpuid_1c();
                }
            }
            // CPUID.15H: TSC/"core crystal clock" ratio EBX/EAX = ART_RATIO/1 (the ART behind MTC
            // and TMA). ECX (crystal Hz) stays 0 as on client parts. All four registers: QEMU
            // answers a leaf above its maximum with its highest leaf's values, and a stray ECX
            // would be taken as the crystal frequency.
            0x15 if self.caps.mtc && seen.max_leaf < 0x15 => r = [1, crate::pt::tracer::ART_RATIO as u32, 0, 0],
            // CPUID.80000008H:EAX[7:0] MAXPHYADDR must match the profile: it decides the reserved
            // bits of IA32_RTIT_OUTPUT_BASE and of ToPA entries.
            0x8000_0008 => r[EAX] = (r[EAX] & !0xFF) | u32::from(self.caps.max_phys_addr),
            // The counting PMU of the profile (SDM §20.2): Linux's core PMU driver counts with it
            // and services the ToPA PMI from its NMI handler.
            0x0A => r = self.pmu.cpuid_0a(),
            0x14 => r = self.caps.cpuid_14(subleaf),
            _ => {}
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU's `-cpu max,vendor=GenuineIntel` as the Linux guest sees it: maximum basic leaf 0DH,
    /// family/model 06_06H, leaf 1 ECX with MONITOR (3), DTES64 (2) clear.
    const QEMU_LEAF0: [u32; 4] = [0x0D, 0x756E_6547, 0x6C65_746E, 0x4965_6E69];
    const QEMU_LEAF1: [u32; 4] = [0x0000_0663, 0x0000_0800, 0x8000_2209 | (1 << 3), 0x0781_ABFF];

    fn profile(name: &str) -> CpuidProfile {
        let (caps, signature) = PtCaps::profile(name).unwrap();
        let arch_lbr = (name == "sapphirerapids").then_some(ArchLbrCaps::SAPPHIRE_RAPIDS);
        CpuidProfile { caps, signature, bts: true, dtes64: true, rtit: false, pmu: PmuCaps::SKYLAKE, arch_lbr }
    }

    fn silvermont() -> CpuidProfile {
        CpuidProfile { rtit: true, signature: None, pmu: PmuCaps::SILVERMONT, ..profile("minimal") }
    }

    #[test]
    fn skylake_raises_the_maximum_basic_leaf_and_blanks_the_leaves_qemu_lacks() {
        let p = profile("skylake");
        let mut seen = NativeLeaves::default();
        let r = p.answer(0, 0, QEMU_LEAF0, &mut seen);
        assert_eq!(r, [0x15, QEMU_LEAF0[1], QEMU_LEAF0[2], QEMU_LEAF0[3]]);
        assert_eq!(seen.max_leaf, 0x0D);
        // Leaf 0EH (QEMU would repeat leaf 0DH's values) reads as reserved zeros.
        assert_eq!(p.answer(0x0E, 0, [7, 8, 9, 10], &mut seen), [0; 4]);
        // Leaf 15H: the ART ratio, since QEMU has no leaf 15H.
        assert_eq!(p.answer(0x15, 0, [7, 8, 9, 10], &mut seen), [1, 128, 0, 0]);
        // A leaf QEMU implements is kept.
        assert_eq!(p.answer(0x0B, 0, [1, 2, 3, 4], &mut seen), [1, 2, 3, 4]);
    }

    #[test]
    fn a_qemu_that_has_leaf_15h_keeps_its_own() {
        let p = profile("skylake");
        let mut seen = NativeLeaves::default();
        p.answer(0, 0, [0x1F, 0, 0, 0], &mut seen);
        assert_eq!(p.answer(0x15, 0, [2, 100, 0, 0], &mut seen), [2, 100, 0, 0]);
        assert_eq!(p.answer(0, 0, [0x1F, 0, 0, 0], &mut seen)[0], 0x1F, "never lowered");
    }

    #[test]
    fn skylake_leaf_1_is_06_5eh_stepping_3_with_ds_dtes64_ds_cpl_and_pdcm() {
        let p = profile("skylake");
        let r = p.answer(1, 0, QEMU_LEAF1, &mut NativeLeaves::default());
        assert_eq!(r[0], 0x0005_06E3);
        assert_eq!(r[1], QEMU_LEAF1[1]);
        assert_eq!(r[2] & (1 << 15), 1 << 15, "PDCM: PERF_CAPABILITIES exists");
        assert_eq!(r[2] & (1 << 4), 1 << 4, "DS-CPL");
        assert_eq!(r[2] & (1 << 2), 1 << 2, "DTES64");
        assert_eq!(r[2] & (1 << 3), 1 << 3, "MONITOR/MWAIT kept without power event trace");
        assert_eq!(r[3], QEMU_LEAF1[3] | (1 << 21), "DS");
        let no64 = CpuidProfile { dtes64: false, ..p };
        assert_eq!(no64.answer(1, 0, QEMU_LEAF1 .map(|x| x | 4), &mut NativeLeaves::default())[2] & (1 << 2), 0);
        let no_bts = CpuidProfile { bts: false, ..p };
        assert_eq!(no_bts.answer(1, 0, QEMU_LEAF1, &mut NativeLeaves::default())[3], QEMU_LEAF1[3]);
    }

    #[test]
    fn minimal_keeps_qemus_signature_and_a_pmu_without_perf_capabilities_clears_pdcm() {
        let p = CpuidProfile { pmu: PmuCaps::SILVERMONT, ..profile("minimal") };
        let r = p.answer(1, 0, QEMU_LEAF1.map(|x| x | (1 << 15)), &mut NativeLeaves::default());
        assert_eq!(r[0], QEMU_LEAF1[0] | (1 << 15));
        assert_eq!(r[2] & (1 << 15), 0);
    }

    #[test]
    fn sapphire_rapids_reports_06_8fh_and_no_monitor_mwait() {
        let p = profile("sapphirerapids");
        let r = p.answer(1, 0, QEMU_LEAF1, &mut NativeLeaves::default());
        assert_eq!(r[0], 0x0008_06F8);
        assert_eq!(r[2] & (1 << 3), 0);
        assert_eq!(p.answer(0x14, 0, [0; 4], &mut NativeLeaves::default()), [1, 0x1EF, 7, 0]);
    }

    #[test]
    fn sapphire_rapids_enumerates_arch_lbr_in_leaf_7_and_1ch_and_raises_the_maximum_to_1ch() {
        let p = profile("sapphirerapids");
        let mut seen = NativeLeaves::default();
        assert_eq!(p.answer(0, 0, QEMU_LEAF0, &mut seen)[0], 0x1C);
        assert_eq!(p.answer(7, 0, [0; 4], &mut seen), [0, 1 << 25, 0, 1 << 19]);
        assert_eq!(p.answer(0x1C, 0, [7, 8, 9, 10], &mut seen), [0x8000_000F, 7, 7, 0]);
        // The leaves between QEMU's maximum and 1CH read as reserved zeros.
        assert_eq!(p.answer(0x1B, 0, [7, 8, 9, 10], &mut seen), [0; 4]);
        // A QEMU whose maximum is above 1CH: its leaf 1CH is replaced, the maximum kept.
        let mut seen = NativeLeaves::default();
        assert_eq!(p.answer(0, 0, [0x1F, 0, 0, 0], &mut seen)[0], 0x1F);
        assert_eq!(p.answer(0x1C, 0, [0; 4], &mut seen), ArchLbrCaps::SAPPHIRE_RAPIDS.cpuid_1c());
    }

    #[test]
    fn profiles_without_arch_lbr_keep_leaf_7_edx_and_leaf_1ch() {
        for name in ["skylake", "minimal", "icelake"] {
            let p = profile(name);
            let mut seen = NativeLeaves::default();
            assert!(p.answer(0, 0, QEMU_LEAF0, &mut seen)[0] <= 0x15);
            assert_eq!(p.answer(7, 0, [0, 0, 0, 0x55], &mut seen)[3], 0x55, "{name}");
        }
        let mut seen = NativeLeaves::default();
        profile("skylake").answer(0, 0, [0x1F, 0, 0, 0], &mut seen);
        assert_eq!(profile("skylake").answer(0x1C, 0, [7, 8, 9, 10], &mut seen), [7, 8, 9, 10]);
    }

    #[test]
    fn leaf_7_enumerates_intel_pt_without_la57_and_leaf_14h_is_the_profile() {
        let p = profile("skylake");
        let r = p.answer(7, 0, [0, 0, 1 << 16, 0], &mut NativeLeaves::default());
        assert_eq!(r, [0, 1 << 25, 0, 0]);
        assert_eq!(p.answer(7, 1, [5, 6, 7, 8], &mut NativeLeaves::default()), [5, 6, 7, 8], "subleaf 1 untouched");
        assert_eq!(p.answer(0x14, 1, [9; 4], &mut NativeLeaves::default()), p.caps.cpuid_14(1));
    }

    #[test]
    fn leaf_0ah_and_maxphyaddr_follow_the_profile() {
        let p = profile("skylake");
        assert_eq!(p.answer(0x0A, 0, [0; 4], &mut NativeLeaves::default()), PmuCaps::SKYLAKE.cpuid_0a());
        let r = p.answer(0x8000_0008, 0, [0x3028, 1, 2, 3], &mut NativeLeaves::default());
        assert_eq!(r, [0x3000 | u32::from(p.caps.max_phys_addr), 1, 2, 3]);
    }

    #[test]
    fn core2_profile_reports_penryn_06_17h_with_ds_dtes64_pdcm_and_perfmon_version_2() {
        // The E8400's signature 0001067AH; DS, DS-CPL, DTES64 and PDCM as on the part (a Penryn
        // E5200 06_17H dump reads ECX 0000E39DH, EDX[21] set); leaf 0AH: version 2, 2 GP + 3
        // fixed 40-bit counters (the same dump: 07280202H / 503H; EBX as every profile).
        let p = CpuidProfile { pmu: PmuCaps::CORE2, ..profile("core2") };
        let mut seen = NativeLeaves::default();
        let r = p.answer(1, 0, QEMU_LEAF1, &mut seen);
        assert_eq!(r[0], 0x0001_067A);
        assert_eq!(r[2] & (1 << 15 | 1 << 4 | 1 << 2), 1 << 15 | 1 << 4 | 1 << 2, "PDCM, DS-CPL, DTES64");
        assert_eq!(r[3] & (1 << 21), 1 << 21, "DS");
        assert_eq!(p.answer(0x0A, 0, [0; 4], &mut seen), [0x0728_0202, 0x18, 0, 0x503]);
    }

    #[test]
    fn silvermont_reports_06_4dh_and_hides_intel_pt() {
        let p = silvermont();
        let mut seen = NativeLeaves::default();
        assert_eq!(p.answer(0, 0, QEMU_LEAF0, &mut seen)[0], 0x0D, "no leaf 14H to reach");
        assert_eq!(p.answer(0x0E, 0, [1, 2, 3, 4], &mut seen), [1, 2, 3, 4]);
        let r = p.answer(1, 0, QEMU_LEAF1, &mut seen);
        assert_eq!(r[0], 0x0004_06D8);
        assert_eq!(r[3] & (1 << 21), 1 << 21);
        assert_eq!(p.answer(7, 0, [0, u32::MAX, 0, 0], &mut seen)[1], !(1 << 25));
        assert_eq!(p.answer(0x14, 0, [1, 2, 3, 4], &mut seen), [0; 4]);
    }
}
