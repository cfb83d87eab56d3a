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

use super::ds_area::DsFormat;
use crate::guest_mem::{LinearMemory, MemError};

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
            _ => return None,
        })
    }

    pub fn record_size(self) -> u64 {
        match self {
            PebsFormat::Bits32 => 40,
            PebsFormat::Core => 144,
            PebsFormat::Nehalem => 176,
            PebsFormat::Haswell => 192,
            PebsFormat::Skylake => 200,
        }
    }
}

/// The machine state a record captures (trap-like records: after the triggering instruction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
}

impl PebsState {
    /// The record's bytes in format `f`.
    pub fn encode(&self, f: PebsFormat) -> Vec<u8> {
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

/// The reset value software left for general-purpose counter `n` (written to the counter after
/// its PEBS record, so the next sample comes after the same period).
pub fn counter_reset(mem: &mut impl LinearMemory, ds_area: u64, ds: DsFormat, n: usize) -> Result<u64, MemError> {
    let base = match ds {
        DsFormat::Bits32 => 0x20,
        DsFormat::Bits64 => 0x40,
    };
    let mut b = [0u8; 8];
    mem.read_linear(ds_area + base + 8 * n as u64, &mut b)?;
    Ok(u64::from_le_bytes(b))
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
    let resets = (0..32)
        .filter(|n| applicable & (1 << n) != 0)
        .filter_map(|n| counter_reset(mem, ds_area, ds, n).ok().map(|v| (n, v)))
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
        PebsState { rflags: 0x246, ip: 0x40_1005, gprs, status: 0b10, eventing_ip: 0x40_1003, tsc: 0xABCD_EF01 }
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
    fn counter_reset_values_and_unmapped_areas() {
        let mut m = setup(DsFormat::Bits64, PebsFormat::Core, 2, 2);
        m.write_linear(DS + 0x40 + 8, &(-10000i64 as u64 & 0xFFFF_FFFF_FFFF).to_le_bytes()).unwrap();
        assert_eq!(counter_reset(&mut m, DS, DsFormat::Bits64, 1), Ok(0xFFFF_FFFF_D8F0));
        assert_eq!(write_record(&mut m, 0x9000_0000, DsFormat::Bits64, PebsFormat::Core, &state()), PebsOutcome::Unwritable);
        // A buffer in memory that is not RAM: counted, nothing crashes.
        m.write_linear(DS + 0x28, &0x5000_0000u64.to_le_bytes()).unwrap();
        m.write_linear(DS + 0x30, &0x5000_1000u64.to_le_bytes()).unwrap();
        assert_eq!(write_record(&mut m, DS, DsFormat::Bits64, PebsFormat::Core, &state()), PebsOutcome::Unwritable);
    }
}
