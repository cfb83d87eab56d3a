//! IA32_RTIT_CTL (MSR 0x570) and the address-range configuration it selects
//! (SDM Vol. 3C §33.2.8.2 "IA32_RTIT_CTL MSR", §33.2.5.3 "Filtering by IP").

/// MSR index of IA32_RTIT_CTL.
pub const IA32_RTIT_CTL: u32 = 0x570;

/// IA32_RTIT_CTL as a typed register. Field accessors name the SDM bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitCtl(pub u64);

impl RtitCtl {
    crate::reg_flag!(trace_en, set_trace_en, 0, "IA32_RTIT_CTL[0] TraceEn");
    crate::reg_flag!(cyc_en, set_cyc_en, 1, "IA32_RTIT_CTL[1] CYCEn");
    crate::reg_flag!(os, set_os, 2, "IA32_RTIT_CTL[2] OS: trace when CPL = 0");
    crate::reg_flag!(user, set_user, 3, "IA32_RTIT_CTL[3] User: trace when CPL > 0");
    crate::reg_flag!(pwr_evt_en, set_pwr_evt_en, 4, "IA32_RTIT_CTL[4] PwrEvtEn");
    crate::reg_flag!(fup_on_ptw, set_fup_on_ptw, 5, "IA32_RTIT_CTL[5] FUPonPTW");
    crate::reg_flag!(fabric_en, set_fabric_en, 6, "IA32_RTIT_CTL[6] FabricEn");
    crate::reg_flag!(cr3_filter, set_cr3_filter, 7, "IA32_RTIT_CTL[7] CR3Filter");
    crate::reg_flag!(topa, set_topa, 8, "IA32_RTIT_CTL[8] ToPA");
    crate::reg_flag!(mtc_en, set_mtc_en, 9, "IA32_RTIT_CTL[9] MTCEn");
    crate::reg_flag!(tsc_en, set_tsc_en, 10, "IA32_RTIT_CTL[10] TSCEn");
    crate::reg_flag!(dis_retc, set_dis_retc, 11, "IA32_RTIT_CTL[11] DisRETC: no RET compression");
    crate::reg_flag!(ptw_en, set_ptw_en, 12, "IA32_RTIT_CTL[12] PTWEn");
    crate::reg_flag!(branch_en, set_branch_en, 13, "IA32_RTIT_CTL[13] BranchEn");
    crate::reg_field!(mtc_freq, set_mtc_freq, 14, 4, "IA32_RTIT_CTL[17:14] MTCFreq");
    crate::reg_field!(cyc_thresh, set_cyc_thresh, 19, 4, "IA32_RTIT_CTL[22:19] CycThresh");
    crate::reg_field!(psb_freq, set_psb_freq, 24, 4, "IA32_RTIT_CTL[27:24] PSBFreq");
    crate::reg_flag!(event_en, set_event_en, 31, "IA32_RTIT_CTL[31] EventEn");
    crate::reg_flag!(dis_tnt, set_dis_tnt, 55, "IA32_RTIT_CTL[55] DisTNT");
    crate::reg_flag!(
        inject_psb_pmi_on_enable,
        set_inject_psb_pmi_on_enable,
        56,
        "IA32_RTIT_CTL[56] InjectPsbPmiOnEnable"
    );

    /// IA32_RTIT_CTL[35+4n:32+4n] ADDRn_CFG.
    pub fn addr_cfg(self, n: usize) -> AddrCfg {
        AddrCfg::from_bits(((self.0 >> (32 + 4 * n)) & 0xF) as u8)
    }

    pub fn set_addr_cfg(&mut self, n: usize, cfg: AddrCfg) -> &mut Self {
        let shift = 32 + 4 * n as u32;
        self.0 = (self.0 & !(0xF << shift)) | (u64::from(cfg.bits()) << shift);
        self
    }

    /// Output bytes between PSB packets: 2K << PSBFreq (SDM §33.2.8.2, PSBFreq).
    pub fn psb_period_bytes(self) -> u64 {
        2048u64 << self.psb_freq()
    }
}

/// ADDRn_CFG encodings (SDM §33.2.8.2): 0 unused, 1 filter range, 2 TraceStop range, others reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrCfg {
    Unused,
    Filter,
    TraceStop,
    /// 3..=15: reserved; a WRMSR with such a value #GPs.
    Reserved(u8),
}

impl AddrCfg {
    pub fn from_bits(v: u8) -> Self {
        match v & 0xF {
            0 => AddrCfg::Unused,
            1 => AddrCfg::Filter,
            2 => AddrCfg::TraceStop,
            r => AddrCfg::Reserved(r),
        }
    }

    pub fn bits(self) -> u8 {
        match self {
            AddrCfg::Unused => 0,
            AddrCfg::Filter => 1,
            AddrCfg::TraceStop => 2,
            AddrCfg::Reserved(r) => r & 0xF,
        }
    }
}

/// One IA32_RTIT_ADDRn_A / IA32_RTIT_ADDRn_B pair: an inclusive linear-address range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddrRange {
    pub a: u64,
    pub b: u64,
}

impl AddrRange {
    /// SDM §33.2.5.3: the range is [ADDRn_A, ADDRn_B], both inclusive.
    pub fn contains(self, ip: u64) -> bool {
        self.a <= ip && ip <= self.b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_user_config_0x2509_reads_back_as_named_fields() {
        // perf record -e intel_pt//u with no timing caps programs 0x2509 (shared/reference/linux-guest.md).
        let c = RtitCtl(0x2509);
        assert!(c.trace_en() && c.user() && c.topa() && c.tsc_en() && c.branch_en());
        assert!(!c.os() && !c.cyc_en() && !c.mtc_en() && !c.dis_retc());
    }

    #[test]
    fn multi_bit_fields_round_trip_and_truncate() {
        let mut c = RtitCtl::default();
        c.set_psb_freq(3).set_mtc_freq(9).set_cyc_thresh(0x1F);
        assert_eq!(c.psb_freq(), 3);
        assert_eq!(c.mtc_freq(), 9);
        assert_eq!(c.cyc_thresh(), 0xF);
        assert_eq!(c.0, (3 << 24) | (9 << 14) | (0xF << 19));
        assert_eq!(c.psb_period_bytes(), 16384);
    }

    #[test]
    fn addr_cfg_fields_live_at_bits_32_to_47() {
        let mut c = RtitCtl::default();
        c.set_addr_cfg(0, AddrCfg::Filter).set_addr_cfg(3, AddrCfg::TraceStop);
        assert_eq!(c.0, (1 << 32) | (2 << 44));
        assert_eq!(c.addr_cfg(0), AddrCfg::Filter);
        assert_eq!(c.addr_cfg(1), AddrCfg::Unused);
        assert_eq!(c.addr_cfg(3), AddrCfg::TraceStop);
        assert_eq!(AddrCfg::from_bits(7), AddrCfg::Reserved(7));
    }
}
