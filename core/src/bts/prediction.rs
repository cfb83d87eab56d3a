//! The "predicted" flag of a BTS record (flags bit 4, seed 001 §6.6).
//!
//! Hardware reports what its dynamic branch predictor did; QEMU has no predictor, so the model
//! uses the classic static rules a cold predictor falls back to (the optimisation manual's
//! "static prediction": backward conditional branches taken, forward ones
//! not taken; unconditional direct branches and returns (return stack) predicted; indirect
//! branches, far transfers, interrupts and exceptions not predicted). No known consumer (Linux
//! perf, the seed's dump routines) interprets the bit; it is a documented model, not a measurement.

use crate::insn_class::BranchKind;

/// The static prediction for a conditional branch at `ip` to `target`: backward taken, forward
/// not taken. (A taken branch's record is "predicted" when this says taken; the PMU's
/// BR_MISP_RETIRED counts a conditional branch whose outcome differs from it.)
pub fn conditional_predicted_taken(ip: u64, target: u64) -> bool {
    target <= ip
}

/// Whether the taken transfer `from` -> `to` of class `kind` counts as predicted.
pub fn predicted(kind: BranchKind, from: u64, to: u64) -> bool {
    match kind {
        BranchKind::Conditional { .. } => conditional_predicted_taken(from, to),
        BranchKind::DirectJump { .. } | BranchKind::DirectCall { .. } | BranchKind::Return => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_conditional_is_predicted_forward_is_not() {
        assert!(predicted(BranchKind::Conditional { target: 0x100 }, 0x180, 0x100));
        assert!(!predicted(BranchKind::Conditional { target: 0x200 }, 0x180, 0x200));
        assert!(predicted(BranchKind::Return, 0x180, 0x9000));
        assert!(!predicted(BranchKind::IndirectCall, 0x180, 0x9000));
        assert!(!predicted(BranchKind::SoftwareInterrupt, 0x180, 0x9000));
    }
}
