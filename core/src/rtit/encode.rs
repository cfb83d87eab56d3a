//! RTIT packet encoder: [`Packet`] values to wire bytes (RTIT Programming Reference v1.05 §4.1
//! Figure 2, §4.2). Multi-byte fields are little-endian (LIP[7:0] first, CR3[7:0] first, Big
//! Time Counter 0 first).
//!
//! [`try_encode`] rejects values that do not fit their wire fields; [`encode`] is the infallible
//! runtime entry point (it `debug_assert`s validity and otherwise truncates fields).

use super::packet::{Lip, Packet};
use std::fmt;

/// Header bytes and masks (Figure 2).
pub mod opcode {
    /// TNT: bit 7 = 0; the leading 1 in bits 6:1 marks how many results follow it.
    pub const TNT_MASK: u8 = 0x80;
    /// FUP/TIP: bits 7:6 = 10b.
    pub const FUP_TIP: u8 = 0x80;
    /// Mask of bits 7:6.
    pub const CLASS_MASK: u8 = 0xC0;
    /// Event field 110b: the Target IP Packet.
    pub const TIP_EVENT: u8 = 0b110;
    /// Zext bit of a FUP/TIP header.
    pub const ZEXT: u8 = 0x04;
    /// PSB header (followed by [`PSB_ZEROS`] zero bytes).
    pub const PSB: u8 = 0xC0;
    /// TraceStop.
    pub const TRACE_STOP: u8 = 0xC1;
    /// PIP header without CR0.PG (bit 0).
    pub const PIP: u8 = 0xC2;
    /// MTC header without RNG (bits 1:0).
    pub const MTC: u8 = 0xC4;
    /// STS header without ACBR[5:2] (bits 3:0).
    pub const STS: u8 = 0xD0;
    /// Number of zero bytes after the PSB header.
    pub const PSB_ZEROS: usize = 8;
}

/// The 9-byte PSB.
pub const PSB_BYTES: [u8; 9] = [0xC0, 0, 0, 0, 0, 0, 0, 0, 0];

/// Longest packet: PSB (9 bytes).
pub const MAX_PACKET_LEN: usize = 9;

/// A packet value that does not fit its wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// TNT with 0 or more than 6 results, or result bits beyond `count`.
    BadTnt { bits: u8, count: u8 },
    /// FUP/TIP with CNT 3 or payload bits beyond the CNT bytes.
    BadLip(Lip),
    /// A field wider than its wire field.
    FieldTooWide { packet: &'static str, field: &'static str },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BadTnt { bits, count } => write!(f, "TNT with {count} results and bits {bits:#x}"),
            EncodeError::BadLip(l) => write!(f, "LIP payload {:#x} does not fit CNT {}", l.payload, l.cnt),
            EncodeError::FieldTooWide { packet, field } => write!(f, "{packet}: {field} is wider than its field"),
        }
    }
}

impl std::error::Error for EncodeError {}

fn check_lip(l: Lip) -> Result<(), EncodeError> {
    if l.cnt > 2 || l.payload & !l.payload_mask() != 0 {
        return Err(EncodeError::BadLip(l));
    }
    Ok(())
}

fn too_wide(packet: &'static str, field: &'static str) -> EncodeError {
    EncodeError::FieldTooWide { packet, field }
}

/// Check that `p` fits its wire format.
pub fn validate(p: &Packet) -> Result<(), EncodeError> {
    match *p {
        Packet::Tnt { bits, count } => {
            if !(1..=6).contains(&count) || u32::from(bits) >> count != 0 {
                return Err(EncodeError::BadTnt { bits, count });
            }
        }
        Packet::Fup { lip, .. } | Packet::Tip(lip) => check_lip(lip)?,
        Packet::Psb | Packet::TraceStop => {}
        Packet::Pip { cr3, .. } => {
            if cr3 >> 40 != 0 {
                return Err(too_wide("PIP", "CR3 beyond bit 39"));
            }
        }
        Packet::Mtc { range, .. } => {
            if range > 3 {
                return Err(too_wide("MTC", "RNG"));
            }
        }
        Packet::Sts { acbr, ecbr, tsc } => {
            if acbr > 0x3F || ecbr > 0x3F {
                return Err(too_wide("STS", "core/bus ratio"));
            }
            if tsc >> 40 != 0 {
                return Err(too_wide("STS", "Big Time Counter"));
            }
        }
        Packet::Cyc { cycles } => {
            if cycles >> 22 != 0 {
                return Err(too_wide("CYC", "RTIT_CNTP[21:0]"));
            }
        }
    }
    Ok(())
}

/// Append the bytes of `p` to `out`, or refuse an invalid value (nothing appended).
pub fn try_encode(p: &Packet, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
    validate(p)?;
    Ok(encode_unchecked(p, out))
}

/// Append the bytes of `p` to `out` and return their number. Never panics in release builds;
/// fields that do not fit are truncated.
pub fn encode(p: &Packet, out: &mut Vec<u8>) -> usize {
    debug_assert_eq!(validate(p), Ok(()), "{p:?}");
    encode_unchecked(p, out)
}

/// Encoded length of `p`.
pub fn encoded_len(p: &Packet) -> usize {
    match *p {
        Packet::Tnt { .. } | Packet::TraceStop => 1,
        Packet::Fup { lip, .. } | Packet::Tip(lip) => 1 + Lip { cnt: lip.cnt.min(2), ..lip }.payload_len(),
        Packet::Psb => PSB_BYTES.len(),
        Packet::Pip { .. } => 6,
        Packet::Mtc { .. } => 2,
        Packet::Sts { .. } => 7,
        Packet::Cyc { cycles } => cyc_len(cycles),
    }
}

/// Bytes of a cycle count packet for `cycles` (§4.2.14): 1 if CNTP[21:6] = 0, 2 if CNTP[21:14]
/// = 0, else 3.
pub fn cyc_len(cycles: u32) -> usize {
    if cycles >> 6 == 0 {
        1
    } else if cycles >> 14 == 0 {
        2
    } else {
        3
    }
}

/// The header byte of a TIP with `lip` (what [`encode`] writes first).
pub(crate) fn tip_header(lip: Lip) -> u8 {
    lip_header(opcode::TIP_EVENT, lip)
}

/// The bytes of a cycle count packet for `cycles` (RTIT_CNTP[21:0], §4.2.14): the first `n`
/// of the three.
pub(crate) fn cyc_bytes(cycles: u32) -> ([u8; 3], usize) {
    let cycles = cycles & 0x3F_FFFF;
    let n = cyc_len(cycles);
    ([(((cycles & 0x3F) as u8) << 2) | n as u8, (cycles >> 6) as u8, (cycles >> 14) as u8], n)
}

fn lip_header(event: u8, lip: Lip) -> u8 {
    opcode::FUP_TIP | (event << 3) | (u8::from(lip.zext) << 2) | lip.cnt.min(2)
}

fn encode_unchecked(p: &Packet, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    match *p {
        Packet::Tnt { bits, count } => {
            let count = count.clamp(1, 6);
            out.push((1u8 << count) | (bits & ((1u8 << count) - 1)));
        }
        Packet::Fup { kind, lip } => {
            out.push(lip_header(kind.event(), lip));
            let n = Lip { cnt: lip.cnt.min(2), ..lip }.payload_len();
            out.extend_from_slice(&lip.payload.to_le_bytes()[..n]);
        }
        Packet::Tip(lip) => {
            out.push(lip_header(opcode::TIP_EVENT, lip));
            let n = Lip { cnt: lip.cnt.min(2), ..lip }.payload_len();
            out.extend_from_slice(&lip.payload.to_le_bytes()[..n]);
        }
        Packet::Psb => out.extend_from_slice(&PSB_BYTES),
        Packet::TraceStop => out.push(opcode::TRACE_STOP),
        Packet::Pip { cr3, pg } => {
            out.push(opcode::PIP | u8::from(pg));
            out.extend_from_slice(&cr3.to_le_bytes()[..5]);
        }
        Packet::Mtc { range, tsc } => {
            out.push(opcode::MTC | (range & 3));
            out.push(tsc);
        }
        Packet::Sts { acbr, ecbr, tsc } => {
            out.push(opcode::STS | ((acbr >> 2) & 0xF));
            out.push(((acbr & 3) << 6) | (ecbr & 0x3F));
            out.extend_from_slice(&tsc.to_le_bytes()[..5]);
        }
        Packet::Cyc { cycles } => {
            let (bytes, n) = cyc_bytes(cycles);
            out.extend_from_slice(&bytes[..n]);
        }
    }
    out.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtit::packet::FupKind;

    fn bytes(p: Packet) -> Vec<u8> {
        let mut v = Vec::new();
        try_encode(&p, &mut v).unwrap();
        assert_eq!(v.len(), encoded_len(&p));
        v
    }

    #[test]
    fn figure_2_headers() {
        assert_eq!(bytes(Packet::Tnt { bits: 0b101101, count: 6 }), [0x6D]);
        assert_eq!(bytes(Packet::Tnt { bits: 1, count: 1 }), [0x03]);
        let l = Lip { cnt: 0, zext: true, payload: 0x1234 };
        assert_eq!(bytes(Packet::Fup { kind: FupKind::Pge, lip: l }), [0x84, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Fup { kind: FupKind::Pgd, lip: l }), [0x8C, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Fup { kind: FupKind::BuffOvf, lip: l }), [0x94, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Fup { kind: FupKind::Pcc, lip: l }), [0x9C, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Tip(l)), [0xB4, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Fup { kind: FupKind::Far, lip: l }), [0xBC, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Tip(Lip::full(0x7F01_0203_0405))), [0xB2, 5, 4, 3, 2, 1, 0x7F]);
        assert_eq!(bytes(Packet::Psb), PSB_BYTES);
        assert_eq!(bytes(Packet::TraceStop), [0xC1]);
        assert_eq!(bytes(Packet::Pip { cr3: 0x12_3456_7000, pg: true }), [0xC3, 0x00, 0x70, 0x56, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Mtc { range: 2, tsc: 0xAB }), [0xC6, 0xAB]);
        assert_eq!(
            bytes(Packet::Sts { acbr: 0b101011, ecbr: 0b010101, tsc: 0x01_0203_0405 }),
            [0xDA, 0xD5, 5, 4, 3, 2, 1]
        );
    }

    #[test]
    fn cycle_count_lengths_follow_ccnt() {
        assert_eq!(bytes(Packet::Cyc { cycles: 0 }), [0x01]);
        assert_eq!(bytes(Packet::Cyc { cycles: 63 }), [0xFD]);
        assert_eq!(bytes(Packet::Cyc { cycles: 64 }), [0x02, 0x01]);
        assert_eq!(bytes(Packet::Cyc { cycles: 0x3FFF }), [0xFE, 0xFF]);
        assert_eq!(bytes(Packet::Cyc { cycles: 0x3F_FFFF }), [0xFF, 0xFF, 0xFF]);
    }

    #[test]
    fn invalid_values_are_refused() {
        let mut v = Vec::new();
        assert!(try_encode(&Packet::Tnt { bits: 0, count: 0 }, &mut v).is_err());
        assert!(try_encode(&Packet::Tnt { bits: 4, count: 2 }, &mut v).is_err());
        assert!(try_encode(&Packet::Tip(Lip { cnt: 0, zext: false, payload: 0x10000 }), &mut v).is_err());
        assert!(try_encode(&Packet::Tip(Lip { cnt: 3, zext: false, payload: 0 }), &mut v).is_err());
        assert!(try_encode(&Packet::Cyc { cycles: 1 << 22 }, &mut v).is_err());
        assert!(try_encode(&Packet::Mtc { range: 4, tsc: 0 }, &mut v).is_err());
        assert!(v.is_empty());
    }
}
