//! `pttrace bts-expect`: the BTS records a run must have produced, from the plugin's independent
//! per-instruction log (`truth=1`: one retired instruction address per line, plus `#event FROM
//! TO` lines for every interrupt/exception QEMU delivered) and the code image.
//!
//! A record is expected for every taken transfer that retires while BTS is on: between the
//! retirement of an instruction at an `--on` address (the enabling WRMSR) and one at an `--off`
//! address. Taken means: the next executed address is not the next sequential one, or the
//! instruction is an unconditional JMP/CALL/RET/far transfer (taken even when its target is the
//! next instruction). An event yields the record {event from, handler}; the instruction retired
//! before it continued at the event's `from`. `--user-from A` marks addresses >= A as CPL 3 for
//! `--off-os` (drop transfers into CPL 0) and `--off-usr` (drop transfers into CPL > 0).

use std::path::Path;

use crate::code_image::CodeImage;
use crate::error::{Result, ToolError};
use pttrace_core::insn_class::{classify, BranchKind};

#[derive(Debug, Default)]
pub struct BtsExpectOptions {
    pub on: Vec<u64>,
    pub off: Vec<u64>,
    pub user_from: Option<u64>,
    pub off_os: bool,
    pub off_usr: bool,
    /// Bitness of the code (default 64); `code16` ranges [start, end] hold 16-bit code. BTS
    /// records carry no mode: the test says which code is what (issue 12).
    pub bits: Option<u32>,
    pub code16: Vec<(u64, u64)>,
    /// Ranges [start, end] of 32-bit code (compatibility mode under a 64-bit default, issue 12).
    pub code32: Vec<(u64, u64)>,
}

impl BtsExpectOptions {
    /// The bitness the instruction at `ip` executed with.
    pub fn bitness(&self, ip: u64) -> u32 {
        if self.code16.iter().any(|&(a, b)| (a..=b).contains(&ip)) {
            16
        } else if self.code32.iter().any(|&(a, b)| (a..=b).contains(&ip)) {
            32
        } else {
            self.bits.unwrap_or(64)
        }
    }
}

enum Item {
    Insn(u64),
    Event { from: u64, to: u64 },
}

fn parse_truth(text: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = || ToolError::input(format!("truth line {}: cannot parse {line:?}", n + 1));
        if let Some(rest) = line.strip_prefix("#event ") {
            let mut f = rest.split_whitespace().map(|h| u64::from_str_radix(h, 16));
            match (f.next(), f.next()) {
                (Some(Ok(from)), Some(Ok(to))) => items.push(Item::Event { from, to }),
                _ => return Err(bad()),
            }
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else {
            items.push(Item::Insn(u64::from_str_radix(line.trim(), 16).map_err(|_| bad())?));
        }
    }
    Ok(items)
}

/// The expected records (from, to), in order.
pub fn expected_records(truth: &str, code: &CodeImage, o: &BtsExpectOptions) -> Result<Vec<(u64, u64)>> {
    let items = parse_truth(truth)?;
    let cpl_of = |a: u64| if o.user_from.is_some_and(|u| a >= u) { 3 } else { 0 };
    let keep = |to: u64| {
        let cpl = cpl_of(to);
        !((cpl == 0 && o.off_os) || (cpl != 0 && o.off_usr))
    };
    let mut out = Vec::new();
    let mut on = false;
    let mut hint = 0;
    for (i, item) in items.iter().enumerate() {
        match *item {
            Item::Event { from, to } => {
                if on && keep(to) {
                    out.push((from, to));
                }
            }
            Item::Insn(ip) => {
                let next = match items.get(i + 1) {
                    Some(Item::Insn(n)) => *n,
                    Some(Item::Event { from, .. }) => *from,
                    None => break,
                };
                if on {
                    let mut bytes = [0u8; 16];
                    let n = code.read(ip, &mut bytes, &mut hint);
                    let insn = classify(&bytes[..n], ip, o.bitness(ip)).ok_or_else(|| {
                        ToolError::input(format!("no decodable instruction at {ip:#x} in the code image"))
                    })?;
                    let sequential = next == ip.wrapping_add(u64::from(insn.len));
                    let always = matches!(
                        insn.kind,
                        BranchKind::DirectJump { .. }
                            | BranchKind::DirectCall { .. }
                            | BranchKind::IndirectJump
                            | BranchKind::IndirectCall
                            | BranchKind::Return
                            | BranchKind::Far(_)
                    );
                    let cofi = !matches!(insn.kind, BranchKind::None | BranchKind::AlwaysFaults);
                    if cofi && (always || !sequential) && keep(next) {
                        out.push((ip, next));
                    }
                }
                if o.on.contains(&ip) {
                    on = true;
                }
                if o.off.contains(&ip) {
                    on = false;
                }
            }
        }
    }
    Ok(out)
}

/// `A-B[,A-B..]` (hex, inclusive).
fn range_list(opt: &str, v: Option<std::ffi::OsString>) -> Result<Vec<(u64, u64)>> {
    let v = v.ok_or_else(|| ToolError::usage(format!("{opt} needs a value")))?;
    let s = v.to_str().unwrap_or("");
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|r| {
            let bad = || ToolError::usage(format!("{opt}: not a hex range list A-B,..: {s:?}"));
            let (a, b) = r.split_once('-').ok_or_else(bad)?;
            let p = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).map_err(|_| bad());
            Ok((p(a)?, p(b)?))
        })
        .collect()
}

fn hex_list(opt: &str, v: Option<std::ffi::OsString>) -> Result<Vec<u64>> {
    let v = v.ok_or_else(|| ToolError::usage(format!("{opt} needs a value")))?;
    let s = v.to_str().unwrap_or("");
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| {
            u64::from_str_radix(x.trim_start_matches("0x"), 16)
                .map_err(|_| ToolError::usage(format!("{opt}: not a hex address list: {s:?}")))
        })
        .collect()
}

/// `pttrace bts-expect TRUTH CODE.IMG --on A[,A..] --off B[,B..] [--user-from U] [--off-os] [--off-usr]
/// [--bits N] [--code16 A-B,..] [--code32 A-B,..]`
pub fn cmd_bts_expect(args: Vec<std::ffi::OsString>) -> Result<i32> {
    let mut o = BtsExpectOptions::default();
    let mut pos = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--on") => o.on = hex_list("--on", it.next())?,
            Some("--off") => o.off = hex_list("--off", it.next())?,
            Some("--user-from") => o.user_from = hex_list("--user-from", it.next())?.first().copied(),
            Some("--off-os") => o.off_os = true,
            Some("--off-usr") => o.off_usr = true,
            Some("--bits") => {
                o.bits = match it.next().as_ref().and_then(|v| v.to_str()) {
                    Some("16") => Some(16),
                    Some("32") => Some(32),
                    Some("64") => Some(64),
                    _ => return Err(ToolError::usage("bts-expect: --bits needs 16, 32 or 64")),
                }
            }
            Some("--code16") => o.code16 = range_list("--code16", it.next())?,
            Some("--code32") => o.code32 = range_list("--code32", it.next())?,
            Some(x) if x.starts_with("--") => return Err(ToolError::usage(format!("bts-expect: unknown option {x:?}"))),
            _ => pos.push(a),
        }
    }
    if pos.len() != 2 || o.on.is_empty() {
        return Err(ToolError::usage("bts-expect TRUTH CODE.IMG --on ADDRS --off ADDRS [--user-from A] [--off-os] [--off-usr] [--bits N] [--code16 A-B,..] [--code32 A-B,..]"));
    }
    let truth_path = Path::new(&pos[0]);
    let truth = std::fs::read_to_string(truth_path).map_err(|e| ToolError::io("cannot read", truth_path, e))?;
    let (code, _) = CodeImage::load(Path::new(&pos[1]))?;
    for (from, to) in expected_records(&truth, &code, &o)? {
        println!("{from:x} {to:x}");
    }
    Ok(0)
}
