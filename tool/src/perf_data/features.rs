//! The header feature sections after the data (tools/perf/util/header.c, `enum
//! HEADER_FEAT`): each one's bit in `adds_features`, and its contents.

use super::attr::{Attr, ATTR_SIZE};

pub const HEADER_BUILD_ID: u32 = 2;
pub const HEADER_HOSTNAME: u32 = 3;
pub const HEADER_OSRELEASE: u32 = 4;
pub const HEADER_VERSION: u32 = 5;
pub const HEADER_ARCH: u32 = 6;
pub const HEADER_NRCPUS: u32 = 7;
pub const HEADER_CPUDESC: u32 = 8;
pub const HEADER_CPUID: u32 = 9;
pub const HEADER_CMDLINE: u32 = 11;
pub const HEADER_EVENT_DESC: u32 = 12;
pub const HEADER_PMU_MAPPINGS: u32 = 16;
pub const HEADER_AUXTRACE: u32 = 18;

/// perf's NAME_ALIGN: strings in feature sections and build-id file names are padded to it.
const NAME_ALIGN: usize = 64;
/// PERF_RECORD_MISC_BUILD_ID_SIZE: the build-id entry says how long the id is.
const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
const MISC_USER: u16 = 2;

/// `do_write_string`: u32 length (padded, including the NUL), then the padded string.
pub fn string(s: &str) -> Vec<u8> {
    let len = (s.len() + 1).next_multiple_of(NAME_ALIGN);
    let mut b = Vec::with_capacity(4 + len);
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
    b.resize(4 + len, 0);
    b
}

/// HEADER_NRCPUS: u32 available, u32 online.
pub fn nrcpus(n: u32) -> Vec<u8> {
    [n, n].iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// HEADER_CMDLINE: u32 count, then each argument as a string.
pub fn cmdline(args: &[String]) -> Vec<u8> {
    let mut b = (args.len() as u32).to_le_bytes().to_vec();
    for a in args {
        b.extend(string(a));
    }
    b
}

/// HEADER_EVENT_DESC: u32 count, u32 attr size, then per event its attr, u32 id count, name
/// string and ids.
pub fn event_desc(events: &[(Attr, &str, &[u64])]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(events.len() as u32).to_le_bytes());
    b.extend_from_slice(&ATTR_SIZE.to_le_bytes());
    for (attr, name, ids) in events {
        b.extend(attr.to_bytes());
        b.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        b.extend(string(name));
        for id in *ids {
            b.extend_from_slice(&id.to_le_bytes());
        }
    }
    b
}

/// HEADER_PMU_MAPPINGS: u32 count, then per PMU u32 type and name string.
pub fn pmu_mappings(pmus: &[(u32, &str)]) -> Vec<u8> {
    let mut b = (pmus.len() as u32).to_le_bytes().to_vec();
    for (kind, name) in pmus {
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend(string(name));
    }
    b
}

/// HEADER_AUXTRACE, the AUXTRACE index: u64 count, then per AUXTRACE record {u64 file offset,
/// u64 header.size (48, without the data)}. perf script also takes its presence as leave to print fields
/// (addr, sym, ...) that only the synthesized samples have.
pub fn auxtrace_index(entries: &[(u64, u64)]) -> Vec<u8> {
    let mut b = (entries.len() as u64).to_le_bytes().to_vec();
    for (offset, size) in entries {
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&size.to_le_bytes());
    }
    b
}

/// HEADER_BUILD_ID: one `struct perf_record_header_build_id` per file: {header (misc = user +
/// BUILD_ID_SIZE), s32 pid = -1 (the host), u8 data[20], u8 size, u8[3] reserved, file name
/// padded to NAME_ALIGN}.
pub fn build_ids(files: &[(&[u8], &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (id, name) in files {
        let n = id.len().min(20);
        let name_len = (name.len() + 1).next_multiple_of(NAME_ALIGN);
        let size = 8 + 4 + 24 + name_len;
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(MISC_USER | MISC_BUILD_ID_SIZE).to_le_bytes());
        b.extend_from_slice(&(size as u16).to_le_bytes());
        b.extend_from_slice(&(-1i32).to_le_bytes());
        let mut data = [0u8; 24];
        data[..n].copy_from_slice(&id[..n]);
        data[20] = n as u8;
        b.extend_from_slice(&data);
        b.extend_from_slice(name.as_bytes());
        b.resize(b.len() + name_len - name.len(), 0);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_padded_to_64() {
        let s = string("x86_64");
        assert_eq!(s.len(), 4 + 64);
        assert_eq!(&s[..4], &64u32.to_le_bytes());
        assert_eq!(&s[4..11], b"x86_64\0");
        assert_eq!(string(&"a".repeat(64)).len(), 4 + 128);
    }

    #[test]
    fn build_id_entry_layout() {
        let id: Vec<u8> = (1..=20).collect();
        let b = build_ids(&[(&id, "/bin/true")]);
        assert_eq!(b.len(), 36 + 64);
        assert_eq!(&b[4..6], &0x8002u16.to_le_bytes());
        assert_eq!(u16::from_le_bytes([b[6], b[7]]) as usize, b.len());
        assert_eq!(&b[8..12], &[0xff; 4]);
        assert_eq!(&b[12..32], &id[..]);
        assert_eq!(b[32], 20);
        assert_eq!(&b[36..46], b"/bin/true\0");
    }

    #[test]
    fn auxtrace_index_layout() {
        let b = auxtrace_index(&[(0x198, 0x30)]);
        assert_eq!(b.len(), 24);
        assert_eq!(&b[..8], &1u64.to_le_bytes());
        assert_eq!(&b[8..16], &0x198u64.to_le_bytes());
        assert_eq!(&b[16..], &0x30u64.to_le_bytes());
    }

    #[test]
    fn event_desc_layout() {
        let b = event_desc(&[(Attr::dummy(), "dummy:u", &[7])]);
        assert_eq!(&b[..8], &[1, 0, 0, 0, 128, 0, 0, 0]);
        assert_eq!(&b[8 + 128..8 + 132], &1u32.to_le_bytes());
        assert_eq!(b.len(), 8 + 128 + 4 + 68 + 8);
        assert_eq!(&b[b.len() - 8..], &7u64.to_le_bytes());
    }
}
