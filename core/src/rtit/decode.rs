//! RTIT decoder: packet parser, packet printer and instruction-flow reconstruction
//! (RTIT Programming Reference v1.05 §4). No public RTIT decoder exists; this one follows the
//! packet definitions of §4.2 and the generation rules of Table 19 / §4.3.2.
//!
//! Header dispatch (Figure 2): bit 7 = 0 is a TNT; `10` FUP/TIP with Event in bits 5:3 (110b TIP,
//! 100b/101b reserved), Zext in bit 2 and CNT in bits 1:0 (11b reserved); `C0` PSB (+8 zero
//! bytes), `C1` TraceStop, `C2`/`C3` PIP, `C4`-`C7` MTC, `C8`-`CF` reserved, `D0`-`DF` STS,
//! `E0`-`FF` reserved. In cycle-accurate mode a cycle count packet follows every full TNT, TIP,
//! FUP, PIP, MTC and STS (§4.2.15); its bytes cannot be told apart from a header, so the parser
//! must be told whether RTIT_CTL[Cycle_Acc] was set.
//!
//! Flow reconstruction walks the code from each FUP.PGE (or FUP.BuffOvf), taking one TNT result
//! per conditional branch and per compressed RET, one TIP per indirect branch or uncompressed RET,
//! FUP.FAR + TIP per far transfer, and stops at FUP.PGD: after the instruction whose NLIP the
//! FUP.PGD carries, or before the instruction at the FUP's address (asynchronous events report the
//! resume IP or the faulting instruction, Table 1).
//!
//! TraceStop carries no IP. "The TNT buffer is not drained on a TraceStop action ... the RTIT
//! analyzer may need to manually read out the contents of RTIT_TNT_BUFF" (§4.2.11): the tracer's
//! `finish` writes that content as a TNT packet after the TraceStop, and the decoder takes a TNT
//! right after a TraceStop (no PSB between) as the results that preceded it. Where execution
//! stopped is the analyzer's knowledge of its TraceStop ranges ([`FlowOptions::stop_ranges`]):
//! the walker follows the instructions that need no packet up to the first one the TraceStop
//! event fires at (a taken transfer into a range, or the range base reached sequentially,
//! §3.3.5). Without ranges it stops where the last packet left it.

use std::fmt::{self, Write as _};

use super::errata::Errata;
use super::lip::{canonical, LastLip, LipError, LIP_MASK};
use super::packet::{FupKind, Lip, Packet};
use crate::insn_class::{classify, BranchKind};

/// One decoded packet and where it was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub offset: usize,
    pub len: usize,
    pub packet: Packet,
}

/// Why the bytes at `offset` are not a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub kind: DecodeErrorKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// A reserved header (C8H-CFH, E0H-FFH).
    ReservedHeader { byte: u8 },
    /// TNT byte 00H or 01H: no branch results.
    EmptyTnt { byte: u8 },
    /// FUP with Event 100b/101b, or FUP/TIP with CNT 11b.
    ReservedField { byte: u8 },
    /// Cycle count packet with CCNT 00b.
    ReservedCcnt { byte: u8 },
    /// `C0` not followed by eight zero bytes.
    BadPsb,
    /// The packet runs past the end of the bytes.
    Truncated { needed: usize, available: usize },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {:#x}: ", self.offset)?;
        match self.kind {
            DecodeErrorKind::ReservedHeader { byte } => write!(f, "reserved header {byte:#04x}"),
            DecodeErrorKind::EmptyTnt { byte } => write!(f, "TNT byte {byte:#04x} without results"),
            DecodeErrorKind::ReservedField { byte } => write!(f, "FUP/TIP header {byte:#04x} with a reserved field"),
            DecodeErrorKind::ReservedCcnt { byte } => write!(f, "cycle count byte {byte:#04x} with CCNT 00b"),
            DecodeErrorKind::BadPsb => f.write_str("C0 not followed by eight zero bytes"),
            DecodeErrorKind::Truncated { needed, available } => {
                write!(f, "packet needs {needed} bytes, {available} left")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |v, &x| (v << 8) | u64::from(x))
}

fn need(rest: &[u8], n: usize) -> Result<&[u8], DecodeErrorKind> {
    rest.get(..n).ok_or(DecodeErrorKind::Truncated { needed: n, available: rest.len() })
}

/// Parse one packet header and body at the start of `rest` (not a cycle count packet).
pub fn parse_packet(rest: &[u8]) -> Result<(Packet, usize), DecodeErrorKind> {
    let b0 = *need(rest, 1)?.first().unwrap_or(&0);
    match b0 {
        0x00..=0x7F => {
            if b0 < 2 {
                return Err(DecodeErrorKind::EmptyTnt { byte: b0 });
            }
            let count = 7 - b0.leading_zeros() as u8;
            Ok((Packet::Tnt { bits: b0 & ((1 << count) - 1), count }, 1))
        }
        0x80..=0xBF => {
            let event = (b0 >> 3) & 7;
            let cnt = b0 & 3;
            if cnt == 3 || event == 0b100 || event == 0b101 {
                return Err(DecodeErrorKind::ReservedField { byte: b0 });
            }
            let lip = Lip { cnt, zext: b0 & 4 != 0, payload: 0 };
            let n = lip.payload_len();
            let body = need(&rest[1..], n).map_err(|_| DecodeErrorKind::Truncated { needed: 1 + n, available: rest.len() })?;
            let lip = Lip { payload: le(body), ..lip };
            let p = match FupKind::from_event(event) {
                Some(kind) => Packet::Fup { kind, lip },
                None => Packet::Tip(lip),
            };
            Ok((p, 1 + n))
        }
        0xC0 => {
            let b = need(rest, 9)?;
            if b[1..].iter().any(|&x| x != 0) {
                return Err(DecodeErrorKind::BadPsb);
            }
            Ok((Packet::Psb, 9))
        }
        0xC1 => Ok((Packet::TraceStop, 1)),
        0xC2 | 0xC3 => {
            let b = need(rest, 6)?;
            Ok((Packet::Pip { cr3: le(&b[1..6]), pg: b0 & 1 != 0 }, 6))
        }
        0xC4..=0xC7 => {
            let b = need(rest, 2)?;
            Ok((Packet::Mtc { range: b0 & 3, tsc: b[1] }, 2))
        }
        0xD0..=0xDF => {
            let b = need(rest, 7)?;
            let acbr = ((b0 & 0xF) << 2) | (b[1] >> 6);
            Ok((Packet::Sts { acbr, ecbr: b[1] & 0x3F, tsc: le(&b[2..7]) }, 7))
        }
        _ => Err(DecodeErrorKind::ReservedHeader { byte: b0 }),
    }
}

/// Parse a cycle count packet (§4.2.14) at the start of `rest`.
pub fn parse_cyc(rest: &[u8]) -> Result<(Packet, usize), DecodeErrorKind> {
    let b0 = *need(rest, 1)?.first().unwrap_or(&0);
    let n = usize::from(b0 & 3);
    if n == 0 {
        return Err(DecodeErrorKind::ReservedCcnt { byte: b0 });
    }
    let b = need(rest, n)?;
    let mut cycles = u32::from(b0 >> 2);
    if n >= 2 {
        cycles |= u32::from(b[1]) << 6;
    }
    if n == 3 {
        cycles |= u32::from(b[2]) << 14;
    }
    Ok((Packet::Cyc { cycles }, n))
}

/// Offset of the next PSB at or after `from` (to synchronise into a stream).
pub fn find_psb(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 9 <= bytes.len() {
        if bytes[i] == 0xC0 && bytes[i + 1..i + 9].iter().all(|&b| b == 0) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Iterator over the packets of a byte stream. Stops after the first error.
pub struct PacketParser<'a> {
    bytes: &'a [u8],
    pos: usize,
    cycle_acc: bool,
    cyc_next: bool,
    halted: bool,
}

impl<'a> PacketParser<'a> {
    /// Parse `bytes`; `cycle_acc` is RTIT_CTL[Cycle_Acc] of the trace.
    pub fn new(bytes: &'a [u8], cycle_acc: bool) -> Self {
        PacketParser { bytes, pos: 0, cycle_acc, cyc_next: false, halted: false }
    }

    /// Offset of the next byte to parse.
    pub fn offset(&self) -> usize {
        self.pos
    }
}

impl Iterator for PacketParser<'_> {
    type Item = Result<Decoded, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.halted || self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        let parsed = if self.cyc_next { parse_cyc(rest) } else { parse_packet(rest) };
        match parsed {
            Ok((packet, len)) => {
                let d = Decoded { offset: self.pos, len, packet };
                self.pos += len;
                self.cyc_next = self.cycle_acc && packet.carries_cycle_count();
                Some(Ok(d))
            }
            Err(kind) => {
                self.halted = true;
                Some(Err(DecodeError { offset: self.pos, kind }))
            }
        }
    }
}

/// Parse a whole stream.
pub fn parse_all(bytes: &[u8], cycle_acc: bool) -> Result<Vec<Decoded>, DecodeError> {
    PacketParser::new(bytes, cycle_acc).collect()
}

// ---------------------------------------------------------------------------------------------
// Printer
// ---------------------------------------------------------------------------------------------

/// Print one line per packet: offset, bytes, name and fields; FUP/TIP also with the full LIP
/// (RTIT_LAST_LIP tracked as the hardware does). With `errata.e6_cyc_minus_one` the printed
/// cycle counts get the E6 workaround (+1 when non-zero).
pub fn dump(bytes: &[u8], cycle_acc: bool, errata: Errata) -> String {
    let mut out = String::new();
    let mut last = LastLip::default();
    for d in PacketParser::new(bytes, cycle_acc) {
        let d = match d {
            Ok(d) => d,
            Err(e) => {
                let _ = writeln!(out, "error: {e}");
                break;
            }
        };
        let raw: Vec<String> = bytes[d.offset..d.offset + d.len].iter().map(|b| format!("{b:02x}")).collect();
        let _ = write!(out, "{:08x}  {:<27} ", d.offset, raw.join(" "));
        let _ = match d.packet {
            Packet::Tnt { bits, count } => {
                let s: String = (0..count).rev().map(|k| if bits >> k & 1 != 0 { '!' } else { '.' }).collect();
                writeln!(out, "TNT {s}")
            }
            Packet::Fup { kind, lip } => lip_line(&mut out, kind.name(), lip, &mut last, kind == FupKind::BuffOvf),
            Packet::Tip(lip) => lip_line(&mut out, "TIP", lip, &mut last, false),
            Packet::Psb => {
                last = LastLip::default();
                writeln!(out, "PSB")
            }
            Packet::TraceStop => writeln!(out, "TraceStop"),
            Packet::Pip { cr3, pg } => writeln!(out, "PIP cr3={cr3:#x} pg={}", u8::from(pg)),
            Packet::Mtc { range, tsc } => writeln!(out, "MTC rng={range} tsc={tsc:#04x}"),
            Packet::Sts { acbr, ecbr, tsc } => writeln!(out, "STS acbr={acbr} ecbr={ecbr} tsc={tsc:#x}"),
            Packet::Cyc { cycles } => {
                let c = if errata.e6_cyc_minus_one && cycles != 0 { cycles + 1 } else { cycles };
                writeln!(out, "CYC {c}")
            }
        };
    }
    out
}

/// One FUP/TIP line of [`dump`]; FUP.BuffOvf clears RTIT_LAST_LIP and does not update it.
fn lip_line(out: &mut String, name: &str, lip: Lip, last: &mut LastLip, buffovf: bool) -> fmt::Result {
    let full = if buffovf {
        *last = LastLip::default();
        last.expand(lip)
    } else {
        last.expand_update(lip)
    };
    match full {
        Ok(ip) => writeln!(out, "{name} {:#x} (cnt={} zext={})", canonical(ip), lip.cnt, u8::from(lip.zext)),
        Err(e) => writeln!(out, "{name} ? payload {:#x} ({e:?})", lip.payload),
    }
}

// ---------------------------------------------------------------------------------------------
// Flow reconstruction
// ---------------------------------------------------------------------------------------------

/// Instruction bytes of the traced program.
pub trait CodeImage {
    /// Copy up to `buf.len()` bytes at `ip` into `buf`; return how many are available.
    fn read_code(&self, ip: u64, buf: &mut [u8]) -> usize;
    /// `read_code` for the instruction with index `insn_index` in the flow (the number of
    /// instructions reconstructed before it): a code image with versions (code.img, issue 19)
    /// gives the bytes valid at that point.
    fn read_code_at(&self, ip: u64, buf: &mut [u8], insn_index: u64) -> usize {
        let _ = insn_index;
        self.read_code(ip, buf)
    }
}

impl<F: Fn(u64, &mut [u8]) -> usize> CodeImage for F {
    fn read_code(&self, ip: u64, buf: &mut [u8]) -> usize {
        self(ip, buf)
    }
}

/// Options of the flow decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowOptions {
    /// RTIT_CTL[Cycle_Acc] of the trace.
    pub cycle_acc: bool,
    /// 16, 32 or 64.
    pub bitness: u32,
    /// Errata workarounds to apply (E1, E2, E5; E6/E7 only concern timing).
    pub errata: Errata,
    /// Most instructions walked without consuming a packet before giving up (a loop without
    /// branches that need packets cannot be resolved).
    pub max_walk: usize,
    /// The ranges RTIT_EVENTS[TraceStop_Event_ID] selects, as (base, limit) = (RTIT_LIPn,
    /// RTIT_LIP(n+2)), the limit exclusive (§3.3.5): where a TraceStop happened.
    pub stop_ranges: [Option<(u64, u64)>; 2],
    /// Ranges [start, end] (inclusive) of 16-bit code, decoded as such whatever `bitness` says:
    /// RTIT has no MODE packet (seed 002 §4), so the mode of each piece of code is sideband the
    /// user supplies (issue 12).
    pub code16: [Option<(u64, u64)>; 4],
    /// Ranges of 32-bit code (compatibility mode under a 64-bit `bitness`).
    pub code32: [Option<(u64, u64)>; 4],
    /// RTIT_EVENTS selects an address range for Filter_Event_ID or TraceStop_Event_ID, so a
    /// taken near branch can end packet generation (Table 19 rows 3, 4, 8, 9, ...: FUP.PGD with
    /// the branch's NLIP). Without such ranges a FUP.PGD whose IP is the NLIP of a taken branch
    /// is an asynchronous event at that IP reached later (Table 1: the resume IP), e.g. an
    /// interrupt after `jz L; ...; jmp back` where `back` is the Jcc's NLIP: the format alone
    /// cannot tell the two apart, the configuration can.
    pub range_exits: bool,
}

impl Default for FlowOptions {
    fn default() -> Self {
        FlowOptions {
            cycle_acc: false,
            bitness: 64,
            errata: Errata::default(),
            max_walk: 1 << 20,
            stop_ranges: [None; 2],
            code16: [None; 4],
            code32: [None; 4],
            range_exits: true,
        }
    }
}

impl FlowOptions {
    /// The bitness the instruction at `ip` is decoded with.
    pub fn bitness_at(&self, ip: u64) -> u32 {
        if self.code16.iter().flatten().any(|&(a, b)| (a..=b).contains(&ip)) {
            16
        } else if self.code32.iter().flatten().any(|&(a, b)| (a..=b).contains(&ip)) {
            32
        } else {
            self.bitness
        }
    }
}

/// What the reconstructed flow contains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowEvent {
    /// FUP.PGE: tracing (re)starts at `ip`.
    Enable { ip: u64 },
    /// An instruction executed (retired, or a far transfer that took place).
    Insn { ip: u64 },
    /// FUP.PGD with `lip`.
    Disable { lip: u64 },
    /// FUP.FAR (or FUP.PGD) at `from` for an interrupt/exception/far transfer to `to`.
    Transfer { from: u64, to: u64 },
    /// FUP.BuffOvf: packets were lost, execution continues at `ip`.
    Overflow { ip: u64 },
    /// TraceStop.
    Stop,
    /// PIP.
    Paging { cr3: u64, pg: bool },
}

/// Why the flow cannot be reconstructed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowError {
    Packet(DecodeError),
    /// A compressed LIP without a last LIP, or a reserved CNT.
    Lip { offset: usize, error: LipError },
    /// No decodable instruction at `ip`.
    NoCode { ip: u64 },
    /// The instruction at `ip` needs `wanted` but the stream has `found` (at packet `offset`).
    Mismatch { ip: u64, wanted: &'static str, found: String, offset: usize },
    /// `max_walk` instructions without a packet.
    Runaway { ip: u64 },
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowError::Packet(e) => write!(f, "{e}"),
            FlowError::Lip { offset, error } => write!(f, "offset {offset:#x}: LIP {error:?}"),
            FlowError::NoCode { ip } => write!(f, "no instruction at {ip:#x}"),
            FlowError::Mismatch { ip, wanted, found, offset } => {
                write!(f, "instruction at {ip:#x} needs {wanted}, packet at {offset:#x} is {found}")
            }
            FlowError::Runaway { ip } => write!(f, "walked too far without packets (at {ip:#x})"),
        }
    }
}

impl std::error::Error for FlowError {}

/// A flow-relevant packet with its LIP expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Tnt(bool),
    Tip(u64),
    Fup(FupKind, u64),
    Psb,
    Stop,
    Pip { cr3: u64, pg: bool },
}

/// Turn packets into flow items: TNT results one by one (oldest first), LIPs expanded against
/// RTIT_LAST_LIP (cleared by PSB and before FUP.BuffOvf, not updated by FUP.BuffOvf, §4.2.5),
/// timing packets and FUP.PCC dropped, errata workarounds applied.
fn items(packets: &[Decoded], errata: Errata) -> Result<Vec<(usize, Item)>, FlowError> {
    let mut last = LastLip::default();
    let mut out = Vec::with_capacity(packets.len());
    let mut pgd_open = false;
    for d in packets {
        let at = d.offset;
        let lip_err = |error| FlowError::Lip { offset: at, error };
        match d.packet {
            Packet::Tnt { bits, count } => {
                // RTIT_TNT_BUFF as it was at a TraceStop (§4.2.11, see the module notes): the
                // results belong before the TraceStop.
                let stop = if matches!(out.last(), Some((_, Item::Stop))) { out.pop() } else { None };
                for k in (0..count).rev() {
                    out.push((at, Item::Tnt(bits >> k & 1 != 0)));
                }
                out.extend(stop);
            }
            Packet::Tip(lip) => {
                let ip = canonical(last.expand_update(lip).map_err(lip_err)?);
                // E5 workaround: a TIP right after FUP.BuffOvf with the same IP is spurious.
                if errata.e5_tip_after_buffovf && matches!(out.last(), Some((_, Item::Fup(FupKind::BuffOvf, x))) if *x == ip) {
                    continue;
                }
                out.push((at, Item::Tip(ip)));
            }
            Packet::Fup { kind: FupKind::BuffOvf, lip } => {
                last = LastLip::default();
                let ip = canonical(last.expand(lip).map_err(lip_err)?);
                out.push((at, Item::Fup(FupKind::BuffOvf, ip)));
            }
            Packet::Fup { kind, lip } => {
                let ip = canonical(last.expand_update(lip).map_err(lip_err)?);
                match kind {
                    FupKind::Pcc => continue,
                    FupKind::Pgd => {
                        // E2 workaround: a FUP.PGD after a FUP.PGD without a FUP.PGE in between.
                        if errata.e2_extra_pgd && pgd_open {
                            continue;
                        }
                        pgd_open = true;
                    }
                    FupKind::Pge => pgd_open = false,
                    _ => {}
                }
                out.push((at, Item::Fup(kind, ip)));
            }
            Packet::Psb => {
                last = LastLip::default();
                out.push((at, Item::Psb));
            }
            Packet::TraceStop => out.push((at, Item::Stop)),
            Packet::Pip { cr3, pg } => out.push((at, Item::Pip { cr3, pg })),
            Packet::Mtc { .. } | Packet::Sts { .. } | Packet::Cyc { .. } => {}
        }
    }
    Ok(out)
}

struct Walker<'c, C: CodeImage + ?Sized> {
    items: Vec<(usize, Item)>,
    i: usize,
    code: &'c C,
    opts: FlowOptions,
    last_call: Option<u64>,
    /// The last CALL before a PSB cleared `last_call` (see [`Walker::peek`]).
    call_before_psb: Option<u64>,
    events: Vec<FlowEvent>,
    /// `FlowEvent::Insn` events pushed so far.
    n_insns: u64,
}

impl<C: CodeImage + ?Sized> Walker<'_, C> {
    /// Index of the next item that is not PSB/PIP, handling those on the way.
    fn peek(&mut self) -> Option<(usize, Item)> {
        while let Some(&(at, item)) = self.items.get(self.i) {
            match item {
                // A PSB clears RTIT_LAST_CALL_NLIP (§3.3.14) when it is generated, but the partial
                // TNT is not sent before a PSB (§4.2.2): results recorded before it, a compressed
                // RET among them, can arrive in the TNT after it. The walker passes over a PSB
                // as soon as the packet before it is used, i.e. at the earliest moment; a RET
                // compressed with no CALL since then belongs before the PSB and returns to the
                // CALL remembered here.
                Item::Psb => {
                    if let Some(c) = self.last_call.take() {
                        self.call_before_psb = Some(c);
                    }
                }
                Item::Pip { cr3, pg } => self.events.push(FlowEvent::Paging { cr3, pg }),
                _ => return Some((at, item)),
            }
            self.i += 1;
        }
        None
    }

    fn take(&mut self, ip: u64, wanted: &'static str) -> Result<Item, FlowError> {
        match self.peek() {
            Some((_, item)) => {
                self.i += 1;
                Ok(item)
            }
            None => Err(FlowError::Mismatch { ip, wanted, found: "the end of the trace".into(), offset: usize::MAX }),
        }
    }

    fn mismatch(&self, ip: u64, wanted: &'static str, item: Item) -> FlowError {
        let offset = self.items.get(self.i.saturating_sub(1)).map_or(usize::MAX, |x| x.0);
        FlowError::Mismatch { ip, wanted, found: format!("{item:?}"), offset }
    }

    fn insn(&self, ip: u64) -> Result<crate::insn_class::ClassifiedInsn, FlowError> {
        let mut buf = [0u8; 15];
        let n = self.code.read_code_at(ip, &mut buf, self.n_insns);
        classify(&buf[..n.min(15)], ip, self.opts.bitness_at(ip)).ok_or(FlowError::NoCode { ip })
    }

    /// Does the TraceStop event fire when execution continues at `ip`, reached by a taken
    /// transfer or sequentially (§3.3.5)?
    fn stops_at(&self, ip: u64, taken: bool) -> bool {
        let ip = ip & LIP_MASK;
        self.opts.stop_ranges.iter().flatten().any(|&(base, limit)| if taken { base <= ip && ip < limit } else { ip == base })
    }

    fn run(&mut self) -> Result<(), FlowError> {
        let mut ip: Option<u64> = None;
        let mut walked = 0usize;
        // The current position was reached by a taken transfer.
        let mut taken = false;
        let has_stop_ranges = self.opts.stop_ranges.iter().any(Option::is_some);
        while let Some((_, item)) = self.peek() {
            let Some(cur) = ip else {
                // Disabled: wait for FUP.PGE / FUP.BuffOvf.
                self.i += 1;
                match item {
                    Item::Fup(FupKind::Pge, x) => {
                        self.events.push(FlowEvent::Enable { ip: x });
                        ip = Some(x);
                        taken = false;
                    }
                    Item::Fup(FupKind::BuffOvf, x) => {
                        self.last_call = None;
                        self.call_before_psb = None;
                        self.events.push(FlowEvent::Overflow { ip: x });
                        ip = Some(x);
                        taken = false;
                    }
                    Item::Stop => self.events.push(FlowEvent::Stop),
                    // TNT left over from a TraceStop, the TIP after a FUP.PGD (rows 30, 31), ...
                    _ => {}
                }
                walked = 0;
                continue;
            };
            // Events that happen at the current position, before the instruction there.
            match item {
                Item::Fup(FupKind::Pge, x) => {
                    // PacketEn dropped without FUP.PGD (TriggerEn cleared, §4.2.8) and came back.
                    self.i += 1;
                    self.events.push(FlowEvent::Enable { ip: x });
                    ip = Some(x);
                    taken = false;
                    continue;
                }
                Item::Fup(FupKind::BuffOvf, x) => {
                    self.i += 1;
                    self.last_call = None;
                    self.call_before_psb = None;
                    self.events.push(FlowEvent::Overflow { ip: x });
                    ip = Some(x);
                    taken = false;
                    continue;
                }
                Item::Stop if !has_stop_ranges || self.stops_at(cur, taken) => {
                    self.i += 1;
                    self.events.push(FlowEvent::Stop);
                    ip = None;
                    continue;
                }
                Item::Fup(kind @ (FupKind::Pgd | FupKind::Far), x) if x == cur => {
                    let insn = self.insn(cur)?;
                    let own = kind == FupKind::Far && insn.kind == BranchKind::SoftwareInterrupt;
                    if !own {
                        // An interrupt at its resume IP, or a fault at the faulting instruction.
                        self.i += 1;
                        ip = self.transfer(kind, x)?;
                        taken = true;
                        walked = 0;
                        continue;
                    }
                }
                _ => {}
            }
            walked += 1;
            if walked > self.opts.max_walk {
                return Err(FlowError::Runaway { ip: cur });
            }
            let insn = self.insn(cur)?;
            self.events.push(FlowEvent::Insn { ip: cur });
            self.n_insns += 1;
            let nlip = insn.nlip();
            let next = match insn.kind {
                BranchKind::None | BranchKind::AlwaysFaults => nlip,
                BranchKind::DirectJump { target } => target,
                BranchKind::DirectCall { target } => {
                    self.last_call = Some(nlip);
                    self.call_before_psb = None;
                    target
                }
                BranchKind::Conditional { target } => {
                    walked = 0;
                    match self.take(cur, "a TNT result")? {
                        Item::Tnt(true) => target,
                        Item::Tnt(false) => nlip,
                        other => return Err(self.mismatch(cur, "a TNT result", other)),
                    }
                }
                BranchKind::IndirectJump | BranchKind::IndirectCall => {
                    walked = 0;
                    if insn.kind == BranchKind::IndirectCall {
                        self.last_call = Some(nlip);
                        self.call_before_psb = None;
                    }
                    match self.take(cur, "a TIP")? {
                        Item::Tip(t) => t,
                        other => return Err(self.mismatch(cur, "a TIP", other)),
                    }
                }
                BranchKind::Return => {
                    walked = 0;
                    match self.take(cur, "a TNT result or a TIP")? {
                        Item::Tnt(true) => match self.last_call.or(self.call_before_psb) {
                            Some(n) => n,
                            None => return Err(self.mismatch(cur, "a TIP (no call to return to)", Item::Tnt(true))),
                        },
                        Item::Tip(t) => t,
                        other => return Err(self.mismatch(cur, "a TNT result or a TIP", other)),
                    }
                }
                BranchKind::Far(_) | BranchKind::SoftwareInterrupt => {
                    walked = 0;
                    let item = self.take(cur, "FUP.FAR or FUP.PGD")?;
                    match item {
                        Item::Fup(kind @ (FupKind::Far | FupKind::Pgd), x) => {
                            // E1: an address inside the instruction (its own address, when the
                            // caller could not tell the length, is accepted the same way).
                            let inside = cur <= x && x < nlip;
                            if x != nlip && !(inside && (self.opts.errata.e1_far_fup_inside_insn || x == cur)) {
                                return Err(self.mismatch(cur, "FUP.FAR with the NLIP", item));
                            }
                            ip = self.transfer(kind, x)?;
                            taken = true;
                            continue;
                        }
                        other => return Err(self.mismatch(cur, "FUP.FAR or FUP.PGD", other)),
                    }
                }
            };
            ip = Some(next);
            // As the tracer's range edges see it: every COFI but a not-taken Jcc is taken.
            taken = next != nlip || !matches!(insn.kind, BranchKind::None | BranchKind::AlwaysFaults | BranchKind::Conditional { .. });
            // FUP.PGD with the NLIP of the instruction that just retired (after a taken branch
            // only where an address range can end packet generation: `range_exits`).
            if let Some((_, Item::Fup(FupKind::Pgd, x))) = self.peek() {
                if x == nlip && (next == nlip || self.opts.range_exits) {
                    self.i += 1;
                    self.events.push(FlowEvent::Disable { lip: x });
                    ip = None;
                }
            }
        }
        Ok(())
    }

    /// FUP.FAR (then the TIP) or FUP.PGD (then maybe the TIP) at `from`; returns the new IP.
    fn transfer(&mut self, kind: FupKind, from: u64) -> Result<Option<u64>, FlowError> {
        if kind == FupKind::Pgd {
            self.events.push(FlowEvent::Disable { lip: from });
            if let Some((_, Item::Tip(t))) = self.peek() {
                // Rows 30, 31: the far transfer left the filter with ContextEn still 1.
                self.i += 1;
                self.events.push(FlowEvent::Transfer { from, to: t });
            }
            return Ok(None);
        }
        match self.take(from, "the TIP after FUP.FAR")? {
            Item::Tip(t) => {
                self.events.push(FlowEvent::Transfer { from, to: t });
                Ok(Some(t))
            }
            other => Err(self.mismatch(from, "the TIP after FUP.FAR", other)),
        }
    }
}

/// Reconstruct the executed instructions from an RTIT byte stream and the code image.
pub fn reconstruct(bytes: &[u8], code: &(impl CodeImage + ?Sized), opts: FlowOptions) -> Result<Vec<FlowEvent>, FlowError> {
    let packets = parse_all(bytes, opts.cycle_acc).map_err(FlowError::Packet)?;
    let items = items(&packets, opts.errata)?;
    let mut w = Walker { items, i: 0, code, opts, last_call: None, call_before_psb: None, events: Vec::new(), n_insns: 0 };
    w.run()?;
    Ok(w.events)
}

/// [`reconstruct`] that keeps what was reconstructed before the first error: the flow up to
/// the error, and the error (a packet error ends the flow where the bad packet starts).
pub fn reconstruct_partial(
    bytes: &[u8],
    code: &(impl CodeImage + ?Sized),
    opts: FlowOptions,
) -> (Vec<FlowEvent>, Option<FlowError>) {
    let mut packets = Vec::new();
    let mut pending = None;
    for d in PacketParser::new(bytes, opts.cycle_acc) {
        match d {
            Ok(d) => packets.push(d),
            Err(e) => {
                pending = Some(FlowError::Packet(e));
                break;
            }
        }
    }
    // A LIP error ends the items at that packet.
    let items = loop {
        match items(&packets, opts.errata) {
            Ok(items) => break items,
            Err(e) => {
                let FlowError::Lip { offset, .. } = e else { return (Vec::new(), Some(e)) };
                packets.retain(|d| d.offset < offset);
                pending = Some(e);
            }
        }
    };
    let mut w = Walker { items, i: 0, code, opts, last_call: None, call_before_psb: None, events: Vec::new(), n_insns: 0 };
    let walked = w.run();
    let error = match walked {
        // Running out of packets is the truncation's doing.
        Err(FlowError::Mismatch { offset: usize::MAX, .. }) if pending.is_some() => pending,
        Err(e) => Some(e),
        Ok(()) => pending,
    };
    (w.events, error)
}

/// The instruction addresses of a reconstructed flow.
pub fn instructions(events: &[FlowEvent]) -> Vec<u64> {
    events.iter().filter_map(|e| if let FlowEvent::Insn { ip } = e { Some(*ip) } else { None }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtit::encode::encode;

    #[test]
    fn code16_ranges_decode_16bit_code_as_16bit() {
        // Issue 12: RTIT has no MODE packet; `call rel16` (E8 + 2 bytes) in a 16-bit range.
        let o = FlowOptions { bitness: 32, code16: [Some((0x3000, 0x3fff)), None, None, None], ..FlowOptions::default() };
        assert_eq!((o.bitness_at(0x3000), o.bitness_at(0x3fff), o.bitness_at(0x4000), o.bitness_at(0x10_0000)), (16, 16, 32, 32));
        assert_eq!(FlowOptions::default().bitness_at(0x3000), 64);
    }

    #[test]
    fn every_header_class_parses() {
        let ps = [
            Packet::Tnt { bits: 0b10, count: 2 },
            Packet::Fup { kind: FupKind::Far, lip: Lip { cnt: 1, zext: true, payload: 0x12_3456 } },
            Packet::Tip(Lip::full(0x7F00_0000_1000)),
            Packet::Psb,
            Packet::TraceStop,
            Packet::Pip { cr3: 0x1000, pg: false },
            Packet::Mtc { range: 1, tsc: 7 },
            Packet::Sts { acbr: 63, ecbr: 1, tsc: 0xFF_FFFF_FFFF },
        ];
        let mut b = Vec::new();
        for p in &ps {
            encode(p, &mut b);
        }
        let got: Vec<Packet> = parse_all(&b, false).unwrap().into_iter().map(|d| d.packet).collect();
        assert_eq!(got, ps);
    }

    #[test]
    fn reserved_encodings_are_errors() {
        assert_eq!(parse_packet(&[0x01]), Err(DecodeErrorKind::EmptyTnt { byte: 1 }));
        assert_eq!(parse_packet(&[0xA0, 0, 0]), Err(DecodeErrorKind::ReservedField { byte: 0xA0 }));
        assert_eq!(parse_packet(&[0xB3]), Err(DecodeErrorKind::ReservedField { byte: 0xB3 }));
        assert_eq!(parse_packet(&[0xC8]), Err(DecodeErrorKind::ReservedHeader { byte: 0xC8 }));
        assert_eq!(parse_packet(&[0xE5]), Err(DecodeErrorKind::ReservedHeader { byte: 0xE5 }));
        assert_eq!(parse_packet(&[0xC0, 0, 0, 1, 0, 0, 0, 0, 0]), Err(DecodeErrorKind::BadPsb));
        assert_eq!(parse_packet(&[0xB2, 1]), Err(DecodeErrorKind::Truncated { needed: 7, available: 2 }));
        assert_eq!(parse_cyc(&[0x00]), Err(DecodeErrorKind::ReservedCcnt { byte: 0 }));
    }

    #[test]
    fn cycle_counts_follow_only_the_listed_packets() {
        // Partial TNT (no CYC), full TNT + CYC, TraceStop (no CYC).
        let b = [0x05, 0x7F, 0x01, 0xC1];
        let got: Vec<Packet> = parse_all(&b, true).unwrap().into_iter().map(|d| d.packet).collect();
        assert_eq!(
            got,
            [Packet::Tnt { bits: 1, count: 2 }, Packet::Tnt { bits: 0x3F, count: 6 }, Packet::Cyc { cycles: 0 }, Packet::TraceStop]
        );
        // Without cycle-accurate mode 01H is an empty TNT.
        assert!(parse_all(&b, false).is_err());
        assert_eq!(find_psb(&[0x05, 0xC0, 0, 0, 0, 0, 0, 0, 0, 0], 0), Some(1));
    }

    /// 0x1000: six `jz +0`; 0x100c: `call 0x1020`; 0x1011: `syscall`; 0x1020: `jz +0`; `ret`.
    fn psb_program(ip: u64, buf: &mut [u8]) -> usize {
        let mut code = [0x90u8; 0x30];
        for k in 0..6 {
            code[2 * k..2 * k + 2].copy_from_slice(&[0x74, 0x00]);
        }
        code[0x0c..0x11].copy_from_slice(&[0xE8, 0x0F, 0x00, 0x00, 0x00]);
        code[0x11..0x13].copy_from_slice(&[0x0F, 0x05]);
        code[0x20..0x23].copy_from_slice(&[0x74, 0x00, 0xC3]);
        let Some(off) = ip.checked_sub(0x1000).filter(|&o| o < 0x30) else { return 0 };
        let n = buf.len().min(0x30 - off as usize);
        buf[..n].copy_from_slice(&code[off as usize..off as usize + n]);
        n
    }

    /// A PSB clears RTIT_LAST_CALL_NLIP when the tracer generates it, right after the packet
    /// that crossed the Pkt_Mask threshold (§3.3.9, §3.3.14), not when the decoder next needs a
    /// packet: the CALL between the PSB and the callee's `jz` must survive for the compressed
    /// RET (the walker passes over PSBs after every instruction).
    #[test]
    fn psb_after_full_tnt_then_call_keeps_the_call_for_ret_compression() {
        let mut b = Vec::new();
        encode(&Packet::Psb, &mut b);
        encode(&Packet::Fup { kind: FupKind::Pge, lip: Lip::full(0x1000) }, &mut b);
        // The sixth jz fills the TNT; the PSB follows that packet.
        encode(&Packet::Tnt { bits: 0, count: 6 }, &mut b);
        encode(&Packet::Psb, &mut b);
        // call (no packet, LAST_CALL_NLIP = 0x1011), jz not taken, ret compressed.
        encode(&Packet::Tnt { bits: 0b01, count: 2 }, &mut b);
        encode(&Packet::Fup { kind: FupKind::Pgd, lip: Lip::full(0x1013) }, &mut b);
        let events = reconstruct(&b, &psb_program, FlowOptions::default()).unwrap();
        let want = [0x1000, 0x1002, 0x1004, 0x1006, 0x1008, 0x100a, 0x100c, 0x1020, 0x1022, 0x1011];
        assert_eq!(instructions(&events), want);
    }

    /// Regression (trace=rtit stop=insertion_sort in the corpus): the TNT results of the
    /// conditional branches before a TraceStop stay in RTIT_TNT_BUFF (§4.2.11) and come after
    /// the TraceStop packet; the decoder dropped them and ended the flow at the last packet, 20
    /// instructions before the CALL into the stop range. The seed decides both halves: the TNT
    /// is not drained, and the stop point is where the range is entered (§3.3.5).
    #[test]
    fn tnt_after_trace_stop_precedes_it_and_the_walk_reaches_the_stop_range() {
        let mut b = Vec::new();
        encode(&Packet::Psb, &mut b);
        encode(&Packet::Fup { kind: FupKind::Pge, lip: Lip::full(0x1002) }, &mut b);
        // Five jz (not taken), the CALL into [0x1020, 0x1021): TraceStop; finish() writes the
        // undrained RTIT_TNT_BUFF afterwards.
        encode(&Packet::TraceStop, &mut b);
        encode(&Packet::Tnt { bits: 0, count: 5 }, &mut b);
        let with_range = FlowOptions { stop_ranges: [None, Some((0x1020, 0x1021))], ..FlowOptions::default() };
        let events = reconstruct(&b, &psb_program, with_range).unwrap();
        assert_eq!(instructions(&events), [0x1002, 0x1004, 0x1006, 0x1008, 0x100a, 0x100c]);
        assert_eq!(events.last(), Some(&FlowEvent::Stop));
        // Without the ranges the analyzer only knows the stop came after the last result.
        let events = reconstruct(&b, &psb_program, FlowOptions::default()).unwrap();
        assert_eq!(instructions(&events), [0x1002, 0x1004, 0x1006, 0x1008, 0x100a]);
        // A range the flow cannot reach without another packet is a decode error, not a guess.
        let far = FlowOptions { stop_ranges: [Some((0x1022, 0x1023)), None], ..FlowOptions::default() };
        assert!(matches!(reconstruct(&b, &psb_program, far), Err(FlowError::Mismatch { ip: 0x1020, .. })));
    }

    /// Regression (trace=rtit with mtc=1 on sigstorm in the corpus): five jz, the CALL, the
    /// callee's jz (the sixth result: a full TNT goes out) and its compressed RET retire; then
    /// an MTC crosses the Pkt_Mask threshold and the PSB clears RTIT_LAST_CALL_NLIP (§3.3.14).
    /// The RET's result was still in the partial TNT, which a PSB does not flush (§4.2.2), so it
    /// arrives after the PSB. The decoder forgot the CALL at the PSB and reported "no call to
    /// return to".
    #[test]
    fn compressed_ret_recorded_before_a_psb_returns_to_the_call_before_it() {
        let mut b = Vec::new();
        encode(&Packet::Psb, &mut b);
        encode(&Packet::Fup { kind: FupKind::Pge, lip: Lip::full(0x1002) }, &mut b);
        encode(&Packet::Tnt { bits: 0, count: 6 }, &mut b);
        encode(&Packet::Mtc { range: 0, tsc: 1 }, &mut b);
        encode(&Packet::Psb, &mut b);
        encode(&Packet::Tnt { bits: 1, count: 1 }, &mut b);
        encode(&Packet::Fup { kind: FupKind::Pgd, lip: Lip::full(0x1013) }, &mut b);
        let events = reconstruct(&b, &psb_program, FlowOptions::default()).unwrap();
        assert_eq!(instructions(&events), [0x1002, 0x1004, 0x1006, 0x1008, 0x100a, 0x100c, 0x1020, 0x1022, 0x1011]);
    }

    #[test]
    fn dump_names_packets_and_full_lips() {
        let mut b = Vec::new();
        encode(&Packet::Psb, &mut b);
        encode(&Packet::Fup { kind: FupKind::Pge, lip: Lip::full(0x7F00_0000_1000) }, &mut b);
        encode(&Packet::Tip(Lip { cnt: 0, zext: false, payload: 0x2000 }), &mut b);
        encode(&Packet::Tnt { bits: 0b01, count: 2 }, &mut b);
        let s = dump(&b, false, Errata::default());
        assert!(s.contains("PSB"), "{s}");
        assert!(s.contains("FUP.PGE 0x7f0000001000"), "{s}");
        assert!(s.contains("TIP 0x7f0000002000 (cnt=0 zext=0)"), "{s}");
        assert!(s.contains("TNT .!"), "{s}");
    }
}
