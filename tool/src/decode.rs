//! Instruction-flow reconstruction with libipt's instruction flow decoder
//! (`pt_insn_*`, see [`crate::insn_ffi`]), memory supplied from `code.img`
//! through the image read-memory callback.
//!
//! Loop: `sync_forward`; loop { drain events while the status says
//! `EVENT_PENDING`; `pt_insn_next`; emit ip }. Like ptxed, an instruction
//! returned together with an error is still emitted if libipt decoded it
//! (`iclass != ptic_error`). `Eos` ends the stream; any other error is
//! reported, counted, and followed by a `sync_forward` resync.

use std::io::{self, Write};
use std::rc::Rc;

use libipt::error::{PtError, PtErrorCode};
use libipt::status::Status;

use crate::code_image::{CodeImage, CodeSegment, ThreadView};
use crate::error::{pt_err, Result, ToolError, EXIT_FAIL, EXIT_OK, EXIT_TRUNCATED};
use crate::hexfmt::write_hex_line;
use crate::insn_ffi::RawInsnDecoder;
use crate::outdir::OutDir;

/// At most this many decode errors are printed per stream (all are counted).
pub const MAX_PRINTED_ERRORS: u64 = 20;

/// Give up (error + resync) if libipt emits this many instructions without
/// consuming any trace: only possible when the code image has a cycle of
/// direct branches (e.g. `jmp .`), which libipt would follow forever.
pub const MAX_INSNS_WITHOUT_TRACE: u64 = 1 << 24;

/// A decode error inside one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeError {
    /// Trace offset where the error was detected, if libipt knows one.
    pub offset: Option<u64>,
    /// libipt error code (None for errors detected by this tool).
    pub code: Option<PtErrorCode>,
    pub message: String,
}

impl DecodeError {
    fn from_pt(offset: Option<u64>, e: &PtError) -> Self {
        DecodeError {
            offset,
            code: Some(e.code()),
            message: pt_err(e),
        }
    }

    fn tool(offset: Option<u64>, message: String) -> Self {
        DecodeError {
            offset,
            code: None,
            message,
        }
    }

    pub fn offset_str(&self) -> String {
        match self.offset {
            Some(o) => format!("0x{o:x}"),
            None => "?".to_string(),
        }
    }
}

/// Per-stream result.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StreamStats {
    pub instructions: u64,
    /// Decoded changes of flow (branches, calls, returns, far transfers).
    pub branches: u64,
    pub errors: u64,
    /// Number of (re)synchronizations at a PSB.
    pub syncs: u64,
    /// Number of overflow (OVF) events.
    pub overflows: u64,
    /// Errors that are a packet cut off by the end of the stream (counted in `errors` too); in a
    /// run that was cut short (`OutDir::cut_short`) that is where the bytes stopped, not a fault.
    pub truncated_tail: u64,
}

/// Current trace offset for error messages.
fn cur_offset(dec: &RawInsnDecoder) -> Option<u64> {
    dec.offset().ok().or_else(|| dec.sync_offset().ok())
}

enum Step {
    /// Continue decoding with this status.
    Go(Status),
    /// End of stream.
    Stop,
}

/// Decode one raw PT stream. `on_ip` receives every instruction address in
/// order (an `Err` from it aborts decoding and is returned); `on_error`
/// receives every decode error (all are also counted in the stats).
pub fn decode_stream<F, E>(
    trace: &[u8],
    code: &Rc<CodeImage>,
    thread: u32,
    cpu: Option<(u16, u8, u8)>,
    on_ip: F,
    on_error: E,
) -> io::Result<StreamStats>
where
    F: FnMut(u64) -> io::Result<()>,
    E: FnMut(&DecodeError),
{
    decode_stream_with_events(trace, code, thread, cpu, false, &[], on_ip, |_| Ok(()), on_error)
}

/// [`decode_stream`], and `on_event` receives the events libipt reports that have a text
/// (the power events, ptxed notation) in flow order: before the instruction they bind to.
#[allow(clippy::too_many_arguments)]
pub fn decode_stream_with_events<F, V, E>(
    trace: &[u8],
    code: &Rc<CodeImage>,
    thread: u32,
    cpu: Option<(u16, u8, u8)>,
    iflags: bool,
    segments: &[CodeSegment],
    mut on_ip: F,
    mut on_event: V,
    mut on_error: E,
) -> io::Result<StreamStats>
where
    F: FnMut(u64) -> io::Result<()>,
    V: FnMut(&str) -> io::Result<()>,
    E: FnMut(&DecodeError),
{
    let mut ctx = Ctx {
        stats: StreamStats::default(),
        on_error: &mut on_error,
        last_sync: None,
    };
    if trace.is_empty() {
        return Ok(ctx.stats);
    }

    let mut dec = match RawInsnDecoder::new(trace, ThreadView::new(Rc::clone(code), thread).with_segments(segments), cpu, iflags) {
        Ok(d) => d,
        Err(e) => {
            ctx.report(DecodeError::from_pt(None, &e));
            return Ok(ctx.stats);
        }
    };

    let mut status = match ctx.resync(&mut dec, true) {
        Step::Go(st) => st,
        Step::Stop => return Ok(ctx.stats),
    };

    // Stuck-decoder guard, see MAX_INSNS_WITHOUT_TRACE.
    let mut guard_off = dec.offset().ok();
    let mut guard_count = 0u64;
    // The thread's instruction count (the key of code versions) and its OVF events so far.
    let mut count = 0u64;
    let mut ovf_ordinal = 0u32;

    'stream: loop {
        // libipt requires all pending events to be fetched before decode_next.
        while status.event_pending() {
            match dec.event() {
                Ok((event, st)) => {
                    if let Some(t) = event.text.as_ref() {
                        on_event(t.as_str())?;
                    }
                    if event.is_overflow() {
                        ctx.stats.overflows += 1;
                        ovf_ordinal += 1;
                        // Instructions were lost: the plugin recorded where decoding resumes.
                        if let Some(c) = dec.view_mut().overflow_count(ovf_ordinal) {
                            count = c;
                        }
                    }
                    status = st;
                }
                Err(e) if e.code() == PtErrorCode::Eos => {
                    ctx.check_trailing(&dec, trace.len());
                    break 'stream;
                }
                Err(e) => {
                    ctx.report(DecodeError::from_pt(cur_offset(&dec), &e));
                    match ctx.resync(&mut dec, false) {
                        Step::Go(st) => {
                            status = st;
                            continue 'stream;
                        }
                        Step::Stop => break 'stream,
                    }
                }
            }
        }
        dec.view_mut().advance(count);
        let next = dec.next_insn();
        if let Some(ip) = next.ip {
            count += 1;
            ctx.stats.instructions += 1;
            ctx.stats.branches += u64::from(next.branch);
            on_ip(CodeSegment::linear(segments, ip))?;
        }
        guard_count += 1;
        if guard_count & 0xfff == 0 {
            let off = dec.offset().ok();
            if off != guard_off {
                guard_off = off;
                guard_count = 0;
            } else if guard_count >= MAX_INSNS_WITHOUT_TRACE {
                ctx.report(DecodeError::tool(
                    off,
                    format!("{guard_count} instructions decoded without consuming trace (endless loop of direct branches in code.img?)"),
                ));
                match ctx.resync(&mut dec, false) {
                    Step::Go(st) => {
                        status = st;
                        guard_off = dec.offset().ok();
                        guard_count = 0;
                        continue 'stream;
                    }
                    Step::Stop => break 'stream,
                }
            }
        }
        match next.result {
            Ok(st) => status = st,
            Err(e) if e.code() == PtErrorCode::Eos => {
                ctx.check_trailing(&dec, trace.len());
                break;
            }
            Err(e) => {
                ctx.report(DecodeError::from_pt(cur_offset(&dec), &e));
                match ctx.resync(&mut dec, false) {
                    Step::Go(st) => status = st,
                    Step::Stop => break,
                }
            }
        }
    }
    Ok(ctx.stats)
}

struct Ctx<'a, E> {
    stats: StreamStats,
    on_error: &'a mut E,
    /// Offset of the last PSB we synchronized at.
    last_sync: Option<u64>,
}

impl<E: FnMut(&DecodeError)> Ctx<'_, E> {
    fn report(&mut self, e: DecodeError) {
        self.stats.errors += 1;
        (self.on_error)(&e);
    }

    /// At end of stream: libipt treats a packet cut off by the end of the
    /// buffer as plain end-of-stream; report the undecoded tail.
    fn check_trailing(&mut self, dec: &RawInsnDecoder, len: usize) {
        if let Ok(off) = dec.offset() {
            if off < len as u64 {
                self.stats.truncated_tail += 1;
                self.report(DecodeError::tool(
                    Some(off),
                    format!(
                        "trace ends with a truncated packet ({} bytes left undecoded)",
                        len as u64 - off
                    ),
                ));
            }
        }
    }

    /// Synchronize (`first`) or resynchronize after an error at the next PSB.
    /// Guarantees forward progress: gives up if the sync point does not advance.
    fn resync(&mut self, dec: &mut RawInsnDecoder, mut first: bool) -> Step {
        loop {
            let r = dec.sync_forward();
            if let Err(e) = &r {
                if e.code() == PtErrorCode::Eos {
                    if first {
                        self.report(DecodeError::tool(
                            Some(0),
                            "no PSB found: nothing could be decoded".into(),
                        ));
                    }
                    return Step::Stop;
                }
            }
            let off = dec.sync_offset().ok();
            if off.is_some() && off <= self.last_sync {
                self.report(DecodeError::tool(
                    off,
                    "resynchronization made no progress; giving up on this stream".into(),
                ));
                return Step::Stop;
            }
            if off.is_some() {
                self.last_sync = off;
            }
            match r {
                Ok(st) => {
                    self.stats.syncs += 1;
                    if first && off != Some(0) {
                        let at = off
                            .map(|o| format!("0x{o:x}"))
                            .unwrap_or_else(|| "?".into());
                        self.report(DecodeError::tool(
                            Some(0),
                            format!(
                                "trace does not start with a PSB; bytes before the first PSB (at {at}) were skipped"
                            ),
                        ));
                    }
                    return Step::Go(st);
                }
                Err(e) => {
                    self.report(DecodeError::from_pt(off.or_else(|| cur_offset(dec)), &e));
                    first = false; // already reported an error for this stream
                    if off.is_none() {
                        // Cannot tell whether we advanced; do not risk looping.
                        return Step::Stop;
                    }
                }
            }
        }
    }
}

/// Decode one stream into a vector of addresses (errors go to `on_error`).
pub fn decode_to_vec<E: FnMut(&DecodeError)>(
    trace: &[u8],
    code: &Rc<CodeImage>,
    thread: u32,
    cpu: Option<(u16, u8, u8)>,
    on_error: E,
) -> (Vec<u64>, StreamStats) {
    let mut ips = Vec::new();
    let stats = decode_stream(
        trace,
        code,
        thread,
        cpu,
        |ip| {
            ips.push(ip);
            Ok(())
        },
        on_error,
    )
    .unwrap_or_default(); // the sink above never fails
    (ips, stats)
}

/// Print a decode error to stderr in the standard format, honouring the
/// per-stream print limit. `printed` counts errors printed so far.
pub fn print_decode_error(thread: &str, e: &DecodeError, printed: &mut u64) {
    *printed += 1;
    if *printed <= MAX_PRINTED_ERRORS {
        eprintln!(
            "pttrace: {thread}: decode error at offset {}: {}",
            e.offset_str(),
            e.message
        );
    } else if *printed == MAX_PRINTED_ERRORS + 1 {
        eprintln!(
            "pttrace: {thread}: further decode errors not shown (see summary for the count)"
        );
    }
}

/// Print code-image and meta warnings to stderr.
pub fn print_load_warnings(dir: &OutDir, warnings: &[String]) {
    for w in dir.meta.warnings.iter().chain(warnings) {
        eprintln!("pttrace: warning: {w}");
    }
}

/// Options of `pttrace decode`.
#[derive(Debug, Default, Clone)]
pub struct DecodeOptions {
    /// Only this thread, and no `thread N` header line.
    pub thread: Option<u32>,
    /// Only the process with this pid (a run with forked processes).
    pub process: Option<u32>,
    /// Only print the per-thread summary (stderr).
    pub summary_only: bool,
    /// Also print the events libipt reports (power events), one `[...]` line each, ptxed style.
    pub events: bool,
    /// rtit-decode: the code's bitness (default 64) and ranges of 16-bit code (RTIT streams
    /// carry no mode).
    pub bits: Option<u32>,
    pub code16: Vec<(u64, u64)>,
    /// rtit-decode: ranges of 32-bit code (compatibility mode) under a 64-bit default.
    pub code32: Vec<(u64, u64)>,
    /// decode: IP ranges that are offsets in a code segment (`--cs-base`).
    pub segments: Vec<CodeSegment>,
}

/// `pttrace decode DIR`. Returns the exit status.
pub fn cmd_decode<W: Write>(dir: &OutDir, opts: &DecodeOptions, out: &mut W) -> Result<i32> {
    let threads: Vec<u32> = match opts.thread {
        Some(n) => {
            if !dir.threads.contains(&n) {
                return Err(ToolError::input(format!(
                    "{} not found",
                    dir.pt_path(n).display()
                )));
            }
            vec![n]
        }
        None => {
            if dir.threads.is_empty() {
                return Err(ToolError::input(format!(
                    "no thread-N.pt files in {}",
                    dir.path.display()
                )));
            }
            dir.threads.clone()
        }
    };
    if dir.meta.get("dis_tnt") == Some("1") {
        // IA32_RTIT_CTL[55] DisTNT: conditional branches (and compressed RETs) left no packet,
        // so the code cannot be walked (perf forces its "quick" mode for such traces); libipt
        // 2.1 has no configuration flag for it and would fail at the first conditional branch.
        return Err(ToolError::input(format!(
            "{}: the trace was taken with IA32_RTIT_CTL.DisTNT = 1 (meta.txt dis_tnt=1): without TNT packets the \
             instruction flow cannot be reconstructed; `pttrace dump` lists its TIP/FUP packets",
            dir.path.display()
        )));
    }
    let (code, load) = dir.load_code()?;
    print_load_warnings(dir, &load.warnings);
    let code = Rc::new(code);
    let cpu = dir.cpu();
    let cut_short = dir.cut_short();
    if cut_short {
        eprintln!("{}", dir.cut_short_warning());
    }

    let mut any_error = false;
    for &n in &threads {
        let trace = dir.read_pt(n)?;
        let label = dir.thread_label(n);
        if opts.thread.is_none() && !opts.summary_only {
            writeln!(out, "{label}").map_err(out_err)?;
        }
        let mut printed = 0;
        let sink = std::cell::RefCell::new(&mut *out);
        let res = decode_stream_with_events(
            &trace,
            &code,
            n,
            cpu,
            dir.meta.get("event_trace") == Some("1"),
            &opts.segments,
            |ip| {
                if opts.summary_only {
                    Ok(())
                } else {
                    write_hex_line(&mut **sink.borrow_mut(), ip)
                }
            },
            |text| {
                if opts.events && !opts.summary_only {
                    writeln!(sink.borrow_mut(), "[{text}]")
                } else {
                    Ok(())
                }
            },
            |e| {
                if cut_short && e.message.starts_with("trace ends with a truncated packet") {
                    eprintln!("pttrace: {label}: stream truncated at {}: {}", e.offset_str(), e.message);
                } else {
                    print_decode_error(&label, e, &mut printed)
                }
            },
        );
        let stats = match res {
            Ok(mut s) if cut_short => {
                s.errors -= s.truncated_tail;
                s
            }
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                // Reader went away (e.g. `| head`): stop quietly.
                return Ok(if any_error { EXIT_FAIL } else { EXIT_OK });
            }
            Err(e) => return Err(out_err(e)),
        };
        let ovf = if stats.overflows > 0 {
            format!(", {} overflows", stats.overflows)
        } else {
            String::new()
        };
        eprintln!(
            "pttrace: {label}: {} instructions, {} branches, {} errors{ovf}, {} bytes of trace",
            stats.instructions,
            stats.branches,
            stats.errors,
            trace.len()
        );
        any_error |= stats.errors > 0;
    }
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(out_err(e)),
        _ => {}
    }
    Ok(if any_error {
        EXIT_FAIL
    } else if cut_short {
        EXIT_TRUNCATED
    } else {
        EXIT_OK
    })
}

fn out_err(e: io::Error) -> ToolError {
    ToolError::input(format!("cannot write output: {e}"))
}
