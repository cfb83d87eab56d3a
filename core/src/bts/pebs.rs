//! The PEBS half of the Debug Store (SDM Vol. 3B §18.4.9 Figures 18-8/18-9, §18.6.2.4
//! "Processor Event Based Sampling", §18.3.1.1.1 PEBS record formats; seed 001 §6.5, §6.7,
//! §9.1.3-§9.2.5): the PEBS buffer fields of the DS save area, the records of each format and
//! their lengths, the threshold interrupt (GLOBAL_STATUS[62] OvfBuffer), nothing written at or
//! past the absolute maximum, and the counter reset values.
//!
//! The PMU (`crate::pmu::Pmu`) arms PEBS when a PEBS-enabled counter overflows and says when a
//! record is due; [`assist`] then writes it here and gives the counters their reset values.
//!
//! | field                        | 32-bit | 64-bit |
//! |------------------------------|--------|--------|
//! | PEBS buffer base             | 10H    | 20H    |
//! | PEBS index                   | 14H    | 28H    |
//! | PEBS absolute maximum        | 18H    | 30H    |
//! | PEBS interrupt threshold     | 1CH    | 38H    |
//! | PEBS counter n reset (8 B)   | 20H+8n | 40H+8n |
//! | fixed counter i reset (8 B)  |        | 80H+8i (formats <= 4) |
//!
//! Format 4 (adaptive PEBS, PERF_CAPABILITIES[14] PEBS_BASELINE; SDM Vol. 3B "Adaptive PEBS",
//! Linux 6.1 `struct pebs_basic` / `pebs_meminfo` / `pebs_gprs` / `pebs_xmm` / `lbr_entry` and
//! `setup_pebs_adaptive_sample_data`): a record is the groups MSR_PEBS_DATA_CFG selects, in this
//! order, its size in the first field:
//!
//! | group       | bytes        | fields |
//! |-------------|--------------|--------|
//! | basic       | 32           | [47:0] record format (the DATA_CFG applied, 0 for a basic record), [63:48] record size; IP = EventingIP; applicable counters; TSC |
//! | memory info | 32           | data linear address, aux (data source), latency, TSX tuning |
//! | GPRs        | 144          | RFLAGS, IP (trap-like: the next instruction), RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8-R15 |
//! | XMMs        | 256          | XMM0-XMM15 |
//! | LBRs        | 24 per entry | FROM, TO, INFO, youngest first; DATA_CFG[31:24] + 1 entries |

use super::ds_area::DsFormat;
use crate::guest_mem::{LinearMemory, MemError};
use crate::pmu::PebsDataCfg;

/// Bytes of the adaptive record's groups (Linux 6.1 arch/x86/include/asm/perf_event.h).
pub const BASIC_GROUP: u64 = 32;
pub const MEMINFO_GROUP: u64 = 32;
pub const GPRS_GROUP: u64 = 144;
pub const XMMS_GROUP: u64 = 256;
pub const LBR_ENTRY: u64 = 24;

/// A PEBS record format: the 32-bit DS format's record, or IA32_PERF_CAPABILITIES[11:8].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PebsFormat {
    /// 32-bit DS format (no DTES64, outside IA-32e mode): EFLAGS, EIP, 8 GPRs of 4 bytes.
    Bits32,
    /// Format 0 (Core): RFLAGS, RIP, RAX..R15: 144 bytes.
    Core,
    /// Format 1 (Nehalem, "enhanced", seed 001 §6.7.1): + GLOBAL_STATUS, data linear address,
    /// data source, latency: 176 bytes.
    Nehalem,
    /// Format 2 (Haswell): + EventingIP, TSX tuning: 192 bytes.
    Haswell,
    /// Format 3 (Skylake): + TSC; 90H holds the applicable counters: 200 bytes.
    Skylake,
    /// Format 4 (Ice Lake, with PEBS_BASELINE): an adaptive record of the groups in `groups`
    /// (the MSR_PEBS_DATA_CFG the record applies; 0: the basic group only).
    Adaptive { groups: PebsDataCfg },
}

impl PebsFormat {
    /// The record format a processor with PERF_CAPABILITIES[11:8] = `fmt` writes in DS format
    /// `ds` (seed 001 §6.7.1: 40 bytes without DTES64, else 144, 176 when enhanced).
    pub fn select(ds: DsFormat, fmt: u8) -> Option<PebsFormat> {
        Some(match (ds, fmt) {
            (DsFormat::Bits32, _) => PebsFormat::Bits32,
            (DsFormat::Bits64, 0) => PebsFormat::Core,
            (DsFormat::Bits64, 1) => PebsFormat::Nehalem,
            (DsFormat::Bits64, 2) => PebsFormat::Haswell,
            (DsFormat::Bits64, 3) => PebsFormat::Skylake,
            (DsFormat::Bits64, 4) => PebsFormat::Adaptive { groups: PebsDataCfg(0) },
            _ => return None,
        })
    }

    /// The record's status field at 90H: formats 1 and 2 hold IA32_PERF_GLOBAL_STATUS as it
    /// reads at the assist (SDM Vol. 3B Nehalem/Haswell PEBS record tables; seed 001 §6.7: the
    /// enhanced record's four new fields), so every overflow bit software has not cleared shows,
    /// besides the counter that caused it; format 3 and the adaptive basic group hold the
    /// applicable counters only. Formats 0 and 32-bit have no such field.
    pub fn status_field(self, global_status: u64, applicable: u64) -> u64 {
        match self {
            PebsFormat::Nehalem | PebsFormat::Haswell => global_status,
            _ => applicable,
        }
    }

    pub fn record_size(self) -> u64 {
        match self {
            PebsFormat::Bits32 => 40,
            PebsFormat::Core => 144,
            PebsFormat::Nehalem => 176,
            PebsFormat::Haswell => 192,
            PebsFormat::Skylake => 200,
            PebsFormat::Adaptive { groups } => {
                let g = |on: bool, n: u64| if on { n } else { 0 };
                BASIC_GROUP
                    + g(groups.mem_info(), MEMINFO_GROUP)
                    + g(groups.gprs(), GPRS_GROUP)
                    + g(groups.xmms(), XMMS_GROUP)
                    + g(groups.lbrs(), LBR_ENTRY * adaptive_lbr_entries(groups) as u64)
            }
        }
    }
}

/// LBR entries of an adaptive record: DATA_CFG[31:24] + 1, at most the stack's depth. (The
/// field takes 8 bits; what a part with 32 LBRs writes for more than 32 is not documented in
/// the sources at hand: the model writes the 32 it has, an assumption.)
pub fn adaptive_lbr_entries(groups: PebsDataCfg) -> usize {
    (usize::from(groups.lbr_entries_m1()) + 1).min(crate::lbr::DEPTH)
}

/// The machine state a record captures (trap-like records: after the triggering instruction).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PebsState {
    pub rflags: u64,
    /// The IP field: the next instruction for trap-like PEBS (PERF_CAPABILITIES[6]).
    pub ip: u64,
    /// RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP, R8..R15 (record order).
    pub gprs: [u64; 16],
    /// Format >= 1: IA32_PERF_GLOBAL_STATUS (format 3: the applicable counters).
    pub status: u64,
    /// Format >= 2: the instruction that triggered the record.
    pub eventing_ip: u64,
    /// Format >= 3.
    pub tsc: u64,
    /// Format 4, XMMs group: XMM0-XMM15, each in memory byte order.
    pub xmm: [[u8; 16]; 16],
    /// Format 4, LBRs group: the LBR stack (FROM, TO, INFO), youngest first.
    pub lbr: Vec<(u64, u64, u64)>,
}

impl PebsState {
    /// The record's bytes in format `f`.
    pub fn encode(&self, f: PebsFormat) -> Vec<u8> {
        if let PebsFormat::Adaptive { groups } = f {
            return self.encode_adaptive(groups, f.record_size());
        }
        let mut out = Vec::with_capacity(f.record_size() as usize);
        if f == PebsFormat::Bits32 {
            let fields = [self.rflags, self.ip, self.gprs[0], self.gprs[1], self.gprs[2], self.gprs[3], self.gprs[4], self.gprs[5], self.gprs[6], self.gprs[7]];
            for v in fields {
                out.extend_from_slice(&(v as u32).to_le_bytes());
            }
            return out;
        }
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        put(self.rflags);
        put(self.ip);
        for g in self.gprs {
            put(g);
        }
        if f != PebsFormat::Core {
            // status / applicable counters, data linear address, data source, latency: the
            // model has no memory events, so the last three are 0.
            put(self.status);
            put(0);
            put(0);
            put(0);
        }
        if matches!(f, PebsFormat::Haswell | PebsFormat::Skylake) {
            put(self.eventing_ip);
            put(0); // TSX tuning: no transactions
        }
        if f == PebsFormat::Skylake {
            put(self.tsc);
        }
        out
    }

    /// A format 4 record of the groups `groups`, `size` bytes.
    fn encode_adaptive(&self, groups: PebsDataCfg, size: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(size as usize);
        let mut put = |v: u64| out.extend_from_slice(&v.to_le_bytes());
        // Basic group: the record format is the DATA_CFG applied ([47:0]), the size [63:48].
        put((groups.0 & 0xFFFF_FFFF_FFFF) | (size << 48));
        put(self.eventing_ip);
        put(self.status);
        put(self.tsc);
        if groups.mem_info() {
            // Data linear address, aux, latency, TSX tuning: no memory event is modelled
            // (the counted events are instructions, branches and cycles), so all 0.
            for _ in 0..4 {
                put(0);
            }
        }
        if groups.gprs() {
            let g = &self.gprs; // RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP, R8..R15
            for v in [self.rflags, self.ip, g[0], g[2], g[3], g[1], g[7], g[6], g[4], g[5]] {
                put(v);
            }
            for &v in &g[8..] {
                put(v);
            }
        }
        if groups.xmms() {
            for x in &self.xmm {
                out.extend_from_slice(x);
            }
        }
        if groups.lbrs() {
            let mut entries = self.lbr.iter().copied();
            for _ in 0..adaptive_lbr_entries(groups) {
                let (from, to, info) = entries.next().unwrap_or_default();
                for v in [from, to, info] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        out
    }
}

/// The PEBS fields of the DS save area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PebsFields {
    pub base: u64,
    pub index: u64,
    pub abs_max: u64,
    pub threshold: u64,
}

impl PebsFields {
    fn offset(ds: DsFormat) -> u64 {
        4 * ds.field_size()
    }

    pub fn read(mem: &mut impl LinearMemory, ds_area: u64, ds: DsFormat) -> Result<PebsFields, MemError> {
        let n = ds.field_size() as usize;
        let mut raw = [0u8; 32];
        mem.read_linear(ds_area + Self::offset(ds), &mut raw[..4 * n])?;
        let field = |i: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&raw[i * n..(i + 1) * n]);
            u64::from_le_bytes(b)
        };
        Ok(PebsFields { base: field(0), index: field(1), abs_max: field(2), threshold: field(3) })
    }

    fn write_index(mem: &mut impl LinearMemory, ds_area: u64, ds: DsFormat, index: u64) -> Result<(), MemError> {
        let n = ds.field_size() as usize;
        mem.write_linear(ds_area + Self::offset(ds) + ds.field_size(), &index.to_le_bytes()[..n])
    }
}

/// The reset value software left for counter `n` (GP n: n; fixed i: 32 + i, 64-bit DS area,
/// at 80H + 8i for formats <= 4), written to the counter after its PEBS record, so the next
/// sample comes after the same period. None: the 32-bit DS area has no fixed-counter fields.
pub fn counter_reset(mem: &mut impl LinearMemory, ds_area: u64, ds: DsFormat, n: usize) -> Option<Result<u64, MemError>> {
    let offset = match (ds, n) {
        (DsFormat::Bits32, 0..=31) => 0x20 + 8 * n as u64,
        (DsFormat::Bits64, 0..=31) => 0x40 + 8 * n as u64,
        (DsFormat::Bits64, _) => 0x80 + 8 * (n as u64 - 32),
        (DsFormat::Bits32, _) => return None,
    };
    let mut b = [0u8; 8];
    Some(mem.read_linear(ds_area + offset, &mut b).map(|()| u64::from_le_bytes(b)))
}

/// What writing one PEBS record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PebsOutcome {
    /// Written; `pmi`: the index reached the threshold (DS interrupt, GLOBAL_STATUS[62]).
    Written { pmi: bool },
    /// The index was at or past the absolute maximum: nothing written (seed 001 §6.5.3: the
    /// index is not reset, software must do it).
    Full,
    /// The DS area or the buffer is not mapped / not RAM: nothing written, counted.
    Unwritable,
}

/// Write one record of format `f` at the PEBS index of the DS save area at `ds_area`.
pub fn write_record(mem: &mut impl LinearMemory, ds_area: u64, ds: DsFormat, f: PebsFormat, state: &PebsState) -> PebsOutcome {
    let Ok(fields) = PebsFields::read(mem, ds_area, ds) else { return PebsOutcome::Unwritable };
    let size = f.record_size();
    if fields.index >= fields.abs_max || fields.abs_max - fields.index < size {
        return PebsOutcome::Full;
    }
    if mem.write_linear(fields.index, &state.encode(f)).is_err() {
        return PebsOutcome::Unwritable;
    }
    let index = fields.index + size;
    if PebsFields::write_index(mem, ds_area, ds, index).is_err() {
        return PebsOutcome::Unwritable;
    }
    PebsOutcome::Written { pmi: index >= fields.threshold }
}

/// What one PEBS assist did: the record's outcome and the reset values of the applicable GP
/// counters (counter index, value), read from the DS area's counter reset fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assist {
    pub outcome: PebsOutcome,
    pub resets: Vec<(usize, u64)>,
}

/// The PEBS assist for the counters `applicable` (bit n: GP counter n): write the record (the
/// state's status field holds `applicable` in formats >= 3) and read the reset values of those
/// counters. The counters are reloaded whether or not the record fit below the absolute
/// maximum (the assist runs; only the store is suppressed); with the DS area unreadable nothing
/// is reloaded.
pub fn assist(mem: &mut impl LinearMemory, ds_area: u64, ds: DsFormat, f: PebsFormat, state: &PebsState, applicable: u64) -> Assist {
    let outcome = write_record(mem, ds_area, ds, f, state);
    let resets = (0..64)
        .filter(|n| applicable & (1 << n) != 0)
        .filter_map(|n| counter_reset(mem, ds_area, ds, n).and_then(|r| r.ok()).map(|v| (n, v)))
        .collect();
    Assist { outcome, resets }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_mem::SparseMemory;

    const DS: u64 = 0x10_0000;
    const BUF: u64 = 0x20_0000;

    fn setup(ds: DsFormat, f: PebsFormat, records: u64, threshold_records: u64) -> SparseMemory {
        let mut m = SparseMemory::new();
        m.add_ram(DS, 0x1000).add_ram(BUF, 0x4000);
        let n = ds.field_size() as usize;
        let size = f.record_size();
        let fields = [BUF, BUF, BUF + records * size, BUF + threshold_records * size];
        for (i, v) in fields.iter().enumerate() {
            m.write_linear(DS + PebsFields::offset(ds) + (i * n) as u64, &v.to_le_bytes()[..n]).unwrap();
        }
        m
    }

    fn state() -> PebsState {
        let mut gprs = [0u64; 16];
        for (i, g) in gprs.iter_mut().enumerate() {
            *g = 0x1111_0000_0000_0000 * (i as u64 % 15 + 1) + i as u64;
        }
        PebsState { rflags: 0x246, ip: 0x40_1005, gprs, status: 0b10, eventing_ip: 0x40_1003, tsc: 0xABCD_EF01, ..Default::default() }
    }

    fn u64_at(m: &mut SparseMemory, a: u64) -> u64 {
        u64::from_le_bytes(m.bytes(a, 8).try_into().unwrap())
    }

    #[test]
    fn record_length_detection_of_seed_001() {
        // §6.7.1: no DTES64 -> 40 bytes; DTES64 and PERF_CAPABILITIES[11:8] = 0 -> 144, = 1 -> 176.
        assert_eq!(PebsFormat::select(DsFormat::Bits32, 1).map(|f| f.record_size()), Some(40));
        assert_eq!(PebsFormat::select(DsFormat::Bits64, 0).map(|f| f.record_size()), Some(144));
        assert_eq!(PebsFormat::select(DsFormat::Bits64, 1).map(|f| f.record_size()), Some(176));
        assert_eq!(PebsFormat::select(DsFormat::Bits64, 3).map(|f| f.record_size()), Some(200));
        assert_eq!(PebsFormat::select(DsFormat::Bits64, 6), None);
        for f in [PebsFormat::Bits32, PebsFormat::Core, PebsFormat::Nehalem, PebsFormat::Haswell, PebsFormat::Skylake] {
            assert_eq!(state().encode(f).len() as u64, f.record_size(), "{f:?}");
        }
    }

    #[test]
    fn nehalem_record_field_by_field() {
        // Seed 001 §6.7: the enhanced record, 176 bytes: RFLAGS, RIP, RAX..R15, then
        // GLOBAL_STATUS (all overflow bits, not just the applicable counter's), data linear
        // address, data source and latency (0: no memory event is modelled).
        let f = PebsFormat::select(DsFormat::Bits64, 1).unwrap();
        assert_eq!(f, PebsFormat::Nehalem);
        let mut m = setup(DsFormat::Bits64, f, 4, 4);
        m.write_linear(BUF + 176, &[0xA5; 8]).unwrap();
        let s = PebsState { status: f.status_field(0b1001, 0b1), ..state() };
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, f, &s), PebsOutcome::Written { pmi: false });
        assert_eq!(u64_at(&mut m, BUF), 0x246);
        assert_eq!(u64_at(&mut m, BUF + 0x08), 0x40_1005);
        for i in 0..16 {
            assert_eq!(u64_at(&mut m, BUF + 0x10 + 8 * i), s.gprs[i as usize]);
        }
        assert_eq!(u64_at(&mut m, BUF + 0x90), 0b1001, "IA32_PERF_GLOBAL_STATUS");
        for off in [0x98, 0xA0, 0xA8] {
            assert_eq!(u64_at(&mut m, BUF + off), 0, "memory fields at {off:#x}");
        }
        assert_eq!(m.bytes(BUF + 176, 8), vec![0xA5; 8], "nothing past the 176 bytes");
        assert_eq!(u64_at(&mut m, DS + 0x28), BUF + 176, "index advanced by one record");
        // Format 3 keeps the applicable counters there.
        assert_eq!(PebsFormat::Skylake.status_field(0b1001, 0b1), 0b1);
    }

    #[test]
    fn core2_record_field_by_field() {
        // Seed 001 §6.7: the original Core 64-bit record, 144 bytes: RFLAGS, RIP (trap-like on
        // Penryn: the next instruction), RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP, R8..R15 (the
        // SDM's Intel Core PEBS record table, Linux's `struct pebs_record_core`), nothing after.
        let f = PebsFormat::select(DsFormat::Bits64, 0).unwrap();
        assert_eq!(f, PebsFormat::Core);
        let mut m = setup(DsFormat::Bits64, f, 4, 2);
        m.write_linear(BUF + 144, &[0xA5; 64]).unwrap();
        let s = state();
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, f, &s), PebsOutcome::Written { pmi: false });
        assert_eq!(u64_at(&mut m, BUF), 0x246, "RFLAGS");
        assert_eq!(u64_at(&mut m, BUF + 0x08), 0x40_1005, "RIP");
        let names = ["RAX", "RBX", "RCX", "RDX", "RSI", "RDI", "RBP", "RSP", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15"];
        for (i, name) in names.iter().enumerate() {
            assert_eq!(u64_at(&mut m, BUF + 0x10 + 8 * i as u64), s.gprs[i], "{name}");
        }
        // No status field: the 0x90 slot is the next record's, untouched.
        assert_eq!(m.bytes(BUF + 144, 64), vec![0xA5; 64], "nothing past the 144 bytes");
        assert_eq!(u64_at(&mut m, DS + 0x28), BUF + 144, "index advanced by one record");
        // The second record reaches the threshold (2 records): the DS interrupt.
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, f, &s), PebsOutcome::Written { pmi: true });
        assert_eq!(u64_at(&mut m, BUF + 144 + 0x08), 0x40_1005);
        assert_eq!(u64_at(&mut m, DS + 0x28), BUF + 288);
    }

    #[test]
    fn skylake_record_field_by_field() {
        let mut m = setup(DsFormat::Bits64, PebsFormat::Skylake, 4, 4);
        let s = state();
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, PebsFormat::Skylake, &s), PebsOutcome::Written { pmi: false });
        assert_eq!(u64_at(&mut m, BUF), 0x246);
        assert_eq!(u64_at(&mut m, BUF + 0x08), 0x40_1005);
        for i in 0..16 {
            assert_eq!(u64_at(&mut m, BUF + 0x10 + 8 * i), s.gprs[i as usize]);
        }
        assert_eq!(u64_at(&mut m, BUF + 0x90), 0b10, "applicable counters");
        assert_eq!(u64_at(&mut m, BUF + 0xB0), 0x40_1003, "EventingIP");
        assert_eq!(u64_at(&mut m, BUF + 0xC0), 0xABCD_EF01, "TSC");
        assert_eq!(u64_at(&mut m, DS + 0x28), BUF + 200, "index advanced by one record");
    }

    #[test]
    fn bits32_record_and_fields() {
        let mut m = setup(DsFormat::Bits32, PebsFormat::Bits32, 2, 2);
        let s = state();
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits32, PebsFormat::Bits32, &s), PebsOutcome::Written { pmi: false });
        let b = m.bytes(BUF, 40);
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 0x246);
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 0x40_1005);
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), s.gprs[0] as u32);
        assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), s.gprs[7] as u32, "ESP");
        assert_eq!(u32::from_le_bytes(m.bytes(DS + 0x14, 4).try_into().unwrap()) as u64, BUF + 40);
    }

    #[test]
    fn threshold_interrupt_full_buffer_and_index_reset() {
        // Seed 001 §9.1.3/§9.2.2: 3 records fit, the DS interrupt at the second.
        let (ds, f) = (DsFormat::Bits64, PebsFormat::Nehalem);
        let mut m = setup(ds, f, 3, 2);
        let s = state();
        assert_eq!(write_record(&mut m, DS, ds, f, &s), PebsOutcome::Written { pmi: false });
        assert_eq!(write_record(&mut m, DS, ds, f, &s), PebsOutcome::Written { pmi: true });
        assert_eq!(write_record(&mut m, DS, ds, f, &s), PebsOutcome::Written { pmi: true });
        let sentinel = m.bytes(BUF + 3 * 176, 16);
        assert_eq!(write_record(&mut m, DS, ds, f, &s), PebsOutcome::Full);
        assert_eq!(m.bytes(BUF + 3 * 176, 16), sentinel, "nothing past the maximum");
        assert_eq!(u64_at(&mut m, DS + 0x28), BUF + 3 * 176, "the index is not reset");
        // The interrupt handler resets the index; recording resumes at the base.
        m.write_linear(DS + 0x28, &BUF.to_le_bytes()).unwrap();
        assert_eq!(write_record(&mut m, DS, ds, f, &s), PebsOutcome::Written { pmi: false });
    }

    #[test]
    fn assist_writes_the_applicable_counters_and_returns_their_reset_values() {
        let (ds, f) = (DsFormat::Bits64, PebsFormat::Skylake);
        let mut m = setup(ds, f, 1, 1);
        m.write_linear(DS + 0x40 + 16, &0xFFFF_FFFF_FFF0u64.to_le_bytes()).unwrap();
        let s = PebsState { status: 0b100, ..state() };
        let a = assist(&mut m, DS, ds, f, &s, 0b100);
        assert_eq!(a, Assist { outcome: PebsOutcome::Written { pmi: true }, resets: vec![(2, 0xFFFF_FFFF_FFF0)] });
        assert_eq!(u64_at(&mut m, BUF + 0x90), 0b100);
        // Full: no record, the counter is still reloaded.
        let a = assist(&mut m, DS, ds, f, &s, 0b100);
        assert_eq!(a.outcome, PebsOutcome::Full);
        assert_eq!(a.resets, vec![(2, 0xFFFF_FFFF_FFF0)]);
        // The DS area is not mapped: nothing written, nothing reloaded, no crash.
        let a = assist(&mut m, 0x9000_0000, ds, f, &s, 0b100);
        assert_eq!(a, Assist { outcome: PebsOutcome::Unwritable, resets: vec![] });
    }

    #[test]
    fn adaptive_record_sizes_follow_the_groups() {
        let size = |cfg: u64| PebsFormat::Adaptive { groups: PebsDataCfg(cfg) }.record_size();
        assert_eq!(PebsFormat::select(DsFormat::Bits64, 4), Some(PebsFormat::Adaptive { groups: PebsDataCfg(0) }));
        assert_eq!(size(0), 32, "basic");
        assert_eq!(size(0b0001), 64, "+ memory info");
        assert_eq!(size(0b0010), 176, "+ GPRs");
        assert_eq!(size(0b0100), 288, "+ XMMs");
        assert_eq!(size(0b1000), 56, "+ 1 LBR entry");
        assert_eq!(size(0b1000 | 31 << 24), 32 + 32 * 24, "+ 32 LBR entries");
        assert_eq!(size(0xFF00_000F), 32 + 32 + 144 + 256 + 32 * 24, "entries clamped to the stack depth");
        for cfg in [0, 1, 2, 4, 8 | 3 << 24, 0x1F00_000F] {
            let f = PebsFormat::Adaptive { groups: PebsDataCfg(cfg) };
            assert_eq!(state().encode(f).len() as u64, f.record_size(), "{cfg:#x}");
        }
    }

    #[test]
    fn adaptive_record_field_by_field() {
        let groups = PebsDataCfg(0x0100_000F); // memory, GPRs, XMMs, 2 LBR entries
        let f = PebsFormat::Adaptive { groups };
        let size = f.record_size();
        assert_eq!(size, 32 + 32 + 144 + 256 + 48);
        let mut m = setup(DsFormat::Bits64, PebsFormat::Skylake, 4, 4);
        let mut s = PebsState { status: 1 << 32, ..state() };
        for (i, x) in s.xmm.iter_mut().enumerate() {
            *x = [i as u8 + 1; 16];
            x[15] = 0xEE;
        }
        s.lbr = vec![(0x10, 0x20, 1 << 63), (0x30, 0x40, 0), (0x50, 0x60, 0)];
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, f, &s), PebsOutcome::Written { pmi: false });
        assert_eq!(u64_at(&mut m, BUF), 0x0100_000F | size << 48, "record format and size");
        assert_eq!(u64_at(&mut m, BUF + 0x08), 0x40_1003, "basic IP = EventingIP");
        assert_eq!(u64_at(&mut m, BUF + 0x10), 1 << 32, "applicable counters");
        assert_eq!(u64_at(&mut m, BUF + 0x18), 0xABCD_EF01, "TSC");
        for i in 0..4 {
            assert_eq!(u64_at(&mut m, BUF + 0x20 + 8 * i), 0, "memory info");
        }
        let gpr = BUF + 0x40;
        assert_eq!(u64_at(&mut m, gpr), 0x246, "RFLAGS");
        assert_eq!(u64_at(&mut m, gpr + 0x08), 0x40_1005, "GPR IP: trap-like, the next instruction");
        // RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8..R15 from the RAX, RBX, RCX, RDX, RSI, RDI,
        // RBP, RSP, R8.. order of PebsState.
        for (k, i) in [0usize, 2, 3, 1, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15].iter().enumerate() {
            assert_eq!(u64_at(&mut m, gpr + 0x10 + 8 * k as u64), s.gprs[*i], "GPR slot {k}");
        }
        let xmm = gpr + 144;
        for i in 0..16u64 {
            let b = m.bytes(xmm + 16 * i, 16);
            assert_eq!(&b[..15], &[i as u8 + 1; 15][..]);
            assert_eq!(b[15], 0xEE);
        }
        let lbr = xmm + 256;
        assert_eq!((u64_at(&mut m, lbr), u64_at(&mut m, lbr + 8), u64_at(&mut m, lbr + 16)), (0x10, 0x20, 1 << 63));
        assert_eq!((u64_at(&mut m, lbr + 24), u64_at(&mut m, lbr + 32), u64_at(&mut m, lbr + 40)), (0x30, 0x40, 0));
        assert_eq!(u64_at(&mut m, DS + 0x28), BUF + size, "index advanced by the record size");
        // A basic record: 32 bytes, format 0.
        let b = PebsFormat::Adaptive { groups: PebsDataCfg(0) };
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, b, &s), PebsOutcome::Written { pmi: false });
        assert_eq!(u64_at(&mut m, BUF + size), 32 << 48);
        assert_eq!(u64_at(&mut m, BUF + size + 8), 0x40_1003);
    }

    #[test]
    fn fixed_counter_reset_fields_of_format_4() {
        let mut m = setup(DsFormat::Bits64, PebsFormat::Skylake, 1, 1);
        m.write_linear(DS + 0x80 + 8, &0xFFFF_FFFF_FF00u64.to_le_bytes()).unwrap();
        assert_eq!(counter_reset(&mut m, DS, DsFormat::Bits64, 33), Some(Ok(0xFFFF_FFFF_FF00)));
        assert_eq!(counter_reset(&mut m, DS, DsFormat::Bits32, 33), None);
        let f = PebsFormat::Adaptive { groups: PebsDataCfg(0) };
        let a = assist(&mut m, DS, DsFormat::Bits64, f, &state(), 1 << 33);
        assert_eq!(a.resets, vec![(33, 0xFFFF_FFFF_FF00)]);
    }

    #[test]
    fn counter_reset_values_and_unmapped_areas() {
        let mut m = setup(DsFormat::Bits64, PebsFormat::Core, 2, 2);
        m.write_linear(DS + 0x40 + 8, &(-10000i64 as u64 & 0xFFFF_FFFF_FFFF).to_le_bytes()).unwrap();
        assert_eq!(counter_reset(&mut m, DS, DsFormat::Bits64, 1), Some(Ok(0xFFFF_FFFF_D8F0)));
        assert_eq!(write_record(&mut m, 0x9000_0000, DsFormat::Bits64, PebsFormat::Core, &state()), PebsOutcome::Unwritable);
        // A buffer in memory that is not RAM: counted, nothing crashes.
        m.write_linear(DS + 0x28, &0x5000_0000u64.to_le_bytes()).unwrap();
        m.write_linear(DS + 0x30, &0x5000_1000u64.to_le_bytes()).unwrap();
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, PebsFormat::Core, &state()), PebsOutcome::Unwritable);
    }
}
