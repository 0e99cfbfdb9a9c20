//! The `jti` replay cache: every accepted proof's `jti` is remembered until
//! the proof expires, so the same proof is accepted once. Sharded so that
//! threads checking different proofs rarely meet on a lock; bounded, and full
//! means "refuse", never "forget a proof that is still valid".
//!
//! The budget is partitioned by workload key (the WIT's `cnf.jwk`): a workload
//! signs as many proofs as it likes, so one holder of a valid WIT could
//! otherwise fill the cache in seconds and have every other workload's proofs
//! refused. One key may hold at most [`OWNER_SHARE`]th of the capacity; a key
//! over its share has its own proofs refused, and the rest of the cache stays
//! open to everyone else. A key's `jti`s all live in one shard (picked by the
//! key), so counting them takes one lock.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};

const SHARDS: usize = 16;
/// One workload key may hold 1/`OWNER_SHARE` of the capacity (at least one
/// proof); larger than `SHARDS`, so a flooding key leaves most of its shard free.
pub(crate) const OWNER_SHARE: usize = 64;

/// One shard: by workload key, `jti` to the Unix second its proof expires.
#[derive(Default)]
struct Shard {
    owners: HashMap<Arc<str>, HashMap<Box<str>, i64>>,
    /// Entries over all owners.
    total: usize,
}

impl Shard {
    /// Forgets every expired entry, and owners left with none.
    fn sweep(&mut self, now: i64) {
        let mut total = 0;
        self.owners.retain(|_, jtis| {
            jtis.retain(|_, until| *until >= now);
            total += jtis.len();
            !jtis.is_empty()
        });
        self.total = total;
    }
}

/// Remembered `jti`s, each until its proof's expiry (Unix seconds).
pub(crate) struct ReplayCache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    per_owner: usize,
    /// Picks a shard; keyed per process, so no one can aim proofs at one shard.
    pick: RandomState,
}

impl ReplayCache {
    /// A cache for at least `capacity` unexpired proofs, at most
    /// `capacity / OWNER_SHARE` (at least 1) of them by one workload key.
    pub(crate) fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            per_owner: (capacity / OWNER_SHARE).max(1),
            pick: RandomState::new(),
        }
    }

    /// Records `jti`, from a proof by the workload key `owner`, as used until
    /// `expires`; `ProofReplayed` when `owner` already used it and it has not
    /// expired at `now`, when `owner` holds its whole share of unexpired
    /// proofs, or when its shard is full of unexpired proofs.
    pub(crate) fn record(&self, owner: &Arc<str>, jti: &str, expires: i64, now: i64) -> Result<()> {
        let i = (self.pick.hash_one(&**owner) as usize) % SHARDS;
        let mut shard = self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let held = shard.owners.get(&**owner);
        if let Some(&until) = held.and_then(|jtis| jtis.get(jti)) {
            if until >= now {
                return Err(Error::ProofReplayed {
                    reason: format!(
                        "jti {:?} was already used by a proof valid until {until}",
                        crate::error::truncate_for_message(jti)
                    ),
                });
            }
        }
        let known = held.is_some_and(|jtis| jtis.contains_key(jti));
        if !known && held.is_some_and(|jtis| jtis.len() >= self.per_owner) {
            shard.sweep(now);
            let count = shard.owners.get(&**owner).map_or(0, HashMap::len);
            if count >= self.per_owner {
                return Err(Error::ProofReplayed {
                    reason: format!(
                        "this workload key already has {count} unexpired proofs, its whole share (1/{OWNER_SHARE}) of the replay cache: refusing the proof rather than forgetting one that is still valid; prove less often, shorten proof lifetimes or raise proof_replay_capacity"
                    ),
                });
            }
        }
        if !known && shard.total >= self.per_shard {
            shard.sweep(now);
            if shard.total >= self.per_shard {
                return Err(Error::ProofReplayed {
                    reason: format!(
                        "the replay cache is full ({} unexpired proofs in this shard): refusing the proof rather than forgetting one that is still valid; raise proof_replay_capacity or shorten proof lifetimes",
                        shard.total
                    ),
                });
            }
        }
        let jtis = shard.owners.entry(Arc::clone(owner)).or_default();
        if jtis.insert(jti.into(), expires).is_none() {
            shard.total += 1;
        }
        Ok(())
    }

    /// Unexpired entries at `now` (for tests and stats; walks every shard).
    pub(crate) fn len(&self, now: i64) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .owners
                    .values()
                    .flat_map(HashMap::values)
                    .filter(|u| **u >= now)
                    .count()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    fn owner(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn a_jti_is_accepted_once_until_it_expires() {
        let c = ReplayCache::new(6400);
        let a = owner("a");
        c.record(&a, "a", 110, 100).unwrap();
        let e = c.record(&a, "a", 110, 105).unwrap_err();
        assert_eq!(e.code(), ResultCode::ProofReplayed);
        assert!(e.to_string().contains("already used"), "{e}");
        // Past its expiry the proof itself is refused as expired; the cache may
        // then take the jti again.
        c.record(&a, "a", 130, 111).unwrap();
        assert_eq!(c.len(111), 1);
    }

    #[test]
    fn a_full_cache_refuses_instead_of_forgetting() {
        let c = ReplayCache::new(SHARDS); // one entry per shard and per owner
        let mut refused = 0;
        for i in 0..200 {
            if c.record(&owner(&format!("o{i}")), "j", 1000, 100).is_err() {
                refused += 1;
            }
        }
        assert!(refused >= 200 - SHARDS, "{refused}");
        assert!(c.len(100) <= SHARDS);
        // Once they expire, room comes back.
        c.record(&owner("late"), "j", 2000, 1001).unwrap();
    }

    /// The shard `owner`'s proofs live in, as `record` picks it.
    fn shard_of(c: &ReplayCache, owner: &Arc<str>) -> usize {
        (c.pick.hash_one(&**owner) as usize) % SHARDS
    }

    /// A key named `{prefix}{n}` (the first `n` that fits) whose proofs live
    /// in `shard`; checked against where `record` puts it.
    fn owner_in(c: &ReplayCache, shard: usize, prefix: &str) -> Arc<str> {
        (0..100_000)
            .map(|n| owner(&format!("{prefix}{n}")))
            .find(|o| shard_of(c, o) == shard)
            .expect("one name in 16 lands in each shard")
    }

    fn holds(c: &ReplayCache, shard: usize, owner: &Arc<str>) -> bool {
        c.shards[shard]
            .lock()
            .unwrap()
            .owners
            .contains_key(&**owner)
    }

    #[test]
    fn one_key_flooding_leaves_room_for_every_other_key() {
        let c = ReplayCache::new(1024); // 16 per key, 64 per shard
        let flood = owner("flooder");
        let home = shard_of(&c, &flood);
        let accepted = (0..10_000)
            .filter(|i| c.record(&flood, &format!("f{i}"), 1000, 100).is_ok())
            .count();
        assert_eq!(accepted, 1024 / OWNER_SHARE);
        assert!(holds(&c, home, &flood), "shard_of disagrees with record");
        let e = c.record(&flood, "one-more", 1000, 100).unwrap_err();
        assert_eq!(e.code(), ResultCode::ProofReplayed);
        assert!(e.to_string().contains("its whole share"), "{e}");
        // Three more flooders cannot shut a shard either. Placed, not left to
        // the hash: two share the first flooder's shard (three floods there,
        // the most a shard of 64 can take with room left: 48), one floods
        // another shard.
        let elsewhere = (home + 1) % SHARDS;
        let flooders = [
            owner_in(&c, home, "flooder-a"),
            owner_in(&c, home, "flooder-b"),
            owner_in(&c, elsewhere, "flooder-c"),
        ];
        for o in &flooders {
            let accepted = (0..100)
                .filter(|i| c.record(o, &format!("f{i}"), 1000, 100).is_ok())
                .count();
            assert_eq!(accepted, 1024 / OWNER_SHARE);
        }
        assert_eq!(c.len(100), 4 * 1024 / OWNER_SHARE);
        // Every other key, wherever it lands, still has room: sixteen new
        // keys in each shard, the thrice-flooded one included, are all accepted.
        for shard in 0..SHARDS {
            for k in 0..16 {
                let o = owner_in(&c, shard, &format!("workload-{k}-"));
                c.record(&o, "j1", 1000, 100)
                    .unwrap_or_else(|e| panic!("shard {shard}, key {k}: {e}"));
                assert!(holds(&c, shard, &o), "shard_of disagrees with record");
            }
        }
        // That room was exactly what the three floods left: the shard is now
        // full, and refuses rather than forgets.
        let late = owner_in(&c, home, "late-");
        let e = c.record(&late, "j1", 1000, 100).unwrap_err();
        assert!(e.to_string().contains("replay cache is full"), "{e}");
        // Once the flood's proofs expire, the flooder has its share again.
        c.record(&flood, "later", 2000, 1001).unwrap();
    }

    #[test]
    fn many_threads_never_accept_the_same_jti_twice() {
        let c = std::sync::Arc::new(ReplayCache::new(100_000));
        let o = owner("one key");
        let accepted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let c = c.clone();
                    let o = o.clone();
                    s.spawn(move || {
                        (0..1000)
                            .filter(|i| c.record(&o, &format!("j{i}"), 50, 0).is_ok())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(accepted, 1000);
    }
}
