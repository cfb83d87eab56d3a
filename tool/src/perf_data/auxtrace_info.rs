//! PERF_RECORD_AUXTRACE_INFO (type 70) for Intel PT: `struct perf_record_auxtrace_info`
//! {header, u32 type = PERF_AUXTRACE_INTEL_PT, u32 reserved, u64 priv[]} with the priv array of
//! tools/perf/util/intel-pt.h (INTEL_PT_PMU_TYPE .. INTEL_PT_FILTER_STR_LEN) followed by the
//! NUL-terminated address-filter string padded to 8 bytes.

use super::record::Record;

pub const PERF_RECORD_AUXTRACE_INFO: u32 = 70;
/// `enum auxtrace_type`: PERF_AUXTRACE_INTEL_PT.
pub const PERF_AUXTRACE_INTEL_PT: u32 = 1;

/// What perf's intel_pt decoder needs to know about the recording (intel_pt_process_auxtrace_info).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntelPtInfo {
    /// The intel_pt event's attr.type.
    pub pmu_type: u32,
    /// TSC -> perf time: time = time_zero + (tsc * time_mult) >> time_shift.
    pub time_shift: u16,
    pub time_mult: u32,
    pub time_zero: u64,
    /// Without it perf decodes without timestamps.
    pub cap_user_time_zero: bool,
    /// Masks of the intel_pt config bits (the IA32_RTIT_CTL bit positions).
    pub tsc_bit: u64,
    pub noretcomp_bit: u64,
    pub mtc_bit: u64,
    pub mtc_freq_bits: u64,
    pub cyc_bit: u64,
    /// CPUID.15H: TSC / crystal clock (CTC) = EBX / EAX.
    pub tsc_ctc_ratio_n: u32,
    pub tsc_ctc_ratio_d: u32,
    pub max_non_turbo_ratio: u32,
    /// perf's bare address-filter syntax (`filter 0x401000/0x100`), or empty.
    pub filter: String,
}

impl IntelPtInfo {
    /// The record; per-thread buffers (per_cpu_mmaps = 0), no sched_switch, no snapshot mode.
    pub fn to_record(&self) -> Vec<u8> {
        let mut r = Record::new(PERF_RECORD_AUXTRACE_INFO, 0);
        r.u32(PERF_AUXTRACE_INTEL_PT).u32(0);
        r.u64(self.pmu_type as u64) // INTEL_PT_PMU_TYPE
            .u64(self.time_shift as u64) // INTEL_PT_TIME_SHIFT
            .u64(self.time_mult as u64) // INTEL_PT_TIME_MULT
            .u64(self.time_zero) // INTEL_PT_TIME_ZERO
            .u64(self.cap_user_time_zero as u64) // INTEL_PT_CAP_USER_TIME_ZERO
            .u64(self.tsc_bit) // INTEL_PT_TSC_BIT
            .u64(self.noretcomp_bit) // INTEL_PT_NORETCOMP_BIT
            .u64(0) // INTEL_PT_HAVE_SCHED_SWITCH
            .u64(0) // INTEL_PT_SNAPSHOT_MODE
            .u64(0) // INTEL_PT_PER_CPU_MMAPS
            .u64(self.mtc_bit) // INTEL_PT_MTC_BIT
            .u64(self.mtc_freq_bits) // INTEL_PT_MTC_FREQ_BITS
            .u64(self.tsc_ctc_ratio_n as u64) // INTEL_PT_TSC_CTC_N
            .u64(self.tsc_ctc_ratio_d as u64) // INTEL_PT_TSC_CTC_D
            .u64(self.cyc_bit) // INTEL_PT_CYC_BIT
            .u64(self.max_non_turbo_ratio as u64) // INTEL_PT_MAX_NONTURBO_RATIO
            .u64(self.filter.len() as u64); // INTEL_PT_FILTER_STR_LEN
        if !self.filter.is_empty() {
            r.string(&self.filter, 8);
        }
        r.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> IntelPtInfo {
        IntelPtInfo {
            pmu_type: 8,
            time_shift: 0,
            time_mult: 1,
            time_zero: 0,
            cap_user_time_zero: true,
            tsc_bit: 1 << 10,
            noretcomp_bit: 1 << 11,
            mtc_bit: 1 << 9,
            mtc_freq_bits: 0xf << 14,
            cyc_bit: 1 << 1,
            tsc_ctc_ratio_n: 128,
            tsc_ctc_ratio_d: 1,
            max_non_turbo_ratio: 24,
            filter: String::new(),
        }
    }

    fn priv_at(r: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(r[16 + 8 * i..24 + 8 * i].try_into().unwrap())
    }

    #[test]
    fn priv_array_in_intel_pt_h_order() {
        let r = info().to_record();
        // header + type/reserved + 17 u64 (INTEL_PT_AUXTRACE_PRIV_MAX)
        assert_eq!(r.len(), 8 + 8 + 17 * 8);
        assert_eq!(u16::from_le_bytes([r[6], r[7]]) as usize, r.len());
        assert_eq!(&r[0..4], &70u32.to_le_bytes());
        assert_eq!(&r[8..12], &1u32.to_le_bytes());
        let want = [8, 0, 1, 0, 1, 0x400, 0x800, 0, 0, 0, 0x200, 0x3c000, 128, 1, 2, 24, 0];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(priv_at(&r, i), *w, "priv[{i}]");
        }
    }

    #[test]
    fn filter_string_follows_the_array() {
        let mut i = info();
        i.filter = "filter 0x401000/0x100".into();
        let r = i.to_record();
        assert_eq!(priv_at(&r, 16), 21);
        let s = &r[16 + 17 * 8..];
        assert_eq!(s.len(), 24); // roundup(21 + 1, 8)
        assert_eq!(&s[..22], b"filter 0x401000/0x100\0");
    }
}
