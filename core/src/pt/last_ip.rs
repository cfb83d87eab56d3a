//! Last-IP compression of TIP, TIP.PGE, TIP.PGD and FUP payloads
//! (SDM Vol. 3C §33.4.2.2 "Target IP (TIP) Packet", table "Compressed IP Encodings").
//!
//! Encoder and decoder both keep a *last IP*: the IP of the most recent IP packet whose
//! IPBytes field was not 000b. It is reset to 0 at every PSB (and, following libipt, at OVF),
//! so the first IP after a reset must be sent as sext-48 (011b) or full (110b) unless its
//! upper bits happen to be zero.

use super::packet::{IpCompression, IpPayload};

/// Mask of the low `n` bits (`n` < 64).
const fn low_bits(n: u32) -> u64 {
    (1u64 << n) - 1
}

/// Sign-extend bit 47 of `v` into bits 63:48 (IPBytes 011b).
pub fn sign_extend_48(v: u64) -> u64 {
    (((v << 16) as i64) >> 16) as u64
}

/// True when `ip` is the sign extension of its bit 47, i.e. canonical for 48-bit linear
/// addresses and representable as sext-48.
pub fn is_sext48(ip: u64) -> bool {
    sign_extend_48(ip) == ip
}

/// The last-IP register of an Intel PT encoder or decoder (SDM §33.4.2.2).
///
/// `Default` is the state after PSB: no last IP, i.e. the value 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LastIp {
    value: u64,
}

impl LastIp {
    /// A last-IP in the reset state (value 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// The current last-IP value (0 after a reset).
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Forget the last IP, as at PSB and OVF (SDM §33.4.2.2, §33.4.2.16, §33.4.2.17).
    pub fn reset(&mut self) {
        self.value = 0;
    }

    /// Whether `c` can carry `ip` against the current last-IP. `Suppressed` never carries an IP.
    pub fn can_represent(&self, ip: u64, c: IpCompression) -> bool {
        let last = self.value;
        match c {
            IpCompression::Suppressed => false,
            IpCompression::Update16 => (ip ^ last) >> 16 == 0,
            IpCompression::Update32 => (ip ^ last) >> 32 == 0,
            IpCompression::Sext48 => is_sext48(ip),
            IpCompression::Update48 => (ip ^ last) >> 48 == 0,
            IpCompression::Full => true,
        }
    }

    /// The smallest encoding of `ip` (without updating last-IP): update-16, update-32,
    /// sext-48, update-48, full, in that order of preference.
    pub fn best_compression(&self, ip: u64) -> IpCompression {
        [
            IpCompression::Update16,
            IpCompression::Update32,
            IpCompression::Sext48,
            IpCompression::Update48,
        ]
        .into_iter()
        .find(|&c| self.can_represent(ip, c))
        .unwrap_or(IpCompression::Full)
    }

    /// Compress `ip` with the smallest encoding and make it the new last IP.
    pub fn compress(&mut self, ip: u64) -> IpPayload {
        let c = self.best_compression(ip);
        self.value = ip;
        IpPayload {
            compression: c,
            payload: payload_bits(ip, c),
        }
    }

    /// Compress `ip` with the forced encoding `c`.
    ///
    /// Returns `None` (last-IP unchanged) when `c` cannot represent `ip`. `Suppressed`
    /// always succeeds, yields [`IpPayload::SUPPRESSED`] and leaves last-IP unchanged,
    /// exactly as a suppressed packet does on the wire.
    pub fn compress_with(&mut self, ip: u64, c: IpCompression) -> Option<IpPayload> {
        if c == IpCompression::Suppressed {
            return Some(IpPayload::SUPPRESSED);
        }
        if !self.can_represent(ip, c) {
            return None;
        }
        self.value = ip;
        Some(IpPayload {
            compression: c,
            payload: payload_bits(ip, c),
        })
    }

    /// The IP `p` denotes against the current last-IP, without updating it.
    /// `None` for a suppressed IP. Payload bits above the payload width are ignored.
    pub fn peek(&self, p: IpPayload) -> Option<u64> {
        let last = self.value;
        let ip = match p.compression {
            IpCompression::Suppressed => return None,
            IpCompression::Update16 => (last & !low_bits(16)) | (p.payload & low_bits(16)),
            IpCompression::Update32 => (last & !low_bits(32)) | (p.payload & low_bits(32)),
            IpCompression::Sext48 => sign_extend_48(p.payload),
            IpCompression::Update48 => (last & !low_bits(48)) | (p.payload & low_bits(48)),
            IpCompression::Full => p.payload,
        };
        Some(ip)
    }

    /// Reconstruct the IP of a received payload and make it the new last IP.
    /// `None` for a suppressed IP (IPBytes 000b), which leaves last-IP unchanged.
    pub fn decompress(&mut self, p: IpPayload) -> Option<u64> {
        let ip = self.peek(p)?;
        self.value = ip;
        Some(ip)
    }
}

/// The payload field for `ip` under compression `c` (only the transmitted bits).
fn payload_bits(ip: u64, c: IpCompression) -> u64 {
    match c.payload_len() {
        8 => ip,
        n => ip & low_bits(8 * n as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_page_after_0x401234_compresses_to_update16() {
        let mut l = LastIp::new();
        l.compress(0x401234);
        let p = l.compress(0x401000);
        assert_eq!(
            p,
            IpPayload {
                compression: IpCompression::Update16,
                payload: 0x1000
            }
        );
        assert_eq!(l.value(), 0x401000);
    }

    #[test]
    fn first_user_ip_after_reset_is_sext48() {
        let mut l = LastIp::new();
        let p = l.compress(0x7fff_1234_5678);
        assert_eq!(p.compression, IpCompression::Sext48);
        assert_eq!(p.payload, 0x7fff_1234_5678);
    }

    #[test]
    fn first_kernel_ip_after_reset_is_sext48() {
        let mut l = LastIp::new();
        let p = l.compress(0xffff_ffff_8100_0000);
        assert_eq!(
            p,
            IpPayload {
                compression: IpCompression::Sext48,
                payload: 0xffff_8100_0000
            }
        );
        let mut d = LastIp::new();
        assert_eq!(d.decompress(p), Some(0xffff_ffff_8100_0000));
    }

    #[test]
    fn non_canonical_ip_uses_full() {
        let mut l = LastIp::new();
        l.compress(0x7fff_0000_0000);
        let p = l.compress(0x1234_8000_0000_0000);
        assert_eq!(p.compression, IpCompression::Full);
    }

    #[test]
    fn non_canonical_ip_sharing_bits_63_48_uses_update48() {
        let mut l = LastIp::new();
        l.compress(0x1234_0000_0000_0000);
        assert_eq!(
            l.compress(0x1234_8000_0000_0000).compression,
            IpCompression::Update48
        );
    }

    #[test]
    fn low_address_after_reset_is_update16() {
        // bits 63:16 are zero, like the reset last-IP.
        let mut l = LastIp::new();
        assert_eq!(l.compress(0x1234).compression, IpCompression::Update16);
        assert_eq!(l.compress(0x1234_5678).compression, IpCompression::Update32);
    }

    #[test]
    fn suppressed_payload_leaves_last_ip_unchanged() {
        let mut l = LastIp::new();
        l.compress(0x401000);
        assert_eq!(l.decompress(IpPayload::SUPPRESSED), None);
        assert_eq!(l.value(), 0x401000);
        assert_eq!(
            l.compress_with(0x999, IpCompression::Suppressed),
            Some(IpPayload::SUPPRESSED)
        );
        assert_eq!(l.value(), 0x401000);
    }

    #[test]
    fn forced_compression_refuses_unrepresentable_ip() {
        let mut l = LastIp::new();
        l.compress(0x401000);
        assert_eq!(
            l.compress_with(0x7f00_0000_1000, IpCompression::Update16),
            None
        );
        assert_eq!(l.value(), 0x401000);
        assert_eq!(
            l.compress_with(0x1234_8000_0000_0000, IpCompression::Sext48),
            None
        );
        let p = l.compress_with(0x402000, IpCompression::Full).unwrap();
        assert_eq!(
            p,
            IpPayload {
                compression: IpCompression::Full,
                payload: 0x402000
            }
        );
        assert_eq!(l.value(), 0x402000);
    }

    #[test]
    fn reset_returns_to_zero() {
        let mut l = LastIp::new();
        l.compress(0xffff_ffff_8100_0000);
        l.reset();
        assert_eq!(l.value(), 0);
        assert_eq!(
            l.decompress(IpPayload {
                compression: IpCompression::Update16,
                payload: 0xbeef
            }),
            Some(0xbeef)
        );
    }

    #[test]
    fn every_forced_compression_round_trips() {
        let ips = [
            0u64,
            0x401000,
            0x7fff_1234_5678,
            0xffff_ffff_8100_0000,
            0x1234_8000_0000_0000,
            u64::MAX,
        ];
        let lasts = [
            0u64,
            0x401234,
            0x7fff_0000_0000,
            0xffff_ffff_8000_0000,
            0x1234_0000_0000_0000,
        ];
        let forms = [
            IpCompression::Update16,
            IpCompression::Update32,
            IpCompression::Sext48,
            IpCompression::Update48,
            IpCompression::Full,
        ];
        for &last in &lasts {
            for &ip in &ips {
                for &c in &forms {
                    let mut enc = LastIp { value: last };
                    let mut dec = LastIp { value: last };
                    if let Some(p) = enc.compress_with(ip, c) {
                        assert_eq!(
                            dec.decompress(p),
                            Some(ip),
                            "last {last:#x} ip {ip:#x} {c:?}"
                        );
                    } else {
                        assert!(!LastIp { value: last }.can_represent(ip, c));
                    }
                }
            }
        }
    }
}
