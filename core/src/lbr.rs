//! The model-specific last-branch-record stack of Skylake-class parts (SDM Vol. 3B §18.4.8
//! "LBR Stack", §18.13.1 (Skylake: 32 entries, MSR_LBR_INFO_x), §18.11.2 "Filtering of Last
//! Branch Records" (MSR_LBR_SELECT), §18.11.3 "LBR call stack"; LBR format 5 of
//! IA32_PERF_CAPABILITIES[5:0]: addresses in FROM/TO, flags in LBR_INFO).
//!
//! Recording is driven by retirement events (taken branches, far transfers, interrupts and
//! exceptions) with the branch's class, the CPL it ends at, the static predictor's verdict and the
//! emulated core clock at the retirement: LBR_INFO[15:0] CYC_CNT holds the core clocks elapsed
//! since the previous update of the stack ([`CycleCount`]).

use crate::insn_class::BranchKind;
use crate::pt::msr::Fault;

pub const DEPTH: usize = 32;
pub const MSR_LBR_SELECT: u32 = 0x1C8;
pub const MSR_LASTBRANCH_TOS: u32 = 0x1C9;
pub const MSR_LASTBRANCH_0_FROM_IP: u32 = 0x680;
pub const MSR_LASTBRANCH_0_TO_IP: u32 = 0x6C0;
pub const MSR_LBR_INFO_0: u32 = 0xDC0;

/// MSR_LBR_SELECT: a set bit suppresses that class (bits 0/1: branches at CPL 0 / CPL > 0);
/// bit 9 EN_CALLSTACK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbrSelect(pub u64);

impl LbrSelect {
    pub const RESERVED: u64 = !0x3FF;
    reg_flag!(cpl_eq_0, set_cpl_eq_0, 0, "[0] CPL_EQ_0: do not capture branches ending in ring 0");
    reg_flag!(cpl_neq_0, set_cpl_neq_0, 1, "[1] CPL_NEQ_0: do not capture branches ending in rings > 0");
    reg_flag!(jcc, set_jcc, 2, "[2] JCC: suppress conditional branches");
    reg_flag!(near_rel_call, set_near_rel_call, 3, "[3] NEAR_REL_CALL");
    reg_flag!(near_ind_call, set_near_ind_call, 4, "[4] NEAR_IND_CALL");
    reg_flag!(near_ret, set_near_ret, 5, "[5] NEAR_RET");
    reg_flag!(near_ind_jmp, set_near_ind_jmp, 6, "[6] NEAR_IND_JMP");
    reg_flag!(near_rel_jmp, set_near_rel_jmp, 7, "[7] NEAR_REL_JMP");
    reg_flag!(far_branch, set_far_branch, 8, "[8] FAR_BRANCH (far transfers, interrupts, exceptions)");
    reg_flag!(en_callstack, set_en_callstack, 9, "[9] EN_CALLSTACK: returns pop the stack");

    /// Is a transfer of class `kind` (None: an interrupt or exception) that ends at privilege
    /// `cpl` captured? the SDM's MSR_LBR_SELECT table (Vol. 3B, LBR filtering): CPL_EQ_0 / CPL_NEQ_0 filter by
    /// the ring a branch *ends* in (Linux's `branch_type()` classifies the same way: "branch priv
    /// level determined by target as is done by HW"): with user-only filtering an interrupt from
    /// ring 3 is not captured, the IRET/SYSRET back to ring 3 is.
    pub fn captures(self, kind: Option<BranchKind>, cpl: u8) -> bool {
        if (cpl == 0 && self.cpl_eq_0()) || (cpl != 0 && self.cpl_neq_0()) {
            return false;
        }
        let suppressed = match kind {
            Some(BranchKind::Conditional { .. }) => self.jcc(),
            Some(BranchKind::DirectCall { .. }) => self.near_rel_call(),
            Some(BranchKind::IndirectCall) => self.near_ind_call(),
            Some(BranchKind::Return) => self.near_ret(),
            Some(BranchKind::IndirectJump) => self.near_ind_jmp(),
            Some(BranchKind::DirectJump { .. }) => self.near_rel_jmp(),
            Some(BranchKind::Far(_) | BranchKind::SoftwareInterrupt) | None => self.far_branch(),
            Some(BranchKind::None | BranchKind::AlwaysFaults) => return false,
        };
        !suppressed
    }
}

/// The cycle count of LBR records (MSR_LBR_INFO_x[15:0] CYC_CNT, Skylake-class LBR format 5, SDM
/// Vol. 3B §18.13.1 "LBR_INFO": "elapsed core clocks since last update to the LBR stack";
/// IA32_LBR_x_INFO[15:0] CYC_CNT of timed Arch LBRs, CPUID.1CH:ECX[1], the same count,
/// saturating). An update of the stack is a record written or, in call-stack mode, a record
/// popped by a return (both move the top of stack). The clock is the emulated core clock
/// CPU_CLK_UNHALTED counts (the plugin's: host TSC, or instructions << shift under -icount), so the
/// counts are deterministic only under -icount.
///
/// The first update after RESET (or after IA32_LBR_DEPTH cleared the Arch LBR records) has no
/// previous update to count from: its record gets CYC_CNT = 0 (Arch LBR: CYC_CNT_VALID = 0 too).
/// Later updates count from the previous one even across a time the LBRs did not record
/// (disabled or frozen): the count then usually saturates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleCount {
    /// The clock at the last update of the stack.
    last: Option<u64>,
}

impl CycleCount {
    /// CYC_CNT is 16 bits wide and saturates.
    pub const MAX: u64 = 0xFFFF;

    /// The stack is updated at `clock`: the cycles since the previous update (saturated at
    /// [`Self::MAX`]; a clock that went backwards, e.g. a TSC write, counts 0), or None for the
    /// first update.
    pub fn update(&mut self, clock: u64) -> Option<u64> {
        self.last.replace(clock).map(|prev| clock.saturating_sub(prev).min(Self::MAX))
    }

    /// No previous update (RESET, or the records cleared).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

/// A last-branch-record unit the retirement events feed: the model-specific stack
/// ([`LbrStack`]) or architectural LBRs (`crate::arch_lbr::ArchLbr`).
pub trait BranchRecorder {
    /// A taken transfer `from` -> `to` of class `kind` (None: interrupt or exception) ending at
    /// privilege `cpl` retired while recording, with the core clock at `clock`.
    fn record(&mut self, kind: Option<BranchKind>, from: u64, to: u64, cpl: u8, mispredicted: bool, clock: u64);
}

/// The near branch of class `kind` at `ip` (next sequential `nlip`) retired and execution
/// continues at `next`: recorded if it was taken (a conditional branch to its own next
/// instruction counts as taken), with the mispredict bit of the static predictor
/// (`Retired::of`, the one behind BTS's predicted bit). Not-taken branches and non-branches
/// leave the LBRs alone (SDM Vol. 3B §18.4.8: the LBRs hold taken branches).
pub fn near_branch(rec: &mut dyn BranchRecorder, kind: BranchKind, ip: u64, nlip: u64, next: u64, cpl: u8, clock: u64) {
    let taken = match kind {
        BranchKind::None | BranchKind::AlwaysFaults => false,
        BranchKind::Conditional { target } => next != nlip || target == nlip,
        _ => true,
    };
    if taken {
        let misp = crate::pmu::Retired::of(kind, ip, nlip, next).has(crate::pmu::Retired::MISP);
        rec.record(Some(kind), ip, next, cpl, misp, clock);
    }
}

impl BranchRecorder for LbrStack {
    fn record(&mut self, kind: Option<BranchKind>, from: u64, to: u64, cpl: u8, mispredicted: bool, clock: u64) {
        LbrStack::record(self, kind, from, to, cpl, mispredicted, clock)
    }
}

/// The LBR stack of one logical processor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbrStack {
    from: [u64; DEPTH],
    to: [u64; DEPTH],
    info: [u64; DEPTH],
    tos: usize,
    select: LbrSelect,
    cycles: CycleCount,
}

impl Default for LbrStack {
    fn default() -> Self {
        LbrStack { from: [0; DEPTH], to: [0; DEPTH], info: [0; DEPTH], tos: 0, select: LbrSelect(0), cycles: CycleCount::default() }
    }
}

/// LBR_INFO[63] MISPRED.
pub const INFO_MISPRED: u64 = 1 << 63;
/// LBR_INFO[15:0] CYC_CNT.
pub const INFO_CYC_CNT: u64 = 0xFFFF;

impl LbrStack {
    pub fn owns(index: u32) -> bool {
        let within = |base: u32| (base..base + DEPTH as u32).contains(&index);
        index == MSR_LBR_SELECT
            || index == MSR_LASTBRANCH_TOS
            || within(MSR_LASTBRANCH_0_FROM_IP)
            || within(MSR_LASTBRANCH_0_TO_IP)
            || within(MSR_LBR_INFO_0)
    }

    pub fn read(&self, index: u32) -> Result<u64, Fault> {
        let slot = |base: u32| index.checked_sub(base).map(|i| i as usize).filter(|&i| i < DEPTH);
        if let Some(i) = slot(MSR_LASTBRANCH_0_FROM_IP) {
            return Ok(self.from[i]);
        }
        if let Some(i) = slot(MSR_LASTBRANCH_0_TO_IP) {
            return Ok(self.to[i]);
        }
        if let Some(i) = slot(MSR_LBR_INFO_0) {
            return Ok(self.info[i]);
        }
        match index {
            MSR_LBR_SELECT => Ok(self.select.0),
            MSR_LASTBRANCH_TOS => Ok(self.tos as u64),
            _ => Err(Fault::Gp),
        }
    }

    /// WRMSR: FROM/TO take canonical addresses (sign-extended from bit 47), INFO its defined
    /// bits, TOS bits 4:0, LBR_SELECT bits 9:0; anything else #GP(0). (Linux under a hypervisor
    /// probes TOS and the FROM/TO registers by writing them and reading back.)
    pub fn write(&mut self, index: u32, value: u64) -> Result<(), Fault> {
        let slot = |base: u32| index.checked_sub(base).map(|i| i as usize).filter(|&i| i < DEPTH);
        let canonical = crate::pt::msr::is_canonical_48(value);
        const INFO_DEFINED: u64 = (7 << 61) | 0xFFFF;
        let target = if let Some(i) = slot(MSR_LASTBRANCH_0_FROM_IP) {
            canonical.then_some(&mut self.from[i])
        } else if let Some(i) = slot(MSR_LASTBRANCH_0_TO_IP) {
            canonical.then_some(&mut self.to[i])
        } else if let Some(i) = slot(MSR_LBR_INFO_0) {
            (value & !INFO_DEFINED == 0).then_some(&mut self.info[i])
        } else {
            None
        };
        if let Some(t) = target {
            *t = value;
            return Ok(());
        }
        if slot(MSR_LASTBRANCH_0_FROM_IP).or(slot(MSR_LASTBRANCH_0_TO_IP)).or(slot(MSR_LBR_INFO_0)).is_some() {
            return Err(Fault::Gp);
        }
        match index {
            MSR_LBR_SELECT if value & LbrSelect::RESERVED == 0 => {
                self.select = LbrSelect(value);
                Ok(())
            }
            MSR_LASTBRANCH_TOS if value < DEPTH as u64 => {
                self.tos = value as usize;
                Ok(())
            }
            _ => Err(Fault::Gp),
        }
    }

    /// A taken transfer `from` -> `to` of class `kind` (None: interrupt or exception) ending at
    /// privilege `cpl` retired while recording (DEBUGCTL.LBR = 1, not frozen), the core clock
    /// reading `clock`.
    pub fn record(&mut self, kind: Option<BranchKind>, from: u64, to: u64, cpl: u8, mispredicted: bool, clock: u64) {
        if !self.select.captures(kind, cpl) {
            return;
        }
        let cyc_cnt = self.cycles.update(clock).unwrap_or(0);
        if self.select.en_callstack() && kind == Some(BranchKind::Return) {
            // Call-stack mode: a return pops the most recent call instead of being recorded.
            self.tos = (self.tos + DEPTH - 1) % DEPTH;
            return;
        }
        self.tos = (self.tos + 1) % DEPTH;
        self.from[self.tos] = from;
        self.to[self.tos] = to;
        self.info[self.tos] = if mispredicted { INFO_MISPRED } else { 0 } | cyc_cnt;
    }

    /// The entries from the youngest to the oldest: (from, to, info).
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        (0..DEPTH).map(move |k| {
            let i = (self.tos + DEPTH - k) % DEPTH;
            (self.from[i], self.to[i], self.info[i])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn_class::FarKind;

    const JCC: Option<BranchKind> = Some(BranchKind::Conditional { target: 0 });
    const CALL: Option<BranchKind> = Some(BranchKind::DirectCall { target: 0 });
    const RET: Option<BranchKind> = Some(BranchKind::Return);

    #[test]
    fn stack_holds_the_last_32_branches_youngest_at_tos() {
        let mut l = LbrStack::default();
        for i in 0..40u64 {
            l.record(JCC, 0x1000 + i, 0x2000 + i, 3, i == 39, 0);
        }
        let e: Vec<_> = l.entries().collect();
        assert_eq!(e.len(), 32);
        assert_eq!(e[0], (0x1000 + 39, 0x2000 + 39, INFO_MISPRED));
        assert_eq!(e[31], (0x1000 + 8, 0x2000 + 8, 0));
        assert_eq!(l.read(MSR_LASTBRANCH_TOS), Ok(40 % 32));
        assert_eq!(l.read(MSR_LASTBRANCH_0_FROM_IP + 8), Ok(0x1000 + 39));
    }

    #[test]
    fn user_only_select_filters_by_the_ring_a_branch_ends_in() {
        // perf record -b -e ...:u: LBR_SELECT = CPL_EQ_0. A timer interrupt taken in ring 3 ends
        // in ring 0: not captured (it used to be, by its source CPL); the IRET back to ring 3 is
        // captured, with its kernel FROM address. (Linux 6.1.192's intel_pmu_lbr_filter drops
        // that entry from a user-only stack, so such a sample shows 31 of 32 entries, as on
        // hardware: README "LBR".)
        let mut l = LbrStack::default();
        l.write(MSR_LBR_SELECT, 0x1).unwrap();
        l.record(CALL, 0x401000, 0x401100, 3, false, 0);
        l.record(None, 0x401105, 0xFFFF_FFFF_8100_0000, 0, true, 0); // interrupt: ends in ring 0
        assert_eq!(l.entries().next(), Some((0x401000, 0x401100, 0)));
        l.record(Some(BranchKind::Far(FarKind::Iret)), 0xFFFF_FFFF_8100_0100, 0x401105, 3, true, 0);
        assert_eq!(l.entries().next().map(|e| (e.0, e.1)), Some((0xFFFF_FFFF_8100_0100, 0x401105)));
    }

    #[test]
    fn lbr_select_filters_by_cpl_and_class() {
        let mut l = LbrStack::default();
        // Linux's user-only call stack: CPL_EQ_0 | JCC | NEAR_IND_JMP | NEAR_REL_JMP | FAR | EN_CALLSTACK.
        l.write(MSR_LBR_SELECT, 0x1 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200).unwrap();
        l.record(CALL, 0x10, 0x100, 3, false, 0); // recorded
        l.record(JCC, 0x100, 0x120, 3, false, 0); // suppressed
        l.record(CALL, 0x130, 0x200, 0, false, 0); // kernel: suppressed
        l.record(Some(BranchKind::Far(FarKind::Syscall)), 0x140, 0xFFFF_8000_0000_0000, 0, false, 0);
        l.record(CALL, 0x150, 0x300, 3, false, 0); // recorded
        assert_eq!(l.entries().next(), Some((0x150, 0x300, 0)));
        l.record(RET, 0x300, 0x155, 3, false, 0); // pops
        assert_eq!(l.entries().next(), Some((0x10, 0x100, 0)));
        assert_eq!(l.write(MSR_LBR_SELECT, 1 << 10), Err(Fault::Gp));
    }

    #[test]
    fn msr_rules_and_linux_probe_read_back() {
        let mut l = LbrStack::default();
        // check_msr: write val ^ mask, read back.
        l.write(MSR_LASTBRANCH_TOS, 3).unwrap();
        assert_eq!(l.read(MSR_LASTBRANCH_TOS), Ok(3));
        assert_eq!(l.write(MSR_LASTBRANCH_TOS, 32), Err(Fault::Gp));
        l.write(MSR_LASTBRANCH_0_FROM_IP + 31, 0xFFFF_FFFF_8100_0000).unwrap();
        assert_eq!(l.read(MSR_LASTBRANCH_0_FROM_IP + 31), Ok(0xFFFF_FFFF_8100_0000));
        assert_eq!(l.write(MSR_LASTBRANCH_0_TO_IP, 0x0000_8000_0000_0000), Err(Fault::Gp));
        assert_eq!(l.write(MSR_LBR_INFO_0, 1 << 40), Err(Fault::Gp));
        assert!(LbrStack::owns(MSR_LBR_INFO_0 + 31) && !LbrStack::owns(MSR_LBR_INFO_0 + 32));
        assert_eq!(l.read(MSR_LASTBRANCH_0_FROM_IP + 32), Err(Fault::Gp));
    }

    #[test]
    fn lbr_info_cyc_cnt_is_the_clocks_since_the_previous_record_saturating_at_ffff() {
        let mut l = LbrStack::default();
        l.write(MSR_LBR_SELECT, 1).unwrap(); // CPL_EQ_0: user branches only
        l.record(CALL, 0x10, 0x100, 3, false, 50_000); // first since RESET: 0
        l.record(JCC, 0x100, 0x120, 3, true, 50_040);
        l.record(CALL, 0x130, 0x200, 0, false, 50_090); // kernel: suppressed, no update
        l.record(JCC, 0x200, 0x220, 3, false, 50_100);
        l.record(JCC, 0x220, 0x240, 3, false, 50_100 + 0x12345);
        l.record(JCC, 0x240, 0x260, 3, false, 50_100 + 0x12345 + 0xFFFE);
        let info: Vec<u64> = l.entries().take(5).map(|e| e.2).collect();
        assert_eq!(info, [0xFFFE, 0xFFFF, 60, INFO_MISPRED | 40, 0]);
    }

    #[test]
    fn lbr_info_cyc_cnt_counts_from_a_call_stack_pop() {
        let mut l = LbrStack::default();
        l.write(MSR_LBR_SELECT, 1 | (1 << 9)).unwrap();
        l.record(CALL, 0x10, 0x100, 3, false, 1_000);
        l.record(CALL, 0x150, 0x300, 3, false, 1_010);
        l.record(RET, 0x300, 0x155, 3, false, 1_500); // pops 0x150 -> 0x300
        l.record(CALL, 0x160, 0x400, 3, false, 1_512);
        let e: Vec<(u64, u64)> = l.entries().take(2).map(|(f, _, i)| (f, i & INFO_CYC_CNT)).collect();
        assert_eq!(e, [(0x160, 12), (0x10, 0)]);
    }
}
