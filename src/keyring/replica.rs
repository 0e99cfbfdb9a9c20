//! A keyring that follows keys kept elsewhere (an etcd prefix, see
//! `crate::EtcdKeyring`): the whole set is replaced at once with what the
//! source holds, reusing the derived key pairs of keys it already has, so a
//! state change costs a map update and never re-derives (or re-unwraps) a
//! key.

use std::collections::HashMap;
use std::sync::Arc;

use super::keystore::KEYSTORE_PLAINTEXT_VERSION;
use super::stored_key::{StoredKey, entry_of, purpose_of, stored_key};
use super::{
    Algorithm, Inner, KeyId, KeyMaterial, KeyPurpose, KeyState, Keyring, Meta, Slot, pair_index,
};
use crate::error::{Error, Result};

fn bad(field: &str, why: String) -> Error {
    Error::invalid("replicated keyring", field, why)
}

fn known_id(k: &StoredKey) -> Result<KeyId> {
    KeyId::new(&k.id).map_err(|e| bad("ID", e.to_string()))
}

fn known_meta(k: &StoredKey) -> Result<Meta> {
    let state = KeyState::from_name(&k.state).ok_or_else(|| {
        bad(
            "State",
            format!(
                "unknown key state {:?} for key {:?}",
                crate::error::truncate_for_message(&k.state),
                crate::error::truncate_for_message(&k.id)
            ),
        )
    })?;
    Ok(Meta {
        state,
        create_time: k.create_time,
        publish_time: k.publish_time,
        retired_time: k.retired_time,
    })
}

/// A stored key's purpose (`None` for a value no purpose has).
fn stored_purpose(k: &StoredKey) -> Option<KeyPurpose> {
    purpose_of(k.purpose.as_deref()).ok()
}

/// One key of a replicated keyring, as its source stores it.
pub(crate) struct ReplicaKey {
    /// The stored key: state and times always; the material in plaintext
    /// only when `known` is false.
    pub(crate) stored: StoredKey,
    /// The keyring already holds this key with this material (the source's
    /// wrapped bytes did not change): only its state and times are taken.
    pub(crate) known: bool,
}

impl Keyring {
    /// Replaces every key with `keys`, all at once: a key not among them is
    /// removed, a known one keeps its key pair and takes the stored state and
    /// times, a new one is built (and checked: its material must make its
    /// stored public key). A key that cannot be used (an unknown state, a
    /// public key its material does not make, a signing state without
    /// material, a known key this keyring does not hold, a duplicate) is left
    /// out and named in the returned problems, so one bad record never
    /// freezes the rest. Two active keys of one algorithm are an error and
    /// leave the keyring as it was: which of them signs is not ours to pick.
    pub(crate) fn replace_with_replica(&self, keys: &[ReplicaKey]) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        // Build the new entries outside the lock; derivation is the costly part.
        let mut fresh = HashMap::new();
        let mut metas = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let built = if k.known {
                known_id(&k.stored).and_then(|id| Ok((id, known_meta(&k.stored)?)))
            } else {
                entry_of(KEYSTORE_PLAINTEXT_VERSION, i, &k.stored).map(|(entry, meta)| {
                    let id = entry.id.clone();
                    fresh.insert(id.clone(), entry);
                    (id, meta)
                })
            };
            match built {
                Ok((id, meta)) => metas.push((id, meta, &k.stored, k.known)),
                Err(e) => problems.push(format!(
                    "key {:?} left out: {e}",
                    crate::error::truncate_for_message(&k.stored.id)
                )),
            }
        }
        {
            let mut inner = self.write();
            let mut next = Inner::default();
            for (id, mut meta, stored, known) in metas {
                // Deprecation is final: no change of ours brings a key back,
                // and the KEK does not authenticate a record's state, so a
                // record that does is not followed here.
                if inner
                    .keys
                    .get(&id)
                    .is_some_and(|s| s.meta.state == KeyState::Deprecated)
                    && meta.state != KeyState::Deprecated
                {
                    problems.push(format!(
                        "key {id} was deprecated and its record now says {}: it stays deprecated here",
                        meta.state.name()
                    ));
                    meta.state = KeyState::Deprecated;
                }
                // A key's purpose is fixed when it is made, and the KEK does
                // not authenticate it: a record that changes it (someone
                // with write access to etcd turning a WIT key into a bearer
                // key, say) is not followed. The key is kept as it was made,
                // deprecated (it verifies nothing, and deprecation is final
                // here, so a later record cannot bring it back either).
                if let Some(held) = inner.keys.get(&id) {
                    if stored_purpose(stored) != Some(held.entry.purpose)
                        && !next.keys.contains_key(&id)
                    {
                        problems.push(format!(
                            "key {id} is a {} key and its record names another purpose: a key's purpose is fixed when it is made, so it is deprecated here",
                            held.entry.purpose
                        ));
                        meta.state = KeyState::Deprecated;
                        let entry = Arc::clone(&held.entry);
                        next.keys.insert(id, Slot { entry, meta });
                        continue;
                    }
                }
                let entry = if known {
                    match inner.keys.get(&id) {
                        // Its purpose matched above (a held key of another
                        // purpose never gets here).
                        Some(slot) if stored.algorithm == slot.entry.algorithm().name() => {
                            Arc::clone(&slot.entry)
                        }
                        _ => {
                            problems.push(format!(
                                "key {id} left out: marked known, but this keyring does not hold it with that algorithm"
                            ));
                            continue;
                        }
                    }
                } else {
                    match fresh.remove(&id) {
                        Some(e) => Arc::new(e),
                        None => {
                            problems.push(format!("key {id} left out: listed twice"));
                            continue;
                        }
                    }
                };
                if next.keys.contains_key(&id) {
                    problems.push(format!("key {id} left out: listed twice"));
                    continue;
                }
                if meta.state.signs_or_will() && !entry.can_sign() {
                    problems.push(format!(
                        "key {id} left out: it is {} but has no private material",
                        meta.state.name()
                    ));
                    continue;
                }
                // `can_sign` above: an active key has a signing algorithm.
                let (Some(alg), KeyState::Active) = (entry.signing_algorithm(), meta.state) else {
                    next.keys.insert(id, Slot { entry, meta });
                    continue;
                };
                let pair = pair_index(entry.purpose, alg);
                {
                    if let Some(other) = &next.active[pair] {
                        return Err(Error::invalid(
                            "replicated keyring",
                            "State",
                            format!(
                                "two active {alg} {} keys: {other} and {id}; the previous keys stay until the source holds one",
                                entry.purpose
                            ),
                        ));
                    }
                    next.active[pair] = Some(id.clone());
                }
                next.keys.insert(id, Slot { entry, meta });
            }
            *inner = next;
        }
        self.changed();
        Ok(problems)
    }

    /// Whether this keyring holds `kid` with exactly this public key (so a
    /// record naming it can be taken as known).
    pub(crate) fn holds_with_public(&self, kid: &str, public: &[u8]) -> bool {
        self.read()
            .keys
            .get(kid)
            .is_some_and(|s| s.entry.public_key().to_bytes() == public)
    }

    /// The stored form of `kid` (plaintext material, if held), for a writer
    /// that wraps it and puts it into the source.
    pub(crate) fn stored_key_of(&self, kid: &str) -> Option<StoredKey> {
        let inner = self.read();
        let slot = inner.keys.get(kid)?;
        let material: Option<KeyMaterial> = slot.entry.secret.as_ref().map(|s| s.material.clone());
        Some(stored_key(&slot.info(), material.as_ref()))
    }

    /// Stops signing with the active key of the (`purpose`, `alg`) pair
    /// here (it becomes inactive in this process only): a replica cut off
    /// from its source past the key's planned end must not go on signing
    /// with a key its source may long have replaced. `false` when no key of
    /// that pair was active.
    pub(crate) fn stand_down(&self, purpose: KeyPurpose, alg: Algorithm, now: i64) -> bool {
        let stood_down = {
            let mut inner = self.write();
            match inner.active[pair_index(purpose, alg)].take() {
                Some(id) => {
                    if let Some(slot) = inner.keys.get_mut(&id) {
                        slot.meta.state = KeyState::Inactive;
                        slot.meta.retired_time = now;
                    }
                    true
                }
                None => false,
            }
        };
        if stood_down {
            self.changed();
        }
        stood_down
    }

    /// Marks this keyring as the copy of the replicated keyring at `source`:
    /// its own mutators refuse from now on.
    pub(crate) fn mark_replica_of(&self, source: &str) {
        let _ = self.shared.replica_of.set(source.to_string());
    }

    /// Marks this keyring as holding keys wrapped by the KEK (`kind`,
    /// `kek_id`): [`Keyring::save`] then refuses to write them in plaintext.
    pub(crate) fn mark_wrapped_by(&self, kind: &str, kek_id: &str) {
        *self
            .shared
            .wrapped_by
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((kind.to_string(), kek_id.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::RootKey;

    fn stored(kr: &Keyring, kid: &KeyId) -> StoredKey {
        kr.stored_key_of(kid.as_str()).unwrap()
    }

    fn with_state(mut k: StoredKey, state: KeyState, known: bool) -> ReplicaKey {
        k.state = state.name().into();
        if known {
            k.material = crate::codec::Bin::default();
        }
        ReplicaKey { stored: k, known }
    }

    fn entry_ptr(kr: &Keyring, kid: &KeyId) -> *const super::super::KeyEntry {
        Arc::as_ptr(&kr.read().keys.get(kid).unwrap().entry)
    }

    #[test]
    fn a_record_that_changes_a_keys_purpose_is_not_followed() {
        // Someone who can write etcd (but has no KEK) drops `Purpose` from a
        // WIT key's record: the copy must never publish the key as a bearer
        // key, now or at any later listing.
        let now = 1_700_000_000;
        let source = Keyring::new();
        let wit = source
            .rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, now)
            .unwrap();
        let replica = Keyring::new();
        replica
            .replace_with_replica(&[with_state(stored(&source, &wit), KeyState::Active, false)])
            .unwrap();
        assert_eq!(
            replica.active_id_for_purpose(KeyPurpose::Wit, Algorithm::Es256),
            Some(wit.clone())
        );
        let mut flipped = stored(&source, &wit);
        flipped.purpose = None;
        for known in [false, true, false] {
            let problems = replica
                .replace_with_replica(&[with_state(flipped.clone(), KeyState::Active, known)])
                .unwrap();
            assert!(
                problems.iter().any(|p| p.contains("purpose is fixed")),
                "{problems:?}"
            );
            let info = replica.key_info(wit.as_str()).unwrap();
            assert_eq!(
                (info.purpose, info.state),
                (KeyPurpose::Wit, KeyState::Deprecated)
            );
            assert!(replica.jwks().keys.is_empty(), "published as a bearer key");
            assert!(replica.active_id_for(Algorithm::Es256).is_none());
        }
        // The record put back as it was: deprecation is final here.
        replica
            .replace_with_replica(&[with_state(stored(&source, &wit), KeyState::Active, false)])
            .unwrap();
        assert_eq!(
            replica.key_info(wit.as_str()).unwrap().state,
            KeyState::Deprecated
        );
    }

    #[test]
    fn a_replica_takes_states_from_the_source_and_reuses_known_keys() {
        let now = 1_700_000_000;
        let source = Keyring::new();
        let a = source.rotate(now).unwrap();
        let b = source.rotate_alg(Algorithm::Es256, now).unwrap();
        let replica = Keyring::new();
        replica
            .replace_with_replica(&[
                with_state(stored(&source, &a), KeyState::Active, false),
                with_state(stored(&source, &b), KeyState::Active, false),
            ])
            .unwrap();
        assert_eq!(replica.active_id(), Some(a.clone()));
        assert_eq!(replica.active_id_for(Algorithm::Es256), Some(b.clone()));
        let before = entry_ptr(&replica, &a);
        // A state change of a known key: the key pair is kept, not rebuilt.
        replica
            .replace_with_replica(&[
                with_state(stored(&source, &a), KeyState::Inactive, true),
                with_state(stored(&source, &b), KeyState::Active, true),
            ])
            .unwrap();
        assert_eq!(entry_ptr(&replica, &a), before);
        assert_eq!(replica.active_id(), None);
        assert_eq!(
            replica.key_info(a.as_str()).unwrap().state,
            KeyState::Inactive
        );
        // A key the source no longer holds leaves.
        replica
            .replace_with_replica(&[with_state(stored(&source, &b), KeyState::Active, true)])
            .unwrap();
        assert!(replica.key_info(a.as_str()).is_none());
        assert_eq!(replica.len(), 1);
    }

    #[test]
    fn a_replica_refuses_what_is_not_a_keyring_and_stays_as_it_was() {
        let now = 1_700_000_000;
        let source = Keyring::new();
        let a = source.rotate(now).unwrap();
        let b = source.rotate(now + 1).unwrap();
        let replica = Keyring::new();
        replica
            .replace_with_replica(&[with_state(stored(&source, &a), KeyState::Active, false)])
            .unwrap();
        // Two active EdDSA keys.
        let e = replica
            .replace_with_replica(&[
                with_state(stored(&source, &a), KeyState::Active, true),
                with_state(stored(&source, &b), KeyState::Active, false),
            ])
            .unwrap_err();
        assert!(
            e.to_string().contains("two active EdDSA bearer keys"),
            "{e}"
        );
        assert_eq!(replica.active_id(), Some(a.clone()));
        assert_eq!(replica.len(), 1);
        // A bad key is left out and named; the others are taken.
        let mut forged = stored(&source, &b);
        forged.public_key = stored(&source, &a).public_key;
        let problems = replica
            .replace_with_replica(&[
                with_state(stored(&source, &a), KeyState::Active, true),
                with_state(forged, KeyState::Inactive, false),
                with_state(stored(&source, &b), KeyState::Active, true),
            ])
            .unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("PublicKey"), "{problems:?}");
        assert!(problems[1].contains("does not hold it"), "{problems:?}");
        assert_eq!(replica.active_id(), Some(a.clone()));
        assert_eq!(replica.len(), 1);
        let mut junk = with_state(stored(&source, &a), KeyState::Active, true);
        junk.stored.state = "x".into();
        let problems = replica
            .replace_with_replica(&[
                junk,
                with_state(stored(&source, &b), KeyState::Inactive, false),
            ])
            .unwrap();
        assert!(problems[0].contains("unknown key state"), "{problems:?}");
        assert_eq!(replica.active_id(), None);
        assert_eq!(replica.keys().len(), 1);
    }

    #[test]
    fn a_deprecated_key_never_comes_back() {
        let now = 1_700_000_000;
        let source = Keyring::new();
        let a = source.rotate(now).unwrap();
        let b = source.rotate(now + 1).unwrap();
        let replica = Keyring::new();
        replica
            .replace_with_replica(&[
                with_state(stored(&source, &a), KeyState::Deprecated, false),
                with_state(stored(&source, &b), KeyState::Active, false),
            ])
            .unwrap();
        let problems = replica
            .replace_with_replica(&[
                with_state(stored(&source, &a), KeyState::Inactive, true),
                with_state(stored(&source, &b), KeyState::Active, true),
            ])
            .unwrap();
        assert!(problems[0].contains("stays deprecated"), "{problems:?}");
        assert!(replica.verifying_key(a.as_str()).is_none());
        assert_eq!(replica.active_id(), Some(b));
    }

    #[test]
    fn standing_down_stops_signing_until_the_source_says_otherwise() {
        let now = 1_700_000_000;
        let source =
            Keyring::from_keys([RootKey::generate(KeyState::Active, now).unwrap()]).unwrap();
        let a = source.active_id().unwrap();
        let replica = Keyring::new();
        replica
            .replace_with_replica(&[with_state(stored(&source, &a), KeyState::Active, false)])
            .unwrap();
        assert!(replica.stand_down(KeyPurpose::Bearer, Algorithm::EdDsa, now + 5));
        assert!(!replica.stand_down(KeyPurpose::Bearer, Algorithm::EdDsa, now + 5));
        assert_eq!(
            replica.active().unwrap_err().code(),
            crate::error::ResultCode::NoActiveKey
        );
        // It still verifies.
        assert!(replica.verifying_key(a.as_str()).is_some());
        replica
            .replace_with_replica(&[with_state(stored(&source, &a), KeyState::Active, true)])
            .unwrap();
        assert!(replica.active().is_ok());
    }
}
