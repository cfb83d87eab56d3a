//! The executed blocks of one vCPU not yet run through the model (issue 13): the block callback
//! only appends a small record here, and whoever holds the vCPU's model lock runs the pending
//! records through the model, oldest first: an encoder thread while the vCPU keeps executing,
//! or the vCPU itself when the ring is full or the trace becomes observable.
//!
//! One producer (the vCPU's own thread), appending without a lock or an atomic read-modify-write;
//! consumers serialised by the caller's lock. Space is reclaimed only when the producer's thread
//! consumes (`take_own`), so the producer never races with a reset. The producer-written length
//! and the consumer-written position live on separate cache-line pairs: a consumer on another
//! CPU moves the producer's line at most once per pass, never per block.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A value alone on its cache lines (adjacent-line prefetch pairs 64-byte lines).
#[repr(align(128))]
struct Padded<T>(T);

/// How far ahead of its next entry a producer asks for its ring's memory in a writable state
/// (`prefetch_for_write`): 512 bytes, eight cache lines.
pub const PREFETCH_BYTES: usize = 512;

/// Entries between two publications of the producer's length (`BlockRing::pending_published`).
pub const PUBLISH: usize = 256;

/// Ask for the cache line holding `p` in a state the calling thread may write (PREFETCHW),
/// without waiting for it.
///
/// Why (issue 13, measured): a consumer on another CPU reads the ring's entries, so when the
/// producer comes round to a line again the line is shared or gone from its cache, and its
/// store must first take the line back (a read-for-ownership). x86 commits stores in order: the
/// vCPU's later stores wait behind that one, and a load that cannot be forwarded from the store
/// buffer waits for them (QEMU's `helper_lookup_tb_ptr` reloads a 16-byte key it just stored in
/// two halves, once per indirect branch). With the encoder thread beside the vCPU this made
/// user-mode `calls` 2.6x plain instead of 1.4x, and `lz` 4.0x instead of 2.0x. Taking the line
/// back ahead of time, outside the store buffer, removes the wait. (CPUs without PREFETCHW
/// execute it as a NOP; Intel parts before Broadwell do so without enumerating it.)
#[inline(always)]
pub fn prefetch_for_write<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no architectural state.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

pub struct BlockRing<T: Copy> {
    entries: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// Entries written; only the producer stores it (Release: the entries before it are visible
    /// to a consumer on another thread).
    len: Padded<AtomicUsize>,
    /// `len` as last published for a consumer on another CPU, every `PUBLISH` entries: it polls
    /// this line, not `len`'s, so the producer's store to `len` does not wait for a
    /// read-for-ownership after each poll (see `prefetch_for_write`).
    published: Padded<AtomicUsize>,
    /// Entries already consumed (under the caller's lock), and a consumer's request that the
    /// producer's thread consume the rest itself soon (see `flush_wanted`).
    consumed: Padded<(AtomicUsize, AtomicBool)>,
    /// How far a consumer lets the producer append before its thread must consume itself: an
    /// index, 0 until a consumer sets one after the producer's last `take_own` (see `grant`).
    grant: Padded<AtomicUsize>,
}

// SAFETY: entries are written only by the producer at indices >= `len` (not yet published) and
// read only by a consumer at indices < `len` (published with Release, read with Acquire); the
// caller serialises consumers (`take_*` are unsafe and say so).
unsafe impl<T: Copy + Send> Sync for BlockRing<T> {}

impl<T: Copy> BlockRing<T> {
    pub fn new(capacity: usize) -> Self {
        let entries = (0..capacity.max(1)).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
        BlockRing {
            entries,
            len: Padded(AtomicUsize::new(0)),
            published: Padded(AtomicUsize::new(0)),
            consumed: Padded((AtomicUsize::new(0), AtomicBool::new(false))),
            grant: Padded(AtomicUsize::new(0)),
        }
    }

    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Entries the producer can still append before its thread must consume.
    #[inline]
    pub fn room(&self) -> usize {
        self.capacity() - self.len.0.load(Ordering::Relaxed)
    }

    /// Entries appended so far (the producer's count).
    #[inline]
    pub fn len(&self) -> usize {
        self.len.0.load(Ordering::Relaxed)
    }

    /// True when nothing was appended since the last `take_own`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appended and not yet consumed (an estimate from another thread).
    #[inline]
    pub fn pending(&self) -> usize {
        self.len.0.load(Ordering::Relaxed).saturating_sub(self.consumed.0 .0.load(Ordering::Relaxed))
    }

    /// Published and not yet consumed (what a consumer polling from another thread sees: see
    /// `published`).
    #[inline]
    pub fn pending_published(&self) -> usize {
        self.published.0.load(Ordering::Relaxed).saturating_sub(self.consumed.0 .0.load(Ordering::Relaxed))
    }

    /// Append one record; false (nothing appended) when full.
    ///
    /// # Safety
    /// Only the ring's producer thread calls this.
    #[inline]
    pub unsafe fn push(&self, entry: T) -> bool {
        let len = self.len.0.load(Ordering::Relaxed);
        self.prefetch_ahead(len);
        let Some(slot) = self.entries.get(len) else { return false };
        // SAFETY: index `len` is not published yet, so no consumer reads it (see `Sync`).
        unsafe { (*slot.get()).write(entry) };
        self.set_len(len + 1);
        true
    }

    /// `push` for a producer that knows there is room (it keeps its own count of `room()`).
    ///
    /// # Safety
    /// Only the ring's producer thread calls this, and only while `room() > 0`.
    #[inline(always)]
    pub unsafe fn push_unchecked(&self, entry: T) {
        let len = self.len.0.load(Ordering::Relaxed);
        debug_assert!(len < self.capacity());
        self.prefetch_ahead(len);
        // SAFETY: `len` < capacity (the caller's contract) and not published yet (see `Sync`).
        unsafe { (*self.entries.get_unchecked(len).get()).write(entry) };
        self.set_len(len + 1);
    }

    /// `push_unchecked` at `len`, the length the producer just read (`len()`): one load of it on
    /// the block callback's path.
    ///
    /// # Safety
    /// Only the ring's producer thread calls this, with `len == self.len()` and `len` < capacity.
    #[inline(always)]
    pub unsafe fn push_at(&self, len: usize, entry: T) {
        debug_assert!(len < self.capacity() && len == self.len());
        self.prefetch_ahead(len);
        // SAFETY: `len` < capacity (the caller's contract) and not published yet (see `Sync`).
        unsafe { (*self.entries.get_unchecked(len).get()).write(entry) };
        self.set_len(len + 1);
    }

    /// The producer's new length, published every `PUBLISH` entries.
    #[inline(always)]
    fn set_len(&self, len: usize) {
        self.len.0.store(len, Ordering::Release);
        if len % PUBLISH == 0 {
            self.published.0.store(len, Ordering::Release);
        }
    }

    /// `prefetch_for_write` the entry PREFETCH_BYTES after entry `len`. Near the ring's end that
    /// address is past it: a prefetch never faults, and the producer's next entries after its
    /// thread consumed are the first ones, written without (two instructions on the block
    /// callback's path instead of six for a wrap it takes once every `capacity` entries).
    #[inline(always)]
    fn prefetch_ahead(&self, len: usize) {
        prefetch_for_write(self.entries.as_ptr().wrapping_add(len + PREFETCH_BYTES / std::mem::size_of::<T>().max(1)));
    }

    /// A consumer asked the producer's thread to consume what is pending (and then do what only
    /// it can, e.g. store output in guest memory).
    #[inline]
    pub fn flush_wanted(&self) -> bool {
        self.consumed.0 .1.load(Ordering::Relaxed)
    }

    pub fn want_flush(&self) {
        self.consumed.0 .1.store(true, Ordering::Relaxed);
    }

    /// Consume up to `max` pending records from a thread other than the producer's: `f` gets
    /// them oldest first and returns how many it consumed (the rest stay pending).
    ///
    /// # Safety
    /// The caller holds the lock that serialises the ring's consumers.
    pub unsafe fn take_shared(&self, max: usize, f: impl FnOnce(&[T]) -> usize) {
        let len = self.len.0.load(Ordering::Acquire);
        // SAFETY: the caller's contract; `len` read with Acquire.
        unsafe { self.take_shared_to(len, max, f) }
    }

    /// `take_shared` of the entries published so far (`published`: what a consumer polling
    /// `pending_published` saw).
    ///
    /// # Safety
    /// As `take_shared`.
    pub unsafe fn take_published(&self, max: usize, f: impl FnOnce(&[T]) -> usize) {
        let len = self.published.0.load(Ordering::Acquire);
        // SAFETY: the caller's contract; entries before `published` were written before it
        // was stored (Release), read with Acquire.
        unsafe { self.take_shared_to(len, max, f) }
    }

    /// Entries consumed so far (since the last `take_own`).
    pub fn consumed(&self) -> usize {
        self.consumed.0 .0.load(Ordering::Relaxed)
    }

    /// A consumer that ran the entries before `consumed()` under its lock found that the
    /// producer may append up to index `upto` before its own thread must consume: whatever the
    /// producer's own limit, it may go on to there (the largest such grant counts; every grant
    /// is a bound computed from a state the producer's entries passed through). Reset by
    /// `take_own`, which the caller's lock orders with every grant.
    pub fn grant(&self, upto: usize) {
        self.grant.0.fetch_max(upto.min(self.capacity()), Ordering::Relaxed);
    }

    /// The index up to which the producer may append (`grant`), read on the producer's thread.
    #[inline]
    pub fn granted(&self) -> usize {
        self.grant.0.load(Ordering::Relaxed)
    }

    unsafe fn take_shared_to(&self, len: usize, max: usize, f: impl FnOnce(&[T]) -> usize) {
        let at = self.consumed.0 .0.load(Ordering::Relaxed).min(len);
        let n = (len - at).min(max);
        // SAFETY: entries at..at + n were written before `len` was published (Acquire above);
        // laid out as `[T]` (see `take_own`).
        let pending = unsafe { std::slice::from_raw_parts(self.entries.as_ptr().add(at) as *const T, n) };
        let used = f(pending).min(n);
        self.consumed.0 .0.store(at + used, Ordering::Relaxed);
    }

    /// Consume every pending record on the producer's thread (`f` gets them oldest first), and
    /// empty the ring.
    ///
    /// # Safety
    /// Only the producer's thread calls this, holding the lock that serialises consumers.
    pub unsafe fn take_own(&self, f: impl FnOnce(&[T])) {
        let len = self.len.0.load(Ordering::Relaxed);
        let from = self.consumed.0 .0.load(Ordering::Relaxed).min(len);
        // SAFETY: entries from..len were written by this thread before; `UnsafeCell` and
        // `MaybeUninit` are `repr(transparent)`, so they are laid out as `[T]`.
        let pending = unsafe { std::slice::from_raw_parts(self.entries.as_ptr().add(from) as *const T, len - from) };
        f(pending);
        self.consumed.0 .0.store(0, Ordering::Relaxed);
        self.consumed.0 .1.store(false, Ordering::Relaxed);
        self.len.0.store(0, Ordering::Relaxed);
        self.published.0.store(0, Ordering::Relaxed);
        self.grant.0.store(0, Ordering::Relaxed);
    }
}

/// How a thread that consumes rings waits between passes that found nothing to do: work may come
/// within microseconds while a vCPU runs (a chunk is a few microseconds of guest execution), so
/// it first spins without a system call for `SPIN`, then sleeps 200 us at a time.
///
/// The spin is bounded by time, not by a count of PAUSE instructions (whose latency ranges from
/// ~10 to ~140 cycles across Intel parts): a spin of 200 x 200 PAUSEs kept the encoder thread on
/// a CPU for ~2 ms after every burst of work, which on a 2-CPU host took that CPU from the
/// guest's own threads (the corpus' 6-thread program; issue 13).
#[derive(Default)]
pub struct ConsumerBackoff {
    idle_since: Option<std::time::Instant>,
}

impl ConsumerBackoff {
    /// How long a consumer spins after its last work before it sleeps.
    pub const SPIN: std::time::Duration = std::time::Duration::from_micros(SPIN_US);

    /// After a pass over the rings; `worked`: it consumed something.
    pub fn after_pass(&mut self, worked: bool) {
        if worked {
            self.idle_since = None;
            return;
        }
        let since = *self.idle_since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() < Self::SPIN {
            for _ in 0..POLL_PAUSES {
                std::hint::spin_loop();
            }
        } else {
            std::thread::sleep(Self::nap(since.elapsed()));
        }
    }

    /// How long a consumer idle for `idle` sleeps before its next pass: 200 us at first, longer
    /// the longer it found nothing, up to 2 ms. Work that comes while it sleeps waits in the
    /// rings (a full ring is run by its own vCPU); a consumer that woke every 200 us however long
    /// it stayed idle took ~5000 time slices a second from the guest's threads on a busy host
    /// (b_pt_loop's untraced phase: 46-49 M guest cycles with the idle encoder thread against
    /// 38-41 M without it, issue 13 step 21).
    pub fn nap(idle: std::time::Duration) -> std::time::Duration {
        (idle / 8).clamp(std::time::Duration::from_micros(200), std::time::Duration::from_millis(2))
    }
}

const SPIN_US: u64 = 200;
const POLL_PAUSES: u32 = 128;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn an_idle_consumer_naps_longer_the_longer_it_finds_nothing() {
        use std::time::Duration;
        assert_eq!(ConsumerBackoff::nap(Duration::from_micros(300)), Duration::from_micros(200));
        assert_eq!(ConsumerBackoff::nap(Duration::from_millis(8)), Duration::from_millis(1));
        assert_eq!(ConsumerBackoff::nap(Duration::from_secs(1)), Duration::from_millis(2));
    }

    #[test]
    fn records_come_out_in_order_whoever_consumes_them() {
        let ring = BlockRing::new(8);
        let mut seen = Vec::new();
        unsafe {
            for i in 0..5u64 {
                assert!(ring.push(i));
            }
            ring.take_shared(usize::MAX, |recs| {
                seen.extend_from_slice(&recs[..3]);
                3
            });
            assert_eq!(ring.pending(), 2);
            assert!(ring.push(5));
            assert_eq!(ring.room(), 2);
            ring.push_unchecked(6);
            ring.take_own(|recs| seen.extend_from_slice(recs));
        }
        assert_eq!(seen, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(ring.room(), 8);
        assert_eq!(ring.pending(), 0);
    }

    #[test]
    fn a_full_ring_refuses_until_its_producer_consumes() {
        let ring = BlockRing::new(3);
        unsafe {
            assert!(ring.push(1u32) && ring.push(2) && ring.push(3));
            assert!(!ring.push(4));
            ring.take_shared(2, |recs| recs.len());
            assert_eq!(ring.pending(), 1);
            ring.take_shared(usize::MAX, |recs| recs.len());
            // Space comes back only through the producer's own consumption.
            assert!(!ring.push(4));
            let mut n = 0;
            ring.take_own(|recs| n += recs.len());
            assert_eq!(n, 0, "already consumed by the other thread");
            assert!(ring.push(4));
        }
    }

    #[test]
    fn another_thread_sees_entries_only_in_published_batches() {
        let ring = BlockRing::new(2 * PUBLISH);
        unsafe {
            for i in 0..PUBLISH as u32 - 1 {
                ring.push_at(ring.len(), i);
            }
            assert_eq!(ring.pending(), PUBLISH - 1);
            assert_eq!(ring.pending_published(), 0, "nothing published before {PUBLISH} entries");
            let mut seen = 0;
            ring.take_published(usize::MAX, |recs| {
                seen = recs.len();
                seen
            });
            assert_eq!(seen, 0);
            ring.push_at(ring.len(), 999);
            assert_eq!(ring.pending_published(), PUBLISH);
            ring.take_published(10, |recs| {
                assert_eq!(recs[..3], [0, 1, 2]);
                10
            });
            assert_eq!((ring.consumed(), ring.pending_published()), (10, PUBLISH - 10));
            // The producer's own consumption takes the rest, published or not, and starts over.
            ring.push_at(ring.len(), 1000);
            let mut rest = Vec::new();
            ring.take_own(|recs| rest.extend_from_slice(recs));
            assert_eq!((rest.len(), rest[0], *rest.last().unwrap()), (PUBLISH + 1 - 10, 10, 1000));
            assert_eq!((ring.len(), ring.pending_published(), ring.consumed()), (0, 0, 0));
        }
    }

    #[test]
    fn a_grant_lets_the_producer_go_on_until_its_own_consumption_resets_it() {
        let ring = BlockRing::<u8>::new(100);
        assert_eq!(ring.granted(), 0);
        ring.grant(40);
        // The largest grant counts (each is a bound computed from a state the entries passed).
        ring.grant(30);
        assert_eq!(ring.granted(), 40);
        // Never past the capacity.
        ring.grant(1000);
        assert_eq!(ring.granted(), 100);
        unsafe { ring.take_own(|_| {}) };
        assert_eq!(ring.granted(), 0, "a grant belongs to the entries before the producer consumed");
    }

    #[test]
    fn flush_request_is_cleared_by_the_producers_consumption() {
        let ring = BlockRing::<u8>::new(2);
        assert!(!ring.flush_wanted());
        ring.want_flush();
        assert!(ring.flush_wanted());
        unsafe { ring.take_own(|_| {}) };
        assert!(!ring.flush_wanted());
    }

    #[test]
    fn a_consumer_thread_and_the_producer_see_every_record_once_in_order() {
        // The producer appends 200k records; a second thread consumes under the shared lock while
        // the producer consumes whenever its ring is full: together they see 0..N once, in order.
        const N: u64 = 200_000;
        let ring = Arc::new(BlockRing::new(64));
        let model = Arc::new(Mutex::new(Vec::with_capacity(N as usize)));
        let done = Arc::new(AtomicBool::new(false));
        let consumer = {
            let (ring, model, done) = (ring.clone(), model.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    if let Ok(mut m) = model.try_lock() {
                        unsafe { ring.take_shared(5, |recs| {
                            m.extend_from_slice(recs);
                            recs.len()
                        }) };
                    }
                    std::hint::spin_loop();
                }
            })
        };
        for i in 0..N {
            while !unsafe { ring.push(i) } {
                let mut m = model.lock().unwrap();
                unsafe { ring.take_own(|recs| m.extend_from_slice(recs)) };
            }
        }
        {
            let mut m = model.lock().unwrap();
            unsafe { ring.take_own(|recs| m.extend_from_slice(recs)) };
        }
        done.store(true, Ordering::Release);
        consumer.join().unwrap();
        let m = model.lock().unwrap();
        assert_eq!(m.len() as u64, N);
        assert!(m.iter().copied().eq(0..N));
    }
}
