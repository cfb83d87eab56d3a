//! The hand-off of generated trace bytes to the output units (SDM Vol. 3C §33.2.7), decided
//! per CPU: when the Intel PT bytes generated so far are stored into the output region and when
//! they stay held back, what is lost once the output unit stopped, and how many bytes the
//! internal-buffer models may drain (issue 7: Intel PT's `buffer=`/`drain=`, Atom RTIT's
//! internal buffer).
//!
//! Hardware buffers packets internally and only guarantees them in memory once TraceEn is
//! cleared (§33.2.7). The model holds Intel PT bytes back while storing them later changes
//! nothing but when they arrive ([`OutputUnit::quiet_room`]: no ToPA PMI, STOP, entry load or
//! error is crossed); storing a few bytes per block costs more than generating them. Everything is
//! stored before the guest reads or writes a trace MSR ([`store_held`]) and when TraceEn is
//! cleared (a flushing [`output_step`]), so the output pointers always account for every byte
//! generated.
//!
//! The emulator keeps the adaptation: which guest memory the bytes reach (the port's), the host
//! copy of the stream (`mirror`), its instruction counter and the real-time drainer's grants.

use super::{store_output, GuestPort};
use crate::pt::buffer_spec::DrainSpec;
use crate::pt::internal_buffer::Bandwidth;

/// Intel PT bytes held back before they are stored into the output region, as long as storing
/// them later changes nothing but when they arrive (see the module documentation).
pub const OUTPUT_HOLD_BYTES: u64 = 4096;
/// ... and for at most this many blocks (a few milliseconds), and never across a HLT, so a trace
/// that grows slowly still reaches memory and the host copy at bounded intervals.
pub const OUTPUT_HOLD_BLOCKS: u32 = 1 << 16;

/// What an output step does with the Intel PT bytes generated so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Nothing generated, or held back for this block.
    Hold,
    /// Store them through the output unit now.
    Store,
    /// The output unit stopped (ToPA STOP, output error, §33.3.10): these bytes are lost, as
    /// on hardware; drop them.
    Lost(u64),
}

/// One CPU's hand-off state: the blocks Intel PT bytes have been held back for, the bytes lost
/// after the output stopped (reported at exit), and the drain models' clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputHandoff {
    /// Blocks since Intel PT bytes were last stored while some are held back.
    held_blocks: u32,
    /// Trace bytes generated after the output stopped (ToPA STOP, output error).
    lost_after_stop: u64,
    /// Retired-instruction count at the last drain credit (deterministic drain).
    credited_insns: u64,
    /// Fraction of an RTIT drain byte carried to the next step (`Bandwidth::bytes_for`).
    rtit_carry: u128,
}

impl OutputHandoff {
    /// The `held` Intel PT bytes generated so far stay held back for this block: nothing
    /// generated is nothing to store; otherwise while fewer than `OUTPUT_HOLD_BYTES`, within the
    /// output unit's `quiet_room` (asked only then) and for fewer than `OUTPUT_HOLD_BLOCKS`
    /// blocks (this one counted). Only while the output unit runs.
    #[inline]
    pub fn hold(&mut self, held: u64, quiet_room: impl FnOnce() -> u64) -> bool {
        if held == 0 {
            return true;
        }
        if held < OUTPUT_HOLD_BYTES && held <= quiet_room() && self.held_blocks < OUTPUT_HOLD_BLOCKS {
            self.held_blocks += 1;
            return true;
        }
        false
    }

    /// The output step's decision for the `held` Intel PT bytes: with the output unit stopped
    /// (`active` false) they are lost and counted; a `flush` (TraceEn cleared) stores them;
    /// otherwise [`hold`](Self::hold) decides.
    #[inline]
    pub fn step(&mut self, held: u64, active: bool, flush: bool, quiet_room: impl FnOnce() -> u64) -> Handoff {
        if held == 0 {
            return Handoff::Hold;
        }
        if !active {
            self.lost_after_stop += held;
            return Handoff::Lost(held);
        }
        if !flush && self.hold(held, quiet_room) {
            return Handoff::Hold;
        }
        Handoff::Store
    }

    /// `more` blocks ran without an output step of their own (the model ran them as one run):
    /// they count towards `OUTPUT_HOLD_BLOCKS` as if each had had one.
    #[inline]
    pub fn held_for(&mut self, more: u32) {
        self.held_blocks = self.held_blocks.saturating_add(more).min(OUTPUT_HOLD_BLOCKS);
    }

    /// The held bytes were stored; `lost` of them did not fit (STOP or an error on the way).
    pub fn stored(&mut self, lost: usize) {
        self.held_blocks = 0;
        self.lost_after_stop += lost as u64;
    }

    /// Blocks the current bytes have been held back for.
    pub fn held_blocks(&self) -> u32 {
        self.held_blocks
    }

    /// Trace bytes generated after a ToPA STOP or an output error, never written.
    pub fn lost_after_stop(&self) -> u64 {
        self.lost_after_stop
    }

    /// Instructions retired since the previous credit, `now` being the CPU's retired-instruction
    /// count (wrapping): the deterministic drain credit of an internal buffer.
    #[inline]
    pub fn insns_since_credit(&mut self, now: u64) -> u64 {
        let d = now.wrapping_sub(self.credited_insns);
        self.credited_insns = now;
        d
    }

    /// The bytes Atom RTIT's internal buffer may drain at this step with `buffer=`/`drain=`:
    /// `bytes` per `insns` instructions retired since the previous credit (the fraction carried
    /// on; a zero period drains nothing), or what the real-time drainer `granted`. Bandwidth
    /// beyond the pending bytes is lost, as for Intel PT's buffer.
    pub fn rtit_allowance(&mut self, drain: DrainSpec, now: u64, granted: impl FnOnce() -> u64) -> usize {
        let allowance = match drain {
            DrainSpec::PerInstructions { bytes, insns } => {
                let d = self.insns_since_credit(now);
                Bandwidth::new(bytes, insns).map_or(0, |bw| bw.bytes_for(d, &mut self.rtit_carry))
            }
            DrainSpec::RealTime { .. } => granted(),
        };
        usize::try_from(allowance).unwrap_or(usize::MAX)
    }
}

/// The Intel PT part of an output step (a block boundary, an event; `flush` when TraceEn is
/// cleared): the bytes generated so far are held, stored through the output unit
/// ([`store`]), or dropped as lost while the output unit is stopped.
pub fn output_step<P: GuestPort>(port: &mut P, flush: bool, mirror: impl FnOnce(&[u8])) {
    let cpu = port.cpu();
    let held = cpu.tracer.output().len() as u64;
    let output = &*cpu.output;
    match cpu.handoff.step(held, *cpu.output_active, flush, || output.quiet_room()) {
        Handoff::Hold => {}
        Handoff::Lost(_) => cpu.tracer.clear_output(),
        Handoff::Store => store(port, mirror),
    }
}

/// The Intel PT bytes held back so far reach the output region, without a drain step of the
/// internal-buffer model: before the guest reads or writes a trace MSR and at HLT. Nothing
/// while the output unit is stopped (the next output step counts them lost).
pub fn store_held<P: GuestPort>(port: &mut P, mirror: impl FnOnce(&[u8])) {
    let cpu = port.cpu();
    if !cpu.tracer.output().is_empty() && *cpu.output_active {
        store(port, mirror);
    }
}

/// Store the Intel PT bytes generated so far through the output unit (`store_output`: the
/// ToPA PMI, STOP and output errors), `mirror` receiving the bytes stored.
pub fn store<P: GuestPort>(port: &mut P, mirror: impl FnOnce(&[u8])) {
    let lost = store_output(port, mirror);
    port.cpu().handoff.stored(lost);
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNING_SINGLE_RANGE: u64 = u64::MAX;

    #[test]
    fn nothing_generated_is_held_without_counting_a_block() {
        let mut h = OutputHandoff::default();
        let mut asked = false;
        assert!(h.hold(0, || {
            asked = true;
            0
        }));
        assert_eq!(h.held_blocks(), 0);
        assert!(!asked, "the quiet room is not asked for nothing");
        assert_eq!(h.step(0, false, true, || 0), Handoff::Hold, "not even lost when stopped");
        assert_eq!(h.lost_after_stop(), 0);
    }

    #[test]
    fn bytes_below_the_hold_limit_and_within_the_quiet_room_are_held_one_block_at_a_time() {
        let mut h = OutputHandoff::default();
        for n in 1..=3 {
            assert_eq!(h.step(100, true, false, || RUNNING_SINGLE_RANGE), Handoff::Hold);
            assert_eq!(h.held_blocks(), n);
        }
        assert_eq!(h.step(OUTPUT_HOLD_BYTES - 1, true, false, || 4096), Handoff::Hold);
    }

    #[test]
    fn the_hold_limit_in_bytes_stores_them() {
        let mut h = OutputHandoff::default();
        let mut asked = false;
        assert_eq!(
            h.step(OUTPUT_HOLD_BYTES, true, false, || {
                asked = true;
                RUNNING_SINGLE_RANGE
            }),
            Handoff::Store
        );
        assert!(!asked, "the byte limit decides before the output unit is asked");
        assert_eq!(h.held_blocks(), 0);
    }

    #[test]
    fn bytes_beyond_the_quiet_room_are_stored_at_once_so_a_topa_pmi_or_stop_falls_in_its_block() {
        let mut h = OutputHandoff::default();
        assert_eq!(h.step(65, true, false, || 64), Handoff::Store);
        assert_eq!(h.step(64, true, false, || 64), Handoff::Hold, "exactly the room still holds");
        // A stopped or MSR-programmed output unit has no quiet room.
        assert_eq!(h.step(1, true, false, || 0), Handoff::Store);
    }

    #[test]
    fn the_block_limit_stores_a_trace_that_grows_slowly() {
        let mut h = OutputHandoff::default();
        for _ in 0..OUTPUT_HOLD_BLOCKS {
            assert!(h.hold(1, || RUNNING_SINGLE_RANGE));
        }
        assert_eq!(h.held_blocks(), OUTPUT_HOLD_BLOCKS);
        assert_eq!(h.step(1, true, false, || RUNNING_SINGLE_RANGE), Handoff::Store);
        h.stored(0);
        assert_eq!(h.held_blocks(), 0, "a store starts the count again");
        assert!(h.hold(1, || RUNNING_SINGLE_RANGE));
    }

    #[test]
    fn blocks_run_without_their_own_step_count_towards_the_block_limit_and_saturate_at_it() {
        let mut h = OutputHandoff::default();
        h.held_for(10);
        assert_eq!(h.held_blocks(), 10);
        h.held_for(u32::MAX);
        assert_eq!(h.held_blocks(), OUTPUT_HOLD_BLOCKS);
        assert_eq!(h.step(1, true, false, || RUNNING_SINGLE_RANGE), Handoff::Store);
    }

    #[test]
    fn a_flush_stores_what_would_be_held() {
        let mut h = OutputHandoff::default();
        assert_eq!(h.step(1, true, true, || RUNNING_SINGLE_RANGE), Handoff::Store);
        assert_eq!(h.held_blocks(), 0, "a flush does not count a held block");
    }

    #[test]
    fn nothing_is_stored_after_stop_and_the_bytes_generated_are_counted_lost() {
        let mut h = OutputHandoff::default();
        assert_eq!(h.step(300, false, false, || RUNNING_SINGLE_RANGE), Handoff::Lost(300));
        assert_eq!(h.step(20, false, true, || RUNNING_SINGLE_RANGE), Handoff::Lost(20), "a flush stores nothing either");
        // A store that hit STOP part-way lost the rest.
        h.stored(7);
        assert_eq!(h.lost_after_stop(), 327);
    }

    #[test]
    fn the_deterministic_drain_credit_is_the_instructions_retired_since_the_last_one() {
        let mut h = OutputHandoff::default();
        assert_eq!(h.insns_since_credit(100), 100);
        assert_eq!(h.insns_since_credit(150), 50);
        assert_eq!(h.insns_since_credit(150), 0);
        // The counter wraps.
        let mut h = OutputHandoff { credited_insns: u64::MAX - 1, ..Default::default() };
        assert_eq!(h.insns_since_credit(3), 5);
    }

    #[test]
    fn the_rtit_drain_allowance_is_bytes_per_instructions_with_the_fraction_carried() {
        let mut h = OutputHandoff::default();
        let three_per_two = DrainSpec::PerInstructions { bytes: 3, insns: 2 };
        let never = || panic!("the real-time drainer is not asked");
        assert_eq!(h.rtit_allowance(three_per_two, 1, never), 1); // 1.5
        assert_eq!(h.rtit_allowance(three_per_two, 2, never), 2); // 0.5 + 1.5
        assert_eq!(h.rtit_allowance(three_per_two, 2, never), 0);
        assert_eq!(h.rtit_allowance(three_per_two, 12, never), 15);
        // A zero period (refused by the option parser) drains nothing rather than dividing by 0.
        assert_eq!(h.rtit_allowance(DrainSpec::PerInstructions { bytes: 8, insns: 0 }, 100, never), 0);
    }

    #[test]
    fn the_real_time_rtit_drain_allowance_is_what_the_drainer_granted_and_leaves_the_instruction_credit() {
        let mut h = OutputHandoff::default();
        assert_eq!(h.rtit_allowance(DrainSpec::RealTime { bytes_per_sec: 1 << 20 }, 500, || 4096), 4096);
        assert_eq!(h.insns_since_credit(600), 600, "the instruction credit did not move");
    }
}
