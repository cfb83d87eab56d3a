//! The traced process's executable mappings as perf must see them: the program (meta.txt
//! `binary=`, placed by `entry=`), its ELF interpreter (placed by the first translated block,
//! the interpreter's entry point), the libraries of maps.txt, and code outside every file
//! mapping (QEMU's vDSO), which is written to a file of its own. Every code byte the trace
//! ran (code.img) is checked against the file perf will read it from.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::elf::{Elf, ET_DYN, ET_EXEC};
use crate::code_image::CodeImage;
use crate::error::{Result, ToolError};

const PAGE: u64 = 0x1000;

fn page_down(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn page_up(a: u64) -> u64 {
    a.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// One executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file, as an absolute path (what MMAP2 names).
    pub path: String,
}

impl Mapping {
    pub fn contains(&self, a: u64) -> bool {
        self.start <= a && a < self.end
    }
}

/// A mapped file: its device/inode (MMAP2), build-id (HEADER_BUILD_ID) and contents.
#[derive(Debug, Clone)]
pub struct MappedFile {
    pub path: String,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub build_id: Option<Vec<u8>>,
    pub bytes: Vec<u8>,
}

/// The address space: mappings in creation order, and the files they map.
#[derive(Debug, Default)]
pub struct AddressSpace {
    pub mappings: Vec<Mapping>,
    pub files: Vec<MappedFile>,
    /// Contents of the code-outside-files image (written next to perf.data), if any.
    pub anon_image: Option<Vec<u8>>,
}

fn dev_major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32
}

fn dev_minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32
}

fn missing(path: &str, what: &str, e: std::io::Error) -> ToolError {
    ToolError::input(format!(
        "{what} {path} cannot be read on this host ({e}): perf decodes the trace from the binaries themselves, so they must be present at the paths the traced program used"
    ))
}

impl AddressSpace {
    /// Index of `path` in `files`, reading it on first use.
    fn file(&mut self, path: &str, what: &str) -> Result<usize> {
        if let Some(i) = self.files.iter().position(|f| f.path == path) {
            return Ok(i);
        }
        let md = std::fs::metadata(path).map_err(|e| missing(path, what, e))?;
        let bytes = std::fs::read(path).map_err(|e| missing(path, what, e))?;
        let build_id = Elf::parse(&bytes).ok().and_then(|e| e.build_id);
        self.files.push(MappedFile {
            path: path.to_string(),
            maj: dev_major(md.dev()),
            min: dev_minor(md.dev()),
            ino: md.ino(),
            build_id,
            bytes,
        });
        Ok(self.files.len() - 1)
    }

    /// The executable PT_LOAD segments of ELF file `path`, loaded with `bias`.
    fn map_elf(&mut self, path: &str, elf: &Elf, bias: u64) {
        for s in &elf.exec_segments {
            let va = s.vaddr.wrapping_add(bias);
            let start = page_down(va);
            self.mappings.push(Mapping {
                start,
                end: page_up(va.wrapping_add(s.memsz)),
                pgoff: page_down(s.offset),
                path: path.to_string(),
            });
        }
    }

    fn read_elf(&mut self, path: &str, what: &str) -> Result<Elf> {
        let i = self.file(path, what)?;
        Elf::parse(&self.files[i].bytes).map_err(|e| ToolError::input(format!("{what} {path}: {e}")))
    }

    /// Build the address space of a user-mode trace. `binary`, `start_code`, `entry`: meta.txt's
    /// (QEMU's image info: the lowest executable segment address of the program, and the first
    /// instruction, the interpreter's entry point when there is one); `first_pc`: code.img's first
    /// record, used when meta.txt has no entry=; `maps`: maps.txt.
    pub fn build(
        binary: &str,
        start_code: Option<u64>,
        entry: Option<u64>,
        first_pc: Option<u64>,
        maps: &str,
    ) -> Result<AddressSpace> {
        let mut sp = AddressSpace::default();
        let exe = sp.read_elf(binary, "the traced program")?;
        let lowest_exec = exe
            .exec_segments
            .iter()
            .map(|s| s.vaddr)
            .min()
            .ok_or_else(|| ToolError::input(format!("{binary} has no executable segment")))?;
        let bias = match exe.e_type {
            ET_EXEC => 0,
            ET_DYN => match (start_code, entry) {
                (Some(s), _) => s.wrapping_sub(lowest_exec),
                (None, Some(e)) if exe.interp.is_none() => e.wrapping_sub(exe.entry),
                _ => {
                    return Err(ToolError::input(format!(
                        "{binary} is position-independent and meta.txt has no start_code= to place it"
                    )))
                }
            },
            t => return Err(ToolError::input(format!("{binary}: ELF type {t} is not an executable"))),
        };
        sp.map_elf(binary, &exe, bias);
        if let Some(interp) = &exe.interp {
            let ld = sp.read_elf(interp, "the program's interpreter")?;
            let first = entry.or(first_pc).ok_or_else(|| {
                ToolError::input(
                    "no code ran (no entry= in meta.txt, empty code.img): nothing places the interpreter"
                        .to_string(),
                )
            })?;
            let ld_bias = first.wrapping_sub(ld.entry);
            if ld_bias % PAGE != 0 {
                return Err(ToolError::input(format!(
                    "cannot place the interpreter {interp}: the first instruction 0x{first:x} is not its entry point (0x{:x} + a page-aligned base)",
                    ld.entry
                )));
            }
            sp.map_elf(interp, &ld, ld_bias);
        }
        for (no, line) in maps.lines().enumerate() {
            let f: Vec<&str> = line.splitn(4, ' ').collect();
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            let (Some(start), Some(end), Some(off), Some(path)) = (
                f.first().and_then(|s| hex(s)),
                f.get(1).and_then(|s| hex(s)),
                f.get(2).and_then(|s| hex(s)),
                f.get(3),
            ) else {
                if line.trim().is_empty() {
                    continue;
                }
                return Err(ToolError::input(format!("maps.txt:{}: cannot parse {line:?}", no + 1)));
            };
            if !path.starts_with('/') {
                return Err(ToolError::input(format!(
                    "maps.txt:{}: executable mapping of {path:?} at 0x{start:x} is not a file perf can read",
                    no + 1
                )));
            }
            sp.file(path, "the mapped file")?;
            sp.mappings.push(Mapping { start, end, pgoff: off, path: path.to_string() });
        }
        Ok(sp)
    }

    /// The mapping perf would resolve `a` with: the latest one containing it.
    pub fn lookup(&self, a: u64) -> Option<&Mapping> {
        self.mappings.iter().rev().find(|m| m.contains(a))
    }

    /// Check every byte of `code` against the file perf reads it from; code outside every
    /// file mapping goes to the anonymous image mapped from `anon_path`, one mapping per run
    /// of pages.
    pub fn check_code(&mut self, code: &CodeImage, anon_path: &Path) -> Result<()> {
        let mut anon_pages: Vec<(u64, Vec<u8>)> = Vec::new();
        for seg in code.segments() {
            for (i, &byte) in seg.bytes.iter().enumerate() {
                let a = seg.start + i as u64;
                match self.lookup(a) {
                    Some(m) => {
                        let off = a - m.start + m.pgoff;
                        let f = self.files.iter().find(|f| f.path == m.path).expect("mapped files are read");
                        if f.bytes.get(off as usize) != Some(&byte) {
                            return Err(ToolError::input(format!(
                                "{} differs from the code the trace ran at 0x{a:x} (file offset 0x{off:x}): the file changed since the trace was recorded, and perf would decode other instructions",
                                m.path
                            )));
                        }
                    }
                    None => {
                        let page = page_down(a);
                        if anon_pages.last().map(|p| p.0) != Some(page) {
                            anon_pages.push((page, vec![0; PAGE as usize]));
                        }
                        anon_pages.last_mut().unwrap().1[(a - page) as usize] = byte;
                    }
                }
            }
        }
        if anon_pages.is_empty() {
            return Ok(());
        }
        let path = anon_path.to_string_lossy().into_owned();
        let mut image = Vec::new();
        let mut run: Option<Mapping> = None;
        for (page, bytes) in anon_pages {
            let off = image.len() as u64;
            image.extend_from_slice(&bytes);
            match &mut run {
                Some(m) if m.end == page => m.end += PAGE,
                _ => {
                    if let Some(m) = run.take() {
                        self.mappings.push(m);
                    }
                    run = Some(Mapping { start: page, end: page + PAGE, pgoff: off, path: path.clone() });
                }
            }
        }
        self.mappings.extend(run);
        self.anon_image = Some(image);
        Ok(())
    }

    /// Register the anonymous image as a mapped file (after it was written).
    pub fn add_anon_file(&mut self, path: &Path) -> Result<()> {
        let p = path.to_string_lossy().into_owned();
        self.file(&p, "the written code image").map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_split_like_glibc() {
        // makedev(8, 1) and makedev(259, 65536)
        assert_eq!((dev_major(0x801), dev_minor(0x801)), (8, 1));
        let dev =
            (259u64 & 0xfff) << 8 | (259u64 & !0xfff) << 32 | (65536u64 & 0xff) | (65536u64 & !0xff) << 12;
        assert_eq!((dev_major(dev), dev_minor(dev)), (259, 65536));
    }

    #[test]
    fn later_mappings_win() {
        let mut sp = AddressSpace::default();
        sp.mappings.push(Mapping { start: 0x1000, end: 0x3000, pgoff: 0, path: "/a".into() });
        sp.mappings.push(Mapping { start: 0x2000, end: 0x3000, pgoff: 0, path: "/b".into() });
        assert_eq!(sp.lookup(0x1fff).unwrap().path, "/a");
        assert_eq!(sp.lookup(0x2000).unwrap().path, "/b");
        assert!(sp.lookup(0x3000).is_none());
    }
}
