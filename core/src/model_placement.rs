//! Where a vCPU's recorded blocks run through the model (issue 13): on the encoder thread beside
//! the vCPU, or on the vCPU itself. The streams are the same either way (`tests/stream-digests.sh`
//! runs both); only the speed differs. Beside the vCPU the model's work overlaps the guest's, but
//! only while the host has a CPU free for the encoder: on a host with fewer free CPUs than busy
//! threads (a 2-CPU machine running anything else, a guest with more threads than the host has
//! CPUs) the encoder and the vCPU share CPUs, the vCPU loses part of its time slice to it, and
//! running everything on the vCPU is faster (measured on lz: 2.6 s on the vCPU against 3.7-4.0 s
//! with the encoder while another process kept one of the two CPUs busy).
//!
//! The signal: the share of wall time the vCPU's thread got on a CPU, not counting the time it
//! slept waiting for the encoder to release its model (an encoder slower than the guest: the
//! vCPU waits, but the two still overlap, which beats running both one after the other; seen on
//! lz with the machine otherwise quiet: 2.6-2.7 s beside, 3.1-3.6 s on the vCPU, and a first
//! version that counted that wait as lost time moved the model to the vCPU). Beside the vCPU it
//! is sampled over windows of at least `WINDOW`; a window in which the vCPU ran less than
//! `MIN_SHARE` of the time moves the model onto the vCPU. There, `PROBE_AFTER` later, the model
//! moves beside again for a window, and the next sample decides again (the load of a host
//! changes). A thread that blocks (system calls that sleep) also lowers the share; that only
//! moves the model to the vCPU, which costs such a thread nothing.

/// The minimum wall time of one sample.
pub const WINDOW_NS: u64 = 50_000_000;
/// Below this share of wall time on a CPU the vCPU is being preempted.
pub const MIN_SHARE: f64 = 0.85;
/// How long the model stays on the vCPU before it tries beside again.
pub const PROBE_AFTER_NS: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The encoder thread runs the recorded blocks while the vCPU executes.
    Beside,
    /// The vCPU runs its recorded blocks itself when its ring is full.
    OnVcpu,
}

/// The decision for one vCPU, fed with its thread's clocks at the points where its ring runs
/// out of room (`at`): a pure function of the samples.
#[derive(Clone, Copy, Debug)]
pub struct ModelPlacement {
    placement: Placement,
    /// Wall and thread CPU nanoseconds at the start of the current sample or stay.
    since: Option<(u64, u64)>,
    /// Nanoseconds the vCPU slept waiting for the encoder since then.
    waited: u64,
}

impl Default for ModelPlacement {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelPlacement {
    /// The start: beside (on the encoder thread), no sample yet.
    pub const fn new() -> Self {
        ModelPlacement { placement: Placement::Beside, since: None, waited: 0 }
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Whether `at` needs the thread's CPU time now (reading it is a system call: only at the
    /// end of a window, not at every checkpoint).
    pub fn wants_cpu_time(&self, wall_ns: u64) -> bool {
        match self.since {
            None => true,
            Some((w, _)) => wall_ns.saturating_sub(w) >= self.period(),
        }
    }

    fn period(&self) -> u64 {
        match self.placement {
            Placement::Beside => WINDOW_NS,
            Placement::OnVcpu => PROBE_AFTER_NS,
        }
    }

    /// The vCPU slept `ns` waiting for the encoder to release its model.
    pub fn waited(&mut self, ns: u64) {
        self.waited = self.waited.saturating_add(ns);
    }

    /// A checkpoint at wall time `wall_ns`, with the thread's CPU time when `wants_cpu_time`
    /// said so. Returns the new placement when it changes.
    pub fn at(&mut self, wall_ns: u64, cpu_ns: Option<u64>) -> Option<Placement> {
        let Some(cpu) = cpu_ns else { return None };
        let Some((w0, c0)) = self.since else {
            self.since = Some((wall_ns, cpu));
            return None;
        };
        let wall = wall_ns.saturating_sub(w0);
        if wall < self.period() {
            return None;
        }
        self.since = Some((wall_ns, cpu));
        let wall = wall.saturating_sub(std::mem::take(&mut self.waited));
        let next = match self.placement {
            Placement::Beside if (cpu.saturating_sub(c0) as f64) < MIN_SHARE * wall as f64 => Placement::OnVcpu,
            Placement::Beside => return None,
            Placement::OnVcpu => Placement::Beside,
        };
        self.placement = next;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_vcpu_with_its_cpu_to_itself_keeps_the_encoder_beside() {
        let mut p = ModelPlacement::default();
        let mut t = 0;
        assert_eq!(p.at(t, Some(t)), None);
        for _ in 0..100 {
            t += 10 * MS;
            let cpu = p.wants_cpu_time(t).then_some(t * 99 / 100);
            assert_eq!(p.at(t, cpu), None);
        }
        assert_eq!(p.placement(), Placement::Beside);
    }

    #[test]
    fn a_preempted_vcpu_runs_the_model_itself_and_probes_beside_a_second_later() {
        let mut p = ModelPlacement::default();
        assert_eq!(p.at(0, Some(0)), None);
        // 40 ms: no decision before a whole window.
        assert!(!p.wants_cpu_time(40 * MS));
        assert_eq!(p.at(40 * MS, Some(20 * MS)), None);
        // 60 ms wall, 40 ms on a CPU (two thirds: three busy threads on two CPUs).
        assert!(p.wants_cpu_time(60 * MS));
        assert_eq!(p.at(60 * MS, Some(40 * MS)), Some(Placement::OnVcpu));
        // Stays on the vCPU for PROBE_AFTER, whatever the share.
        assert!(!p.wants_cpu_time(60 * MS + PROBE_AFTER_NS - 1));
        assert_eq!(p.at(60 * MS + PROBE_AFTER_NS - 1, Some(60 * MS + PROBE_AFTER_NS - 1)), None);
        let probe = 60 * MS + PROBE_AFTER_NS;
        assert_eq!(p.at(probe, Some(probe)), Some(Placement::Beside));
        // The probe window finds the CPU free now: stays beside.
        assert_eq!(p.at(probe + WINDOW_NS, Some(probe + WINDOW_NS)), None);
        assert_eq!(p.placement(), Placement::Beside);
    }

    #[test]
    fn a_vcpu_waiting_for_a_slower_encoder_keeps_it_beside() {
        let mut p = ModelPlacement::default();
        p.at(0, Some(0));
        // 100 ms: 55 ms on a CPU, 45 ms asleep on the model's lock.
        p.waited(45 * MS);
        assert_eq!(p.at(100 * MS, Some(55 * MS)), None);
        assert_eq!(p.placement(), Placement::Beside);
        // The same share without the wait is preemption.
        assert_eq!(p.at(200 * MS, Some(110 * MS)), Some(Placement::OnVcpu));
    }

    #[test]
    fn the_share_threshold_is_exact() {
        let mut p = ModelPlacement::default();
        p.at(0, Some(0));
        let just_enough = (MIN_SHARE * WINDOW_NS as f64) as u64;
        assert_eq!(p.at(WINDOW_NS, Some(just_enough)), None);
        assert_eq!(p.at(2 * WINDOW_NS, Some(just_enough + just_enough - 1)), Some(Placement::OnVcpu));
    }
}
