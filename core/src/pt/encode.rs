//! Intel PT packet encoder: [`Packet`] values to wire bytes (SDM Vol. 3C §33.4.2 "Packet
//! Definitions"). All multi-byte fields are little-endian.
//!
//! Section numbers follow the chapter-33 editions of Vol. 3C (the 2016 edition numbers the
//! chapter 36 with the same subsections): .1 TNT, .2 TIP (with IP compression and RET
//! compression), .4 TIP.PGE, .5 TIP.PGD, .6 FUP, .7 PIP, .8 MODE, .9 TraceStop, .10 CBR,
//! .11 TSC, .12 MTC, .13 TMA, .14 CYC, .15 VMCS, .16 OVF, .17 PSB, .18 PSBEND, .19 MNT, .20 PAD.
//!
//! [`try_encode`] rejects values that do not fit their wire field; [`encode`] is the
//! infallible entry point for runtime paths: it `debug_assert`s validity and otherwise
//! falls back to [`encode_lossy`], which never panics.

use super::packet::{ExecMode, IpPayload, Packet};
use std::fmt;

/// Opcode bytes (first byte, and second byte of extended `02 xx` packets).
pub mod opcode {
    /// PAD (SDM §33.4.2.20).
    pub const PAD: u8 = 0x00;
    /// Extended-opcode escape: the second byte selects the packet.
    pub const EXT: u8 = 0x02;
    /// TIP header low 5 bits (SDM §33.4.2.2).
    pub const TIP: u8 = 0x0d;
    /// TIP.PGE header low 5 bits (SDM §33.4.2.4).
    pub const TIP_PGE: u8 = 0x11;
    /// TIP.PGD header low 5 bits (SDM §33.4.2.5).
    pub const TIP_PGD: u8 = 0x01;
    /// FUP header low 5 bits (SDM §33.4.2.6).
    pub const FUP: u8 = 0x1d;
    /// Mask selecting the IP packet kind from the header byte; bits 7:5 are IPBytes.
    pub const IP_KIND_MASK: u8 = 0x1f;
    /// TSC (SDM §33.4.2.11).
    pub const TSC: u8 = 0x19;
    /// MTC (SDM §33.4.2.12).
    pub const MTC: u8 = 0x59;
    /// MODE (SDM §33.4.2.8).
    pub const MODE: u8 = 0x99;
    /// TRIG (later libipt; not in the SDM editions used here).
    pub const TRIG: u8 = 0xd9;
    /// CYC: low two bits 11b (SDM §33.4.2.14).
    pub const CYC_MASK: u8 = 0x03;

    /// Second bytes of extended packets.
    pub mod ext {
        pub const PSB: u8 = 0x82;
        pub const PSBEND: u8 = 0x23;
        pub const OVF: u8 = 0xf3;
        pub const STOP: u8 = 0x83;
        pub const TNT_64: u8 = 0xa3;
        pub const PIP: u8 = 0x43;
        pub const CBR: u8 = 0x03;
        pub const TMA: u8 = 0x73;
        pub const VMCS: u8 = 0xc8;
        /// Second escape; `02 C3 88` is MNT.
        pub const EXT2: u8 = 0xc3;
        pub const MNT_EXT2: u8 = 0x88;
        pub const EXSTOP: u8 = 0x62;
        pub const EXSTOP_IP: u8 = 0xe2;
        pub const MWAIT: u8 = 0xc2;
        pub const PWRE: u8 = 0x22;
        pub const PWRX: u8 = 0xa2;
        /// PTW: low 5 bits 0x12; bits 6:5 PayloadBytes, bit 7 IP.
        pub const PTW: u8 = 0x12;
        pub const PTW_MASK: u8 = 0x1f;
        pub const CFE: u8 = 0x13;
        pub const EVD: u8 = 0x53;
    }

    /// MODE leaf values (bits 7:5 of the MODE payload byte).
    pub const MODE_LEAF_EXEC: u8 = 0;
    pub const MODE_LEAF_TSX: u8 = 1;
}

/// The 16-byte PSB (SDM §33.4.2.17): `02 82` repeated eight times.
pub const PSB_BYTES: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

/// Longest packet [`encode`] can produce in one go (PSB).
pub const MAX_PACKET_LEN: usize = 16;

/// Most branch results in a short TNT (SDM §33.4.2.1).
pub const TNT_SHORT_MAX: u8 = 6;
/// Most branch results in a long TNT (48-bit field including the stop bit).
pub const TNT_LONG_MAX: u8 = 47;

/// Why a [`Packet`] value has no exact wire encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// TNT with zero or too many branch results.
    TntCount { count: u8, max: u8 },
    /// A field value wider than its wire field.
    FieldOverflow {
        field: &'static str,
        value: u64,
        bits: u32,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::TntCount { count, max } => {
                write!(f, "TNT with {count} branch results (must be 1..={max})")
            }
            EncodeError::FieldOverflow { field, value, bits } => {
                write!(f, "{field} value {value:#x} does not fit in {bits} bits")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

fn fits(field: &'static str, value: u64, bits: u32) -> Result<(), EncodeError> {
    if value >> bits == 0 {
        Ok(())
    } else {
        Err(EncodeError::FieldOverflow { field, value, bits })
    }
}

/// Check that `p` has an exact encoding.
///
/// Rules: TNT count 1..=6 (short) or 1..=47 (long); TSC < 2^56; TMA fast counter < 2^9;
/// PIP CR3 < 2^52. Not errors (silently dropped, as the wire format defines): TNT `bits`
/// above `count`, IP payload bits above the payload width, PIP CR3 bits 4:0.
pub fn validate(p: &Packet) -> Result<(), EncodeError> {
    match *p {
        Packet::Tnt { count, .. } if count == 0 || count > TNT_SHORT_MAX => {
            Err(EncodeError::TntCount {
                count,
                max: TNT_SHORT_MAX,
            })
        }
        Packet::TntLong { count, .. } if count == 0 || count > TNT_LONG_MAX => {
            Err(EncodeError::TntCount {
                count,
                max: TNT_LONG_MAX,
            })
        }
        Packet::Tsc { tsc } => fits("TSC", tsc, 56),
        Packet::Tma { fast_counter, .. } => fits("TMA fast counter", u64::from(fast_counter), 9),
        Packet::Pip { cr3, .. } => fits("PIP CR3", cr3, 52),
        _ => Ok(()),
    }
}

/// Append the exact encoding of `p` to `out`; on error nothing is written.
pub fn try_encode(p: &Packet, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    validate(p)?;
    encode_lossy(p, out);
    Ok(())
}

/// Append the encoding of `p` to `out`.
///
/// Invalid values (see [`validate`]) are a bug in the caller: they trip a `debug_assert`,
/// and in release builds are encoded by [`encode_lossy`] (never panics).
pub fn encode(p: &Packet, out: &mut Vec<u8>) {
    let r = validate(p);
    debug_assert!(
        r.is_ok(),
        "invalid Intel PT packet {p:?}: {}",
        r.unwrap_err()
    );
    encode_lossy(p, out);
}

/// Append an encoding of `p` to `out`, repairing invalid values instead of failing:
/// over-wide fields are truncated to their wire width; a TNT whose count does not fit its
/// form is emitted as a sequence of short TNTs (oldest results first, nothing for count 0,
/// count capped at the width of `bits`). Identical to [`try_encode`] for valid packets.
pub fn encode_lossy(p: &Packet, out: &mut Vec<u8>) {
    match *p {
        // SDM §33.4.2.20 PAD: 00
        Packet::Pad => out.push(opcode::PAD),
        // SDM §33.4.2.17 PSB: 02 82 x 8
        Packet::Psb => out.extend_from_slice(&PSB_BYTES),
        // SDM §33.4.2.18 PSBEND: 02 23
        Packet::PsbEnd => out.extend_from_slice(&[opcode::EXT, opcode::ext::PSBEND]),
        // SDM §33.4.2.16 OVF: 02 F3
        Packet::Ovf => out.extend_from_slice(&[opcode::EXT, opcode::ext::OVF]),
        // SDM §33.4.2.9 TraceStop: 02 83
        Packet::TraceStop => out.extend_from_slice(&[opcode::EXT, opcode::ext::STOP]),
        Packet::Tnt { bits, count } => {
            if (1..=TNT_SHORT_MAX).contains(&count) {
                push_tnt_short(u64::from(bits), count, out);
            } else {
                push_tnt_split(u64::from(bits), count.min(8), out);
            }
        }
        Packet::TntLong { bits, count } => {
            if (1..=TNT_LONG_MAX).contains(&count) {
                push_tnt_long(bits, count, out);
            } else {
                push_tnt_split(bits, count.min(64), out);
            }
        }
        // SDM §33.4.2.2 TIP, §33.4.2.4 TIP.PGE, §33.4.2.5 TIP.PGD, §33.4.2.6 FUP:
        // IPBytes[7:5] | opcode[4:0], then 0/2/4/6/6/8 payload bytes.
        Packet::Tip(ip) => push_ip(opcode::TIP, ip, out),
        Packet::TipPge(ip) => push_ip(opcode::TIP_PGE, ip, out),
        Packet::TipPgd(ip) => push_ip(opcode::TIP_PGD, ip, out),
        Packet::Fup(ip) => push_ip(opcode::FUP, ip, out),
        // SDM §33.4.2.8 MODE.Exec: 99, leaf 000b[7:5], IF[2], CS.D[1], CS.L&LMA[0]
        Packet::ModeExec { mode, if_flag } => {
            let bits = match mode {
                ExecMode::Bit16 => 0b00,
                ExecMode::Bit32 => 0b10,
                ExecMode::Bit64 => 0b01,
            };
            let b = (opcode::MODE_LEAF_EXEC << 5) | (u8::from(if_flag) << 2) | bits;
            out.extend_from_slice(&[opcode::MODE, b]);
        }
        // SDM §33.4.2.8 MODE.TSX: 99, leaf 001b[7:5], TXAbort[1], InTX[0]
        Packet::ModeTsx { in_tx, tx_abort } => {
            let b = (opcode::MODE_LEAF_TSX << 5) | (u8::from(tx_abort) << 1) | u8::from(in_tx);
            out.extend_from_slice(&[opcode::MODE, b]);
        }
        // SDM §33.4.2.7 PIP: 02 43, 48-bit field = CR3[51:5] << 1 | NR
        Packet::Pip { cr3, nr } => {
            out.extend_from_slice(&[opcode::EXT, opcode::ext::PIP]);
            let field = (((cr3 >> 5) & low_bits(47)) << 1) | u64::from(nr);
            push_le(field, 6, out);
        }
        // SDM §33.4.2.10 CBR: 02 03 ratio 00
        Packet::Cbr { ratio } => out.extend_from_slice(&[opcode::EXT, opcode::ext::CBR, ratio, 0]),
        // SDM §33.4.2.11 TSC: 19, TSC[55:0]
        Packet::Tsc { tsc } => {
            out.push(opcode::TSC);
            push_le(tsc, 7, out);
        }
        // SDM §33.4.2.12 MTC: 59 CTC[7:0]
        Packet::Mtc { ctc } => out.extend_from_slice(&[opcode::MTC, ctc]),
        // SDM §33.4.2.13 TMA: 02 73 CTC[7:0] CTC[15:8] 00 FC[7:0] FC[8]
        Packet::Tma { ctc, fast_counter } => {
            let [c0, c1] = ctc.to_le_bytes();
            let [f0, f1] = fast_counter.to_le_bytes();
            out.extend_from_slice(&[opcode::EXT, opcode::ext::TMA, c0, c1, 0, f0, f1 & 1]);
        }
        // SDM §33.4.2.14 CYC
        Packet::Cyc { value } => push_cyc(value, out),
        Packet::Exstop { ip } => {
            out.extend_from_slice(&[opcode::EXT, if ip { opcode::ext::EXSTOP_IP } else { opcode::ext::EXSTOP }])
        }
        Packet::Mwait { hints, ext } => {
            out.extend_from_slice(&[opcode::EXT, opcode::ext::MWAIT]);
            out.extend_from_slice(&hints.to_le_bytes());
            out.extend_from_slice(&ext.to_le_bytes());
        }
        // Payload[15:12] state, [11:8] sub-state, [3] HW (libipt pt_opcodes.h pt_pl_pwre_*; the
        // reference notes record that another source puts HW at bit 7: the model never sets it).
        Packet::Pwre { state, sub_state, hw } => out.extend_from_slice(&[
            opcode::EXT,
            opcode::ext::PWRE,
            u8::from(hw) << 3,
            ((state & 0xF) << 4) | (sub_state & 0xF),
        ]),
        // Payload[3:0] deepest, [7:4] last core C-state, [11:8] wake reason, [39:12] reserved.
        // libipt pt_opcodes.h: pt_pl_cfe_type 0x1f, pt_pl_cfe_ip 0x80; EVD type then 8 bytes.
        Packet::Cfe { ip, kind, vector } => {
            out.extend_from_slice(&[opcode::EXT, opcode::ext::CFE, (u8::from(ip) << 7) | (kind & 0x1F), vector])
        }
        Packet::Evd { kind, payload } => {
            out.extend_from_slice(&[opcode::EXT, opcode::ext::EVD, kind & 0x1F]);
            out.extend_from_slice(&payload.to_le_bytes());
        }
        Packet::Pwrx { last, deepest, wake } => out.extend_from_slice(&[
            opcode::EXT,
            opcode::ext::PWRX,
            ((last & 0xF) << 4) | (deepest & 0xF),
            wake & 0xF,
            0,
            0,
            0,
        ]),
    }
}

/// Number of bytes [`encode`] (or [`encode_lossy`]) appends for `p`.
pub fn encoded_len(p: &Packet) -> usize {
    match *p {
        Packet::Pad => 1,
        Packet::Psb => 16,
        Packet::PsbEnd | Packet::Ovf | Packet::TraceStop => 2,
        Packet::Tnt { count, .. } if (1..=TNT_SHORT_MAX).contains(&count) => 1,
        Packet::Tnt { count, .. } => split_len(count.min(8)),
        Packet::TntLong { count, .. } if (1..=TNT_LONG_MAX).contains(&count) => 8,
        Packet::TntLong { count, .. } => split_len(count.min(64)),
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
            1 + ip.compression.payload_len()
        }
        Packet::ModeExec { .. } | Packet::ModeTsx { .. } | Packet::Mtc { .. } => 2,
        Packet::Pip { .. } | Packet::Tsc { .. } => 8,
        Packet::Cbr { .. } => 4,
        Packet::Tma { .. } => 7,
        Packet::Cyc { value } => cyc_len(value),
        Packet::Exstop { .. } => 2,
        Packet::Mwait { .. } => 10,
        Packet::Pwre { .. } => 4,
        Packet::Pwrx { .. } => 7,
        Packet::Cfe { .. } => 4,
        Packet::Evd { .. } => 11,
    }
}

const fn low_bits(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

fn push_le(v: u64, n: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(&v.to_le_bytes()[..n]);
}

/// SDM §33.4.2.1 short TNT: results in bits count..1 (oldest highest), stop bit at count+1,
/// bit 0 = 0.
#[inline]
pub(crate) fn push_tnt_short(bits: u64, count: u8, out: &mut Vec<u8>) {
    let payload = (bits & low_bits(u32::from(count))) | (1 << count);
    out.push((payload << 1) as u8);
}

/// SDM §33.4.2.1 long TNT: 02 A3, 48-bit field with results below the stop bit at `count`.
fn push_tnt_long(bits: u64, count: u8, out: &mut Vec<u8>) {
    out.extend_from_slice(&[opcode::EXT, opcode::ext::TNT_64]);
    let payload = (bits & low_bits(u32::from(count))) | (1 << count);
    push_le(payload, 6, out);
}

/// Emit `count` results (bit count-1 oldest) as short TNTs of up to six, oldest first.
fn push_tnt_split(bits: u64, count: u8, out: &mut Vec<u8>) {
    let mut left = count;
    while left > 0 {
        let n = left.min(TNT_SHORT_MAX);
        let chunk = (bits >> (left - n)) & low_bits(u32::from(n));
        push_tnt_short(chunk, n, out);
        left -= n;
    }
}

fn split_len(count: u8) -> usize {
    usize::from(count).div_ceil(usize::from(TNT_SHORT_MAX))
}

pub(crate) fn push_ip(kind: u8, ip: IpPayload, out: &mut Vec<u8>) {
    out.push((ip.compression.ip_bytes() << 5) | kind);
    push_le(ip.payload, ip.compression.payload_len(), out);
}

/// SDM §33.4.2.14 CYC: byte 0 = value[4:0] << 3 | Exp << 2 | 11b; each following byte
/// = next 7 value bits << 1 | Exp; Exp = 1 means another byte follows. Minimal length.
fn push_cyc(value: u64, out: &mut Vec<u8>) {
    let mut rest = value >> 5;
    let more = u8::from(rest != 0);
    out.push((((value & 0x1f) as u8) << 3) | (more << 2) | opcode::CYC_MASK);
    while rest != 0 {
        let chunk = (rest & 0x7f) as u8;
        rest >>= 7;
        out.push((chunk << 1) | u8::from(rest != 0));
    }
}

fn cyc_len(value: u64) -> usize {
    let significant = 64 - value.leading_zeros() as usize;
    1 + significant.saturating_sub(5).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::packet::IpCompression;

    fn bytes(p: Packet) -> Vec<u8> {
        let mut v = Vec::new();
        try_encode(&p, &mut v).unwrap();
        assert_eq!(v.len(), encoded_len(&p), "{p:?}");
        v
    }

    #[test]
    fn short_tnt_stop_bit_sits_above_the_oldest_result() {
        // one not-taken, one taken, six not-taken, six taken (perf's vectors)
        assert_eq!(bytes(Packet::Tnt { bits: 0, count: 1 }), [0x04]);
        assert_eq!(bytes(Packet::Tnt { bits: 1, count: 1 }), [0x06]);
        assert_eq!(bytes(Packet::Tnt { bits: 0, count: 6 }), [0x80]);
        assert_eq!(
            bytes(Packet::Tnt {
                bits: 0x3f,
                count: 6
            }),
            [0xfe]
        );
        // taken, not-taken, taken (oldest first) = 101b
        assert_eq!(
            bytes(Packet::Tnt {
                bits: 0b101,
                count: 3
            }),
            [0b0001_1010]
        );
    }

    #[test]
    fn tnt_bits_above_count_are_ignored() {
        assert_eq!(
            bytes(Packet::Tnt {
                bits: 0xff,
                count: 2
            }),
            [0b1110]
        );
    }

    #[test]
    fn invalid_tnt_count_is_an_error_and_writes_nothing() {
        let mut v = Vec::new();
        assert_eq!(
            try_encode(&Packet::Tnt { bits: 0, count: 0 }, &mut v),
            Err(EncodeError::TntCount { count: 0, max: 6 })
        );
        assert_eq!(
            try_encode(&Packet::TntLong { bits: 0, count: 48 }, &mut v),
            Err(EncodeError::TntCount { count: 48, max: 47 })
        );
        assert!(v.is_empty());
    }

    #[test]
    fn lossy_tnt_splits_into_short_tnts_oldest_first() {
        let mut v = Vec::new();
        // 7 results: oldest six taken, youngest not taken.
        encode_lossy(
            &Packet::Tnt {
                bits: 0b111_1110,
                count: 7,
            },
            &mut v,
        );
        assert_eq!(v, [0xfe, 0x04]);
        assert_eq!(
            encoded_len(&Packet::Tnt {
                bits: 0b111_1110,
                count: 7
            }),
            2
        );
        v.clear();
        encode_lossy(&Packet::Tnt { bits: 0, count: 0 }, &mut v);
        assert!(v.is_empty());
        assert_eq!(encoded_len(&Packet::Tnt { bits: 0, count: 0 }), 0);
        v.clear();
        let p = Packet::TntLong {
            bits: u64::MAX,
            count: 200,
        };
        encode_lossy(&p, &mut v);
        assert_eq!(v.len(), encoded_len(&p));
        assert_eq!(v.len(), 11); // 64 results in chunks of 6
    }

    #[test]
    fn lossy_truncates_over_wide_fields() {
        let mut v = Vec::new();
        encode_lossy(&Packet::Tsc { tsc: u64::MAX }, &mut v);
        assert_eq!(v, [0x19, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        v.clear();
        encode_lossy(
            &Packet::Tma {
                ctc: 0,
                fast_counter: 0xffff,
            },
            &mut v,
        );
        assert_eq!(v, [0x02, 0x73, 0, 0, 0, 0xff, 0x01]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invalid Intel PT packet")]
    fn encode_debug_asserts_on_invalid_packets() {
        encode(&Packet::Tnt { bits: 0, count: 0 }, &mut Vec::new());
    }

    #[test]
    fn long_tnt_matches_perf_vectors() {
        assert_eq!(
            bytes(Packet::TntLong { bits: 0, count: 1 }),
            [0x02, 0xa3, 0x02, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Packet::TntLong { bits: 1, count: 1 }),
            [0x02, 0xa3, 0x03, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(Packet::TntLong { bits: 0, count: 47 }),
            [0x02, 0xa3, 0, 0, 0, 0, 0, 0x80]
        );
        assert_eq!(
            bytes(Packet::TntLong {
                bits: (1 << 47) - 1,
                count: 47
            }),
            [0x02, 0xa3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn ip_packets_put_ipbytes_in_bits_7_5() {
        let p = |c, payload| IpPayload {
            compression: c,
            payload,
        };
        assert_eq!(bytes(Packet::Tip(IpPayload::SUPPRESSED)), [0x0d]);
        assert_eq!(
            bytes(Packet::Tip(p(IpCompression::Update16, 0x201))),
            [0x2d, 1, 2]
        );
        assert_eq!(
            bytes(Packet::TipPge(p(IpCompression::Update32, 0x4030201))),
            [0x51, 1, 2, 3, 4]
        );
        assert_eq!(
            bytes(Packet::TipPgd(p(IpCompression::Sext48, 0x60504030201))),
            [0x61, 1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            bytes(Packet::Fup(p(IpCompression::Update48, 0x60504030201))),
            [0x9d, 1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            bytes(Packet::Fup(p(IpCompression::Full, 0x807060504030201))),
            [0xdd, 1, 2, 3, 4, 5, 6, 7, 8]
        );
    }

    #[test]
    fn cyc_uses_the_minimal_variable_length_form() {
        assert_eq!(bytes(Packet::Cyc { value: 0 }), [0x03]);
        assert_eq!(bytes(Packet::Cyc { value: 0x1f }), [0xfb]);
        assert_eq!(bytes(Packet::Cyc { value: 0x20 }), [0x07, 0x02]);
        assert_eq!(bytes(Packet::Cyc { value: 0xfff }), [0xff, 0xfe]);
        assert_eq!(bytes(Packet::Cyc { value: 0x1000 }), [0x07, 0x01, 0x02]);
        assert_eq!(
            bytes(Packet::Cyc { value: u64::MAX }),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0e]
        );
    }

    #[test]
    fn power_event_packets_have_libipts_layout() {
        // libipt pt_opcodes.h: EXSTOP 02 62 / 02 E2 (IP), MWAIT 02 C2 hints ext, PWRE 02 22
        // (payload [15:12] state, [11:8] sub-state, [3] HW), PWRX 02 A2 ([3:0] deepest,
        // [7:4] last, [11:8] wake reason).
        assert_eq!(bytes(Packet::Exstop { ip: false }), [0x02, 0x62]);
        assert_eq!(bytes(Packet::Exstop { ip: true }), [0x02, 0xE2]);
        assert_eq!(bytes(Packet::Mwait { hints: 0x50, ext: 1 }), [0x02, 0xC2, 0x50, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(bytes(Packet::Pwre { state: 0, sub_state: 0, hw: false }), [0x02, 0x22, 0, 0]);
        assert_eq!(bytes(Packet::Pwre { state: 5, sub_state: 1, hw: true }), [0x02, 0x22, 0x08, 0x51]);
        assert_eq!(bytes(Packet::Pwrx { last: 0, deepest: 0, wake: 1 }), [0x02, 0xA2, 0, 1, 0, 0, 0]);
        assert_eq!(bytes(Packet::Pwrx { last: 5, deepest: 2, wake: 4 }), [0x02, 0xA2, 0x52, 4, 0, 0, 0]);
    }

    #[test]
    fn event_trace_packets_have_libipts_layout() {
        // CFE: 02 13, IP[7] | type[4:0], vector. EVD: 02 53, type, payload[63:0].
        assert_eq!(bytes(Packet::Cfe { ip: true, kind: 1, vector: 0x40 }), [0x02, 0x13, 0x81, 0x40]);
        assert_eq!(bytes(Packet::Cfe { ip: false, kind: 2, vector: 0 }), [0x02, 0x13, 0x02, 0x00]);
        assert_eq!(
            bytes(Packet::Evd { kind: 0, payload: 0x8000_1234 }),
            [0x02, 0x53, 0x00, 0x34, 0x12, 0x00, 0x80, 0, 0, 0, 0]
        );
    }
}
