//! The BTS part of the DS save area and the BTS record (SDM Vol. 3B §18.4.9.1 Figure 18-8
//! "DS Save Area Example" (32-bit), §18.4.9.2 Figure 18-9 "IA-32e Mode DS Save Area" (64-bit);
//! seed 001 §6.5-§6.6).
//!
//! Layout (field size 4 bytes in the 32-bit format, 8 in the 64-bit format):
//!
//! | field                      | 32-bit | 64-bit |
//! |----------------------------|--------|--------|
//! | BTS buffer base            | 00H    | 00H    |
//! | BTS index                  | 04H    | 08H    |
//! | BTS absolute maximum       | 08H    | 10H    |
//! | BTS interrupt threshold    | 0CH    | 18H    |
//!
//! A record is {last branch from, last branch to, flags} with flags bit 4 = predicted: 12 bytes
//! in the 32-bit format, 24 in the 64-bit format.

use crate::guest_mem::{LinearMemory, MemError};

/// Which DS save area format the processor uses. SDM §18.4.9.2 and seed 001 §11: the 64-bit
/// format when CPUID.1:ECX[2] DTES64 = 1 (in every mode) and always in IA-32e mode; the 32-bit
/// format only without DTES64 outside IA-32e mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DsFormat {
    Bits32,
    Bits64,
}

impl DsFormat {
    pub fn select(dtes64: bool, ia32e: bool) -> DsFormat {
        if dtes64 || ia32e {
            DsFormat::Bits64
        } else {
            DsFormat::Bits32
        }
    }

    /// Size of one DS field (an address or index).
    pub fn field_size(self) -> u64 {
        match self {
            DsFormat::Bits32 => 4,
            DsFormat::Bits64 => 8,
        }
    }

    /// Size of one BTS record: 12 or 24 bytes.
    pub fn record_size(self) -> u64 {
        3 * self.field_size()
    }

    fn truncate(self, v: u64) -> u64 {
        match self {
            DsFormat::Bits32 => v & 0xFFFF_FFFF,
            DsFormat::Bits64 => v,
        }
    }
}

/// The BTS fields of the DS save area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BtsFields {
    pub base: u64,
    /// Linear address where the next record is written.
    pub index: u64,
    /// Linear address of the byte after the buffer's last record.
    pub abs_max: u64,
    /// Linear address whose reaching by the index raises the DS interrupt.
    pub threshold: u64,
}

impl BtsFields {
    /// Offset of the BTS index field in the save area.
    pub fn index_offset(fmt: DsFormat) -> u64 {
        fmt.field_size()
    }

    /// Read the four BTS fields at `ds_area`.
    pub fn read(mem: &mut impl LinearMemory, ds_area: u64, fmt: DsFormat) -> Result<BtsFields, MemError> {
        let n = fmt.field_size() as usize;
        let mut raw = [0u8; 32];
        mem.read_linear(ds_area, &mut raw[..4 * n])?;
        let field = |i: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&raw[i * n..(i + 1) * n]);
            u64::from_le_bytes(b)
        };
        Ok(BtsFields { base: field(0), index: field(1), abs_max: field(2), threshold: field(3) })
    }

    /// Write the BTS index field (the processor maintains it in memory, seed 001 §6.5.2).
    pub fn write_index(mem: &mut impl LinearMemory, ds_area: u64, fmt: DsFormat, index: u64) -> Result<(), MemError> {
        let n = fmt.field_size() as usize;
        mem.write_linear(ds_area.wrapping_add(Self::index_offset(fmt)), &fmt.truncate(index).to_le_bytes()[..n])
    }
}

/// One BTS record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BtsRecord {
    /// Linear address of the instruction the transfer is attributed to.
    pub from: u64,
    /// Linear address of the destination.
    pub to: u64,
    /// Flags bit 4: the branch was predicted.
    pub predicted: bool,
}

impl BtsRecord {
    pub const FLAG_PREDICTED: u64 = 1 << 4;

    /// The record's bytes in `fmt` (the first `fmt.record_size()` bytes of the array).
    pub fn encode(&self, fmt: DsFormat) -> [u8; 24] {
        let n = fmt.field_size() as usize;
        let mut out = [0u8; 24];
        let flags = if self.predicted { Self::FLAG_PREDICTED } else { 0 };
        for (i, v) in [self.from, self.to, flags].into_iter().enumerate() {
            out[i * n..(i + 1) * n].copy_from_slice(&fmt.truncate(v).to_le_bytes()[..n]);
        }
        out
    }

    /// Parse a record (`bytes` at least `fmt.record_size()` long).
    pub fn decode(bytes: &[u8], fmt: DsFormat) -> Option<BtsRecord> {
        let n = fmt.field_size() as usize;
        if bytes.len() < 3 * n {
            return None;
        }
        let field = |i: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&bytes[i * n..(i + 1) * n]);
            u64::from_le_bytes(b)
        };
        Some(BtsRecord { from: field(0), to: field(1), predicted: field(2) & Self::FLAG_PREDICTED != 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_mem::{GuestMemory, SparseMemory};

    #[test]
    fn sixty_four_bit_record_is_from_to_flags_in_three_quadwords() {
        let r = BtsRecord { from: 0xFFFF_FFF8_1000_0004, to: 0x1234, predicted: true };
        let b = r.encode(DsFormat::Bits64);
        assert_eq!(&b[0..8], &0xFFFF_FFF8_1000_0004u64.to_le_bytes());
        assert_eq!(&b[8..16], &0x1234u64.to_le_bytes());
        assert_eq!(&b[16..24], &0x10u64.to_le_bytes());
        assert_eq!(BtsRecord::decode(&b, DsFormat::Bits64), Some(r));
    }

    #[test]
    fn thirty_two_bit_record_is_twelve_bytes() {
        let r = BtsRecord { from: 0xE883, to: 0x9000, predicted: false };
        let b = r.encode(DsFormat::Bits32);
        assert_eq!(&b[..12], &[0x83, 0xE8, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 0]);
        assert!(b[12..].iter().all(|&x| x == 0));
        assert_eq!(DsFormat::Bits32.record_size(), 12);
    }

    #[test]
    fn format_is_64_bit_with_dtes64_or_in_ia32e_mode() {
        assert_eq!(DsFormat::select(true, false), DsFormat::Bits64);
        assert_eq!(DsFormat::select(false, true), DsFormat::Bits64);
        assert_eq!(DsFormat::select(false, false), DsFormat::Bits32);
    }

    #[test]
    fn fields_are_read_at_the_format_offsets() {
        let mut m = SparseMemory::new();
        m.add_ram(0x1000, 0x100);
        for (i, v) in [0x2000u64, 0x2018, 0x20F0, 0x2108].iter().enumerate() {
            m.write_u64(0x1000 + 8 * i as u64, *v).unwrap();
        }
        let f = BtsFields::read(&mut m, 0x1000, DsFormat::Bits64).unwrap();
        assert_eq!(f, BtsFields { base: 0x2000, index: 0x2018, abs_max: 0x20F0, threshold: 0x2108 });
        let f32 = BtsFields::read(&mut m, 0x1000, DsFormat::Bits32).unwrap();
        assert_eq!(f32, BtsFields { base: 0x2000, index: 0, abs_max: 0x2018, threshold: 0 });
        BtsFields::write_index(&mut m, 0x1000, DsFormat::Bits32, 0x1_0000_2030).unwrap();
        assert_eq!(m.bytes(0x1004, 4), vec![0x30, 0x20, 0, 0]);
    }
}
