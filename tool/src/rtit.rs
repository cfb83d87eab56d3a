//! Atom RTIT streams (`thread-N.rtit`, seed 002): `pttrace rtit-dump FILE` and `pttrace
//! rtit-decode DIR`, with pttrace_core's RTIT packet parser and flow reconstruction (there is
//! no public RTIT decoder; libipt only knows Intel PT).

use std::cell::RefCell;
use std::rc::Rc;
use std::io::{self, Write};
use std::path::Path;

use pttrace_core::rtit::decode::{self as rd, FlowError, FlowOptions};
use pttrace_core::rtit::errata::Errata;

use crate::code_image::{CodeImage, ThreadView};
use crate::decode::{print_load_warnings, DecodeOptions};
use crate::error::{Result, ToolError, EXIT_FAIL, EXIT_OK};
use crate::hexfmt::write_hex_line;
use crate::outdir::{Meta, OutDir};

/// `code.img` as the RTIT decoder's code image: one thread's view, at the versions valid at
/// each instruction (issue 19).
pub struct RtitCode {
    view: RefCell<ThreadView>,
}

impl RtitCode {
    pub fn new(image: &Rc<CodeImage>, thread: u32) -> Self {
        RtitCode { view: RefCell::new(ThreadView::new(Rc::clone(image), thread)) }
    }
}

impl rd::CodeImage for RtitCode {
    fn read_code(&self, ip: u64, buf: &mut [u8]) -> usize {
        self.view.borrow_mut().read(ip, buf)
    }
    fn read_code_at(&self, ip: u64, buf: &mut [u8], insn_index: u64) -> usize {
        let mut v = self.view.borrow_mut();
        v.advance(insn_index);
        v.read(ip, buf)
    }
}

/// One decoded stream: the executed instruction addresses up to the first error, and the error.
#[derive(Debug, Default)]
pub struct RtitDecoded {
    pub ips: Vec<u64>,
    pub error: Option<FlowError>,
}

/// Reconstruct the instruction flow of one RTIT stream of `dir` (64-bit code; RTIT_CTL[Cycle_Acc]
/// and the TraceStop ranges from its meta.txt).
pub fn decode_rtit(trace: &[u8], code: &Rc<CodeImage>, thread: u32, dir: &OutDir) -> RtitDecoded {
    decode_rtit_with(trace, code, thread, dir, &DecodeOptions::default())
}

/// `decode_rtit` with the code's modes from `o` (`--bits`, `--code16`).
pub fn decode_rtit_with(trace: &[u8], code: &Rc<CodeImage>, thread: u32, dir: &OutDir, o: &DecodeOptions) -> RtitDecoded {
    let mut opts = FlowOptions {
        cycle_acc: dir.rtit_cycle_acc(),
        stop_ranges: dir.rtit_stop_ranges(),
        range_exits: dir.rtit_range_exits(),
        ..FlowOptions::default()
    };
    opts.bitness = o.bits.unwrap_or(64);
    for (slot, r) in opts.code16.iter_mut().zip(&o.code16) {
        *slot = Some(*r);
    }
    for (slot, r) in opts.code32.iter_mut().zip(&o.code32) {
        *slot = Some(*r);
    }
    let (events, error) = rd::reconstruct_partial(trace, &RtitCode::new(code, thread), opts);
    RtitDecoded { ips: rd::instructions(&events), error }
}

/// `pttrace rtit-dump FILE`: one line per packet. `cycle_acc`: from the command line, else from
/// the meta.txt next to FILE. Returns the exit status (1 if a packet does not parse).
pub fn cmd_rtit_dump<W: Write>(file: &Path, cycle_acc: Option<bool>, out: &mut W) -> Result<i32> {
    let bytes = std::fs::read(file).map_err(|e| ToolError::io("cannot read", file, e))?;
    let cycle_acc = cycle_acc.unwrap_or_else(|| {
        let meta = file.parent().map(|d| d.join("meta.txt")).and_then(|p| std::fs::read(p).ok());
        meta.is_some_and(|m| {
            let meta = Meta::parse(&String::from_utf8_lossy(&m));
            meta.get("rtit_ctl").and_then(parse_num).is_some_and(|ctl| ctl & 2 != 0)
        })
    });
    let text = rd::dump(&bytes, cycle_acc, Errata::default());
    let (packets, error) = match rd::parse_all(&bytes, cycle_acc) {
        Ok(p) => (p.len(), None),
        Err(e) => (rd::PacketParser::new(&bytes, cycle_acc).take_while(|d| d.is_ok()).count(), Some(e)),
    };
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(EXIT_OK),
        Err(e) => return Err(ToolError::input(format!("cannot write output: {e}"))),
        Ok(()) => {}
    }
    eprintln!("pttrace: {}: {packets} RTIT packets, {} errors", file.display(), u8::from(error.is_some()));
    Ok(if error.is_some() { EXIT_FAIL } else { EXIT_OK })
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `pttrace rtit-decode DIR`: like `pttrace decode` for `thread-N.rtit` streams. Returns the
/// exit status (1 if any stream had a decode error; the flow before the error is printed).
pub fn cmd_rtit_decode<W: Write>(dir: &OutDir, opts: &DecodeOptions, out: &mut W) -> Result<i32> {
    let threads: Vec<u32> = match opts.thread {
        Some(n) => {
            if !dir.rtits.contains(&n) {
                return Err(ToolError::input(format!("{} not found", dir.rtit_path(n).display())));
            }
            vec![n]
        }
        None => {
            if dir.rtits.is_empty() {
                return Err(ToolError::input(format!("no thread-N.rtit files in {}", dir.path.display())));
            }
            dir.rtits.clone()
        }
    };
    let (code, load) = dir.load_code()?;
    print_load_warnings(dir, &load.warnings);
    let code = Rc::new(code);
    let mut any_error = false;
    for &n in &threads {
        let trace = dir.read_rtit(n)?;
        let d = decode_rtit_with(&trace, &code, n, dir, opts);
        let label = dir.thread_label(n);
        let written = (|| -> io::Result<()> {
            if opts.thread.is_none() && !opts.summary_only {
                writeln!(out, "{label}")?;
            }
            if !opts.summary_only {
                for &ip in &d.ips {
                    write_hex_line(out, ip)?;
                }
            }
            Ok(())
        })();
        match written {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(if any_error { EXIT_FAIL } else { EXIT_OK }),
            Err(e) => return Err(ToolError::input(format!("cannot write output: {e}"))),
            Ok(()) => {}
        }
        if let Some(e) = &d.error {
            eprintln!("pttrace: {label}: RTIT decode error: {e}");
        }
        eprintln!(
            "pttrace: {label}: {} instructions, {} errors, {} bytes of RTIT trace",
            d.ips.len(),
            u8::from(d.error.is_some()),
            trace.len()
        );
        any_error |= d.error.is_some();
    }
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(ToolError::input(format!("cannot write output: {e}"))),
        _ => Ok(if any_error { EXIT_FAIL } else { EXIT_OK }),
    }
}
