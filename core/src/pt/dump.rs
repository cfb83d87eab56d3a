//! ptdump-style text dump of an Intel PT byte stream (libipt's `ptdump --lastip --exec-mode`
//! layout): one line per packet,
//!
//! ```text
//! 0000000000000000  psb
//! 0000000000000010  fup        3: 00007f0012345678       ip   00007f0012345678
//! 0000000000000017  mode.exec  cs.l                      em   64-bit
//! 0000000000000019  psbend
//! 000000000000001b  tnt.8      !.!
//! ```
//!
//! i.e. the offset as 16 hex digits, two spaces, the packet name (padded to 10 columns when a
//! payload follows), the payload, and for IP packets, PIP and MODE.Exec a tracking column
//! (payload padded to 25 columns). Last-IP is tracked across the stream and reset at PSB
//! and OVF (SDM §33.4.2.2). Decode errors print `[error: ...]` and resync at the next PSB.

use super::decode::{DecodeError, Decoded, PacketDecoder};
use super::last_ip::{sign_extend_48, LastIp};
use super::packet::{ExecMode, IpCompression, IpPayload, Packet};
use std::fmt::{self, Write};
use std::io;

/// What a dump saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Packets decoded into [`Packet`] values.
    pub packets: usize,
    /// Well-formed packets without a [`Packet`] variant (VMCS, PTW, ...), printed and skipped.
    pub unsupported: usize,
    /// Decode errors (each followed by a resync).
    pub errors: usize,
    /// Bytes skipped while searching for a PSB (initial sync and resyncs).
    pub skipped_bytes: usize,
}

/// Dump options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpOptions {
    /// Decode from offset 0 instead of syncing to the first PSB (ptdump `--no-sync`).
    pub no_sync: bool,
}

/// Dump `bytes` to `out`, syncing to the first PSB first (as ptdump does by default).
pub fn dump<W: fmt::Write>(bytes: &[u8], out: &mut W) -> Result<DumpStats, fmt::Error> {
    dump_with(bytes, out, DumpOptions::default())
}

/// [`dump`] to an `io::Write`.
pub fn dump_io<W: io::Write>(bytes: &[u8], out: &mut W) -> io::Result<DumpStats> {
    let mut adapter = IoAdapter {
        inner: out,
        error: None,
    };
    match dump(bytes, &mut adapter) {
        Ok(stats) => Ok(stats),
        Err(fmt::Error) => Err(adapter
            .error
            .unwrap_or_else(|| io::Error::other("formatting error"))),
    }
}

/// Dump `bytes` to `out` with explicit options.
pub fn dump_with<W: fmt::Write>(
    bytes: &[u8],
    out: &mut W,
    opts: DumpOptions,
) -> Result<DumpStats, fmt::Error> {
    let mut stats = DumpStats::default();
    let mut dec = PacketDecoder::new(bytes);
    let mut fmt = PacketFormatter::new();
    if !opts.no_sync {
        match dec.sync_forward() {
            Some(0) => {}
            Some(p) => {
                stats.skipped_bytes += p;
                writeln!(out, "[skipped {p} bytes before the first psb]")?;
            }
            None => {
                stats.skipped_bytes += bytes.len();
                writeln!(out, "[no psb in {} bytes]", bytes.len())?;
                return Ok(stats);
            }
        }
    }
    while let Some(r) = dec.next() {
        match r {
            Ok(d) => {
                stats.packets += 1;
                fmt.write_line(out, &d)?;
            }
            Err(e) if e.kind.skip_len().is_some() => {
                stats.unsupported += 1;
                write_unsupported(out, bytes, &e)?;
            }
            Err(e) => {
                stats.errors += 1;
                write!(out, "[error: {e}")?;
                match dec.sync_forward() {
                    Some(p) => {
                        stats.skipped_bytes += p - e.offset;
                        writeln!(out, "; resync at {p:016x}]")?;
                    }
                    None => {
                        stats.skipped_bytes += bytes.len() - e.offset;
                        writeln!(out, "; no further psb]")?;
                    }
                }
                fmt.reset();
            }
        }
    }
    Ok(stats)
}

/// Formats decoded packets as ptdump lines, tracking last-IP.
#[derive(Clone, Debug, Default)]
pub struct PacketFormatter {
    last_ip: LastIp,
}

impl PacketFormatter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forget the last IP (resync).
    pub fn reset(&mut self) {
        self.last_ip.reset();
    }

    /// Write one line (with trailing newline) for `d`, updating last-IP.
    pub fn write_line<W: fmt::Write>(&mut self, out: &mut W, d: &Decoded) -> fmt::Result {
        let (name, payload, tracking) = self.describe(&d.packet);
        write!(out, "{:016x}  ", d.offset)?;
        match tracking {
            Some((id, value)) => writeln!(out, "{name:<10} {payload:<25} {id:<5}{value}"),
            None if payload.is_empty() => writeln!(out, "{name}"),
            None => writeln!(out, "{name:<10} {payload}"),
        }
    }

    /// Name, payload column and optional (tracking id, value) for `p`, updating last-IP.
    fn describe(&mut self, p: &Packet) -> (&'static str, String, Option<(&'static str, String)>) {
        match *p {
            Packet::Pad => ("pad", String::new(), None),
            Packet::Psb => {
                self.last_ip.reset();
                ("psb", String::new(), None)
            }
            Packet::PsbEnd => ("psbend", String::new(), None),
            Packet::Ovf => {
                self.last_ip.reset();
                ("ovf", String::new(), None)
            }
            Packet::TraceStop => ("stop", String::new(), None),
            Packet::Tnt { bits, count } => {
                ("tnt.8", tnt_string(u64::from(bits), count.min(8)), None)
            }
            Packet::TntLong { bits, count } => ("tnt.64", tnt_string(bits, count.min(64)), None),
            Packet::Tip(ip) => self.ip("tip", ip),
            Packet::TipPge(ip) => self.ip("tip.pge", ip),
            Packet::TipPgd(ip) => self.ip("tip.pgd", ip),
            Packet::Fup(ip) => self.ip("fup", ip),
            Packet::ModeExec { mode, if_flag } => {
                let (csl, csd, em) = match mode {
                    ExecMode::Bit64 => (true, false, "64-bit"),
                    ExecMode::Bit32 => (false, true, "32-bit"),
                    ExecMode::Bit16 => (false, false, "16-bit"),
                };
                let parts = [(csd, "cs.d"), (csl, "cs.l"), (if_flag, "if")];
                (
                    "mode.exec",
                    join_flags(&parts),
                    Some(("em", em.to_string())),
                )
            }
            Packet::ModeTsx { in_tx, tx_abort } => (
                "mode.tsx",
                join_flags(&[(in_tx, "intx"), (tx_abort, "abrt")]),
                None,
            ),
            Packet::Pip { cr3, nr } => {
                let payload = format!("{cr3:x}{}", if nr { ", nr" } else { "" });
                ("pip", payload, Some(("cr3", format!("{cr3:016x}"))))
            }
            Packet::Cbr { ratio } => ("cbr", format!("{ratio:x}"), None),
            Packet::Tsc { tsc } => ("tsc", format!("{tsc:x}"), None),
            Packet::Mtc { ctc } => ("mtc", format!("{ctc:x}"), None),
            Packet::Tma { ctc, fast_counter } => {
                ("tma", format!("{ctc:x}, {fast_counter:x}"), None)
            }
            Packet::Cyc { value } => ("cyc", format!("{value:x}"), None),
            // ptdump's notation: C-states printed as the MWAIT-hint value + 1 (c1 = encoding 0).
            Packet::Exstop { ip } => ("exstop", if ip { "ip".into() } else { String::new() }, None),
            Packet::Mwait { hints, ext } => ("mwait", format!("{hints:08x}, {ext:08x}"), None),
            Packet::Pwre { state, sub_state, hw } => (
                "pwre",
                format!("c{}.{}{}", (state + 1) & 0xF, (sub_state + 1) & 0xF, if hw { ", hw" } else { "" }),
                None,
            ),
            Packet::Cfe { ip, kind, vector } => {
                ("cfe", format!("{kind}: {vector:x}{}", if ip { ", ip" } else { "" }), None)
            }
            Packet::Evd { kind, payload } => ("evd", format!("{kind}: {payload:x}"), None),
            Packet::Pwrx { last, deepest, wake } => {
                let wr = match wake {
                    1 => "int",
                    4 => "st",
                    8 => "hw",
                    _ => "bad",
                };
                ("pwrx", format!("{wr}: c{}, c{}", (last + 1) & 0xF, (deepest + 1) & 0xF), None)
            }
        }
    }

    fn ip(
        &mut self,
        name: &'static str,
        ip: IpPayload,
    ) -> (&'static str, String, Option<(&'static str, String)>) {
        let tracked = match self.last_ip.decompress(ip) {
            Some(v) => format!("{v:016x}"),
            None => "<suppressed>".to_string(),
        };
        (name, ip_payload_string(ip), Some(("ip", tracked)))
    }
}

/// ptdump's payload column for an IP packet: IPBytes, then the transmitted bits with `?`
/// for the bits taken from last-IP.
pub fn ip_payload_string(ip: IpPayload) -> String {
    let c = ip.compression.ip_bytes();
    let p = ip.payload;
    match ip.compression {
        IpCompression::Suppressed => format!("{c:x}: ????????????????"),
        IpCompression::Update16 => format!("{c:x}: ????????????{:04x}", p & 0xffff),
        IpCompression::Update32 => format!("{c:x}: ????????{:08x}", p & 0xffff_ffff),
        IpCompression::Update48 => format!("{c:x}: ????{:012x}", p & 0xffff_ffff_ffff),
        IpCompression::Sext48 => format!("{c:x}: {:016x}", sign_extend_48(p)),
        IpCompression::Full => format!("{c:x}: {p:016x}"),
    }
}

/// `!` for taken, `.` for not taken, oldest result first.
pub fn tnt_string(bits: u64, count: u8) -> String {
    (0..count)
        .rev()
        .map(|i| if (bits >> i) & 1 != 0 { '!' } else { '.' })
        .collect()
}

fn join_flags(parts: &[(bool, &str)]) -> String {
    let names: Vec<&str> = parts
        .iter()
        .filter(|(on, _)| *on)
        .map(|&(_, n)| n)
        .collect();
    names.join(", ")
}

fn write_unsupported<W: fmt::Write>(out: &mut W, bytes: &[u8], e: &DecodeError) -> fmt::Result {
    let super::decode::DecodeErrorKind::Unsupported { packet, len } = e.kind else {
        return Ok(());
    };
    let raw = bytes.get(e.offset..e.offset + len).unwrap_or(&[]);
    let mut hex = String::with_capacity(2 * raw.len());
    for b in raw {
        let _ = write!(hex, "{b:02x}");
    }
    writeln!(
        out,
        "{:016x}  {:<10} <not decoded: {hex}>",
        e.offset,
        packet.name()
    )
}

/// `fmt::Write` over `io::Write`, keeping the real I/O error.
struct IoAdapter<'a, W: io::Write> {
    inner: &'a mut W,
    error: Option<io::Error>,
}

impl<W: io::Write> fmt::Write for IoAdapter<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.inner.write_all(s.as_bytes()).map_err(|e| {
            self.error = Some(e);
            fmt::Error
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::encode::encode;

    fn stream(packets: &[Packet]) -> Vec<u8> {
        let mut v = Vec::new();
        for p in packets {
            encode(p, &mut v);
        }
        v
    }

    fn dump_string(bytes: &[u8]) -> (String, DumpStats) {
        let mut s = String::new();
        let stats = dump(bytes, &mut s).unwrap();
        (s, stats)
    }

    #[test]
    fn psb_header_and_tip_print_like_ptdump() {
        let mut l = LastIp::new();
        let fup = l.compress(0x7f00_1234_5678);
        let tip = l.compress(0x7f00_1234_1000);
        let bytes = stream(&[
            Packet::Psb,
            Packet::Fup(fup),
            Packet::ModeExec {
                mode: ExecMode::Bit64,
                if_flag: false,
            },
            Packet::PsbEnd,
            Packet::Tnt {
                bits: 0b101,
                count: 3,
            },
            Packet::Tip(tip),
            Packet::TipPgd(IpPayload::SUPPRESSED),
        ]);
        let (s, stats) = dump_string(&bytes);
        let expected = "\
0000000000000000  psb
0000000000000010  fup        3: 00007f0012345678       ip   00007f0012345678
0000000000000017  mode.exec  cs.l                      em   64-bit
0000000000000019  psbend
000000000000001b  tnt.8      !.!
000000000000001c  tip        1: ????????????1000       ip   00007f0012341000
000000000000001f  tip.pgd    0: ????????????????       ip   <suppressed>
";
        assert_eq!(s, expected);
        assert_eq!(
            stats,
            DumpStats {
                packets: 7,
                unsupported: 0,
                errors: 0,
                skipped_bytes: 0
            }
        );
    }

    #[test]
    fn last_ip_is_reset_at_psb() {
        let bytes = stream(&[
            Packet::Psb,
            Packet::Tip(IpPayload {
                compression: IpCompression::Sext48,
                payload: 0x7f00_0000_1000,
            }),
            Packet::Psb,
            Packet::Tip(IpPayload {
                compression: IpCompression::Update16,
                payload: 0x2000,
            }),
        ]);
        let (s, _) = dump_string(&bytes);
        assert!(
            s.lines().nth(3).unwrap().ends_with("ip   0000000000002000"),
            "{s}"
        );
    }

    #[test]
    fn error_prints_error_line_and_resyncs_at_next_psb() {
        let mut bytes = stream(&[Packet::Psb, Packet::Pad]);
        bytes.extend_from_slice(&[0x05, 0xaa, 0xbb]);
        bytes.extend(stream(&[Packet::Psb, Packet::PsbEnd]));
        let (s, stats) = dump_string(&bytes);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[2],
            "[error: 0000000000000011: unknown opcode 05; resync at 0000000000000014]"
        );
        assert_eq!(lines[3], "0000000000000014  psb");
        assert_eq!(lines[4], "0000000000000024  psbend");
        assert_eq!(
            stats,
            DumpStats {
                packets: 4,
                unsupported: 0,
                errors: 1,
                skipped_bytes: 3
            }
        );
    }

    #[test]
    fn leading_garbage_is_skipped_to_first_psb() {
        let mut bytes = vec![0xff, 0x05];
        bytes.extend(stream(&[
            Packet::Psb,
            Packet::Cbr { ratio: 0x1c },
            Packet::PsbEnd,
        ]));
        let (s, stats) = dump_string(&bytes);
        assert_eq!(
            s,
            "[skipped 2 bytes before the first psb]\n0000000000000002  psb\n0000000000000012  cbr        1c\n0000000000000016  psbend\n"
        );
        assert_eq!(stats.skipped_bytes, 2);
    }

    #[test]
    fn timing_pip_and_tsx_packets_print_their_fields() {
        let bytes = stream(&[
            Packet::Psb,
            Packet::Tsc { tsc: 0x1234_5678 },
            Packet::Tma {
                ctc: 0xc080,
                fast_counter: 0x1ff,
            },
            Packet::Pip {
                cr3: 0x12c000,
                nr: true,
            },
            Packet::ModeTsx {
                in_tx: true,
                tx_abort: true,
            },
            Packet::Mtc { ctc: 0x12 },
            Packet::Cyc { value: 0x1000 },
            Packet::TntLong { bits: 1, count: 8 },
            Packet::Ovf,
            Packet::TraceStop,
        ]);
        let (s, _) = dump_string(&bytes);
        let bodies: Vec<&str> = s.lines().map(|l| &l[18..]).collect();
        assert_eq!(
            bodies,
            [
                "psb",
                "tsc        12345678",
                "tma        c080, 1ff",
                "pip        12c000, nr                cr3  000000000012c000",
                "mode.tsx   intx, abrt",
                "mtc        12",
                "cyc        1000",
                "tnt.64     .......!",
                "ovf",
                "stop",
            ]
        );
    }

    #[test]
    fn unsupported_packets_are_listed_not_counted_as_errors() {
        let mut bytes = stream(&[Packet::Psb]);
        bytes.extend_from_slice(&[0x02, 0xC8, 1, 2, 3, 4, 5]);
        bytes.push(0x00);
        let (s, stats) = dump_string(&bytes);
        assert_eq!(
            s.lines().nth(1).unwrap(),
            "0000000000000010  vmcs       <not decoded: 02c80102030405>"
        );
        assert_eq!(
            stats,
            DumpStats {
                packets: 2,
                unsupported: 1,
                errors: 0,
                skipped_bytes: 0
            }
        );
    }

    #[test]
    fn no_sync_option_decodes_from_offset_zero() {
        let bytes = stream(&[Packet::Pad, Packet::Mtc { ctc: 1 }]);
        let mut s = String::new();
        let stats = dump_with(&bytes, &mut s, DumpOptions { no_sync: true }).unwrap();
        assert_eq!(s, "0000000000000000  pad\n0000000000000001  mtc        1\n");
        assert_eq!(stats.packets, 2);
        let (s, stats) = dump_string(&bytes);
        assert_eq!(s, "[no psb in 3 bytes]\n");
        assert_eq!(stats.skipped_bytes, 3);
    }

    #[test]
    fn dump_io_writes_the_same_text() {
        let bytes = stream(&[Packet::Psb, Packet::PsbEnd]);
        let mut v = Vec::new();
        dump_io(&bytes, &mut v).unwrap();
        assert_eq!(String::from_utf8(v).unwrap(), dump_string(&bytes).0);
    }
}
