//! The events the model counts, and what one retired instruction contributes to them
//! (SDM Vol. 3B §20.2.1.2 Table 20-1 "UMask and Event Select Encodings for Pre-Defined
//! Architectural Performance Events"; the BR_INST_RETIRED / BR_MISP_RETIRED umasks of the
//! Skylake event list, which Linux 6.1's perf uses for `branches`, `branch-misses` and the
//! `br_inst_retired.*` names).
//!
//! Counted exactly per retired instruction: a REP string instruction once, an instruction that
//! faults not at all, INT n once (it retires), interrupt and exception deliveries not at all.
//! Mispredictions come from the static predictor behind the BTS record's "predicted" flag
//! (`crate::bts::prediction`), extended to not-taken conditional branches.
//! Cycles come from the emulated clock (the guest TSC, or the instruction count under -icount):
//! the core clock of the model runs at the TSC rate (no turbo, no halt while counting), so core
//! and reference cycles are equal.

use crate::bts::prediction;
use crate::insn_class::BranchKind;

/// What one retired instruction contributes: a set of event flags (all zero for an instruction
/// that is not a branch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Retired(pub u16);

impl Retired {
    /// An instruction that is not a branch.
    pub const PLAIN: Retired = Retired(0);
    /// Any branch instruction (near or far, taken or not).
    pub const BRANCH: u16 = 1 << 0;
    /// Conditional near branch (Jcc, J*CXZ, LOOP*).
    pub const COND: u16 = 1 << 1;
    /// Near CALL, direct or indirect.
    pub const NEAR_CALL: u16 = 1 << 2;
    /// Near RET.
    pub const NEAR_RET: u16 = 1 << 3;
    /// A conditional branch that was not taken.
    pub const NOT_TAKEN: u16 = 1 << 4;
    /// A taken near branch (JMP, CALL, RET, taken Jcc).
    pub const NEAR_TAKEN: u16 = 1 << 5;
    /// Far branch: far JMP/CALL/RET, SYSCALL/SYSRET, SYSENTER/SYSEXIT, IRET, INT n.
    pub const FAR: u16 = 1 << 6;
    /// Mispredicted by the static predictor.
    pub const MISP: u16 = 1 << 7;

    pub fn has(self, flags: u16) -> bool {
        self.0 & flags == flags
    }

    /// The instruction of class `kind` at `ip` (next sequential `nlip`) retired and execution
    /// continues at `next`.
    pub fn of(kind: BranchKind, ip: u64, nlip: u64, next: u64) -> Retired {
        let f = match kind {
            BranchKind::None | BranchKind::AlwaysFaults => 0,
            BranchKind::Conditional { target } => {
                let taken = next != nlip || target == nlip;
                let t = if taken { Self::NEAR_TAKEN } else { Self::NOT_TAKEN };
                let predicted_taken = prediction::conditional_predicted_taken(ip, target);
                let misp = if taken != predicted_taken { Self::MISP } else { 0 };
                Self::BRANCH | Self::COND | t | misp
            }
            BranchKind::DirectJump { .. } | BranchKind::IndirectJump => Self::BRANCH | Self::NEAR_TAKEN,
            BranchKind::DirectCall { .. } | BranchKind::IndirectCall => Self::BRANCH | Self::NEAR_CALL | Self::NEAR_TAKEN,
            BranchKind::Return => Self::BRANCH | Self::NEAR_RET | Self::NEAR_TAKEN,
            BranchKind::Far(_) | BranchKind::SoftwareInterrupt => Self::BRANCH | Self::FAR,
        };
        // Taken transfers: the BTS predictor's verdict (indirect and far branches are not
        // predicted by the static model).
        let misp = if f & Self::BRANCH != 0 && f & Self::COND == 0 && !prediction::predicted(kind, ip, next) {
            Self::MISP
        } else {
            0
        };
        Retired(f | misp)
    }
}

impl Retired {
    /// What the last instruction of a block of class `kind` contributes whatever its outcome
    /// (a conditional branch's taken / mispredicted flags are known only once it retired).
    pub fn certain(kind: BranchKind) -> Retired {
        match kind {
            BranchKind::Conditional { .. } => Retired(Self::BRANCH | Self::COND),
            other => Retired::of(other, 0, 0, 0),
        }
    }
}

/// A modelled event, decoded from an event select and unit mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Counts retired instructions whose flags include all of these (0: every instruction).
    Retirement(u16),
    /// CPU_CLK_UNHALTED.THREAD_P (3CH/00H).
    CoreCycles,
    /// CPU_CLK_UNHALTED.REF (3CH/01H; fixed counter 2 is REF_TSC).
    RefCycles,
}

impl Event {
    /// The event a general-purpose counter counts for (event select, umask), or None for an
    /// encoding the model does not count (the counter then keeps its value).
    pub fn decode(event: u8, umask: u8) -> Option<Event> {
        use Retired as R;
        Some(match (event, umask) {
            (0xC0, 0x00) => Event::Retirement(0),
            // INST_RETIRED.PREC_DIST (Skylake 06_5EH, counter 1 only): instructions retired, the
            // umask only asks the hardware for a PEBS IP distribution without shadowing, which
            // the model's PEBS has anyway (a record names the exact instruction). Linux uses it
            // for `:ppp` (and `cycles:ppp`: INV, CMASK = 16).
            (0xC0, 0x01) => Event::Retirement(0),
            (0x3C, 0x00) => Event::CoreCycles,
            (0x3C, 0x01) => Event::RefCycles,
            // BR_INST_RETIRED: ALL_BRANCHES (00H, and 04H the PEBS flavour), CONDITIONAL,
            // NEAR_CALL, NEAR_RETURN, NOT_TAKEN, NEAR_TAKEN, FAR_BRANCH.
            (0xC4, 0x00 | 0x04) => Event::Retirement(R::BRANCH),
            (0xC4, 0x01) => Event::Retirement(R::COND),
            (0xC4, 0x02) => Event::Retirement(R::NEAR_CALL),
            (0xC4, 0x08) => Event::Retirement(R::NEAR_RET),
            (0xC4, 0x10) => Event::Retirement(R::NOT_TAKEN),
            (0xC4, 0x20) => Event::Retirement(R::NEAR_TAKEN),
            (0xC4, 0x40) => Event::Retirement(R::FAR),
            // BR_MISP_RETIRED: ALL_BRANCHES (00H/04H), CONDITIONAL, NEAR_TAKEN.
            (0xC5, 0x00 | 0x04) => Event::Retirement(R::BRANCH | R::MISP),
            (0xC5, 0x01) => Event::Retirement(R::COND | R::MISP),
            (0xC5, 0x20) => Event::Retirement(R::NEAR_TAKEN | R::MISP),
            _ => return None,
        })
    }

    /// Fixed counter `i`: INST_RETIRED.ANY, CPU_CLK_UNHALTED.THREAD, CPU_CLK_UNHALTED.REF_TSC
    /// (SDM Table 20-2).
    pub fn fixed(i: usize) -> Option<Event> {
        match i {
            0 => Some(Event::Retirement(0)),
            1 => Some(Event::CoreCycles),
            2 => Some(Event::RefCycles),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn_class::FarKind;

    #[test]
    fn conditional_branches_taken_and_not_with_the_static_prediction() {
        let back = BranchKind::Conditional { target: 0x100 };
        // Backward taken: predicted taken, no misprediction.
        let r = Retired::of(back, 0x180, 0x182, 0x100);
        assert!(r.has(Retired::BRANCH | Retired::COND | Retired::NEAR_TAKEN) && !r.has(Retired::MISP));
        // Backward not taken (loop exit): mispredicted.
        let r = Retired::of(back, 0x180, 0x182, 0x182);
        assert!(r.has(Retired::NOT_TAKEN | Retired::MISP) && !r.has(Retired::NEAR_TAKEN));
        // Forward taken: mispredicted; forward not taken: predicted.
        let fwd = BranchKind::Conditional { target: 0x200 };
        assert!(Retired::of(fwd, 0x180, 0x182, 0x200).has(Retired::MISP));
        assert!(!Retired::of(fwd, 0x180, 0x182, 0x182).has(Retired::MISP));
    }

    #[test]
    fn calls_returns_jumps_and_far_branches() {
        let call = Retired::of(BranchKind::DirectCall { target: 0x500 }, 0x100, 0x105, 0x500);
        assert!(call.has(Retired::BRANCH | Retired::NEAR_CALL | Retired::NEAR_TAKEN) && !call.has(Retired::MISP));
        let ret = Retired::of(BranchKind::Return, 0x500, 0x501, 0x105);
        assert!(ret.has(Retired::NEAR_RET | Retired::NEAR_TAKEN) && !ret.has(Retired::MISP));
        assert!(Retired::of(BranchKind::IndirectCall, 0x100, 0x102, 0x900).has(Retired::MISP));
        let sc = Retired::of(BranchKind::Far(FarKind::Syscall), 0x100, 0x102, 0xFFFF_8000_0000_0000);
        assert!(sc.has(Retired::BRANCH | Retired::FAR) && !sc.has(Retired::NEAR_TAKEN));
        assert!(Retired::of(BranchKind::SoftwareInterrupt, 0x100, 0x102, 0x9000).has(Retired::FAR));
        assert_eq!(Retired::of(BranchKind::None, 0x100, 0x103, 0x103), Retired::PLAIN);
    }

    #[test]
    fn architectural_encodings_decode_and_unknown_ones_do_not() {
        assert_eq!(Event::decode(0xC0, 0), Some(Event::Retirement(0)));
        assert_eq!(Event::decode(0xC0, 1), Some(Event::Retirement(0)), "INST_RETIRED.PREC_DIST");
        assert_eq!(Event::decode(0xC0, 2), None);
        assert_eq!(Event::decode(0xC4, 0), Some(Event::Retirement(Retired::BRANCH)));
        assert_eq!(Event::decode(0xC5, 0), Some(Event::Retirement(Retired::BRANCH | Retired::MISP)));
        assert_eq!(Event::decode(0x3C, 1), Some(Event::RefCycles));
        assert_eq!(Event::decode(0x2E, 0x4F), None, "LLC references are not modelled");
        assert_eq!(Event::fixed(0), Some(Event::Retirement(0)));
        assert_eq!(Event::fixed(3), None);
    }
}
