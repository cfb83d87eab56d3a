//! Command-line parsing and dispatch.

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use crate::compare::{cmd_compare, CompareOptions};
use crate::code_image::CodeSegment;
use crate::decode::{cmd_decode, DecodeOptions};
use crate::dump::{dump_file_libipt, DumpOptions, DumpOutcome};
use crate::dump_core::dump_with_core;
use crate::error::{Result, ToolError, EXIT_FAIL, EXIT_OK, EXIT_USAGE};
use crate::outdir::OutDir;
use crate::rtit::{cmd_rtit_decode, cmd_rtit_dump};

pub const USAGE: &str = "\
pttrace - inspect and decode the Intel PT / Atom RTIT output of the pttrace QEMU plugin

USAGE:
    pttrace dump [--libipt [--raw]] FILE
        Print every packet of one raw PT stream (e.g. DIR/thread-1.pt) with its
        offset, ptdump-style. --libipt uses libipt's packet decoder; --raw also
        prints each packet's bytes. Exit 1 if any packet fails to decode.

    pttrace decode DIR [--process PID] [--thread N] [--summary] [--events] [--cs-base BASE@A-B[,..]]
        Reconstruct the executed instructions of every DIR/thread-N.pt with
        libipt (memory from DIR/code.img) and print one address per line
        (lowercase hex, no 0x), each thread preceded by a `thread N` line.
        Forked processes (DIR/proc-PID/) follow the traced program's own, and
        then every header names the process: `process PID thread N`.
        --process PID  only that process
        --thread N     only thread N (of the program's own process, or of
                       --process PID), without the header line
        --summary      only print the per-thread summary (stderr)
        --cs-base BASE@A-B  IPs A-B (inclusive, hex) are offsets in a code
                       segment with base BASE: Intel PT IP payloads are
                       offsets from the CS base with CPUID.14H:ECX[31] LIP = 0
                       (e.g. real-mode code, CS << 4); the code is read at
                       BASE + IP and BASE + IP printed
        --events       also print the power and Event Trace events libipt reports,
                       ptxed style: `[pwre c1.0]`, `[exstop, ip: ADDR]`,
                       `[pwrx int: c1 (c1)]`, `[mwait HINTS EXT, ip: ADDR]`,
                       `[interrupt VEC[, cr2: ADDR], ip: ADDR]`, `[iret, ip: ADDR]`,
                       and `[if 0|1, ip: ADDR]` (RFLAGS.IF; libipt's iflags events are
                       enabled when meta.txt says event_trace=1)
        Exit 1 if any stream had a decode error.

    pttrace compare DIR [--process PID] [--thread N] [--context K]
        Decode every thread that has a DIR/thread-N.truth (and every
        DIR/proc-PID/thread-N.truth) and compare it with the truth address by
        address. --context K prints K lines around the first mismatch
        (default 3, 0 = none). Exit 1 on any decode error, mismatch or length
        difference. Atom RTIT traces (meta.txt trace=rtit, or thread-N.rtit
        streams and no thread-N.pt) are decoded as by rtit-decode.

    pttrace rtit-dump [--cycle-acc] FILE
        Print every packet of one Atom RTIT stream (e.g. DIR/thread-1.rtit)
        with its offset and bytes; FUP/TIP with the full LIP. Cycle count
        packets are parsed when RTIT_CTL[Cycle_Acc] was set: --cycle-acc, or
        rtit_ctl= in the meta.txt next to FILE. Exit 1 if a packet does not
        parse.

    pttrace rtit-decode DIR [--process PID] [--thread N] [--summary] [--bits N] [--code16 A-B[,A-B..]] [--code32 A-B[,A-B..]]
        Reconstruct the executed instructions of every DIR/thread-N.rtit
        (RTIT decoder of pttrace-core, code from DIR/code.img, Cycle_Acc from
        meta.txt rtit_ctl=) and print them as decode does: one address per
        line (lowercase hex, no 0x), each thread preceded by a `thread N`
        line; --thread N: only thread N, without the header line. The flow
        before a decode error is printed; exit 1 if any stream had one.
        The code is N-bit (default 64), the ranges A-B (inclusive) 16-bit: RTIT
        packets carry no execution mode.

    pttrace bts-expect TRUTH CODE.IMG --on A[,A..] --off B[,B..] [--user-from U] [--off-os] [--off-usr]
                       [--bits N] [--code16 A-B[,A-B..]] [--code32 A-B[,A-B..]]
        Print the BTS records (\"from to\" in hex) a full-system run must have
        written, from its per-instruction log (truth=1) and code image: every
        taken transfer retired between an instruction at an --on address and
        one at an --off address (addresses >= U count as CPL 3 for the filters).
        The code is N-bit (default 64), the ranges A-B (inclusive) 16-bit.

    pttrace perf DIR [-o FILE]
        Write a perf.data file (default DIR/perf.data) that host perf decodes
        as a per-thread `perf record -e intel_pt//u` recording of the traced
        program: `perf script --itrace=...`, `perf report --itrace=i`. The
        program, its interpreter and libraries must be present at the paths
        it used (perf reads the code from them); code outside every file
        mapping (QEMU's vDSO) is written to FILE.code. User-mode Intel PT
        traces only.

    pttrace --help | -h | help

EXIT STATUS:
    0 success, 1 decode error or mismatch, 2 usage or input/IO error
";

fn usage_err(msg: impl Into<String>) -> ToolError {
    ToolError::usage(msg)
}

/// Parsed command line.
#[derive(Debug)]
enum Command {
    Help,
    Dump {
        file: PathBuf,
        libipt: bool,
        raw: bool,
    },
    Decode {
        dir: PathBuf,
        opts: DecodeOptions,
    },
    Compare {
        dir: PathBuf,
        opts: CompareOptions,
    },
    RtitDump {
        file: PathBuf,
        cycle_acc: Option<bool>,
    },
    RtitDecode {
        dir: PathBuf,
        opts: DecodeOptions,
    },
    Perf {
        dir: PathBuf,
        out: Option<PathBuf>,
    },
}

fn parse_u32(opt: &str, v: Option<OsString>) -> Result<u32> {
    let v = v.ok_or_else(|| usage_err(format!("{opt} needs a value")))?;
    let s = v
        .to_str()
        .ok_or_else(|| usage_err(format!("{opt}: invalid value")))?;
    s.parse::<u32>()
        .map_err(|_| usage_err(format!("{opt}: expected a non-negative number, got {s:?}")))
}

fn parse(args: Vec<OsString>) -> Result<Command> {
    let mut it = args.into_iter();
    let Some(cmd) = it.next() else {
        return Err(usage_err("missing command"));
    };
    let cmd = cmd.to_str().unwrap_or("").to_string();
    if matches!(cmd.as_str(), "-h" | "--help" | "help") {
        return Ok(Command::Help);
    }
    if !matches!(cmd.as_str(), "dump" | "decode" | "compare" | "rtit-dump" | "rtit-decode" | "perf") {
        return Err(usage_err(format!("unknown command {cmd:?}")));
    }

    let mut positional: Vec<OsString> = Vec::new();
    let (mut libipt, mut raw, mut summary, mut events) = (false, false, false, false);
    let mut cycle_acc = None;
    let mut thread = None;
    let mut process = None;
    let mut context = None;
    let mut bits = None;
    let mut code16 = Vec::new();
    let mut code32 = Vec::new();
    let mut segments = Vec::new();
    let mut out = None;
    let mut only_positional = false;
    while let Some(a) = it.next() {
        let s = a.to_str().map(str::to_string);
        match s.as_deref() {
            Some(o) if !only_positional && o.starts_with('-') && o.len() > 1 => {
                match (cmd.as_str(), o) {
                    (_, "-h" | "--help") => return Ok(Command::Help),
                    (_, "--") => only_positional = true,
                    ("dump", "--libipt") => libipt = true,
                    ("dump", "--raw") => raw = true,
                    ("decode" | "rtit-decode", "--summary") => summary = true,
                    ("decode", "--events") => events = true,
                    ("decode" | "compare" | "rtit-decode", "--thread") => thread = Some(parse_u32(o, it.next())?),
                    ("decode" | "compare" | "rtit-decode", "--process") => process = Some(parse_u32(o, it.next())?),
                    ("rtit-dump", "--cycle-acc") => cycle_acc = Some(true),
                    ("rtit-decode", "--bits") => {
                        bits = match it.next().as_ref().and_then(|v| v.to_str()) {
                            Some("16") => Some(16),
                            Some("32") => Some(32),
                            Some("64") => Some(64),
                            _ => return Err(usage_err("rtit-decode: --bits needs 16, 32 or 64")),
                        }
                    }
                    ("rtit-decode", "--code16" | "--code32") => {
                        let ranges = if o == "--code16" { &mut code16 } else { &mut code32 };
                        let v = it.next().and_then(|v| v.to_str().map(str::to_string)).unwrap_or_default();
                        for r in v.split(',').filter(|r| !r.is_empty()) {
                            let bad = || usage_err(format!("rtit-decode: {o}: not a hex range list A-B,..: {v:?}"));
                            let (a, b) = r.split_once('-').ok_or_else(bad)?;
                            let p = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).map_err(|_| bad());
                            ranges.push((p(a)?, p(b)?));
                        }
                        if ranges.len() > 4 {
                            return Err(usage_err(format!("rtit-decode: at most 4 {o} ranges")));
                        }
                    }
                    ("decode", "--cs-base") => {
                        let v = it.next().and_then(|v| v.to_str().map(str::to_string)).unwrap_or_default();
                        for r in v.split(',').filter(|r| !r.is_empty()) {
                            let bad = || usage_err(format!("decode: --cs-base: not a list BASE@A-B,.. (hex): {v:?}"));
                            let p = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).map_err(|_| bad());
                            let (base, range) = r.split_once('@').ok_or_else(bad)?;
                            let (a, b) = range.split_once('-').ok_or_else(bad)?;
                            let (lo, hi) = (p(a)?, p(b)?);
                            if lo > hi {
                                return Err(bad());
                            }
                            segments.push(CodeSegment { base: p(base)?, lo, hi });
                        }
                    }
                    ("compare", "--context") => context = Some(parse_u32(o, it.next())? as usize),
                    ("perf", "-o" | "--output") => {
                        out = Some(PathBuf::from(it.next().ok_or_else(|| usage_err(format!("{o} needs a file")))?))
                    }
                    _ => return Err(usage_err(format!("{cmd}: unknown option {o:?}"))),
                }
            }
            _ => positional.push(a),
        }
    }
    let what = if cmd.ends_with("dump") { "FILE" } else { "DIR" };
    if positional.len() != 1 {
        return Err(usage_err(if positional.is_empty() {
            format!("{cmd}: missing {what}")
        } else {
            format!(
                "{cmd}: expected exactly one {what}, got {}",
                positional.len()
            )
        }));
    }
    let path = PathBuf::from(positional.pop().unwrap());
    Ok(match cmd.as_str() {
        "dump" => {
            if raw && !libipt {
                return Err(usage_err("dump: --raw requires --libipt"));
            }
            Command::Dump {
                file: path,
                libipt,
                raw,
            }
        }
        "decode" => Command::Decode {
            dir: path,
            opts: DecodeOptions {
                thread,
                process,
                summary_only: summary,
                events,
                segments,
                ..DecodeOptions::default()
            },
        },
        "rtit-dump" => Command::RtitDump { file: path, cycle_acc },
        "perf" => Command::Perf { dir: path, out },
        "rtit-decode" => Command::RtitDecode {
            dir: path,
            opts: DecodeOptions {
                thread,
                process,
                summary_only: summary,
                events: false,
                bits,
                code16,
                code32,
                segments: Vec::new(),
            },
        },
        _ => {
            let mut opts = CompareOptions {
                thread,
                process,
                ..CompareOptions::default()
            };
            if let Some(c) = context {
                opts.context = c;
            }
            Command::Compare { dir: path, opts }
        }
    })
}

fn run_dump(file: &PathBuf, libipt: bool, raw: bool) -> Result<i32> {
    let bytes = std::fs::read(file).map_err(|e| ToolError::io("cannot read", file, e))?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let r: io::Result<DumpOutcome> = if libipt {
        dump_file_libipt(&bytes, DumpOptions { raw }, &mut out)
    } else {
        dump_with_core(&bytes, &mut out)
    };
    let r = r.and_then(|o| out.flush().map(|_| o));
    match r {
        Ok(o) => {
            eprintln!(
                "pttrace: {}: {} packets, {} errors",
                file.display(),
                o.packets,
                o.errors
            );
            Ok(if o.errors > 0 { EXIT_FAIL } else { EXIT_OK })
        }
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(EXIT_OK),
        Err(e) => Err(ToolError::input(format!("cannot write output: {e}"))),
    }
}

/// decode and rtit-decode over every process of the run (`--process`: one; `--thread`: a thread
/// of the first selected). In a run with several processes, one without streams (`has_streams`)
/// is skipped. The exit status is the worst: a decode error, else a run cut short, else success.
fn for_each_process(
    dir: &OutDir,
    opts: &DecodeOptions,
    mut f: impl FnMut(&OutDir) -> Result<i32>,
    has_streams: impl Fn(&OutDir) -> bool,
) -> Result<i32> {
    let mut procs = crate::compare::select_processes(dir, opts.process)?;
    if opts.thread.is_some() {
        procs.truncate(1);
    }
    let multi = procs.len() > 1;
    let mut status = EXIT_OK;
    for p in &procs {
        if multi && !has_streams(p) {
            continue;
        }
        let s = f(p)?;
        if s == EXIT_FAIL || status == EXIT_OK {
            status = if status == EXIT_FAIL { EXIT_FAIL } else { s };
        }
    }
    Ok(status)
}

fn dispatch(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Help => {
            print!("{USAGE}");
            Ok(EXIT_OK)
        }
        Command::Dump { file, libipt, raw } => run_dump(&file, libipt, raw),
        Command::Decode { dir, opts } => {
            let dir = OutDir::open(&dir)?;
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
            for_each_process(&dir, &opts, |d| cmd_decode(d, &opts, &mut out), |d| !d.threads.is_empty())
        }
        Command::Compare { dir, opts } => {
            let dir = OutDir::open(&dir)?;
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            cmd_compare(&dir, &opts, &mut out)
        }
        Command::RtitDump { file, cycle_acc } => {
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
            cmd_rtit_dump(&file, cycle_acc, &mut out)
        }
        Command::RtitDecode { dir, opts } => {
            let dir = OutDir::open(&dir)?;
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
            for_each_process(&dir, &opts, |d| cmd_rtit_decode(d, &opts, &mut out), |d| !d.rtits.is_empty())
        }
        Command::Perf { dir, out } => crate::perf_data::cmd_perf(&dir, out.as_deref()),
    }
}

/// Run with the arguments after the program name; returns the exit status.
pub fn run(args: Vec<OsString>) -> i32 {
    let r = if args.first().and_then(|a| a.to_str()) == Some("bts-expect") {
        crate::bts_expect::cmd_bts_expect(args[1..].to_vec())
    } else {
        parse(args).and_then(dispatch)
    };
    match r {
        Ok(code) => code,
        Err(e @ ToolError::Usage(_)) => {
            let _ = io::stdout().flush();
            eprintln!("pttrace: {e}");
            eprintln!("Try 'pttrace --help' for usage.");
            EXIT_USAGE
        }
        Err(e) => {
            let _ = io::stdout().flush();
            eprintln!("pttrace: error: {e}");
            e.exit_code()
        }
    }
}
