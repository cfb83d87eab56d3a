//! `struct perf_event_attr` (include/uapi/linux/perf_event.h, PERF_ATTR_SIZE_VER7 = 128 bytes)
//! for the two events of `perf record -e intel_pt//u`: the intel_pt event and the dummy
//! sideband event that carries MMAP2/COMM/FORK/EXIT.

/// PERF_ATTR_SIZE_VER7: the attr size perf 5.13..6.2 writes (newer perf reads it too).
pub const ATTR_SIZE: u32 = 128;

/// PERF_TYPE_SOFTWARE, and its PERF_COUNT_SW_DUMMY config.
pub const TYPE_SOFTWARE: u32 = 1;
pub const COUNT_SW_DUMMY: u64 = 9;

// PERF_SAMPLE_* bits.
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;

/// The sample type of both events: per-thread recording has no PERF_SAMPLE_CPU. The
/// `sample_id_all` trailer of every sideband record follows it (record::SampleId).
pub const SAMPLE_TYPE: u64 = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_IDENTIFIER;

// Bits of the flags word at offset 40.
pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub const FLAG_MMAP: u64 = 1 << 8;
pub const FLAG_COMM: u64 = 1 << 9;
pub const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
pub const FLAG_TASK: u64 = 1 << 13;
pub const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub const FLAG_MMAP2: u64 = 1 << 23;
pub const FLAG_COMM_EXEC: u64 = 1 << 24;

/// The fields of `perf_event_attr` this writer sets; everything else is zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub kind: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub flags: u64,
}

impl Attr {
    /// `intel_pt//u`: `pmu_type` (also in AUXTRACE_INFO, so perf knows which event is the
    /// trace) and `config` in the intel_pt PMU's encoding (the IA32_RTIT_CTL bit positions).
    pub fn intel_pt(pmu_type: u32, config: u64) -> Attr {
        Attr {
            kind: pmu_type,
            config,
            sample_period: 1,
            sample_type: SAMPLE_TYPE,
            flags: FLAG_DISABLED
                | FLAG_EXCLUDE_KERNEL
                | FLAG_EXCLUDE_HV
                | FLAG_ENABLE_ON_EXEC
                | FLAG_SAMPLE_ID_ALL,
        }
    }

    /// `dummy:u`, the tracking event: MMAP2, COMM (with exec), FORK/EXIT.
    pub fn dummy() -> Attr {
        Attr {
            kind: TYPE_SOFTWARE,
            config: COUNT_SW_DUMMY,
            sample_period: 1,
            sample_type: SAMPLE_TYPE,
            flags: FLAG_DISABLED
                | FLAG_EXCLUDE_KERNEL
                | FLAG_EXCLUDE_HV
                | FLAG_MMAP
                | FLAG_COMM
                | FLAG_ENABLE_ON_EXEC
                | FLAG_TASK
                | FLAG_SAMPLE_ID_ALL
                | FLAG_MMAP2
                | FLAG_COMM_EXEC,
        }
    }

    /// The 128 bytes of `perf_event_attr`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; ATTR_SIZE as usize];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&ATTR_SIZE.to_le_bytes());
        b[8..16].copy_from_slice(&self.config.to_le_bytes());
        b[16..24].copy_from_slice(&self.sample_period.to_le_bytes());
        b[24..32].copy_from_slice(&self.sample_type.to_le_bytes());
        // read_format (32..40) = 0.
        b[40..48].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intel_pt_attr_layout() {
        let b = Attr::intel_pt(8, 0x2401).to_bytes();
        assert_eq!(b.len(), 128);
        assert_eq!(&b[0..8], &[8, 0, 0, 0, 128, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0x2401);
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 0x10007);
        let flags = u64::from_le_bytes(b[40..48].try_into().unwrap());
        // disabled, exclude_kernel, exclude_hv, enable_on_exec, sample_id_all
        assert_eq!(flags, 0x4_1061);
        assert!(b[48..].iter().all(|&x| x == 0));
    }

    #[test]
    fn dummy_attr_tracks_sideband() {
        let a = Attr::dummy();
        assert_eq!((a.kind, a.config), (1, 9));
        assert_eq!(a.flags, 0x0184_3361);
    }
}
