//! RTIT trace output (RTIT Programming Reference v1.05 §2.3, §3.3.10 - §3.3.12): one circular
//! region of platform-physical memory.
//!
//! base    := RTIT_BASE_ADDR & ~RTIT_LIMIT_MASK
//! address := base + (RTIT_OFFSET & RTIT_LIMIT_MASK)
//!
//! §2.3 writes the address as "RTIT_BASE_ADDR + (RTIT_OFFSET & RTIT_LIMIT_MASK)" and §3.3.10 the
//! base as "RTIT_BASE_ADDR & RTIT_LIMIT_MASK"; both then say a bit set in base and mask "will be
//! treated as if it was 0 in the base", so the base is RTIT_BASE_ADDR & ~RTIT_LIMIT_MASK.
//! "Once the offset value reaches the mask value, writes will wrap around and write at offset 0":
//! after each byte RTIT_OFFSET := ((RTIT_OFFSET & mask) + 1) & mask. (A non-contiguous mask is not
//! given a meaning by the seed; the same formula is applied.)
//!
//! RTIT_CTL[8] Dest = 0: "the write of the TraceStop packet will force the lower 8 bits of the
//! write address to 0xC0" (§3.3.2). Our choice where the seed is silent: only that one byte's
//! address is forced; RTIT_OFFSET advances by one as for any other byte.
//!
//! Writes aimed at memory that is not RAM (the MMIO debug port of §2.3.1) are dropped; the offset
//! still advances, as the port would have consumed them.

use super::msr::RtitMsrs;
use crate::guest_mem::GuestMemory;

/// The region as the registers describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// RTIT_BASE_ADDR & ~RTIT_LIMIT_MASK.
    pub base: u64,
    /// RTIT_LIMIT_MASK.
    pub mask: u64,
}

impl Region {
    pub fn of(msrs: &RtitMsrs) -> Self {
        Region { base: msrs.base_addr & !msrs.limit_mask, mask: msrs.limit_mask }
    }

    /// Physical address of the byte at `offset`.
    pub fn address(self, offset: u64) -> u64 {
        self.base.wrapping_add(offset & self.mask)
    }

    /// The offset after one byte at `offset`.
    pub fn advance(self, offset: u64) -> u64 {
        ((offset & self.mask) + 1) & self.mask
    }
}

/// Drain `bytes` into the region, starting at RTIT_OFFSET and updating it. `forced` lists the
/// indices (ascending) of TraceStop bytes generated with RTIT_CTL[Dest] = 0.
pub fn drain(msrs: &mut RtitMsrs, mem: &mut impl GuestMemory, bytes: &[u8], forced: &[usize]) {
    let region = Region::of(msrs);
    let mut offset = msrs.offset;
    let mut i = 0;
    let mut forced = forced.iter().copied().peekable();
    while i < bytes.len() {
        if forced.peek() == Some(&i) {
            forced.next();
            let addr = (region.address(offset) & !0xFF) | 0xC0;
            let _ = mem.write_phys(addr, &bytes[i..i + 1]);
            offset = region.advance(offset);
            i += 1;
            continue;
        }
        // A run up to the end of the region or the next forced byte.
        let to_wrap = (region.mask - (offset & region.mask) + 1) as usize;
        let to_forced = forced.peek().map_or(usize::MAX, |&f| f - i);
        let n = (bytes.len() - i).min(to_wrap).min(to_forced);
        store(mem, region.address(offset), &bytes[i..i + n]);
        offset = ((offset & region.mask) + n as u64) & region.mask;
        i += n;
    }
    msrs.offset = offset;
}

/// Store a run; if the whole run is refused, store what RAM there is byte by byte (a region
/// partly over MMIO keeps its RAM part).
fn store(mem: &mut impl GuestMemory, addr: u64, data: &[u8]) {
    if mem.write_phys(addr, data).is_ok() {
        return;
    }
    for (k, b) in data.iter().enumerate() {
        let _ = mem.write_phys(addr.wrapping_add(k as u64), std::slice::from_ref(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_mem::SparseMemory;

    #[test]
    fn reset_region_is_128_bytes_at_fdc00000_and_wraps() {
        let mut m = RtitMsrs::default();
        let mut mem = SparseMemory::new();
        mem.add_ram(0xFDC0_0000, 0x100);
        m.offset = 0x7E;
        drain(&mut m, &mut mem, &[1, 2, 3, 4], &[]);
        assert_eq!(m.offset, 2);
        assert_eq!(mem.bytes(0xFDC0_007E, 2), [1, 2]);
        assert_eq!(mem.bytes(0xFDC0_0000, 2), [3, 4]);
    }

    #[test]
    fn base_bits_under_the_mask_are_ignored() {
        let mut m = RtitMsrs { base_addr: 0x10_0040, limit_mask: 0xFF, ..RtitMsrs::default() };
        let mut mem = SparseMemory::new();
        mem.add_ram(0x10_0000, 0x100);
        drain(&mut m, &mut mem, &[9], &[]);
        assert_eq!(mem.bytes(0x10_0000, 1), [9]);
        assert_eq!(m.offset, 1);
    }

    #[test]
    fn dest_0_trace_stop_lands_at_c0() {
        let mut m = RtitMsrs { base_addr: 0x20_0000, limit_mask: 0xFFF, offset: 0x105, ..RtitMsrs::default() };
        let mut mem = SparseMemory::new();
        mem.add_ram(0x20_0000, 0x1000);
        drain(&mut m, &mut mem, &[0xAA, 0xC1, 0xBB], &[1]);
        assert_eq!(mem.bytes(0x20_0105, 1), [0xAA]);
        assert_eq!(mem.bytes(0x20_01C0, 1), [0xC1]);
        assert_eq!(mem.bytes(0x20_0107, 1), [0xBB]);
        assert_eq!(m.offset, 0x108);
    }
}
