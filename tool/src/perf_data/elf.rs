//! The few ELF64 facts the sideband needs (System V gABI): the entry point, the executable
//! PT_LOAD segments, PT_INTERP and the GNU build-id note (NT_GNU_BUILD_ID in a PT_NOTE).

const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const PF_X: u32 = 1;
const NT_GNU_BUILD_ID: u32 = 3;
pub const ET_EXEC: u16 = 2;
pub const ET_DYN: u16 = 3;

/// One executable PT_LOAD segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecSegment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elf {
    pub e_type: u16,
    pub entry: u64,
    pub exec_segments: Vec<ExecSegment>,
    pub interp: Option<String>,
    pub build_id: Option<Vec<u8>>,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

impl Elf {
    /// Parse a little-endian ELF64 file; `Err` says what is wrong.
    pub fn parse(b: &[u8]) -> Result<Elf, String> {
        if b.get(0..4) != Some(b"\x7fELF") {
            return Err("not an ELF file".into());
        }
        if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
            return Err("not a little-endian 64-bit ELF file".into());
        }
        let bad = || "truncated ELF header".to_string();
        let e_type = u16_at(b, 16).ok_or_else(bad)?;
        let entry = u64_at(b, 24).ok_or_else(bad)?;
        let phoff = u64_at(b, 32).ok_or_else(bad)? as usize;
        let phentsize = u16_at(b, 54).ok_or_else(bad)? as usize;
        let phnum = u16_at(b, 56).ok_or_else(bad)? as usize;
        let mut elf = Elf { e_type, entry, exec_segments: Vec::new(), interp: None, build_id: None };
        for i in 0..phnum {
            let p = phoff + i * phentsize;
            let bad = || format!("truncated program header {i}");
            let p_type = u32_at(b, p).ok_or_else(bad)?;
            let p_flags = u32_at(b, p + 4).ok_or_else(bad)?;
            let offset = u64_at(b, p + 8).ok_or_else(bad)?;
            let vaddr = u64_at(b, p + 16).ok_or_else(bad)?;
            let filesz = u64_at(b, p + 32).ok_or_else(bad)?;
            let memsz = u64_at(b, p + 40).ok_or_else(bad)?;
            let contents = || {
                let (o, n) = (offset as usize, filesz as usize);
                b.get(o..o.checked_add(n)?)
            };
            match p_type {
                PT_LOAD if p_flags & PF_X != 0 => {
                    elf.exec_segments.push(ExecSegment { vaddr, offset, filesz, memsz })
                }
                PT_INTERP => {
                    let s = contents().ok_or_else(|| "PT_INTERP past the end of the file".to_string())?;
                    let s = s.split(|&c| c == 0).next().unwrap_or_default();
                    elf.interp = Some(String::from_utf8_lossy(s).into_owned());
                }
                PT_NOTE if elf.build_id.is_none() => {
                    if let Some(notes) = contents() {
                        elf.build_id = gnu_build_id(notes);
                    }
                }
                _ => {}
            }
        }
        Ok(elf)
    }
}

/// The descriptor of the NT_GNU_BUILD_ID note named "GNU" among `notes`.
fn gnu_build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let mut o = 0usize;
    while o + 12 <= notes.len() {
        let namesz = u32_at(notes, o)? as usize;
        let descsz = u32_at(notes, o + 4)? as usize;
        let kind = u32_at(notes, o + 8)?;
        let name_at = o + 12;
        let desc_at = name_at + namesz.next_multiple_of(4);
        let next = desc_at + descsz.next_multiple_of(4);
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at + descsz).map(<[u8]>::to_vec);
        }
        o = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64: header, two program headers (PT_LOAD R+X, PT_NOTE), a build-id note.
    pub(crate) fn tiny_elf() -> Vec<u8> {
        let mut b = vec![0u8; 0x200];
        b[0..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&ET_EXEC.to_le_bytes());
        b[24..32].copy_from_slice(&0x401010u64.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        let ph = |b: &mut Vec<u8>, at: usize, t: u32, f: u32, off: u64, va: u64, sz: u64| {
            b[at..at + 4].copy_from_slice(&t.to_le_bytes());
            b[at + 4..at + 8].copy_from_slice(&f.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&off.to_le_bytes());
            b[at + 16..at + 24].copy_from_slice(&va.to_le_bytes());
            b[at + 32..at + 40].copy_from_slice(&sz.to_le_bytes());
            b[at + 40..at + 48].copy_from_slice(&sz.to_le_bytes());
        };
        ph(&mut b, 64, PT_LOAD, 5, 0x100, 0x401000, 0x40);
        ph(&mut b, 120, PT_NOTE, 4, 0x180, 0x400180, 0x20);
        // note: namesz 4, descsz 8, type 3, "GNU\0", 8 bytes of id
        let note: Vec<u8> =
            [4u32, 8, 3].iter().flat_map(|v| v.to_le_bytes()).chain(*b"GNU\0").chain(1..=8).collect();
        b[0x180..0x180 + note.len()].copy_from_slice(&note);
        b
    }

    #[test]
    fn reads_entry_segments_and_build_id() {
        let e = Elf::parse(&tiny_elf()).unwrap();
        assert_eq!(e.e_type, ET_EXEC);
        assert_eq!(e.entry, 0x401010);
        assert_eq!(
            e.exec_segments,
            [ExecSegment { vaddr: 0x401000, offset: 0x100, filesz: 0x40, memsz: 0x40 }]
        );
        assert_eq!(e.interp, None);
        assert_eq!(e.build_id.as_deref(), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]));
    }

    #[test]
    fn rejects_non_elf() {
        assert_eq!(Elf::parse(b"#!/bin/sh\n").unwrap_err(), "not an ELF file");
        let mut b = tiny_elf();
        b[4] = 1;
        assert!(Elf::parse(&b).unwrap_err().contains("64-bit"));
    }
}
