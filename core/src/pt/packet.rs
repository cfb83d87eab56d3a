//! Intel PT packets as values (SDM Vol. 3C §33.4 "Trace Packets and Data Types").
//!
//! A `Packet` carries exactly the fields of its wire format; IP-bearing packets carry the
//! *compressed* payload (`IpPayload`), so that encoding and decoding are exact inverses.
//! Turning a full IP into a payload (and back) is the job of `last_ip::LastIp`.

/// IPBytes field of TIP, TIP.PGE, TIP.PGD and FUP (SDM §33.4.2.2, "Compressed IP").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpCompression {
    /// 000b: no payload, the IP is out of context (suppressed); last-IP unchanged.
    Suppressed,
    /// 001b: 2 payload bytes, IP = last-IP[63:16] : payload[15:0].
    Update16,
    /// 010b: 4 payload bytes, IP = last-IP[63:32] : payload[31:0].
    Update32,
    /// 011b: 6 payload bytes, IP = sign-extend(payload[47:0]).
    Sext48,
    /// 100b: 6 payload bytes, IP = last-IP[63:48] : payload[47:0].
    Update48,
    /// 110b: 8 payload bytes, IP = payload[63:0].
    Full,
}

impl IpCompression {
    /// The 3-bit IPBytes value placed in bits 7:5 of the header byte.
    pub fn ip_bytes(self) -> u8 {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 1,
            IpCompression::Update32 => 2,
            IpCompression::Sext48 => 3,
            IpCompression::Update48 => 4,
            IpCompression::Full => 6,
        }
    }

    /// Inverse of `ip_bytes`; 101b and 111b are reserved.
    pub fn from_ip_bytes(v: u8) -> Option<Self> {
        Some(match v {
            0 => IpCompression::Suppressed,
            1 => IpCompression::Update16,
            2 => IpCompression::Update32,
            3 => IpCompression::Sext48,
            4 => IpCompression::Update48,
            6 => IpCompression::Full,
            _ => return None,
        })
    }

    /// Number of payload bytes following the header byte.
    pub fn payload_len(self) -> usize {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 2,
            IpCompression::Update32 => 4,
            IpCompression::Sext48 | IpCompression::Update48 => 6,
            IpCompression::Full => 8,
        }
    }
}

/// The IP field of an IP packet as it appears on the wire: compression and the raw payload
/// (only the low `payload_len()*8` bits are meaningful).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpPayload {
    pub compression: IpCompression,
    pub payload: u64,
}

impl IpPayload {
    pub const SUPPRESSED: IpPayload = IpPayload { compression: IpCompression::Suppressed, payload: 0 };
}

/// Execution mode reported by MODE.Exec (SDM §33.4.2.8): bit 0 = CS.L & IA32_EFER.LMA, bit 1 = CS.D.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecMode {
    Bit16,
    Bit32,
    Bit64,
}

impl ExecMode {
    /// Derive the mode from the CS descriptor bits the SDM names (CS.L only counts with LMA).
    pub fn from_cs(efer_lma: bool, cs_l: bool, cs_d: bool) -> Self {
        if efer_lma && cs_l {
            ExecMode::Bit64
        } else if cs_d {
            ExecMode::Bit32
        } else {
            ExecMode::Bit16
        }
    }
}

/// One Intel PT packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    /// `00`
    Pad,
    /// `02 82` x 8
    Psb,
    /// `02 23`
    PsbEnd,
    /// `02 F3`
    Ovf,
    /// `02 83`
    TraceStop,
    /// Short TNT: `count` (1..=6) branch results; bit `count-1` of `bits` is the oldest branch,
    /// bit 0 the youngest; 1 = taken (or a compressed RET).
    Tnt { bits: u8, count: u8 },
    /// Long TNT (`02 A3` + 6 bytes): `count` (1..=47) results, same bit order as short TNT.
    TntLong { bits: u64, count: u8 },
    /// TIP: target of an indirect branch, far transfer or uncompressed RET.
    Tip(IpPayload),
    /// TIP.PGE: packet generation enabled; IP of the first instruction traced.
    TipPge(IpPayload),
    /// TIP.PGD: packet generation disabled.
    TipPgd(IpPayload),
    /// FUP: source IP of an asynchronous event or the current IP inside PSB+.
    Fup(IpPayload),
    /// MODE.Exec (`99 0x`); `if_flag` is bit 2 (only with IA32_RTIT_CTL.EventEn).
    ModeExec { mode: ExecMode, if_flag: bool },
    /// MODE.TSX (`99 2x`).
    ModeTsx { in_tx: bool, tx_abort: bool },
    /// PIP (`02 43` + 6 bytes): CR3 with bits 4:0 dropped, and the NR (non-root) bit.
    Pip { cr3: u64, nr: bool },
    /// CBR (`02 03 ratio 00`).
    Cbr { ratio: u8 },
    /// TSC (`19` + 7 bytes): TSC[55:0].
    Tsc { tsc: u64 },
    /// MTC (`59 ctc`): CTC[7:0] = (ART >> MTCFreq) & 0xFF.
    Mtc { ctc: u8 },
    /// TMA (`02 73` ...): CTC[15:0] and the 9-bit fast counter.
    Tma { ctc: u16, fast_counter: u16 },
    /// CYC: cycles since the previous CYC (variable length, at least 1 byte).
    Cyc { value: u64 },
    /// EXSTOP (`02 62`; `02 E2` with IP = 1: a FUP with the IP of the instruction follows).
    /// Power event trace (IA32_RTIT_CTL.PwrEvtEn): execution stopped (C-state entry).
    Exstop { ip: bool },
    /// MWAIT (`02 C2` + 8 bytes): the MWAIT hints (EAX) and extensions (ECX) of an MWAIT that
    /// entered a C-state.
    Mwait { hints: u32, ext: u32 },
    /// PWRE (`02 22` + 2 bytes): the resolved thread C-state and sub-state entered, in MWAIT-hint
    /// encoding (0 = C1, 0xF = C0), and HW (entry initiated by hardware, not by HLT/MWAIT).
    Pwre { state: u8, sub_state: u8, hw: bool },
    /// PWRX (`02 A2` + 5 bytes): back in C0; the core C-state at the wake and the deepest one of
    /// the sleep (MWAIT-hint encoding), and the 4-bit wake reason (bit 0 interrupt, bit 2 store to
    /// the monitored address, bit 3 hardware).
    Pwrx { last: u8, deepest: u8, wake: u8 },
    /// CFE (`02 13` + 2 bytes: IP[7] | Type[4:0], Vector): Event Trace (IA32_RTIT_CTL.EventEn)
    /// control-flow event; IP = 1: a FUP with the event's source IP follows.
    Cfe { ip: bool, kind: u8, vector: u8 },
    /// EVD (`02 53` + Type[4:0] + 8 bytes payload): event data for the CFE that follows
    /// (type 0: the page-fault linear address, CR2).
    Evd { kind: u8, payload: u64 },
}

/// CFE type 1: interrupt, exception, NMI or INT n/INT3/INTO/INT1 (the vector in the packet).
pub const CFE_INTR: u8 = 0x01;
/// CFE type 2: IRET.
pub const CFE_IRET: u8 = 0x02;
/// EVD type 0: CR2 of a page fault.
pub const EVD_CR2: u8 = 0x00;

/// PWRX wake reason bit 0: an external interrupt woke the core.
pub const PWRX_WAKE_INTERRUPT: u8 = 1 << 0;
/// PWRX wake reason bit 2: a store to the address MONITOR armed.
pub const PWRX_WAKE_STORE: u8 = 1 << 2;
/// MWAIT-hint encoding of C1 (EAX[7:4] = C-state - 1): what HLT enters.
pub const CSTATE_C1: u8 = 0;
