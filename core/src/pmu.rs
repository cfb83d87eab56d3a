//! The architectural performance-monitoring unit as far as a guest OS probes it (SDM Vol. 3B
//! §20.2 "Architectural Performance Monitoring", version 2): CPUID leaf 0AH and the counter,
//! event-select and global control MSRs, with storage that round-trips.
//!
//! The counters do not count yet; what matters for tracing is that Linux's core PMU driver
//! initialises (events/core.c check_hw_exists writes and reads back a counter), because its NMI
//! handler is the one that services ToPA PMIs (IA32_PERF_GLOBAL_STATUS[55], owned by
//! `pt::msr`).

/// General-purpose counters.
pub const NUM_GP: usize = 4;
/// Fixed-function counters.
pub const NUM_FIXED: usize = 3;
/// Counter width in bits.
pub const WIDTH: u32 = 48;

pub const IA32_PMC0: u32 = 0xC1;
pub const IA32_PERFEVTSEL0: u32 = 0x186;
pub const IA32_FIXED_CTR0: u32 = 0x309;
pub const IA32_FIXED_CTR_CTRL: u32 = 0x38D;
pub const IA32_PERF_GLOBAL_CTRL: u32 = 0x38F;

/// CPUID.0AH {EAX, EBX, ECX, EDX}: version 2, 4 counters of 48 bits, EBX length 7 with every
/// architectural event available, 3 fixed counters of 48 bits.
pub fn cpuid_0a() -> [u32; 4] {
    let eax = 2 | ((NUM_GP as u32) << 8) | (WIDTH << 16) | (7 << 24);
    let edx = (NUM_FIXED as u32) | (WIDTH << 5);
    [eax, 0, 0, edx]
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchPmu {
    pub pmc: [u64; NUM_GP],
    pub evtsel: [u64; NUM_GP],
    pub fixed: [u64; NUM_FIXED],
    pub fixed_ctr_ctrl: u64,
    pub global_ctrl: u64,
}

/// Writes with bits outside these masks #GP, as on hardware.
const COUNTER_MASK: u64 = (1 << WIDTH) - 1;
/// IA32_PERFEVTSELx: event, umask, USR, OS, E, PC, INT, ANY (v2: reserved), EN, INV, CMASK.
const EVTSEL_MASK: u64 = 0xFFFF_FFFF & !(1 << 21);
/// IA32_FIXED_CTR_CTRL: 4 bits per fixed counter (EN[1:0], ANY reserved in v2, PMI).
const FIXED_CTRL_MASK: u64 = 0xBBB;
/// IA32_PERF_GLOBAL_CTRL: one enable bit per counter, fixed counters at bit 32.
const GLOBAL_CTRL_MASK: u64 = ((1 << NUM_GP) - 1) | (((1 << NUM_FIXED) - 1) << 32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gp;

impl ArchPmu {
    /// RDPMC with ECX = `ecx` (SDM Vol. 2B RDPMC): bit 30 selects the fixed counters; None for
    /// a counter that does not exist (hardware: #GP).
    pub fn rdpmc(&self, ecx: u32) -> Option<u64> {
        let index = (ecx & 0x3FFF_FFFF) as usize;
        if ecx & (1 << 30) != 0 {
            self.fixed.get(index).copied()
        } else {
            self.pmc.get(index).copied()
        }
    }

    pub fn owns(index: u32) -> bool {
        Self::slot(index).is_some()
    }

    fn slot(index: u32) -> Option<(u8, usize)> {
        let n = |base: u32, count: usize| (base..base + count as u32).contains(&index).then(|| (index - base) as usize);
        if let Some(i) = n(IA32_PMC0, NUM_GP) {
            return Some((0, i));
        }
        if let Some(i) = n(IA32_PERFEVTSEL0, NUM_GP) {
            return Some((1, i));
        }
        if let Some(i) = n(IA32_FIXED_CTR0, NUM_FIXED) {
            return Some((2, i));
        }
        match index {
            IA32_FIXED_CTR_CTRL => Some((3, 0)),
            IA32_PERF_GLOBAL_CTRL => Some((4, 0)),
            _ => None,
        }
    }

    pub fn read(&self, index: u32) -> Option<u64> {
        Some(match Self::slot(index)? {
            (0, i) => self.pmc[i],
            (1, i) => self.evtsel[i],
            (2, i) => self.fixed[i],
            (3, _) => self.fixed_ctr_ctrl,
            _ => self.global_ctrl,
        })
    }

    /// WRMSR: reserved bits #GP. A write to IA32_PMCx sign-extends from bit 31 as the legacy
    /// counter addresses do (SDM §20.2.6 full-width writes need IA32_A_PMCx), keeping 48 bits.
    pub fn write(&mut self, index: u32, value: u64) -> Result<(), Gp> {
        match Self::slot(index).ok_or(Gp)? {
            (0, i) => self.pmc[i] = ((value as u32 as i32) as i64 as u64) & COUNTER_MASK,
            (1, i) => {
                if value & !EVTSEL_MASK != 0 {
                    return Err(Gp);
                }
                self.evtsel[i] = value;
            }
            (2, i) => {
                if value & !COUNTER_MASK != 0 {
                    return Err(Gp);
                }
                self.fixed[i] = value;
            }
            (3, _) => {
                if value & !FIXED_CTRL_MASK != 0 {
                    return Err(Gp);
                }
                self.fixed_ctr_ctrl = value;
            }
            _ => {
                if value & !GLOBAL_CTRL_MASK != 0 {
                    return Err(Gp);
                }
                self.global_ctrl = value;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_0a_matches_the_reference_version_2_pmu() {
        assert_eq!(cpuid_0a(), [0x0730_0402, 0, 0, 0x603]);
    }

    #[test]
    fn linux_check_hw_exists_counter_round_trip() {
        // events/core.c: read the last counter, flip its low 16 bits, write, read back.
        let mut p = ArchPmu::default();
        let reg = IA32_PMC0 + NUM_GP as u32 - 1;
        let v = p.read(reg).unwrap() ^ 0xFFFF;
        p.write(reg, v).unwrap();
        assert_eq!(p.read(reg), Some(v));
    }

    #[test]
    fn reserved_bits_gp_and_unknown_indices_are_not_owned() {
        let mut p = ArchPmu::default();
        assert_eq!(p.write(IA32_PERF_GLOBAL_CTRL, 1 << 40), Err(Gp));
        assert_eq!(p.write(IA32_PERF_GLOBAL_CTRL, 0x7_0000_000F), Ok(()));
        assert_eq!(p.write(IA32_PERFEVTSEL0, 1 << 32), Err(Gp));
        assert_eq!(p.write(IA32_FIXED_CTR_CTRL, 0x4), Err(Gp), "ANY bit is reserved in version 2");
        assert!(!ArchPmu::owns(IA32_PMC0 + 4));
        assert!(ArchPmu::owns(0x30B) && !ArchPmu::owns(0x30C));
        // A 32-bit write to a legacy counter address sign-extends.
        p.write(IA32_PMC0, 0x8000_0000).unwrap();
        assert_eq!(p.read(IA32_PMC0), Some(0xFFFF_8000_0000));
        assert_eq!(p.rdpmc(0), Some(0xFFFF_8000_0000));
        p.write(IA32_FIXED_CTR0 + 1, 0x1234).unwrap();
        assert_eq!(p.rdpmc(0x4000_0001), Some(0x1234));
        assert_eq!(p.rdpmc(0x4000_0003), None);
    }
}
