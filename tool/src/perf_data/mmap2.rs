//! PERF_RECORD_MMAP2 (type 10): {header, u32 pid, u32 tid, u64 addr, u64 len, u64 pgoff,
//! u32 maj, u32 min, u64 ino, u64 ino_generation, u32 prot, u32 flags, char filename[] (padded
//! to 8)} + sample_id. perf maps an address to a file offset as addr - start + pgoff.

use super::record::{Record, SampleId, MISC_USER};

pub const PERF_RECORD_MMAP2: u32 = 10;
const PROT_READ: u32 = 1;
const PROT_EXEC: u32 = 4;
const MAP_PRIVATE: u32 = 2;

/// An executable file mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap2 {
    pub pid: u32,
    pub tid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub filename: String,
}

impl Mmap2 {
    pub fn to_record(&self, id: &SampleId) -> Vec<u8> {
        Record::new(PERF_RECORD_MMAP2, MISC_USER)
            .u32(self.pid)
            .u32(self.tid)
            .u64(self.start)
            .u64(self.len)
            .u64(self.pgoff)
            .u32(self.maj)
            .u32(self.min)
            .u64(self.ino)
            .u64(0) // ino_generation
            .u32(PROT_READ | PROT_EXEC)
            .u32(MAP_PRIVATE)
            .string(&self.filename, 8)
            .sample_id(id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap2_layout() {
        let m = Mmap2 {
            pid: 1,
            tid: 1,
            start: 0x401000,
            len: 0x1000,
            pgoff: 0x1000,
            maj: 8,
            min: 1,
            ino: 42,
            filename: "/bin/x".into(),
        };
        let id = SampleId { pid: 1, tid: 1, time: 0, id: 2 };
        let r = m.to_record(&id);
        assert_eq!(&r[0..6], &[10, 0, 0, 0, 2, 0]);
        assert_eq!(u64::from_le_bytes(r[16..24].try_into().unwrap()), 0x401000);
        assert_eq!(u64::from_le_bytes(r[24..32].try_into().unwrap()), 0x1000);
        assert_eq!(u64::from_le_bytes(r[32..40].try_into().unwrap()), 0x1000);
        assert_eq!(&r[40..48], &[8, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(r[48..56].try_into().unwrap()), 42);
        assert_eq!(&r[64..72], &[5, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&r[72..80], b"/bin/x\0\0");
        assert_eq!(r.len(), 80 + SampleId::SIZE);
    }
}
