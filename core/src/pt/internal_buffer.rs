//! The processor's internal trace buffer and the engine that drains it to the output unit, with
//! overflow (SDM Vol. 3C §33.4.2.16 "Overflow (OVF) Packet"; seed 000 §33.2.7 "Trace Output":
//! packets are not guaranteed to reach memory a fixed number of cycles after they are generated,
//! clearing TraceEn flushes the buffered packets, and packets still in the internal buffer are
//! lost at a ToPA STOP or an output error).
//!
//! # Model
//!
//! Hardware collects packets in a small on-chip buffer and writes them to memory (or to the
//! trace transport) at a finite bandwidth. When packets are produced faster than they drain the
//! buffer fills and the processor *overflows*: it keeps executing, keeps evaluating the enables,
//! and drops every packet until space frees up again; then it sends OVF (see `tracer.rs` for the
//! packets around it). The model has three parts:
//!
//! - **pending bytes**: accepted packets the drain engine has not yet taken. Only these occupy
//!   the `capacity`; a packet that does not fit completely is dropped whole and starts an
//!   overflow, after which *every* packet is dropped until the overflow resolves.
//! - **drain credit**: the drain engine moves pending bytes out at the configured bandwidth. In
//!   the deterministic mode the caller reports guest progress with [`InternalBuffer::credit`]
//!   (instructions, or virtual-time ticks: the unit is the caller's) and gets
//!   `bandwidth.bytes * units / bandwidth.per_units` bytes of credit, with the remainder carried
//!   exactly, so a run is reproducible. In the real-time mode a [`RealTimeDrainer`] thread turns
//!   wall-clock time into bytes and the vCPU thread collects them with
//!   [`DrainCredit::take`] and feeds them to [`InternalBuffer::credit_bytes`]. Credit beyond
//!   what is pending is lost, as an idle drain engine cannot bank bandwidth.
//! - **hand-off bytes**: bytes the drain engine has taken out of the internal buffer but the
//!   emulator has not yet stored. They no longer count against the capacity; the vCPU thread
//!   takes them with [`InternalBuffer::drain`] / [`InternalBuffer::take_handoff`] and performs the
//!   guest-memory write itself (QEMU's guest memory is only safely written from vCPU context).
//!   The hand-off needs no lock: the only cross-thread datum is the real-time drainer's credit
//!   counter, one `AtomicU64` written by the drainer and read by each vCPU.
//!
//! An overflow resolves once `resume_free` bytes are free again (hysteresis, so a saturated
//! buffer produces one OVF per episode instead of one per packet; the SDM only says "once the
//! overflow resolves"; `capacity / 2` by default). Clearing TraceEn drains everything (seed 000
//! §33.2.7: clearing TraceEn is the only way to be sure every generated packet reached the
//! output), as does the end of the trace.
//!
//! Nothing accepted is lost silently: [`BufferStats`] keeps `accepted = drained + discarded +
//! buffered` (discarded: what was still inside when the output unit stopped or failed, which
//! hardware loses too), and counts dropped packets and bytes, overflow episodes and OVF packets.
//!
//! # What the plugin calls (one tracer per vCPU)
//!
//! 1. At start-up, if the option is set:
//!    `tracer = Tracer::new(cfg, ctx).with_internal_buffer(BufferConfig::new(capacity, Bandwidth::new(bytes, per_units)?)?)`.
//! 2. Deterministic mode: after each executed block (before handing bytes to the output unit),
//!    `tracer.credit(insns_in_block)` (or virtual-time units).
//!    Real-time mode: once, `let drainer = RealTimeDrainer::spawn(WallClock::new(), bytes_per_sec,
//!    tick)?;` and per vCPU `let mut credit = drainer.credit();`; after each block,
//!    `tracer.credit_from(&mut credit)`.
//! 3. Unchanged: `if !tracer.output().is_empty() { let bytes = tracer.take_output(); output.write(..) }`.
//!    With the buffer, `output()` / `take_output()` only return the hand-off bytes.
//! 4. TraceEn clear (`write_ctl`/`disable`) and `finish()` drain the whole buffer by themselves;
//!    the plugin's existing `drain` after them stores it.
//! 5. `stop_without_packets()` (ToPA STOP, output error) discards what is still buffered and counts it.
//! 6. At exit print `tracer.buffer_stats()` (its `Display` is one line).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::encode::{encode, encoded_len};
use super::packet::Packet;

/// The smallest accepted capacity: room for a full PSB+ (PSB 16, TSC 8, TMA 7, PIP 8, CBR 4,
/// MODE.Exec 2, FUP 9, PSBEND 2 = 56 bytes) with a little to spare.
pub const MIN_CAPACITY: usize = 64;

/// The smallest accepted `resume_free`: what the tracer writes when an overflow resolves
/// (OVF 2, TSC 8, TMA 7, FUP 9 = 26 bytes).
pub const MIN_RESUME_FREE: usize = 26;

/// Compact the byte store once this many bytes at its front are already handed over.
const COMPACT_AT: usize = 64 * 1024;

/// Drain bandwidth of the deterministic mode: `bytes` per `per_units` units of guest progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bandwidth {
    bytes: u64,
    per_units: u64,
}

impl Bandwidth {
    /// `bytes` bytes drain per `per_units` units (instructions or virtual-time ticks).
    pub fn new(bytes: u64, per_units: u64) -> Result<Self, BufferConfigError> {
        if per_units == 0 {
            return Err(BufferConfigError::ZeroBandwidthPeriod);
        }
        Ok(Bandwidth { bytes, per_units })
    }

    pub fn bytes(self) -> u64 {
        self.bytes
    }

    /// Whole bytes `units` of guest progress allow to drain; the fraction is carried in
    /// `remainder` (in bytes x per_units) to the next call.
    pub fn bytes_for(self, units: u64, remainder: &mut u128) -> u64 {
        let total = *remainder + u128::from(units) * u128::from(self.bytes);
        let per = u128::from(self.per_units);
        *remainder = total % per;
        u64::try_from(total / per).unwrap_or(u64::MAX)
    }

    pub fn per_units(self) -> u64 {
        self.per_units
    }
}

/// An invalid internal-buffer configuration. Each variant's doc comment is its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferConfigError {
    /// internal buffer capacity {capacity} is below the minimum of 64 bytes (a PSB+ must fit)
    CapacityTooSmall { capacity: usize },
    /// resume threshold {resume_free} must be between 26 bytes (OVF and the FUP after it) and the capacity {capacity}
    ResumeFreeOutOfRange { resume_free: usize, capacity: usize },
    /// drain bandwidth period is 0 units
    ZeroBandwidthPeriod,
}

impl fmt::Display for BufferConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BufferConfigError::CapacityTooSmall { capacity } => write!(
                f,
                "internal buffer capacity {capacity} is below the minimum of {MIN_CAPACITY} bytes (a PSB+ must fit)"
            ),
            BufferConfigError::ResumeFreeOutOfRange { resume_free, capacity } => write!(
                f,
                "resume threshold {resume_free} must be between {MIN_RESUME_FREE} bytes (OVF and the FUP after it) and the capacity {capacity}"
            ),
            BufferConfigError::ZeroBandwidthPeriod => write!(f, "drain bandwidth period is 0 units"),
        }
    }
}

impl std::error::Error for BufferConfigError {}

/// Size and drain model of the internal buffer (always valid: built by `new`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferConfig {
    capacity: usize,
    resume_free: usize,
    bandwidth: Bandwidth,
}

impl BufferConfig {
    /// `capacity` bytes, drained at `bandwidth` in the deterministic mode; an overflow resolves
    /// once half the capacity is free.
    pub fn new(capacity: usize, bandwidth: Bandwidth) -> Result<Self, BufferConfigError> {
        if capacity < MIN_CAPACITY {
            return Err(BufferConfigError::CapacityTooSmall { capacity });
        }
        BufferConfig { capacity, resume_free: capacity / 2, bandwidth }.with_resume_free(capacity / 2)
    }

    /// Resolve an overflow once `resume_free` bytes are free (MIN_RESUME_FREE..=capacity).
    pub fn with_resume_free(mut self, resume_free: usize) -> Result<Self, BufferConfigError> {
        if !(MIN_RESUME_FREE..=self.capacity).contains(&resume_free) {
            return Err(BufferConfigError::ResumeFreeOutOfRange { resume_free, capacity: self.capacity });
        }
        self.resume_free = resume_free;
        Ok(self)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn resume_free(&self) -> usize {
        self.resume_free
    }

    pub fn bandwidth(&self) -> Bandwidth {
        self.bandwidth
    }
}

/// Counters of the internal buffer. `accepted_bytes = drained_bytes + discarded_bytes +
/// buffered_bytes` at all times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Packets (and their bytes) that entered the buffer.
    pub accepted_packets: u64,
    pub accepted_bytes: u64,
    /// Bytes handed to the output unit.
    pub drained_bytes: u64,
    /// Bytes still inside (pending or hand-off) when the output unit stopped or failed.
    pub discarded_bytes: u64,
    /// Bytes inside now: pending + hand-off.
    pub buffered_bytes: u64,
    /// Of `buffered_bytes`, those not yet drained by the drain engine (the fill level).
    pub pending_bytes: u64,
    /// The highest fill level seen.
    pub high_water: u64,
    /// Packets (and bytes) refused because the buffer was full or overflowing.
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    /// Overflow episodes begun.
    pub overflows: u64,
    /// Overflow episodes that ended with an OVF packet.
    pub ovf_packets: u64,
}

impl BufferStats {
    /// The accounting identity holds (nothing accepted went missing).
    pub fn is_balanced(&self) -> bool {
        self.accepted_bytes == self.drained_bytes + self.discarded_bytes + self.buffered_bytes
    }
}

impl fmt::Display for BufferStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "internal buffer: {} bytes accepted, {} drained, {} still buffered, {} discarded at output stop; \
             {} overflows ({} OVF packets), {} packets ({} bytes) dropped; high water {} bytes",
            self.accepted_bytes,
            self.drained_bytes,
            self.buffered_bytes,
            self.discarded_bytes,
            self.overflows,
            self.ovf_packets,
            self.dropped_packets,
            self.dropped_bytes,
            self.high_water
        )
    }
}

/// The internal buffer of one logical processor.
#[derive(Clone, Debug)]
pub struct InternalBuffer {
    cfg: BufferConfig,
    /// `data[head..split]`: hand-off bytes; `data[split..]`: pending bytes.
    data: Vec<u8>,
    head: usize,
    split: usize,
    /// Credit remainder (units * bytes mod per_units) carried to the next `credit`.
    remainder: u128,
    overflowed: bool,
    stats: BufferStats,
}

impl InternalBuffer {
    pub fn new(cfg: BufferConfig) -> Self {
        InternalBuffer {
            cfg,
            data: Vec::with_capacity(cfg.capacity.max(4096)),
            head: 0,
            split: 0,
            remainder: 0,
            overflowed: false,
            stats: BufferStats::default(),
        }
    }

    pub fn config(&self) -> &BufferConfig {
        &self.cfg
    }

    /// Bytes accepted but not yet drained: the fill level that the capacity limits.
    pub fn pending(&self) -> usize {
        self.data.len() - self.split
    }

    /// Free space: capacity minus the fill level.
    pub fn free(&self) -> usize {
        self.cfg.capacity - self.pending()
    }

    /// An overflow is in progress: every packet is dropped until `end_overflow`.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The overflow in progress may resolve: `resume_free` bytes are free.
    pub fn can_resume(&self) -> bool {
        self.overflowed && self.free() >= self.cfg.resume_free
    }

    /// The overflow resolved; the caller writes the OVF packet next.
    pub fn end_overflow(&mut self) {
        if self.overflowed {
            self.overflowed = false;
            self.stats.ovf_packets += 1;
        }
    }

    /// Accept one whole packet, or drop it (returns `None`) when it does not fit or an overflow
    /// is in progress. The first drop starts an overflow. Returns the packet's length.
    pub fn push_packet(&mut self, p: &Packet) -> Option<usize> {
        let n = encoded_len(p);
        if !self.admit(n) {
            return None;
        }
        let before = self.data.len();
        encode(p, &mut self.data);
        debug_assert_eq!(self.data.len() - before, n, "encoded_len disagrees with encode for {p:?}");
        self.accepted(self.data.len() - before);
        Some(n)
    }

    /// Accept raw bytes as one packet (all or nothing), like `push_packet`.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> bool {
        if !self.admit(bytes.len()) {
            return false;
        }
        self.data.extend_from_slice(bytes);
        self.accepted(bytes.len());
        true
    }

    /// Bytes that are already past the internal buffer (produced before it existed): accepted
    /// straight into the hand-off, whatever the capacity. Only while nothing is pending.
    pub fn preload_handoff(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.pending(), 0, "preload behind pending bytes would reorder the stream");
        self.flush();
        self.data.extend_from_slice(bytes);
        self.split = self.data.len();
        self.stats.accepted_packets += 1;
        self.stats.accepted_bytes += bytes.len() as u64;
    }

    fn admit(&mut self, n: usize) -> bool {
        if !self.overflowed && n <= self.free() {
            return true;
        }
        if !self.overflowed {
            self.overflowed = true;
            self.stats.overflows += 1;
        }
        self.stats.dropped_packets += 1;
        self.stats.dropped_bytes += n as u64;
        false
    }

    fn accepted(&mut self, n: usize) {
        self.stats.accepted_packets += 1;
        self.stats.accepted_bytes += n as u64;
        self.stats.high_water = self.stats.high_water.max(self.pending() as u64);
    }

    /// Deterministic mode: `units` of guest progress passed; the drain engine moves
    /// `bandwidth * units` bytes (carrying the fraction) from pending to hand-off. Returns the
    /// bytes moved (credit beyond the pending bytes is lost).
    pub fn credit(&mut self, units: u64) -> usize {
        let bytes = self.cfg.bandwidth.bytes_for(units, &mut self.remainder);
        self.credit_bytes(bytes)
    }

    /// `bytes` of drain bandwidth became available (real-time mode, or a caller computing
    /// bytes itself). Returns the bytes moved from pending to hand-off.
    pub fn credit_bytes(&mut self, bytes: u64) -> usize {
        let n = usize::try_from(bytes).unwrap_or(usize::MAX).min(self.pending());
        self.split += n;
        n
    }

    /// Drain everything pending at once (TraceEn cleared, end of trace).
    pub fn flush(&mut self) {
        self.split = self.data.len();
    }

    /// The hand-off bytes, ready for the output unit.
    pub fn handoff(&self) -> &[u8] {
        &self.data[self.head..self.split]
    }

    /// Take up to `max` hand-off bytes for the output unit.
    pub fn drain(&mut self, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        self.drain_into(max, &mut out);
        out
    }

    /// Append up to `max` hand-off bytes to `out`; returns how many.
    pub fn drain_into(&mut self, max: usize, out: &mut Vec<u8>) -> usize {
        let n = max.min(self.split - self.head);
        out.extend_from_slice(&self.data[self.head..self.head + n]);
        self.consume(n);
        n
    }

    /// Take every hand-off byte (without copying when nothing is pending).
    pub fn take_handoff(&mut self) -> Vec<u8> {
        if self.head == 0 && self.split == self.data.len() {
            let n = self.data.len();
            self.stats.drained_bytes += n as u64;
            self.split = 0;
            return std::mem::replace(&mut self.data, Vec::with_capacity(self.cfg.capacity.max(4096)));
        }
        self.drain(usize::MAX)
    }

    /// Mark the first `n` hand-off bytes as stored (after writing `handoff()[..n]`).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.split - self.head);
        self.head += n;
        self.stats.drained_bytes += n as u64;
        self.compact();
    }

    /// The output stopped (ToPA STOP, output error): everything inside is lost, as in hardware.
    /// Counted in `discarded_bytes`; an overflow in progress ends without OVF. Returns the bytes.
    pub fn discard_all(&mut self) -> usize {
        let n = self.data.len() - self.head;
        self.stats.discarded_bytes += n as u64;
        self.data.clear();
        self.head = 0;
        self.split = 0;
        self.overflowed = false;
        n
    }

    pub fn stats(&self) -> BufferStats {
        BufferStats {
            buffered_bytes: (self.data.len() - self.head) as u64,
            pending_bytes: self.pending() as u64,
            ..self.stats
        }
    }

    fn compact(&mut self) {
        if self.head == self.data.len() {
            self.data.clear();
            self.head = 0;
            self.split = 0;
        } else if self.head >= COMPACT_AT && self.head * 2 >= self.data.len() {
            self.data.drain(..self.head);
            self.split -= self.head;
            self.head = 0;
        }
    }
}

// ---- real-time mode ----

/// A monotonic time source for the real-time drainer (wall clock in production, a fake in
/// tests, or a host's virtual clock).
pub trait DrainClock: Send + 'static {
    /// Nanoseconds since a fixed origin; never decreases.
    fn now_ns(&self) -> u64;
}

/// The host's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    origin: Instant,
}

impl WallClock {
    pub fn new() -> Self {
        WallClock { origin: Instant::now() }
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}

impl DrainClock for WallClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[derive(Debug, Default)]
struct Shared {
    /// Bytes of drain bandwidth granted since the drainer started (monotonic; single writer).
    granted: AtomicU64,
    stop: AtomicBool,
}

/// Real-time mode: a background thread that turns elapsed time into drain credit at
/// `bytes_per_sec`. It touches no guest state; each vCPU collects its credit through a
/// [`DrainCredit`] (one atomic load) and writes guest memory itself. Every logical processor
/// has its own drain engine of the same bandwidth, so one monotonic counter serves them all:
/// each `DrainCredit` remembers how much of it it has already used.
#[derive(Debug)]
pub struct RealTimeDrainer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl RealTimeDrainer {
    /// Start the drainer thread; it publishes new credit every `tick`.
    pub fn spawn(clock: impl DrainClock, bytes_per_sec: u64, tick: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        // Time counts from the spawn, not from whenever the thread first runs.
        let start = clock.now_ns();
        let thread = std::thread::Builder::new().name("pt-drain".into()).spawn(move || {
            while !s.stop.load(Ordering::Relaxed) {
                let elapsed = u128::from(clock.now_ns().saturating_sub(start));
                let granted = elapsed * u128::from(bytes_per_sec) / 1_000_000_000;
                s.granted.store(u64::try_from(granted).unwrap_or(u64::MAX), Ordering::Release);
                std::thread::park_timeout(tick);
            }
        })?;
        Ok(RealTimeDrainer { shared, thread: Some(thread) })
    }

    /// A credit receiver for one vCPU, starting from now.
    pub fn credit(&self) -> DrainCredit {
        DrainCredit { shared: Arc::clone(&self.shared), seen: self.shared.granted.load(Ordering::Acquire) }
    }

    /// Total bytes granted so far.
    pub fn granted(&self) -> u64 {
        self.shared.granted.load(Ordering::Acquire)
    }
}

impl Drop for RealTimeDrainer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// One vCPU's view of a [`RealTimeDrainer`]: lock-free, used on the vCPU thread.
#[derive(Debug, Clone)]
pub struct DrainCredit {
    shared: Arc<Shared>,
    seen: u64,
}

impl DrainCredit {
    /// Bytes of drain bandwidth granted since the previous `take`.
    pub fn take(&mut self) -> u64 {
        let g = self.shared.granted.load(Ordering::Acquire);
        let d = g.saturating_sub(self.seen);
        self.seen = self.seen.max(g);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(capacity: usize, bytes: u64, per: u64) -> InternalBuffer {
        InternalBuffer::new(BufferConfig::new(capacity, Bandwidth::new(bytes, per).unwrap()).unwrap())
    }

    #[test]
    fn config_rejects_tiny_capacity_bad_threshold_and_zero_period() {
        let bw = Bandwidth::new(1, 1).unwrap();
        assert_eq!(BufferConfig::new(63, bw), Err(BufferConfigError::CapacityTooSmall { capacity: 63 }));
        let c = BufferConfig::new(128, bw).unwrap();
        assert_eq!(c.resume_free(), 64);
        assert_eq!(
            c.with_resume_free(25),
            Err(BufferConfigError::ResumeFreeOutOfRange { resume_free: 25, capacity: 128 })
        );
        assert!(c.with_resume_free(129).is_err());
        assert_eq!(c.with_resume_free(128).unwrap().resume_free(), 128);
        assert_eq!(Bandwidth::new(1, 0), Err(BufferConfigError::ZeroBandwidthPeriod));
        assert_eq!(
            BufferConfigError::CapacityTooSmall { capacity: 8 }.to_string(),
            "internal buffer capacity 8 is below the minimum of 64 bytes (a PSB+ must fit)"
        );
    }

    #[test]
    fn whole_packets_are_dropped_and_the_overflow_holds_until_resume_free_bytes_are_free() {
        let mut b = buf(64, 1, 1);
        assert!(b.push_bytes(&[1; 60]));
        // 5 bytes do not fit: dropped whole, overflow starts.
        assert!(!b.push_bytes(&[2; 5]));
        assert!(b.overflowed());
        // A packet that would fit is still dropped while overflowing.
        assert!(!b.push_bytes(&[3; 2]));
        b.credit_bytes(20);
        assert_eq!(b.free(), 24);
        assert!(!b.can_resume(), "24 < resume_free 32");
        b.credit_bytes(8);
        assert!(b.can_resume());
        b.end_overflow();
        assert!(b.push_bytes(&[4; 2]));
        let s = b.stats();
        assert_eq!((s.dropped_packets, s.dropped_bytes, s.overflows, s.ovf_packets), (2, 7, 1, 1));
        assert_eq!((s.accepted_packets, s.accepted_bytes), (2, 62));
        assert_eq!(s.high_water, 60);
        assert!(s.is_balanced());
    }

    #[test]
    fn deterministic_credit_carries_the_fraction_and_is_capped_by_what_is_pending() {
        // 3 bytes per 4 instructions.
        let mut b = buf(64, 3, 4);
        assert!(b.push_bytes(&[7; 10]));
        assert_eq!(b.credit(1), 0); // 3/4
        assert_eq!(b.credit(1), 1); // 6/4 -> 1, remainder 2/4
        assert_eq!(b.credit(2), 2); // (2 + 6)/4 = 2
        assert_eq!(b.handoff().len(), 3);
        // 100 instructions would drain 75 bytes; only 7 are pending, the rest is lost.
        assert_eq!(b.credit(100), 7);
        assert!(b.push_bytes(&[8; 4]));
        assert_eq!(b.pending(), 4);
        assert_eq!(b.credit(0), 0);
        assert_eq!(b.drain(usize::MAX), vec![7; 10]);
        assert_eq!(b.stats().buffered_bytes, 4);
    }

    #[test]
    fn drain_respects_max_and_handoff_does_not_count_against_capacity() {
        let mut b = buf(64, 1, 1);
        assert!(b.push_bytes(&(0..64).collect::<Vec<u8>>()));
        b.credit_bytes(64);
        assert_eq!(b.free(), 64);
        assert!(b.push_bytes(&[0xAA; 64]));
        assert_eq!(b.drain(10), (0..10).collect::<Vec<u8>>());
        let mut out = Vec::new();
        assert_eq!(b.drain_into(100, &mut out), 54);
        assert_eq!(out, (10..64).collect::<Vec<u8>>());
        b.flush();
        assert_eq!(b.take_handoff(), vec![0xAA; 64]);
        let s = b.stats();
        assert_eq!((s.accepted_bytes, s.drained_bytes, s.buffered_bytes), (128, 128, 0));
    }

    #[test]
    fn take_handoff_without_pending_bytes_moves_the_whole_store() {
        let mut b = buf(64, 1, 1);
        assert!(b.push_bytes(&[1, 2, 3]));
        b.flush();
        assert_eq!(b.take_handoff(), vec![1, 2, 3]);
        assert!(b.push_bytes(&[4]));
        assert_eq!(b.pending(), 1);
        assert_eq!(b.stats().drained_bytes, 3);
    }

    #[test]
    fn preloaded_bytes_bypass_the_capacity_and_come_out_first() {
        let mut b = buf(64, 1, 1);
        b.preload_handoff(&[5; 100]);
        assert_eq!(b.pending(), 0);
        assert!(b.push_bytes(&[6; 64]));
        b.flush();
        let out = b.take_handoff();
        assert_eq!((&out[..100], &out[100..]), (&[5; 100][..], &[6; 64][..]));
        assert!(b.stats().is_balanced());
    }

    #[test]
    fn discard_all_counts_the_lost_bytes_and_ends_the_overflow() {
        let mut b = buf(64, 1, 1);
        assert!(b.push_bytes(&[1; 40]));
        b.credit_bytes(10);
        assert!(!b.push_bytes(&[1; 40]));
        assert_eq!(b.discard_all(), 40);
        assert!(!b.overflowed());
        let s = b.stats();
        assert_eq!((s.discarded_bytes, s.buffered_bytes, s.overflows, s.ovf_packets), (40, 0, 1, 0));
        assert!(s.is_balanced());
    }

    #[test]
    fn push_packet_encodes_and_checks_the_encoded_length() {
        let mut b = buf(64, 1, 1);
        assert_eq!(b.push_packet(&Packet::Psb), Some(16));
        assert_eq!(b.push_packet(&Packet::Ovf), Some(2));
        b.flush();
        let bytes = b.take_handoff();
        assert_eq!(&bytes[16..], &[0x02, 0xF3]);
    }

    #[test]
    fn stats_display_is_one_line_with_every_counter() {
        let s = BufferStats { accepted_bytes: 10, drained_bytes: 8, buffered_bytes: 2, overflows: 1, ..Default::default() };
        let line = s.to_string();
        assert!(!line.contains('\n'));
        assert!(line.contains("10 bytes accepted, 8 drained, 2 still buffered"));
        assert!(line.contains("1 overflows (0 OVF packets)"));
    }

    #[derive(Clone)]
    struct FakeClock(Arc<AtomicU64>);

    impl DrainClock for FakeClock {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Poll `f` until it returns Some, for up to 5 s (the drainer thread runs on its own tick).
    fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "drainer did not publish in time");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn real_time_drainer_turns_clock_time_into_credit_for_each_receiver() {
        let now = Arc::new(AtomicU64::new(0));
        let d = RealTimeDrainer::spawn(FakeClock(Arc::clone(&now)), 1000, Duration::from_micros(200)).unwrap();
        let mut a = d.credit();
        assert_eq!(a.take(), 0);
        now.store(500_000_000, Ordering::SeqCst); // 0.5 s at 1000 B/s
        wait_for(|| (d.granted() == 500).then_some(()));
        let mut b = d.credit(); // joins now: sees nothing of the past
        assert_eq!(a.take(), 500);
        assert_eq!(a.take(), 0);
        assert_eq!(b.take(), 0);
        now.store(2_000_000_000, Ordering::SeqCst);
        wait_for(|| (d.granted() == 2000).then_some(()));
        assert_eq!(a.take(), 1500);
        assert_eq!(b.take(), 1500);
        // Feeding the credit to a buffer drains at most what is pending.
        let mut ib = buf(64, 1, 1);
        assert!(ib.push_bytes(&[9; 30]));
        now.store(2_010_000_000, Ordering::SeqCst); // +10 bytes
        wait_for(|| (d.granted() == 2010).then_some(()));
        assert_eq!(ib.credit_bytes(a.take()), 10);
        assert_eq!(ib.handoff(), &[9; 10]);
    }

    #[test]
    fn real_time_drainer_on_the_wall_clock_grants_about_the_elapsed_bandwidth() {
        let t0 = Instant::now();
        let d = RealTimeDrainer::spawn(WallClock::new(), 1_000_000, Duration::from_micros(500)).unwrap();
        let mut c = d.credit();
        let got = wait_for(|| {
            let g = c.take();
            (g > 0).then_some(g)
        });
        // Never more than the bandwidth allows for the time that passed.
        let bound = t0.elapsed().as_nanos() as u64 * 1_000_000 / 1_000_000_000 + 1;
        assert!(got <= bound, "{got} > {bound}");
        drop(d); // joins the thread
    }

    #[test]
    fn vcpu_thread_writes_while_the_drainer_thread_grants() {
        // The hand-off across threads: the vCPU thread owns the buffer and only reads the atomic.
        let now = Arc::new(AtomicU64::new(0));
        let d = RealTimeDrainer::spawn(FakeClock(Arc::clone(&now)), 1_000_000_000, Duration::from_micros(100)).unwrap();
        let mut credit = d.credit();
        let vcpu = std::thread::spawn(move || {
            let mut b = buf(256, 1, 1);
            let mut memory = Vec::new();
            let mut produced = 0u64;
            while memory.len() < 10_000 {
                if b.push_bytes(&[(produced % 251) as u8]) {
                    produced += 1;
                }
                b.credit_bytes(credit.take());
                memory.extend_from_slice(b.handoff());
                let n = b.handoff().len();
                b.consume(n);
                if b.can_resume() {
                    b.end_overflow();
                }
                std::thread::yield_now();
            }
            (memory, b.stats())
        });
        for step in 1..=2_000_000u64 {
            now.store(step * 1_000, Ordering::SeqCst); // 1 us = 1000 bytes per step
            if vcpu.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let (memory, stats) = vcpu.join().unwrap();
        assert!(stats.is_balanced());
        assert!(memory.iter().enumerate().all(|(i, &v)| v == (i as u64 % 251) as u8), "bytes in order");
    }
}
