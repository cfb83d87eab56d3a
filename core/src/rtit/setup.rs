//! Programming an RTIT tracer whose output is a host byte stream (user mode, where the plugin
//! stands in for the kernel driver): the MSR values, the order they are written in, and an
//! output region that appends to a file instead of guest memory.
//!
//! Everything goes through the architectural interface (RDMSR RTIT_CTL first, §3.3.1; WRMSR of
//! every register; Trace_En last, which sends the PSB, §4.2.1), so the stream is what a driver
//! programming these values would get on hardware.

use super::msr::{
    EventId, Fault, RtitCtl, RtitEvents, RTIT_BASE_ADDR, RTIT_CTL, RTIT_EVENTS, RTIT_LIMIT_MASK, RTIT_LIP0,
    RTIT_PKT_CNT, RTIT_STATUS,
};
use super::tracer::RtitTracer;
use crate::guest_mem::{GuestMemory, MemError};

/// The RTIT MSR values of a trace, everything except RTIT_CTL[Trace_En] (set by
/// [`RtitConfig::enable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtitConfig {
    /// RTIT_CTL without Trace_En.
    pub ctl: RtitCtl,
    /// RTIT_EVENTS: Filter_Event_ID and TraceStop_Event_ID.
    pub events: RtitEvents,
    /// RTIT_LIP0..RTIT_LIP3: RANGE0 = [LIP0, LIP2), RANGE1 = [LIP1, LIP3) (§3.3.5).
    pub lip: [u64; 4],
    /// RTIT_PKT_CNT[17:16] Pkt_Mask: a PSB every 2K << Pkt_Mask bytes (§3.3.9).
    pub pkt_mask: u8,
}

/// What an address range of the configuration does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeUse {
    Unused,
    Filter,
    TraceStop,
}

impl RtitConfig {
    /// `perf record -e intel_pt//u` translated to RTIT: User = 1 (OS = 0), Cmprs_Ret = 1,
    /// TraceActive = 1, Dest = 1 (the TraceStop byte is stored like any other), no cycle-accurate
    /// mode, no MTC/STS, FilterEn always on, no TraceStop, a PSB every 2 KiB (Pkt_Mask = 0).
    pub fn user_default() -> Self {
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_cmprs_ret(true).set_trace_active(true).set_dest(true);
        RtitConfig { ctl, events: RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff), lip: [0; 4], pkt_mask: 0 }
    }

    /// Use RANGE0 (`n` = 0) or RANGE1 (`n` = 1) = [a, b] (inclusive) as a filter or TraceStop
    /// range, and recompute RTIT_EVENTS from the uses of both ranges.
    pub fn set_range(&mut self, n: usize, a: u64, b: u64, what: RangeUse) -> &mut Self {
        let mut uses = self.range_uses();
        uses[n] = what;
        self.lip[n] = a;
        self.lip[n + 2] = b.wrapping_add(1);
        let pick = |u: RangeUse, otherwise: EventId| match (uses[0] == u, uses[1] == u) {
            (true, true) => EventId::Range0Or1,
            (true, false) => EventId::Range0,
            (false, true) => EventId::Range1,
            (false, false) => otherwise,
        };
        self.events = RtitEvents::new(pick(RangeUse::Filter, EventId::AlwaysOn), pick(RangeUse::TraceStop, EventId::AlwaysOff));
        self
    }

    /// How each of RANGE0 and RANGE1 is used by RTIT_EVENTS.
    pub fn range_uses(&self) -> [RangeUse; 2] {
        let uses = |id: EventId| match id {
            EventId::Range0 => [true, false],
            EventId::Range1 => [false, true],
            EventId::Range0Or1 => [true, true],
            _ => [false, false],
        };
        let (f, s) = (uses(self.events.filter_event()), uses(self.events.stop_event()));
        [0, 1].map(|n| {
            if f[n] {
                RangeUse::Filter
            } else if s[n] {
                RangeUse::TraceStop
            } else {
                RangeUse::Unused
            }
        })
    }

    /// The RTIT_LIPn values whose sequential execution signals a range edge (bases and limits of
    /// the ranges in use). Empty without ranges: then no caller needs `RtitTracer::linear`.
    pub fn edge_addresses(&self) -> Vec<u64> {
        let mut v = Vec::new();
        for (n, used) in self.range_uses().into_iter().enumerate() {
            if used != RangeUse::Unused {
                v.extend([self.lip[n], self.lip[n + 2]]);
            }
        }
        v
    }

    /// Write every RTIT MSR of the configuration with Trace_En = 0 (RDMSR RTIT_CTL first, as
    /// §3.3.1 requires), by an instruction at `ip` (a kernel address for user-mode tracing).
    /// The output region is [0, 4 MiB) (RTIT_LIMIT_MASK = 3F_FFFFH, the largest): with a
    /// [`StreamSink`] it only decides where the stored runs split.
    pub fn program(&self, t: &mut RtitTracer, ip: u64, mem: &mut impl GuestMemory) -> Result<(), Fault> {
        t.try_rdmsr(RTIT_CTL)?;
        let mut ctl = self.ctl;
        ctl.set_trace_en(false);
        t.wrmsr(RTIT_CTL, ctl.0, ip, ip, mem)?;
        t.wrmsr(RTIT_BASE_ADDR, 0, ip, ip, mem)?;
        t.wrmsr(RTIT_LIMIT_MASK, 0x3F_FFFF, ip, ip, mem)?;
        for (n, &a) in self.lip.iter().enumerate() {
            t.wrmsr(RTIT_LIP0 + n as u32, a, ip, ip, mem)?;
        }
        t.wrmsr(RTIT_EVENTS, self.events.0, ip, ip, mem)?;
        t.wrmsr(RTIT_PKT_CNT, u64::from(self.pkt_mask & 3) << 16, ip, ip, mem)?;
        // FilterEn starts as the filter event says with no range involved: on without ranges;
        // with a filter range, off until execution enters one (§3.3.5).
        let filter_on = self.events.filter_event() == EventId::AlwaysOn;
        t.wrmsr(RTIT_STATUS, u64::from(filter_on), ip, ip, mem)
    }

    /// WRMSR RTIT_CTL with Trace_En = 1: TriggerEn rises, the PSB goes out (§4.2.1).
    pub fn enable(&self, t: &mut RtitTracer, ip: u64, mem: &mut impl GuestMemory) -> Result<(), Fault> {
        let mut ctl = self.ctl;
        ctl.set_trace_en(true);
        t.wrmsr(RTIT_CTL, ctl.0, ip, ip, mem)
    }

    /// RTIT_CTL as it is while tracing (with Trace_En).
    pub fn ctl_enabled(&self) -> RtitCtl {
        let mut ctl = self.ctl;
        ctl.set_trace_en(true);
        ctl
    }
}

impl Default for RtitConfig {
    fn default() -> Self {
        Self::user_default()
    }
}

/// An output region that is a host byte stream: every byte the tracer drains is appended in
/// order, whatever its address (the region's wrap-around only splits the runs). Reads fail.
#[derive(Clone, Debug, Default)]
pub struct StreamSink(pub Vec<u8>);

impl GuestMemory for StreamSink {
    fn read_phys(&mut self, addr: u64, _buf: &mut [u8]) -> Result<(), MemError> {
        Err(MemError::NotRam { addr })
    }

    fn write_phys(&mut self, _addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.0.extend_from_slice(data);
        Ok(())
    }
}

/// An RTIT tracer programmed with an [`RtitConfig`] whose bytes go to a [`StreamSink`].
pub struct RtitStream {
    pub tracer: RtitTracer,
    pub config: RtitConfig,
    pub out: StreamSink,
}

impl RtitStream {
    /// A tracer in context `ctx` with every MSR of `config` written and Trace_En still 0.
    pub fn new(config: RtitConfig, opts: super::RtitOptions, ctx: crate::pt::tracer::Context, ip: u64) -> Result<Self, Fault> {
        let mut s = RtitStream { tracer: RtitTracer::new(opts, ctx), config, out: StreamSink::default() };
        config.program(&mut s.tracer, ip, &mut s.out)?;
        Ok(s)
    }

    /// Bytes generated and not yet taken (in the internal buffer or already drained).
    pub fn output_len(&self) -> usize {
        self.tracer.pending_bytes().len() + self.out.0.len()
    }

    /// Drain the internal buffer and take every byte generated so far.
    pub fn take_output(&mut self) -> Vec<u8> {
        self.tracer.drain(&mut self.out);
        std::mem::take(&mut self.out.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::tracer::Context;
    use crate::rtit::msr::RTIT_LIP2;
    use crate::rtit::RtitOptions;

    #[test]
    fn user_default_enables_with_a_psb_and_nothing_else_in_the_kernel() {
        let mut s = RtitStream::new(RtitConfig::user_default(), RtitOptions::default(), Context::KERNEL64, 0x1000).unwrap();
        assert!(s.take_output().is_empty());
        s.config.enable(&mut s.tracer, 0x1000, &mut s.out).unwrap();
        assert!(s.tracer.trigger_en() && !s.tracer.context_en() && s.tracer.filter_en());
        assert_eq!(s.take_output(), [0xC0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let ctl = s.tracer.rdmsr(RTIT_CTL).unwrap();
        assert_eq!(ctl, s.config.ctl_enabled().0);
        assert_eq!(ctl & 0x0F, 0b1001, "Trace_En and User, no OS, no Cycle_Acc");
    }

    #[test]
    fn ranges_pick_event_ids_and_exclusive_limits() {
        let mut c = RtitConfig::user_default();
        assert!(c.edge_addresses().is_empty());
        c.set_range(0, 0x401000, 0x401fff, RangeUse::Filter);
        assert_eq!((c.events.filter_event(), c.events.stop_event()), (EventId::Range0, EventId::AlwaysOff));
        c.set_range(1, 0x402000, 0x402000, RangeUse::TraceStop);
        assert_eq!((c.events.filter_event(), c.events.stop_event()), (EventId::Range0, EventId::Range1));
        assert_eq!(c.lip, [0x401000, 0x402000, 0x402000, 0x402001]);
        assert_eq!(c.edge_addresses(), [0x401000, 0x402000, 0x402000, 0x402001]);
        c.set_range(1, 0x403000, 0x403fff, RangeUse::Filter);
        assert_eq!((c.events.filter_event(), c.events.stop_event()), (EventId::Range0Or1, EventId::AlwaysOff));
        let mut s = RtitStream::new(c, RtitOptions::default(), Context::KERNEL64, 0x1000).unwrap();
        assert_eq!(s.tracer.rdmsr(RTIT_LIP2), Some(0x401fff + 1));
        assert!(!s.tracer.filter_en(), "a filter range starts with FilterEn = 0");
        s.config.enable(&mut s.tracer, 0x1000, &mut s.out).unwrap();
        assert_eq!(s.tracer.stats().psbs, 1);
    }
}
