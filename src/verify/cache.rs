//! The verified-token cache: bounded by entry count, keyed by SHA-256 of the
//! token bytes.
//!
//! A hit skips parsing and the signature check only. The verifier still checks
//! the time claims against `now`, that the very key entry that verified the
//! token still verifies under its kid (a hit is not honoured once the key is
//! deprecated, removed, or replaced by other material under the same kid), and
//! the allocation's state. Eviction is first-in first-out.
//!
//! Memory per entry: the 32-byte key twice (map and eviction queue), the map
//! slot, and one shared `VerifiedIdentity` (its claims' strings: typically
//! 300–500 bytes for Nomad-sized IDs). Measured in BENCHMARKS.md.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

use super::VerifiedIdentity;
use crate::keyring::KeyRef;

/// A cached verification: what was verified, and by which key. The key is held
/// by identity (never by its kid string): a kid removed and re-inserted with
/// other material is another key, and its old entries are not honoured.
pub(crate) struct Cached {
    pub(crate) identity: VerifiedIdentity,
    pub(crate) key: KeyRef,
}

/// The cache key: SHA-256 of the token.
pub(crate) type TokenHash = [u8; 32];

pub(crate) fn token_hash(token: &[u8]) -> TokenHash {
    Sha256::digest(token).into()
}

/// The key is already a uniform hash: use its first 8 bytes as the map hash.
#[derive(Default)]
struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
}

struct Entries {
    map: HashMap<TokenHash, Arc<Cached>, BuildHasherDefault<PrehashedHasher>>,
    order: VecDeque<TokenHash>,
}

pub(crate) struct TokenCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

impl TokenCache {
    pub(crate) fn new(capacity: usize) -> TokenCache {
        TokenCache {
            capacity: capacity.max(1),
            entries: Mutex::new(Entries {
                map: HashMap::default(),
                order: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, key: &TokenHash) -> Option<Arc<Cached>> {
        self.lock().map.get(key).cloned()
    }

    pub(crate) fn insert(&self, key: TokenHash, value: Arc<Cached>) {
        let mut e = self.lock();
        if e.map.insert(key, value).is_some() {
            return;
        }
        e.order.push_back(key);
        while e.map.len() > self.capacity {
            match e.order.pop_front() {
                Some(old) => {
                    e.map.remove(&old);
                }
                None => break,
            }
        }
        // Entries removed by `remove` leave their key in the queue; compact
        // before the queue can outgrow the bound.
        if e.order.len() > 2 * self.capacity {
            let Entries { map, order } = &mut *e;
            order.retain(|k| map.contains_key(k));
        }
    }

    pub(crate) fn remove(&self, key: &TokenHash) {
        self.lock().map.remove(key);
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// (entries, queued keys): for tests of the bound.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let e = self.lock();
        (e.map.len(), e.order.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Claims;

    fn id() -> Arc<Cached> {
        Arc::new(Cached {
            identity: VerifiedIdentity {
                claims: Claims::default(),
                kid: crate::keyring::KeyId::new("k").unwrap(),
            },
            key: KeyRef::none(),
        })
    }

    #[test]
    fn stays_within_its_bound_under_inserts_and_removals() {
        let c = TokenCache::new(100);
        for i in 0..10_000u32 {
            let k = token_hash(&i.to_le_bytes());
            c.insert(k, id());
            if i % 3 == 0 {
                c.remove(&k);
            }
            let (entries, queued) = c.sizes();
            assert!(entries <= 100 && queued <= 201, "{i}: {entries} {queued}");
        }
        // Full, less the last insert (9,999 is a multiple of 3, so it was removed).
        assert_eq!(c.len(), 99);
        // FIFO: the newest survive.
        assert!(c.get(&token_hash(&9_998u32.to_le_bytes())).is_some());
        assert!(c.get(&token_hash(&5u32.to_le_bytes())).is_none());
    }
}
