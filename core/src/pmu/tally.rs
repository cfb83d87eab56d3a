//! Retirements counted in a batch (issue 13): while no counter with INT can overflow
//! (`Pmu::blocks_before_pmi`), a run of blocks at one CPL adds the same counts whether each
//! retirement reaches the counters as it happens or the run's retirements are summed by class and
//! added at its end (an overflow without INT only sets its GLOBAL_STATUS bit, once either way).
use super::{Pmu, Retired};

/// Retirements at one CPL not yet added to the counters: plain instructions, and the last
/// instruction of each block by the flags it contributes (a handful of classes: not a branch,
/// conditional taken / not taken / mispredicted, near call, return, jump).
#[derive(Default)]
pub struct RetirementTally {
    plain: u64,
    classes: [(Retired, u64); 8],
    n: usize,
}

impl RetirementTally {
    /// `n` instructions that are not branches retired.
    #[inline]
    pub fn plain(&mut self, n: u64) {
        self.plain += n;
    }

    /// One instruction contributing `what` retired (`pmu` and `cpl`: where the tally goes when
    /// its classes are full).
    #[inline]
    pub fn one(&mut self, what: Retired, pmu: &mut Pmu, cpl: u8) {
        if let Some(c) = self.classes[..self.n].iter_mut().find(|c| c.0 == what) {
            c.1 += 1;
            return;
        }
        if self.n == self.classes.len() {
            self.commit(pmu, cpl);
        }
        self.classes[self.n] = (what, 1);
        self.n += 1;
    }

    /// Add everything tallied to the counters, at `cpl`; returns whether a counter with INT
    /// overflowed (`Pmu::retire`).
    pub fn commit(&mut self, pmu: &mut Pmu, cpl: u8) -> bool {
        let mut pmi = pmu.retire(std::mem::take(&mut self.plain), Retired::PLAIN, cpl);
        for &(what, n) in &self.classes[..std::mem::take(&mut self.n)] {
            pmi |= pmu.retire(n, what, cpl);
        }
        pmi
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn_class::BranchKind;
    use crate::pmu::PmuCaps;

    const EN: u64 = 1 << 22;
    const USR: u64 = 1 << 16;
    const OS: u64 = 1 << 17;

    /// PMC0..3: instructions, all branches, conditional branches (C4H/01H), branch mispredicts
    /// (C5H/00H); fixed counter 0: instructions at CPL 0. PMC1 starts 3 from overflow.
    fn counting() -> Pmu {
        let mut p = Pmu::new(PmuCaps::SKYLAKE);
        for (i, evt) in [0xC0u64, 0xC4, 0x1C4, 0xC5].into_iter().enumerate() {
            p.write(0x186 + i as u32, evt | USR | OS | EN).unwrap();
        }
        p.write(0x4C2, (1 << 48) - 3).unwrap();
        p.write(0x38D, 1).unwrap();
        p.write(0x38F, (1 << 32) | 0xF).unwrap();
        p
    }

    fn counters(p: &mut Pmu) -> Vec<u64> {
        [0xC1, 0xC2, 0xC3, 0xC4, 0x309, 0x38E].iter().map(|&m| p.read(m).unwrap()).collect()
    }

    #[test]
    fn a_tallied_run_adds_what_retiring_block_by_block_adds() {
        // Blocks of 0-3 plain instructions, then a conditional branch taken or not (predicted or
        // not by the static predictor), a call or a return.
        let blocks: Vec<(u64, Retired)> = (0..200u64)
            .map(|i| {
                let (ip, nlip) = (0x1000 + (i % 2) * 0x100, 0x1002 + (i % 2) * 0x100);
                let what = match i % 5 {
                    0 => Retired::of(BranchKind::Conditional { target: 0x800 }, ip, nlip, 0x800),
                    1 => Retired::of(BranchKind::Conditional { target: 0x800 }, ip, nlip, nlip),
                    2 => Retired::of(BranchKind::Conditional { target: 0x2000 }, ip, nlip, 0x2000),
                    3 => Retired::of(BranchKind::DirectCall { target: 0x3000 }, ip, nlip, 0x3000),
                    _ => Retired::of(BranchKind::Return, ip, nlip, 0x4000),
                };
                (i % 4, what)
            })
            .collect();
        let (mut each, mut batch) = (counting(), counting());
        for &(plain, what) in &blocks {
            each.retire(plain, Retired::PLAIN, 3);
            each.retire(1, what, 3);
        }
        let mut tally = RetirementTally::default();
        for &(plain, what) in &blocks {
            tally.plain(plain);
            tally.one(what, &mut batch, 3);
        }
        assert!(!tally.commit(&mut batch, 3));
        let expected = counters(&mut each);
        assert_eq!(counters(&mut batch), expected);
        assert_eq!(expected[5], 0b10, "PMC1 overflowed (no INT) in both");
        assert_eq!(expected[4], 0, "fixed counter 0 counts CPL 0 only");
        assert_eq!(expected[0], (0..200).map(|i| i % 4 + 1).sum::<u64>());
        // Committing again adds nothing.
        assert!(!tally.commit(&mut batch, 3));
        assert_eq!(counters(&mut batch), expected);
    }

    #[test]
    fn more_classes_than_the_tally_holds_are_committed_as_they_come() {
        let (mut each, mut batch) = (counting(), counting());
        let mut tally = RetirementTally::default();
        for i in 0..40u16 {
            let what = Retired(1 << (i % 12));
            each.retire(1, what, 0);
            tally.one(what, &mut batch, 0);
        }
        tally.commit(&mut batch, 0);
        let expected = counters(&mut each);
        assert_eq!(counters(&mut batch), expected);
        assert_eq!(expected[4], 40, "fixed counter 0");
    }
}
