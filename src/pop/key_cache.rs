//! Checked workload keys, by their public key: a workload proves several
//! requests with one key, so its key is parsed and checked once, not per
//! proof.
//!
//! Memory is bounded by count, not by use: at most [`PROOF_KEYS`] keys (each
//! well under 2 KiB: the key, aws-lc-rs's parsed P-256 key or the Ed25519
//! point, and the JWK members that name it), first in, first out. Proof keys
//! get no Ed25519 table of multiples (220 KiB, which costs more to build than
//! it saves over a handful of proofs, and the manager makes a fresh key at
//! every renewal): only a key that has verified [`TABLE_AFTER`] proofs gets
//! one, and at most [`TABLED_KEYS`] keys hold one at a time. The whole cache
//! stays under about 4 MiB per verifier.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::keyring::{Checker, proof_key_checker};
use crate::model::ProofKey;

/// Keys remembered at once.
pub(crate) const PROOF_KEYS: usize = 1024;
/// Keys that may hold an Ed25519 table of multiples at once (220 KiB each).
pub(crate) const TABLED_KEYS: usize = 8;
/// Proofs a key verifies before it may get a table.
pub(crate) const TABLE_AFTER: u32 = 32;

/// One checked workload key.
pub(crate) struct CheckedKey {
    pub(crate) checker: Checker,
    /// Names the key exactly (every JWK member): the replay cache counts each
    /// key's proofs under it.
    pub(crate) owner: Arc<str>,
    /// Proofs looked up for this key, saturating.
    uses: AtomicU32,
}

/// A bounded map from a `cnf.jwk` to its checked key; first in, first out.
pub(crate) struct KeyCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Arc<str>, Entry>,
    order: VecDeque<Arc<str>>,
    /// Entries of `map` whose key holds a table.
    tabled: usize,
}

struct Entry {
    key: Arc<CheckedKey>,
    tabled: bool,
}

/// Every member, so two keys share an entry only when they are the same key.
fn cache_key(key: &ProofKey) -> Arc<str> {
    format!(
        "{}\n{}\n{}\n{}\n{}",
        key.kty, key.crv, key.alg, key.x, key.y
    )
    .into()
}

impl KeyCache {
    pub(crate) fn new(capacity: usize) -> KeyCache {
        KeyCache {
            inner: Mutex::new(Inner::default()),
            capacity: capacity.max(1),
        }
    }

    /// The checked key for `key`, checking it first if it is new; a key that
    /// is not a usable Ed25519 or P-256 public key is `ProofInvalid`.
    pub(crate) fn get(&self, key: &ProofKey) -> Result<Arc<CheckedKey>> {
        let id = cache_key(key);
        if let Some(found) = self.hit(&id) {
            return Ok(found);
        }
        let checked = Arc::new(CheckedKey {
            checker: proof_key_checker(key, "the WIT's cnf.jwk")
                .map_err(|reason| Error::ProofInvalid { reason })?,
            owner: Arc::clone(&id),
            uses: AtomicU32::new(1),
        });
        let mut inner = self.lock();
        if let Some(e) = inner.map.get(&id) {
            // Another thread checked it meanwhile: share one entry.
            return Ok(Arc::clone(&e.key));
        }
        while inner.map.len() >= self.capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if inner.map.remove(&old).is_some_and(|e| e.tabled) {
                inner.tabled -= 1;
            }
        }
        inner.map.insert(
            Arc::clone(&id),
            Entry {
                key: Arc::clone(&checked),
                tabled: false,
            },
        );
        inner.order.push_back(id);
        Ok(checked)
    }

    /// A known key, counted; it gets its table on its `TABLE_AFTER`th proof
    /// if fewer than `TABLED_KEYS` keys hold one.
    fn hit(&self, id: &Arc<str>) -> Option<Arc<CheckedKey>> {
        let mut inner = self.lock();
        let room = inner.tabled < TABLED_KEYS;
        let e = inner.map.get_mut(id)?;
        let key = Arc::clone(&e.key);
        let uses = key.uses.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if uses >= TABLE_AFTER && !e.tabled && room {
            e.tabled = true;
            inner.tabled += 1;
            drop(inner);
            // Built outside the lock; a concurrent proof of the same key
            // waits on the table's OnceLock or verifies without it.
            key.checker.build_table();
        }
        Some(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// (keys, keys holding a table): for tests of the bound.
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.map.len(), inner.tabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::Algorithm;
    use crate::pop::WorkloadKey;

    #[test]
    fn proof_keys_get_no_table_until_they_are_hot_and_few_ever_do() {
        let cache = KeyCache::new(PROOF_KEYS);
        // Many keys with a few proofs each (the manager's fresh key per
        // renewal): none gets a table.
        let keys: Vec<WorkloadKey> = (0..40)
            .map(|_| WorkloadKey::generate(Algorithm::EdDsa).unwrap())
            .collect();
        for k in &keys {
            for _ in 0..5 {
                cache.get(k.proof_key()).unwrap();
            }
        }
        assert_eq!(cache.sizes(), (40, 0));
        // Hot keys do, up to the bound.
        for k in &keys {
            for _ in 0..TABLE_AFTER {
                cache.get(k.proof_key()).unwrap();
            }
        }
        assert_eq!(cache.sizes(), (40, TABLED_KEYS));
        // Keys past the count bound push the oldest out, and their tables
        // with them.
        let small = KeyCache::new(4);
        for k in &keys[..12] {
            for _ in 0..TABLE_AFTER {
                small.get(k.proof_key()).unwrap();
            }
            let (n, tabled) = small.sizes();
            assert!(n <= 4 && tabled <= n, "{n} keys, {tabled} tables");
        }
    }

    #[test]
    fn one_key_is_one_entry_and_one_owner() {
        let cache = KeyCache::new(8);
        let a = WorkloadKey::generate(Algorithm::Es256).unwrap();
        let b = WorkloadKey::generate(Algorithm::Es256).unwrap();
        let a1 = cache.get(a.proof_key()).unwrap();
        let a2 = cache.get(a.proof_key()).unwrap();
        let b1 = cache.get(b.proof_key()).unwrap();
        assert!(Arc::ptr_eq(&a1, &a2));
        assert_eq!(a1.owner, a2.owner);
        assert_ne!(a1.owner, b1.owner);
        assert_eq!(cache.sizes(), (2, 0));
    }
}
