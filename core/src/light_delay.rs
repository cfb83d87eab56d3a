//! How long a full-system run keeps its translations *full* (every block with its callback)
//! after the last vCPU stopped needing to see blocks, before it flushes them to go *light*
//! (issue 13; the plugin's `instrumentation.rs` does the switching).
//!
//! Each switch flushes QEMU's translation cache, and the guest's working set is translated again:
//! in the Linux guest a switch costs ~0.3-0.5 s of retranslation. Linux's perf turns its counters,
//! LBRs or Intel PT on when the workload execs and off when it exits, and a script runs perf
//! commands one after the other, so a fixed delay flushes twice per command (measured: 486,639
//! blocks translated in 16 round trips for five perf commands, against 126,198 with every block
//! instrumented throughout, which ran each command 0.5-0.6 s faster). So the delay adapts:
//! - it grows fourfold (up to [`LightDelay::MAX_NS`]) when a feature makes the translations full
//!   again soon after they went light (within [`LightDelay::SHORT`] delays: the flush bought
//!   little; perf's own start-up between two commands is ~2-3 s of light time in the guest);
//! - it halves (down to [`LightDelay::BASE_NS`]) after a light period of at least
//!   [`LightDelay::LONG`] delays (the guest has stopped using the features for a while).
//!
//! Going full for a result fix-up outside IA-32e mode (firmware, boot code) does not lengthen
//! the delay: that is the boot's pattern, and a boot should stay light as much as it can.
//! The delay changes speed only, never what the model sees: going full always happens before
//! the block that needs it.

/// The light-switch delay, a pure function of the switches seen (times in nanoseconds on any
/// monotonic clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LightDelay {
    delay_ns: u64,
    /// When the translations last went light (None: full since then, or never light).
    light_since: Option<u64>,
}

impl Default for LightDelay {
    fn default() -> Self {
        Self::new()
    }
}

impl LightDelay {
    /// At start: the base delay, full (never light yet).
    pub const fn new() -> Self {
        LightDelay { delay_ns: Self::BASE_NS, light_since: None }
    }

    /// The delay at start and the shortest: 500 ms.
    pub const BASE_NS: u64 = 500_000_000;
    /// The longest: 8 s.
    pub const MAX_NS: u64 = 8_000_000_000;
    /// A light period shorter than this many delays, ended by a feature, lengthens the delay.
    pub const SHORT: u64 = 8;
    /// ... by this factor.
    pub const GROWTH: u64 = 4;
    /// A light period of at least this many delays halves it.
    pub const LONG: u64 = 16;

    /// How long every vCPU must have needed no blocks before the translations go light.
    pub fn delay_ns(&self) -> u64 {
        self.delay_ns
    }

    /// The translations went light at `now`.
    pub fn went_light(&mut self, now: u64) {
        self.light_since = Some(now);
    }

    /// The translations go full at `now`; `for_feature`: because a vCPU needs to see blocks
    /// (Intel PT, BTS, RTIT, counters, LBRs), not for a result fix-up outside IA-32e mode.
    pub fn going_full(&mut self, now: u64, for_feature: bool) {
        let Some(since) = self.light_since.take() else { return };
        let light_for = now.saturating_sub(since);
        if light_for >= Self::LONG * self.delay_ns {
            self.delay_ns = (self.delay_ns / 2).max(Self::BASE_NS);
        } else if for_feature && light_for < Self::SHORT * self.delay_ns {
            self.delay_ns = (self.delay_ns * Self::GROWTH).min(Self::MAX_NS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn perf_commands_back_to_back_lengthen_the_delay_up_to_its_maximum() {
        let mut d = LightDelay::default();
        let mut now = 0;
        let mut seen = vec![d.delay_ns()];
        for _ in 0..6 {
            // Full while the workload runs, light once the delay passed, full again 2.5 s later
            // (the next perf command's workload starts).
            now += d.delay_ns();
            d.went_light(now);
            now += 2500 * MS;
            d.going_full(now, true);
            seen.push(d.delay_ns());
        }
        assert_eq!(seen, [500, 2000, 8000, 8000, 8000, 8000, 8000].map(|ms| ms * MS));
    }

    #[test]
    fn a_long_light_period_shortens_it_again_down_to_the_base() {
        let mut d = LightDelay { delay_ns: 4000 * MS, light_since: None };
        d.went_light(0);
        d.going_full(16 * 4000 * MS, true);
        assert_eq!(d.delay_ns(), 2000 * MS);
        d.went_light(0);
        d.going_full(16 * 4000 * MS - 1, true); // 32 delays of 2 s: long
        assert_eq!(d.delay_ns(), 1000 * MS);
        for _ in 0..4 {
            d.went_light(0);
            d.going_full(3_600_000 * MS, false);
        }
        assert_eq!(d.delay_ns(), LightDelay::BASE_NS);
    }

    #[test]
    fn boot_fixups_outside_ia32e_mode_leave_the_delay_alone() {
        let mut d = LightDelay::default();
        for t in 1..20 {
            d.went_light(t * 1000 * MS);
            d.going_full(t * 1000 * MS + 10 * MS, false);
        }
        assert_eq!(d.delay_ns(), LightDelay::BASE_NS);
    }

    #[test]
    fn a_feature_after_a_middling_light_period_changes_nothing() {
        let mut d = LightDelay::default();
        d.went_light(0);
        d.going_full(LightDelay::SHORT * LightDelay::BASE_NS, true); // not short, not long
        assert_eq!(d.delay_ns(), LightDelay::BASE_NS);
        d.going_full(1, true); // full already: no light period to judge
        assert_eq!(d.delay_ns(), LightDelay::BASE_NS);
    }
}
