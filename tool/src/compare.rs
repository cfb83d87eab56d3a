//! `pttrace compare DIR`: decode every thread that has a `thread-N.truth`
//! and compare the reconstructed instruction addresses with the truth
//! (libipt for Intel PT, pttrace_core's RTIT decoder for Atom RTIT traces),
//! in every process of the run (DIR and its `proc-PID` directories).

use std::io::Write;
use std::path::Path;
use std::rc::Rc;

use crate::decode::{decode_to_vec, print_decode_error, print_load_warnings};
use crate::error::{Result, ToolError, EXIT_FAIL, EXIT_OK, EXIT_TRUNCATED};
use crate::hexfmt::parse_hex;
use crate::outdir::OutDir;
use crate::rtit::decode_rtit;

/// Parse a truth file: one hex address per line (optional `0x`), blank
/// lines ignored. Errors name the offending line.
pub fn parse_truth(data: &[u8]) -> std::result::Result<Vec<u64>, String> {
    let mut v = Vec::with_capacity(data.len() / 7);
    for (no, line) in data.split(|&b| b == b'\n').enumerate() {
        if line.trim_ascii().is_empty() {
            continue;
        }
        match parse_hex(line) {
            Some(a) => v.push(a),
            None => {
                let shown = String::from_utf8_lossy(&line[..line.len().min(40)]).into_owned();
                return Err(format!("line {}: not a hex address: {shown:?}", no + 1));
            }
        }
    }
    Ok(v)
}

pub fn load_truth(path: &Path) -> Result<Vec<u64>> {
    load_truth_cut(path, false)
}

/// `cut_short`: the run was cut short, so the file may end in the middle of a line; that partial
/// line is dropped.
pub fn load_truth_cut(path: &Path, cut_short: bool) -> Result<Vec<u64>> {
    let mut data = std::fs::read(path).map_err(|e| ToolError::io("cannot read", path, e))?;
    if cut_short {
        let whole = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        data.truncate(whole);
    }
    parse_truth(&data).map_err(|e| ToolError::input(format!("{}: {e}", path.display())))
}

/// First position where the sequences differ (`None` side = past the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstMismatch {
    pub index: usize,
    pub decoded: Option<u64>,
    pub truth: Option<u64>,
}

/// Result of comparing one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    pub decoded: usize,
    pub truth: usize,
    /// Positions `< min(decoded, truth)` whose addresses differ.
    pub mismatches: u64,
    /// First differing position, including a length difference.
    pub first: Option<FirstMismatch>,
}

impl Comparison {
    pub fn ok(&self) -> bool {
        self.first.is_none()
    }

    pub fn compared(&self) -> usize {
        self.decoded.min(self.truth)
    }
}

pub fn compare_addrs(decoded: &[u64], truth: &[u64]) -> Comparison {
    let common = decoded.len().min(truth.len());
    let mut mismatches = 0u64;
    let mut first = None;
    for i in 0..common {
        if decoded[i] != truth[i] {
            mismatches += 1;
            if first.is_none() {
                first = Some(FirstMismatch {
                    index: i,
                    decoded: Some(decoded[i]),
                    truth: Some(truth[i]),
                });
            }
        }
    }
    if first.is_none() && decoded.len() != truth.len() {
        first = Some(FirstMismatch {
            index: common,
            decoded: decoded.get(common).copied(),
            truth: truth.get(common).copied(),
        });
    }
    Comparison {
        decoded: decoded.len(),
        truth: truth.len(),
        mismatches,
        first,
    }
}

fn opt_hex(v: Option<u64>) -> String {
    match v {
        Some(a) => format!("{a:x}"),
        None => "<end>".to_string(),
    }
}

/// The per-thread result line (without trailing newline).
pub fn format_comparison(thread: &str, c: &Comparison, decode_errors: u64) -> String {
    let mut s = format!(
        "{thread}: decoded {}, truth {}, mismatches {}",
        c.decoded, c.truth, c.mismatches
    );
    if let Some(f) = &c.first {
        s += &format!(
            ", first mismatch at index {} (decoded {}, truth {})",
            f.index,
            opt_hex(f.decoded),
            opt_hex(f.truth)
        );
    }
    s += &format!(", decode errors {decode_errors}");
    s
}

/// Options of `pttrace compare`.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub thread: Option<u32>,
    /// Only the process with this pid (a run with forked processes).
    pub process: Option<u32>,
    /// Lines of context printed around the first mismatch.
    pub context: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            thread: None,
            process: None,
            context: 3,
        }
    }
}

fn write_context<W: Write>(
    out: &mut W,
    d: &[u64],
    t: &[u64],
    f: &FirstMismatch,
    ctx: usize,
) -> std::io::Result<()> {
    let lo = f.index.saturating_sub(ctx);
    let hi = (f.index + ctx + 1).min(d.len().max(t.len()));
    writeln!(out, "  {:>10}  {:>16}  {:>16}", "index", "decoded", "truth")?;
    for i in lo..hi {
        let (a, b) = (d.get(i).copied(), t.get(i).copied());
        let mark = if a != b { "  <==" } else { "" };
        writeln!(
            out,
            "  {:>10}  {:>16}  {:>16}{mark}",
            i,
            opt_hex(a),
            opt_hex(b)
        )?;
    }
    Ok(())
}

/// What the compared threads of all processes add up to.
#[derive(Default)]
struct Tally {
    threads: usize,
    compared: u64,
    mismatches: u64,
    errors: u64,
    failed: bool,
    cut_short: bool,
}

/// The processes `--process` selects (all without it), in `OutDir::processes` order.
pub fn select_processes(dir: &OutDir, process: Option<u32>) -> Result<Vec<OutDir>> {
    let all = dir.processes()?;
    match process {
        None => Ok(all),
        Some(pid) => {
            let sel: Vec<OutDir> = all.into_iter().filter(|d| d.pid() == Some(pid)).collect();
            if sel.is_empty() {
                return Err(ToolError::input(format!("no process {pid} in {}", dir.path.display())));
            }
            Ok(sel)
        }
    }
}

/// `pttrace compare DIR`: every process of the run (one total line). Returns the exit status.
pub fn cmd_compare<W: Write>(dir: &OutDir, opts: &CompareOptions, out: &mut W) -> Result<i32> {
    let wr = |e: std::io::Error| ToolError::input(format!("cannot write output: {e}"));
    let mut procs = select_processes(dir, opts.process)?;
    if opts.thread.is_some() {
        // --thread N names a thread of one process: the first selected.
        procs.truncate(1);
    }
    let mut tally = Tally::default();
    let multi = procs.first().is_some_and(|p| p.multi);
    let mut compared_procs = 0;
    for p in &procs {
        if multi && p.truths.is_empty() && opts.thread.is_none() {
            let streams = if p.is_rtit() { &p.rtits } else { &p.threads };
            for &n in streams {
                writeln!(out, "{}: no truth file, skipped", p.thread_label(n)).map_err(wr)?;
            }
            continue;
        }
        compare_process(p, opts, out, &mut tally)?;
        compared_procs += 1;
    }
    if tally.threads == 0 {
        return Err(ToolError::input(format!(
            "no thread-N.truth files in {} or its proc-PID directories: nothing to compare",
            dir.path.display()
        )));
    }
    writeln!(
        out,
        "total: {}{} threads, compared {} instructions, mismatches {}, decode errors {}: {}",
        if multi { format!("{compared_procs} processes, ") } else { String::new() },
        tally.threads,
        tally.compared,
        tally.mismatches,
        tally.errors,
        if tally.failed { "FAIL" } else { "OK" }
    )
    .map_err(wr)?;
    out.flush().map_err(wr)?;
    Ok(if tally.failed {
        EXIT_FAIL
    } else if tally.cut_short {
        EXIT_TRUNCATED
    } else {
        EXIT_OK
    })
}

/// Compare the threads of one process's directory (per-thread lines; the totals go to `tally`).
fn compare_process<W: Write>(dir: &OutDir, opts: &CompareOptions, out: &mut W, tally: &mut Tally) -> Result<()> {
    let wr = |e: std::io::Error| ToolError::input(format!("cannot write output: {e}"));
    let threads: Vec<u32> = match opts.thread {
        Some(n) => {
            if !dir.truths.contains(&n) {
                return Err(ToolError::input(format!(
                    "{} not found",
                    dir.truth_path(n).display()
                )));
            }
            vec![n]
        }
        None => dir.truths.clone(),
    };
    if threads.is_empty() {
        return Err(ToolError::input(format!(
            "no thread-N.truth files in {}: nothing to compare",
            dir.path.display()
        )));
    }
    let (code, load) = dir.load_code()?;
    print_load_warnings(dir, &load.warnings);
    let code = Rc::new(code);
    let cpu = dir.cpu();
    let rtit = dir.is_rtit();
    let streams = if rtit { &dir.rtits } else { &dir.threads };
    let cut_short = dir.cut_short();
    if cut_short {
        eprintln!("{}; each stream is compared with its truth as far as both go", dir.cut_short_warning());
    }

    // Threads with a trace but no truth are listed (in order) as skipped.
    let mut listed: Vec<u32> = threads.clone();
    if opts.thread.is_none() {
        listed.extend(streams.iter().filter(|n| !dir.truths.contains(n)));
        listed.sort_unstable();
    }

    tally.cut_short |= cut_short;
    tally.threads += threads.len();
    for &n in &listed {
        let label = dir.thread_label(n);
        if !threads.contains(&n) {
            writeln!(out, "{label}: no truth file, skipped").map_err(wr)?;
            continue;
        }
        let mut truth = load_truth_cut(&dir.truth_path(n), cut_short)?;
        let (decoded, errors) = if rtit && streams.contains(&n) {
            let trace = dir.read_rtit(n)?;
            let d = decode_rtit(&trace, &code, n, dir);
            if let Some(e) = &d.error {
                eprintln!("pttrace: {label}: RTIT decode error: {e}");
            }
            (d.ips, u64::from(d.error.is_some()))
        } else if !rtit && streams.contains(&n) {
            let trace = dir.read_pt(n)?;
            let mut printed = 0;
            let (ips, stats) = decode_to_vec(&trace, &code, n, cpu, |e| {
                if cut_short && e.message.starts_with("trace ends with a truncated packet") {
                    eprintln!("pttrace: {label}: stream truncated at {}: {}", e.offset_str(), e.message);
                } else {
                    print_decode_error(&label, e, &mut printed)
                }
            });
            (ips, stats.errors - if cut_short { stats.truncated_tail } else { 0 })
        } else {
            let path = if rtit { dir.rtit_path(n) } else { dir.pt_path(n) };
            eprintln!("pttrace: {label}: {} is missing", path.display());
            (Vec::new(), 1)
        };
        let mut decoded = decoded;
        if cut_short {
            // Both files stop where their bytes stopped reaching the disk: compare the prefix
            // they share (the stream and the truth are flushed at the same intervals).
            let m = decoded.len().min(truth.len());
            writeln!(
                out,
                "{label}: run cut short: decoded {}, truth {}; comparing the first {m}",
                decoded.len(),
                truth.len()
            )
            .map_err(wr)?;
            decoded.truncate(m);
            truth.truncate(m);
        }
        let c = compare_addrs(&decoded, &truth);
        writeln!(out, "{}", format_comparison(&label, &c, errors)).map_err(wr)?;
        if let Some(f) = &c.first {
            if opts.context > 0 {
                write_context(out, &decoded, &truth, f, opts.context).map_err(wr)?;
            }
        }
        tally.failed |= !c.ok() || errors > 0;
        tally.compared += c.compared() as u64;
        tally.mismatches += c.mismatches;
        tally.errors += errors;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_parsing() {
        assert_eq!(
            parse_truth(b"401000\n0x401005\r\n\n401007").unwrap(),
            vec![0x401000, 0x401005, 0x401007]
        );
        assert!(parse_truth(b"401000\nzz\n")
            .unwrap_err()
            .starts_with("line 2:"));
        assert_eq!(parse_truth(b"").unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn comparing() {
        let c = compare_addrs(&[1, 2, 3], &[1, 2, 3]);
        assert!(c.ok());
        assert_eq!(c.compared(), 3);
        let c = compare_addrs(&[1, 5, 3, 6], &[1, 2, 3, 4]);
        assert_eq!(c.mismatches, 2);
        assert_eq!(
            c.first,
            Some(FirstMismatch {
                index: 1,
                decoded: Some(5),
                truth: Some(2)
            })
        );
        let c = compare_addrs(&[1, 2], &[1, 2, 3]);
        assert_eq!(c.mismatches, 0);
        assert!(!c.ok());
        assert_eq!(
            c.first,
            Some(FirstMismatch {
                index: 2,
                decoded: None,
                truth: Some(3)
            })
        );
        assert_eq!(
            format_comparison("thread 4", &c, 0),
            "thread 4: decoded 2, truth 3, mismatches 0, first mismatch at index 2 (decoded <end>, truth 3), decode errors 0"
        );
    }
}
