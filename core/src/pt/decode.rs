//! Intel PT packet parser (SDM Vol. 3C §33.4.2 "Packet Definitions"), for dumps and tests.
//!
//! Header dispatch on the first byte: even bytes are PAD (`00`), the extended-opcode escape
//! (`02`, second byte selects) or a short TNT; odd bytes with low bits 11b are CYC; otherwise
//! the low five bits select TIP (`0D`), TIP.PGE (`11`), TIP.PGD (`01`), FUP (`1D`) with
//! IPBytes in bits 7:5, or the `19` family: TSC (`19`), MTC (`59`), MODE (`99`).
//!
//! The parser never panics. Well-formed packets that have no [`Packet`] variant (VMCS, MNT,
//! PTW, EXSTOP, MWAIT, PWRE, PWRX, CFE, EVD, TRIG) are reported as
//! [`DecodeErrorKind::Unsupported`] and stepped over; any other error stops the
//! [`PacketDecoder`] until the caller resynchronises with [`PacketDecoder::sync_forward`].

use super::encode::{opcode, PSB_BYTES};
use super::packet::{ExecMode, IpCompression, IpPayload, Packet};
use std::fmt;

/// libipt's limit on the length of a CYC packet.
pub const CYC_MAX_LEN: usize = 15;

/// One decoded packet and where it was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decoded {
    pub offset: usize,
    pub len: usize,
    pub packet: Packet,
}

/// A packet that could not be turned into a [`Packet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeError {
    /// Offset of the first byte of the offending packet.
    pub offset: usize,
    pub kind: DecodeErrorKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// No packet starts with this byte (`ext` is the second byte of a `02 xx` packet).
    UnknownOpcode { opcode: u8, ext: Option<u8> },
    /// The packet runs past the end of the buffer (for CYC `needed` is a lower bound).
    Truncated { needed: usize, available: usize },
    /// TIP/TIP.PGE/TIP.PGD/FUP with IPBytes 101b or 111b.
    ReservedIpBytes { header: u8 },
    /// The opcode is known but the content is invalid.
    BadContent(BadContent),
    /// A well-formed packet of `len` bytes without a [`Packet`] variant; already skipped.
    Unsupported { packet: OtherPacket, len: usize },
}

/// Invalid content of a known packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BadContent {
    /// Long TNT whose 48-bit field is zero.
    TntWithoutStopBit,
    /// Long TNT whose stop bit is bit 0 (no branch results).
    EmptyTnt,
    /// MODE with a leaf other than 000b (Exec) or 001b (TSX).
    ModeLeaf { leaf: u8 },
    /// MODE.Exec with CS.L and CS.D both set.
    ModeExecReserved { byte: u8 },
    /// `02 82` not followed by seven more `02 82`.
    Psb,
    /// CYC longer than [`CYC_MAX_LEN`] bytes or with a value beyond 64 bits.
    CycOverflow,
    /// PTW with a reserved PayloadBytes value.
    PtwPayloadBytes { value: u8 },
}

/// Packets real hardware produces that the [`Packet`] type does not model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OtherPacket {
    Vmcs,
    Mnt,
    Ptw,
    Exstop,
    Mwait,
    Pwre,
    Pwrx,
    Cfe,
    Evd,
    Trig,
}

impl OtherPacket {
    /// Name as ptdump prints it.
    pub fn name(self) -> &'static str {
        match self {
            OtherPacket::Vmcs => "vmcs",
            OtherPacket::Mnt => "mnt",
            OtherPacket::Ptw => "ptw",
            OtherPacket::Exstop => "exstop",
            OtherPacket::Mwait => "mwait",
            OtherPacket::Pwre => "pwre",
            OtherPacket::Pwrx => "pwrx",
            OtherPacket::Cfe => "cfe",
            OtherPacket::Evd => "evd",
            OtherPacket::Trig => "trig",
        }
    }
}

impl DecodeErrorKind {
    /// Bytes to step over to continue decoding without a resync, if known and safe.
    pub fn skip_len(&self) -> Option<usize> {
        match *self {
            DecodeErrorKind::Unsupported { len, .. } => Some(len),
            _ => None,
        }
    }
}

impl fmt::Display for BadContent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BadContent::TntWithoutStopBit => write!(f, "tnt.64 without stop bit"),
            BadContent::EmptyTnt => write!(f, "tnt.64 without branch results"),
            BadContent::ModeLeaf { leaf } => write!(f, "unknown mode leaf {leaf:x}"),
            BadContent::ModeExecReserved { byte } => {
                write!(f, "mode.exec with cs.l and cs.d set ({byte:02x})")
            }
            BadContent::Psb => write!(f, "broken psb pattern"),
            BadContent::CycOverflow => write!(f, "cyc value too long"),
            BadContent::PtwPayloadBytes { value } => {
                write!(f, "ptw with reserved payload bytes {value}")
            }
        }
    }
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeErrorKind::UnknownOpcode { opcode, ext: None } => {
                write!(f, "unknown opcode {opcode:02x}")
            }
            DecodeErrorKind::UnknownOpcode {
                opcode,
                ext: Some(ext),
            } => {
                write!(f, "unknown opcode {opcode:02x} {ext:02x}")
            }
            DecodeErrorKind::Truncated { needed, available } => {
                write!(f, "truncated packet ({available} of {needed} bytes)")
            }
            DecodeErrorKind::ReservedIpBytes { header } => {
                write!(f, "reserved ipbytes {:x} in {header:02x}", header >> 5)
            }
            DecodeErrorKind::BadContent(b) => write!(f, "bad packet: {b}"),
            DecodeErrorKind::Unsupported { packet, len } => {
                write!(f, "unsupported packet {} ({len} bytes)", packet.name())
            }
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}: {}", self.offset, self.kind)
    }
}

impl std::error::Error for DecodeError {}

/// Decode the packet starting at `offset` in `bytes`.
pub fn decode_packet(bytes: &[u8], offset: usize) -> Result<Decoded, DecodeError> {
    let rest = bytes.get(offset..).unwrap_or(&[]);
    match parse(rest) {
        Ok((len, packet)) => Ok(Decoded {
            offset,
            len,
            packet,
        }),
        Err(kind) => Err(DecodeError { offset, kind }),
    }
}

/// Offset of the first complete PSB at or after `from`.
pub fn find_psb(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    rest.windows(PSB_BYTES.len())
        .position(|w| w == PSB_BYTES)
        .map(|p| from + p)
}

/// Iterator over the packets of a trace buffer.
///
/// After an error other than [`DecodeErrorKind::Unsupported`] it yields `None` until
/// [`sync_forward`](Self::sync_forward) is called.
#[derive(Clone, Debug)]
pub struct PacketDecoder<'a> {
    bytes: &'a [u8],
    offset: usize,
    halted: bool,
}

impl<'a> PacketDecoder<'a> {
    /// A decoder positioned at offset 0 (no initial sync).
    pub fn new(bytes: &'a [u8]) -> Self {
        PacketDecoder {
            bytes,
            offset: 0,
            halted: false,
        }
    }

    /// Offset of the next packet (or of the packet that failed, while halted).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// True after an error until the next [`sync_forward`](Self::sync_forward).
    pub fn is_halted(&self) -> bool {
        self.halted
    }

    /// Move to the next PSB at or after the current offset and resume decoding there.
    /// Returns its offset, or `None` (decoder at end of buffer) if there is none.
    pub fn sync_forward(&mut self) -> Option<usize> {
        self.halted = false;
        match find_psb(self.bytes, self.offset) {
            Some(p) => {
                self.offset = p;
                Some(p)
            }
            None => {
                self.offset = self.bytes.len();
                None
            }
        }
    }
}

impl Iterator for PacketDecoder<'_> {
    type Item = Result<Decoded, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.halted || self.offset >= self.bytes.len() {
            return None;
        }
        let r = decode_packet(self.bytes, self.offset);
        match &r {
            Ok(d) => self.offset += d.len,
            Err(e) => match e.kind.skip_len() {
                Some(len) => self.offset += len,
                None => self.halted = true,
            },
        }
        Some(r)
    }
}

type Parsed = Result<(usize, Packet), DecodeErrorKind>;

/// `rest[..n]`, or `Truncated`.
fn take(rest: &[u8], n: usize) -> Result<&[u8], DecodeErrorKind> {
    rest.get(..n).ok_or(DecodeErrorKind::Truncated {
        needed: n,
        available: rest.len(),
    })
}

/// Little-endian value of up to eight bytes.
fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |v, &x| (v << 8) | u64::from(x))
}

fn unsupported(rest: &[u8], packet: OtherPacket, len: usize) -> Parsed {
    take(rest, len)?;
    Err(DecodeErrorKind::Unsupported { packet, len })
}

fn parse(rest: &[u8]) -> Parsed {
    let Some(&b0) = rest.first() else {
        return Err(DecodeErrorKind::Truncated {
            needed: 1,
            available: 0,
        });
    };
    if b0 & 1 == 0 {
        return match b0 {
            opcode::PAD => Ok((1, Packet::Pad)),
            opcode::EXT => parse_ext(rest),
            _ => Ok((1, parse_tnt_short(b0))),
        };
    }
    if b0 & opcode::CYC_MASK == opcode::CYC_MASK {
        return parse_cyc(rest);
    }
    match b0 & opcode::IP_KIND_MASK {
        opcode::TIP => parse_ip(rest, Packet::Tip),
        opcode::TIP_PGE => parse_ip(rest, Packet::TipPge),
        opcode::TIP_PGD => parse_ip(rest, Packet::TipPgd),
        opcode::FUP => parse_ip(rest, Packet::Fup),
        _ => match b0 {
            // SDM §33.4.2.11 TSC
            opcode::TSC => Ok((
                8,
                Packet::Tsc {
                    tsc: le(&take(rest, 8)?[1..]),
                },
            )),
            // SDM §33.4.2.12 MTC
            opcode::MTC => Ok((
                2,
                Packet::Mtc {
                    ctc: take(rest, 2)?[1],
                },
            )),
            opcode::MODE => parse_mode(take(rest, 2)?[1]).map(|p| (2, p)),
            opcode::TRIG => {
                let icnt = take(rest, 2)?[1] & 0x40 != 0;
                unsupported(rest, OtherPacket::Trig, if icnt { 5 } else { 3 })
            }
            _ => Err(DecodeErrorKind::UnknownOpcode {
                opcode: b0,
                ext: None,
            }),
        },
    }
}

/// SDM §33.4.2.1 short TNT: the highest set bit (2..=7) is the stop bit, results below it
/// down to bit 1.
fn parse_tnt_short(b0: u8) -> Packet {
    let stop = 7 - b0.leading_zeros() as u8;
    let count = stop - 1;
    Packet::Tnt {
        bits: (b0 >> 1) & ((1u8 << count) - 1),
        count,
    }
}

/// SDM §33.4.2.2 (and .4, .5, .6): IPBytes in bits 7:5, then the payload.
fn parse_ip(rest: &[u8], make: fn(IpPayload) -> Packet) -> Parsed {
    let header = rest[0];
    let compression = IpCompression::from_ip_bytes(header >> 5)
        .ok_or(DecodeErrorKind::ReservedIpBytes { header })?;
    let len = 1 + compression.payload_len();
    let payload = le(&take(rest, len)?[1..]);
    Ok((
        len,
        make(IpPayload {
            compression,
            payload,
        }),
    ))
}

/// SDM §33.4.2.8 MODE: leaf in bits 7:5 of the payload byte.
fn parse_mode(b: u8) -> Result<Packet, DecodeErrorKind> {
    match b >> 5 {
        opcode::MODE_LEAF_EXEC => {
            let mode = match b & 0b11 {
                0b00 => ExecMode::Bit16,
                0b01 => ExecMode::Bit64,
                0b10 => ExecMode::Bit32,
                _ => {
                    return Err(DecodeErrorKind::BadContent(BadContent::ModeExecReserved {
                        byte: b,
                    }))
                }
            };
            Ok(Packet::ModeExec {
                mode,
                if_flag: b & 0b100 != 0,
            })
        }
        opcode::MODE_LEAF_TSX => Ok(Packet::ModeTsx {
            in_tx: b & 1 != 0,
            tx_abort: b & 2 != 0,
        }),
        leaf => Err(DecodeErrorKind::BadContent(BadContent::ModeLeaf { leaf })),
    }
}

/// SDM §33.4.2.14 CYC: 5 value bits in byte 0, 7 in each following byte, Exp bits chain.
fn parse_cyc(rest: &[u8]) -> Parsed {
    let b0 = rest[0];
    let mut value = u64::from(b0 >> 3);
    let mut more = b0 & 0b100 != 0;
    let mut len = 1;
    let mut shift = 5u32;
    while more {
        if len >= CYC_MAX_LEN {
            return Err(DecodeErrorKind::BadContent(BadContent::CycOverflow));
        }
        let b = *rest.get(len).ok_or(DecodeErrorKind::Truncated {
            needed: len + 1,
            available: rest.len(),
        })?;
        let chunk = u64::from(b >> 1);
        let kept = chunk.checked_shl(shift).unwrap_or(0);
        if kept.checked_shr(shift).unwrap_or(0) != chunk {
            return Err(DecodeErrorKind::BadContent(BadContent::CycOverflow));
        }
        value |= kept;
        shift += 7;
        len += 1;
        more = b & 1 != 0;
    }
    Ok((len, Packet::Cyc { value }))
}

fn parse_ext(rest: &[u8]) -> Parsed {
    use opcode::ext;
    let b1 = take(rest, 2)?[1];
    match b1 {
        // SDM §33.4.2.17 PSB
        ext::PSB => {
            let n = rest.len().min(PSB_BYTES.len());
            if rest[..n] != PSB_BYTES[..n] {
                return Err(DecodeErrorKind::BadContent(BadContent::Psb));
            }
            take(rest, PSB_BYTES.len())?;
            Ok((PSB_BYTES.len(), Packet::Psb))
        }
        ext::PSBEND => Ok((2, Packet::PsbEnd)),
        ext::OVF => Ok((2, Packet::Ovf)),
        ext::STOP => Ok((2, Packet::TraceStop)),
        // SDM §33.4.2.1 long TNT
        ext::TNT_64 => {
            let field = le(&take(rest, 8)?[2..]);
            if field == 0 {
                return Err(DecodeErrorKind::BadContent(BadContent::TntWithoutStopBit));
            }
            let count = (63 - field.leading_zeros()) as u8;
            if count == 0 {
                return Err(DecodeErrorKind::BadContent(BadContent::EmptyTnt));
            }
            Ok((
                8,
                Packet::TntLong {
                    bits: field & ((1u64 << count) - 1),
                    count,
                },
            ))
        }
        // SDM §33.4.2.7 PIP: CR3[51:5] << 1 | NR
        ext::PIP => {
            let field = le(&take(rest, 8)?[2..]);
            Ok((
                8,
                Packet::Pip {
                    cr3: (field >> 1) << 5,
                    nr: field & 1 != 0,
                },
            ))
        }
        // SDM §33.4.2.10 CBR
        ext::CBR => Ok((
            4,
            Packet::Cbr {
                ratio: take(rest, 4)?[2],
            },
        )),
        // SDM §33.4.2.13 TMA
        ext::TMA => {
            let b = take(rest, 7)?;
            let ctc = u16::from_le_bytes([b[2], b[3]]);
            let fast_counter = u16::from(b[5]) | (u16::from(b[6] & 1) << 8);
            Ok((7, Packet::Tma { ctc, fast_counter }))
        }
        ext::VMCS => unsupported(rest, OtherPacket::Vmcs, 7),
        ext::EXT2 => match take(rest, 3)?[2] {
            ext::MNT_EXT2 => unsupported(rest, OtherPacket::Mnt, 11),
            _ => Err(DecodeErrorKind::UnknownOpcode {
                opcode: opcode::EXT,
                ext: Some(b1),
            }),
        },
        // SDM §33.4.2 power event trace packets (EXSTOP, MWAIT, PWRE, PWRX).
        ext::EXSTOP | ext::EXSTOP_IP => Ok((2, Packet::Exstop { ip: b1 == ext::EXSTOP_IP })),
        ext::MWAIT => {
            let b = take(rest, 10)?;
            let hints = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let ext = u32::from_le_bytes([b[6], b[7], b[8], b[9]]);
            Ok((10, Packet::Mwait { hints, ext }))
        }
        ext::PWRE => {
            let b = take(rest, 4)?;
            Ok((4, Packet::Pwre { state: b[3] >> 4, sub_state: b[3] & 0xF, hw: b[2] & 0x8 != 0 }))
        }
        ext::PWRX => {
            let b = take(rest, 7)?;
            Ok((7, Packet::Pwrx { last: b[2] >> 4, deepest: b[2] & 0xF, wake: b[3] & 0xF }))
        }
        // Event Trace: CFE (IP[7], type[4:0], vector) and EVD (type[4:0], 8-byte payload).
        ext::CFE => {
            let b = take(rest, 4)?;
            Ok((4, Packet::Cfe { ip: b[2] & 0x80 != 0, kind: b[2] & 0x1F, vector: b[3] }))
        }
        ext::EVD => {
            let b = take(rest, 11)?;
            Ok((11, Packet::Evd { kind: b[2] & 0x1F, payload: le(&b[3..11]) }))
        }
        _ if b1 & ext::PTW_MASK == ext::PTW => match (b1 >> 5) & 0b11 {
            0 => unsupported(rest, OtherPacket::Ptw, 6),
            1 => unsupported(rest, OtherPacket::Ptw, 10),
            value => Err(DecodeErrorKind::BadContent(BadContent::PtwPayloadBytes {
                value,
            })),
        },
        _ => Err(DecodeErrorKind::UnknownOpcode {
            opcode: opcode::EXT,
            ext: Some(b1),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Result<Decoded, DecodeErrorKind> {
        decode_packet(bytes, 0).map_err(|e| e.kind)
    }

    #[test]
    fn short_tnt_byte_0x80_is_six_not_taken() {
        assert_eq!(
            one(&[0x80]).unwrap().packet,
            Packet::Tnt { bits: 0, count: 6 }
        );
        assert_eq!(
            one(&[0x06]).unwrap().packet,
            Packet::Tnt { bits: 1, count: 1 }
        );
    }

    #[test]
    fn long_tnt_without_stop_bit_is_bad_content() {
        assert_eq!(
            one(&[0x02, 0xa3, 0, 0, 0, 0, 0, 0]),
            Err(DecodeErrorKind::BadContent(BadContent::TntWithoutStopBit))
        );
        assert_eq!(
            one(&[0x02, 0xa3, 1, 0, 0, 0, 0, 0]),
            Err(DecodeErrorKind::BadContent(BadContent::EmptyTnt))
        );
    }

    #[test]
    fn reserved_ipbytes_are_reported() {
        assert_eq!(
            one(&[0xad, 0, 0]),
            Err(DecodeErrorKind::ReservedIpBytes { header: 0xad })
        );
        assert_eq!(
            one(&[0xfd]),
            Err(DecodeErrorKind::ReservedIpBytes { header: 0xfd })
        );
    }

    #[test]
    fn unknown_mode_leaf_and_reserved_exec_bits_are_bad_content() {
        assert_eq!(
            one(&[0x99, 0x40]),
            Err(DecodeErrorKind::BadContent(BadContent::ModeLeaf {
                leaf: 2
            }))
        );
        assert_eq!(
            one(&[0x99, 0x03]),
            Err(DecodeErrorKind::BadContent(BadContent::ModeExecReserved {
                byte: 3
            }))
        );
    }

    #[test]
    fn truncated_tip_reports_needed_bytes() {
        assert_eq!(
            one(&[0xcd, 1, 2]),
            Err(DecodeErrorKind::Truncated {
                needed: 9,
                available: 3
            })
        );
        assert_eq!(
            one(&[0x02]),
            Err(DecodeErrorKind::Truncated {
                needed: 2,
                available: 1
            })
        );
        assert_eq!(
            one(&[0x07]),
            Err(DecodeErrorKind::Truncated {
                needed: 2,
                available: 1
            })
        );
    }

    #[test]
    fn partial_psb_is_truncated_and_broken_psb_is_bad() {
        assert_eq!(
            one(&PSB_BYTES[..10]),
            Err(DecodeErrorKind::Truncated {
                needed: 16,
                available: 10
            })
        );
        let mut b = PSB_BYTES;
        b[9] = 0x83;
        assert_eq!(one(&b), Err(DecodeErrorKind::BadContent(BadContent::Psb)));
    }

    #[test]
    fn unknown_opcodes_are_reported() {
        assert_eq!(
            one(&[0x05]),
            Err(DecodeErrorKind::UnknownOpcode {
                opcode: 0x05,
                ext: None
            })
        );
        assert_eq!(
            one(&[0x39, 0]),
            Err(DecodeErrorKind::UnknownOpcode {
                opcode: 0x39,
                ext: None
            })
        );
        assert_eq!(
            one(&[0x02, 0x04]),
            Err(DecodeErrorKind::UnknownOpcode {
                opcode: 0x02,
                ext: Some(0x04)
            })
        );
        assert_eq!(
            one(&[0x02, 0xc3, 0x00]),
            Err(DecodeErrorKind::UnknownOpcode {
                opcode: 0x02,
                ext: Some(0xc3)
            })
        );
    }

    #[test]
    fn cyc_value_beyond_64_bits_is_rejected() {
        let mut b = vec![0xff; 9];
        b.push(0x10); // bits 64.. set
        assert_eq!(
            one(&b),
            Err(DecodeErrorKind::BadContent(BadContent::CycOverflow))
        );
        // 07 followed by fifteen 01 bytes: longer than CYC_MAX_LEN.
        let mut long = vec![0x07u8];
        long.extend_from_slice(&[0x01; 15]);
        assert_eq!(
            one(&long),
            Err(DecodeErrorKind::BadContent(BadContent::CycOverflow))
        );
    }

    #[test]
    fn decoder_halts_after_error_until_sync_forward() {
        let mut bytes = vec![0x00, 0x05, 0x00];
        bytes.extend_from_slice(&PSB_BYTES);
        bytes.push(0x00);
        let mut d = PacketDecoder::new(&bytes);
        assert_eq!(d.next().unwrap().unwrap().packet, Packet::Pad);
        let e = d.next().unwrap().unwrap_err();
        assert_eq!(e.offset, 1);
        assert!(d.is_halted());
        assert!(d.next().is_none());
        assert_eq!(d.sync_forward(), Some(3));
        assert_eq!(
            d.next().unwrap().unwrap(),
            Decoded {
                offset: 3,
                len: 16,
                packet: Packet::Psb
            }
        );
        assert_eq!(d.next().unwrap().unwrap().packet, Packet::Pad);
        assert!(d.next().is_none());
        assert_eq!(d.sync_forward(), None);
    }

    #[test]
    fn unsupported_packets_are_skipped_without_resync() {
        let bytes = [0x02, 0xc8, 1, 2, 3, 4, 5, 0x00];
        let mut d = PacketDecoder::new(&bytes);
        let e = d.next().unwrap().unwrap_err();
        assert_eq!(
            e.kind,
            DecodeErrorKind::Unsupported {
                packet: OtherPacket::Vmcs,
                len: 7
            }
        );
        assert_eq!(
            d.next().unwrap().unwrap(),
            Decoded {
                offset: 7,
                len: 1,
                packet: Packet::Pad
            }
        );
    }
}
