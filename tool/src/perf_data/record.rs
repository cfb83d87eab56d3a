//! Byte-level building blocks shared by every perf record: `struct perf_event_header`
//! (include/uapi/linux/perf_event.h), little-endian fields, NUL-padded strings and the
//! `sample_id_all` trailer.

/// `PERF_RECORD_MISC_USER`: the record is about user space.
pub const MISC_USER: u16 = 2;

/// One record under construction: `perf_event_header` {u32 type, u16 misc, u16 size}, then the
/// fields; `finish` fills in the size.
#[derive(Debug, Clone)]
pub struct Record {
    buf: Vec<u8>,
}

impl Record {
    pub fn new(kind: u32, misc: u16) -> Record {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&kind.to_le_bytes());
        buf.extend_from_slice(&misc.to_le_bytes());
        buf.extend_from_slice(&0u16.to_le_bytes());
        Record { buf }
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// `s`, a NUL and zeros up to the next multiple of `align` bytes of the string field
    /// (perf's `PERF_ALIGN(strlen + 1, align)`).
    pub fn string(&mut self, s: &str, align: usize) -> &mut Self {
        let len = (s.len() + 1).next_multiple_of(align);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.resize(self.buf.len() + len - s.len(), 0);
        self
    }

    /// The `sample_id_all` trailer of a non-sample record.
    pub fn sample_id(&mut self, id: &SampleId) -> &mut Self {
        id.write(&mut self.buf);
        self
    }

    /// The finished record with `header.size` set. Panics if it exceeds 64 KiB, which no record
    /// built here can (file names are bounded by PATH_MAX).
    pub fn finish(&mut self) -> Vec<u8> {
        let size = u16::try_from(self.buf.len()).expect("perf record larger than 64 KiB");
        self.buf[6..8].copy_from_slice(&size.to_le_bytes());
        std::mem::take(&mut self.buf)
    }
}

/// The `sample_id_all` trailer for `attr::SAMPLE_TYPE` (PERF_SAMPLE_TID | TIME | IDENTIFIER):
/// {u32 pid, u32 tid}, u64 time, u64 id (perf's `perf_evsel__parse_id_sample` order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub id: u64,
}

impl SampleId {
    pub const SIZE: usize = 24;

    fn write(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.pid.to_le_bytes());
        buf.extend_from_slice(&self.tid.to_le_bytes());
        buf.extend_from_slice(&self.time.to_le_bytes());
        buf.extend_from_slice(&self.id.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_size_is_filled_in() {
        let r = Record::new(68, 0).finish();
        assert_eq!(r, [68, 0, 0, 0, 0, 0, 8, 0]);
    }

    #[test]
    fn string_is_nul_terminated_and_padded() {
        let r = Record::new(3, 0).string("abcdefg", 8).finish();
        assert_eq!(&r[8..], b"abcdefg\0");
        let r = Record::new(3, 0).string("abcdefgh", 8).finish();
        assert_eq!(&r[8..], b"abcdefgh\0\0\0\0\0\0\0\0");
        let r = Record::new(3, 0).string("", 64).finish();
        assert_eq!(r.len(), 8 + 64);
    }

    #[test]
    fn sample_id_trailer_layout() {
        let r = Record::new(4, 0).sample_id(&SampleId { pid: 1, tid: 2, time: 3, id: 4 }).finish();
        assert_eq!(r.len(), 8 + SampleId::SIZE);
        assert_eq!(&r[8..16], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(r[16..24].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(r[24..32].try_into().unwrap()), 4);
    }
}
