//! ptdump-style packet dump using libipt's packet decoder
//! (`libipt::packet::PacketDecoder`).
//!
//! Line format: `<offset:016x>  <name padded to 10> <payload>`, e.g.
//! `0000000000000010  tip.pge    3: ????000000401000, ip=0000000000401000`.
//! IP payloads show the compression (0 suppressed, 1 update-16, 2 update-32,
//! 3 sext-48, 4 update-48, 6 full) and the bytes actually present (`?` for
//! bytes taken from the last IP), followed by the reconstructed IP.
//! Decode errors are printed inline as `<offset>  [error: ...]` and to stderr.

use std::io::{self, Write};

use libipt::enc_dec_builder::PtEncoderDecoder;
use libipt::error::{PtError, PtErrorCode};
use libipt::packet::{Compression, Packet, PacketDecoder, Payload};

use crate::error::pt_err;

/// Counts from a dump. The dump is clean iff `errors == 0`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DumpOutcome {
    pub packets: u64,
    pub errors: u64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct DumpOptions {
    /// Append the raw packet bytes to each line.
    pub raw: bool,
}

/// Last-IP state for IP reconstruction (SDM "IP compression").
#[derive(Debug, Default, Clone, Copy)]
pub struct LastIp(pub u64);

impl LastIp {
    /// Apply an IP packet payload; returns the full IP unless suppressed.
    pub fn update(&mut self, ip: u64, c: Compression) -> Option<u64> {
        let v = match c {
            Compression::Suppressed => return None,
            Compression::Update16 => (self.0 & !0xffff) | (ip & 0xffff),
            Compression::Update32 => (self.0 & !0xffff_ffff) | (ip & 0xffff_ffff),
            Compression::Sext48 => (((ip << 16) as i64) >> 16) as u64,
            Compression::Update48 => (self.0 & !0xffff_ffff_ffff) | (ip & 0xffff_ffff_ffff),
            Compression::Full => ip,
        };
        self.0 = v;
        Some(v)
    }
}

/// `3: ????000000401000, ip=0000000000401000`
fn fmt_ip(last: &mut LastIp, ip: u64, c: Compression) -> String {
    let (code, known_bytes) = match c {
        Compression::Suppressed => (0, 0),
        Compression::Update16 => (1, 2),
        Compression::Update32 => (2, 4),
        Compression::Sext48 => (3, 6),
        Compression::Update48 => (4, 6),
        Compression::Full => (6, 8),
    };
    let hex = format!("{ip:016x}");
    let unknown = 16 - 2 * known_bytes;
    let shown: String = "?".repeat(unknown) + &hex[unknown..];
    match last.update(ip, c) {
        Some(full) => format!("{code}: {shown}, ip={full:016x}"),
        None => format!("{code}: {shown}"),
    }
}

fn tnt_string(bits: u64, size: u32) -> String {
    (0..size).rev().map(|i| if bits >> i & 1 != 0 { '!' } else { '.' }).collect()
}

/// TNT.64 from its raw 8 bytes (the crate's `Tnt64::payload()` returns only
/// the low 8 bits, so we decode the 48-bit payload ourselves).
fn tnt64_string(raw: &[u8]) -> String {
    if raw.len() != 8 {
        return "?".into();
    }
    let mut p = [0u8; 8];
    p[..6].copy_from_slice(&raw[2..8]);
    let payload = u64::from_le_bytes(p);
    if payload == 0 {
        return "?".into();
    }
    let stop = 63 - payload.leading_zeros();
    tnt_string(payload & ((1u64 << stop) - 1), stop)
}

/// Name and payload text of one packet.
fn describe(pkt: &Packet<()>, raw: &[u8], last: &mut LastIp) -> (&'static str, String) {
    match pkt {
        Packet::Invalid(_) => ("invalid", String::new()),
        Packet::Psbend(_) => ("psbend", String::new()),
        Packet::Stop(_) => ("stop", String::new()),
        Packet::Pad(_) => ("pad", String::new()),
        Packet::Psb(_) => {
            *last = LastIp::default();
            ("psb", String::new())
        }
        Packet::Ovf(_) => ("ovf", String::new()),
        Packet::Unknown(_) => ("unknown", String::new()),
        Packet::Fup(p) => ("fup", fmt_ip(last, p.fup(), p.compression())),
        Packet::Tip(p) => ("tip", fmt_ip(last, p.tip(), p.compression())),
        Packet::TipPge(p) => ("tip.pge", fmt_ip(last, p.tippge(), p.compression())),
        Packet::TipPgd(p) => ("tip.pgd", fmt_ip(last, p.tippgd(), p.compression())),
        Packet::Tnt8(p) => ("tnt.8", tnt_string(p.payload() as u64, p.bitsize() as u32)),
        Packet::Tnt64(_) => ("tnt.64", tnt64_string(raw)),
        Packet::Mode(m) => match m.payload() {
            Payload::Exec(e) => {
                let mut v = Vec::new();
                if e.contains(libipt::packet::Exec::CSL) {
                    v.push("cs.l");
                }
                if e.contains(libipt::packet::Exec::CSD) {
                    v.push("cs.d");
                }
                ("mode.exec", v.join(" "))
            }
            Payload::Tsx(t) => {
                let mut v = Vec::new();
                if t.contains(libipt::packet::Tsx::INTX) {
                    v.push("intx");
                }
                if t.contains(libipt::packet::Tsx::ABRT) {
                    v.push("abrt");
                }
                ("mode.tsx", v.join(" "))
            }
        },
        Packet::Pip(p) => ("pip", format!("cr3 {:016x}{}", p.cr3(), if p.nr() { ", nr" } else { "" })),
        Packet::Vmcs(p) => ("vmcs", format!("{:x}", p.base())),
        Packet::Cbr(p) => ("cbr", format!("{:x}", p.ratio())),
        Packet::Tsc(p) => ("tsc", format!("{:x}", p.tsc())),
        Packet::Tma(p) => ("tma", format!("ctc {:x}, fc {:x}", p.ctc(), p.fc())),
        Packet::Mtc(p) => ("mtc", format!("{:x}", p.ctc())),
        Packet::Cyc(p) => ("cyc", format!("{:x}", p.value())),
        Packet::Mnt(p) => ("mnt", format!("{:x}", p.payload())),
        Packet::Exstop(p) => ("exstop", if p.ip() { "ip".into() } else { String::new() }),
        Packet::Mwait(p) => ("mwait", format!("hints {:x}, ext {:x}", p.hints(), p.ext())),
        Packet::Pwre(p) => (
            "pwre",
            format!("c{}.{}{}", p.state(), p.substate(), if p.hw() { ", hw" } else { "" }),
        ),
        Packet::Pwrx(p) => (
            "pwrx",
            format!(
                "last c{}, deepest c{}{}{}{}",
                p.last(),
                p.deepest(),
                if p.interrupt() { ", int" } else { "" },
                if p.store() { ", st" } else { "" },
                if p.autonomous() { ", hw" } else { "" }
            ),
        ),
        Packet::Ptw(p) => (
            "ptw",
            format!("{}: {:x}{}", p.plc(), p.payload(), if p.ip() { ", ip" } else { "" }),
        ),
    }
}

fn raw_suffix(raw: &[u8]) -> String {
    let mut s = String::from("  |");
    for b in raw {
        s += &format!(" {b:02x}");
    }
    s
}

/// Dump every packet of `bytes` with libipt's packet decoder.
///
/// Errors (undecodable packets, bytes before the first PSB, a truncated
/// final packet, no PSB at all) are printed inline, passed to `on_error`
/// as `(offset, message)`, and counted; after an error, decoding resumes
/// at the next PSB.
pub fn dump_libipt<W: Write, E: FnMut(u64, &str)>(
    bytes: &[u8],
    opts: DumpOptions,
    out: &mut W,
    mut on_error: E,
) -> io::Result<DumpOutcome> {
    let mut res = DumpOutcome::default();
    if bytes.is_empty() {
        return Ok(res);
    }
    let mut error = |out: &mut W, res: &mut DumpOutcome, off: u64, msg: &str| -> io::Result<()> {
        res.errors += 1;
        on_error(off, msg);
        writeln!(out, "{off:016x}  [error: {msg}]")
    };

    let builder = PacketDecoder::<()>::builder();
    // SAFETY: `bytes` outlives the decoder; libipt only reads the buffer.
    let builder = unsafe { builder.buffer_from_raw(bytes.as_ptr() as *mut u8, bytes.len()) };
    let mut dec = match builder.build() {
        Ok(d) => d,
        Err(e) => {
            error(out, &mut res, 0, &pt_err(&e))?;
            return Ok(res);
        }
    };
    let len = bytes.len() as u64;

    // Initial synchronization.
    match dec.sync_forward() {
        Ok(()) => {
            let s = dec.sync_offset().unwrap_or(0);
            if s != 0 {
                error(out, &mut res, 0, &format!("trace does not start with a PSB; skipped 0x{s:x} bytes"))?;
            }
        }
        Err(e) if e.code() == PtErrorCode::Eos => {
            error(out, &mut res, 0, &format!("no PSB found in 0x{len:x} bytes; nothing decoded"))?;
            return Ok(res);
        }
        Err(e) => {
            error(out, &mut res, 0, &pt_err(&e))?;
            return Ok(res);
        }
    }

    let mut last = LastIp::default();
    loop {
        let off = match dec.offset() {
            Ok(o) => o,
            Err(e) => {
                error(out, &mut res, 0, &pt_err(&e))?;
                break;
            }
        };
        match dec.decode_next() {
            Ok(pkt) => {
                let end = dec.offset().unwrap_or(off).clamp(off, len);
                let raw = &bytes[off as usize..end as usize];
                let (name, payload) = describe(&pkt, raw, &mut last);
                res.packets += 1;
                let payload = if opts.raw { payload + &raw_suffix(raw) } else { payload };
                if payload.is_empty() {
                    writeln!(out, "{off:016x}  {name}")?;
                } else {
                    writeln!(out, "{off:016x}  {name:<10} {payload}")?;
                }
            }
            Err(e) if e.code() == PtErrorCode::Eos => {
                if off < len {
                    let msg = format!("truncated packet: 0x{:x} trailing bytes", len - off);
                    error(out, &mut res, off, &msg)?;
                }
                break;
            }
            Err(e) => {
                error(out, &mut res, off, &pt_err(&e))?;
                if !resync(&mut dec, off, len, out, &mut res, &mut error)? {
                    break;
                }
                last = LastIp::default();
            }
        }
    }
    Ok(res)
}

/// Resynchronize at the next PSB after an error at `err_off`; returns
/// false when the rest of the trace cannot be decoded.
fn resync<W: Write>(
    dec: &mut PacketDecoder<()>,
    err_off: u64,
    len: u64,
    out: &mut W,
    res: &mut DumpOutcome,
    error: &mut impl FnMut(&mut W, &mut DumpOutcome, u64, &str) -> io::Result<()>,
) -> io::Result<bool> {
    let mut prev = err_off;
    loop {
        let r: Result<(), PtError> = dec.sync_forward();
        match r {
            Err(e) if e.code() == PtErrorCode::Eos => {
                writeln!(out, "{err_off:016x}  [no further PSB; 0x{:x} bytes not decoded]", len - err_off)?;
                return Ok(false);
            }
            Err(e) => {
                let o = dec.sync_offset().unwrap_or(prev);
                error(out, res, o, &pt_err(&e))?;
                if o <= prev {
                    return Ok(false);
                }
                prev = o;
            }
            Ok(()) => {
                let s = match dec.sync_offset() {
                    Ok(s) if s > err_off => s,
                    _ => return Ok(false), // no progress; stop rather than loop
                };
                writeln!(out, "{s:016x}  [resync: skipped 0x{:x} bytes]", s - err_off)?;
                return Ok(true);
            }
        }
    }
}

/// `pttrace dump --libipt FILE` core: dump to `out`, errors also to stderr.
pub fn dump_file_libipt<W: Write>(bytes: &[u8], opts: DumpOptions, out: &mut W) -> io::Result<DumpOutcome> {
    dump_libipt(bytes, opts, out, |off, msg| {
        eprintln!("pttrace: dump error at offset 0x{off:x}: {msg}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_ip() {
        let mut l = LastIp::default();
        assert_eq!(l.update(0x7fff_1234_5678, Compression::Sext48), Some(0x7fff_1234_5678));
        assert_eq!(l.update(0x9abc, Compression::Update16), Some(0x7fff_1234_9abc));
        assert_eq!(l.update(0x1111_2222, Compression::Update32), Some(0x7fff_1111_2222));
        assert_eq!(l.update(0, Compression::Suppressed), None);
        assert_eq!(l.update(0x8000_0000_0000, Compression::Sext48), Some(0xffff_8000_0000_0000));
        assert_eq!(l.update(0x1234_5678_9abc_def0, Compression::Full), Some(0x1234_5678_9abc_def0));
        assert_eq!(l.update(0x0000_0000_0001, Compression::Update48), Some(0x1234_0000_0000_0001));
    }

    #[test]
    fn tnt() {
        assert_eq!(tnt_string(0b1101, 4), "!!.!");
        // TNT.64: 02 a3, payload 0b1_01 (stop bit at 2) -> "." then "!"
        assert_eq!(tnt64_string(&[0x02, 0xa3, 0b101, 0, 0, 0, 0, 0]), ".!");
        assert_eq!(tnt64_string(&[0x02, 0xa3, 0, 0, 0, 0, 0, 0x80]), ".".repeat(47));
    }
}
