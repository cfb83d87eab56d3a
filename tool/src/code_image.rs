//! The code sideband `code.img` and the sparse memory image built from it.
//!
//! Two formats:
//! - `PTCODE2\n` (user mode since issue 19): versioned, see `pttrace_core::code_img`. The
//!   *base image* holds every byte as FIRST recorded; per thread, SWITCH records overlay a
//!   version's bytes from an instruction count on ([`ThreadView`]).
//! - `PTCODE1\n` (full-system mode, older user-mode runs): records
//!   `{ vaddr: u64 LE, len: u32 LE, bytes[len] }`; when records conflict the LATER one wins.
//!   All threads share the address space.
//!
//! The records are "painted" in file order onto 4 KiB pages, then the pages are flattened
//! into a sorted list of disjoint, non-adjacent segments for fast lookup.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Result, ToolError};

pub const MAGIC: &[u8; 8] = pttrace_core::code_img::MAGIC_V1;
pub use pttrace_core::code_img::MAGIC_V2;
use pttrace_core::code_img as fmt;
use std::collections::HashMap;
const RECORD_HEADER: usize = 12;
const PAGE_SHIFT: u32 = 12;
const PAGE_SIZE: usize = 1 << PAGE_SHIFT;

/// One contiguous run of known code bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub bytes: Vec<u8>,
}

impl Segment {
    /// One past the last byte (saturating at `u64::MAX`; the last byte of the
    /// address space can therefore not be represented, which is harmless).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.bytes.len() as u64)
    }
}

/// Statistics about the parse, useful for diagnostics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadStats {
    pub records: u64,
    pub record_bytes: u64,
    /// Records skipped because they are empty or wrap around the address space.
    pub skipped_records: u64,
    /// Bytes where a later record overwrote an earlier, *different* byte.
    pub conflicting_bytes: u64,
    /// Non-fatal problems (e.g. a truncated final record).
    pub warnings: Vec<String>,
    /// The file ends inside a record (a run cut short; for PTCODE2, an error for a run that
    /// ended in order).
    pub truncated: bool,
    /// A PTCODE2 (versioned) file.
    pub versioned: bool,
}

/// Sparse memory image: sorted, disjoint, non-adjacent segments (the base image), and for a
/// versioned code.img the versions and each thread's switches between them.
#[derive(Debug, Default, Clone)]
pub struct CodeImage {
    segments: Vec<Segment>,
    /// VERSION records by id: (address, bytes).
    versions: Vec<(u64, Vec<u8>)>,
    /// Thread -> (count, version id), ordered by count (file order among equal counts).
    switches: HashMap<u32, Vec<(u64, u32)>>,
    /// Thread -> OVF ordinal -> the count where decoding resumes.
    overflows: HashMap<u32, HashMap<u32, u64>>,
    /// The address of the first record (where the program started).
    first: Option<u64>,
}

struct Page {
    data: [u8; PAGE_SIZE],
    valid: [u64; PAGE_SIZE / 64],
}

impl Page {
    fn new() -> Box<Self> {
        Box::new(Page {
            data: [0; PAGE_SIZE],
            valid: [0; PAGE_SIZE / 64],
        })
    }
    #[inline]
    fn is_valid(&self, i: usize) -> bool {
        self.valid[i / 64] >> (i % 64) & 1 != 0
    }
}

/// Incremental builder; later `add` calls win over earlier ones (`first_wins`: earlier ones).
#[derive(Default)]
pub struct CodeImageBuilder {
    pages: BTreeMap<u64, Box<Page>>,
    stats: LoadStats,
    first_wins: bool,
}

impl CodeImageBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Paint `bytes` at `vaddr`. Returns false (and records nothing) if the
    /// range is empty or wraps past the end of the address space.
    pub fn add(&mut self, vaddr: u64, bytes: &[u8]) -> bool {
        self.stats.records += 1;
        if bytes.is_empty() || vaddr.checked_add(bytes.len() as u64 - 1).is_none() {
            self.stats.skipped_records += 1;
            return false;
        }
        self.stats.record_bytes += bytes.len() as u64;
        let mut addr = vaddr;
        let mut rest = bytes;
        while !rest.is_empty() {
            let page_no = addr >> PAGE_SHIFT;
            let off = (addr as usize) & (PAGE_SIZE - 1);
            let n = rest.len().min(PAGE_SIZE - off);
            let page = self.pages.entry(page_no).or_insert_with(Page::new);
            for (i, &b) in rest[..n].iter().enumerate() {
                let j = off + i;
                if page.is_valid(j) {
                    if page.data[j] != b {
                        self.stats.conflicting_bytes += 1;
                    }
                    if self.first_wins {
                        continue;
                    }
                } else {
                    page.valid[j / 64] |= 1 << (j % 64);
                }
                page.data[j] = b;
            }
            rest = &rest[n..];
            // May wrap to 0 only when rest is empty (checked above).
            addr = addr.wrapping_add(n as u64);
        }
        true
    }

    pub fn warn(&mut self, msg: String) {
        self.stats.warnings.push(msg);
    }

    pub fn finish(self) -> (CodeImage, LoadStats) {
        let mut segments: Vec<Segment> = Vec::new();
        for (page_no, page) in &self.pages {
            let base = page_no << PAGE_SHIFT;
            let mut i = 0;
            while i < PAGE_SIZE {
                if !page.is_valid(i) {
                    i += 1;
                    continue;
                }
                let run_start = i;
                while i < PAGE_SIZE && page.is_valid(i) {
                    i += 1;
                }
                let start = base + run_start as u64;
                let data = &page.data[run_start..i];
                match segments.last_mut() {
                    Some(last) if last.end() == start && last.end() != u64::MAX => {
                        last.bytes.extend_from_slice(data)
                    }
                    _ => segments.push(Segment {
                        start,
                        bytes: data.to_vec(),
                    }),
                }
            }
        }
        (CodeImage { segments, ..CodeImage::default() }, self.stats)
    }
}

impl CodeImage {
    /// Parse `code.img` contents. A truncated final record is ignored with a
    /// warning (the writer may have been killed mid-record); a bad magic is
    /// an error.
    pub fn parse(data: &[u8]) -> Result<(CodeImage, LoadStats)> {
        if data.len() >= MAGIC_V2.len() && &data[..MAGIC_V2.len()] == MAGIC_V2 {
            return Self::parse_v2(data);
        }
        if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
            return Err(ToolError::input(
                "code.img: bad magic (expected \"PTCODE1\\n\" or \"PTCODE2\\n\"); not a pttrace code sideband",
            ));
        }
        let first = data.get(MAGIC.len()..MAGIC.len() + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap()));
        let mut b = CodeImageBuilder::new();
        let mut pos = MAGIC.len();
        while pos < data.len() {
            if data.len() - pos < RECORD_HEADER {
                b.warn(format!(
                    "code.img: truncated record header at offset 0x{pos:x} ({} trailing bytes ignored)",
                    data.len() - pos
                ));
                b.stats.truncated = true;
                break;
            }
            let vaddr = u64::from_le_bytes(data[pos..pos + 8].try_into().unwrap());
            let len = u32::from_le_bytes(data[pos + 8..pos + 12].try_into().unwrap()) as usize;
            let body = pos + RECORD_HEADER;
            if data.len() - body < len {
                b.warn(format!(
                    "code.img: truncated record at offset 0x{pos:x} (vaddr 0x{vaddr:x}, len {len}, only {} bytes present; ignored)",
                    data.len() - body
                ));
                b.stats.truncated = true;
                break;
            }
            if !b.add(vaddr, &data[body..body + len]) && len != 0 {
                b.warn(format!(
                    "code.img: record at offset 0x{pos:x} wraps the address space (vaddr 0x{vaddr:x}, len {len}); ignored"
                ));
            }
            pos = body + len;
        }
        let (mut img, stats) = b.finish();
        img.first = first;
        Ok((img, stats))
    }

    /// A versioned code.img (`pttrace_core::code_img`). Unknown record kinds and switches to
    /// versions not defined before them are corruption (an error); a record cut off at the end
    /// is a truncation (`LoadStats::truncated`, a warning here).
    fn parse_v2(data: &[u8]) -> Result<(CodeImage, LoadStats)> {
        let corrupt = |pos: usize, what: String| {
            Err(ToolError::input(format!("corrupt at offset 0x{pos:x}: {what}")))
        };
        let mut b = CodeImageBuilder { first_wins: true, ..CodeImageBuilder::default() };
        b.stats.versioned = true;
        let mut versions: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut switches: HashMap<u32, Vec<(u64, u32)>> = HashMap::new();
        let mut overflows: HashMap<u32, HashMap<u32, u64>> = HashMap::new();
        let mut pos = MAGIC_V2.len();
        let u32_at = |p: usize| u32::from_le_bytes(data[p..p + 4].try_into().unwrap());
        let u64_at = |p: usize| u64::from_le_bytes(data[p..p + 8].try_into().unwrap());
        while pos < data.len() {
            let kind = data[pos];
            let need = match kind {
                fmt::KIND_VERSION => fmt::VERSION_HEADER,
                fmt::KIND_SWITCH => fmt::SWITCH_LEN,
                fmt::KIND_OVF => fmt::OVF_LEN,
                k => return corrupt(pos, format!("unknown record kind {k}")),
            };
            let need = if kind == fmt::KIND_VERSION && data.len() - pos >= need {
                need + u32_at(pos + 9) as usize
            } else {
                need
            };
            if data.len() - pos < need {
                b.warn(format!(
                    "code.img: truncated record at offset 0x{pos:x} ({} of {need} bytes present; ignored)",
                    data.len() - pos
                ));
                b.stats.truncated = true;
                break;
            }
            match kind {
                fmt::KIND_VERSION => {
                    let vaddr = u64_at(pos + 1);
                    let bytes = &data[pos + fmt::VERSION_HEADER..pos + need];
                    if bytes.is_empty() || vaddr.checked_add(bytes.len() as u64 - 1).is_none() {
                        return corrupt(pos, format!("version at 0x{vaddr:x} of {} bytes", bytes.len()));
                    }
                    b.add(vaddr, bytes);
                    versions.push((vaddr, bytes.to_vec()));
                }
                fmt::KIND_SWITCH => {
                    let (thread, count, v) = (u32_at(pos + 1), u64_at(pos + 5), u32_at(pos + 13));
                    if v as usize >= versions.len() {
                        return corrupt(pos, format!("thread {thread} switches to version {v}, but only {} are defined before", versions.len()));
                    }
                    switches.entry(thread).or_default().push((count, v));
                }
                _ => {
                    let (thread, ordinal, count) = (u32_at(pos + 1), u32_at(pos + 5), u64_at(pos + 9));
                    if count != fmt::UNKNOWN_COUNT {
                        overflows.entry(thread).or_default().insert(ordinal, count);
                    }
                }
            }
            pos += need;
        }
        for s in switches.values_mut() {
            // Stable: among equal counts the later record is applied later.
            s.sort_by_key(|&(count, _)| count);
        }
        let (mut img, stats) = b.finish();
        img.first = versions.first().map(|v| v.0);
        img.versions = versions;
        img.switches = switches;
        img.overflows = overflows;
        Ok((img, stats))
    }

    /// The address of the first record: where the program started.
    pub fn first_record(&self) -> Option<u64> {
        self.first
    }

    /// Some thread ran more than one version of some code (code was rewritten): the base image
    /// alone does not describe it.
    pub fn has_switches(&self) -> bool {
        !self.switches.is_empty()
    }

    /// Distinct versions recorded (0 for a PTCODE1 file).
    pub fn n_versions(&self) -> usize {
        self.versions.len()
    }

    pub fn load(path: &Path) -> Result<(CodeImage, LoadStats)> {
        let data = std::fs::read(path).map_err(|e| ToolError::io("cannot read", path, e))?;
        Self::parse(&data).map_err(|e| ToolError::input(format!("{}: {e}", path.display())))
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Total number of known bytes.
    pub fn size(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes.len() as u64).sum()
    }

    /// Index of the segment containing `addr`.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self.segments.partition_point(|s| s.start <= addr);
        if i == 0 {
            return None;
        }
        let s = &self.segments[i - 1];
        (addr - s.start < s.bytes.len() as u64).then_some(i - 1)
    }

    /// Copy bytes starting at `addr` into `buf`, stopping at the end of the
    /// contiguous known range. Returns the number of bytes copied (0 if
    /// `addr` is not mapped). `hint` caches the last segment index.
    #[inline]
    pub fn read(&self, addr: u64, buf: &mut [u8], hint: &mut usize) -> usize {
        let idx = match self.segments.get(*hint) {
            Some(s) if addr >= s.start && addr - s.start < s.bytes.len() as u64 => *hint,
            _ => match self.find(addr) {
                Some(i) => {
                    *hint = i;
                    i
                }
                None => return 0,
            },
        };
        let s = &self.segments[idx];
        let off = (addr - s.start) as usize;
        let n = buf.len().min(s.bytes.len() - off);
        buf[..n].copy_from_slice(&s.bytes[off..off + n]);
        n
    }
}

/// The memory a thread's decoder sees: the base image overlaid by the thread's SWITCH records
/// up to its current instruction count (`advance`).
/// IPs `lo..=hi` of a trace are offsets in a code segment whose base is `base`: Intel PT IP
/// payloads are effective addresses (offsets from the CS base) on processors with
/// CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0 (SDM Vol. 3C §33.3.1.1), e.g. real-mode code with
/// CS != 0. libipt has no notion of segments: the decoder reads that code at `base + IP` and
/// reports `base + IP`, the linear address the code image and the ground truth use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeSegment {
    pub base: u64,
    pub lo: u64,
    pub hi: u64,
}

impl CodeSegment {
    /// The linear address of trace IP `ip` under `segments` (the first that holds it).
    pub fn linear(segments: &[CodeSegment], ip: u64) -> u64 {
        match segments.iter().find(|s| (s.lo..=s.hi).contains(&ip)) {
            Some(s) => s.base.wrapping_add(ip),
            None => ip,
        }
    }
}

pub struct ThreadView {
    code: std::rc::Rc<CodeImage>,
    segments: Vec<CodeSegment>,
    thread: u32,
    /// The thread's switches, and how many are applied.
    switches: Vec<(u64, u32)>,
    next: usize,
    /// The count of the next switch (u64::MAX: none): `advance` is one comparison per
    /// instruction until then.
    next_count: u64,
    overlay: HashMap<u64, Box<Page>>,
    hint: usize,
}

impl ThreadView {
    pub fn new(code: std::rc::Rc<CodeImage>, thread: u32) -> Self {
        let switches = code.switches.get(&thread).cloned().unwrap_or_default();
        let next_count = switches.first().map_or(u64::MAX, |s| s.0);
        ThreadView { code, segments: Vec::new(), thread, switches, next: 0, next_count, overlay: HashMap::new(), hint: 0 }
    }

    /// Read the IPs of `segments` at their linear addresses (`CodeSegment`).
    pub fn with_segments(mut self, segments: &[CodeSegment]) -> Self {
        self.segments = segments.to_vec();
        self
    }

    /// The decoder is at the thread's instruction `count`: apply every switch up to it.
    #[inline]
    pub fn advance(&mut self, count: u64) {
        if count < self.next_count {
            return;
        }
        self.apply(count);
    }

    #[inline(never)]
    fn apply(&mut self, count: u64) {
        while let Some(&(c, v)) = self.switches.get(self.next) {
            if c > count {
                break;
            }
            self.next += 1;
            let (vaddr, ref bytes) = self.code.versions[v as usize];
            for (i, &b) in bytes.iter().enumerate() {
                let a = vaddr + i as u64;
                let page = self.overlay.entry(a >> PAGE_SHIFT).or_insert_with(Page::new);
                let j = (a as usize) & (PAGE_SIZE - 1);
                page.data[j] = b;
                page.valid[j / 64] |= 1 << (j % 64);
            }
        }
        self.next_count = self.switches.get(self.next).map_or(u64::MAX, |s| s.0);
    }

    /// The count at which the thread's `ordinal`-th overflow (1-based) resumes, if recorded.
    pub fn overflow_count(&self, ordinal: u32) -> Option<u64> {
        self.code.overflows.get(&self.thread)?.get(&ordinal).copied()
    }

    /// Copy the bytes at `addr` as the thread sees them now into `buf`, up to the end of the
    /// contiguous known range; returns how many (0: nothing mapped at `addr`).
    #[inline]
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        if let Some(s) = self.segments.iter().find(|s| (s.lo..=s.hi).contains(&addr)).copied() {
            // Not past the segment's end: the bytes after it belong to other IPs.
            let n = buf.len().min((s.hi - addr).saturating_add(1).min(usize::MAX as u64) as usize);
            return self.read_linear(s.base.wrapping_add(addr), &mut buf[..n]);
        }
        self.read_linear(addr, buf)
    }

    fn read_linear(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        let base = self.code.read(addr, buf, &mut self.hint);
        if self.overlay.is_empty() {
            return base;
        }
        let mut page_no = u64::MAX;
        let mut page: Option<&Page> = None;
        for (i, slot) in buf.iter_mut().enumerate() {
            let Some(a) = addr.checked_add(i as u64) else { return i };
            if a >> PAGE_SHIFT != page_no {
                page_no = a >> PAGE_SHIFT;
                page = self.overlay.get(&page_no).map(|p| &**p);
            }
            let j = (a as usize) & (PAGE_SIZE - 1);
            match page {
                Some(p) if p.is_valid(j) => *slot = p.data[j],
                _ if i < base => {}
                _ => return i,
            }
        }
        buf.len()
    }
}

/// Serialize records in the `code.img` format (used by tests and tooling).
pub fn encode_records(records: &[(u64, &[u8])]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for (vaddr, bytes) in records {
        out.extend_from_slice(&vaddr.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(img: &CodeImage, addr: u64, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        let mut hint = 0;
        let got = img.read(addr, &mut buf, &mut hint);
        buf.truncate(got);
        buf
    }

    #[test]
    fn later_record_wins_and_segments_merge() {
        let data = encode_records(&[
            (0x1000, &[1, 2, 3, 4]),
            (0x1002, &[9, 9, 9]), // overlaps [0x1002,0x1004), extends to 0x1005
            (0x0ffe, &[7, 7]),    // adjacent below
            (0x2000, &[5]),
        ]);
        let (img, st) = CodeImage::parse(&data).unwrap();
        assert_eq!(st.records, 4);
        assert_eq!(st.conflicting_bytes, 2);
        assert!(st.warnings.is_empty());
        assert_eq!(
            img.segments(),
            &[
                Segment {
                    start: 0x0ffe,
                    bytes: vec![7, 7, 1, 2, 9, 9, 9]
                },
                Segment {
                    start: 0x2000,
                    bytes: vec![5]
                },
            ]
        );
        assert_eq!(read_all(&img, 0x1001, 15), vec![2, 9, 9, 9]);
        assert_eq!(read_all(&img, 0x1005, 15), Vec::<u8>::new());
        assert_eq!(read_all(&img, 0x0ffd, 15), Vec::<u8>::new());
        assert_eq!(read_all(&img, 0x2000, 15), vec![5]);
        assert_eq!(img.size(), 8);
    }

    #[test]
    fn crosses_pages() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let data = encode_records(&[(0x3ff0, &bytes), (0x4000, &[0xaa])]);
        let (img, _) = CodeImage::parse(&data).unwrap();
        assert_eq!(img.segments().len(), 1);
        assert_eq!(img.segments()[0].start, 0x3ff0);
        assert_eq!(img.segments()[0].bytes.len(), 5000);
        assert_eq!(read_all(&img, 0x3ffe, 3), vec![14, 15, 0xaa]);
    }

    #[test]
    fn truncated_and_bad_input() {
        assert!(CodeImage::parse(b"").is_err());
        assert!(CodeImage::parse(b"PTCODE2\nxxxx").is_err());
        let (img, st) = CodeImage::parse(MAGIC).unwrap();
        assert_eq!(img.segments().len(), 0);
        assert_eq!(st.records, 0);

        let mut data = encode_records(&[(0x1000, &[1, 2, 3]), (0x2000, &[4, 5, 6, 7])]);
        data.truncate(data.len() - 2); // cut the second record's body
        let (img, st) = CodeImage::parse(&data).unwrap();
        assert_eq!(
            img.segments(),
            &[Segment {
                start: 0x1000,
                bytes: vec![1, 2, 3]
            }]
        );
        assert_eq!(st.warnings.len(), 1);

        let mut data = encode_records(&[(0x1000, &[1])]);
        data.extend_from_slice(&[0, 0, 1]); // partial header
        let (img, st) = CodeImage::parse(&data).unwrap();
        assert_eq!(img.size(), 1);
        assert_eq!(st.warnings.len(), 1);

        // Huge length in garbage: treated as truncation, no allocation.
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&0x1000u64.to_le_bytes());
        data.extend_from_slice(&u32::MAX.to_le_bytes());
        data.extend_from_slice(&[1, 2]);
        let (img, st) = CodeImage::parse(&data).unwrap();
        assert_eq!(img.size(), 0);
        assert_eq!(st.warnings.len(), 1);

        // Wrapping record is skipped; empty record is fine.
        let data = encode_records(&[(u64::MAX - 1, &[1, 2, 3]), (0x10, &[])]);
        let (img, st) = CodeImage::parse(&data).unwrap();
        assert_eq!(img.size(), 0);
        assert_eq!(st.skipped_records, 2);
        assert_eq!(st.warnings.len(), 1);
    }

    fn v2(records: &[Vec<u8>]) -> Vec<u8> {
        let mut d = MAGIC_V2.to_vec();
        for r in records {
            d.extend_from_slice(r);
        }
        d
    }

    fn view_read(v: &mut ThreadView, addr: u64, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        let got = v.read(addr, &mut buf);
        buf.truncate(got);
        buf
    }

    #[test]
    fn offsets_in_a_code_segment_read_the_code_at_base_plus_offset() {
        // Real-mode code of segment 300H (base 3000H) at linear 3000H..3003H, other code at 10H.
        let d = v2(&[fmt::version_record(0x3000, &[1, 2, 3, 4]), fmt::version_record(0x10, &[7, 7])]);
        let (img, _) = CodeImage::parse(&d).unwrap();
        let seg = [CodeSegment { base: 0x3000, lo: 0, hi: 2 }];
        let mut v = ThreadView::new(std::rc::Rc::new(img), 1).with_segments(&seg);
        assert_eq!(view_read(&mut v, 0, 8), vec![1, 2, 3]); // not past the segment's end
        assert_eq!(view_read(&mut v, 1, 1), vec![2]);
        assert_eq!(view_read(&mut v, 0x10, 8), vec![7, 7]); // outside: linear
        assert_eq!(view_read(&mut v, 0x3001, 8), vec![2, 3, 4]);
        assert_eq!(CodeSegment::linear(&seg, 2), 0x3002);
        assert_eq!(CodeSegment::linear(&seg, 3), 3);
    }

    #[test]
    fn versions_switch_per_thread_at_their_count() {
        // Version 0 at 0x1000 (the base: first record wins), version 1 rewrites it, version 2
        // starts 2 bytes in and overlaps both.
        let d = v2(&[
            fmt::version_record(0x1000, &[1, 2, 3, 4]),
            fmt::version_record(0x1000, &[5, 6, 7, 8]),
            fmt::switch_record(1, 10, 1).to_vec(),
            fmt::version_record(0x1002, &[9, 9, 9]),
            fmt::switch_record(1, 20, 2).to_vec(),
            fmt::switch_record(2, 5, 0).to_vec(),
            fmt::switch_record(1, 30, 0).to_vec(),
            fmt::ovf_record(1, 1, 25).to_vec(),
            fmt::ovf_record(1, 2, fmt::UNKNOWN_COUNT).to_vec(),
        ]);
        let (img, st) = CodeImage::parse(&d).unwrap();
        assert!(!st.truncated);
        assert!(img.has_switches());
        assert_eq!(img.n_versions(), 3);
        assert_eq!(img.first_record(), Some(0x1000));
        assert_eq!(read_all(&img, 0x1000, 8), vec![1, 2, 3, 4, 9]);
        let img = std::rc::Rc::new(img);
        let mut t1 = ThreadView::new(img.clone(), 1);
        t1.advance(9);
        assert_eq!(view_read(&mut t1, 0x1000, 8), vec![1, 2, 3, 4, 9]);
        t1.advance(10);
        assert_eq!(view_read(&mut t1, 0x1000, 8), vec![5, 6, 7, 8, 9]);
        t1.advance(20);
        assert_eq!(view_read(&mut t1, 0x1000, 8), vec![5, 6, 9, 9, 9]);
        t1.advance(30);
        assert_eq!(view_read(&mut t1, 0x1000, 8), vec![1, 2, 3, 4, 9]);
        assert_eq!(view_read(&mut t1, 0x0fff, 8), Vec::<u8>::new());
        assert_eq!(t1.overflow_count(1), Some(25));
        assert_eq!(t1.overflow_count(2), None);
        // Another thread follows only its own switches.
        let mut t2 = ThreadView::new(img.clone(), 2);
        t2.advance(100);
        assert_eq!(view_read(&mut t2, 0x1001, 8), vec![2, 3, 4, 9]);
        let mut t3 = ThreadView::new(img, 3);
        t3.advance(100);
        assert_eq!(view_read(&mut t3, 0x1000, 2), vec![1, 2]);
    }

    #[test]
    fn v2_truncated_and_corrupt() {
        let d = v2(&[fmt::version_record(0x1000, &[1, 2, 3]), fmt::switch_record(1, 0, 0).to_vec()]);
        for cut in 1..fmt::SWITCH_LEN {
            let (img, st) = CodeImage::parse(&d[..d.len() - cut]).unwrap();
            assert!(st.truncated, "cut {cut}");
            assert_eq!(img.n_versions(), 1);
        }
        let (_, st) = CodeImage::parse(&d[..d.len() - fmt::SWITCH_LEN - 1]).unwrap();
        assert!(st.truncated);
        // A switch to a version not defined before it, an unknown kind, an empty version.
        let bad = v2(&[fmt::switch_record(1, 0, 0).to_vec()]);
        assert!(CodeImage::parse(&bad).unwrap_err().to_string().contains("corrupt"));
        let mut bad = d.clone();
        bad.push(7);
        assert!(CodeImage::parse(&bad).unwrap_err().to_string().contains("unknown record kind 7"));
        let bad = v2(&[fmt::version_record(0x1000, &[])]);
        assert!(CodeImage::parse(&bad).is_err());
        // Huge length: truncation, no allocation.
        let mut huge = MAGIC_V2.to_vec();
        huge.push(fmt::KIND_VERSION);
        huge.extend_from_slice(&0x1000u64.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(CodeImage::parse(&huge).unwrap().1.truncated);
    }

    #[test]
    fn top_of_address_space() {
        let data = encode_records(&[(u64::MAX - 1, &[1, 2])]);
        let (img, _) = CodeImage::parse(&data).unwrap();
        assert_eq!(read_all(&img, u64::MAX - 1, 15), vec![1, 2]);
        assert_eq!(read_all(&img, u64::MAX, 15), vec![2]);
    }
}
