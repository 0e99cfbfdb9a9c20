//! The `jti` replay cache: every accepted proof's `jti` is remembered until
//! the proof expires, so the same proof is accepted once. Sharded so that
//! threads checking different proofs rarely meet on a lock; bounded, and full
//! means "refuse", never "forget a proof that is still valid".

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

use crate::error::{Error, Result};

const SHARDS: usize = 16;

/// One shard: `jti` to the Unix second its proof expires.
type Shard = Mutex<HashMap<Box<str>, i64>>;

/// Remembered `jti`s, each until its proof's expiry (Unix seconds).
pub(crate) struct ReplayCache {
    shards: Box<[Shard]>,
    per_shard: usize,
    /// Picks a shard; keyed per process, so no one can aim proofs at one shard.
    pick: RandomState,
}

impl ReplayCache {
    /// A cache for at least `capacity` unexpired proofs.
    pub(crate) fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            pick: RandomState::new(),
        }
    }

    /// Records `jti` as used until `expires`; `ProofReplayed` when it is
    /// already recorded and not expired at `now`, or when its shard is full
    /// of unexpired proofs.
    pub(crate) fn record(&self, jti: &str, expires: i64, now: i64) -> Result<()> {
        let i = (self.pick.hash_one(jti) as usize) % SHARDS;
        let mut shard = self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(&until) = shard.get(jti) {
            if until >= now {
                return Err(Error::ProofReplayed {
                    reason: format!(
                        "jti {:?} was already used by a proof valid until {until}",
                        crate::error::truncate_for_message(jti)
                    ),
                });
            }
        }
        if shard.len() >= self.per_shard && !shard.contains_key(jti) {
            shard.retain(|_, until| *until >= now);
            if shard.len() >= self.per_shard {
                return Err(Error::ProofReplayed {
                    reason: format!(
                        "the replay cache is full ({} unexpired proofs in this shard): refusing the proof rather than forgetting one that is still valid; raise proof_replay_capacity or shorten proof lifetimes",
                        shard.len()
                    ),
                });
            }
        }
        shard.insert(jti.into(), expires);
        Ok(())
    }

    /// Unexpired entries at `now` (for tests and stats; walks every shard).
    pub(crate) fn len(&self, now: i64) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .values()
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

    #[test]
    fn a_jti_is_accepted_once_until_it_expires() {
        let c = ReplayCache::new(100);
        c.record("a", 110, 100).unwrap();
        let e = c.record("a", 110, 105).unwrap_err();
        assert_eq!(e.code(), ResultCode::ProofReplayed);
        assert!(e.to_string().contains("already used"), "{e}");
        // Past its expiry the proof itself is refused as expired; the cache may
        // then take the jti again.
        c.record("a", 130, 111).unwrap();
        assert_eq!(c.len(111), 1);
    }

    #[test]
    fn a_full_cache_refuses_instead_of_forgetting() {
        let c = ReplayCache::new(SHARDS); // one entry per shard
        let mut refused = 0;
        for i in 0..200 {
            if c.record(&format!("j{i}"), 1000, 100).is_err() {
                refused += 1;
            }
        }
        assert!(refused >= 200 - SHARDS, "{refused}");
        assert!(c.len(100) <= SHARDS);
        // Once they expire, room comes back.
        c.record("late", 2000, 1001).unwrap();
    }

    #[test]
    fn many_threads_never_accept_the_same_jti_twice() {
        let c = std::sync::Arc::new(ReplayCache::new(10_000));
        let accepted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let c = c.clone();
                    s.spawn(move || {
                        (0..1000)
                            .filter(|i| c.record(&format!("j{i}"), 50, 0).is_ok())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(accepted, 1000);
    }
}
