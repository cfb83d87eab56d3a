//! Hand-off of trace bytes from vCPU threads to a writer thread.
//!
//! vCPU callbacks never touch files: they move filled buffers into a crossbeam channel, and one
//! background thread owns every output file. At exit the plugin sends `Sync` and waits for the
//! acknowledgement, so every byte the model produced is on disk before QEMU exits.

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
}

impl FileKey {
    fn file_name(self) -> String {
        match self {
            FileKey::Pt(n) => format!("thread-{n}.pt"),
            FileKey::Rtit(n) => format!("thread-{n}.rtit"),
            FileKey::Truth(n) => format!("thread-{n}.truth"),
            FileKey::Code => "code.img".to_string(),
        }
    }
}

pub enum Msg {
    Data(FileKey, Vec<u8>),
    Close(FileKey),
    /// Flush every open file, then acknowledge.
    Sync(Sender<Result<(), String>>),
}

pub struct Output {
    tx: Sender<Msg>,
}

impl Output {
    /// Start the writer thread for files under `dir` (which must exist).
    pub fn start(dir: &Path) -> std::io::Result<Output> {
        let (tx, rx) = unbounded();
        let dir = dir.to_path_buf();
        // The writer must never receive the guest's signals: qemu-user implements guest timers
        // and signals with host signals, and its handlers expect to run on a vCPU thread. A new
        // thread inherits the creator's mask, so block everything around the spawn.
        let spawned = with_all_signals_blocked(|| {
            std::thread::Builder::new()
                .name("pttrace-writer".into())
                .spawn(move || writer(dir, rx))
        });
        spawned?;
        Ok(Output { tx })
    }

    pub fn send(&self, key: FileKey, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            // The writer only stops after the channel is closed, which cannot happen while
            // `self` is alive.
            let _ = self.tx.send(Msg::Data(key, bytes));
        }
    }

    pub fn close(&self, key: FileKey) {
        let _ = self.tx.send(Msg::Close(key));
    }

    /// Wait until everything sent so far is written; returns the first write error, if any.
    pub fn sync(&self) -> Result<(), String> {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        self.tx
            .send(Msg::Sync(ack_tx))
            .map_err(|_| "pttrace: writer thread is gone".to_string())?;
        ack_rx
            .recv()
            .map_err(|_| "pttrace: writer thread is gone".to_string())?
    }
}

fn writer(dir: PathBuf, rx: Receiver<Msg>) {
    let mut files: HashMap<FileKey, BufWriter<File>> = HashMap::new();
    let mut error: Option<String> = None;
    let note = |e: String, error: &mut Option<String>| {
        if error.is_none() {
            eprintln!("pttrace: {e}");
            *error = Some(e);
        }
    };
    for msg in rx {
        match msg {
            Msg::Data(key, bytes) => {
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
                    if let Err(e) = f.flush() {
                        note(format!("writing {}: {e}", key.file_name()), &mut error);
                    }
                }
            }
            Msg::Sync(ack) => {
                for (key, f) in files.iter_mut() {
                    if let Err(e) = f.flush() {
                        note(format!("writing {}: {e}", key.file_name()), &mut error);
                    }
                }
                let _ = ack.send(match &error {
                    Some(e) => Err(e.clone()),
                    None => Ok(()),
                });
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

/// The code sideband (code.img): the bytes of every translated block, each block address written
/// again only when its bytes change.
#[derive(Default)]
pub struct CodeImage {
    seen: parking_lot::Mutex<HashMap<u64, Vec<u8>>>,
}

impl CodeImage {
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
