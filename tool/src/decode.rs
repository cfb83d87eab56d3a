//! Instruction-flow reconstruction with libipt's `InsnDecoder`, memory
//! supplied from `code.img` through the image read-memory callback.
//!
//! Loop: `sync_forward`; loop { drain events while the status says
//! `EVENT_PENDING`; `decode_next`; emit ip }. `Eos` ends the stream; any
//! other error is reported, counted, and followed by a `sync_forward` resync.

use std::io::{self, Write};
use std::rc::Rc;

use libipt::asid::Asid;
use libipt::enc_dec_builder::{Cpu, PtEncoderDecoder};
use libipt::error::{PtError, PtErrorCode};
use libipt::insn::InsnDecoder;
use libipt::status::Status;

use crate::code_image::CodeImage;
use crate::error::{pt_err, Result, ToolError, EXIT_FAIL, EXIT_OK};
use crate::hexfmt::write_hex_line;
use crate::outdir::OutDir;

/// At most this many decode errors are printed per stream (all are counted).
pub const MAX_PRINTED_ERRORS: u64 = 20;

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
        DecodeError { offset, code: Some(e.code()), message: pt_err(e) }
    }

    fn tool(offset: Option<u64>, message: String) -> Self {
        DecodeError { offset, code: None, message }
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
    pub errors: u64,
    /// Number of (re)synchronizations at a PSB.
    pub syncs: u64,
}

/// Make the read-memory callback for libipt's image: copies from the sparse
/// code image; returns the number of bytes copied, or `-pte_nomap`.
///
/// libipt asks for up to 15 bytes at an instruction's IP; a short read at a
/// segment end is fine (libipt then asks for the remainder at the next address).
fn read_memory_callback(code: Rc<CodeImage>) -> impl FnMut(&mut [u8], u64, Asid) -> i32 {
    let mut hint = 0usize;
    move |buf: &mut [u8], addr: u64, _asid: Asid| -> i32 {
        match code.read(addr, buf, &mut hint) {
            0 => -(PtErrorCode::Nomap as i32),
            n => n as i32,
        }
    }
}

/// Current trace offset for error messages.
fn cur_offset(dec: &InsnDecoder) -> Option<u64> {
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
    cpu: Option<Cpu>,
    mut on_ip: F,
    mut on_error: E,
) -> io::Result<StreamStats>
where
    F: FnMut(u64) -> io::Result<()>,
    E: FnMut(&DecodeError),
{
    let mut ctx = Ctx { stats: StreamStats::default(), on_error: &mut on_error, last_sync: None };
    if trace.is_empty() {
        return Ok(ctx.stats);
    }

    let mut builder = InsnDecoder::builder();
    if let Some(cpu) = cpu {
        builder = builder.cpu(cpu);
    }
    // SAFETY: `trace` outlives `dec` (dropped at the end of this function)
    // and libipt only reads the trace buffer (the `*mut` is an API artefact).
    let builder = unsafe { builder.buffer_from_raw(trace.as_ptr() as *mut u8, trace.len()) };
    let mut dec = match builder.build() {
        Ok(d) => d,
        Err(e) => {
            ctx.report(DecodeError::from_pt(None, &e));
            return Ok(ctx.stats);
        }
    };
    // The decoder's default image lives as long as the decoder; the boxed
    // callback is stored in it.
    dec.image().set_callback(Some(read_memory_callback(Rc::clone(code))));

    let mut status = match ctx.resync(&mut dec, true) {
        Step::Go(st) => st,
        Step::Stop => return Ok(ctx.stats),
    };

    'stream: loop {
        // libipt requires all pending events to be fetched before decode_next.
        while status.event_pending() {
            match dec.event() {
                Ok((_event, st)) => status = st,
                Err(e) if e.code() == PtErrorCode::Eos => break 'stream,
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
        match dec.decode_next() {
            Ok((insn, st)) => {
                ctx.stats.instructions += 1;
                on_ip(insn.ip())?;
                status = st;
            }
            Err(e) if e.code() == PtErrorCode::Eos => break,
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

    /// Synchronize (`first`) or resynchronize after an error at the next PSB.
    /// Guarantees forward progress: gives up if the sync point does not advance.
    fn resync(&mut self, dec: &mut InsnDecoder, mut first: bool) -> Step {
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
                        let at = off.map(|o| format!("0x{o:x}")).unwrap_or_else(|| "?".into());
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
    cpu: Option<Cpu>,
    on_error: E,
) -> (Vec<u64>, StreamStats) {
    let mut ips = Vec::new();
    let stats = decode_stream(
        trace,
        code,
        cpu,
        |ip| {
            ips.push(ip);
            Ok(())
        },
        on_error,
    )
    .expect("collecting into a Vec cannot fail");
    (ips, stats)
}

/// Print a decode error to stderr in the standard format, honouring the
/// per-stream print limit. `printed` counts errors printed so far.
pub fn print_decode_error(thread: u32, e: &DecodeError, printed: &mut u64) {
    *printed += 1;
    if *printed <= MAX_PRINTED_ERRORS {
        eprintln!("pttrace: thread {thread}: decode error at offset {}: {}", e.offset_str(), e.message);
    } else if *printed == MAX_PRINTED_ERRORS + 1 {
        eprintln!("pttrace: thread {thread}: further decode errors not shown (see summary for the count)");
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
    /// Only print the per-thread summary (stderr).
    pub summary_only: bool,
}

/// `pttrace decode DIR`. Returns the exit status.
pub fn cmd_decode<W: Write>(dir: &OutDir, opts: &DecodeOptions, out: &mut W) -> Result<i32> {
    let threads: Vec<u32> = match opts.thread {
        Some(n) => {
            if !dir.threads.contains(&n) {
                return Err(ToolError::input(format!("{} not found", dir.pt_path(n).display())));
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
    let (code, load) = dir.load_code()?;
    print_load_warnings(dir, &load.warnings);
    let code = Rc::new(code);
    let cpu = dir.cpu();

    let mut any_error = false;
    for &n in &threads {
        let trace = dir.read_pt(n)?;
        if opts.thread.is_none() && !opts.summary_only {
            writeln!(out, "thread {n}").map_err(out_err)?;
        }
        let mut printed = 0;
        let res = decode_stream(
            &trace,
            &code,
            cpu,
            |ip| if opts.summary_only { Ok(()) } else { write_hex_line(out, ip) },
            |e| print_decode_error(n, e, &mut printed),
        );
        let stats = match res {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                // Reader went away (e.g. `| head`): stop quietly.
                return Ok(if any_error { EXIT_FAIL } else { EXIT_OK });
            }
            Err(e) => return Err(out_err(e)),
        };
        eprintln!(
            "pttrace: thread {n}: {} instructions, {} errors, {} bytes of trace",
            stats.instructions,
            stats.errors,
            trace.len()
        );
        any_error |= stats.errors > 0;
    }
    match out.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(out_err(e)),
        _ => {}
    }
    Ok(if any_error { EXIT_FAIL } else { EXIT_OK })
}

fn out_err(e: io::Error) -> ToolError {
    ToolError::input(format!("cannot write output: {e}"))
}
