//! The verified-token cache: bounded by entry count, keyed by SHA-256 of the
//! token bytes.
//!
//! A hit skips parsing and the signature check only. The verifier still checks
//! the time claims against `now`, that the very key entry that verified the
//! token still verifies under its kid (a hit is not honoured once the key is
//! deprecated, removed, or replaced by other material under the same kid), and
//! the allocation's state. Eviction is first-in first-out.
//!
//! Built so that hits on many threads never write to memory another thread
//! reads: the entries sit in an open-addressing table (linear probing, at
//! most half full) of [`ArcSwapOption`] slots, and a lookup reads slots
//! without a lock and without touching any reference count. Inserts and
//! removals take one lock, keep the first-in first-out order, and move
//! entries with backward-shift deletion. A lookup that races a writer can
//! miss an entry that is there (the caller then verifies in full, which gives
//! the same answer); it never returns an entry for another token, because
//! every entry carries its full 32-byte hash and the lookup compares it.
//!
//! Memory per entry: the shared `VerifiedIdentity` (its claims' strings:
//! typically 300–500 bytes for Nomad-sized IDs), the 32-byte hash twice (in
//! the entry and in the eviction queue), and 2 to 4 table slots of 8 bytes.
//! Measured in BENCHMARKS.md.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwapOption;

use sha2::{Digest, Sha256};

use super::VerifiedIdentity;
use crate::keyring::KeyRef;

/// A cached verification: what was verified, and by which key. The key is held
/// by identity (never by its kid string): a kid removed and re-inserted with
/// other material is another key, and its old entries are not honoured.
pub(crate) struct Cached {
    /// The token's hash (the table compares it on every probe).
    hash: TokenHash,
    pub(crate) identity: VerifiedIdentity,
    pub(crate) key: KeyRef,
    /// The keyring generation at which `key` was last seen to still verify
    /// under its kid (0: not yet). While the keyring's generation is the
    /// same, no key has changed and a hit need not look the key up again.
    checked_at: AtomicU64,
}

impl Cached {
    pub(crate) fn new(hash: TokenHash, identity: VerifiedIdentity, key: KeyRef) -> Cached {
        Cached {
            hash,
            identity,
            key,
            checked_at: AtomicU64::new(0),
        }
    }

    /// Whether the key was confirmed at keyring generation `generation`.
    pub(crate) fn checked_at(&self, generation: u64) -> bool {
        self.checked_at.load(Ordering::Relaxed) == generation
    }

    /// Records that the key was confirmed at `generation` (loaded before the
    /// look-up that confirmed it).
    pub(crate) fn mark_checked(&self, generation: u64) {
        self.checked_at.store(generation, Ordering::Relaxed);
    }
}

/// The cache key: SHA-256 of the token.
pub(crate) type TokenHash = [u8; 32];

pub(crate) fn token_hash(token: &[u8]) -> TokenHash {
    Sha256::digest(token).into()
}

/// Where the probe for `key` starts: the hash is uniform, so its first
/// eight bytes will do.
fn home(key: &TokenHash, mask: usize) -> usize {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[..8]);
    (u64::from_le_bytes(b) as usize) & mask
}

/// What only writers touch, under the lock.
struct Writer {
    /// Hashes in insertion order (removed entries' hashes linger until they
    /// reach the front or a compaction).
    order: VecDeque<TokenHash>,
    /// Entries in the table.
    len: usize,
}

pub(crate) struct TokenCache {
    capacity: usize,
    /// `slots.len() - 1`; the length is a power of two, at least twice one
    /// more than the capacity, so the table is at most half full and probes
    /// stay short.
    mask: usize,
    slots: Box<[ArcSwapOption<Cached>]>,
    writer: Mutex<Writer>,
}

impl TokenCache {
    pub(crate) fn new(capacity: usize) -> TokenCache {
        let capacity = capacity.max(1);
        // +1: an insert holds one entry over the bound until it evicts.
        let size = (2 * (capacity + 1)).next_power_of_two();
        TokenCache {
            capacity,
            mask: size - 1,
            slots: (0..size).map(|_| ArcSwapOption::empty()).collect(),
            writer: Mutex::new(Writer {
                order: VecDeque::new(),
                len: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f` with the entry for `key`, if there is one, and returns what
    /// `f` returns. No lock is taken and no count is written: `f` should copy
    /// what it needs rather than keep the entry.
    pub(crate) fn with<R>(&self, key: &TokenHash, f: impl FnOnce(&Cached) -> R) -> Option<R> {
        let mut i = home(key, self.mask);
        for _ in 0..self.slots.len() {
            let slot = self.slots[i].load();
            match slot.as_deref() {
                None => return None,
                Some(entry) if entry.hash == *key => return Some(f(entry)),
                Some(_) => i = (i + 1) & self.mask,
            }
        }
        None
    }

    /// The slot holding `key` (writers only: with the lock held, the table
    /// does not change under the probe).
    fn find(&self, key: &TokenHash) -> Option<usize> {
        let mut i = home(key, self.mask);
        for _ in 0..self.slots.len() {
            match self.slots[i].load().as_deref() {
                None => return None,
                Some(entry) if entry.hash == *key => return Some(i),
                Some(_) => i = (i + 1) & self.mask,
            }
        }
        None
    }

    pub(crate) fn insert(&self, value: Arc<Cached>) {
        let key = value.hash;
        let mut w = self.lock();
        let mut i = home(&key, self.mask);
        // The table is at most half full: an empty slot comes.
        loop {
            match self.slots[i].load().as_deref() {
                None => break,
                Some(entry) if entry.hash == key => return,
                Some(_) => i = (i + 1) & self.mask,
            }
        }
        self.slots[i].store(Some(value));
        w.len += 1;
        w.order.push_back(key);
        while w.len > self.capacity {
            let Some(old) = w.order.pop_front() else {
                break;
            };
            if let Some(slot) = self.find(&old) {
                self.delete(slot);
                w.len -= 1;
            }
        }
        // Removed entries leave their hash in the queue; compact before the
        // queue can outgrow the bound.
        if w.order.len() > 2 * self.capacity {
            w.order.retain(|k| self.find(k).is_some());
        }
    }

    pub(crate) fn remove(&self, key: &TokenHash) {
        let mut w = self.lock();
        if let Some(slot) = self.find(key) {
            self.delete(slot);
            w.len -= 1;
        }
    }

    /// Empties slot `i` and moves later entries of the probe run back, so
    /// that every remaining entry stays reachable from its home slot
    /// (backward-shift deletion). The caller holds the lock.
    fn delete(&self, mut i: usize) {
        self.slots[i].store(None);
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let Some(entry) = self.slots[j].load_full() else {
                return;
            };
            // The entry may move to the hole at `i` unless its home lies
            // cyclically in (i, j].
            let h = home(&entry.hash, self.mask);
            let stays = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !stays {
                self.slots[i].store(Some(entry));
                self.slots[j].store(None);
                i = j;
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len
    }

    /// (entries, queued keys): for tests of the bound.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let w = self.lock();
        (w.len, w.order.len())
    }

    /// Every entry is reachable from its home slot, and the count is right.
    #[cfg(test)]
    fn consistent(&self) -> bool {
        let entries: Vec<TokenHash> = self
            .slots
            .iter()
            .filter_map(|s| s.load().as_deref().map(|e| e.hash))
            .collect();
        entries.len() == self.lock().len && entries.iter().all(|k| self.find(k).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Claims;

    fn id(i: u32) -> Arc<Cached> {
        Arc::new(Cached::new(
            key(i),
            VerifiedIdentity {
                claims: Claims::default(),
                kid: crate::keyring::KeyId::new("k").unwrap(),
            },
            KeyRef::none(),
        ))
    }

    fn key(i: u32) -> TokenHash {
        token_hash(&i.to_le_bytes())
    }

    fn present(c: &TokenCache, i: u32) -> bool {
        c.with(&key(i), |e| e.hash).is_some_and(|h| h == key(i))
    }

    #[test]
    fn stays_within_its_bound_first_in_first_out() {
        for capacity in [1, 2, 7, 100, 1000] {
            let c = TokenCache::new(capacity);
            // The policy, modelled: the present entries, oldest first.
            let mut model: VecDeque<u32> = VecDeque::new();
            let inserts = 10 * capacity as u32 + 10;
            for i in 0..inserts {
                c.insert(id(i));
                model.push_back(i);
                if model.len() > capacity {
                    model.pop_front();
                }
                if i % 3 == 0 {
                    c.remove(&key(i));
                    model.retain(|&k| k != i);
                }
                let (entries, queued) = c.sizes();
                assert!(entries <= capacity, "{capacity}/{i}: {entries}");
                assert!(queued <= 2 * capacity + 1, "{capacity}/{i}: {queued}");
            }
            assert!(c.consistent(), "{capacity}");
            assert_eq!(c.len(), model.len(), "{capacity}");
            assert!(model.iter().all(|&i| present(&c, i)), "{capacity}");
            assert!(!present(&c, 1), "{capacity}");
        }
    }

    #[test]
    fn removals_keep_every_other_entry_reachable() {
        // A small table, so probe runs wrap around its end.
        let c = TokenCache::new(16);
        for round in 0..200u32 {
            for i in 0..16 {
                c.insert(id(round * 16 + i));
            }
            for i in (0..16).step_by(round as usize % 3 + 2) {
                c.remove(&key(round * 16 + i));
            }
            assert!(c.consistent(), "round {round}");
        }
    }

    #[test]
    fn readers_on_other_threads_find_entries_or_miss_but_never_mix_them_up() {
        let c = TokenCache::new(64);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000u32 {
                    c.insert(id(i));
                    if i % 2 == 0 {
                        c.remove(&key(i / 2));
                    }
                }
            });
            for _ in 0..2 {
                s.spawn(|| {
                    for n in 0..200_000u32 {
                        let i = n % 20_000;
                        if let Some(h) = c.with(&key(i), |e| e.hash) {
                            assert_eq!(h, key(i));
                        }
                    }
                });
            }
        });
        assert!(c.consistent());
    }

    #[test]
    fn a_hit_remembers_the_keyring_generation_it_was_checked_at() {
        let e = id(0);
        assert!(!e.checked_at(1));
        e.mark_checked(7);
        assert!(e.checked_at(7) && !e.checked_at(8));
    }
}
