//! The counter-control registers as typed values (SDM Vol. 3B §20.2.1.1 Figure 20-1
//! "Layout of IA32_PERFEVTSELx MSRs", §20.2.2 Figure 20-2 "Layout of IA32_FIXED_CTR_CTRL MSR",
//! §20.2.3 for AnyThread in version 3).

/// IA32_PERFEVTSELx (186H + x).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEvtSel(pub u64);

impl PerfEvtSel {
    reg_field!(event, set_event, 0, 8, "[7:0] Event Select");
    reg_field!(umask, set_umask, 8, 8, "[15:8] Unit Mask (UMASK)");
    reg_flag!(usr, set_usr, 16, "[16] USR: count while CPL > 0");
    reg_flag!(os, set_os, 17, "[17] OS: count while CPL = 0");
    reg_flag!(edge, set_edge, 18, "[18] E: edge detect");
    reg_flag!(pc, set_pc, 19, "[19] PC: pin control (no pin to toggle in an emulator; kept)");
    reg_flag!(int, set_int, 20, "[20] INT: APIC interrupt (PMI) on overflow");
    reg_flag!(any, set_any, 21, "[21] AnyThread (version 3 and later; reserved before)");
    reg_flag!(en, set_en, 22, "[22] EN: enable counter");
    reg_flag!(inv, set_inv, 23, "[23] INV: invert the counter-mask comparison");
    reg_field!(cmask, set_cmask, 24, 8, "[31:24] CMASK: counter mask");
    reg_flag!(adaptive, set_adaptive, 34, "[34] Adaptive_Record (PEBS_BASELINE parts): the PEBS record holds the MSR_PEBS_DATA_CFG groups");

    /// [34] Adaptive_Record.
    pub const ADAPTIVE: u64 = 1 << 34;

    /// Bits that #GP on WRMSR: 63:32 (IN_TX/IN_TXCP of TSX parts are not modelled), and
    /// AnyThread before version 3.
    pub fn reserved(version: u8) -> u64 {
        let mut r = !0xFFFF_FFFFu64;
        if version < 3 {
            r |= 1 << 21;
        }
        r
    }

    /// Counts at this CPL (USR for CPL > 0, OS for CPL 0).
    pub fn counts_at(self, cpl: u8) -> bool {
        if cpl == 0 {
            self.os()
        } else {
            self.usr()
        }
    }
}

/// IA32_FIXED_CTR_CTRL (38DH): 4 bits per fixed counter i at 4i: EN[1:0] (0 off, 1 OS, 2 USR,
/// 3 both), AnyThread [2] (version 3+), PMI [3].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedCtrCtrl(pub u64);

impl FixedCtrCtrl {
    /// Bits that #GP on WRMSR for `fixed` counters.
    pub fn reserved(version: u8, fixed: usize) -> u64 {
        let per = if version < 3 { 0b1011 } else { 0b1111 };
        let mut valid = 0u64;
        for i in 0..fixed {
            valid |= per << (4 * i);
        }
        !valid
    }

    /// EN field of fixed counter `i`.
    pub fn en(self, i: usize) -> u8 {
        ((self.0 >> (4 * i)) & 3) as u8
    }

    pub fn pmi(self, i: usize) -> bool {
        self.0 & (1 << (4 * i + 3)) != 0
    }

    /// FCi_Adaptive_Record, bit 32 + 4i (PEBS_BASELINE parts).
    pub const fn adaptive_bit(i: usize) -> u64 {
        1 << (32 + 4 * i)
    }

    pub fn adaptive(self, i: usize) -> bool {
        self.0 & Self::adaptive_bit(i) != 0
    }

    pub fn counts_at(self, i: usize, cpl: u8) -> bool {
        let en = self.en(i);
        if cpl == 0 {
            en & 1 != 0
        } else {
            en & 2 != 0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfevtsel_fields_follow_figure_20_1() {
        // Linux's Skylake `cycles:pp` alias: INST_RETIRED.ANY_P with INV = 1, CMASK = 16.
        let v = PerfEvtSel(0x1080_00C0 | (1 << 22) | (1 << 16));
        assert_eq!((v.event(), v.umask(), v.cmask()), (0xC0, 0, 16));
        assert!(v.inv() && v.en() && v.usr() && !v.os() && !v.int() && !v.edge());
        assert!(v.counts_at(3) && !v.counts_at(0));
        assert_eq!(PerfEvtSel::reserved(2) & (1 << 21), 1 << 21, "AnyThread reserved in version 2");
        assert_eq!(PerfEvtSel::reserved(4) & 0xFFFF_FFFF, 0);
    }

    #[test]
    fn fixed_ctr_ctrl_fields_follow_figure_20_2() {
        let c = FixedCtrCtrl(0x0B_2_1); // ctr0 OS, ctr1 USR, ctr2 both + PMI
        assert_eq!((c.en(0), c.en(1), c.en(2)), (1, 2, 3));
        assert!(c.counts_at(0, 0) && !c.counts_at(0, 3) && c.counts_at(1, 3) && !c.counts_at(1, 0));
        assert!(c.pmi(2) && !c.pmi(0));
        assert_eq!(FixedCtrCtrl::reserved(2, 3), !0xBBB);
        assert_eq!(FixedCtrCtrl::reserved(4, 3), !0xFFF);
    }
}
