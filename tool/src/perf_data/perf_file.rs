//! The perf.data file layout (tools/perf/util/header.h, `struct perf_file_header`):
//!
//! ```text
//! 0    perf_file_header: magic "PERFILE2", size 104, attr_size, attrs, data, event_types
//!      sections {u64 offset, u64 size}, adds_features (256-bit bitmap)
//! 104  each attr's ids (u64 array)
//!      attrs: per event perf_event_attr + {offset, size} of its ids
//!      data: the records
//!      feature index: {offset, size} per set feature bit, ascending; then their contents
//! ```

use super::attr::{Attr, ATTR_SIZE};

const MAGIC: &[u8; 8] = b"PERFILE2";
pub const HEADER_SIZE: u64 = 104;
/// `struct perf_file_attr`: the attr and its ids section.
const FILE_ATTR_SIZE: u64 = ATTR_SIZE as u64 + 16;

/// Everything a perf.data file holds.
pub struct PerfFile<'a> {
    /// Each event with the sample ids that name it in records.
    pub attrs: Vec<(Attr, Vec<u64>)>,
    pub data: &'a [u8],
    /// (feature bit, contents), ascending bits.
    pub features: Vec<(u32, Vec<u8>)>,
}

fn data_offset_of(attrs: &[(Attr, Vec<u64>)]) -> u64 {
    data_offset(&attrs.iter().map(|(_, ids)| ids.len()).collect::<Vec<_>>())
}

fn section(b: &mut Vec<u8>, offset: u64, size: u64) {
    b.extend_from_slice(&offset.to_le_bytes());
    b.extend_from_slice(&size.to_le_bytes());
}

/// Where the data section starts for events with `ids_per_attr` sample ids each.
pub fn data_offset(ids_per_attr: &[usize]) -> u64 {
    let ids: u64 = ids_per_attr.iter().map(|n| 8 * *n as u64).sum();
    HEADER_SIZE + ids + FILE_ATTR_SIZE * ids_per_attr.len() as u64
}

impl PerfFile<'_> {
    /// Write the whole file.
    pub fn write(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        let ids_size: u64 = self.attrs.iter().map(|(_, ids)| 8 * ids.len() as u64).sum();
        let attrs_offset = HEADER_SIZE + ids_size;
        let attrs_size = FILE_ATTR_SIZE * self.attrs.len() as u64;
        let data_offset = attrs_offset + attrs_size;
        debug_assert_eq!(data_offset, data_offset_of(&self.attrs));
        let data_size = self.data.len() as u64;

        let mut head = Vec::with_capacity(data_offset as usize);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&HEADER_SIZE.to_le_bytes());
        head.extend_from_slice(&FILE_ATTR_SIZE.to_le_bytes());
        section(&mut head, attrs_offset, attrs_size);
        section(&mut head, data_offset, data_size);
        section(&mut head, 0, 0); // event_types
        let mut bits = [0u64; 4];
        for (bit, _) in &self.features {
            bits[*bit as usize / 64] |= 1 << (bit % 64);
        }
        for w in bits {
            head.extend_from_slice(&w.to_le_bytes());
        }
        debug_assert_eq!(head.len() as u64, HEADER_SIZE);
        for (_, ids) in &self.attrs {
            for id in ids {
                head.extend_from_slice(&id.to_le_bytes());
            }
        }
        let mut ids_at = HEADER_SIZE;
        for (attr, ids) in &self.attrs {
            head.extend(attr.to_bytes());
            section(&mut head, ids_at, 8 * ids.len() as u64);
            ids_at += 8 * ids.len() as u64;
        }
        w.write_all(&head)?;
        w.write_all(self.data)?;

        let mut feats: Vec<(u32, &Vec<u8>)> = self.features.iter().map(|(b, c)| (*b, c)).collect();
        feats.sort_by_key(|(b, _)| *b);
        let mut index = Vec::new();
        let mut at = data_offset + data_size + 16 * feats.len() as u64;
        for (_, c) in &feats {
            section(&mut index, at, c.len() as u64);
            at += c.len() as u64;
        }
        w.write_all(&index)?;
        for (_, c) in feats {
            w.write_all(c)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    #[test]
    fn header_sections_and_feature_index() {
        let data = [0xaau8; 16];
        let f = PerfFile {
            attrs: vec![(Attr::intel_pt(8, 1), vec![1]), (Attr::dummy(), vec![2, 3])],
            data: &data,
            features: vec![(6, vec![1, 2, 3]), (2, vec![9; 5])],
        };
        let mut b = Vec::new();
        f.write(&mut b).unwrap();
        assert_eq!(&b[0..8], b"PERFILE2");
        assert_eq!(u64_at(&b, 8), 104);
        assert_eq!(u64_at(&b, 16), 144);
        // ids at 104..128, attrs at 128 (2 x 144), data at 416
        assert_eq!((u64_at(&b, 24), u64_at(&b, 32)), (128, 288));
        assert_eq!((u64_at(&b, 40), u64_at(&b, 48)), (416, 16));
        assert_eq!(data_offset(&[1, 2]), 416);
        assert_eq!((u64_at(&b, 56), u64_at(&b, 64)), (0, 0));
        assert_eq!(u64_at(&b, 72), (1 << 2) | (1 << 6));
        assert_eq!((u64_at(&b, 104), u64_at(&b, 112), u64_at(&b, 120)), (1, 2, 3));
        // the second attr's ids section
        assert_eq!((u64_at(&b, 128 + 144 + 128), u64_at(&b, 128 + 144 + 136)), (112, 16));
        assert_eq!(&b[416..432], &data);
        // feature index: bit 2 first
        assert_eq!((u64_at(&b, 432), u64_at(&b, 440)), (464, 5));
        assert_eq!((u64_at(&b, 448), u64_at(&b, 456)), (469, 3));
        assert_eq!(&b[464..], &[9, 9, 9, 9, 9, 1, 2, 3]);
    }
}
