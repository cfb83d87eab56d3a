//! The RET-compression call stack (SDM Vol. 3C §33.4.2.2 "Indirect Transfer Compression for
//! Returns"): a near RET whose target is the NLIP of the CALL at the same depth is sent as a
//! single taken TNT bit instead of a TIP.
//!
//! Hardware keeps 64 entries; when full, the oldest entry is dropped. Only CALLs seen since the
//! last PSB may be used (a decoder that syncs at that PSB starts with an empty stack), so the
//! stack is cleared at PSB and at OVF. libipt's decoder keeps a 64-entry stack with the same
//! drop-oldest behaviour (libipt/src/pt_retstack.c), so a compressed RET is always decodable.

pub const RET_STACK_DEPTH: usize = 64;

#[derive(Clone, Debug)]
pub struct RetStack {
    entries: [u64; RET_STACK_DEPTH],
    /// Index of the next free slot (circular).
    top: usize,
    len: usize,
}

impl Default for RetStack {
    fn default() -> Self {
        RetStack { entries: [0; RET_STACK_DEPTH], top: 0, len: 0 }
    }
}

impl RetStack {
    /// A near CALL retired: remember its NLIP. The oldest entry is dropped when full.
    #[inline]
    pub fn push(&mut self, nlip: u64) {
        // (`top` < RET_STACK_DEPTH always; the modulo lets the index go unchecked, and the
        // new values are computed before the store, which could otherwise alias them.)
        let top = self.top % RET_STACK_DEPTH;
        let (next, len) = ((top + 1) % RET_STACK_DEPTH, (self.len + 1).min(RET_STACK_DEPTH));
        self.entries[top] = nlip;
        self.top = next;
        self.len = len;
    }

    /// A near RET to `target` would be compressed (`try_compress` would return true); nothing
    /// changes.
    #[inline]
    pub fn would_compress(&self, target: u64) -> bool {
        self.len != 0 && self.entries[self.top.wrapping_sub(1) % RET_STACK_DEPTH] == target
    }

    /// A near RET to `target` retired: if the top entry matches, pop it and return true
    /// (the RET is compressed).
    #[inline]
    pub fn try_compress(&mut self, target: u64) -> bool {
        if self.len == 0 {
            return false;
        }
        let idx = self.top.wrapping_sub(1) % RET_STACK_DEPTH;
        if self.entries[idx] != target {
            return false;
        }
        self.top = idx;
        self.len -= 1;
        true
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_ret_pops_and_mismatching_ret_keeps_the_stack() {
        let mut s = RetStack::default();
        s.push(0x10);
        s.push(0x20);
        assert!(!s.try_compress(0x10));
        assert!(s.try_compress(0x20));
        assert!(s.try_compress(0x10));
        assert!(!s.try_compress(0x10));
    }

    #[test]
    fn sixty_five_calls_drop_the_oldest_return() {
        let mut s = RetStack::default();
        for i in 0..65u64 {
            s.push(0x1000 + i);
        }
        assert_eq!(s.len(), 64);
        for i in (1..65u64).rev() {
            assert!(s.try_compress(0x1000 + i), "entry {i}");
        }
        assert!(!s.try_compress(0x1000), "the first call's entry was dropped");
    }
}
