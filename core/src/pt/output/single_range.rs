//! Single-range output (SDM §33.2.7.1; seed 000 and its English page, seed 004): one contiguous,
//! circular range of guest-physical memory.
//!
//! OutputBase   := IA32_RTIT_OUTPUT_BASE[63:0]
//! OutputMask   := ZeroExtend64(IA32_RTIT_OUTPUT_MASK_PTRS[31:0])   (bits 6:0 read as 1)
//! OutputOffset := ZeroExtend64(IA32_RTIT_OUTPUT_MASK_PTRS[63:32])
//! trace_store_phys_addr := (OutputBase & ~OutputMask) + (OutputOffset & OutputMask)
//!
//! The range is 128 B .. 4 GiB (MASK_PTRS[31:7] holds mask bits 31:7). When the write reaches the
//! end of the buffer it restarts at the base.

use super::{store, OutputError, WriteOutcome, MASK_PTRS_LOWER_MASK};
use crate::guest_mem::GuestMemory;

#[derive(Clone, Debug)]
pub(super) struct SingleRange {
    /// IA32_RTIT_OUTPUT_BASE as written.
    base: u64,
    /// IA32_RTIT_OUTPUT_MASK_PTRS[31:0] (bits 6:0 = 1).
    mask: u32,
    /// IA32_RTIT_OUTPUT_MASK_PTRS[63:32]: the offset of the next byte.
    offset: u32,
}

impl SingleRange {
    pub(super) fn new(base: u64, mask_ptrs: u64) -> Self {
        Self { base, mask: (mask_ptrs | MASK_PTRS_LOWER_MASK) as u32, offset: (mask_ptrs >> 32) as u32 }
    }

    /// "Single-Range Output Errors" (§33.2.7.1), checked in the seed's order when TraceEn is set.
    pub(super) fn check(&self) -> Result<(), OutputError> {
        let mask = u64::from(self.mask);
        // A contiguous mask is 2^n - 1: adding 1 clears every bit it has.
        if mask & (mask + 1) != 0 {
            return Err(OutputError::SingleRangeMaskNotContiguous { mask: self.mask });
        }
        // IA32_RTIT_OUTPUT_BASE && IA32_RTIT_OUTPUT_MASK_PTRS[31:0] > 0. Seed 000 writes the mask
        // as MASK_PTRS[31:0], seed 004 as MaskOrTableOffset ([31:7]); they agree because
        // OUTPUT_BASE[6:0] are reserved (WRMSR #GP), so only bits 31:7 can overlap.
        if self.base & mask != 0 {
            return Err(OutputError::SingleRangeBaseMisaligned { base: self.base, mask: self.mask });
        }
        // "greater than the mask": offset == mask (the last byte) is legal.
        if self.offset > self.mask {
            return Err(OutputError::SingleRangeOffsetBeyondMask { offset: self.offset, mask: self.mask });
        }
        Ok(())
    }

    pub(super) fn output_base(&self) -> u64 {
        self.base
    }

    pub(super) fn output_mask_ptrs(&self) -> u64 {
        u64::from(self.mask) | (u64::from(self.offset) << 32)
    }

    /// Store at (base & ~mask) + (offset & mask), wrapping the offset to 0 past the mask. A
    /// single range never stops or interrupts, and bytes aimed at memory that is not RAM (an MMIO
    /// debug port, §33.2.7.1) are dropped.
    pub(super) fn write(&mut self, mem: &mut impl GuestMemory, bytes: &[u8]) -> WriteOutcome {
        let mask = u64::from(self.mask);
        let start = self.base & !mask;
        let mut rest = bytes;
        let mut restricted = 0;
        while !rest.is_empty() {
            let offset = u64::from(self.offset) & mask;
            let room = mask + 1 - offset;
            let n = room.min(rest.len() as u64) as usize;
            let (chunk, tail) = rest.split_at(n);
            restricted += store(mem, start.wrapping_add(offset), chunk);
            self.offset = ((offset + n as u64) & mask) as u32;
            rest = tail;
        }
        WriteOutcome { written: bytes.len(), restricted, ..WriteOutcome::default() }
    }
}
