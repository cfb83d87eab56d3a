//! Architectural last branch records (SDM Vol. 3B Chapter 18 "Last Branch Records", §18.1
//! "Architectural Last Branch Records (LBRs)"): enumerated by CPUID.(EAX=07H,ECX=0):EDX[19]
//! Arch_LBR and described by leaf 1CH; programmed through IA32_LBR_CTL (14CEH) and
//! IA32_LBR_DEPTH (14CFH); record x in IA32_LBR_x_FROM_IP (1500H + x), IA32_LBR_x_TO_IP
//! (1600H + x) and IA32_LBR_x_INFO (1200H + x), record 0 being the youngest.
//!
//! What the model supports is what [`ArchLbrCaps::SAPPHIRE_RAPIDS`] enumerates: depths 8, 16, 24
//! and 32, CPL filtering, branch-type filtering, call-stack mode, the mispredict bit (from the
//! static predictor BTS's predicted flag uses, `bts::prediction`), the branch type field and timed
//! LBRs (CPUID.1CH:ECX[1]: IA32_LBR_x_INFO[15:0] CYC_CNT with [60] CYC_CNT_VALID, counted from the
//! emulated core clock as the model-specific LBRs' `crate::lbr::CycleCount`).
//! Not enumerated, because not modelled: the deep C-state reset (EAX[30]) and the event-logging
//! fields of newer parts.

use crate::insn_class::BranchKind;
use crate::pt::msr::Fault;

pub const IA32_LBR_CTL: u32 = 0x14CE;
pub const IA32_LBR_DEPTH: u32 = 0x14CF;
pub const IA32_LBR_0_FROM_IP: u32 = 0x1500;
pub const IA32_LBR_0_TO_IP: u32 = 0x1600;
pub const IA32_LBR_0_INFO: u32 = 0x1200;
/// IA32_PERF_CAPABILITIES[5:0] LBR_FMT of a part with Arch LBR: 3FH (no model-specific LBR
/// format; software finds the LBRs through CPUID leaf 1CH).
pub const PERF_CAP_LBR_FMT_ARCH: u8 = 0x3F;

/// The PMU of a part with Arch LBR: `pmu` with LBR_FMT 3FH.
pub fn pmu_caps(pmu: crate::pmu::PmuCaps) -> crate::pmu::PmuCaps {
    crate::pmu::PmuCaps { lbr_format: PERF_CAP_LBR_FMT_ARCH, ..pmu }
}

/// The largest depth the architecture defines (CPUID.1CH:EAX[7:0]: 8 x (n + 1) for bit n).
pub const MAX_DEPTH: usize = 64;

/// What a part's Arch LBR supports (CPUID leaf 1CH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchLbrCaps {
    /// CPUID.1CH:EAX[7:0]: bit n set = depth 8 x (n + 1) supported.
    pub depth_bitmap: u8,
}

impl ArchLbrCaps {
    /// Sapphire Rapids (06_8FH): 32 records deep at most; depths 8, 16, 24 and 32 accepted.
    pub const SAPPHIRE_RAPIDS: ArchLbrCaps = ArchLbrCaps { depth_bitmap: 0x0F };

    /// The deepest supported depth (Linux: `fls(lbr_depth_mask) * 8`), the reset value of
    /// IA32_LBR_DEPTH.
    pub fn max_depth(self) -> usize {
        8 * (8 - self.depth_bitmap.leading_zeros() as usize)
    }

    /// `depth` is a value IA32_LBR_DEPTH accepts.
    pub fn supports_depth(self, depth: u64) -> bool {
        depth != 0 && depth % 8 == 0 && depth <= MAX_DEPTH as u64 && self.depth_bitmap & (1 << (depth / 8 - 1)) != 0
    }

    /// CPUID.(EAX=1CH,ECX=0): {EAX, EBX, ECX, EDX}.
    pub fn cpuid_1c(self) -> [u32; 4] {
        // EAX[7:0] supported depths; EAX[30] deep C-state reset = 0 (no C-state deeper than C1
        // is modelled); EAX[31] IP values are linear addresses (LIP) = 1: the recorded FROM/TO
        // are the linear addresses QEMU executes at.
        let eax = u32::from(self.depth_bitmap) | (1 << 31);
        // EBX[0] CPL filtering, [1] branch filtering, [2] call-stack mode.
        let ebx = 0b111;
        // ECX[0] mispredict bit, [1] timed LBRs (CYC_CNT), [2] branch type field.
        let ecx = 0b111;
        [eax, ebx, ecx, 0]
    }
}

/// IA32_LBR_CTL (14CEH): enable, CPL filter, call-stack mode and the branch types to record
/// (a set type bit *enables* that type, the reverse of MSR_LBR_SELECT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbrCtl(pub u64);

impl LbrCtl {
    /// [63:23] and [15:4] are reserved.
    pub const RESERVED: u64 = !(0xF | (0x7F << 16));
    /// All seven branch-type bits (Linux's ARCH_LBR_ANY).
    pub const ALL_TYPES: u64 = 0x7F << 16;
    reg_flag!(lbr_en, set_lbr_en, 0, "[0] LBREn: record branches");
    reg_flag!(os, set_os, 1, "[1] OS: record branches ending at CPL 0");
    reg_flag!(usr, set_usr, 2, "[2] USR: record branches ending at CPL > 0");
    reg_flag!(call_stack, set_call_stack, 3, "[3] CALL_STACK: near returns pop the youngest record");
    reg_flag!(cond, set_cond, 16, "[16] COND: conditional branches");
    reg_flag!(near_rel_jmp, set_near_rel_jmp, 17, "[17] NEAR_REL_JMP");
    reg_flag!(near_ind_jmp, set_near_ind_jmp, 18, "[18] NEAR_IND_JMP");
    reg_flag!(near_rel_call, set_near_rel_call, 19, "[19] NEAR_REL_CALL");
    reg_flag!(near_ind_call, set_near_ind_call, 20, "[20] NEAR_IND_CALL");
    reg_flag!(near_ret, set_near_ret, 21, "[21] NEAR_RET");
    reg_flag!(other_branch, set_other_branch, 22, "[22] OTHER_BRANCH: far transfers, interrupts, exceptions");

    /// WRMSR IA32_LBR_CTL: a reserved bit set is #GP(0). (Every defined bit is supported by the
    /// profile: CPUID.1CH:EBX[2:0] = 111B.)
    pub fn check_write(value: u64) -> Result<LbrCtl, Fault> {
        if value & Self::RESERVED != 0 { Err(Fault::Gp) } else { Ok(LbrCtl(value)) }
    }

    /// Is a branch of type `ty` ending at privilege `cpl` recorded? (CPL filtering by the ring
    /// the branch ends in, as for the model-specific LBRs.)
    pub fn captures(self, ty: BrType, cpl: u8) -> bool {
        let cpl_ok = if cpl == 0 { self.os() } else { self.usr() };
        let ty_ok = match ty {
            BrType::Cond => self.cond(),
            BrType::NearIndJmp => self.near_ind_jmp(),
            BrType::NearRelJmp => self.near_rel_jmp(),
            BrType::NearIndCall => self.near_ind_call(),
            BrType::NearRelCall => self.near_rel_call(),
            BrType::NearRet => self.near_ret(),
            BrType::Other => self.other_branch(),
        };
        cpl_ok && ty_ok
    }
}

/// IA32_LBR_x_INFO[59:56] BR_TYPE encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrType {
    Cond = 0b0000,
    NearIndJmp = 0b0001,
    NearRelJmp = 0b0010,
    NearIndCall = 0b0011,
    NearRelCall = 0b0100,
    NearRet = 0b0101,
    /// 1xxxB: other branch (far transfers, interrupts, exceptions, SYSCALL/SYSRET, ...).
    Other = 0b1000,
}

impl BrType {
    /// The type of a transfer of class `kind` (None: an interrupt or exception); None for an
    /// instruction that does not branch.
    pub fn of(kind: Option<BranchKind>) -> Option<BrType> {
        Some(match kind {
            Some(BranchKind::Conditional { .. }) => BrType::Cond,
            Some(BranchKind::DirectJump { .. }) => BrType::NearRelJmp,
            Some(BranchKind::IndirectJump) => BrType::NearIndJmp,
            Some(BranchKind::DirectCall { .. }) => BrType::NearRelCall,
            Some(BranchKind::IndirectCall) => BrType::NearIndCall,
            Some(BranchKind::Return) => BrType::NearRet,
            Some(BranchKind::Far(_) | BranchKind::SoftwareInterrupt) | None => BrType::Other,
            Some(BranchKind::None | BranchKind::AlwaysFaults) => return None,
        })
    }
}

/// IA32_LBR_x_INFO (1200H + x).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbrInfo(pub u64);

impl LbrInfo {
    /// [55:16] are reserved.
    pub const RESERVED: u64 = 0x00FF_FFFF_FFFF_0000;
    reg_flag!(mispred, set_mispred, 63, "[63] MISPRED: the branch target or direction was mispredicted");
    reg_flag!(in_tsx, set_in_tsx, 62, "[62] IN_TSX (no TSX: 0)");
    reg_flag!(tsx_abort, set_tsx_abort, 61, "[61] TSX_ABORT (no TSX: 0)");
    reg_flag!(cyc_cnt_valid, set_cyc_cnt_valid, 60, "[60] CYC_CNT_VALID: CYC_CNT holds a count");
    reg_field!(br_type, set_br_type, 56, 4, "[59:56] BR_TYPE");

    /// [15:0] CYC_CNT: core clocks since the previous update of the records (saturating).
    pub fn cyc_cnt(self) -> u64 {
        self.0 & 0xFFFF
    }

    /// [15:0] CYC_CNT (values wider than the field are truncated to it).
    pub fn set_cyc_cnt(&mut self, v: u64) -> &mut Self {
        self.0 = (self.0 & !0xFFFF) | (v & 0xFFFF);
        self
    }
}

/// The Arch LBR state of one logical processor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchLbr {
    caps: ArchLbrCaps,
    ctl: LbrCtl,
    depth: usize,
    from: [u64; MAX_DEPTH],
    to: [u64; MAX_DEPTH],
    info: [u64; MAX_DEPTH],
    /// The ring slot of record 0 (the youngest); record x is slot (tos - x) mod depth.
    tos: usize,
    cycles: crate::lbr::CycleCount,
}

impl ArchLbr {
    /// After RESET: IA32_LBR_CTL = 0, IA32_LBR_DEPTH = the deepest supported, records 0.
    pub fn new(caps: ArchLbrCaps) -> ArchLbr {
        ArchLbr { caps, ctl: LbrCtl(0), depth: caps.max_depth(), from: [0; MAX_DEPTH], to: [0; MAX_DEPTH], info: [0; MAX_DEPTH], tos: 0, cycles: crate::lbr::CycleCount::default() }
    }

    pub fn ctl(&self) -> LbrCtl {
        self.ctl
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The Arch LBR MSRs (record MSRs up to the architectural maximum: an index at or past the
    /// current depth belongs here and faults).
    pub fn owns(index: u32) -> bool {
        let within = |base: u32| (base..base + MAX_DEPTH as u32).contains(&index);
        index == IA32_LBR_CTL
            || index == IA32_LBR_DEPTH
            || within(IA32_LBR_0_FROM_IP)
            || within(IA32_LBR_0_TO_IP)
            || within(IA32_LBR_0_INFO)
    }

    /// Record `x` of a record MSR `index` with base `base`, if `x` < IA32_LBR_DEPTH.
    fn record_slot(&self, index: u32, base: u32) -> Option<usize> {
        let x = index.checked_sub(base)? as usize;
        (x < self.depth).then(|| (self.tos + self.depth - x) % self.depth)
    }

    pub fn read(&self, index: u32) -> Result<u64, Fault> {
        match index {
            IA32_LBR_CTL => return Ok(self.ctl.0),
            IA32_LBR_DEPTH => return Ok(self.depth as u64),
            _ => {}
        }
        if let Some(s) = self.record_slot(index, IA32_LBR_0_FROM_IP) {
            return Ok(self.from[s]);
        }
        if let Some(s) = self.record_slot(index, IA32_LBR_0_TO_IP) {
            return Ok(self.to[s]);
        }
        if let Some(s) = self.record_slot(index, IA32_LBR_0_INFO) {
            return Ok(self.info[s]);
        }
        // A record MSR at or beyond IA32_LBR_DEPTH: #GP(0).
        Err(Fault::Gp)
    }

    /// WRMSR: IA32_LBR_CTL its defined bits; IA32_LBR_DEPTH a supported depth, and the write
    /// clears every record; FROM/TO canonical addresses; INFO its defined bits; records below
    /// the depth only. Anything else #GP(0). Changing LBREn clears nothing.
    pub fn write(&mut self, index: u32, value: u64) -> Result<(), Fault> {
        match index {
            IA32_LBR_CTL => {
                self.ctl = LbrCtl::check_write(value)?;
                return Ok(());
            }
            IA32_LBR_DEPTH => {
                if !self.caps.supports_depth(value) {
                    return Err(Fault::Gp);
                }
                self.depth = value as usize;
                self.clear();
                return Ok(());
            }
            _ => {}
        }
        let canonical = crate::pt::msr::is_canonical_48(value);
        let in_range = |base: u32| index >= base && index < base + MAX_DEPTH as u32;
        if in_range(IA32_LBR_0_FROM_IP) {
            let s = self.record_slot(index, IA32_LBR_0_FROM_IP).filter(|_| canonical).ok_or(Fault::Gp)?;
            self.from[s] = value;
        } else if in_range(IA32_LBR_0_TO_IP) {
            let s = self.record_slot(index, IA32_LBR_0_TO_IP).filter(|_| canonical).ok_or(Fault::Gp)?;
            self.to[s] = value;
        } else if in_range(IA32_LBR_0_INFO) {
            let s = self.record_slot(index, IA32_LBR_0_INFO).filter(|_| value & LbrInfo::RESERVED == 0).ok_or(Fault::Gp)?;
            self.info[s] = value;
        } else {
            return Err(Fault::Gp);
        }
        Ok(())
    }

    /// Every record reads 0 (a write of IA32_LBR_DEPTH); the next record has no previous
    /// update to count cycles from.
    fn clear(&mut self) {
        self.from = [0; MAX_DEPTH];
        self.to = [0; MAX_DEPTH];
        self.info = [0; MAX_DEPTH];
        self.tos = 0;
        self.cycles.reset();
    }

    /// A taken transfer `from` -> `to` of class `kind` (None: interrupt or exception) ending at
    /// privilege `cpl` retired while IA32_LBR_CTL.LBREn = 1 and the LBRs are not frozen, the
    /// core clock reading `clock`.
    pub fn record(&mut self, kind: Option<BranchKind>, from: u64, to: u64, cpl: u8, mispredicted: bool, clock: u64) {
        let Some(ty) = BrType::of(kind) else { return };
        if !self.ctl.lbr_en() || !self.ctl.captures(ty, cpl) {
            return;
        }
        let cyc_cnt = self.cycles.update(clock);
        if self.ctl.call_stack() && ty == BrType::NearRet {
            // Call-stack mode: a near return pops the youngest record (the call it returns
            // from) instead of being recorded; the popped record becomes the oldest slot of
            // the ring, as with the model-specific LBRs' TOS.
            self.tos = (self.tos + self.depth - 1) % self.depth;
            return;
        }
        self.tos = (self.tos + 1) % self.depth;
        self.from[self.tos] = from;
        self.to[self.tos] = to;
        let mut info = LbrInfo(0);
        info.set_mispred(mispredicted).set_br_type(ty as u8);
        if let Some(c) = cyc_cnt {
            info.set_cyc_cnt_valid(true).set_cyc_cnt(c);
        }
        self.info[self.tos] = info.0;
    }

    /// Records 0 (youngest) to depth - 1: (from, to, info).
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        (0..self.depth).map(move |x| {
            let s = (self.tos + self.depth - x) % self.depth;
            (self.from[s], self.to[s], self.info[s])
        })
    }
}

impl crate::lbr::BranchRecorder for ArchLbr {
    fn record(&mut self, kind: Option<BranchKind>, from: u64, to: u64, cpl: u8, mispredicted: bool, clock: u64) {
        ArchLbr::record(self, kind, from, to, cpl, mispredicted, clock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn_class::FarKind;

    const JCC: Option<BranchKind> = Some(BranchKind::Conditional { target: 0 });
    const JMP: Option<BranchKind> = Some(BranchKind::DirectJump { target: 0 });
    const CALL: Option<BranchKind> = Some(BranchKind::DirectCall { target: 0 });
    const ICALL: Option<BranchKind> = Some(BranchKind::IndirectCall);
    const RET: Option<BranchKind> = Some(BranchKind::Return);
    const EN_ALL: u64 = 1 | 2 | 4 | LbrCtl::ALL_TYPES;

    fn spr() -> ArchLbr {
        ArchLbr::new(ArchLbrCaps::SAPPHIRE_RAPIDS)
    }

    #[test]
    fn sapphire_rapids_leaf_1ch_enumerates_depths_8_to_32_filters_call_stack_mispred_and_type() {
        let c = ArchLbrCaps::SAPPHIRE_RAPIDS;
        assert_eq!(c.cpuid_1c(), [0x8000_000F, 0b111, 0b111, 0]);
        assert_eq!(c.max_depth(), 32);
        let ok: Vec<u64> = (0..=80).filter(|&d| c.supports_depth(d)).collect();
        assert_eq!(ok, [8, 16, 24, 32]);
        assert_eq!(ArchLbrCaps { depth_bitmap: 0x80 }.max_depth(), 64);
    }

    #[test]
    fn perf_capabilities_report_lbr_format_3fh_and_keep_the_other_fields() {
        let skl = crate::pmu::PmuCaps::SKYLAKE;
        let spr = pmu_caps(skl).perf_capabilities().unwrap();
        assert_eq!(spr & 0x3F, 0x3F);
        assert_eq!(spr & !0x3F, skl.perf_capabilities().unwrap() & !0x3F);
    }

    #[test]
    fn after_reset_depth_is_32_ctl_is_0_and_nothing_records() {
        let mut l = spr();
        assert_eq!(l.read(IA32_LBR_DEPTH), Ok(32));
        assert_eq!(l.read(IA32_LBR_CTL), Ok(0));
        l.record(JCC, 0x10, 0x20, 3, false, 0);
        assert_eq!(l.read(IA32_LBR_0_FROM_IP), Ok(0));
    }

    #[test]
    fn record_0_is_the_youngest_of_the_last_32_branches() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, EN_ALL).unwrap();
        for i in 0..40u64 {
            l.record(JCC, 0x1000 + i, 0x2000 + i, 3, i == 39, i * i); // the clock reads i^2
        }
        for x in 0..32u32 {
            let i = 39 - u64::from(x);
            assert_eq!(l.read(IA32_LBR_0_FROM_IP + x), Ok(0x1000 + i));
            assert_eq!(l.read(IA32_LBR_0_TO_IP + x), Ok(0x2000 + i));
        }
        // CYC_CNT of record i: i^2 - (i-1)^2 = 2i - 1 clocks, CYC_CNT_VALID.
        assert_eq!(l.read(IA32_LBR_0_INFO), Ok((1 << 63) | (1 << 60) | 77), "MISPRED, BR_TYPE 0000B COND, 77 cycles");
        assert_eq!(l.read(IA32_LBR_0_INFO + 1), Ok((1 << 60) | 75));
    }

    #[test]
    fn info_br_type_encodes_each_branch_class() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, EN_ALL).unwrap();
        let kinds = [
            (JCC, 0),
            (Some(BranchKind::IndirectJump), 1),
            (JMP, 2),
            (ICALL, 3),
            (CALL, 4),
            (RET, 5),
            (Some(BranchKind::Far(FarKind::Syscall)), 8),
            (Some(BranchKind::SoftwareInterrupt), 8),
            (None, 8),
        ];
        for (i, (k, _)) in kinds.iter().enumerate() {
            l.record(*k, i as u64 + 1, 0x100, 0, false, 0);
        }
        for (i, (_, ty)) in kinds.iter().rev().enumerate() {
            assert_eq!(l.read(IA32_LBR_0_INFO + i as u32).map(|v| LbrInfo(v).br_type()), Ok(*ty), "record {i}");
        }
        l.record(Some(BranchKind::None), 0x5, 0x6, 0, false, 0);
        assert_eq!(l.read(IA32_LBR_0_FROM_IP), Ok(kinds.len() as u64), "not a branch");
    }

    #[test]
    fn cpl_filter_records_by_the_ring_a_branch_ends_in() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, 1 | 4 | LbrCtl::ALL_TYPES).unwrap(); // USR only
        l.record(CALL, 0x401000, 0x401100, 3, false, 1000);
        l.record(None, 0x401105, 0xFFFF_FFFF_8100_0000, 0, true, 1500); // interrupt into ring 0
        // The first record since RESET: no cycle count (CYC_CNT_VALID = 0).
        assert_eq!(l.entries().next(), Some((0x401000, 0x401100, 4 << 56)));
        l.record(Some(BranchKind::Far(FarKind::Iret)), 0xFFFF_FFFF_8100_0100, 0x401105, 3, true, 1800);
        // A filtered branch is no update of the records: 800 cycles since the CALL.
        assert_eq!(l.entries().next(), Some((0xFFFF_FFFF_8100_0100, 0x401105, (1 << 63) | (8 << 56) | (1 << 60) | 800)));
        l.write(IA32_LBR_CTL, 1 | 2 | LbrCtl::ALL_TYPES).unwrap(); // OS only
        l.record(JCC, 0x401200, 0x401300, 3, false, 0);
        assert_eq!(l.entries().next().unwrap().0, 0xFFFF_FFFF_8100_0100);
    }

    #[test]
    fn branch_type_bits_enable_only_their_class() {
        let mut l = spr();
        // COND and NEAR_REL_CALL only.
        l.write(IA32_LBR_CTL, 1 | 6 | (1 << 16) | (1 << 19)).unwrap();
        l.record(JCC, 0x10, 0x20, 3, false, 0);
        l.record(JMP, 0x30, 0x40, 3, false, 0);
        l.record(ICALL, 0x50, 0x60, 3, false, 0);
        l.record(CALL, 0x70, 0x80, 3, false, 0);
        l.record(RET, 0x90, 0xA0, 3, false, 0);
        l.record(Some(BranchKind::Far(FarKind::Sysret)), 0xB0, 0xC0, 3, false, 0);
        let e: Vec<_> = l.entries().take(3).map(|e| e.0).collect();
        assert_eq!(e, [0x70, 0x10, 0]);
        let mut only_other = spr();
        only_other.write(IA32_LBR_CTL, 1 | 6 | (1 << 22)).unwrap();
        only_other.record(RET, 0x90, 0xA0, 3, false, 0);
        only_other.record(Some(BranchKind::Far(FarKind::Sysret)), 0xB0, 0xC0, 3, false, 0);
        assert_eq!(only_other.entries().next().unwrap().0, 0xB0);
        assert_eq!(only_other.entries().nth(1).unwrap().0, 0);
    }

    #[test]
    fn call_stack_mode_pops_a_returned_call() {
        let mut l = spr();
        // Linux's call-stack mode: USR, CALL_STACK, NEAR_REL_CALL | NEAR_IND_CALL | NEAR_RET.
        l.write(IA32_LBR_CTL, 1 | 4 | 8 | (1 << 19) | (1 << 20) | (1 << 21)).unwrap();
        l.record(CALL, 0x100, 0x1000, 3, false, 0); // main -> a
        l.record(JCC, 0x1004, 0x1010, 3, false, 0); // filtered
        l.record(ICALL, 0x1020, 0x2000, 3, false, 0); // a -> b
        l.record(RET, 0x2010, 0x1025, 3, false, 0); // b returns: pops a -> b
        l.record(CALL, 0x1030, 0x3000, 3, false, 0); // a -> c
        let e: Vec<_> = l.entries().take(2).map(|e| (e.0, e.1)).collect();
        assert_eq!(e, [(0x1030, 0x3000), (0x100, 0x1000)]);
        l.record(RET, 0x3010, 0x1035, 3, false, 0);
        l.record(RET, 0x1040, 0x105, 3, false, 0);
        assert_eq!(l.entries().next().map(|e| e.0), Some(0), "empty stack");
    }

    #[test]
    fn depth_write_accepts_enumerated_depths_only_and_clears_the_records() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, EN_ALL).unwrap();
        for i in 0..20u64 {
            l.record(JCC, 0x1000 + i, 0x2000 + i, 3, false, 0);
        }
        for bad in [0, 7, 12, 40, 64, 1 << 32 | 16] {
            assert_eq!(l.write(IA32_LBR_DEPTH, bad), Err(Fault::Gp), "depth {bad:#x}");
        }
        assert_eq!(l.read(IA32_LBR_0_FROM_IP), Ok(0x1000 + 19), "a failed write changes nothing");
        l.write(IA32_LBR_DEPTH, 16).unwrap();
        assert_eq!(l.read(IA32_LBR_DEPTH), Ok(16));
        assert!(l.entries().all(|e| e == (0, 0, 0)));
        assert_eq!(l.read(IA32_LBR_CTL), Ok(EN_ALL), "LBR_CTL kept");
        // Records 16..31 now #GP; 16 records wrap.
        assert_eq!(l.read(IA32_LBR_0_FROM_IP + 16), Err(Fault::Gp));
        assert_eq!(l.write(IA32_LBR_0_TO_IP + 16, 0), Err(Fault::Gp));
        for i in 0..17u64 {
            l.record(JCC, 0x1000 + i, 0x2000 + i, 3, false, 0);
        }
        assert_eq!(l.read(IA32_LBR_0_FROM_IP + 15), Ok(0x1001));
    }

    #[test]
    fn clearing_lbren_stops_recording_and_keeps_the_records() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, EN_ALL).unwrap();
        l.record(CALL, 0x10, 0x20, 3, false, 0);
        l.write(IA32_LBR_CTL, EN_ALL & !1).unwrap();
        l.record(CALL, 0x30, 0x40, 3, false, 0);
        assert_eq!(l.read(IA32_LBR_0_FROM_IP), Ok(0x10));
        l.write(IA32_LBR_CTL, EN_ALL).unwrap();
        assert_eq!(l.read(IA32_LBR_0_TO_IP), Ok(0x20));
    }

    #[test]
    fn ctl_reserved_bits_and_record_msr_rules_fault() {
        let mut l = spr();
        for bit in (4..16).chain(23..64) {
            assert_eq!(l.write(IA32_LBR_CTL, 1 << bit), Err(Fault::Gp), "bit {bit}");
        }
        assert_eq!(l.read(IA32_LBR_CTL), Ok(0));
        // Linux's restore path writes records back; a reset depth write zeroes them.
        l.write(IA32_LBR_0_FROM_IP + 31, 0xFFFF_FFFF_8100_0000).unwrap();
        assert_eq!(l.read(IA32_LBR_0_FROM_IP + 31), Ok(0xFFFF_FFFF_8100_0000));
        assert_eq!(l.write(IA32_LBR_0_TO_IP, 0x0000_8000_0000_0000), Err(Fault::Gp), "non-canonical");
        assert_eq!(l.write(IA32_LBR_0_INFO, 1 << 40), Err(Fault::Gp), "INFO reserved bit");
        l.write(IA32_LBR_0_INFO + 2, (1 << 63) | (5 << 56) | 0x1234).unwrap();
        assert_eq!(l.read(IA32_LBR_0_INFO + 2), Ok((1 << 63) | (5 << 56) | 0x1234));
        assert!(ArchLbr::owns(IA32_LBR_0_INFO + 63) && !ArchLbr::owns(IA32_LBR_0_INFO + 64));
        assert_eq!(l.read(IA32_LBR_0_INFO + 32), Err(Fault::Gp), "beyond the maximum depth");
        assert!(!ArchLbr::owns(0x14D0));
    }

    #[test]
    fn timed_lbrs_count_cycles_since_the_previous_record_with_cyc_cnt_valid_and_saturate() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, EN_ALL).unwrap();
        let clocks = [7_000u64, 7_013, 7_013, 7_400, 7_400 + 0x1_0000, 7_400 + 0x1_0000 + 0xFFFF];
        for (i, &c) in clocks.iter().enumerate() {
            l.record(JMP, 0x10 * i as u64, 0x1000, 3, false, c);
        }
        let cyc: Vec<(bool, u64)> = l.entries().take(clocks.len()).map(|(_, _, info)| (LbrInfo(info).cyc_cnt_valid(), LbrInfo(info).cyc_cnt())).collect();
        // Youngest first: 0xFFFF exactly, 0x10000 saturated, 387, 0 (same clock), 13, none.
        assert_eq!(cyc, [(true, 0xFFFF), (true, 0xFFFF), (true, 387), (true, 0), (true, 13), (false, 0)]);
        // Writing IA32_LBR_DEPTH clears the records: the next one again has no count.
        l.write(IA32_LBR_DEPTH, 16).unwrap();
        l.record(JMP, 0x10, 0x20, 3, false, 9_000);
        l.record(JMP, 0x30, 0x40, 3, false, 9_021);
        assert_eq!(l.read(IA32_LBR_0_INFO).map(|v| (v >> 60 & 1, v & 0xFFFF)), Ok((1, 21)));
        assert_eq!(l.read(IA32_LBR_0_INFO + 1).map(|v| (v >> 60 & 1, v & 0xFFFF)), Ok((0, 0)));
        // A clock that went backwards (a TSC write) counts 0.
        l.record(JMP, 0x50, 0x60, 3, false, 8_000);
        assert_eq!(l.read(IA32_LBR_0_INFO), Ok((1 << 60) | (2 << 56)));
    }

    #[test]
    fn call_stack_pop_is_an_update_the_next_record_counts_from() {
        let mut l = spr();
        l.write(IA32_LBR_CTL, EN_ALL | 8).unwrap();
        l.record(CALL, 0x100, 0x1000, 3, false, 100);
        l.record(CALL, 0x1010, 0x2000, 3, false, 130);
        l.record(RET, 0x2010, 0x1015, 3, false, 170); // pops 0x1010 -> 0x2000
        l.record(CALL, 0x1020, 0x3000, 3, false, 230);
        let e: Vec<_> = l.entries().take(2).map(|(f, _, info)| (f, LbrInfo(info).cyc_cnt())).collect();
        assert_eq!(e, [(0x1020, 60), (0x100, 0)]);
    }
}
