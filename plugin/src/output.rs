//! Hand-off of trace bytes from vCPU threads to a writer thread.
//!
//! vCPU callbacks never touch files: they move filled buffers into a crossbeam channel, and one
//! background thread owns every output file. At exit the plugin sends `Sync` and waits for the
//! acknowledgement, so every byte the model produced is on disk before QEMU exits.
//!
//! A run that is killed (SIGKILL, the OOM killer) or runs out of disk keeps a decodable prefix
//! (issue 20): the writer writes code.img (and maps.txt) before any trace or truth byte that
//! follows it in the channel, so every instruction a stream on disk refers to is on disk too;
//! `Flush` (every `fatal_signal::FLUSH_INTERVAL`) writes everything buffered; after the first
//! write error nothing more is written, so the files stay a consistent prefix.

use crossbeam_channel::{unbounded, Receiver, Sender};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKey {
    /// thread-N.pt: the Intel PT stream of guest thread N.
    Pt(u32),
    /// thread-N.rtit: the Atom RTIT stream of guest thread N (vCPU N-1 in full-system mode).
    Rtit(u32),
    /// thread-N.truth: the ground-truth instruction log of guest thread N.
    Truth(u32),
    /// code.img: bytes of every translated instruction.
    Code,
    /// maps.txt: executable file mappings (user mode), one line each.
    Maps,
}

impl FileKey {
    fn file_name(self) -> String {
        match self {
            FileKey::Pt(n) => format!("thread-{n}.pt"),
            FileKey::Rtit(n) => format!("thread-{n}.rtit"),
            FileKey::Truth(n) => format!("thread-{n}.truth"),
            FileKey::Code => "code.img".to_string(),
            FileKey::Maps => "maps.txt".to_string(),
        }
    }
}

pub enum Msg {
    Data(FileKey, Vec<u8>),
    Close(FileKey),
    /// Flush every open file, then acknowledge.
    Sync(Sender<Result<(), String>>),
    /// Flush every open file (the bounded-interval flush).
    Flush,
}

/// The writer of one process: its channel and its directory. A forked child gets a new one
/// (`Output::restart`): the parent's writer thread does not exist there.
struct Writer {
    tx: Sender<Msg>,
    dir: PathBuf,
    /// code.img bytes not yet sent (`Output::send`): a short program translates a block every
    /// few microseconds, and a message per translation woke the writer thread each time.
    code: parking_lot::Mutex<Vec<u8>>,
}

/// code.img bytes gathered before they go to the writer on their own (they go earlier with the
/// next stream bytes, flush, sync or close).
const CODE_BATCH: usize = 256 * 1024;

pub struct Output {
    /// The current process's writer, leaked (a forked child replaces it and never frees the
    /// parent's: its queued bytes are the parent's, and its channel may have been locked by a
    /// thread that does not exist in the child).
    cur: std::sync::atomic::AtomicPtr<Writer>,
}

impl Output {
    /// Start the writer thread for files under `dir` (which must exist).
    pub fn start(dir: &Path) -> std::io::Result<Output> {
        Ok(Output { cur: std::sync::atomic::AtomicPtr::new(Box::leak(Box::new(spawn_writer(dir)?))) })
    }

    /// In a forked child (issue 19), before its first trace byte: from now on every byte goes to a
    /// new writer thread and files under `dir`. Whatever the parent had queued is dropped
    /// unwritten (it is the parent's, and the parent writes it).
    pub fn restart(&self, dir: &Path) -> std::io::Result<()> {
        let w = Box::leak(Box::new(spawn_writer(dir)?));
        self.cur.store(w, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    #[inline]
    fn w(&self) -> &'static Writer {
        // SAFETY: a leaked `Writer`, never freed.
        unsafe { &*self.cur.load(std::sync::atomic::Ordering::Acquire) }
    }

    /// The directory this process writes to.
    pub fn dir(&self) -> &'static Path {
        &self.w().dir
    }

    /// Hand `bytes` of file `key` to the writer. code.img bytes are gathered (`CODE_BATCH`) and
    /// go to the writer before anything else sent after them, under the same lock: so the
    /// writer still sees every code.img byte before the stream bytes that follow it (the order
    /// a killed run's decodable prefix rests on, see the module's comment).
    pub fn send(&self, key: FileKey, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let w = self.w();
        let mut code = w.code.lock();
        if key == FileKey::Code {
            code.extend_from_slice(&bytes);
            if code.len() >= CODE_BATCH {
                Self::send_code(w, &mut code);
            }
            return;
        }
        Self::send_code(w, &mut code);
        // The writer only stops after the channel is closed, which cannot happen while `self`
        // is alive.
        let _ = w.tx.send(Msg::Data(key, bytes));
    }

    /// Send the gathered code.img bytes (the caller holds their lock).
    fn send_code(w: &Writer, code: &mut Vec<u8>) {
        if !code.is_empty() {
            let _ = w.tx.send(Msg::Data(FileKey::Code, std::mem::take(code)));
        }
    }

    /// Send `msg` after the gathered code.img bytes.
    fn send_after_code(&self, msg: Msg) -> Result<(), crossbeam_channel::SendError<Msg>> {
        let w = self.w();
        let mut code = w.code.lock();
        Self::send_code(w, &mut code);
        w.tx.send(msg)
    }

    pub fn close(&self, key: FileKey) {
        let _ = self.send_after_code(Msg::Close(key));
    }

    /// Write everything sent so far to the files (without waiting).
    pub fn flush(&self) {
        let _ = self.send_after_code(Msg::Flush);
    }

    /// Wait until everything sent so far is written; returns the first write error, if any.
    pub fn sync(&self) -> Result<(), String> {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        self.send_after_code(Msg::Sync(ack_tx))
            .map_err(|_| "pttrace: writer thread is gone".to_string())?;
        ack_rx
            .recv()
            .map_err(|_| "pttrace: writer thread is gone".to_string())?
    }
}

fn spawn_writer(dir: &Path) -> std::io::Result<Writer> {
    let (tx, rx) = unbounded();
    let d = dir.to_path_buf();
    // The writer must never receive the guest's signals: qemu-user implements guest timers
    // and signals with host signals, and its handlers expect to run on a vCPU thread. A new
    // thread inherits the creator's mask, so block everything around the spawn.
    let spawned = with_all_signals_blocked(|| {
        std::thread::Builder::new()
            .name("pttrace-writer".into())
            .spawn(move || writer(d, rx))
    });
    spawned?;
    Ok(Writer { tx, dir: dir.to_path_buf(), code: parking_lot::Mutex::new(Vec::new()) })
}

fn writer(dir: PathBuf, rx: Receiver<Msg>) {
    let mut files: HashMap<FileKey, BufWriter<File>> = HashMap::new();
    let mut error: Option<String> = None;
    let note = |e: String, error: &mut Option<String>| {
        if error.is_none() {
            eprintln!("pttrace: {e}; nothing more is written, the files hold a decodable prefix");
            *error = Some(e);
        }
    };
    // Sideband first: code.img and maps.txt reach the files before the stream bytes after them.
    let flush_all = |files: &mut HashMap<FileKey, BufWriter<File>>, error: &mut Option<String>| {
        for key in [FileKey::Code, FileKey::Maps] {
            if let Some(f) = files.get_mut(&key) {
                if let Err(e) = f.flush() {
                    note(format!("writing {}: {e}", key.file_name()), error);
                }
            }
        }
        if error.is_some() {
            return;
        }
        for (key, f) in files.iter_mut() {
            if let Err(e) = f.flush() {
                note(format!("writing {}: {e}", key.file_name()), error);
                return;
            }
        }
    };
    // The bounded-interval flush: whatever arrives is on disk within FLUSH_INTERVAL.
    let interval = crate::fatal_signal::FLUSH_INTERVAL;
    let mut last_flush = std::time::Instant::now();
    loop {
        let msg = match rx.recv_timeout(interval) {
            Ok(m) => m,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Msg::Flush,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        if last_flush.elapsed() >= interval && error.is_none() {
            flush_all(&mut files, &mut error);
            last_flush = std::time::Instant::now();
        }
        match msg {
            Msg::Data(key, bytes) => {
                if error.is_some() {
                    continue;
                }
                if !matches!(key, FileKey::Code | FileKey::Maps) {
                    for side in [FileKey::Code, FileKey::Maps] {
                        if let Some(f) = files.get_mut(&side) {
                            if !f.buffer().is_empty() {
                                if let Err(e) = f.flush() {
                                    note(format!("writing {}: {e}", side.file_name()), &mut error);
                                }
                            }
                        }
                    }
                    if error.is_some() {
                        continue;
                    }
                }
                let f = match files.entry(key) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let path = dir.join(key.file_name());
                        match File::create(&path) {
                            Ok(f) => e.insert(BufWriter::with_capacity(1 << 20, f)),
                            Err(err) => {
                                note(
                                    format!("cannot create {}: {err}", path.display()),
                                    &mut error,
                                );
                                continue;
                            }
                        }
                    }
                };
                if let Err(e) = f.write_all(&bytes) {
                    note(format!("writing {}: {e}", key.file_name()), &mut error);
                }
            }
            Msg::Close(key) => {
                if let Some(mut f) = files.remove(&key) {
                    if error.is_none() {
                        if let Err(e) = f.flush() {
                            note(format!("writing {}: {e}", key.file_name()), &mut error);
                        }
                    }
                }
            }
            Msg::Flush => {
                if error.is_none() {
                    flush_all(&mut files, &mut error);
                }
            }
            Msg::Sync(ack) => {
                if error.is_none() {
                    flush_all(&mut files, &mut error);
                }
                let _ = ack.send(match &error {
                    Some(e) => Err(e.clone()),
                    None => Ok(()),
                });
            }
        }
        if error.is_some() && !files.is_empty() {
            // Discard what is buffered: dropping a BufWriter would try to write it.
            for (_, f) in files.drain() {
                let _ = f.into_parts();
            }
        }
    }
}

pub(crate) fn with_all_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: plain libc calls on stack-allocated signal sets of this thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// Replace `path` with `contents` whole (write a temporary file, then rename), so a full disk or
/// a kill never leaves it half-written.
pub fn replace_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp)?;
    f.write_all(contents)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// The code sideband (code.img, format in `pttrace_core::code_img`): one VERSION record per
/// distinct (address, bytes) pair translated, and, once code has been rewritten, per thread the
/// instruction count from which it runs each version (SWITCH records, `Shared::code_point`).
#[derive(Default)]
pub struct CodeImage {
    state: parking_lot::Mutex<CodeState>,
    /// A version's bytes differ from bytes recorded earlier: from now on threads record SWITCH
    /// records (until then the decoder's base image, every byte as first recorded, is exact).
    rewritten: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct CodeState {
    /// Block address -> its versions (bytes, version id).
    versions: HashMap<u64, Vec<(Vec<u8>, u32)>>,
    next_id: u32,
    /// The latest recorded bytes, 4 KiB pages (data, valid bits): finds rewrites that start at
    /// another address than the code they overwrite.
    pages: HashMap<u64, Box<([u8; 4096], [u64; 64])>>,
}

/// The code sideband of full-system mode (PTCODE1: later records win; no versions), the block
/// address written again only when its bytes change.
#[derive(Default)]
pub struct CodeImageV1 {
    seen: parking_lot::Mutex<HashMap<u64, Vec<u8>>>,
}

impl CodeImageV1 {
    /// Append the block's record `{pc u64, len u32, bytes}` unless identical bytes were written.
    pub fn record(&self, out: &Output, pc: u64, code: Vec<u8>) {
        let mut seen = self.seen.lock();
        if seen.get(&pc).is_some_and(|old| *old == code) {
            return;
        }
        let mut rec = Vec::with_capacity(12 + code.len());
        rec.extend_from_slice(&pc.to_le_bytes());
        rec.extend_from_slice(&(code.len() as u32).to_le_bytes());
        rec.extend_from_slice(&code);
        out.send(FileKey::Code, rec);
        seen.insert(pc, code);
    }
}

impl CodeImage {
    /// The version id of the block's bytes at `pc`; a new version is written to code.img.
    pub fn record(&self, out: &Output, pc: u64, code: Vec<u8>) -> u32 {
        let mut st = self.state.lock();
        if let Some(id) = st.versions.get(&pc).and_then(|vs| vs.iter().find(|v| v.0 == code)).map(|v| v.1) {
            // Seen before; it may come back after another version (A, B, A).
            if self.paint(&mut st, pc, &code) {
                self.rewritten.store(true, std::sync::atomic::Ordering::Release);
            }
            return id;
        }
        let id = st.next_id;
        st.next_id += 1;
        if self.paint(&mut st, pc, &code) {
            self.rewritten.store(true, std::sync::atomic::Ordering::Release);
        }
        out.send(FileKey::Code, pttrace_core::code_img::version_record(pc, &code));
        st.versions.entry(pc).or_default().push((code, id));
        id
    }

    /// Paint `code` at `pc` onto the latest bytes; true if a byte recorded before differs.
    /// One page lookup per page the bytes touch, not one per byte.
    fn paint(&self, st: &mut CodeState, pc: u64, code: &[u8]) -> bool {
        let mut conflict = false;
        let mut off = 0;
        while off < code.len() {
            let a = pc.wrapping_add(off as u64);
            let j0 = (a & 0xfff) as usize;
            let n = (4096 - j0).min(code.len() - off);
            let page = st.pages.entry(a >> 12).or_insert_with(|| Box::new(([0; 4096], [0; 64])));
            for (k, &b) in code[off..off + n].iter().enumerate() {
                let j = j0 + k;
                let bit = 1u64 << (j % 64);
                if page.1[j / 64] & bit != 0 {
                    conflict |= page.0[j] != b;
                } else {
                    page.1[j / 64] |= bit;
                }
            }
            page.0[j0..j0 + n].copy_from_slice(&code[off..off + n]);
            off += n;
        }
        conflict
    }

    /// How many instructions of version `version` of the block at `pc` start at or after `at`;
    /// None if no instruction of it starts at `at`.
    pub fn insns_from(&self, pc: u64, version: u32, at: u64) -> Option<u64> {
        let st = self.state.lock();
        let bytes = &st.versions.get(&pc)?.iter().find(|v| v.1 == version)?.0;
        let (mut ip, end) = (pc, pc + bytes.len() as u64);
        while ip < at {
            let c = pttrace_core::insn_class::classify(&bytes[(ip - pc) as usize..], ip, 64)?;
            ip += u64::from(c.len.max(1));
        }
        if ip != at {
            return None;
        }
        let mut n = 0;
        while ip < end {
            let c = pttrace_core::insn_class::classify(&bytes[(ip - pc) as usize..], ip, 64)?;
            ip += u64::from(c.len.max(1));
            n += 1;
        }
        Some(n)
    }

    /// Every VERSION record written so far, in version-id order: a forked child's code.img starts
    /// with them, so the version ids of the translations it inherits stay valid (issue 19).
    pub fn version_records(&self) -> Vec<u8> {
        let st = self.state.lock();
        let mut all: Vec<(u32, u64, &[u8])> =
            st.versions.iter().flat_map(|(&pc, vs)| vs.iter().map(move |(b, id)| (*id, pc, b.as_slice()))).collect();
        all.sort_unstable_by_key(|v| v.0);
        let mut out = Vec::new();
        for (_, pc, bytes) in all {
            out.extend_from_slice(&pttrace_core::code_img::version_record(pc, bytes));
        }
        out
    }

    /// fork(): held across the fork by the forking thread (`Shared::prepare_fork`), so the child
    /// finds it free.
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.state.lock());
    }

    /// After fork(), in the parent and in the child: releases `lock_for_fork`'s lock.
    ///
    /// # Safety
    /// Only after `lock_for_fork` on this thread (or, in the child, on the thread it continues).
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: held by `lock_for_fork`, whose guard was forgotten.
        unsafe { self.state.force_unlock() };
    }

    /// Code was rewritten at some point: threads must record the versions they run.
    #[inline(always)]
    pub fn rewritten(&self) -> bool {
        self.rewritten.load(std::sync::atomic::Ordering::Acquire)
    }
}
