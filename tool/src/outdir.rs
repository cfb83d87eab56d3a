//! The plugin's output directory: `meta.txt`, `thread-N.pt` (Intel PT) or `thread-N.rtit`
//! (Atom RTIT), `thread-N.truth`, `code.img`, `maps.txt`; and in user mode one directory
//! `proc-PID` (or `proc-PID.K`) with the same files for every process the traced program forked,
//! its children's included (issue 19).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::code_image::{CodeImage, LoadStats};
use crate::error::{Result, ToolError};

/// Parsed `meta.txt` (`key=value` lines; unknown keys are kept).
#[derive(Debug, Default, Clone)]
pub struct Meta {
    pub entries: BTreeMap<String, String>,
    /// `cpu=family/model/stepping`, for libipt's errata configuration.
    pub cpu: Option<(u16, u8, u8)>,
    pub warnings: Vec<String>,
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Parse `family/model/stepping` (decimal or `0x` hex components).
pub fn parse_cpu(s: &str) -> Option<(u16, u8, u8)> {
    let mut it = s.split('/');
    let f = u16::try_from(parse_num(it.next()?)?).ok()?;
    let m = u8::try_from(parse_num(it.next()?)?).ok()?;
    let st = u8::try_from(parse_num(it.next()?)?).ok()?;
    it.next().is_none().then_some((f, m, st))
}

impl Meta {
    pub fn parse(text: &str) -> Meta {
        let mut meta = Meta::default();
        for (no, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) => {
                    meta.entries
                        .insert(k.trim().to_string(), v.trim().to_string());
                }
                None => meta
                    .warnings
                    .push(format!("meta.txt:{}: ignoring line without '='", no + 1)),
            }
        }
        if let Some(c) = meta.entries.get("cpu") {
            meta.cpu = parse_cpu(c);
            if meta.cpu.is_none() {
                let w = format!(
                    "meta.txt: cannot parse cpu={c:?} (expected family/model/stepping); ignoring"
                );
                meta.warnings.push(w);
            }
        }
        if let Some(f) = meta.entries.get("format") {
            if f != "pttrace-1" {
                let w =
                    format!("meta.txt: unknown format={f:?} (expected pttrace-1); trying anyway");
                meta.warnings.push(w);
            }
        }
        meta
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }
}

/// An output directory with its discovered per-thread files.
#[derive(Debug, Clone)]
pub struct OutDir {
    pub path: PathBuf,
    pub meta: Meta,
    /// Thread numbers that have a `thread-N.pt`, ascending.
    pub threads: Vec<u32>,
    /// Thread numbers that have a `thread-N.truth`, ascending.
    pub truths: Vec<u32>,
    /// Thread numbers that have a `thread-N.rtit` (Atom RTIT stream), ascending.
    pub rtits: Vec<u32>,
    /// Part of a run with several processes: threads are named with their process
    /// (`thread_label`).
    pub multi: bool,
}

/// `thread-N.<ext>` -> N (N must be a plain decimal number).
fn thread_number(name: &str, ext: &str) -> Option<u32> {
    let n = name
        .strip_prefix("thread-")?
        .strip_suffix(ext)?
        .strip_suffix('.')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

impl OutDir {
    /// Open and scan `path`. `meta.txt` is optional.
    pub fn open(path: &Path) -> Result<OutDir> {
        let md = std::fs::metadata(path).map_err(|e| ToolError::io("cannot access", path, e))?;
        if !md.is_dir() {
            return Err(ToolError::input(format!(
                "{} is not a directory",
                path.display()
            )));
        }
        let rd = std::fs::read_dir(path).map_err(|e| ToolError::io("cannot list", path, e))?;
        let mut threads = Vec::new();
        let mut truths = Vec::new();
        let mut rtits = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| ToolError::io("cannot list", path, e))?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(n) = thread_number(name, "pt") {
                threads.push(n);
            } else if let Some(n) = thread_number(name, "truth") {
                truths.push(n);
            } else if let Some(n) = thread_number(name, "rtit") {
                rtits.push(n);
            }
        }
        threads.sort_unstable();
        threads.dedup();
        truths.sort_unstable();
        truths.dedup();
        rtits.sort_unstable();
        rtits.dedup();

        let meta_path = path.join("meta.txt");
        let meta = match std::fs::read(&meta_path) {
            Ok(bytes) => Meta::parse(&String::from_utf8_lossy(&bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Meta::default(),
            Err(e) => return Err(ToolError::io("cannot read", &meta_path, e)),
        };
        Ok(OutDir {
            path: path.to_path_buf(),
            meta,
            threads,
            truths,
            rtits,
            multi: false,
        })
    }

    /// Every process of the run: this directory (the process the run started with) first, then
    /// each forked process's `proc-PID` directory by pid. A run that forked nothing is just this
    /// directory, unchanged; otherwise every directory has `multi` set.
    pub fn processes(&self) -> Result<Vec<OutDir>> {
        let rd = std::fs::read_dir(&self.path).map_err(|e| ToolError::io("cannot list", &self.path, e))?;
        let mut children = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| ToolError::io("cannot list", &self.path, e))?;
            let name = ent.file_name();
            let Some(key) = name.to_str().and_then(pttrace_core::process_dir::parse) else { continue };
            if ent.path().is_dir() {
                children.push((key, ent.path()));
            }
        }
        children.sort();
        let mut all = vec![self.clone()];
        for (_, p) in children {
            all.push(OutDir::open(&p)?);
        }
        let multi = all.len() > 1;
        for d in &mut all {
            d.multi = multi;
        }
        Ok(all)
    }

    /// The process id from meta.txt's `pid=` (None before issue 19 or in full-system mode).
    pub fn pid(&self) -> Option<u32> {
        self.meta.get("pid").and_then(|p| p.parse().ok())
    }

    /// How thread N is named in headers and messages: `thread N`, or in a run with several
    /// processes `process PID thread N` (the directory's name if meta.txt has no pid).
    pub fn thread_label(&self, n: u32) -> String {
        if !self.multi {
            return format!("thread {n}");
        }
        match self.pid() {
            Some(pid) => format!("process {pid} thread {n}"),
            None => format!("process {} thread {n}", self.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()),
        }
    }

    /// Was the run cut short? The plugin writes `end=` into meta.txt when it has finished every
    /// stream (at exit, execve or a default-fatal signal); a pttrace meta.txt without it means
    /// the process was killed (SIGKILL, OOM), crashed or ran out of disk, and each stream and
    /// truth file ends where its bytes stopped reaching the disk.
    pub fn cut_short(&self) -> bool {
        self.meta.get("format").is_some() && self.meta.get("end").is_none()
    }

    /// The warning printed for a run that was cut short.
    pub fn cut_short_warning(&self) -> String {
        format!(
            "pttrace: warning: {}: the run did not end in order (meta.txt has no end=: killed, crashed or out of disk); streams are truncated and decoded up to where their bytes stop",
            self.path.display()
        )
    }

    /// Is this an Atom RTIT trace? `trace=rtit` in meta.txt says so; without a `trace=` line,
    /// `thread-N.rtit` streams and no `thread-N.pt` do.
    pub fn is_rtit(&self) -> bool {
        match self.meta.get("trace") {
            Some(t) => t == "rtit",
            None => !self.rtits.is_empty() && self.threads.is_empty(),
        }
    }

    /// RTIT_CTL[1] Cycle_Acc of an RTIT trace, from meta.txt's `rtit_ctl=` (0 without one): the
    /// packet parser must know whether cycle count packets follow (§4.2.15).
    pub fn rtit_cycle_acc(&self) -> bool {
        self.meta.get("rtit_ctl").and_then(parse_num).is_some_and(|ctl| ctl & 2 != 0)
    }

    /// The TraceStop ranges of an RTIT trace, from meta.txt's `rtit_events=` (TraceStop_Event_ID)
    /// and `rtit_lip=LIP0,LIP1,LIP2,LIP3`: RANGE0 = [LIP0, LIP2), RANGE1 = [LIP1, LIP3) (§3.3.5).
    pub fn rtit_stop_ranges(&self) -> [Option<(u64, u64)>; 2] {
        use pttrace_core::rtit::msr::{EventId, RtitEvents};
        let events = self.meta.get("rtit_events").and_then(parse_num).map(RtitEvents);
        let lip: Vec<u64> = self
            .meta
            .get("rtit_lip")
            .map(|l| l.split(',').filter_map(parse_num).collect())
            .unwrap_or_default();
        let (Some(events), [l0, l1, l2, l3]) = (events, lip.as_slice()) else {
            return [None; 2];
        };
        let (r0, r1) = (Some((*l0, *l2)), Some((*l1, *l3)));
        match events.stop_event() {
            EventId::Range0 => [r0, None],
            EventId::Range1 => [None, r1],
            EventId::Range0Or1 => [r0, r1],
            _ => [None; 2],
        }
    }

    /// RTIT_EVENTS of an RTIT trace selects an address range for Filter_Event_ID or
    /// TraceStop_Event_ID (`FlowOptions::range_exits`); true when meta.txt does not say.
    pub fn rtit_range_exits(&self) -> bool {
        use pttrace_core::rtit::msr::{EventId, RtitEvents};
        let range = |e: EventId| matches!(e, EventId::Range0 | EventId::Range1 | EventId::Range0Or1);
        self.meta
            .get("rtit_events")
            .and_then(parse_num)
            .map(RtitEvents)
            .is_none_or(|e| range(e.filter_event()) || range(e.stop_event()))
    }

    pub fn rtit_path(&self, n: u32) -> PathBuf {
        self.path.join(format!("thread-{n}.rtit"))
    }

    pub fn read_rtit(&self, n: u32) -> Result<Vec<u8>> {
        let p = self.rtit_path(n);
        std::fs::read(&p).map_err(|e| ToolError::io("cannot read", &p, e))
    }

    pub fn pt_path(&self, n: u32) -> PathBuf {
        self.path.join(format!("thread-{n}.pt"))
    }

    pub fn truth_path(&self, n: u32) -> PathBuf {
        self.path.join(format!("thread-{n}.truth"))
    }

    pub fn code_path(&self) -> PathBuf {
        self.path.join("code.img")
    }

    /// code.img: a record cut off at its end is a warning in a run that was cut short (its
    /// bytes stopped there), and in a PTCODE1 file (as it always was); in a versioned one of a
    /// run that ended in order it is an error (the file was damaged since).
    pub fn load_code(&self) -> Result<(CodeImage, LoadStats)> {
        let (code, stats) = CodeImage::load(&self.code_path())?;
        if stats.truncated && stats.versioned && !self.cut_short() && self.meta.get("end").is_some() {
            return Err(ToolError::input(format!(
                "{}: truncated ({}); meta.txt says the run ended in order (end={}): the file was damaged",
                self.code_path().display(),
                stats.warnings.last().map(String::as_str).unwrap_or("a record is cut off"),
                self.meta.get("end").unwrap_or("")
            )));
        }
        Ok((code, stats))
    }

    /// CPU (family, model, stepping) for libipt's errata, from `meta.txt`.
    pub fn cpu(&self) -> Option<(u16, u8, u8)> {
        self.meta.cpu
    }

    pub fn read_pt(&self, n: u32) -> Result<Vec<u8>> {
        let p = self.pt_path(n);
        std::fs::read(&p).map_err(|e| ToolError::io("cannot read", &p, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(thread_number("thread-1.pt", "pt"), Some(1));
        assert_eq!(thread_number("thread-12.truth", "truth"), Some(12));
        assert_eq!(thread_number("thread-12.truth", "pt"), None);
        assert_eq!(thread_number("thread-.pt", "pt"), None);
        assert_eq!(thread_number("thread-+1.pt", "pt"), None);
        assert_eq!(thread_number("thread-1.pt~", "pt"), None);
        assert_eq!(thread_number("thread-1xpt", "pt"), None);
        assert_eq!(thread_number("thread-3.rtit", "rtit"), Some(3));
        assert_eq!(thread_number("thread-3.rtit", "pt"), None);
    }

    #[test]
    fn a_run_with_forked_processes_names_them_in_thread_labels() {
        let root = std::env::temp_dir().join(format!("pttrace-outdir-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (d, pid) in [("", 100), ("proc-205", 205), ("proc-31", 31), ("proc-31.2", 31)] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("meta.txt"), format!("format=pttrace-1\npid={pid}\n")).unwrap();
            std::fs::write(root.join(d).join("thread-1.pt"), b"").unwrap();
        }
        std::fs::write(root.join("proc-7"), b"not a directory").unwrap();
        let all = OutDir::open(&root).unwrap().processes().unwrap();
        let names: Vec<String> = all.iter().map(|d| d.thread_label(1)).collect();
        assert_eq!(names, ["process 100 thread 1", "process 31 thread 1", "process 31 thread 1", "process 205 thread 1"]);
        assert!(all[2].path.ends_with("proc-31.2"));
        std::fs::remove_dir_all(&root).unwrap();
        let single = std::env::temp_dir().join(format!("pttrace-outdir-single-{}", std::process::id()));
        std::fs::create_dir_all(&single).unwrap();
        let all = OutDir::open(&single).unwrap().processes().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].thread_label(3), "thread 3");
        std::fs::remove_dir_all(&single).unwrap();
    }

    #[test]
    fn meta() {
        let m = Meta::parse("format=pttrace-1\nmode=user\nbinary=/bin/x\ncpu=6/85/4\n\n");
        assert_eq!(m.cpu, Some((6, 85, 4)));
        assert_eq!(m.get("binary"), Some("/bin/x"));
        assert!(m.warnings.is_empty());
        let m = Meta::parse("cpu=6/0x55/4\nformat=other\njunk\n");
        assert_eq!(m.cpu, Some((6, 0x55, 4)));
        assert_eq!(m.warnings.len(), 2);
        let m = Meta::parse("trace=rtit\nrtit_ctl=0x290b\nrtit_events=0x0f\nrtit_lip=0x401000,0x402000,0x401100,0x402001\n");
        let d = OutDir { path: PathBuf::new(), meta: m, threads: vec![], truths: vec![], rtits: vec![1], multi: false };
        assert!(d.is_rtit() && d.rtit_cycle_acc());
        // Filter_Event_ID 111b (always on), TraceStop_Event_ID 001b (RANGE1).
        assert_eq!(d.rtit_stop_ranges(), [None, Some((0x402000, 0x402001))]);
        let m = Meta::parse("cpu=6/300/4");
        assert_eq!(m.cpu, None);
        assert_eq!(m.warnings.len(), 1);
    }
}
