//! PERF_RECORD_AUXTRACE (type 71): `struct perf_record_auxtrace` {header, u64 size, u64 offset,
//! u64 reference, u32 idx, u32 tid, u32 cpu, u32 reserved} followed by `size` bytes of trace
//! that header.size does not count. perf pads the data to 8 bytes (PERF_AUXTRACE_RECORD_ALIGNMENT);
//! the zero padding decodes as PAD packets.

use super::record::Record;

pub const PERF_RECORD_AUXTRACE: u32 = 71;
const ALIGN: usize = 8;
/// header.size: the record without its data (what the AUXTRACE index records as its size).
pub const HEADER_SIZE: u64 = 48;

/// One thread's buffer: per-thread mmaps, so cpu = -1 and the queue index `idx` is the thread's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auxtrace<'a> {
    pub data: &'a [u8],
    /// Position of `data` in the AUX area (0 for a whole stream).
    pub offset: u64,
    /// A unique value per buffer (perf uses a TSC reading).
    pub reference: u64,
    pub idx: u32,
    pub tid: u32,
}

impl Auxtrace<'_> {
    /// Header and data (padded to 8 bytes).
    pub fn to_record(&self) -> Vec<u8> {
        let padded = self.data.len().next_multiple_of(ALIGN);
        let mut r = Record::new(PERF_RECORD_AUXTRACE, 0);
        r.u64(padded as u64)
            .u64(self.offset)
            .u64(self.reference)
            .u32(self.idx)
            .u32(self.tid)
            .u32(u32::MAX) // cpu = -1
            .u32(0);
        let mut out = r.finish();
        out.extend_from_slice(self.data);
        out.resize(out.len() + padded - self.data.len(), 0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_does_not_count_the_data() {
        let data = [0x02, 0x82, 0x02, 0x82, 0x02];
        let r = Auxtrace { data: &data, offset: 0, reference: 7, idx: 1, tid: 1001 }.to_record();
        assert_eq!(u16::from_le_bytes([r[6], r[7]]), 48);
        assert_eq!(u64::from_le_bytes(r[8..16].try_into().unwrap()), 8);
        assert_eq!(u64::from_le_bytes(r[24..32].try_into().unwrap()), 7);
        assert_eq!(&r[32..48], &[1, 0, 0, 0, 0xe9, 3, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(&r[48..], &[0x02, 0x82, 0x02, 0x82, 0x02, 0, 0, 0]);
    }
}
