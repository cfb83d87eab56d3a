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

    /// Look a profile up by the name used in plugin options.
    pub fn by_name(name: &str) -> Option<PtCaps> {
        match name {
            "skylake" | "default" => Some(PtCaps::SKYLAKE),
            "minimal" => Some(PtCaps::MINIMAL),
            _ => None,
        }
    }

    pub const PROFILE_NAMES: &'static [&'static str] = &["skylake", "minimal"];

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
    fn minimal_profile_enumerates_single_entry_topa_only() {
        let c = PtCaps::MINIMAL;
        assert_eq!(c.cpuid_14(0), [0, 0, 0x1, 0]);
        assert_eq!(c.cpuid_14(1), [0; 4]);
    }
}
