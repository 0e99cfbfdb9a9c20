//! The active keys as the signing path reads them: a snapshot that signing
//! threads load without writing to memory any other thread uses.
//!
//! Looking the active key up under the keyring's lock writes the lock's
//! reader count (taking and releasing the lock) and two reference counts of
//! the key (an `Arc` clone and its drop, for the key and for its secret) on
//! every signature: with two threads signing, those cache lines move from
//! core to core, and the secret key itself shares a line with its count. On
//! the 2-core host of BENCHMARKS.md the look-up took 37 ns on one thread and
//! 75 to 230 ns per call on two. Here the active keys are copied into a
//! [`Snapshot`] behind an [`ArcSwapOption`]: loading it writes only the
//! loading thread's own slot (arc-swap's debts), and the signer borrows the
//! key from it, so no reference count moves.
//!
//! Exactness, the same as the lock's: a snapshot is made under the read lock,
//! tagged with the generation read there (writers bump it with the write lock
//! held, so it is the generation of exactly the keys copied), and stored
//! before the lock is released; every write empties the cell with the write
//! lock held ([`ActiveCache::clear`] in `Keyring::write`). So a stored
//! snapshot is never older than the last change that returned, and it holds
//! no key the keyring has let go of: after a rotation, removal or drop of the
//! keyring the old keys are freed (and zeroized) as soon as no signature in
//! flight uses them. A signer also compares the snapshot's generation with the
//! keyring's, so a change that has begun sends it to the lock (where it waits
//! for the change, as before) instead of signing with the keys it replaces.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::{
    ActiveKey, Algorithm, Inner, KeyEntry, KeyPurpose, Keyring, PAIR_COUNT, Signing, pair_index,
};
use crate::error::{Error, Result};

/// The cell holding the current snapshot, if one was made since the last
/// change. On cache lines of its own (128 bytes: adjacent lines are fetched in
/// pairs), so the writes verifiers make to the keyring's lock word next to it
/// do not evict it from the signing cores.
#[repr(align(128))]
#[derive(Default)]
pub(super) struct ActiveCache(ArcSwapOption<Snapshot>);

/// The active key of each (purpose, algorithm) pair at one generation of the
/// keyring.
pub(super) struct Snapshot {
    generation: u64,
    active: [Option<ActiveKey>; PAIR_COUNT],
}

impl ActiveCache {
    /// Drops the snapshot: called with the write lock held, before any key
    /// changes.
    pub(super) fn clear(&self) {
        self.0.store(None);
    }
}

impl ActiveKey {
    /// `entry` ready to sign, or `None` if it cannot sign: no secret nor
    /// signer, or a verify-only algorithm (insertion refuses such an active
    /// key, so for an active key this is never `None`).
    fn of(entry: &Arc<KeyEntry>) -> Option<ActiveKey> {
        let alg = entry.signing_algorithm()?;
        let signing = match (&entry.secret, &entry.external) {
            (Some(secret), _) => Signing::Local(Arc::clone(secret)),
            (None, Some(external)) => Signing::External(Arc::clone(external)),
            (None, None) => return None,
        };
        Some(ActiveKey {
            entry: Arc::clone(entry),
            alg,
            signing,
        })
    }
}

impl Snapshot {
    /// The active keys of `inner`, read under its lock at `generation`.
    fn of(inner: &Inner, generation: u64) -> Snapshot {
        Snapshot {
            generation,
            active: std::array::from_fn(|i| {
                let id = inner.active[i].as_ref()?;
                ActiveKey::of(&inner.keys.get(id)?.entry)
            }),
        }
    }

    fn with<R>(
        &self,
        purpose: KeyPurpose,
        alg: Algorithm,
        f: impl FnOnce(&ActiveKey) -> Result<R>,
    ) -> Result<R> {
        match &self.active[pair_index(purpose, alg)] {
            Some(key) => f(key),
            None => Err(Error::NoActiveKey {
                algorithm: alg,
                purpose,
            }),
        }
    }
}

impl Keyring {
    /// Runs `f` with the active key of the (`purpose`, `alg`) pair (or fails
    /// with `NoActiveKey`),
    /// borrowed: while the keyring does not change, no lock is taken and no
    /// reference count is written. The key is the one active when this is
    /// called, exactly as [`Keyring::active_for`] would return it; `f` runs
    /// with no lock held.
    pub(crate) fn with_active<R>(
        &self,
        purpose: KeyPurpose,
        alg: Algorithm,
        f: impl FnOnce(&ActiveKey) -> Result<R>,
    ) -> Result<R> {
        {
            let current = self.shared.active_cache.0.load();
            if let Some(snapshot) = current.as_deref() {
                if snapshot.generation == self.generation() {
                    return snapshot.with(purpose, alg, f);
                }
            }
        }
        let fresh = {
            let inner = self.read();
            // Exact under the read lock: writers change it only with the
            // write lock held.
            let snapshot = Arc::new(Snapshot::of(&inner, self.generation()));
            // Stored before the lock is released, so no write can have
            // cleared the cell since this snapshot was made.
            self.shared
                .active_cache
                .0
                .store(Some(Arc::clone(&snapshot)));
            snapshot
        };
        fresh.with(purpose, alg, f)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier, Weak};

    use super::super::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};
    use super::*;

    fn key(id: &str, byte: u8, state: KeyState) -> RootKey {
        RootKey::new(
            KeyId::new(id).unwrap(),
            KeyMaterial::from_slice(&[byte; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            state,
            0,
        )
    }

    /// The entry of the active EdDSA key, weakly (so holding it keeps no key
    /// alive).
    fn active_entry(kr: &Keyring) -> Weak<KeyEntry> {
        kr.with_active(KeyPurpose::Bearer, Algorithm::EdDsa, |k| {
            Ok(Arc::downgrade(&k.entry))
        })
        .unwrap()
    }

    fn cached(kr: &Keyring) -> bool {
        kr.shared.active_cache.0.load().is_some()
    }

    #[test]
    fn signing_reuses_one_snapshot_until_the_keyring_changes() {
        let kr = Keyring::from_keys([key("a", 1, KeyState::Active)]).unwrap();
        assert!(!cached(&kr));
        let first = active_entry(&kr);
        let snapshot = kr.shared.active_cache.0.load_full().unwrap();
        active_entry(&kr);
        let again = kr.shared.active_cache.0.load_full().unwrap();
        assert!(
            Arc::ptr_eq(&snapshot, &again),
            "a second signature made a new snapshot"
        );
        // Any change empties the cell, even one that leaves the active key.
        kr.insert(key("b", 2, KeyState::Inactive)).unwrap();
        assert!(!cached(&kr));
        assert!(first.ptr_eq(&active_entry(&kr)));
        // A failed change too: the write lock was taken.
        assert!(kr.insert(key("b", 2, KeyState::Inactive)).is_err());
        assert!(!cached(&kr));
    }

    #[test]
    fn no_active_key_is_an_error_and_is_cached_as_such() {
        let kr = Keyring::from_keys([key("a", 1, KeyState::Inactive)]).unwrap();
        for _ in 0..2 {
            let err = kr
                .with_active(KeyPurpose::Bearer, Algorithm::EdDsa, |_| Ok(()))
                .unwrap_err();
            assert!(matches!(
                err,
                Error::NoActiveKey {
                    algorithm: Algorithm::EdDsa,
                    purpose: KeyPurpose::Bearer,
                }
            ));
        }
        kr.promote("a", 10).unwrap();
        assert_eq!(kr.active().unwrap().id().as_str(), "a");
    }

    #[test]
    fn a_snapshot_from_before_a_change_is_never_used() {
        // A snapshot put back after a change (as a racing refresh could, were
        // it stored after the lock is released) is refused by its generation.
        let kr = Keyring::from_keys([key("a", 1, KeyState::Active)]).unwrap();
        active_entry(&kr);
        let stale = kr.shared.active_cache.0.load_full().unwrap();
        let b = kr.rotate(10).unwrap();
        kr.shared.active_cache.0.store(Some(stale));
        assert_eq!(kr.active().unwrap().id(), &b);
        let mut token_kid = None;
        kr.with_active(KeyPurpose::Bearer, Algorithm::EdDsa, |k| {
            token_kid = Some(k.id().clone());
            Ok(())
        })
        .unwrap();
        assert_eq!(token_kid, Some(b));
    }

    #[test]
    fn the_snapshot_keeps_no_key_the_keyring_let_go_of() {
        let kr = Keyring::from_keys([key("a", 1, KeyState::Active)]).unwrap();
        let a = active_entry(&kr);
        kr.rotate(10).unwrap();
        kr.remove("a").unwrap();
        // No signature since: the snapshot that held `a` is gone all the same.
        assert!(a.upgrade().is_none(), "a removed key outlived its removal");

        let b = active_entry(&kr);
        assert!(cached(&kr));
        drop(kr);
        assert!(b.upgrade().is_none(), "a key outlived its keyring");
    }

    #[test]
    fn no_thread_signs_with_a_key_after_the_rotation_that_replaced_it_returns() {
        // Signers run flat out while the main thread rotates; after each
        // rotation returns it publishes the new key's number, and every
        // signature begun after a signer saw that number must be by that key
        // or a later one (never an earlier one).
        const ROTATIONS: usize = 200;
        let kr = Keyring::from_keys([key("k0", 0xff, KeyState::Active)]).unwrap();
        let published = AtomicUsize::new(0);
        let done = AtomicBool::new(false);
        let start = Barrier::new(3);
        // Key n is named "n" ("k0" is 0).
        let number = |id: &KeyId| -> usize { id.as_str().parse().unwrap_or(0) };
        std::thread::scope(|s| {
            let signers: Vec<_> = (0..2)
                .map(|_| {
                    let (kr, published, done, start) = (&kr, &published, &done, &start);
                    s.spawn(move || {
                        start.wait();
                        let mut signed = 0u64;
                        while !done.load(Ordering::Acquire) {
                            let seen = published.load(Ordering::Acquire);
                            let used = kr
                                .with_active(KeyPurpose::Bearer, Algorithm::EdDsa, |k| {
                                    k.sign(b"m")?;
                                    Ok(number(k.id()))
                                })
                                .unwrap();
                            assert!(
                                used >= seen,
                                "signed with key {used} after rotation to key {seen} returned"
                            );
                            signed += 1;
                        }
                        signed
                    })
                })
                .collect();
            start.wait();
            for n in 1..=ROTATIONS {
                let id = KeyId::new(&n.to_string()).unwrap();
                kr.insert(key(id.as_str(), n as u8, KeyState::Inactive))
                    .unwrap();
                kr.promote(id.as_str(), n as i64).unwrap();
                published.store(n, Ordering::Release);
                if n % 8 == 0 {
                    // Old keys leave, as they would in service.
                    kr.remove(&(n - 4).to_string()).unwrap();
                }
            }
            done.store(true, Ordering::Release);
            for signer in signers {
                assert!(signer.join().unwrap() > 0);
            }
        });
        assert_eq!(number(kr.active().unwrap().id()), ROTATIONS);
    }
}
