//! RTIT packets as values (RTIT Programming Reference v1.05 §4.1 Figure 2, §4.2).
//!
//! A [`Packet`] carries exactly the fields of its wire format: FUP and TIP carry the *compressed*
//! LIP ([`Lip`]: CNT, Zext and the payload bytes), so encoding and decoding are exact inverses.
//! Turning a full LIP into a payload and back is the job of [`super::lip::LastLip`] (Table 18).
//! The cycle count packet appended in cycle-accurate mode (§4.2.14) is a packet value of its own
//! ([`Packet::Cyc`]), placed right after the packet it belongs to.

/// The Event field, bits 5:3, of a Flow Update Packet (§4.2.4). 110b is the TIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FupKind {
    /// 000b FUP.PGE: PacketEn 0 -> 1 (§4.2.7).
    Pge,
    /// 001b FUP.PGD: PacketEn 1 -> 0 (§4.2.8).
    Pgd,
    /// 010b FUP.BuffOvf: the buffer overflow cleared naturally (§4.2.5).
    BuffOvf,
    /// 011b FUP.PCC: periodic cycle count (§4.2.6).
    Pcc,
    /// 111b FUP.FAR: far transfer (§4.2.9).
    Far,
}

impl FupKind {
    /// The 3-bit Event field.
    pub fn event(self) -> u8 {
        match self {
            FupKind::Pge => 0b000,
            FupKind::Pgd => 0b001,
            FupKind::BuffOvf => 0b010,
            FupKind::Pcc => 0b011,
            FupKind::Far => 0b111,
        }
    }

    /// Inverse of [`FupKind::event`]; 100b and 101b are reserved and 110b is the TIP.
    pub fn from_event(e: u8) -> Option<Self> {
        Some(match e {
            0b000 => FupKind::Pge,
            0b001 => FupKind::Pgd,
            0b010 => FupKind::BuffOvf,
            0b011 => FupKind::Pcc,
            0b111 => FupKind::Far,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            FupKind::Pge => "FUP.PGE",
            FupKind::Pgd => "FUP.PGD",
            FupKind::BuffOvf => "FUP.BuffOvf",
            FupKind::Pcc => "FUP.PCC",
            FupKind::Far => "FUP.FAR",
        }
    }
}

/// The LIP field of a FUP or TIP as it appears on the wire (§4.2.3, Table 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lip {
    /// CNT: 0 = 2 payload bytes, 1 = 4 bytes, 2 = 6 bytes (11b is reserved).
    pub cnt: u8,
    /// Zext: the bytes not sent are zero (1) or those of RTIT_LAST_LIP (0).
    pub zext: bool,
    /// LIP[15:0], LIP[31:0] or LIP[47:0]; only the low `payload_len()` bytes are meaningful.
    pub payload: u64,
}

impl Lip {
    /// Number of payload bytes: 2, 4 or 6.
    pub fn payload_len(self) -> usize {
        2 * (usize::from(self.cnt) + 1)
    }

    /// The payload bits the packet carries.
    pub fn payload_mask(self) -> u64 {
        (1u64 << (8 * self.payload_len())) - 1
    }

    /// 6 uncompressed bytes.
    pub fn full(ip: u64) -> Self {
        Lip { cnt: 2, zext: false, payload: ip & 0xFFFF_FFFF_FFFF }
    }
}

/// One RTIT packet (§4.1 Figure 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    /// TNT (§4.2.2): `count` (1..=6) results; bit `count-1` of `bits` is the oldest branch, bit 0
    /// the youngest; 1 = taken (or a compressed RET). The byte is `(1 << count) | bits`.
    Tnt { bits: u8, count: u8 },
    /// Flow Update Packet (§4.2.4): header `10 Event Zext CNT`.
    Fup { kind: FupKind, lip: Lip },
    /// Target IP Packet (§4.2.3): header `10110 Zext CNT`.
    Tip(Lip),
    /// Packet Stream Boundary (§4.2.1): `C0` + eight `00`.
    Psb,
    /// TraceStop (§4.2.11): `C1`.
    TraceStop,
    /// Paging Information Packet (§4.2.10): `C2 | CR0.PG`, then CR3[39:0] in 5 bytes.
    Pip { cr3: u64, pg: bool },
    /// Mini Time Counter (§4.2.12): `C4 | RNG`, then the 8 watched HW TSC bits.
    Mtc { range: u8, tsc: u8 },
    /// Super Time Sync (§4.2.13): `D0 | ACBR[5:2]`, `ACBR[1:0] ECBR[5:0]`, HW TSC[39:0].
    Sts { acbr: u8, ecbr: u8, tsc: u64 },
    /// Cycle Count Packet (§4.2.14): RTIT_CNTP[21:0] in 1, 2 or 3 bytes (CCNT 01b/10b/11b).
    Cyc { cycles: u32 },
}

impl Packet {
    /// Does cycle-accurate mode append a cycle count packet to this packet (§4.2.15)? Full TNT,
    /// TIP, every FUP, PIP, MTC and STS: yes. Partial TNT, TraceStop, PSB: no.
    ///
    /// §4.2.15 ends with "The partial TNT packet will have a cycle count packet", contradicting the
    /// two sentences before it ("not appended to partial TNT packets ... because it is not
    /// needed"); we follow the list and those two sentences (the partial TNT is always followed
    /// by a packet that carries the count).
    pub fn carries_cycle_count(&self) -> bool {
        match self {
            Packet::Tnt { count, .. } => *count == 6,
            Packet::Fup { .. } | Packet::Tip(_) | Packet::Pip { .. } | Packet::Mtc { .. } | Packet::Sts { .. } => {
                true
            }
            Packet::Psb | Packet::TraceStop | Packet::Cyc { .. } => false,
        }
    }

    /// A short name for dumps and messages.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Tnt { .. } => "TNT",
            Packet::Fup { kind, .. } => kind.name(),
            Packet::Tip(_) => "TIP",
            Packet::Psb => "PSB",
            Packet::TraceStop => "TraceStop",
            Packet::Pip { .. } => "PIP",
            Packet::Mtc { .. } => "MTC",
            Packet::Sts { .. } => "STS",
            Packet::Cyc { .. } => "CYC",
        }
    }
}
