//! The per-vCPU model state: used by its own vCPU thread at every executed block it does not only
//! record (system mode, issue 13), by the encoder thread while it runs recorded blocks through
//! the model, and at exit. A lock whose uncontended release is a plain store.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct VcpuCell<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is only reached through a `VcpuGuard`, and at most one exists at a time
// (`busy`), so sharing the cell between threads is sound for a `Send` value.
unsafe impl<T: Send> Sync for VcpuCell<T> {}

impl<T> VcpuCell<T> {
    pub fn new(value: T) -> Self {
        VcpuCell { busy: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Exclusive access; waits while another thread has it (the exit callback, or the encoder
    /// thread running the vCPU's recorded blocks through the model: spins briefly, then yields).
    #[inline]
    pub fn lock(&self) -> VcpuGuard<'_, T> {
        let mut spins = 0u32;
        while self.busy.swap(true, Ordering::Acquire) {
            while self.busy.load(Ordering::Relaxed) {
                if spins < 1000 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        VcpuGuard { cell: self }
    }

    /// Exclusive access if nobody has it now (the encoder thread never waits for a vCPU).
    #[inline]
    pub fn try_lock(&self) -> Option<VcpuGuard<'_, T>> {
        if self.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        Some(VcpuGuard { cell: self })
    }
}

pub struct VcpuGuard<'a, T> {
    cell: &'a VcpuCell<T>,
}

impl<T> Deref for VcpuGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only access (see `VcpuCell::lock`).
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for VcpuGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for VcpuGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.cell.busy.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn two_threads_never_hold_the_cell_at_once() {
        let cell = Arc::new(VcpuCell::new(0u64));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let c = cell.clone();
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        let mut g = c.lock();
                        let v = *g;
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*cell.lock(), 200_000);
    }
}
