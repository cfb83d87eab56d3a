//! Table of Physical Addresses output (SDM §33.2.7.2; seed 000, ToPA PMI pages in seed 003).
//!
//! The processor keeps three values (§33.2.7.2):
//! - proc_trace_table_base: physical address of the current table (IA32_RTIT_OUTPUT_BASE);
//! - proc_trace_table_offset: byte offset of the current entry in that table; bits 27:3 are
//!   IA32_RTIT_OUTPUT_MASK_PTRS[31:7] (MaskOrTableOffset), so the MSR field is the entry index;
//! - proc_trace_output_offset: offset of the next byte in the current output region
//!   (IA32_RTIT_OUTPUT_MASK_PTRS[63:32]).
//!
//! When a region fills, the pointer moves to the next entry with offset 0 and that entry is read
//! at once, so its errors are signalled with the pointer on it ("the error is logged when
//! proc_trace_table_offset points to the entry containing the error"); an END entry is followed
//! at once, so the pointer never rests on one. A STOP region that fills leaves the pointer on
//! that entry with offset = region size: the SDM's English text ("OutputOffset should be set to
//! the size of the region ... pointing to the next byte after the end") and Linux (pt.c
//! pt_handle_status compares output_off with the region size) agree; the seed's Korean text
//! says "size - 1" and then "the byte after the end", contradicting itself. We follow hardware.

use super::{store, OutputError, WriteOutcome, MASK_PTRS_LOWER_MASK};
use crate::guest_mem::GuestMemory;
use crate::pt::caps::PtCaps;

/// ToPA table entry (§33.2.7.2 Figure 33-2, Table 33-3).
/// Entry[0] END: the address is the next table, not an output region.
const END: u64 = 1 << 0;
/// Entry[2] INT: PMI when the region fills.
const INT: u64 = 1 << 2;
/// Entry[4] STOP: Stopped when the region fills.
const STOP: u64 = 1 << 4;
/// Entry[9:6] Size: region size 4K << Size (0: 4K .. 15: 128M); ignored when END = 1.
const SIZE_SHIFT: u32 = 6;
const SIZE_MASK: u64 = 0xF;
/// Entry[1], [3], [5], [11:10]: reserved (Figure 33-2).
const RESERVED_LOW: u64 = (1 << 1) | (1 << 3) | (1 << 5) | (0b11 << 10);
/// Entry[MAXPHYADDR-1:12]: output region base (END = 0) or next table base (END = 1).
const ADDR_LOW_BITS: u64 = 0xFFF;
/// MaskOrTableOffset holds proc_trace_table_offset[27:3]: 2^25 entries (a 256 MiB table).
const INDEX_MASK: u64 = 0x1FF_FFFF;

/// The output region of the current entry.
#[derive(Clone, Copy, Debug)]
struct Region {
    base: u64,
    size: u64,
    int: bool,
    stop: bool,
}

/// A checked table entry.
enum Entry {
    Output(Region),
    /// END = 1: base of the next table.
    End(u64),
}

#[derive(Clone, Debug)]
pub(super) struct Topa {
    /// CPUID.(EAX=14H,ECX=0):ECX[1] = 0: one output entry, then END back to the table base.
    single_entry: bool,
    /// Address bits at or above MAXPHYADDR.
    phys_reserved: u64,
    /// proc_trace_table_base.
    table: u64,
    /// proc_trace_table_offset >> 3.
    index: u64,
    /// proc_trace_output_offset.
    offset: u64,
    /// The current entry, once read and checked.
    region: Option<Region>,
}

impl Topa {
    /// Load the three pointers from the MSR values (TraceEn 0 -> 1).
    pub(super) fn new(caps: &PtCaps, output_base: u64, mask_ptrs: u64) -> Self {
        Self {
            single_entry: !caps.topa_multi,
            phys_reserved: caps.phys_addr_reserved_mask(),
            table: output_base,
            index: (mask_ptrs >> 7) & INDEX_MASK,
            offset: mask_ptrs >> 32,
            region: None,
        }
    }

    pub(super) fn output_base(&self) -> u64 {
        self.table
    }

    pub(super) fn output_mask_ptrs(&self) -> u64 {
        MASK_PTRS_LOWER_MASK | (self.index << 7) | ((self.offset & 0xFFFF_FFFF) << 32)
    }

    /// Check the table base, read the current entry (following END), check the output offset.
    pub(super) fn start(&mut self, mem: &mut impl GuestMemory) -> Result<(), OutputError> {
        // ToPA Errors 2.a: "the table base can be from a WRMSR to IA32_RTIT_OUTPUT_BASE".
        if self.table & ADDR_LOW_BITS != 0 {
            return Err(OutputError::TableNotAligned { table: self.table });
        }
        // ToPA Errors 2.c (WRMSR already #GPs on these bits; kept so the walker never trusts them).
        if self.table & self.phys_reserved != 0 {
            return Err(OutputError::TableBeyondMaxPhysAddr { table: self.table });
        }
        self.load(mem)?;
        // ToPA Errors 3: OutputOffset >= the current region's size. After an END entry was
        // followed the offset is already 0.
        if let Some(r) = self.region {
            if self.offset >= r.size {
                self.region = None;
                return Err(OutputError::OutputOffsetBeyondRegion {
                    table: self.table,
                    index: self.index as u32,
                    offset: self.offset as u32,
                    size: r.size,
                });
            }
        }
        Ok(())
    }

    /// Read and check the entry at (table, index); on END move to entry 0 of the next table with
    /// offset 0 and read again (§33.2.7.2: "When an END entry is reached, the processor loads
    /// proc_trace_table_base with the base address held in this END entry ... resets
    /// proc_trace_table_offset to 0 and proc_trace_output_offset to 0"). Terminates: entry 0 of a
    /// table may not be END (ToPA Errors 4.b). On error the pointer stays on the bad entry.
    fn load(&mut self, mem: &mut impl GuestMemory) -> Result<(), OutputError> {
        self.region = None;
        loop {
            let addr = self.table.wrapping_add(self.index << 3);
            // Table 33-5: the table pointer entering restricted memory is an error.
            let raw = mem.read_u64(addr).map_err(|_| OutputError::TableNotRam { addr })?;
            match self.check(raw)? {
                Entry::Output(r) => {
                    self.region = Some(r);
                    return Ok(());
                }
                Entry::End(next) => {
                    self.table = next;
                    self.index = 0;
                    self.offset = 0;
                }
            }
        }
    }

    /// Decode an entry read at (table, index) and apply every "ToPA Errors" rule (§33.2.7.2).
    fn check(&self, raw: u64) -> Result<Entry, OutputError> {
        let (table, index, entry) = (self.table, self.index as u32, raw);
        // 1. Reserved bit violation (Figure 33-2).
        if raw & RESERVED_LOW != 0 {
            return Err(OutputError::EntryReservedBit { table, index, entry });
        }
        // 2.c. Address bits the processor does not support (Entry[63:MAXPHYADDR]).
        if raw & self.phys_reserved != 0 {
            return Err(OutputError::EntryBeyondMaxPhysAddr { table, index, entry });
        }
        let base = raw & !ADDR_LOW_BITS;
        if raw & END != 0 {
            // 4.a. STOP or INT with END = 1 (Table 33-3 calls it a reserved-bit violation; the
            // error list a rule violation: either way an operational error).
            if raw & (INT | STOP) != 0 {
                return Err(OutputError::EndWithIntOrStop { table, index, entry });
            }
            // 4.b. END in entry 0.
            if index == 0 {
                return Err(OutputError::EndInEntryZero { table, entry });
            }
            // 4.c.ii. Single-output-region ToPA: END must point back to the table base
            // (Table 33-3: "this address must be the value currently in IA32_RTIT_OUTPUT_BASE").
            if self.single_entry && base != table {
                return Err(OutputError::SingleEntryEndNotToTableBase { table, index, entry });
            }
            // The next table base is 4K aligned by construction (bits 11:0 are not address
            // bits), so ToPA Errors 2.a cannot arise from an END entry.
            return Ok(Entry::End(base));
        }
        // 4.c.i. Single-output-region ToPA: entry 1 must be END. Entries past 1 are treated
        // the same way: such a table "can hold only one output entry" (§33.2.7.2, "Single Output
        // Region ToPA Implementation"; CPUID.(EAX=14H,ECX=0):ECX[1] description).
        if self.single_entry && index != 0 {
            return Err(OutputError::SingleEntryExtraOutput { table, index, entry });
        }
        let size = 4096u64 << ((raw >> SIZE_SHIFT) & SIZE_MASK);
        // 2.b. Region base not aligned to the region size (Table 33-3: "a 2M region must have
        // bits 20:12 clear").
        if base & (size - 1) != 0 {
            return Err(OutputError::RegionNotAligned { table, index, entry });
        }
        Ok(Entry::Output(Region { base, size, int: raw & INT != 0, stop: raw & STOP != 0 }))
    }

    /// Bytes that can be stored before anything the guest can observe happens other than the
    /// bytes themselves: completing the current region (a ToPA PMI, STOP, or loading the next
    /// entry, which may be an operational error) or, in a single-output-region table, crossing the
    /// early PMI mark. The byte that completes the region is not quiet.
    #[inline]
    pub(super) fn quiet_room(&self) -> u64 {
        let Some(r) = self.region else { return 0 };
        let mut room = r.size.saturating_sub(self.offset).saturating_sub(1);
        if self.single_entry && r.int {
            let early = r.size - (r.size / 4).min(512);
            if self.offset < early {
                room = room.min(early - self.offset - 1);
            }
        }
        room
    }

    /// Fill regions in order. On a full region: INT -> `pmi`; STOP -> `stopped`, the pointer
    /// stays with offset = size and the rest of the input is dropped ("output ceases after the
    /// last byte of the region is filled, which may mean that a packet is cut off in the middle");
    /// otherwise advance to the next entry (wrapping to entry 0 after the largest table offset
    /// 0FFFFFF8H) and read it, stopping at an error.
    pub(super) fn write(&mut self, mem: &mut impl GuestMemory, bytes: &[u8]) -> WriteOutcome {
        let mut out = WriteOutcome::default();
        let mut rest = bytes;
        while !rest.is_empty() {
            let Some(r) = self.region else { break };
            let room = r.size.saturating_sub(self.offset);
            if room == 0 {
                break;
            }
            let n = room.min(rest.len() as u64) as usize;
            // Single-output-region ToPA (CPUID.(14H,0):ECX[1] = 0): "ToPA PMIs will be delivered
            // before the region is filled" (SDM Table 33-11; seed 003 "ToPA PMI and Single Output
            // Region ToPA Implementation": signalled before the output wraps). The PMI is raised
            // when the fill crosses size - min(size/4, 512), leaving the handler room to clear
            // TraceEn before the wrap.
            if self.single_entry && r.int {
                let early = r.size - (r.size / 4).min(512);
                let end = self.offset + n as u64;
                // Crossing the early mark, or (starting past it) filling the region.
                if (self.offset < early && end >= early) || (self.offset >= early && end >= r.size) {
                    out.pmi = true;
                }
            }
            let (chunk, tail) = rest.split_at(n);
            out.restricted += store(mem, r.base + self.offset, chunk);
            self.offset += n as u64;
            out.written += n;
            rest = tail;
            if self.offset < r.size {
                continue;
            }
            // Table 33-3 INT row: with INT and STOP both set, STOP happens before INT; the
            // caller sets Stopped before raising the PMI.
            out.pmi |= r.int && !self.single_entry;
            if r.stop {
                out.stopped = true;
                break;
            }
            self.index = (self.index + 1) & INDEX_MASK;
            self.offset = 0;
            if let Err(e) = self.load(mem) {
                out.error = Some(e);
                break;
            }
        }
        out
    }
}
