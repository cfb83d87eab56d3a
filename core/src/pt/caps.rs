//! The Intel PT capability profile: what CPUID.(EAX=14H) enumerates (SDM Vol. 3C §33.3.1,
//! Table 33-11), plus MAXPHYADDR. Reserved-bit masks of the IA32_RTIT_* MSRs and the packets the
//! model may emit are derived from it, so the guest sees exactly what is implemented.

/// Capabilities enumerated by CPUID leaf 14H and the physical-address width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtCaps {
    /// CPUID.(14H,0):EBX[0] CR3 filtering (IA32_RTIT_CTL.CR3Filter, IA32_RTIT_CR3_MATCH).
    pub cr3_filter: bool,
    /// EBX[1] configurable PSB frequency and cycle-accurate mode (CYC).
    pub psb_cyc: bool,
    /// EBX[2] IP filtering, TraceStop, PSB/PMI preservation of ADDRn.
    pub ip_filter: bool,
    /// EBX[3] MTC timing packets.
    pub mtc: bool,
    /// EBX[4] PTWRITE.
    pub ptwrite: bool,
    /// EBX[5] power event trace.
    pub power_events: bool,
    /// EBX[6] PSB and PMI preservation (InjectPsbPmiOnEnable).
    pub psb_pmi_preserve: bool,
    /// EBX[7] event trace (EventEn).
    pub event_trace: bool,
    /// EBX[8] TNT disable (DisTNT).
    pub dis_tnt: bool,
    /// ECX[0] ToPA output.
    pub topa: bool,
    /// ECX[1] ToPA tables with more than one output entry.
    pub topa_multi: bool,
    /// ECX[2] single-range output.
    pub single_range: bool,
    /// ECX[3] output to a trace transport subsystem (FabricEn).
    pub trace_transport: bool,
    /// ECX[31] IP payloads are LIPs (CS base added).
    pub lip: bool,
    /// CPUID.(14H,1):EAX[2:0] number of ADDRn_A/B pairs.
    pub num_addr_ranges: u8,
    /// CPUID.(14H,1):EAX[31:16] supported MTCFreq encodings (bitmap).
    pub mtc_period_bitmap: u16,
    /// CPUID.(14H,1):EBX[15:0] supported CycThresh encodings (bitmap).
    pub cyc_thresh_bitmap: u16,
    /// CPUID.(14H,1):EBX[31:16] supported PSBFreq encodings (bitmap).
    pub psb_freq_bitmap: u16,
    /// CPUID.80000008H:EAX[7:0] MAXPHYADDR.
    pub max_phys_addr: u8,
}

/// The family/model/stepping a profile reports in CPUID.01H:EAX (SDM Vol. 2A, CPUID,
/// Figure 3-6 "Version Information Returned by CPUID in EAX").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSignature {
    /// Display family (6 for every part here: no extended family).
    pub family: u8,
    /// Display model: extended model (EAX[19:16]) : model (EAX[7:4]).
    pub model: u8,
    pub stepping: u8,
}

impl CpuSignature {
    /// CPUID.01H:EAX[19:0] for this signature; the caller keeps EAX[31:28] and [15:14] (reserved).
    pub const fn cpuid_01_eax(self) -> u32 {
        ((self.model as u32 >> 4) << 16) | ((self.family as u32) << 8) | ((self.model as u32 & 0xF) << 4)
            | (self.stepping as u32 & 0xF)
    }
}

/// Skylake client (6th generation Core, e.g. Core i7-6700K): family 6, model 5EH, stepping 3
/// (CPUID.01H:EAX 000506E3H; Linux INTEL_FAM6_SKYLAKE). The part whose PMU the default profile
/// models (perfmon version 4, 32 model-specific LBRs, PEBS format 3: SDM Vol. 4 Table 2-20 for
/// 06_5EH), so Linux picks its Skylake tables (README "Counting PMU").
pub const SKYLAKE_SIGNATURE: CpuSignature = CpuSignature { family: 6, model: 0x5E, stepping: 3 };

/// Sapphire Rapids (Xeon Scalable 4th generation): family 6, model 8FH, stepping 8 (CPUID.01H:EAX
/// 000806F8H; Linux INTEL_FAM6_SAPPHIRERAPIDS_X).
pub const SAPPHIRE_RAPIDS_SIGNATURE: CpuSignature = CpuSignature { family: 6, model: 0x8F, stepping: 8 };

/// Ice Lake client (10th generation Core, e.g. Core i7-1065G7): family 6, model 7EH, stepping 5
/// (CPUID.01H:EAX 000706E5H; Linux INTEL_FAM6_ICELAKE_L). The part whose PMU `profile=icelake`
/// models (perfmon version 5, 32 model-specific LBRs, adaptive PEBS format 4 with
/// PEBS_BASELINE), so Linux picks its Ice Lake tables (README "Icelake profile").
pub const ICELAKE_SIGNATURE: CpuSignature = CpuSignature { family: 6, model: 0x7E, stepping: 5 };

/// Nehalem (1st generation Core i7, Core i7-920 D0): family 6, model 1AH, stepping 5 (CPUID.01H:EAX
/// 000106A5H; Linux INTEL_FAM6_NEHALEM_EP). The part whose PMU `profile=nehalem` models (perfmon
/// version 3, the enhanced 176-byte PEBS record, PERF_CAPABILITIES[11:8] = 1; seed 001 §6.7).
pub const NEHALEM_SIGNATURE: CpuSignature = CpuSignature { family: 6, model: 0x1A, stepping: 5 };

/// Core 2 Duo E8400 (Penryn / Wolfdale, 45 nm Intel Core microarchitecture): family 6, model 17H,
/// stepping AH (CPUID.01H:EAX 0001067AH; Linux INTEL_FAM6_CORE2_PENRYN). The part whose PMU
/// `profile=core2` models (perfmon version 2, PEBS record format 0, 144 bytes, on IA32_PMC0 only).
/// Penryn rather than Merom 06_0FH: Linux 6.1 disables PEBS on every Merom (intel_clovertown_quirk,
/// errata AJ67/AJ68/AJ69/AJ106), so only a Penryn signature takes its "PEBS fmt0" path.
pub const CORE2_SIGNATURE: CpuSignature = CpuSignature { family: 6, model: 0x17, stepping: 0xA };

impl PtCaps {
    /// A Skylake-class client part: ToPA (multi-entry), single range, CR3 filter, PSB/CYC,
    /// 2 IP ranges, MTC. CPUID.14H.0 = {1, 0xF, 0x7, 0}, 14H.1 = {0x02490002, 0x003F3FFF}
    /// (shared/reference/pt-packets.md §8).
    pub const SKYLAKE: PtCaps = PtCaps {
        cr3_filter: true,
        psb_cyc: true,
        ip_filter: true,
        mtc: true,
        ptwrite: false,
        power_events: false,
        psb_pmi_preserve: false,
        event_trace: false,
        dis_tnt: false,
        topa: true,
        topa_multi: true,
        single_range: true,
        trace_transport: false,
        lip: false,
        num_addr_ranges: 2,
        mtc_period_bitmap: 0x0249,
        cyc_thresh_bitmap: 0x3FFF,
        psb_freq_bitmap: 0x003F,
        max_phys_addr: 39,
    };

    /// The smallest Intel PT implementation: ToPA with one output region per table, nothing
    /// else (no CR3 filter, no configurable PSB/CYC, no IP filtering, no MTC, no single range).
    /// CPUID.14H.0 = {0, 0, 0x1, 0}; subleaf 1 is not enumerated.
    pub const MINIMAL: PtCaps = PtCaps {
        cr3_filter: false,
        psb_cyc: false,
        ip_filter: false,
        mtc: false,
        ptwrite: false,
        power_events: false,
        psb_pmi_preserve: false,
        event_trace: false,
        dis_tnt: false,
        topa: true,
        topa_multi: false,
        single_range: false,
        trace_transport: false,
        lip: false,
        num_addr_ranges: 0,
        mtc_period_bitmap: 0,
        cyc_thresh_bitmap: 0,
        psb_freq_bitmap: 0,
        max_phys_addr: 39,
    };

    /// A Sapphire Rapids-class part (4th generation Xeon Scalable, CPUID 06_8FH stepping 8,
    /// [`SAPPHIRE_RAPIDS_SIGNATURE`]) with the Intel PT features of the newest parts, each
    /// enumerated only where the model implements it (a CPUID bit set means the feature works):
    /// the Skylake-class base (CPUID.(14H,1) = {0x02490002, 0x003F3FFF}) plus
    /// EBX[5] power event trace (IA32_RTIT_CTL[4] PwrEvtEn: PWRE, EXSTOP, PWRX for HLT), EBX[6]
    /// PSB and PMI preservation (IA32_RTIT_CTL[56] InjectPsbPmiOnEnable, STATUS PendPSB /
    /// PendTopaPMI), EBX[7] Event Trace (IA32_RTIT_CTL[31] EventEn: CFE/EVD, MODE.Exec IF) and
    /// EBX[8] TNT disable (IA32_RTIT_CTL[55] DisTNT). Not enumerated: EBX[4] PTWRITE (QEMU's TCG
    /// raises #UD for the PTWRITE instruction, README "Newest parts").
    pub const SAPPHIRE_RAPIDS: PtCaps = PtCaps {
        cr3_filter: true,
        psb_cyc: true,
        ip_filter: true,
        mtc: true,
        ptwrite: false,
        power_events: true,
        psb_pmi_preserve: true,
        event_trace: true,
        dis_tnt: true,
        topa: true,
        topa_multi: true,
        single_range: true,
        trace_transport: false,
        lip: false,
        num_addr_ranges: 2,
        mtc_period_bitmap: 0x0249,
        cyc_thresh_bitmap: 0x3FFF,
        psb_freq_bitmap: 0x003F,
        max_phys_addr: 46,
    };

    /// Look a profile up by the name used in plugin options.
    pub fn by_name(name: &str) -> Option<PtCaps> {
        Self::profile(name).map(|(caps, _)| caps)
    }

    /// A profile by name, with the CPUID.01H signature of the part it models (None: QEMU's own
    /// family/model stays, as for `minimal`, which models no real part).
    pub fn profile(name: &str) -> Option<(PtCaps, Option<CpuSignature>)> {
        match name {
            "skylake" | "default" => Some((PtCaps::SKYLAKE, Some(SKYLAKE_SIGNATURE))),
            "minimal" => Some((PtCaps::MINIMAL, None)),
            "sapphirerapids" => Some((PtCaps::SAPPHIRE_RAPIDS, Some(SAPPHIRE_RAPIDS_SIGNATURE))),
            // Leaf 14H: the Skylake-class set the model implements (README "Icelake profile").
            "icelake" => Some((PtCaps::SKYLAKE, Some(ICELAKE_SIGNATURE))),
            // A Nehalem has no Intel PT; the model's trace unit stays enumerated with the
            // Skylake-class set (README "Nehalem profile").
            "nehalem" => Some((PtCaps::SKYLAKE, Some(NEHALEM_SIGNATURE))),
            // Nor has a Core 2 (README "Core 2 profile").
            "core2" => Some((PtCaps::SKYLAKE, Some(CORE2_SIGNATURE))),
            _ => None,
        }
    }

    pub const PROFILE_NAMES: &'static [&'static str] = &["skylake", "minimal", "sapphirerapids", "icelake", "nehalem", "core2"];

    /// CPUID.(EAX=14H, ECX=subleaf) as {EAX, EBX, ECX, EDX}; subleaves above 1 read as zero.
    pub fn cpuid_14(&self, subleaf: u32) -> [u32; 4] {
        let b = |v: bool, bit: u32| u32::from(v) << bit;
        match subleaf {
            0 => [
                // EAX: maximum subleaf (1 when subleaf 1 enumerates ranges or bitmaps)
                u32::from(self.ip_filter || self.mtc || self.psb_cyc),
                b(self.cr3_filter, 0)
                    | b(self.psb_cyc, 1)
                    | b(self.ip_filter, 2)
                    | b(self.mtc, 3)
                    | b(self.ptwrite, 4)
                    | b(self.power_events, 5)
                    | b(self.psb_pmi_preserve, 6)
                    | b(self.event_trace, 7)
                    | b(self.dis_tnt, 8),
                b(self.topa, 0) | b(self.topa_multi, 1) | b(self.single_range, 2) | b(self.trace_transport, 3)
                    | b(self.lip, 31),
                0,
            ],
            1 if self.ip_filter || self.mtc || self.psb_cyc => [
                u32::from(self.num_addr_ranges & 7) | (u32::from(self.mtc_period_bitmap) << 16),
                u32::from(self.cyc_thresh_bitmap) | (u32::from(self.psb_freq_bitmap) << 16),
                0,
                0,
            ],
            _ => [0; 4],
        }
    }

    /// Mask of physical-address bits at or above MAXPHYADDR.
    pub fn phys_addr_reserved_mask(&self) -> u64 {
        if self.max_phys_addr >= 64 {
            0
        } else {
            !0u64 << self.max_phys_addr
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skylake_profile_enumerates_the_reference_cpuid_values() {
        let c = PtCaps::SKYLAKE;
        assert_eq!(c.cpuid_14(0), [1, 0xF, 0x7, 0]);
        assert_eq!(c.cpuid_14(1), [0x0249_0002, 0x003F_3FFF, 0, 0]);
        assert_eq!(c.cpuid_14(2), [0; 4]);
        assert_eq!(c.phys_addr_reserved_mask(), 0xFFFF_FF80_0000_0000);
    }

    #[test]
    fn sapphire_rapids_profile_has_its_signature_and_the_skylake_subleaf_1() {
        let (c, sig) = PtCaps::profile("sapphirerapids").unwrap();
        assert_eq!(sig.unwrap().cpuid_01_eax(), 0x0008_06F8);
        assert_eq!(c.cpuid_14(1), [0x0249_0002, 0x003F_3FFF, 0, 0]);
        assert_eq!(c.cpuid_14(0), [1, 0x1EF, 0x7, 0]);
        // PTWRITE is never enumerated: QEMU's TCG has no PTWRITE instruction.
        assert_eq!(c.cpuid_14(0)[1] & (1 << 4), 0);
        assert_eq!(c.phys_addr_reserved_mask(), 0xFFFF_C000_0000_0000);
        // Skylake is 06_5EH stepping 3; `minimal` models no real part and keeps QEMU's.
        assert_eq!(PtCaps::profile("skylake").unwrap().1.unwrap().cpuid_01_eax(), 0x0005_06E3);
        assert_eq!(PtCaps::profile("minimal").unwrap().1, None);
    }

    #[test]
    fn minimal_profile_enumerates_single_entry_topa_only() {
        let c = PtCaps::MINIMAL;
        assert_eq!(c.cpuid_14(0), [0, 0, 0x1, 0]);
        assert_eq!(c.cpuid_14(1), [0; 4]);
    }
}
