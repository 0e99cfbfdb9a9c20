//! The keys' life in a keyring: rotation (a new active key), prepublication
//! and promotion, deprecation and removal. Each is one write under the
//! keyring's lock; a copy of a replicated keyring refuses them all.

use super::*;

impl Keyring {
    /// Rotates EdDSA: a new key with fresh OS-random material becomes active,
    /// and the previous active EdDSA key becomes inactive (it keeps verifying).
    /// Returns the new ID.
    ///
    /// This changes the keyring in memory only, and the new key signs at
    /// once: **save it** ([`Keyring::save`], or `save_wrapped`) right away, or
    /// a restart loads the old keys and every token the new key signed stops
    /// verifying. For a keyring in use, [`Keyring::prepublish`], save, then
    /// promote leaves no such window. (`wid keyring rotate` and the
    /// replicated keyring save for you.)
    pub fn rotate(&self, now: i64) -> Result<KeyId> {
        self.rotate_alg(Algorithm::EdDsa, now)
    }

    /// Rotates the keys of `alg`: a new key (fresh material; a 2048-bit RSA key
    /// for RS256) becomes the active key of `alg`, and the previous one becomes
    /// inactive. Keys of other algorithms are untouched. Returns the new ID.
    /// In memory only, as [`Keyring::rotate`]: save the keyring afterwards.
    pub fn rotate_alg(&self, alg: Algorithm, now: i64) -> Result<KeyId> {
        self.rotate_to(RootKey::generate_for(alg, KeyState::Inactive, now)?, now)
    }

    /// Rotates RS256 to a fresh RSA key of `size`.
    pub fn rotate_rsa(&self, size: RsaKeySize, now: i64) -> Result<KeyId> {
        self.rotate_to(RootKey::generate_rsa(size, KeyState::Inactive, now)?, now)
    }

    /// Rotates the keys of the (`purpose`, `alg`) pair: a new key of that
    /// purpose becomes the pair's active key, and the previous one becomes
    /// inactive. `rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, now)` makes
    /// the key WITs of ES256 are signed with. In memory only, as
    /// [`Keyring::rotate`]: save the keyring afterwards.
    pub fn rotate_purpose(&self, purpose: KeyPurpose, alg: Algorithm, now: i64) -> Result<KeyId> {
        self.rotate_to(
            RootKey::generate_for(alg, KeyState::Inactive, now)?.with_purpose(purpose),
            now,
        )
    }

    /// [`Keyring::rotate_purpose`] for RS256 with a fresh RSA key of `size`.
    pub fn rotate_rsa_purpose(
        &self,
        purpose: KeyPurpose,
        size: RsaKeySize,
        now: i64,
    ) -> Result<KeyId> {
        self.rotate_to(
            RootKey::generate_rsa(size, KeyState::Inactive, now)?.with_purpose(purpose),
            now,
        )
    }

    fn rotate_to(&self, key: RootKey, now: i64) -> Result<KeyId> {
        self.refuse_if_replica()?;
        let id = key.id.clone();
        let entry = KeyEntry::from_root(&key)?;
        {
            let mut inner = self.write();
            inner.check_insert(&id, key.purpose, key.alg.into(), KeyState::Inactive)?;
            inner.put(
                entry,
                Meta {
                    state: KeyState::Inactive,
                    create_time: now,
                    publish_time: 0,
                    retired_time: 0,
                },
            );
            inner.activate(&id, now);
        }
        self.changed();
        Ok(id)
    }

    /// Adds a new EdDSA key that is published (in the JWKS, verifying) but does
    /// not sign until `publish_at`, when [`Keyring::promote_due`] makes it active.
    pub fn prepublish(&self, now: i64, publish_at: i64) -> Result<KeyId> {
        self.prepublish_alg(Algorithm::EdDsa, now, publish_at)
    }

    /// [`Keyring::prepublish`] for a key of `alg`; at `publish_at` it replaces
    /// the active key of `alg`.
    pub fn prepublish_alg(&self, alg: Algorithm, now: i64, publish_at: i64) -> Result<KeyId> {
        check_publish_at(now, publish_at)?;
        self.insert_prepublished(
            RootKey::generate_for(alg, KeyState::Prepublished, now)?,
            publish_at,
        )
    }

    /// [`Keyring::prepublish_alg`] for a key of `purpose`: at `publish_at` it
    /// replaces the active key of the (`purpose`, `alg`) pair.
    pub fn prepublish_purpose(
        &self,
        purpose: KeyPurpose,
        alg: Algorithm,
        now: i64,
        publish_at: i64,
    ) -> Result<KeyId> {
        check_publish_at(now, publish_at)?;
        self.insert_prepublished(
            RootKey::generate_for(alg, KeyState::Prepublished, now)?.with_purpose(purpose),
            publish_at,
        )
    }

    /// [`Keyring::prepublish_purpose`] for RS256 with a fresh RSA key of `size`.
    pub fn prepublish_rsa_purpose(
        &self,
        purpose: KeyPurpose,
        size: RsaKeySize,
        now: i64,
        publish_at: i64,
    ) -> Result<KeyId> {
        check_publish_at(now, publish_at)?;
        self.insert_prepublished(
            RootKey::generate_rsa(size, KeyState::Prepublished, now)?.with_purpose(purpose),
            publish_at,
        )
    }

    /// [`Keyring::prepublish_alg`] for RS256 with a fresh RSA key of `size`.
    pub fn prepublish_rsa(&self, size: RsaKeySize, now: i64, publish_at: i64) -> Result<KeyId> {
        check_publish_at(now, publish_at)?;
        self.insert_prepublished(
            RootKey::generate_rsa(size, KeyState::Prepublished, now)?,
            publish_at,
        )
    }

    fn insert_prepublished(&self, key: RootKey, publish_at: i64) -> Result<KeyId> {
        let key = key.with_publish_time(publish_at);
        let id = key.id.clone();
        self.insert(key)?;
        Ok(id)
    }

    /// Makes `kid` the active key of its (purpose, algorithm) pair now (a
    /// prepublished key early, or an inactive one back); the previous active
    /// key of that pair becomes inactive.
    pub fn promote(&self, kid: &str, now: i64) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            let slot = inner.slot(kid)?;
            match slot.meta.state {
                KeyState::Active => return Ok(()),
                KeyState::Deprecated => {
                    return Err(Error::invalid(
                        "Keyring",
                        "state",
                        format!("cannot promote {kid}: it is deprecated"),
                    ));
                }
                KeyState::Prepublished | KeyState::Inactive => {}
            }
            if slot.entry.signing_algorithm().is_none() {
                return Err(Error::verify_only(slot.entry.algorithm(), kid));
            }
            if !slot.entry.can_sign() {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!("cannot promote {kid}: it is a verify-only key without material"),
                ));
            }
            let id = slot.entry.id.clone();
            inner.activate(&id, now);
        }
        self.changed();
        Ok(())
    }

    /// Promotes every prepublished key whose publish time has come, earliest
    /// first (ties by ID), so the latest due key of each (purpose, algorithm)
    /// pair ends up
    /// active. Returns the IDs promoted, in order. The copy of a replicated
    /// keyring promotes nothing (its source's rotator does).
    pub fn promote_due(&self, now: i64) -> Vec<KeyId> {
        if self.refuse_if_replica().is_err() {
            return Vec::new();
        }
        let promoted = {
            let mut inner = self.write();
            let mut due: Vec<(i64, KeyId)> = inner
                .keys
                .values()
                // Prepublished keys always hold their secret (insertion
                // refuses a verify-only one), so each can sign once active.
                .filter(|s| s.meta.state == KeyState::Prepublished && s.meta.publish_time <= now)
                .map(|s| (s.meta.publish_time, s.entry.id.clone()))
                .collect();
            due.sort();
            for (_, id) in &due {
                inner.activate(id, now);
            }
            due.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
        };
        if !promoted.is_empty() {
            self.changed();
        }
        promoted
    }

    /// Deprecates `kid`: it no longer verifies and leaves the JWKS. An active
    /// key cannot be deprecated (rotate first).
    pub fn deprecate(&self, kid: &str, now: i64) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            let active = inner.is_active(kid);
            let slot = inner.slot(kid)?;
            if active {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!("cannot deprecate {kid}: it is the active key; rotate first"),
                ));
            }
            let id = slot.entry.id.clone();
            if let Some(slot) = inner.keys.get_mut(&id) {
                if slot.meta.retired_time == 0 {
                    slot.meta.retired_time = now;
                }
                slot.meta.state = KeyState::Deprecated;
            }
        }
        self.changed();
        Ok(())
    }

    /// Removes `kid`. The active key cannot be removed (rotate first).
    pub fn remove(&self, kid: &str) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            inner.slot(kid)?;
            if inner.is_active(kid) {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!("cannot remove {kid}: it is the active key; rotate first"),
                ));
            }
            inner.keys.remove(kid);
        }
        self.changed();
        Ok(())
    }
}
