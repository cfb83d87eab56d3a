//! TNT accumulation (SDM Vol. 3C §33.4.2.1 "Taken/Not-taken (TNT) Packet").
//!
//! Conditional-branch results and compressed RETs are collected into short TNT packets of up to
//! six bits. Pending bits are flushed before any packet that carries an IP or changes decoder
//! state (FUP, TIP*, PIP, MODE, PSB, OVF) so that the decoder sees results in retirement order.

/// Maximum number of results in a short TNT packet.
pub const SHORT_TNT_BITS: u8 = 6;

/// The pending results behind a sentinel bit: `s` = 1 followed by the results, oldest first
/// (1 when empty, 1xxxxxx binary when six are held), so that adding one is a shift and an OR and
/// the count is the sentinel's position (issue 13: a result per block in the steady state).
#[derive(Clone, Copy, Debug)]
pub struct TntBuffer {
    s: u8,
}

impl Default for TntBuffer {
    fn default() -> Self {
        TntBuffer { s: 1 }
    }
}

const FULL: u8 = 1 << SHORT_TNT_BITS;

impl TntBuffer {
    /// Add one result (true = taken). Returns a full packet's (bits, count) when six are held.
    #[inline]
    pub fn push(&mut self, taken: bool) -> Option<(u8, u8)> {
        self.s = (self.s << 1) | u8::from(taken);
        if self.s >= FULL {
            self.take()
        } else {
            None
        }
    }

    /// `push(taken)` if `present`, nothing otherwise, without a branch on either.
    #[inline]
    pub fn push_if(&mut self, present: bool, taken: bool) -> Option<(u8, u8)> {
        let p = u8::from(present);
        self.s = (self.s << p) | (u8::from(taken) & p);
        if self.s >= FULL {
            self.take()
        } else {
            None
        }
    }

    /// `push_if`, for a caller that writes a full packet itself: the byte of the short TNT of
    /// six results. With the sentinel at bit 6 and the results below it, oldest highest, the
    /// accumulator shifted left by one is that packet (SDM §33.4.2.1: bit 0 = 0, results in
    /// bits 6:1 with the oldest in the highest, stop bit 7).
    #[inline(always)]
    pub fn push_if_short(&mut self, present: bool, taken: bool) -> Option<u8> {
        let p = u8::from(present);
        self.s = (self.s << p) | (u8::from(taken) & p);
        if self.s >= FULL {
            let byte = self.s << 1;
            self.s = 1;
            Some(byte)
        } else {
            None
        }
    }

    /// Take the pending results, oldest in the highest bit, if any.
    #[inline]
    pub fn take(&mut self) -> Option<(u8, u8)> {
        let count = self.pending();
        if count == 0 {
            return None;
        }
        let r = (self.s & !(1 << count), count);
        self.s = 1;
        Some(r)
    }

    /// How many results are pending (the sentinel's bit position).
    #[inline]
    pub fn pending(&self) -> u8 {
        7 - self.s.leading_zeros() as u8
    }

    /// Drop pending results (used when an overflow discards them).
    pub fn clear(&mut self) {
        self.s = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixth_result_completes_a_packet_oldest_bit_highest() {
        let mut t = TntBuffer::default();
        for b in [true, false, false, false, false] {
            assert_eq!(t.push(b), None);
        }
        assert_eq!(t.push(true), Some((0b100001, 6)));
        assert_eq!(t.take(), None);
    }

    #[test]
    fn push_if_absent_changes_nothing() {
        let mut t = TntBuffer::default();
        t.push(true);
        assert_eq!(t.push_if(false, true), None);
        assert_eq!(t.pending(), 1);
        for _ in 0..4 {
            assert_eq!(t.push_if(true, false), None);
        }
        assert_eq!(t.push_if(true, true), Some((0b100001, 6)));
    }

    #[test]
    fn six_not_taken_results_are_a_full_packet_of_zeros() {
        let mut t = TntBuffer::default();
        for _ in 0..5 {
            assert_eq!(t.push(false), None);
        }
        assert_eq!(t.pending(), 5);
        assert_eq!(t.push_if(true, false), Some((0, 6)));
        assert_eq!(t.pending(), 0);
        t.push(false);
        t.clear();
        assert_eq!(t.take(), None);
    }

    #[test]
    fn short_packet_byte_equals_the_encoded_full_packet() {
        // Every sequence of six results: the byte `push_if_short` gives is the encoder's short
        // TNT of the (bits, count) `push_if` gives, and the same absent pushes change nothing.
        for results in 0u8..64 {
            let (mut a, mut b) = (TntBuffer::default(), TntBuffer::default());
            for i in (0..6).rev() {
                let taken = results >> i & 1 == 1;
                assert_eq!(a.push_if_short(false, taken), None);
                let full = b.push_if(true, taken);
                let byte = a.push_if_short(true, taken);
                assert_eq!(byte.is_some(), i == 0);
                if let (Some((bits, count)), Some(byte)) = (full, byte) {
                    let mut out = Vec::new();
                    crate::pt::encode::push_tnt_short(u64::from(bits), count, &mut out);
                    assert_eq!(out, [byte], "results {results:06b}");
                }
            }
            assert_eq!((a.pending(), b.pending()), (0, 0));
        }
    }

    #[test]
    fn partial_packet_is_taken_on_flush() {
        let mut t = TntBuffer::default();
        t.push(true);
        t.push(false);
        assert_eq!(t.pending(), 2);
        assert_eq!(t.take(), Some((0b10, 2)));
    }
}
