//! Shared pieces of the pttrace-core fuzz targets.
//!
//! - [`Input`]: reads a fuzz input as a byte-code (one opcode byte, then fixed-width
//!   little-endian fields), the cloud-hypervisor `fuzz/fuzz_targets/serial.rs` style, so seeds can
//!   be written by hand ([`SeedWriter`], `src/bin/gen_seeds.rs`) and libFuzzer's mutations stay
//!   meaningful. A truncated field ends the input.
//! - [`Layout`]: the guest-physical map every target uses: a few 4 KiB-aligned RAM ranges with
//!   holes between them (holes behave like MMIO: accesses fail).
//! - [`RefOutput`]: an independent reference of the output stage written from SDM Vol. 3C
//!   §33.2.7 (single range, ToPA, the "ToPA Errors" list, STOP/INT), run in lock step against
//!   `pttrace_core::pt::output::OutputUnit` on a second copy of guest memory. It decides where
//!   every byte must go, so the harness can check that every store the core made lies inside a
//!   region the guest configured (a single range, or a ToPA region named by an entry read at the
//!   time) and that both memories end up byte-identical.

use arbitrary::Unstructured;
use pttrace_core::guest_mem::{GuestMemory, MemError, SparseMemory};
use pttrace_core::pt::caps::PtCaps;

// ---------------------------------------------------------------------------------------------
// Input byte-code
// ---------------------------------------------------------------------------------------------

/// Little-endian field reader over the fuzz input (all-or-nothing: `None` once exhausted).
pub struct Input<'a> {
    u: Unstructured<'a>,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { u: Unstructured::new(data) }
    }

    fn le(&mut self, n: usize) -> Option<u64> {
        let b = self.u.bytes(n).ok()?;
        Some(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.le(1).map(|v| v as u8)
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.le(2).map(|v| v as u16)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.le(4).map(|v| v as u32)
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.le(8)
    }

    pub fn is_empty(&self) -> bool {
        self.u.is_empty()
    }
}

/// Writes inputs in the format [`Input`] reads (seed generation).
#[derive(Default)]
pub struct SeedWriter {
    pub bytes: Vec<u8>,
}

impl SeedWriter {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Capability profiles and guest memory
// ---------------------------------------------------------------------------------------------

/// The profiles the targets pick from with one input byte. No profile enumerates the trace
/// transport (FabricEn): the output unit models memory output only.
pub fn caps_for(sel: u8) -> PtCaps {
    let skl = PtCaps::SKYLAKE;
    match sel % 6 {
        0 => skl,
        1 => PtCaps::MINIMAL,
        // ToPA with one output entry per table (CPUID.(14H,0):ECX[1] = 0), plus single range.
        2 => PtCaps { topa_multi: false, ..skl },
        // Single range only.
        3 => PtCaps { topa: false, topa_multi: false, ..skl },
        // Everything the MSR file knows, 4 address ranges, a narrow MAXPHYADDR.
        4 => PtCaps {
            ptwrite: true,
            power_events: true,
            psb_pmi_preserve: true,
            event_trace: true,
            dis_tnt: true,
            num_addr_ranges: 4,
            max_phys_addr: 36,
            ..skl
        },
        // Wide MAXPHYADDR (52), no IP filtering, no CR3 filter.
        _ => PtCaps { ip_filter: false, num_addr_ranges: 0, cr3_filter: false, max_phys_addr: 52, ..skl },
    }
}

/// Guest RAM: (start, length), all 4 KiB aligned. Two ranges are adjacent (0x80000 and 0x81000)
/// so a store may straddle two RAM blocks; everything else is a hole.
pub const RAM: [(u64, u64); 4] = [(0x0, 0x10000), (0x20000, 0x20000), (0x80000, 0x1000), (0x81000, 0x1000)];

/// Interesting guest-physical bases the address selectors pick from: tables, regions, holes,
/// the end of RAM, addresses near MAXPHYADDR limits, the xAPIC page.
pub const ADDR_BASES: [u64; 16] = [
    0x0,
    0x1000,
    0x2000,
    0x3000,
    0x4000,
    0x8000,
    0x10000, // hole
    0x20000,
    0x30000,
    0x3F000,
    0x40000, // hole
    0x80000,
    0x81000,
    0xFEE0_0000,
    0x7F_FFFF_F000, // top of a 39-bit space
    0xF_FFFF_F000,  // top of a 36-bit space
];

/// An address from a selector byte and a 16-bit offset: base from the low 4 bits, offset
/// scaled by the high bits (0, 8, 0x80, 0x1000 bytes per unit).
pub fn addr_sel(sel: u8, off: u16) -> u64 {
    let base = ADDR_BASES[usize::from(sel & 0xF)];
    let scale = match sel >> 4 & 3 {
        0 => 0,
        1 => 8,
        2 => 0x80,
        _ => 0x1000,
    };
    base.wrapping_add(u64::from(off).wrapping_mul(scale))
}

/// Fresh guest memory with the [`RAM`] layout.
pub fn new_memory() -> SparseMemory {
    let mut m = SparseMemory::new();
    for (start, len) in RAM {
        m.add_ram(start, len as usize);
    }
    m
}

/// Bytes 0..len of every RAM range.
pub fn ram_image(m: &mut SparseMemory) -> Vec<Vec<u8>> {
    RAM.iter().map(|&(s, l)| m.bytes(s, l as usize)).collect()
}

/// The two memories agree on every RAM byte inside `targets` (where stores went): cheaper than
/// comparing whole images after every write, and sufficient because both start identical and
/// every store of the core was checked to lie inside `targets`.
pub fn assert_same_ram_at(a: &mut SparseMemory, b: &mut SparseMemory, targets: &[(u64, u64)], what: &str) {
    for &(t, n) in targets {
        let (t0, t1) = (u128::from(t), u128::from(t) + u128::from(n));
        for (s, l) in RAM {
            let (s0, s1) = (u128::from(s), u128::from(s) + u128::from(l));
            let (lo, hi) = (t0.max(s0), t1.min(s1));
            if lo < hi {
                let (lo, len) = (lo as u64, (hi - lo) as usize);
                assert!(a.bytes(lo, len) == b.bytes(lo, len), "{what}: guest RAM at [{lo:#x}, +{len:#x}) differs from the reference");
            }
        }
    }
}

/// A GuestMemory that counts accesses (bounded-work checks).
pub struct Counting<'m> {
    pub mem: &'m mut SparseMemory,
    pub reads: u64,
    pub writes: u64,
}

impl GuestMemory for Counting<'_> {
    fn read_phys(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.reads += 1;
        self.mem.read_phys(addr, buf)
    }

    fn write_phys(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.writes += 1;
        self.mem.write_phys(addr, data)
    }
}

/// Store `data` at `addr` byte-exactly: every byte whose address is in [`RAM`] is written,
/// every other byte is dropped (restricted memory, SDM §33.2.7.4 Table 33-5). Independent of the
/// core's 4 KiB-granule retry; equivalent to it because every RAM range is 4 KiB aligned.
fn ref_store(mem: &mut SparseMemory, addr: u64, data: &[u8]) {
    let a = u128::from(addr);
    let end = a + data.len() as u128;
    for (s, l) in RAM {
        let (s, e) = (u128::from(s), u128::from(s) + u128::from(l));
        let lo = a.max(s);
        let hi = end.min(e);
        if lo < hi {
            let from = (lo - a) as usize;
            let to = (hi - a) as usize;
            mem.write_phys(lo as u64, &data[from..to]).expect("reference store inside RAM");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reference output stage (SDM §33.2.7)
// ---------------------------------------------------------------------------------------------

/// ToPA entry bits (Figure 33-2).
pub const TOPA_END: u64 = 1 << 0;
pub const TOPA_INT: u64 = 1 << 2;
pub const TOPA_STOP: u64 = 1 << 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefState {
    Idle,
    Running,
    Stopped,
    Error,
}

#[derive(Clone, Copy, Debug)]
struct RefRegion {
    base: u64,
    size: u64,
    int: bool,
    stop: bool,
}

#[derive(Clone, Debug)]
enum RefScheme {
    /// Not started: the MSR values as written.
    Msrs { base: u64, mask_ptrs: u64 },
    Single { base: u64, mask: u64, offset: u64 },
    Topa { table: u64, index: u64, offset: u64, region: Option<RefRegion> },
}

/// What one reference write did.
#[derive(Clone, Debug, Default)]
pub struct RefWrite {
    pub consumed: usize,
    pub pmi: bool,
    pub stopped: bool,
    pub error: bool,
    /// Every destination interval (addr, len) the bytes were aimed at, RAM or not.
    pub targets: Vec<(u64, u64)>,
}

/// Independent model of the output stage (see the module comment).
#[derive(Clone, Debug)]
pub struct RefOutput {
    caps: PtCaps,
    pub state: RefState,
    scheme: RefScheme,
}

/// MaskOrTableOffset holds proc_trace_table_offset[27:3]: 25 bits of entry index.
const INDEX_BITS: u64 = (1 << 25) - 1;

impl RefOutput {
    pub fn new(caps: PtCaps) -> Self {
        RefOutput { caps, state: RefState::Idle, scheme: RefScheme::Msrs { base: 0, mask_ptrs: 0x7F } }
    }

    fn phys_reserved(&self) -> u64 {
        if self.caps.max_phys_addr >= 64 {
            0
        } else {
            !0u64 << self.caps.max_phys_addr
        }
    }

    /// RDMSR IA32_RTIT_OUTPUT_BASE.
    pub fn output_base(&self) -> u64 {
        match self.scheme {
            RefScheme::Msrs { base, .. } | RefScheme::Single { base, .. } => base,
            RefScheme::Topa { table, .. } => table,
        }
    }

    /// RDMSR IA32_RTIT_OUTPUT_MASK_PTRS.
    pub fn output_mask_ptrs(&self) -> u64 {
        match self.scheme {
            RefScheme::Msrs { mask_ptrs, .. } => mask_ptrs | 0x7F,
            RefScheme::Single { mask, offset, .. } => mask | (offset << 32),
            RefScheme::Topa { index, offset, .. } => 0x7F | (index << 7) | ((offset & 0xFFFF_FFFF) << 32),
        }
    }

    /// WRMSR of OUTPUT_BASE / OUTPUT_MASK_PTRS with TraceEn = 0: the current pointers become the
    /// MSR values, then the written one replaces its MSR.
    pub fn set_msrs(&mut self, base: Option<u64>, mask_ptrs: Option<u64>) {
        let (b, m) = (self.output_base(), self.output_mask_ptrs());
        self.scheme = RefScheme::Msrs { base: base.unwrap_or(b), mask_ptrs: mask_ptrs.unwrap_or(m) | 0x7F };
        self.state = RefState::Idle;
    }

    /// TraceEn 1 -> 0.
    pub fn stop(&mut self) {
        self.set_msrs(None, None);
    }

    /// TraceEn 0 -> 1: load the pointers, check them (single range §33.2.7.1 "Single-Range Output
    /// Errors"; ToPA §33.2.7.2 "ToPA Errors"). Returns whether output runs.
    pub fn start(&mut self, topa: bool, base: u64, mask_ptrs: u64, mem: &mut SparseMemory) -> bool {
        let mask_ptrs = mask_ptrs | 0x7F;
        self.state = RefState::Error;
        if topa {
            if !self.caps.topa {
                self.scheme = RefScheme::Msrs { base, mask_ptrs };
                return false;
            }
            self.scheme = RefScheme::Topa {
                table: base,
                index: (mask_ptrs >> 7) & INDEX_BITS,
                offset: mask_ptrs >> 32,
                region: None,
            };
            // 2.a table base not 4K aligned; 2.c beyond MAXPHYADDR.
            if base & 0xFFF != 0 || base & self.phys_reserved() != 0 {
                return false;
            }
            if !self.topa_load(mem) {
                return false;
            }
            // 3. output offset >= size of the current region.
            if let RefScheme::Topa { offset, region: Some(r), .. } = &mut self.scheme {
                if *offset >= r.size {
                    return false;
                }
            }
        } else {
            if !self.caps.single_range {
                self.scheme = RefScheme::Msrs { base, mask_ptrs };
                return false;
            }
            let mask = mask_ptrs & 0xFFFF_FFFF;
            let offset = mask_ptrs >> 32;
            self.scheme = RefScheme::Single { base, mask, offset };
            // Mask must be 2^n - 1; base aligned to it; offset not beyond it.
            if !(mask + 1).is_power_of_two() || base & mask != 0 || offset > mask {
                return false;
            }
        }
        self.state = RefState::Running;
        true
    }

    /// Read the entry under the ToPA pointer, following END entries; false on any ToPA error.
    fn topa_load(&mut self, mem: &mut SparseMemory) -> bool {
        let single_entry = !self.caps.topa_multi;
        let reserved = self.phys_reserved();
        let RefScheme::Topa { table, index, offset, region } = &mut self.scheme else { return false };
        *region = None;
        // Entry 0 of a table can never be END, so at most two reads.
        for _ in 0..2 {
            let mut b = [0u8; 8];
            if mem.read_phys(table.wrapping_add(*index << 3), &mut b).is_err() {
                return false; // the table is in restricted memory
            }
            let raw = u64::from_le_bytes(b);
            // 1. reserved bits 1, 3, 5, 11:10; 2.c address bits at or above MAXPHYADDR.
            if raw & 0b1010 != 0 || raw & (1 << 5) != 0 || raw & (0b11 << 10) != 0 || raw & reserved != 0 {
                return false;
            }
            let base = raw & !0xFFF;
            if raw & TOPA_END != 0 {
                // 4.a END with INT/STOP; 4.b END in entry 0; 4.c.ii single-entry END elsewhere.
                if raw & (TOPA_INT | TOPA_STOP) != 0 || *index == 0 || (single_entry && base != *table) {
                    return false;
                }
                *table = base;
                *index = 0;
                *offset = 0;
                continue;
            }
            // 4.c.i single-entry ToPA: only entry 0 may be an output entry.
            if single_entry && *index != 0 {
                return false;
            }
            let size = 4096u64 << ((raw >> 6) & 0xF);
            // 2.b region base aligned to its size.
            if base % size != 0 {
                return false;
            }
            *region = Some(RefRegion { base, size, int: raw & TOPA_INT != 0, stop: raw & TOPA_STOP != 0 });
            return true;
        }
        panic!("reference walker: END entry followed by END in entry 0 was accepted");
    }

    /// Store `bytes` where hardware would (into `mem`, the reference copy of guest memory).
    pub fn write(&mut self, mem: &mut SparseMemory, bytes: &[u8]) -> RefWrite {
        let mut w = RefWrite::default();
        if self.state != RefState::Running {
            return w;
        }
        let single_entry = !self.caps.topa_multi;
        while w.consumed < bytes.len() {
            let rest = &bytes[w.consumed..];
            match &mut self.scheme {
                RefScheme::Single { base, mask, offset } => {
                    let start = *base & !*mask;
                    let off = *offset & *mask;
                    let n = (*mask + 1 - off).min(rest.len() as u64) as usize;
                    let at = start.wrapping_add(off);
                    w.targets.push((at, n as u64));
                    ref_store(mem, at, &rest[..n]);
                    *offset = (off + n as u64) & *mask;
                    w.consumed += n;
                }
                RefScheme::Topa { index, offset, region, .. } => {
                    let r = region.expect("running ToPA has a region");
                    let n = (r.size - *offset).min(rest.len() as u64) as usize;
                    let at = r.base + *offset;
                    w.targets.push((at, n as u64));
                    ref_store(mem, at, &rest[..n]);
                    *offset += n as u64;
                    w.consumed += n;
                    if *offset == r.size {
                        // INT: PMI (single-entry ToPA signals it early; not compared).
                        w.pmi |= r.int && !single_entry;
                        if r.stop {
                            w.stopped = true;
                            self.state = RefState::Stopped;
                            return w;
                        }
                        *index = (*index + 1) & INDEX_BITS;
                        *offset = 0;
                        if !self.topa_load(mem) {
                            w.error = true;
                            self.state = RefState::Error;
                            return w;
                        }
                    }
                }
                RefScheme::Msrs { .. } => return w,
            }
        }
        w
    }
}

/// Check that every store recorded in `writes` lies inside one of `targets` (both (addr, len)).
pub fn assert_writes_inside(writes: &[(u64, usize)], targets: &[(u64, u64)], what: &str) {
    for &(a, l) in writes {
        let (a, e) = (u128::from(a), u128::from(a) + l as u128);
        let ok = targets.iter().any(|&(t, n)| {
            let (t, te) = (u128::from(t), u128::from(t) + u128::from(n));
            t <= a && e <= te
        });
        assert!(ok, "{what}: store [{a:#x}, {e:#x}) outside every configured output region {targets:x?}");
    }
}

/// Deterministic packet-like bytes for the output targets: byte i of the stream is distinct
/// from its neighbours so a shifted or misplaced store shows.
pub fn stream_bytes(start: u64, n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| {
            let x = (start + i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (x >> 56) as u8
        })
        .collect()
}
