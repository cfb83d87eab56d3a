//! The clocks of full-system mode: the guest's time stamp counter, which timing packets carry
//! (TSC, TMA, MTC, CYC: SDM Vol. 3C §33.3.7) and RTIT's counters use, and the core clock the
//! PMU's cycle events count (CPU_CLK_UNHALTED.CORE and .REF_TSC, Vol. 3B §20.2.2: both the
//! same clock in this model, `Pmu::cycles`) and the LBR records' LBR_INFO[15:0] CYC_CNT measure.
//!
//! QEMU's TCG answers the guest's RDTSC from the host TSC minus an offset fixed when the VM
//! starts (cpu_get_ticks), or under `-icount shift=N` from virtual time, 2^N ns per instruction.
//! The emulator supplies the raw readings (the host TSC, the vCPU's instruction count); what the
//! guest's clock is follows here: [`raw_clock`] picks the source, [`guest_tsc`] removes the
//! offset [`tsc_offset_from_rdtsc`] learned from the guest's own RDTSC results, [`CycleClock`]
//! hands the cycles since the last reading to the counters, [`BatchClock`] spreads a clock
//! interval over the instructions of a run of recorded blocks, and [`icount_shift`] reads
//! `-icount` from QEMU's command line.

use crate::pmu::Pmu;

/// The clock behind the guest's TSC: under `-icount shift=N` (`icount_shift`) the vCPU's
/// instruction count << N (QEMU's virtual nanoseconds), else the host TSC, or the instruction
/// count on hosts without one.
#[inline]
pub fn raw_clock(icount_shift: Option<u32>, insns: u64, host_tsc: Option<u64>) -> u64 {
    match (icount_shift, host_tsc) {
        (Some(shift), _) => insns << shift,
        (None, Some(host)) => host,
        (None, None) => insns,
    }
}

/// The guest's TSC at raw clock `raw`: the raw clock minus the learned offset (modulo 2^64:
/// QEMU's guest TSC may be ahead of the host's).
#[inline]
pub fn guest_tsc(raw: u64, offset: u64) -> u64 {
    raw.wrapping_sub(offset)
}

/// The offset between the raw clock and the guest's TSC, from an RDTSC that started at raw
/// clock `raw_at_rdtsc` and left EDX:EAX in the guest's `rdx`, `rax` (their upper halves are
/// cleared by RDTSC in 64-bit mode; whatever they hold is ignored). QEMU keeps one offset for
/// every vCPU but corrects it to keep the guest TSC monotonic, so the latest observation is the
/// best estimate (late only by the time since the RDTSC ran).
#[inline]
pub fn tsc_offset_from_rdtsc(raw_at_rdtsc: u64, rax: u64, rdx: u64) -> u64 {
    raw_at_rdtsc.wrapping_sub((rdx << 32) | (rax & 0xFFFF_FFFF))
}

/// The core clock as the cycle counters last saw it (None: no cycle event counting): cycles
/// are counted at the granularity the emulator reads the clock at (a block, an MSR access).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleClock(pub Option<u64>);

impl CycleClock {
    /// The counters catch up with the clock at `cpl`: the cycles since the last reading go to
    /// them (none at the first reading after counting started or resumed). `now` is read only
    /// while a cycle event counts. Returns whether a counter with INT asked for a PMI
    /// (`Pmu::take_pmi`).
    #[inline]
    pub fn count(&mut self, pmu: &mut Pmu, cpl: u8, now: impl FnOnce() -> u64) -> bool {
        if !pmu.counts_cycles() {
            self.0 = None;
            return false;
        }
        let now = now();
        if let Some(before) = self.0.replace(now) {
            pmu.cycles(now.saturating_sub(before), cpl);
            return pmu.take_pmi();
        }
        false
    }

    /// The clock stops (HLT: CPU_CLK_UNHALTED does not count halted time): counting restarts
    /// at the next reading.
    #[inline]
    pub fn stop(&mut self) {
        self.0 = None;
    }
}

/// The core clock across a run of recorded blocks (the plugin's `run_recorded_counting`): it
/// advances from `start` in proportion to the instructions retired (`per_insn`: clocks per
/// instruction in 32.32 fixed point), of which the block before the run retired `before`.
#[derive(Clone, Copy, Debug)]
pub struct BatchClock {
    pub start: u64,
    pub per_insn: u128,
    pub before: u64,
}

impl BatchClock {
    /// `span` clocks from `start` over `total` instructions.
    pub fn new(start: u64, span: u64, before: u64, total: u64) -> Self {
        BatchClock { start, per_insn: (u128::from(span) << 32) / u128::from(total.max(1)), before }
    }

    /// The clock once `retired` of the instructions have retired.
    #[inline]
    pub fn at(&self, retired: u64) -> u64 {
        self.start.wrapping_add((u128::from(retired) * self.per_insn >> 32) as u64)
    }
}

/// `-icount N` / `-icount shift=N[,...]` with a fixed shift (not `auto`) in QEMU's arguments
/// (`args`, the program name first): N, if below 32.
pub fn icount_shift(args: &[String]) -> Option<u32> {
    let i = args.iter().position(|a| a == "-icount" || a == "--icount")?;
    let v = args.get(i + 1)?;
    let shift = v.split(',').find_map(|p| p.strip_prefix("shift=")).unwrap_or(v.split(',').next()?);
    shift.parse().ok().filter(|s: &u32| *s < 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmu::{PmuCaps, IA32_FIXED_CTR0, IA32_FIXED_CTR_CTRL, IA32_PERF_GLOBAL_CTRL};

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn icount_clock_counts_instructions_shifted_and_ignores_the_host_tsc() {
        assert_eq!(raw_clock(Some(3), 1000, Some(123_456)), 8000);
        assert_eq!(raw_clock(Some(0), 1000, None), 1000);
    }

    #[test]
    fn without_icount_the_clock_is_the_host_tsc_or_without_one_the_instruction_count() {
        assert_eq!(raw_clock(None, 1000, Some(123_456)), 123_456);
        assert_eq!(raw_clock(None, 1000, None), 1000);
    }

    #[test]
    fn the_guest_tsc_is_the_raw_clock_minus_the_offset_an_rdtsc_showed_even_when_ahead_of_the_host() {
        // The guest read 0000_0002:8000_0000 (RAX's upper half left as garbage) at host TSC 5E9.
        let offset = tsc_offset_from_rdtsc(5_000_000_000, 0xDEAD_BEEF_8000_0000, 2);
        assert_eq!(guest_tsc(5_000_000_000, offset), 0x2_8000_0000);
        assert_eq!(guest_tsc(5_000_000_100, offset), 0x2_8000_0064);
        // A guest TSC ahead of the host's: the offset wraps, the difference does not.
        let ahead = tsc_offset_from_rdtsc(100, 1000, 0);
        assert_eq!(guest_tsc(150, ahead), 1050);
    }

    /// IA32_FIXED_CTR1 (CPU_CLK_UNHALTED.CORE) counting at CPL 0, with INT, `left` cycles from
    /// its overflow.
    fn cycles_counter(left: u64) -> Pmu {
        let mut p = Pmu::new(PmuCaps::SKYLAKE);
        p.write(IA32_FIXED_CTR0 + 1, (1 << 48) - left).unwrap();
        p.write(IA32_FIXED_CTR_CTRL, 0b1001 << 4).unwrap(); // OS, PMI
        p.write(IA32_PERF_GLOBAL_CTRL, 1 << 33).unwrap();
        p
    }

    #[test]
    fn cycles_count_from_the_first_reading_and_the_overflow_asks_for_a_pmi() {
        let mut p = cycles_counter(1000);
        let mut c = CycleClock::default();
        assert!(!c.count(&mut p, 0, || 10_000), "the first reading starts the clock");
        assert_eq!(p.read(IA32_FIXED_CTR0 + 1), Ok((1 << 48) - 1000));
        assert!(!c.count(&mut p, 0, || 10_600));
        assert_eq!(p.read(IA32_FIXED_CTR0 + 1), Ok((1 << 48) - 400));
        assert!(!c.count(&mut p, 3, || 10_900), "user cycles: not counted (OS only)");
        assert_eq!(p.read(IA32_FIXED_CTR0 + 1), Ok((1 << 48) - 400));
        assert!(c.count(&mut p, 0, || 11_400), "400 more: the counter overflows with PMI");
    }

    #[test]
    fn halted_time_and_time_without_a_cycle_counter_are_not_counted() {
        let mut p = cycles_counter(1 << 40);
        let start = p.read(IA32_FIXED_CTR0 + 1).unwrap();
        let mut c = CycleClock::default();
        c.count(&mut p, 0, || 100);
        c.stop(); // HLT at 100
        c.count(&mut p, 0, || 5_000); // woken at 5000
        c.count(&mut p, 0, || 5_050);
        assert_eq!(p.read(IA32_FIXED_CTR0 + 1).unwrap() - start, 50);
        p.write(IA32_PERF_GLOBAL_CTRL, 0).unwrap();
        c.count(&mut p, 0, || panic!("no cycle event: the clock is not read"));
        assert_eq!(c, CycleClock(None));
        p.write(IA32_PERF_GLOBAL_CTRL, 1 << 33).unwrap();
        c.count(&mut p, 0, || 9_000);
        c.count(&mut p, 0, || 9_010);
        assert_eq!(p.read(IA32_FIXED_CTR0 + 1).unwrap() - start, 60, "the disabled interval is not counted");
    }

    #[test]
    fn a_batch_clock_advances_in_proportion_to_the_instructions_retired() {
        // 300 clocks over 4 + 8 instructions from 1000: 25 per instruction.
        let c = BatchClock::new(1000, 300, 4, 12);
        assert_eq!(c.at(c.before), 1100, "the run's first block starts after the block before it");
        assert_eq!(c.at(12), 1300);
        assert_eq!(BatchClock::new(7, 0, 0, 0).at(5), 7, "an empty interval stays at its start");
    }

    #[test]
    fn icount_shift_of_the_command_line() {
        assert_eq!(icount_shift(&args("qemu-system-x86_64 -m 128 -icount shift=3,sleep=off")), Some(3));
        assert_eq!(icount_shift(&args("qemu-system-x86_64 -icount 5")), Some(5));
        assert_eq!(icount_shift(&args("qemu-system-x86_64 --icount sleep=off,shift=7")), Some(7));
        assert_eq!(icount_shift(&args("qemu-system-x86_64 -icount shift=auto")), None);
        assert_eq!(icount_shift(&args("qemu-system-x86_64 -icount 40")), None);
        assert_eq!(icount_shift(&args("qemu-system-x86_64 -m 128")), None);
    }
}
