//! Counters that many threads bump without sharing a cache line.
//!
//! A plain `AtomicU64` bumped by every verification is one cache line written
//! by every core: on two threads its transfers alone cost more than a cache
//! hit's own work. A [`Counter`] spreads the count over one padded slot per
//! thread (modulo the slot count, about twice the machine's cores); reading it
//! sums the slots. Reads are snapshots: exact once the writers are done,
//! never torn, and monotonic for any one thread's bumps.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One slot, alone on its cache line (128 bytes: two lines, as adjacent-line
/// prefetchers pair them).
#[derive(Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// A striped event counter.
pub(crate) struct Counter {
    slots: Box<[Slot]>,
}

impl Default for Counter {
    fn default() -> Counter {
        Counter {
            slots: (0..slot_count()).map(|_| Slot::default()).collect(),
        }
    }
}

impl Counter {
    /// Adds one.
    pub(crate) fn bump(&self) {
        self.slots[thread_index() & (self.slots.len() - 1)]
            .0
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.slots
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// Slots per counter: a power of two, about twice the cores, at most 64.
fn slot_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (2 * cores).next_power_of_two().min(64)
    })
}

/// This thread's index: threads are numbered in the order they first bump a
/// counter, so threads started together land on different slots.
fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_bump_from_every_thread() {
        let c = Counter::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        c.bump();
                    }
                });
            }
        });
        c.bump();
        assert_eq!(c.get(), 80_001);
        assert!(c.slots.len().is_power_of_two());
    }
}
