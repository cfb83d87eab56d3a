//! The model-specific last-branch-record stacks (SDM Vol. 3B §18.4.8 "LBR Stack"), in two
//! layouts ([`LbrLayout`]):
//! - Skylake-class (§18.13.1: 32 entries, MSR_LBR_INFO_x; §18.11.2 "Filtering of Last Branch
//!   Records" (MSR_LBR_SELECT), §18.11.3 "LBR call stack"; LBR format 5 of
//!   IA32_PERF_CAPABILITIES[5:0]: addresses in FROM/TO, flags in LBR_INFO);
//! - Intel Core microarchitecture (`profile=core2`; §18.5 "Last Branch, Interrupt, and Exception
//!   Recording (Intel Core 2 Duo and Intel Atom Processor Family)", §18.5.1 "LBR Stack": four
//!   pairs MSR_LASTBRANCH_0..3_FROM_IP 40H-43H / _TO_IP 60H-63H, "the lowest significant 2 bits of
//!   the TOS Pointer MSR (MSR_LASTBRANCH_TOS, address 1C9H)"; Table "LBR Stack Size and TOS
//!   Pointer Range": 06_0FH, 06_17H, 06_1DH: 4 entries, TOS 0 to 3): no LBR_INFO, no
//!   LBR_SELECT (filtering came with Nehalem), so every taken branch, interrupt and exception is
//!   recorded.
//!
//! Recording is driven by retirement events (taken branches, far transfers, interrupts and
//! exceptions) with the branch's class, the CPL it ends at, the static predictor's verdict and the
//! emulated core clock at the retirement: LBR_INFO[15:0] CYC_CNT holds the core clocks elapsed
//! since the previous update of the stack ([`CycleCount`]).

use crate::insn_class::BranchKind;
use crate::pt::msr::Fault;

/// The deepest model-specific stack (Skylake's); the arrays of [`LbrStack`] have this size.
pub const DEPTH: usize = 32;
pub const MSR_LBR_SELECT: u32 = 0x1C8;
pub const MSR_LASTBRANCH_TOS: u32 = 0x1C9;
pub const MSR_LASTBRANCH_0_FROM_IP: u32 = 0x680;
pub const MSR_LASTBRANCH_0_TO_IP: u32 = 0x6C0;
pub const MSR_LBR_INFO_0: u32 = 0xDC0;
/// MSR_LASTBRANCH_0_FROM_IP of the Intel Core microarchitecture (Vol. 4, the Core 2 MSR table).
pub const MSR_CORE_LASTBRANCH_0_FROM_IP: u32 = 0x40;
/// MSR_LASTBRANCH_0_TO_IP of the Intel Core microarchitecture (Vol. 4 names it
/// MSR_LASTBRANCH_0_TO_LIP in some editions).
pub const MSR_CORE_LASTBRANCH_0_TO_IP: u32 = 0x60;

/// Which model-specific LBR stack a part has: depth, MSR addresses, and the format
/// IA32_PERF_CAPABILITIES[5:0] reports for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LbrLayout {
    /// Skylake-class: 32 entries, FROM 680H, TO 6C0H, LBR_INFO DC0H, TOS 1C9H, LBR_SELECT 1C8H;
    /// format 5.
    #[default]
    Skylake,
    /// Intel Core microarchitecture (Core 2, Penryn 06_17H): 4 entries, FROM 40H, TO 60H, TOS
    /// 1C9H (bits 1:0); no LBR_INFO, no LBR_SELECT; format 1 ([`LbrLayout::perf_cap_format`]).
    Core,
}

impl LbrLayout {
    /// Entries in the stack (SDM Vol. 3B Table "LBR Stack Size and TOS Pointer Range").
    pub const fn depth(self) -> usize {
        match self {
            LbrLayout::Skylake => DEPTH,
            LbrLayout::Core => 4,
        }
    }

    pub const fn from_base(self) -> u32 {
        match self {
            LbrLayout::Skylake => MSR_LASTBRANCH_0_FROM_IP,
            LbrLayout::Core => MSR_CORE_LASTBRANCH_0_FROM_IP,
        }
    }

    pub const fn to_base(self) -> u32 {
        match self {
            LbrLayout::Skylake => MSR_LASTBRANCH_0_TO_IP,
            LbrLayout::Core => MSR_CORE_LASTBRANCH_0_TO_IP,
        }
    }

    /// MSR_LBR_INFO_x and MSR_LBR_SELECT exist (Skylake-class; Nehalem brought LBR_SELECT,
    /// Skylake LBR_INFO).
    pub const fn has_info_and_select(self) -> bool {
        matches!(self, LbrLayout::Skylake)
    }

    /// IA32_PERF_CAPABILITIES[5:0] LBR_FMT (SDM Vol. 3B §18.4.8.1 "LBR Stack and Intel 64
    /// Processors": 000000B 32-bit offsets in CS, 000001B 64-bit linear addresses (LIP),
    /// 000010B 64-bit offsets (EIP), 000011B EIP with flags in FROM; 5: LBR_INFO).
    ///
    /// Core: 1. What a real Penryn reports was NOT established: no register dump of
    /// IA32_PERF_CAPABILITIES (345H) from a Core 2 was found (Linux, KVM, Xen, EDK2's Core2Msr.h,
    /// the SDM's MSR tables and mailing-list searches give the MSR addresses and the depth, not
    /// the value). Format 1 because (a) the Core-microarchitecture stack holds plain 64-bit
    /// addresses without flags (§18.5.1, Figure "64-bit Address Layout of LBR MSR"; the mispredict
    /// flag of format 3 came with Nehalem), which leaves 1 or 2; (b) the model records linear
    /// addresses (the FROM/TO of every transfer are the linear IPs the BTS records hold too), which
    /// is format 1 by definition, and the SDM's Core MSR table names the TO registers
    /// MSR_LASTBRANCH_n_TO_LIP. Linux 6.1 treats formats 1 and 2 alike ("Due to lack of segmentation
    /// in Linux the effective address (offset) is the same as the linear address, allowing us to
    /// merge the LIP and EIP LBR formats", `intel_pmu_lbr_read_64`: FROM/TO read as they are, no
    /// flags, no LBR_INFO), so the choice changes nothing Linux does.
    pub const fn perf_cap_format(self) -> u8 {
        match self {
            LbrLayout::Skylake => 5,
            LbrLayout::Core => 1,
        }
    }

    /// `index` is one of this layout's LBR MSRs.
    pub fn owns(self, index: u32) -> bool {
        let within = |base: u32| (base..base + self.depth() as u32).contains(&index);
        index == MSR_LASTBRANCH_TOS
            || within(self.from_base())
            || within(self.to_base())
            || (self.has_info_and_select() && (index == MSR_LBR_SELECT || within(MSR_LBR_INFO_0)))
    }

    /// `index` is a model-specific LBR MSR of the Skylake-class stack that this layout lacks: on
    /// the Core layout 1C8H, 680H-69FH, 6C0H-6DFH and DC0H-DDFH, which #GP(0) as on the part
    /// (SDM Vol. 4 lists none of them for 06_17H). (The Skylake layout's absent set is empty:
    /// 40H-43H / 60H-63H stay QEMU's with the other profiles, as before.)
    pub fn lacks(self, index: u32) -> bool {
        !self.owns(index) && LbrLayout::Skylake.owns(index)
    }
}

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
    layout: LbrLayout,
    from: [u64; DEPTH],
    to: [u64; DEPTH],
    info: [u64; DEPTH],
    tos: usize,
    select: LbrSelect,
    cycles: CycleCount,
}

impl Default for LbrStack {
    /// The Skylake-class stack.
    fn default() -> Self {
        LbrStack::new(LbrLayout::Skylake)
    }
}

/// LBR_INFO[63] MISPRED.
pub const INFO_MISPRED: u64 = 1 << 63;
/// LBR_INFO[15:0] CYC_CNT.
pub const INFO_CYC_CNT: u64 = 0xFFFF;

impl LbrStack {
    /// After RESET: every record 0, TOS 0, LBR_SELECT 0 (SDM: "MSR_LBR_SELECT is cleared to zero at
    /// RESET, and LBR filtering is disabled").
    pub fn new(layout: LbrLayout) -> Self {
        LbrStack { layout, from: [0; DEPTH], to: [0; DEPTH], info: [0; DEPTH], tos: 0, select: LbrSelect(0), cycles: CycleCount::default() }
    }

    pub fn layout(&self) -> LbrLayout {
        self.layout
    }

    /// Is `index` one of the Skylake-class stack's MSRs (the part with Arch LBR #GPs on them;
    /// `crate::msr_map`)?
    pub fn owns(index: u32) -> bool {
        LbrLayout::Skylake.owns(index)
    }

    /// The record slot of `index` in the register array at `base`, if `index` is one of this
    /// layout's.
    fn slot(&self, base: u32, index: u32) -> Option<usize> {
        index.checked_sub(base).map(|i| i as usize).filter(|&i| i < self.layout.depth())
    }

    fn info_slot(&self, index: u32) -> Option<usize> {
        if self.layout.has_info_and_select() {
            self.slot(MSR_LBR_INFO_0, index)
        } else {
            None
        }
    }

    /// RDMSR; #GP(0) for an MSR this layout lacks.
    pub fn read(&self, index: u32) -> Result<u64, Fault> {
        if let Some(i) = self.slot(self.layout.from_base(), index) {
            return Ok(self.from[i]);
        }
        if let Some(i) = self.slot(self.layout.to_base(), index) {
            return Ok(self.to[i]);
        }
        if let Some(i) = self.info_slot(index) {
            return Ok(self.info[i]);
        }
        match index {
            MSR_LBR_SELECT if self.layout.has_info_and_select() => Ok(self.select.0),
            MSR_LASTBRANCH_TOS => Ok(self.tos as u64),
            _ => Err(Fault::Gp),
        }
    }

    /// WRMSR: FROM/TO take canonical addresses (sign-extended from bit 47), INFO its defined
    /// bits, TOS an index below the depth (bits 4:0 Skylake, 1:0 Core), LBR_SELECT bits 9:0;
    /// anything else #GP(0), as is an MSR this layout lacks. (Linux under a hypervisor probes TOS
    /// and the FROM/TO registers by writing them and reading back: `check_msr` in
    /// arch/x86/events/intel/core.c, TOS with mask 3, FROM/TO with FFFFH.)
    pub fn write(&mut self, index: u32, value: u64) -> Result<(), Fault> {
        let canonical = crate::pt::msr::is_canonical_48(value);
        const INFO_DEFINED: u64 = (7 << 61) | 0xFFFF;
        let from = self.slot(self.layout.from_base(), index);
        let to = self.slot(self.layout.to_base(), index);
        let info = self.info_slot(index);
        let target = if let Some(i) = from {
            canonical.then_some(&mut self.from[i])
        } else if let Some(i) = to {
            canonical.then_some(&mut self.to[i])
        } else if let Some(i) = info {
            (value & !INFO_DEFINED == 0).then_some(&mut self.info[i])
        } else {
            None
        };
        if let Some(t) = target {
            *t = value;
            return Ok(());
        }
        if from.or(to).or(info).is_some() {
            return Err(Fault::Gp);
        }
        match index {
            MSR_LBR_SELECT if self.layout.has_info_and_select() && value & LbrSelect::RESERVED == 0 => {
                self.select = LbrSelect(value);
                Ok(())
            }
            MSR_LASTBRANCH_TOS if value < self.layout.depth() as u64 => {
                self.tos = value as usize;
                Ok(())
            }
            _ => Err(Fault::Gp),
        }
    }

    /// A taken transfer `from` -> `to` of class `kind` (None: interrupt or exception) ending at
    /// privilege `cpl` retired while recording (DEBUGCTL.LBR = 1, not frozen), the core clock
    /// reading `clock`. The Core layout has no LBR_SELECT (its `select` stays 0: everything is
    /// captured) and no LBR_INFO (the mispredict bit and cycle count are not kept).
    pub fn record(&mut self, kind: Option<BranchKind>, from: u64, to: u64, cpl: u8, mispredicted: bool, clock: u64) {
        if !self.select.captures(kind, cpl) {
            return;
        }
        let depth = self.layout.depth();
        let cyc_cnt = self.cycles.update(clock).unwrap_or(0);
        if self.select.en_callstack() && kind == Some(BranchKind::Return) {
            // Call-stack mode: a return pops the most recent call instead of being recorded.
            self.tos = (self.tos + depth - 1) % depth;
            return;
        }
        self.tos = (self.tos + 1) % depth;
        self.from[self.tos] = from;
        self.to[self.tos] = to;
        if self.layout.has_info_and_select() {
            self.info[self.tos] = if mispredicted { INFO_MISPRED } else { 0 } | cyc_cnt;
        }
    }

    /// The entries from the youngest to the oldest: (from, to, info); info 0 without LBR_INFO.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let depth = self.layout.depth();
        (0..depth).map(move |k| {
            let i = (self.tos + depth - k) % depth;
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

    const CORE_TOS: u32 = MSR_LASTBRANCH_TOS;
    const CORE_FROM: u32 = MSR_CORE_LASTBRANCH_0_FROM_IP;
    const CORE_TO: u32 = MSR_CORE_LASTBRANCH_0_TO_IP;

    #[test]
    fn core_stack_holds_the_last_4_branches_youngest_at_tos_which_wraps_mod_4() {
        let mut l = LbrStack::new(LbrLayout::Core);
        for i in 0..6u64 {
            l.record(JCC, 0x1000 + i, 0x2000 + i, 3, i % 2 == 0, 100 * i);
            assert_eq!(l.read(CORE_TOS), Ok((i + 1) % 4), "TOS after record {i}");
        }
        let e: Vec<_> = l.entries().collect();
        assert_eq!(e.len(), 4);
        // No LBR_INFO: neither the mispredict bit nor a cycle count is kept.
        assert_eq!(e, [(0x1005, 0x2005, 0), (0x1004, 0x2004, 0), (0x1003, 0x2003, 0), (0x1002, 0x2002, 0)]);
        // TOS = 6 mod 4 = 2: the youngest record is in MSR_LASTBRANCH_2, the oldest in _3.
        assert_eq!(l.read(CORE_FROM + 2), Ok(0x1005));
        assert_eq!(l.read(CORE_TO + 2), Ok(0x2005));
        assert_eq!(l.read(CORE_FROM + 3), Ok(0x1002));
        assert_eq!(l.read(CORE_TO + 1), Ok(0x2004));
    }

    #[test]
    fn core_stack_records_every_transfer_class_and_ring_without_lbr_select() {
        let mut l = LbrStack::new(LbrLayout::Core);
        l.record(CALL, 0x10, 0x100, 3, false, 0);
        l.record(RET, 0x100, 0x15, 3, false, 0);
        l.record(None, 0x15, 0xFFFF_FFFF_8100_0000, 0, true, 0); // interrupt into ring 0
        l.record(Some(BranchKind::Far(FarKind::Iret)), 0xFFFF_FFFF_8100_0010, 0x15, 3, true, 0);
        let e: Vec<(u64, u64)> = l.entries().map(|(f, t, _)| (f, t)).collect();
        assert_eq!(e, [(0xFFFF_FFFF_8100_0010, 0x15), (0x15, 0xFFFF_FFFF_8100_0000), (0x100, 0x15), (0x10, 0x100)]);
    }

    #[test]
    fn core_stack_has_its_msrs_at_40h_60h_1c9h_and_faults_the_skylake_class_ones() {
        let mut l = LbrStack::new(LbrLayout::Core);
        for index in [MSR_LBR_SELECT, MSR_LASTBRANCH_0_FROM_IP, MSR_LASTBRANCH_0_TO_IP, MSR_LBR_INFO_0, CORE_FROM + 4, CORE_TO + 4] {
            assert_eq!(l.read(index), Err(Fault::Gp), "RDMSR {index:#x}");
            assert_eq!(l.write(index, 0), Err(Fault::Gp), "WRMSR {index:#x}");
        }
        assert_eq!(l.write(CORE_TOS, 4), Err(Fault::Gp), "TOS is 0 to 3");
        assert_eq!(l.write(CORE_TO + 3, 0x0000_8000_0000_0000), Err(Fault::Gp), "not canonical");
        // Linux 6.1's check_msr (under the hypervisor bit): read, write value ^ mask, read back,
        // restore; TOS with mask 3, each FROM/TO with FFFFH. Every probe must read back.
        l.record(JCC, 0xFFFF_FFFF_8100_1234, 0xFFFF_FFFF_8100_2000, 0, false, 0);
        let probe = |l: &mut LbrStack, index: u32, mask: u64| {
            let old = l.read(index).unwrap();
            l.write(index, old ^ mask).unwrap();
            let back = l.read(index).unwrap();
            l.write(index, old).unwrap();
            back == old ^ mask
        };
        assert!(probe(&mut l, CORE_TOS, 3));
        for i in 0..4 {
            assert!(probe(&mut l, CORE_FROM + i, 0xFFFF) && probe(&mut l, CORE_TO + i, 0xFFFF), "entry {i}");
        }
        assert_eq!(l.read(CORE_TOS), Ok(1));
        assert_eq!(l.entries().next(), Some((0xFFFF_FFFF_8100_1234, 0xFFFF_FFFF_8100_2000, 0)));
    }

    #[test]
    fn layouts_own_their_msrs_and_report_their_perf_capabilities_format() {
        let core = LbrLayout::Core;
        assert!(core.owns(0x40) && core.owns(0x43) && core.owns(0x60) && core.owns(0x63) && core.owns(0x1C9));
        assert!(!core.owns(0x44) && !core.owns(0x64) && !core.owns(0x1C8) && !core.owns(0x680) && !core.owns(0xDC0));
        for index in [0x1C8, 0x680, 0x69F, 0x6C0, 0x6DF, 0xDC0, 0xDDF] {
            assert!(core.lacks(index), "{index:#x}");
        }
        assert!(!core.lacks(0x6A0) && !core.lacks(0x44) && !core.lacks(0x1C9));
        let sky = LbrLayout::Skylake;
        assert!(sky.owns(0x1C8) && sky.owns(0xDDF) && !sky.owns(0x40) && !sky.owns(0xDE0));
        assert!(!sky.lacks(0x40), "40H-43H stay QEMU's on the Skylake-class profiles");
        assert_eq!((sky.perf_cap_format(), core.perf_cap_format()), (5, 1));
        assert_eq!((sky.depth(), core.depth()), (32, 4));
    }
}
