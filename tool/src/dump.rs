//! ptdump-style packet dump using libipt's packet decoder (`pt_pkt_*`, see
//! [`crate::pkt_ffi`] for why not the libipt crate's `PacketDecoder`).
//!
//! Line format: `<offset:016x>  <name padded to 10> <payload>`, e.g.
//! `0000000000000010  tip.pge    3: ????000000401000, ip=0000000000401000`.
//! IP payloads show the compression (0 suppressed, 1 update-16, 2 update-32,
//! 3 sext-48, 4 update-48, 6 full) and the bytes actually present (`?` for
//! bytes taken from the last IP), followed by the reconstructed IP.
//! Decode errors are printed inline as `<offset>  [error: ...]` and to stderr.

use std::io::{self, Write};

use libipt::error::{PtError, PtErrorCode};
use libipt_sys as sys;
use pttrace_core::pt::last_ip::LastIp;
use pttrace_core::pt::packet::{IpCompression, IpPayload};

use crate::error::pt_err;
use crate::pkt_ffi::{RawPacket, RawPacketDecoder};

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

/// libipt's `pt_ip_compression` as the project's IPBytes type.
fn ipc_from_raw(ipc: u32) -> Option<IpCompression> {
    Some(match ipc {
        sys::pt_ip_compression_pt_ipc_suppressed => IpCompression::Suppressed,
        sys::pt_ip_compression_pt_ipc_update_16 => IpCompression::Update16,
        sys::pt_ip_compression_pt_ipc_update_32 => IpCompression::Update32,
        sys::pt_ip_compression_pt_ipc_sext_48 => IpCompression::Sext48,
        sys::pt_ip_compression_pt_ipc_update_48 => IpCompression::Update48,
        sys::pt_ip_compression_pt_ipc_full => IpCompression::Full,
        _ => return None,
    })
}

/// `3: ????000000401000, ip=0000000000401000`
fn fmt_ip(last: &mut LastIp, p: &sys::pt_packet_ip) -> String {
    let Some(c) = ipc_from_raw(p.ipc) else {
        return format!("ipc {}: {:x}", p.ipc, p.ip);
    };
    let (code, known_bytes) = (c.ip_bytes(), c.payload_len());
    let hex = format!("{:016x}", p.ip);
    let unknown = 16 - 2 * known_bytes;
    let shown: String = "?".repeat(unknown) + &hex[unknown..];
    match last.decompress(IpPayload { compression: c, payload: p.ip }) {
        Some(full) => format!("{code}: {shown}, ip={full:016x}"),
        None => format!("{code}: {shown}"),
    }
}

fn tnt_string(bits: u64, size: u32) -> String {
    (0..size.min(64))
        .rev()
        .map(|i| if bits >> i & 1 != 0 { '!' } else { '.' })
        .collect()
}

fn flag(on: u32, name: &str) -> String {
    if on != 0 {
        format!(", {name}")
    } else {
        String::new()
    }
}

/// Name and payload text of one packet.
fn describe(pkt: &RawPacket, last: &mut LastIp) -> (&'static str, String) {
    // SAFETY: each arm reads the union member that libipt documents for
    // the packet's type.
    unsafe {
        let pl = &pkt.payload;
        match pkt.type_ {
            sys::pt_packet_type_ppt_invalid => ("invalid", String::new()),
            sys::pt_packet_type_ppt_unknown => ("unknown", String::new()),
            sys::pt_packet_type_ppt_pad => ("pad", String::new()),
            sys::pt_packet_type_ppt_psb => {
                *last = LastIp::default();
                ("psb", String::new())
            }
            sys::pt_packet_type_ppt_psbend => ("psbend", String::new()),
            sys::pt_packet_type_ppt_fup => ("fup", fmt_ip(last, &pl.ip)),
            sys::pt_packet_type_ppt_tip => ("tip", fmt_ip(last, &pl.ip)),
            sys::pt_packet_type_ppt_tip_pge => ("tip.pge", fmt_ip(last, &pl.ip)),
            sys::pt_packet_type_ppt_tip_pgd => ("tip.pgd", fmt_ip(last, &pl.ip)),
            sys::pt_packet_type_ppt_tnt_8 => {
                ("tnt.8", tnt_string(pl.tnt.payload, pl.tnt.bit_size as u32))
            }
            sys::pt_packet_type_ppt_tnt_64 => {
                ("tnt.64", tnt_string(pl.tnt.payload, pl.tnt.bit_size as u32))
            }
            sys::pt_packet_type_ppt_mode => match pl.mode.leaf {
                sys::pt_mode_leaf_pt_mol_exec => {
                    let e = &pl.mode.bits.exec;
                    let mut v = Vec::new();
                    if e.csl() != 0 {
                        v.push("cs.l");
                    }
                    if e.csd() != 0 {
                        v.push("cs.d");
                    }
                    ("mode.exec", v.join(" "))
                }
                sys::pt_mode_leaf_pt_mol_tsx => {
                    let t = &pl.mode.bits.tsx;
                    let mut v = Vec::new();
                    if t.intx() != 0 {
                        v.push("intx");
                    }
                    if t.abrt() != 0 {
                        v.push("abrt");
                    }
                    ("mode.tsx", v.join(" "))
                }
                leaf => ("mode", format!("leaf {leaf:x}")),
            },
            sys::pt_packet_type_ppt_pip => (
                "pip",
                format!("cr3 {:016x}{}", pl.pip.cr3, flag(pl.pip.nr(), "nr")),
            ),
            sys::pt_packet_type_ppt_vmcs => ("vmcs", format!("{:x}", pl.vmcs.base)),
            sys::pt_packet_type_ppt_cbr => ("cbr", format!("{:x}", pl.cbr.ratio)),
            sys::pt_packet_type_ppt_tsc => ("tsc", format!("{:x}", pl.tsc.tsc)),
            sys::pt_packet_type_ppt_tma => {
                ("tma", format!("ctc {:x}, fc {:x}", pl.tma.ctc, pl.tma.fc))
            }
            sys::pt_packet_type_ppt_mtc => ("mtc", format!("{:x}", pl.mtc.ctc)),
            sys::pt_packet_type_ppt_cyc => ("cyc", format!("{:x}", pl.cyc.value)),
            sys::pt_packet_type_ppt_stop => ("stop", String::new()),
            sys::pt_packet_type_ppt_ovf => ("ovf", String::new()),
            sys::pt_packet_type_ppt_mnt => ("mnt", format!("{:x}", pl.mnt.payload)),
            sys::pt_packet_type_ppt_exstop => (
                "exstop",
                if pl.exstop.ip() != 0 {
                    "ip".into()
                } else {
                    String::new()
                },
            ),
            sys::pt_packet_type_ppt_mwait => (
                "mwait",
                format!("hints {:x}, ext {:x}", pl.mwait.hints, pl.mwait.ext),
            ),
            sys::pt_packet_type_ppt_pwre => (
                "pwre",
                format!(
                    "c{}.{}{}",
                    pl.pwre.state,
                    pl.pwre.sub_state,
                    flag(pl.pwre.hw(), "hw")
                ),
            ),
            sys::pt_packet_type_ppt_pwrx => {
                let p = &pl.pwrx;
                (
                    "pwrx",
                    format!(
                        "last c{}, deepest c{}{}{}{}",
                        p.last,
                        p.deepest,
                        flag(p.interrupt(), "int"),
                        flag(p.store(), "st"),
                        flag(p.autonomous(), "hw")
                    ),
                )
            }
            sys::pt_packet_type_ppt_ptw => (
                "ptw",
                format!(
                    "{}: {:x}{}",
                    pl.ptw.plc,
                    pl.ptw.payload,
                    flag(pl.ptw.ip(), "ip")
                ),
            ),
            sys::pt_packet_type_ppt_cfe => (
                "cfe",
                format!(
                    "type {:x}, vector {:x}{}",
                    pl.cfe.type_,
                    pl.cfe.vector,
                    flag(pl.cfe.ip(), "ip")
                ),
            ),
            sys::pt_packet_type_ppt_evd => (
                "evd",
                format!("type {:x}, payload {:x}", pl.evd.type_, pl.evd.payload),
            ),
            other => ("?", format!("packet type {other}")),
        }
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

    let mut dec = match RawPacketDecoder::new(bytes) {
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
                error(
                    out,
                    &mut res,
                    0,
                    &format!("trace does not start with a PSB; skipped 0x{s:x} bytes"),
                )?;
            }
        }
        Err(e) if e.code() == PtErrorCode::Eos => {
            error(
                out,
                &mut res,
                0,
                &format!("no PSB found in 0x{len:x} bytes; nothing decoded"),
            )?;
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
        match dec.next_packet() {
            Ok(pkt) => {
                let end = (off + pkt.size as u64).min(len);
                let raw = &bytes[off as usize..end as usize];
                let (name, payload) = describe(&pkt, &mut last);
                res.packets += 1;
                let payload = if opts.raw {
                    payload + &raw_suffix(raw)
                } else {
                    payload
                };
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
    dec: &mut RawPacketDecoder,
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
                writeln!(
                    out,
                    "{err_off:016x}  [no further PSB; 0x{:x} bytes not decoded]",
                    len - err_off
                )?;
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
pub fn dump_file_libipt<W: Write>(
    bytes: &[u8],
    opts: DumpOptions,
    out: &mut W,
) -> io::Result<DumpOutcome> {
    dump_libipt(bytes, opts, out, |off, msg| {
        eprintln!("pttrace: dump error at offset 0x{off:x}: {msg}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tnt() {
        assert_eq!(tnt_string(0b1101, 4), "!!.!");
        assert_eq!(tnt_string(0, 0), "");
    }

    /// Packets the libipt crate cannot represent (CFE, EVD) and TNT.64
    /// payloads beyond 8 bits are dumped, not panicked on.
    #[test]
    fn raw_packets() {
        let mut t: Vec<u8> = [0x02, 0x82].repeat(8);
        t.extend_from_slice(&[0x02, 0x23]); // psbend
        t.extend_from_slice(&[0x02, 0xa3, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00]); // tnt.64: stop at bit 9
        t.extend_from_slice(&[0x02, 0x13, 0x01, 0x00]); // cfe type 1, no IP
        t.extend_from_slice(&[0x02, 0x53, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]); // evd
        let mut out = Vec::new();
        let r = dump_libipt(&t, DumpOptions::default(), &mut out, |_, _| {}).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains("0000000000000012  tnt.64     ........!\n"),
            "{s}"
        ); // 9 bits
        assert!(s.contains("cfe"), "{s}");
        assert_eq!(r.packets + r.errors, 5, "{s}");
    }
}
