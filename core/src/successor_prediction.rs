//! The block that follows a translated block when nothing at run time decides it (issue 13
//! step 24): user mode records only the blocks this prediction misses, and the model walks the
//! predicted ones itself (the plugin's `user/predict.rs`).
//!
//! The prediction for a conditional branch is the static one the BTS "predicted" flag and
//! BR_MISP_RETIRED use (`bts::prediction`, the optimisation manual's static rules): backward
//! taken, forward not taken. Unconditional direct JMP and CALL go to their target, an
//! instruction that does not transfer to the next one. A RET (inline operations cannot keep a
//! return stack), indirect and far transfers, INT n, SYSCALL and instructions that always fault
//! predict nothing, nor does a REP string instruction, which may run again.

use crate::bts::prediction::conditional_predicted_taken;
use crate::insn_class::{BranchKind, ClassifiedInsn};

/// Where the block ending with `last` goes next when nothing at run time decides it: the next
/// instruction after one that does not transfer, the target of a direct JMP or CALL, a Jcc's
/// target if the static predictor takes it (backward) or its next instruction; 0 otherwise.
pub fn predicted_successor(last: &ClassifiedInsn) -> u64 {
    let next = last.ip.wrapping_add(u64::from(last.len));
    match last.kind {
        BranchKind::None if !last.rep_string => next,
        BranchKind::Conditional { target } if conditional_predicted_taken(last.ip, target) => target,
        BranchKind::Conditional { .. } => next,
        BranchKind::DirectJump { target } | BranchKind::DirectCall { target } => target,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(ip: u64, len: u8, kind: BranchKind) -> ClassifiedInsn {
        ClassifiedInsn { ip, len, kind, rep_string: false }
    }

    #[test]
    fn backward_jcc_predicts_its_target_forward_jcc_its_next_instruction() {
        assert_eq!(predicted_successor(&insn(0x1010, 2, BranchKind::Conditional { target: 0x1000 })), 0x1000);
        assert_eq!(predicted_successor(&insn(0x1010, 2, BranchKind::Conditional { target: 0x1040 })), 0x1012);
    }

    #[test]
    fn direct_transfers_predict_their_target_others_nothing() {
        assert_eq!(predicted_successor(&insn(0x1010, 5, BranchKind::DirectCall { target: 0x2000 })), 0x2000);
        assert_eq!(predicted_successor(&insn(0x1010, 2, BranchKind::DirectJump { target: 0x900 })), 0x900);
        assert_eq!(predicted_successor(&insn(0x1010, 3, BranchKind::None)), 0x1013);
        for kind in [BranchKind::Return, BranchKind::IndirectJump, BranchKind::IndirectCall, BranchKind::SoftwareInterrupt, BranchKind::AlwaysFaults] {
            assert_eq!(predicted_successor(&insn(0x1010, 2, kind)), 0, "{kind:?}");
        }
        // A REP string instruction may run again: its block's successor is decided at run time.
        assert_eq!(predicted_successor(&ClassifiedInsn { ip: 0x1010, len: 2, kind: BranchKind::None, rep_string: true }), 0);
    }
}
