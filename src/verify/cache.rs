//! The verified-token cache: bounded by entry count, keyed by the token's
//! bytes.
//!
//! A hit skips parsing and the signature check only. The verifier still checks
//! the time claims against `now`, that the very key entry that verified the
//! token still verifies under its kid (a hit is not honoured once the key is
//! deprecated, removed, or replaced by other material under the same kid), and
//! the allocation's state. Eviction is first-in first-out.
//!
//! An entry holds a copy of its token, and a lookup compares the presented
//! token with it byte for byte: a hit is the very token that was verified,
//! whatever the hash does. The hash only places entries in the table; it is
//! SipHash-1-3 under a key drawn at random for each cache (the standard
//! library's `RandomState`), so nobody outside the process can aim tokens at
//! one probe run. Before, the cache was keyed by SHA-256 of the token, whose
//! 19,000 instructions were four fifths of a hit (BENCHMARKS.md).
//!
//! Built so that hits on many threads never write to memory another thread
//! reads: the entries sit in an open-addressing table (linear probing, at
//! most half full) of [`ArcSwapOption`] slots, and a lookup reads slots
//! without a lock and without touching any reference count. Inserts and
//! removals take one lock, keep the first-in first-out order, and move
//! entries with backward-shift deletion. A lookup that races a writer can
//! miss an entry that is there (the caller then verifies in full, which gives
//! the same answer); it never returns an entry for another token, because it
//! compares the whole token.
//!
//! One cache can serve several verifiers (a trust set's issuers): each entry
//! names its owner, the index of the verifier that verified it. Each owner
//! has its own bound and its own first-in first-out order, so one issuer's
//! traffic evicts only that issuer's entries (as when each issuer had a
//! cache of its own), while a lookup is still one probe of one table.
//!
//! Memory grows with use, not with the configured capacity: the table starts
//! at [`MIN_SLOTS`] slots and doubles when it would be more than half full,
//! up to what the capacity needs; the capacity itself is clamped to
//! [`MAX_CACHE_ENTRIES`], so no value overflows or allocates up front. The
//! first-in first-out order is, per owner, a map from an insertion number to
//! the entry that holds exactly the entries in the table: a removal takes its number
//! out, so an entry that is removed and inserted again (a cached token whose
//! store read failed, then verified again) never leaves a copy behind.
//!
//! Memory per entry: the shared `VerifiedIdentity` (its claims' strings:
//! typically 300–500 bytes for Nomad-sized IDs), the token's copy (as long
//! as the token, typically 550–650 bytes), the order's 8-byte number and
//! pointer with its B-tree overhead, and 2 to 4 table slots of 8 bytes.
//! Measured in BENCHMARKS.md.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::{ArcSwap, ArcSwapOption};

use super::VerifiedIdentity;
use crate::keyring::KeyRef;

/// The most entries a verified-token cache holds: larger capacities are
/// clamped to this (about 1 GiB of entries at Nomad-sized claims and tokens,
/// and a 32 MiB table, reached only by use).
pub const MAX_CACHE_ENTRIES: usize = 1 << 20;

/// The table's size before any growth.
const MIN_SLOTS: usize = 16;

/// A cached verification: what was verified, and by which key. The key is held
/// by identity (never by its kid string): a kid removed and re-inserted with
/// other material is another key, and its old entries are not honoured.
pub(crate) struct Cached {
    /// The token's hash under this cache's key (compared first on a probe).
    hash: u64,
    /// The token itself (compared whole before an entry is a hit).
    token: Box<[u8]>,
    /// Its place in the first-in first-out order (set by the writer).
    seq: u64,
    /// The verifier the entry belongs to (0 for a verifier's own cache; the
    /// issuer's index in a trust set's).
    pub(crate) owner: usize,
    pub(crate) identity: VerifiedIdentity,
    pub(crate) key: KeyRef,
    /// The keyring generation at which `key` was last seen to still verify
    /// under its kid (0: not yet). While the keyring's generation is the
    /// same, no key has changed and a hit need not look the key up again.
    checked_at: AtomicU64,
}

impl Cached {
    /// Whether the key was confirmed at keyring generation `generation`.
    pub(crate) fn checked_at(&self, generation: u64) -> bool {
        self.checked_at.load(Ordering::Relaxed) == generation
    }

    /// Records that the key was confirmed at `generation` (loaded before the
    /// look-up that confirmed it).
    pub(crate) fn mark_checked(&self, generation: u64) {
        self.checked_at.store(generation, Ordering::Relaxed);
    }

    fn is(&self, probe: &Probe<'_>) -> bool {
        self.hash == probe.hash && *self.token == *probe.token
    }
}

/// A token as one cache looks it up: its bytes and their hash under that
/// cache's key (a probe is good for the cache that made it only).
#[derive(Clone, Copy)]
pub(crate) struct Probe<'a> {
    hash: u64,
    token: &'a [u8],
}

/// Where a verification is looked up and, once verified, cached: the cache,
/// the token's probe, and the owner its entry is filed under.
#[derive(Clone, Copy)]
pub(crate) struct Slot<'a> {
    pub(crate) cache: &'a TokenCache,
    pub(crate) probe: Probe<'a>,
    pub(crate) owner: usize,
}

impl<'a> Slot<'a> {
    /// The same place, filed under `owner`.
    pub(crate) fn for_owner(self, owner: usize) -> Slot<'a> {
        Slot { owner, ..self }
    }
}

/// Where the probe for `hash` starts.
fn home(hash: u64, mask: usize) -> usize {
    (hash as usize) & mask
}

/// One open-addressing table; replaced whole (never resized in place) when it
/// grows, so a reader holding the old one still sees a consistent table.
struct Table {
    /// `slots.len() - 1`; the length is a power of two.
    mask: usize,
    slots: Box<[ArcSwapOption<Cached>]>,
}

impl Table {
    fn new(size: usize) -> Table {
        Table {
            mask: size - 1,
            slots: (0..size).map(|_| ArcSwapOption::empty()).collect(),
        }
    }

    /// The slot of the entry `is` picks, on the probe run from `hash`'s
    /// home (writers only: with the lock held, the table does not change
    /// under the probe).
    fn find(&self, hash: u64, is: impl Fn(&Arc<Cached>) -> bool) -> Option<usize> {
        let mut i = home(hash, self.mask);
        for _ in 0..self.slots.len() {
            match self.slots[i].load().as_ref() {
                None => return None,
                Some(entry) if is(entry) => return Some(i),
                Some(_) => i = (i + 1) & self.mask,
            }
        }
        None
    }

    /// The slot holding `entry` itself.
    fn find_entry(&self, entry: &Arc<Cached>) -> Option<usize> {
        self.find(entry.hash, |e| Arc::ptr_eq(e, entry))
    }

    /// The empty slot the probe from `hash`'s home reaches first. The table
    /// is at most half full: an empty slot comes.
    fn vacancy(&self, hash: u64) -> usize {
        let mut i = home(hash, self.mask);
        while self.slots[i].load().is_some() {
            i = (i + 1) & self.mask;
        }
        i
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
            let h = home(entry.hash, self.mask);
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
}

/// What only writers touch, under the lock.
struct Writer {
    /// Each owner's entries in the table by insertion number, oldest first:
    /// exactly one item per entry, under its owner.
    orders: Vec<BTreeMap<u64, Arc<Cached>>>,
    /// The entries in the table (the sum of the orders' lengths).
    len: usize,
    /// The next insertion number (one sequence across owners, so the
    /// oldest entry overall is the smallest first number of any owner).
    next_seq: u64,
}

impl Writer {
    /// Forgets `entry` from its owner's order.
    fn forget(&mut self, entry: &Cached) {
        if let Some(order) = self.orders.get_mut(entry.owner) {
            if order.remove(&entry.seq).is_some() {
                self.len -= 1;
            }
        }
    }

    /// Takes the oldest entry of `owner` out of the order.
    fn pop_oldest_of(&mut self, owner: usize) -> Option<Arc<Cached>> {
        let (_, old) = self.orders.get_mut(owner)?.pop_first()?;
        self.len -= 1;
        Some(old)
    }

    /// The owner whose oldest entry is the oldest overall.
    fn owner_of_oldest(&self) -> Option<usize> {
        self.orders
            .iter()
            .enumerate()
            .filter_map(|(owner, order)| order.first_key_value().map(|(seq, _)| (*seq, owner)))
            .min()
            .map(|(_, owner)| owner)
    }

    fn len_of(&self, owner: usize) -> usize {
        self.orders.get(owner).map_or(0, BTreeMap::len)
    }
}

pub(crate) struct TokenCache {
    /// The most entries in all.
    capacity: usize,
    /// The most entries of one owner: one owner's traffic evicts only its
    /// own entries, never another owner's.
    per_owner: usize,
    /// The table's largest size: a power of two, at least twice one more
    /// than the capacity, so the table is at most half full.
    max_slots: usize,
    /// The hash's key, drawn for this cache.
    hasher: RandomState,
    table: ArcSwap<Table>,
    writer: Mutex<Writer>,
}

impl TokenCache {
    /// A cache for `capacity` entries, clamped to 1..=[`MAX_CACHE_ENTRIES`].
    pub(crate) fn new(capacity: usize) -> TokenCache {
        TokenCache::shared(capacity, 1)
    }

    /// A cache shared by `owners` owners, `per_owner` entries each (both
    /// clamped to at least 1, the whole to [`MAX_CACHE_ENTRIES`]). Each
    /// owner's entries are evicted first in, first out among themselves, so
    /// a flood of one owner's tokens leaves the others' entries in place;
    /// only when the whole is full (the clamp) does the oldest entry of any
    /// owner go.
    pub(crate) fn shared(per_owner: usize, owners: usize) -> TokenCache {
        let per_owner = per_owner.clamp(1, MAX_CACHE_ENTRIES);
        let capacity = per_owner
            .saturating_mul(owners.max(1))
            .min(MAX_CACHE_ENTRIES);
        TokenCache::bounded(per_owner, capacity)
    }

    /// A cache of `capacity` entries in all, `per_owner` of one owner (both
    /// already within 1..=[`MAX_CACHE_ENTRIES`]).
    fn bounded(per_owner: usize, capacity: usize) -> TokenCache {
        // +1: an insert holds one entry over the bound until it evicts. No
        // overflow: the capacity is at most 2^20.
        let max_slots = (2 * (capacity + 1)).next_power_of_two();
        TokenCache {
            capacity,
            per_owner,
            max_slots,
            hasher: RandomState::new(),
            table: ArcSwap::from_pointee(Table::new(MIN_SLOTS.min(max_slots))),
            writer: Mutex::new(Writer {
                orders: Vec::new(),
                len: 0,
                next_seq: 0,
            }),
        }
    }

    /// How `token` is looked up in this cache.
    #[inline]
    pub(crate) fn probe<'a>(&self, token: &'a [u8]) -> Probe<'a> {
        Probe {
            hash: self.hasher.hash_one(token),
            token,
        }
    }

    /// Where `token` is looked up and filed in this cache, under owner 0.
    #[inline]
    pub(crate) fn slot<'a>(&'a self, token: &'a [u8]) -> Slot<'a> {
        Slot {
            cache: self,
            probe: self.probe(token),
            owner: 0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f` with the entry for `probe`'s token, if there is one, and
    /// returns what `f` returns. No lock is taken and no count is written:
    /// `f` should copy what it needs rather than keep the entry.
    pub(crate) fn with<R>(&self, probe: &Probe<'_>, f: impl FnOnce(&Cached) -> R) -> Option<R> {
        let table = self.table.load();
        let mut i = home(probe.hash, table.mask);
        for _ in 0..table.slots.len() {
            let slot = table.slots[i].load();
            match slot.as_deref() {
                None => return None,
                Some(entry) if entry.is(probe) => return Some(f(entry)),
                Some(_) => i = (i + 1) & table.mask,
            }
        }
        None
    }

    /// Caches `identity`, verified by `key`, for `probe`'s token under
    /// `owner` (nothing changes when the token is already cached).
    pub(crate) fn insert(
        &self,
        probe: &Probe<'_>,
        owner: usize,
        identity: VerifiedIdentity,
        key: KeyRef,
    ) {
        let mut w = self.lock();
        let mut table = self.table.load_full();
        if table.find(probe.hash, |e| e.is(probe)).is_some() {
            return;
        }
        // Grow before the table would be more than half full.
        let len = w.len;
        if 2 * (len + 1) > table.slots.len() && table.slots.len() < self.max_slots {
            table = Arc::new(self.grown(&table, len + 1));
            self.table.store(Arc::clone(&table));
        }
        let seq = w.next_seq;
        w.next_seq += 1;
        let entry = Arc::new(Cached {
            hash: probe.hash,
            token: probe.token.into(),
            seq,
            owner,
            identity,
            key,
            checked_at: AtomicU64::new(0),
        });
        table.slots[table.vacancy(probe.hash)].store(Some(Arc::clone(&entry)));
        if w.orders.len() <= owner {
            w.orders.resize_with(owner + 1, BTreeMap::new);
        }
        w.orders[owner].insert(seq, entry);
        w.len += 1;
        // The owner's own bound first: its oldest entry makes room. Then the
        // whole (reached only when the clamp cut it): the oldest entry of any
        // owner.
        loop {
            let victim = if w.len_of(owner) > self.per_owner {
                Some(owner)
            } else if w.len > self.capacity {
                w.owner_of_oldest()
            } else {
                None
            };
            let Some(old) = victim.and_then(|o| w.pop_oldest_of(o)) else {
                break;
            };
            if let Some(slot) = table.find_entry(&old) {
                table.delete(slot);
            }
        }
    }

    /// A table of at least twice `entries` slots (at most `max_slots`)
    /// holding every entry of `old`.
    fn grown(&self, old: &Table, entries: usize) -> Table {
        let size = (2 * entries).next_power_of_two().min(self.max_slots);
        let new = Table::new(size);
        for slot in old.slots.iter() {
            if let Some(entry) = slot.load_full() {
                let i = new.vacancy(entry.hash);
                new.slots[i].store(Some(entry));
            }
        }
        new
    }

    /// Forgets `probe`'s token.
    pub(crate) fn remove(&self, probe: &Probe<'_>) {
        let mut w = self.lock();
        let table = self.table.load();
        if let Some(slot) = table.find(probe.hash, |e| e.is(probe)) {
            if let Some(entry) = table.slots[slot].load_full() {
                w.forget(&entry);
            }
            table.delete(slot);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len
    }

    /// The entries `owner` filed.
    pub(crate) fn len_of(&self, owner: usize) -> usize {
        self.lock().len_of(owner)
    }

    /// (entries, table slots): for tests of the bound.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let w = self.lock();
        (w.len, self.table.load().slots.len())
    }

    /// Every entry is reachable from its home slot, the order holds exactly
    /// the entries, and the counts are right.
    #[cfg(test)]
    fn consistent(&self) -> bool {
        let w = self.lock();
        let table = self.table.load();
        let entries: Vec<Arc<Cached>> = table.slots.iter().filter_map(|s| s.load_full()).collect();
        let owned: usize = w.orders.iter().map(BTreeMap::len).sum();
        entries.len() == w.len
            && owned == entries.len()
            && entries.iter().all(|e| {
                table.find_entry(e).is_some()
                    && w.orders[e.owner]
                        .get(&e.seq)
                        .is_some_and(|o| Arc::ptr_eq(o, e))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Claims;
    use std::collections::VecDeque;

    fn put(c: &TokenCache, i: u32) {
        put_as(c, i, 0);
    }

    fn put_as(c: &TokenCache, i: u32, owner: usize) {
        let t = token(i);
        c.insert(
            &c.probe(&t),
            owner,
            VerifiedIdentity {
                claims: Claims::default(),
                kid: crate::keyring::KeyId::new("k").unwrap(),
            },
            KeyRef::none(),
        );
    }

    fn token(i: u32) -> Vec<u8> {
        format!("header.claims-{i}.signature").into_bytes()
    }

    /// The token of entry `i` is found, and it is that token.
    fn present(c: &TokenCache, i: u32) -> bool {
        let t = token(i);
        c.with(&c.probe(&t), |e| e.token.to_vec())
            .is_some_and(|found| found == t)
    }

    fn remove(c: &TokenCache, i: u32) {
        let t = token(i);
        c.remove(&c.probe(&t));
    }

    /// What a lookup of token `i` finds: the found entry's token.
    fn found(c: &TokenCache, i: u32) -> Option<Vec<u8>> {
        let t = token(i);
        c.with(&c.probe(&t), |e| e.token.to_vec())
    }

    #[test]
    fn stays_within_its_bound_first_in_first_out() {
        for capacity in [1, 2, 7, 100, 1000] {
            let c = TokenCache::new(capacity);
            // The policy, modelled: the present entries, oldest first.
            let mut model: VecDeque<u32> = VecDeque::new();
            let inserts = 10 * capacity as u32 + 10;
            for i in 0..inserts {
                put(&c, i);
                model.push_back(i);
                if model.len() > capacity {
                    model.pop_front();
                }
                if i % 3 == 0 {
                    remove(&c, i);
                    model.retain(|&k| k != i);
                }
                let (entries, _) = c.sizes();
                assert!(entries <= capacity, "{capacity}/{i}: {entries}");
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
                put(&c, round * 16 + i);
            }
            for i in (0..16).step_by(round as usize % 3 + 2) {
                remove(&c, round * 16 + i);
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
                    put(&c, i);
                    if i % 2 == 0 {
                        remove(&c, i / 2);
                    }
                }
            });
            for _ in 0..2 {
                s.spawn(|| {
                    for n in 0..200_000u32 {
                        let i = n % 20_000;
                        if let Some(t) = found(&c, i) {
                            assert_eq!(t, token(i));
                        }
                    }
                });
            }
        });
        assert!(c.consistent());
    }

    #[test]
    fn a_hit_remembers_the_keyring_generation_it_was_checked_at() {
        let c = TokenCache::new(4);
        put(&c, 0);
        let t = token(0);
        let p = c.probe(&t);
        assert_eq!(c.with(&p, |e| e.checked_at(1)), Some(false));
        c.with(&p, |e| e.mark_checked(7));
        assert_eq!(
            c.with(&p, |e| (e.checked_at(7), e.checked_at(8))),
            Some((true, false))
        );
    }

    /// A cached token whose hit fails (a transient store error) is removed,
    /// then verified and inserted again: the order must not keep a copy per
    /// round, and inserts must not slow down with the rounds.
    #[test]
    fn an_entry_that_flaps_leaves_nothing_behind() {
        let c = TokenCache::new(8);
        for i in 1..=4 {
            put(&c, i);
        }
        for _ in 0..100_000 {
            put(&c, 0);
            remove(&c, 0);
        }
        put(&c, 0);
        let (entries, slots) = c.sizes();
        assert_eq!(entries, 5);
        assert_eq!(c.lock().orders[0].len(), 5, "one order item per entry");
        assert_eq!(c.len_of(0), 5);
        assert!(slots <= 32, "{slots} slots for 5 entries");
        assert!(c.consistent());
        // First in, first out still holds across the flapping: 1 is evicted
        // first, and the re-inserted 0 counts as the newest.
        for i in 10..14 {
            put(&c, i);
        }
        assert!(!present(&c, 1) && present(&c, 0) && present(&c, 2));
    }

    #[test]
    fn capacity_is_clamped_and_memory_grows_with_use() {
        for capacity in [
            usize::MAX,
            usize::MAX / 2 + 1,
            MAX_CACHE_ENTRIES + 1,
            1 << 40,
        ] {
            let c = TokenCache::new(capacity);
            assert_eq!(c.capacity, MAX_CACHE_ENTRIES, "{capacity}");
            let (_, slots) = c.sizes();
            assert_eq!(
                slots, MIN_SLOTS,
                "nothing allocated up front for {capacity}"
            );
            for i in 0..100 {
                put(&c, i);
            }
            let (entries, slots) = c.sizes();
            assert_eq!(entries, 100);
            assert!(
                (200..=512).contains(&slots),
                "{slots} slots for 100 entries"
            );
            assert!(c.consistent());
            assert!((0..100).all(|i| present(&c, i)));
        }
        // The zero capacity is one entry, as before.
        let c = TokenCache::new(0);
        put(&c, 1);
        put(&c, 2);
        assert!(present(&c, 2) && !present(&c, 1));
    }

    #[test]
    fn growth_while_readers_probe_never_mixes_entries_up() {
        let c = TokenCache::new(100_000);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000u32 {
                    put(&c, i);
                }
            });
            s.spawn(|| {
                for n in 0..200_000u32 {
                    let i = n % 20_000;
                    if let Some(t) = found(&c, i) {
                        assert_eq!(t, token(i));
                    }
                }
            });
        });
        assert!(c.consistent());
        assert!((0..20_000).all(|i| present(&c, i)));
    }
}

/// Tests that need to choose the hash.
#[cfg(test)]
mod collisions {
    use super::*;
    use crate::claims::Claims;

    fn identity(sub: &str) -> VerifiedIdentity {
        VerifiedIdentity {
            claims: Claims {
                subject: sub.into(),
                ..Claims::default()
            },
            kid: crate::keyring::KeyId::new("k").unwrap(),
        }
    }

    /// Two tokens under one hash: each lookup finds its own token's entry,
    /// and a third token with that hash (a forgery aimed at a cached
    /// token's hash) finds nothing.
    #[test]
    fn a_hash_collision_never_returns_another_tokens_entry() {
        let c = TokenCache::new(8);
        let (a, b, forged) = (
            b"a.b.c".as_slice(),
            b"a.b.d".as_slice(),
            b"a.x.c".as_slice(),
        );
        let at = |token| Probe { hash: 42, token };
        c.insert(&at(a), 0, identity("a"), KeyRef::none());
        c.insert(&at(b), 0, identity("b"), KeyRef::none());
        let sub = |token| c.with(&at(token), |e| e.identity.claims.subject.clone());
        assert_eq!(sub(a).as_deref(), Some("a"));
        assert_eq!(sub(b).as_deref(), Some("b"));
        assert_eq!(sub(forged), None);
        c.remove(&at(a));
        assert_eq!(sub(a), None);
        assert_eq!(sub(b).as_deref(), Some("b"));
        assert!(c.consistent());
    }

    /// One cache shared by owners counts each one's entries, through
    /// inserts, removals and evictions.
    #[test]
    fn entries_are_counted_per_owner() {
        let c = TokenCache::new(4);
        let tokens: Vec<Vec<u8>> = (0..6).map(|i| format!("t{i}").into_bytes()).collect();
        for (i, t) in tokens.iter().enumerate() {
            c.insert(&c.probe(t), i % 3, identity("s"), KeyRef::none());
        }
        // 0..6 inserted, 0 and 1 evicted: owners of 2, 3, 4, 5 are 2, 0, 1, 2.
        assert_eq!(
            (c.len_of(0), c.len_of(1), c.len_of(2), c.len_of(9)),
            (1, 1, 2, 0)
        );
        c.remove(&c.probe(&tokens[5]));
        assert_eq!((c.len(), c.len_of(2)), (3, 1));
        assert_eq!(c.with(&c.probe(&tokens[3]), |e| e.owner), Some(0));
        assert!(c.consistent());
    }

    /// A flood of one owner's tokens evicts only that owner's entries: the
    /// other owners' stay, each owner within its own bound.
    #[test]
    fn one_owners_flood_leaves_the_others_entries() {
        let c = TokenCache::shared(3, 3);
        let quiet: Vec<Vec<u8>> = (0..3).map(|i| format!("quiet-{i}").into_bytes()).collect();
        for (i, t) in quiet.iter().enumerate() {
            c.insert(&c.probe(t), 1 + i % 2, identity("q"), KeyRef::none());
        }
        for i in 0..1000 {
            let t = format!("flood-{i}").into_bytes();
            c.insert(&c.probe(&t), 0, identity("f"), KeyRef::none());
        }
        assert_eq!((c.len_of(0), c.len_of(1), c.len_of(2)), (3, 2, 1));
        assert!(
            quiet
                .iter()
                .all(|t| c.with(&c.probe(t), |e| e.owner != 0) == Some(true))
        );
        // The flood's newest three are what owner 0 keeps.
        for i in 997..1000 {
            let t = format!("flood-{i}").into_bytes();
            assert_eq!(c.with(&c.probe(&t), |e| e.owner), Some(0), "{i}");
        }
        // A quiet owner over its own bound evicts its own oldest, not the
        // flood's.
        for i in 0..4 {
            let t = format!("more-{i}").into_bytes();
            c.insert(&c.probe(&t), 2, identity("m"), KeyRef::none());
        }
        assert_eq!((c.len_of(0), c.len_of(1), c.len_of(2)), (3, 2, 3));
        assert!(c.with(&c.probe(&quiet[1]), |_| ()).is_none());
        assert!(c.with(&c.probe(&quiet[0]), |_| ()).is_some());
        assert!(c.consistent());
    }

    /// When the whole is clamped below owners x per owner, the oldest entry
    /// of any owner goes, and the total stays within the clamp.
    #[test]
    fn the_clamped_whole_evicts_the_oldest_of_any_owner() {
        let c = TokenCache::shared(MAX_CACHE_ENTRIES, 2);
        assert_eq!(
            (c.capacity, c.per_owner),
            (MAX_CACHE_ENTRIES, MAX_CACHE_ENTRIES)
        );
        let small = TokenCache::shared(0, 0);
        assert_eq!((small.capacity, small.per_owner), (1, 1));
        // The same rule at a size a test can fill: 4 per owner, 5 in all.
        let c = TokenCache::bounded(4, 5);
        let t = |i: u32| format!("t{i}").into_bytes();
        for (i, owner) in [(0, 1), (1, 0), (2, 1), (3, 0), (4, 1)] {
            c.insert(&c.probe(&t(i)), owner, identity("s"), KeyRef::none());
        }
        c.insert(&c.probe(&t(5)), 0, identity("s"), KeyRef::none());
        // Over the whole: the oldest of any owner (t0, owner 1) went.
        assert_eq!(c.len(), 5);
        assert!(c.with(&c.probe(&t(0)), |_| ()).is_none());
        assert!((1..6).all(|i| c.with(&c.probe(&t(i)), |_| ()).is_some()));
        assert_eq!((c.len_of(0), c.len_of(1)), (3, 2));
        assert!(c.consistent());
    }
}
