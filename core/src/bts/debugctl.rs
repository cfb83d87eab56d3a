//! IA32_DEBUGCTL (1D9H), IA32_DS_AREA (600H) and IA32_MISC_ENABLE[12:11] (SDM Vol. 4 Table 2-2;
//! SDM Vol. 3B §18.4.1 Figure 18-3 "IA32_DEBUGCTL MSR for Processors based on Intel Core
//! microarchitecture and later").

use crate::pt::msr::{is_canonical_48, Fault};

pub const IA32_DEBUGCTL: u32 = 0x1D9;
pub const IA32_DS_AREA: u32 = 0x600;
pub const IA32_MISC_ENABLE: u32 = 0x1A0;

/// IA32_DEBUGCTL. The BTS unit acts on TR, BTS, BTINT, BTS_OFF_OS and BTS_OFF_USR; LBR and the
/// two freeze bits act on the LBR stack (`crate::lbr`) and the PMU (`crate::pmu`); BTF and
/// RTM_DEBUG are accepted and read back without effect (no single-step-on-branch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugCtl(pub u64);

impl DebugCtl {
    /// Bits 5:2 and 63:16 are reserved: WRMSR with any of them set raises #GP(0).
    pub const RESERVED: u64 = !0xFFC3;

    reg_flag!(lbr, set_lbr, 0, "IA32_DEBUGCTL[0] LBR: last branch records (crate::lbr)");
    reg_flag!(btf, set_btf, 1, "IA32_DEBUGCTL[1] BTF: single-step on branches (kept, not modelled)");
    reg_flag!(tr, set_tr, 6, "IA32_DEBUGCTL[6] TR: branch trace messages are sent");
    reg_flag!(bts, set_bts, 7, "IA32_DEBUGCTL[7] BTS: with TR, messages are stored in the BTS buffer");
    reg_flag!(btint, set_btint, 8, "IA32_DEBUGCTL[8] BTINT: non-circular buffer, interrupt at the threshold");
    reg_flag!(bts_off_os, set_bts_off_os, 9, "IA32_DEBUGCTL[9] BTS_OFF_OS: no records for branches into CPL 0");
    reg_flag!(bts_off_usr, set_bts_off_usr, 10, "IA32_DEBUGCTL[10] BTS_OFF_USR: no records for branches into CPL > 0");
    reg_flag!(freeze_lbrs_on_pmi, set_freeze_lbrs_on_pmi, 11, "IA32_DEBUGCTL[11] FREEZE_LBRS_ON_PMI");
    reg_flag!(freeze_perfmon_on_pmi, set_freeze_perfmon_on_pmi, 12, "IA32_DEBUGCTL[12] FREEZE_PERFMON_ON_PMI");

    /// Pure write check: the new value, or #GP(0) for reserved bits.
    pub fn check_write(value: u64) -> Result<DebugCtl, Fault> {
        if value & Self::RESERVED != 0 {
            return Err(Fault::Gp);
        }
        Ok(DebugCtl(value))
    }

    /// TR = 1 and BTS = 1: branch records go to the BTS buffer (§18.4.8.1 Table 18-7: TR = 1,
    /// BTS = 0 sends messages to the system bus, which a guest cannot observe).
    pub fn stores_branches(self) -> bool {
        self.tr() && self.bts()
    }
}

/// IA32_DS_AREA holds a linear address: a non-canonical value raises #GP(0).
pub fn check_ds_area_write(value: u64) -> Result<u64, Fault> {
    if is_canonical_48(value) {
        Ok(value)
    } else {
        Err(Fault::Gp)
    }
}

/// IA32_MISC_ENABLE[11] "Branch Trace Storage Unavailable" and [12] "Processor Event Based
/// Sampling Unavailable" are read-only; `native` is the value QEMU keeps for the other bits.
/// BTS is available when the profile enumerates DS; PEBS when it also has PEBS (Skylake).
pub fn misc_enable_read(native: u64, bts_available: bool, pebs_available: bool) -> u64 {
    let mut v = native & !((1 << 11) | (1 << 12));
    if !bts_available {
        v |= 1 << 11;
    }
    if !pebs_available {
        v |= 1 << 12;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_bits_of_debugctl_fault_and_defined_bits_read_back() {
        for bit in (2..6).chain(16..64) {
            assert_eq!(DebugCtl::check_write(1 << bit), Err(Fault::Gp), "bit {bit}");
        }
        let v = DebugCtl::check_write(0xFFC3).unwrap();
        assert_eq!(v.0, 0xFFC3);
        assert!(v.lbr() && v.btf() && v.tr() && v.bts() && v.btint() && v.bts_off_os() && v.bts_off_usr());
    }

    #[test]
    fn seed_value_2c0_is_tr_bts_bts_off_os() {
        // Seed 001 experiment 14-11: "mov eax, 2C0h ; TR=1, BTS=1, BTS_OFF_OS=1".
        let v = DebugCtl::check_write(0x2C0).unwrap();
        assert!(v.tr() && v.bts() && v.bts_off_os() && !v.btint() && !v.bts_off_usr());
        assert!(v.stores_branches());
        assert!(!DebugCtl(0x40).stores_branches());
    }

    #[test]
    fn ds_area_must_be_canonical() {
        assert_eq!(check_ds_area_write(0xFFFF_8000_0000_0000), Ok(0xFFFF_8000_0000_0000));
        assert_eq!(check_ds_area_write(0x0000_8000_0000_0000), Err(Fault::Gp));
    }

    #[test]
    fn misc_enable_reports_bts_and_pebs_availability() {
        assert_eq!(misc_enable_read(1, true, false), 1 | (1 << 12));
        assert_eq!(misc_enable_read(1 | (1 << 11), true, false), 1 | (1 << 12));
        assert_eq!(misc_enable_read(1, false, false), 1 | (1 << 11) | (1 << 12));
        // Skylake with PEBS: both available.
        assert_eq!(misc_enable_read(1 | (1 << 11) | (1 << 12), true, true), 1);
    }
}
