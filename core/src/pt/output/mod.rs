//! Trace output to guest-physical memory (SDM Vol. 3C §33.2.7 "Trace Output"; seed 000, with the
//! English single-range and ToPA PMI pages in seeds 004 and 003).
//!
//! `OutputUnit` receives the packet bytes the tracer produces and stores them where hardware would:
//! a single circular range (§33.2.7.1, `single_range.rs`) or the regions of a Table of Physical
//! Addresses (§33.2.7.2, `topa.rs`). It owns the values IA32_RTIT_OUTPUT_BASE and
//! IA32_RTIT_OUTPUT_MASK_PTRS read back. Hardware buffers bytes and only guarantees exact MSRs once
//! TraceEn = 0; this unit stores every byte when it is handed over, so the MSRs are exact at any
//! time and a guest that clears TraceEn finds all of its bytes already in memory
//! (shared/reference/linux-guest.md, "MSRs").
//!
//! Restricted memory (§33.2.7.4): the model's restricted memory is whatever `GuestMemory` refuses
//! (MMIO, ROM, unassigned). Table 33-5 only describes SMRR overlaps and calls the exact behaviour
//! implementation-dependent. We follow its definite statements:
//! - an output region (ToPA or single range) that is not RAM: the stores are not performed and the
//!   packet bytes are lost, the output pointer still advances, tracing goes on. The table's "may
//!   also signal an error" is not taken (the seed's Korean text drops the "may"; the next sentence
//!   of the same cell, "output may resume once stores no longer hit restricted memory", only makes
//!   sense without a mandatory error). A single range aimed at an MMIO debug port (§33.2.7.1) is
//!   the documented use of that scheme, and the plugin cannot emulate the port, so its bytes are
//!   dropped the same way.
//! - a ToPA table that is not RAM: an operational error once the table pointer
//!   (IA32_RTIT_OUTPUT_BASE + proc_trace_table_offset) enters it (`OutputError::TableNotRam`).

mod single_range;
mod topa;

use std::fmt;

use crate::guest_mem::GuestMemory;
use crate::pt::caps::PtCaps;
use single_range::SingleRange;
use topa::Topa;

/// MSR index of IA32_RTIT_OUTPUT_BASE.
pub const IA32_RTIT_OUTPUT_BASE: u32 = 0x560;
/// MSR index of IA32_RTIT_OUTPUT_MASK_PTRS.
pub const IA32_RTIT_OUTPUT_MASK_PTRS: u32 = 0x561;
/// IA32_RTIT_OUTPUT_MASK_PTRS[6:0] LowerMask: forced to 1, writes ignored (SDM Table 36-9 in the
/// edition of xem/minix86; §33.2.8.8).
pub const MASK_PTRS_LOWER_MASK: u64 = 0x7F;
/// IA32_RTIT_OUTPUT_MASK_PTRS[31:7] MaskOrTableOffset.
pub const MASK_PTRS_MASK_OR_TABLE_OFFSET: u64 = 0xFFFF_FF80;

/// Granule at which a store that straddles RAM and restricted memory is split, so the RAM part is
/// still written (QEMU maps memory in target pages).
const STORE_GRANULE: u64 = 4096;

/// What one `OutputUnit::write` did. The caller turns the flags into architectural state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Input bytes consumed: stored, or dropped because their destination is restricted memory
    /// (§33.2.7.4). Less than the input only when `stopped` or `error` is set; the remaining bytes
    /// are lost, as hardware loses what is still in its internal buffers.
    pub written: usize,
    /// Of `written`, the bytes dropped because their destination is not RAM (MMIO, ROM,
    /// unassigned): restricted memory loses its packet data (§33.2.7.4 Table 33-5).
    pub restricted: usize,
    /// An output region with INT = 1 became full ("ToPA PMI", §33.2.7.2): the caller sets
    /// IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI (and IA32_RTIT_STATUS.PendToPAPMI when
    /// InjectPsbPmiOnEnable = 1) and raises the PMI. Set together with `stopped` when the region
    /// had INT = STOP = 1; STOP takes effect first (Table 33-3, INT row), so the handler must see
    /// Stopped already set.
    pub pmi: bool,
    /// A STOP = 1 region became full ("ToPA STOP", §33.2.7.2): the caller sets
    /// IA32_RTIT_STATUS.Stopped, which clears TriggerEn. Output ended at the region's last byte.
    pub stopped: bool,
    /// An operational error (§33.3.10; "ToPA Errors" / "Single-Range Output Errors"): the caller
    /// sets IA32_RTIT_STATUS.Error, which clears TriggerEn. Nothing more is written.
    pub error: Option<OutputError>,
}

/// Where the unit is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputState {
    /// TraceEn = 0 (or never enabled): `write` ignores its input.
    Idle,
    /// Bytes are being written.
    Running,
    /// A STOP region filled; nothing more is written until the next `start`.
    Stopped,
    /// An operational error was signalled; nothing more is written until the next `start`.
    Error,
}

/// An operational error of the output stage. Each variant's doc comment is its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputError {
    /// The output scheme chosen by IA32_RTIT_CTL.ToPA is not enumerated in
    /// CPUID.(EAX=14H,ECX=0):ECX (ToPA: bit 0, single range: bit 2); the WRMSR that set TraceEn
    /// should have raised #GP (SDM §33.2.8.2), so this is a caller bug, not an SDM error.
    SchemeNotEnumerated { topa: bool },
    /// Single-range mask is non-contiguous: IA32_RTIT_OUTPUT_MASK_PTRS[31:0] has a 0 below its
    /// most significant 1 (seed 000/004 §33.2.7.1 "Single-Range Output Errors", first item).
    SingleRangeMaskNotContiguous { mask: u32 },
    /// Single-range base and mask are mis-aligned: IA32_RTIT_OUTPUT_BASE &
    /// IA32_RTIT_OUTPUT_MASK_PTRS[31:0] is not 0 (seed 000/004 §33.2.7.1 "Single-Range Output
    /// Errors", second item; SDM IA32_RTIT_OUTPUT_BASE table: the base must be aligned to the
    /// region size).
    SingleRangeBaseMisaligned { base: u64, mask: u32 },
    /// Single-range output offset IA32_RTIT_OUTPUT_MASK_PTRS[63:32] is greater than the mask
    /// IA32_RTIT_OUTPUT_MASK_PTRS[31:0] (seed 000/004 §33.2.7.1 "Single-Range Output Errors",
    /// third item, "illegal output offset").
    SingleRangeOffsetBeyondMask { offset: u32, mask: u32 },
    /// ToPA table base is not 4 KiB aligned (seed 000 §33.2.7.2 "ToPA Errors" 2.a; the base comes
    /// from IA32_RTIT_OUTPUT_BASE, since an END entry cannot encode bits 11:0).
    TableNotAligned { table: u64 },
    /// ToPA table base sets physical-address bits at or above MAXPHYADDR (seed 000 §33.2.7.2
    /// "ToPA Errors" 2.c; WRMSR IA32_RTIT_OUTPUT_BASE should already have raised #GP).
    TableBeyondMaxPhysAddr { table: u64 },
    /// ToPA entry sets a reserved bit (bit 1, 3, 5 or 11:10 of Figure 33-2) (seed 000 §33.2.7.2
    /// "ToPA Errors" 1, "ToPA Table Entry Format").
    EntryReservedBit { table: u64, index: u32, entry: u64 },
    /// ToPA entry base sets physical-address bits at or above MAXPHYADDR (seed 000 §33.2.7.2
    /// "ToPA Errors" 2.c).
    EntryBeyondMaxPhysAddr { table: u64, index: u32, entry: u64 },
    /// ToPA output region base is not aligned to the region size (seed 000 §33.2.7.2 "ToPA
    /// Errors" 2.b; Table 33-3, output region base row).
    RegionNotAligned { table: u64, index: u32, entry: u64 },
    /// ToPA output offset IA32_RTIT_OUTPUT_MASK_PTRS[63:32] is greater than or equal to the size
    /// of the current output region (seed 000 §33.2.7.2 "ToPA Errors" 3).
    OutputOffsetBeyondRegion { table: u64, index: u32, offset: u32, size: u64 },
    /// ToPA END entry has STOP or INT set (seed 000 §33.2.7.2 "ToPA Errors" 4.a; Table 33-3 calls
    /// the same case a reserved-bit violation).
    EndWithIntOrStop { table: u64, index: u32, entry: u64 },
    /// ToPA END bit set in entry 0 of a table (seed 000 §33.2.7.2 "ToPA Errors" 4.b).
    EndInEntryZero { table: u64, entry: u64 },
    /// Single-output-region ToPA (CPUID.(EAX=14H,ECX=0):ECX[1] = 0): an entry after entry 0 has
    /// END = 0 (seed 000 §33.2.7.2 "ToPA Errors" 4.c.i, "Single Output Region ToPA
    /// Implementation").
    SingleEntryExtraOutput { table: u64, index: u32, entry: u64 },
    /// Single-output-region ToPA: the END entry does not point back to the table base (seed 000
    /// §33.2.7.2 "ToPA Errors" 4.c.ii; Table 33-3, END row).
    SingleEntryEndNotToTableBase { table: u64, index: u32, entry: u64 },
    /// ToPA table entry is in restricted memory (not RAM) (seed 000 §33.2.7.4 Table 33-5, "ToPA
    /// table overlaps with SMRR").
    TableNotRam { addr: u64 },
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use OutputError::*;
        match *self {
            SchemeNotEnumerated { topa } => write!(
                f,
                "{} output is not enumerated in CPUID.(EAX=14H,ECX=0):ECX",
                if topa { "ToPA" } else { "single-range" }
            ),
            SingleRangeMaskNotContiguous { mask } => {
                write!(f, "single-range mask {mask:#x} is non-contiguous")
            }
            SingleRangeBaseMisaligned { base, mask } => {
                write!(f, "single-range base {base:#x} and mask {mask:#x} are mis-aligned")
            }
            SingleRangeOffsetBeyondMask { offset, mask } => {
                write!(f, "single-range output offset {offset:#x} is greater than the mask {mask:#x}")
            }
            TableNotAligned { table } => write!(f, "ToPA table base {table:#x} is not 4 KiB aligned"),
            TableBeyondMaxPhysAddr { table } => {
                write!(f, "ToPA table base {table:#x} sets bits at or above MAXPHYADDR")
            }
            EntryReservedBit { table, index, entry } => {
                write!(f, "ToPA entry {index} of table {table:#x} ({entry:#x}) sets a reserved bit")
            }
            EntryBeyondMaxPhysAddr { table, index, entry } => write!(
                f,
                "ToPA entry {index} of table {table:#x} ({entry:#x}) sets address bits at or above MAXPHYADDR"
            ),
            RegionNotAligned { table, index, entry } => write!(
                f,
                "ToPA entry {index} of table {table:#x} ({entry:#x}): region base is not aligned to the region size"
            ),
            OutputOffsetBeyondRegion { table, index, offset, size } => write!(
                f,
                "ToPA output offset {offset:#x} is not below the size {size:#x} of entry {index} of table {table:#x}"
            ),
            EndWithIntOrStop { table, index, entry } => write!(
                f,
                "ToPA END entry {index} of table {table:#x} ({entry:#x}) has INT or STOP set"
            ),
            EndInEntryZero { table, entry } => {
                write!(f, "ToPA END bit set in entry 0 of table {table:#x} ({entry:#x})")
            }
            SingleEntryExtraOutput { table, index, entry } => write!(
                f,
                "single-output-region ToPA: entry {index} of table {table:#x} ({entry:#x}) has END = 0"
            ),
            SingleEntryEndNotToTableBase { table, index, entry } => write!(
                f,
                "single-output-region ToPA: END entry {index} of table {table:#x} ({entry:#x}) is not the table base"
            ),
            TableNotRam { addr } => write!(f, "ToPA table entry at {addr:#x} is not in RAM"),
        }
    }
}

impl std::error::Error for OutputError {}

/// The output scheme in use since the last `start`.
#[derive(Clone, Debug)]
enum Scheme {
    /// No `start` since the MSRs were last written: read back the stored values.
    Msrs,
    Single(SingleRange),
    Topa(Topa),
}

/// The trace output stage of one logical processor.
#[derive(Clone, Debug)]
pub struct OutputUnit {
    caps: PtCaps,
    /// IA32_RTIT_OUTPUT_BASE while `scheme` is `Msrs`.
    base: u64,
    /// IA32_RTIT_OUTPUT_MASK_PTRS while `scheme` is `Msrs` (bits 6:0 always 1).
    mask_ptrs: u64,
    scheme: Scheme,
    state: OutputState,
    /// Bytes dropped so far because their destination was not RAM.
    restricted_bytes: u64,
}

impl OutputUnit {
    /// An idle unit for the capability profile; the MSRs hold their reset values
    /// (OUTPUT_BASE = 0, OUTPUT_MASK_PTRS = 7FH).
    pub fn new(caps: PtCaps) -> Self {
        Self {
            caps,
            base: 0,
            mask_ptrs: MASK_PTRS_LOWER_MASK,
            scheme: Scheme::Msrs,
            state: OutputState::Idle,
            restricted_bytes: 0,
        }
    }

    pub fn state(&self) -> OutputState {
        self.state
    }

    /// TraceEn 0 -> 1 with IA32_RTIT_CTL.FabricEn = 0: load the output pointers from the MSR
    /// values and check them (single range: §33.2.7.1; ToPA: read the current entry, follow an END
    /// entry, check the output offset, §33.2.7.2). On error the unit is in `OutputState::Error` and
    /// the MSRs read back where the table pointer stopped.
    ///
    /// Call it only while IA32_RTIT_STATUS.Stopped = 0 and Error = 0: otherwise TriggerEn stays 0,
    /// no byte is produced, and the SDM's "Illegal ToPA Output Offset" error only applies "if
    /// IA32_RTIT_STATUS.Stopped=0" (the seed's translation omits that condition). Use
    /// `set_output_base` / `set_output_mask_ptrs` to keep the MSR values in that case.
    pub fn start(
        &mut self,
        topa: bool,
        output_base: u64,
        output_mask_ptrs: u64,
        mem: &mut impl GuestMemory,
    ) -> Result<(), OutputError> {
        self.base = output_base;
        self.mask_ptrs = output_mask_ptrs | MASK_PTRS_LOWER_MASK;
        self.scheme = Scheme::Msrs;
        let result = if topa {
            if self.caps.topa {
                let mut t = Topa::new(&self.caps, self.base, self.mask_ptrs);
                let r = t.start(mem);
                self.scheme = Scheme::Topa(t);
                r
            } else {
                Err(OutputError::SchemeNotEnumerated { topa })
            }
        } else if self.caps.single_range {
            let s = SingleRange::new(self.base, self.mask_ptrs);
            let r = s.check();
            self.scheme = Scheme::Single(s);
            r
        } else {
            Err(OutputError::SchemeNotEnumerated { topa })
        };
        self.state = if result.is_ok() { OutputState::Running } else { OutputState::Error };
        result
    }

    /// TraceEn 1 -> 0. Every byte is already in memory and the MSRs already hold the final
    /// pointers; later `write`s are ignored until the next `start`.
    pub fn stop(&mut self) {
        self.freeze();
        self.state = OutputState::Idle;
    }

    /// Store packet bytes at the current output position, advancing, wrapping and following ToPA
    /// entries as hardware does. Ignores its input unless the unit is `Running`.
    pub fn write(&mut self, mem: &mut impl GuestMemory, bytes: &[u8]) -> WriteOutcome {
        if self.state != OutputState::Running || bytes.is_empty() {
            return WriteOutcome::default();
        }
        let out = match &mut self.scheme {
            Scheme::Single(s) => s.write(mem, bytes),
            Scheme::Topa(t) => t.write(mem, bytes),
            Scheme::Msrs => WriteOutcome::default(),
        };
        self.restricted_bytes += out.restricted as u64;
        if out.error.is_some() {
            self.state = OutputState::Error;
        } else if out.stopped {
            self.state = OutputState::Stopped;
        }
        out
    }

    /// How many bytes `write` can store before its outcome can be anything but plain stores
    /// (a ToPA PMI, STOP, the next table entry, an error): while fewer are pending, the caller
    /// may hold them back and store them later in one piece with the same result. Hardware
    /// buffers output internally too (SDM §33.2.7: packets reach memory only after TraceEn is
    /// cleared or some time later). 0 unless the unit is running; a single range never has an
    /// event (it wraps silently).
    #[inline]
    pub fn quiet_room(&self) -> u64 {
        if self.state != OutputState::Running {
            return 0;
        }
        match &self.scheme {
            Scheme::Single(_) => u64::MAX,
            Scheme::Topa(t) => t.quiet_room(),
            Scheme::Msrs => 0,
        }
    }

    /// Bytes dropped so far because the output pointed at memory that is not RAM (reported at
    /// exit: nothing is lost silently).
    pub fn restricted_bytes(&self) -> u64 {
        self.restricted_bytes
    }

    /// The value RDMSR IA32_RTIT_OUTPUT_BASE returns: single range, the base; ToPA, the physical
    /// address of the current table (proc_trace_table_base, §33.2.7.2).
    pub fn output_base(&self) -> u64 {
        match &self.scheme {
            Scheme::Msrs => self.base,
            Scheme::Single(s) => s.output_base(),
            Scheme::Topa(t) => t.output_base(),
        }
    }

    /// The value RDMSR IA32_RTIT_OUTPUT_MASK_PTRS returns. Bits 6:0 read as 1. Single range:
    /// [31:7] the mask, [63:32] the offset. ToPA: [31:7] MaskOrTableOffset =
    /// proc_trace_table_offset[27:3], i.e. the index of the current entry, [63:32] the offset
    /// within the current region (proc_trace_output_offset) — Linux programs
    /// `0x7F | index << 7 | offset << 32` (pt.c) and reads it back the same way.
    pub fn output_mask_ptrs(&self) -> u64 {
        match &self.scheme {
            Scheme::Msrs => self.mask_ptrs,
            Scheme::Single(s) => s.output_mask_ptrs(),
            Scheme::Topa(t) => t.output_mask_ptrs(),
        }
    }

    /// WRMSR IA32_RTIT_OUTPUT_BASE (only legal while TraceEn = 0; the #GP checks on reserved bits
    /// are the caller's). Leaves the unit idle.
    pub fn set_output_base(&mut self, value: u64) {
        self.freeze();
        self.base = value;
        self.state = OutputState::Idle;
    }

    /// WRMSR IA32_RTIT_OUTPUT_MASK_PTRS (only legal while TraceEn = 0); bits 6:0 are forced to 1.
    /// Leaves the unit idle.
    pub fn set_output_mask_ptrs(&mut self, value: u64) {
        self.freeze();
        self.mask_ptrs = value | MASK_PTRS_LOWER_MASK;
        self.state = OutputState::Idle;
    }

    /// Copy the current read-back values into the stored MSRs.
    fn freeze(&mut self) {
        self.base = self.output_base();
        self.mask_ptrs = self.output_mask_ptrs();
        self.scheme = Scheme::Msrs;
    }
}

/// Store trace bytes at a guest-physical address. Parts that are not RAM are dropped: restricted
/// memory loses its packet data (§33.2.7.4 Table 33-5, first row). `GuestMemory` accesses are
/// all-or-error, so a failed store is retried per 4 KiB granule to keep the RAM part. Returns the
/// number of bytes dropped.
fn store(mem: &mut impl GuestMemory, addr: u64, data: &[u8]) -> usize {
    if mem.write_phys(addr, data).is_ok() {
        return 0;
    }
    let within = addr % STORE_GRANULE;
    if within + data.len() as u64 <= STORE_GRANULE {
        return data.len();
    }
    let mut addr = addr;
    let mut rest = data;
    let mut dropped = 0;
    while !rest.is_empty() {
        let n = ((STORE_GRANULE - addr % STORE_GRANULE) as usize).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        if mem.write_phys(addr, chunk).is_err() {
            dropped += n;
        }
        addr = addr.wrapping_add(n as u64);
        rest = tail;
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_mem::SparseMemory;

    #[test]
    fn store_straddling_ram_and_non_ram_keeps_only_the_ram_granules() {
        let mut mem = SparseMemory::new();
        mem.add_ram(0x2000, 0x1000);
        let data: Vec<u8> = (0..0x1800u32).map(|i| i as u8).collect();
        // 1800H..2FFFH..37FFH: the first granule is not RAM, the second is, the third is not.
        store(&mut mem, 0x1800, &data);
        assert_eq!(mem.writes, vec![(0x2000, 0x1000)]);
        assert_eq!(mem.bytes(0x2000, 0x1000), data[0x800..0x1800].to_vec());
        // A failed store inside one granule is not retried.
        mem.writes.clear();
        store(&mut mem, 0x5000, &[1; 16]);
        assert!(mem.writes.is_empty());
    }

    #[test]
    fn error_messages_name_the_case() {
        let e = OutputError::EndInEntryZero { table: 0x1000, entry: 0x1001 };
        assert_eq!(e.to_string(), "ToPA END bit set in entry 0 of table 0x1000 (0x1001)");
        let e = OutputError::SingleRangeOffsetBeyondMask { offset: 0x100, mask: 0xFF };
        assert_eq!(e.to_string(), "single-range output offset 0x100 is greater than the mask 0xff");
    }
}
