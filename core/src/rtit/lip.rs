//! RTIT LIP compression (RTIT Programming Reference v1.05 §4.2.3.1, Table 18; RTIT_LAST_LIP
//! §3.3.7, Table 9).
//!
//! Unlike Intel PT's last-IP, RTIT keeps only LIP[47:16] of the last LIP sent (RTIT_LAST_LIP
//! [15:0] = LIP[31:16] "CMPRS_LIP_LOW", [31:16] = LIP[47:32] "CMPRS_LIP_HIGH", [32] valid) and
//! compares the two 16-bit chunks separately. LIP[15:0] is always sent. The encoder and the
//! decoder both keep a [`LastLip`]; FUP and TIP compress the same way.
//!
//! Table 18, rows in order (M = match with RTIT_LAST_LIP, Z = all zeros, X = either):
//!
//! | CNT | Zext | M[47:32] | M[31:16] | Z[47:32] | Z[31:16] |
//! |-----|------|----------|----------|----------|----------|
//! | 0   | 0    | 1        | 1        | 0        | X        |
//! | 0   | 0    | 1        | 1        | 1        | 0        |
//! | 0   | 1    | X        | X        | 1        | 1        |
//! | 1   | 0    | 1        | 0        | 0        | X        |
//! | 1   | 1    | X        | 0        | 1        | 0        |
//! | 1   | 1    | 0        | X        | 1        | 0        |
//! | 2   | 0    | 0        | X        | 0        | X        |
//!
//! A match needs RTIT_LAST_LIP[CMPRS_LIP_Valid] = 1 (with it clear there is "nothing to compress
//! against", §4.2.3.1 scenario 1). The rows cover every combination exactly once.

use super::packet::Lip;

/// LIP[47:0] of a linear address.
pub const LIP_MASK: u64 = 0xFFFF_FFFF_FFFF;

/// Sign-extend bit 47: the canonical 64-bit address a 48-bit LIP stands for.
pub fn canonical(lip48: u64) -> u64 {
    (((lip48 << 16) as i64) >> 16) as u64
}

/// RTIT_LAST_LIP as a value: the compressed LIP register of an encoder or decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LastLip {
    /// RTIT_LAST_LIP[15:0] CMPRS_LIP_LOW = LIP[31:16].
    pub low: u16,
    /// RTIT_LAST_LIP[31:16] CMPRS_LIP_HIGH = LIP[47:32].
    pub high: u16,
    /// RTIT_LAST_LIP[32] CMPRS_LIP_Valid.
    pub valid: bool,
}

/// Why a LIP payload cannot be expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LipError {
    /// CNT = 11b (reserved).
    ReservedCnt,
    /// Zext = 0 with CNT < 2 while RTIT_LAST_LIP is not valid.
    NoLastLip,
}

impl LastLip {
    /// The register from its MSR value (bits 63:33 ignored).
    pub fn from_msr(v: u64) -> Self {
        LastLip { low: v as u16, high: (v >> 16) as u16, valid: v & (1 << 32) != 0 }
    }

    /// The MSR value RDMSR returns.
    pub fn msr(self) -> u64 {
        u64::from(self.low) | (u64::from(self.high) << 16) | (u64::from(self.valid) << 32)
    }

    /// Remember `ip` as the last LIP sent ("updated with the full LIP, even if that packet did
    /// not send out that full LIP").
    pub fn update(&mut self, ip: u64) {
        self.low = (ip >> 16) as u16;
        self.high = (ip >> 32) as u16;
        self.valid = true;
    }

    /// Table 18: the payload for `ip` against this register. Does not update it.
    pub fn compress(self, ip: u64) -> Lip {
        let ip = ip & LIP_MASK;
        let low = (ip >> 16) as u16;
        let high = (ip >> 32) as u16;
        let m_hi = self.valid && high == self.high;
        let m_lo = self.valid && low == self.low;
        let (cnt, zext) = match (high == 0, low == 0) {
            // Row 3.
            (true, true) => (0, true),
            // Rows 2, 5, 6.
            (true, false) => {
                if m_hi && m_lo {
                    (0, false)
                } else {
                    (1, true)
                }
            }
            // Rows 1, 4, 7.
            (false, _) => match (m_hi, m_lo) {
                (true, true) => (0, false),
                (true, false) => (1, false),
                (false, _) => (2, false),
            },
        };
        let lip = Lip { cnt, zext, payload: 0 };
        Lip { payload: ip & lip.payload_mask(), ..lip }
    }

    /// Compress `ip` and remember it (what the encoder does for every FUP/TIP except
    /// FUP.BuffOvf).
    pub fn compress_update(&mut self, ip: u64) -> Lip {
        let lip = self.compress(ip);
        self.update(ip);
        lip
    }

    /// The 48-bit LIP a payload stands for, against this register. Does not update it.
    pub fn expand(self, lip: Lip) -> Result<u64, LipError> {
        if lip.cnt > 2 {
            return Err(LipError::ReservedCnt);
        }
        let payload = lip.payload & lip.payload_mask();
        if lip.cnt == 2 || lip.zext {
            // CNT = 2 with Zext = 1 is not produced by Table 18; the payload is complete anyway.
            return Ok(payload);
        }
        if !self.valid {
            return Err(LipError::NoLastLip);
        }
        let upper = (u64::from(self.high) << 32) | (u64::from(self.low) << 16);
        let keep = !lip.payload_mask() & LIP_MASK;
        Ok((upper & keep) | payload)
    }

    /// Expand and remember (the decoder's side of [`LastLip::compress_update`]).
    pub fn expand_update(&mut self, lip: Lip) -> Result<u64, LipError> {
        let ip = self.expand(lip)?;
        self.update(ip);
        Ok(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(ip: u64) -> LastLip {
        let mut l = LastLip::default();
        l.update(ip);
        l
    }

    #[test]
    fn msr_layout_is_table_9() {
        let l = last(0x1234_5678_9ABC);
        assert_eq!(l.msr(), 0x1_1234_5678);
        assert_eq!(LastLip::from_msr(0x1_1234_5678), l);
        assert_eq!(LastLip::default().msr(), 0);
    }

    #[test]
    fn each_table_18_row() {
        // Row 1: upper matches, high non-zero.
        assert_eq!(last(0x7F00_1234_0000).compress(0x7F00_1234_5678), Lip { cnt: 0, zext: false, payload: 0x5678 });
        // Row 2: high zero, low non-zero, both match.
        assert_eq!(last(0x1234_0000).compress(0x1234_5678), Lip { cnt: 0, zext: false, payload: 0x5678 });
        // Row 3: upper 32 bits zero.
        assert_eq!(last(0x7F00_0000_0000).compress(0x5678), Lip { cnt: 0, zext: true, payload: 0x5678 });
        // Row 4: high matches, low differs.
        assert_eq!(last(0x7F00_1111_0000).compress(0x7F00_1234_5678), Lip { cnt: 1, zext: false, payload: 0x1234_5678 });
        // Row 5: high zero, low differs.
        assert_eq!(last(0x1111_0000).compress(0x1234_5678), Lip { cnt: 1, zext: true, payload: 0x1234_5678 });
        // Row 6: high zero, high does not match.
        assert_eq!(last(0x7F00_1234_0000).compress(0x1234_5678), Lip { cnt: 1, zext: true, payload: 0x1234_5678 });
        // Row 7: high non-zero and different.
        assert_eq!(last(0x7E00_1234_0000).compress(0x7F00_1234_5678), Lip::full(0x7F00_1234_5678));
        // Nothing valid: no match possible.
        assert_eq!(LastLip::default().compress(0x7F00_0000_5678), Lip::full(0x7F00_0000_5678));
        assert_eq!(LastLip::default().compress(0x0000_0012_5678), Lip { cnt: 1, zext: true, payload: 0x12_5678 });
    }

    #[test]
    fn expansion_inverts_compression() {
        let ips = [0u64, 0x5678, 0x1234_5678, 0x7F00_1234_5678, 0xFFFF_8000_0000_1000 & LIP_MASK, 0x7F00_0000_0000];
        for &a in &ips {
            for &b in &ips {
                let mut enc = LastLip::default();
                let mut dec = LastLip::default();
                for ip in [a, b, a] {
                    let lip = enc.compress_update(ip);
                    assert_eq!(dec.expand_update(lip), Ok(ip));
                }
                assert_eq!(enc, dec);
            }
        }
        assert_eq!(LastLip::default().expand(Lip { cnt: 0, zext: false, payload: 1 }), Err(LipError::NoLastLip));
        assert_eq!(LastLip::default().expand(Lip { cnt: 3, zext: false, payload: 1 }), Err(LipError::ReservedCnt));
        assert_eq!(canonical(0xFFFF_8000_0000_1000 & LIP_MASK), 0xFFFF_8000_0000_1000);
    }
}
