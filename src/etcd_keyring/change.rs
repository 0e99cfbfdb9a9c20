//! Changes to a replicated keyring: rotate, prepublish, promote, deprecate,
//! revoke, remove, import and export, each planned on the local copy and
//! written as one etcd transaction (`commit.rs`).

use std::sync::Arc;

use super::commit::{Plan, Write, of_pair};
use super::view::{Digests, digest, sealed};
use super::{EtcdKeyring, Shared};
use crate::clock::rfc3339;
use crate::custody::RecordKey;
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{Algorithm, KeyId, KeyPurpose, KeyState, Keyring, RootKey, RsaKeySize};

impl Shared {
    pub(crate) fn lead_secs(&self) -> i64 {
        i64::try_from(self.lead_time().as_secs()).unwrap_or(i64::MAX)
            + i64::from(self.lead_time().subsec_nanos() > 0)
    }

    /// See [`EtcdKeyring::rotate`].
    pub(crate) fn rotate(
        &self,
        fresh: impl FnOnce(KeyState, i64) -> Result<RootKey>,
        purpose: KeyPurpose,
        alg: Algorithm,
        now: i64,
        lease: Option<i64>,
    ) -> Result<KeyId> {
        let plan = self.plan();
        if plan.active(purpose, alg).is_none() {
            return self.rotate_now_planned(&plan, fresh, (purpose, alg), now, lease, false);
        }
        if let Some(pending) = plan
            .keys
            .values()
            .map(|(_, k)| k)
            .find(|k| of_pair(k, purpose, alg) && k.state == KeyState::Prepublished.name())
        {
            return KeyId::new(&pending.id);
        }
        let publish_at = now.saturating_add(self.lead_secs());
        self.prepublish_planned(&plan, fresh, now, publish_at, lease)
    }

    /// See [`EtcdKeyring::rotate_now`]. With `cancel_pending`, the pair's
    /// prepublished keys are deprecated in the same transaction (they never
    /// signed): a key that replaces the active one at once must not itself
    /// be replaced, when their time comes, by a successor planned for the
    /// key it replaced.
    pub(crate) fn rotate_now_planned(
        &self,
        plan: &Plan,
        fresh: impl FnOnce(KeyState, i64) -> Result<RootKey>,
        (purpose, alg): (KeyPurpose, Algorithm),
        now: i64,
        lease: Option<i64>,
        cancel_pending: bool,
    ) -> Result<KeyId> {
        let key = fresh(KeyState::Active, now)?.with_purpose(purpose);
        let id = key.id().clone();
        let mut writes = Vec::new();
        writes.extend(plan.retire_active(purpose, alg, now));
        let mut cancelled = Vec::new();
        if cancel_pending {
            for k in plan.keys.values().map(|(_, k)| k) {
                if of_pair(k, purpose, alg) && k.state == KeyState::Prepublished.name() {
                    let mut gone = k.clone();
                    gone.state = KeyState::Deprecated.name().into();
                    gone.retired_time = now;
                    cancelled.push(gone.id.clone());
                    writes.push(Write::Update(gone));
                }
            }
        }
        writes.push(Write::Create(self.new_record(&key)?));
        let mut what = format!("rotating {alg} {purpose} to {id} now");
        if !cancelled.is_empty() {
            what.push_str(&format!(
                ", cancelling the prepublished {}",
                cancelled.join(", ")
            ));
        }
        self.commit(plan, writes, lease, &what)?;
        for kid in &cancelled {
            log::info!(
                "replicated keyring at {}: prepublished key {kid} cancelled (deprecated before it signed): {id} replaced the active {alg} {purpose} key at once",
                self.prefix
            );
        }
        Ok(id)
    }

    pub(crate) fn prepublish_planned(
        &self,
        plan: &Plan,
        fresh: impl FnOnce(KeyState, i64) -> Result<RootKey>,
        now: i64,
        publish_at: i64,
        lease: Option<i64>,
    ) -> Result<KeyId> {
        let earliest = now.saturating_add(self.lead_secs());
        if publish_at < earliest {
            return Err(Error::invalid(
                "EtcdKeyring",
                "publish_at",
                format!(
                    "{} is less than the lead time ({}) after now ({}): every watcher must hold a key before it signs; expected {} or later",
                    rfc3339(publish_at),
                    crate::clock::span(self.lead_time()),
                    rfc3339(now),
                    rfc3339(earliest)
                ),
            ));
        }
        let key = fresh(KeyState::Prepublished, now)?.with_publish_time(publish_at);
        let id = key.id().clone();
        let alg = key.algorithm();
        let purpose = key.purpose();
        self.commit(
            plan,
            vec![Write::Create(self.new_record(&key)?)],
            lease,
            &format!(
                "prepublishing {alg} {purpose} key {id}, signing from {}",
                rfc3339(publish_at)
            ),
        )?;
        Ok(id)
    }

    pub(crate) fn promote_planned(
        &self,
        plan: &Plan,
        kid: &str,
        now: i64,
        lease: Option<i64>,
    ) -> Result<()> {
        let k = plan.get(kid)?;
        let state = KeyState::from_name(&k.state).unwrap_or(KeyState::Deprecated);
        match state {
            KeyState::Active => return Ok(()),
            KeyState::Deprecated => {
                return Err(Error::invalid(
                    "EtcdKeyring",
                    "state",
                    format!("cannot promote {kid}: it is deprecated"),
                ));
            }
            KeyState::Prepublished => {
                // Both clocks: the stored creation time by the caller's `now`,
                // and this copy's own monotonic clock since the key first
                // appeared here (so a caller's clock, or a key created just
                // before a second boundary, cannot shorten the lead). A key
                // published two lead times ago by the stored clock has been
                // in etcd for a lead time whatever the clocks' skew within
                // one lead time: a process that just opened the keyring need
                // not wait another lead time to promote it.
                let since = k.create_time.saturating_add(self.lead_secs());
                let long_ago = now >= since.saturating_add(self.lead_secs());
                let seen_for = self.lock_view().first_seen.get(kid).map(|t| t.elapsed());
                if now < since || (!long_ago && seen_for.is_none_or(|d| d < self.lead_time())) {
                    return Err(Error::invalid(
                        "EtcdKeyring",
                        "state",
                        format!(
                            "cannot promote {kid} yet: it was published at {} (seen here for {:?}) and may sign only after the lead time ({}), when every watcher holds it; promote it at {} or later",
                            rfc3339(k.create_time),
                            seen_for.unwrap_or_default(),
                            crate::clock::span(self.lead_time()),
                            rfc3339(since)
                        ),
                    ));
                }
            }
            KeyState::Inactive => {}
        }
        if k.wrapped.is_none() && k.material.as_slice().is_empty() {
            return Err(Error::invalid(
                "EtcdKeyring",
                "state",
                format!("cannot promote {kid}: it is a verify-only key without material"),
            ));
        }
        let alg = Algorithm::from_name(&k.algorithm).ok_or_else(|| {
            Error::invalid(
                "EtcdKeyring",
                "Algorithm",
                format!(
                    "cannot promote {kid}: its record names the unknown algorithm {:?}",
                    truncate_for_message(&k.algorithm)
                ),
            )
        })?;
        let purpose = crate::keyring::purpose_of(k.purpose.as_deref()).map_err(|why| {
            Error::invalid(
                "EtcdKeyring",
                "Purpose",
                format!("cannot promote {kid}: {why}"),
            )
        })?;
        let mut writes = Vec::new();
        writes.extend(plan.retire_active(purpose, alg, now));
        let mut new = k.clone();
        new.state = KeyState::Active.name().into();
        new.retired_time = 0;
        writes.push(Write::Update(new));
        self.commit(plan, writes, lease, &format!("promoting {kid}"))
            .map(drop)
    }

    pub(crate) fn remove_planned(&self, plan: &Plan, kid: &str, lease: Option<i64>) -> Result<()> {
        let k = plan.get(kid)?;
        if k.state == KeyState::Active.name() {
            return Err(Error::invalid(
                "EtcdKeyring",
                "state",
                format!("cannot remove {kid}: it is the active key; rotate first"),
            ));
        }
        self.commit(
            plan,
            vec![Write::Delete(kid.to_string())],
            lease,
            &format!("removing {kid}"),
        )
        .map(drop)
    }

    pub(crate) fn deprecate_planned(
        &self,
        plan: &Plan,
        kid: &str,
        now: i64,
        lease: Option<i64>,
    ) -> Result<()> {
        let k = plan.get(kid)?;
        if k.state == KeyState::Active.name() {
            return Err(Error::invalid(
                "EtcdKeyring",
                "state",
                format!("cannot deprecate {kid}: it is the active key; rotate first"),
            ));
        }
        let mut new = k.clone();
        if new.retired_time == 0 {
            new.retired_time = now;
        }
        new.state = KeyState::Deprecated.name().into();
        self.commit(
            plan,
            vec![Write::Update(new)],
            lease,
            &format!("deprecating {kid}"),
        )
        .map(drop)
    }
}

fn generator(purpose: KeyPurpose, alg: Algorithm) -> impl FnOnce(KeyState, i64) -> Result<RootKey> {
    move |state, now| {
        crate::error::Error::unless_purpose_allows(purpose, alg, "a new key")?;
        Ok(RootKey::generate_for(alg, state, now)?.with_purpose(purpose))
    }
}

impl EtcdKeyring {
    /// Rotates the keys of `alg` the way a replicated keyring must: with no
    /// active key of `alg`, a new key is active at once (nothing signs yet);
    /// otherwise a successor is prepublished now and becomes active after the
    /// lead time ([`EtcdKeyring::lead_time`]), when the rotator (or
    /// [`EtcdKeyring::promote_due`]) promotes it, so every watcher holds it
    /// before its first token. A successor already pending is returned as is.
    /// Returns the new (or pending) key's ID. `KeyringConflict` when another
    /// writer changed the keys first (nothing was written; call again).
    pub fn rotate(&self, alg: Algorithm, now: i64) -> Result<KeyId> {
        self.rotate_purpose(KeyPurpose::Bearer, alg, now)
    }

    /// [`EtcdKeyring::rotate`] for the keys of the (`purpose`, `alg`) pair:
    /// `KeyPurpose::Wit` makes the keys WITs are signed with.
    pub fn rotate_purpose(&self, purpose: KeyPurpose, alg: Algorithm, now: i64) -> Result<KeyId> {
        self.shared()
            .rotate(generator(purpose, alg), purpose, alg, now, None)
    }

    /// [`EtcdKeyring::rotate`] for RS256 with an RSA key of `size`.
    pub fn rotate_rsa(&self, size: RsaKeySize, now: i64) -> Result<KeyId> {
        self.rotate_rsa_purpose(KeyPurpose::Bearer, size, now)
    }

    /// [`EtcdKeyring::rotate_purpose`] for RS256 with an RSA key of `size`.
    pub fn rotate_rsa_purpose(
        &self,
        purpose: KeyPurpose,
        size: RsaKeySize,
        now: i64,
    ) -> Result<KeyId> {
        self.shared().rotate(
            move |state, now| Ok(RootKey::generate_rsa(size, state, now)?.with_purpose(purpose)),
            purpose,
            Algorithm::Rs256,
            now,
            None,
        )
    }

    /// Replaces the active key of `alg` at once (one transaction: the new key
    /// active, the old one inactive): for a first key, or to take a
    /// compromised key out of signing now. Other processes sign with the new
    /// key as soon as the watch brings it (well under a second on a healthy
    /// cluster); a verifier that has not seen it yet waits for it (its key
    /// wait, 1 s by default). A successor of the replaced key that was still
    /// prepublished is cancelled in the same transaction (deprecated: it
    /// never signed), so it never takes over from the new key when its time
    /// comes. Racing writers: one wins, the others get `KeyringConflict`.
    pub fn rotate_now(&self, alg: Algorithm, now: i64) -> Result<KeyId> {
        self.rotate_now_purpose(KeyPurpose::Bearer, alg, now)
    }

    /// [`EtcdKeyring::rotate_now`] for the (`purpose`, `alg`) pair.
    pub fn rotate_now_purpose(
        &self,
        purpose: KeyPurpose,
        alg: Algorithm,
        now: i64,
    ) -> Result<KeyId> {
        let s = self.shared();
        let plan = s.plan();
        s.rotate_now_planned(
            &plan,
            generator(purpose, alg),
            (purpose, alg),
            now,
            None,
            true,
        )
    }

    /// [`EtcdKeyring::rotate_now`] fenced by an etcd lease: the change holds
    /// only while the `rotator` key is held with `lease` (for a caller that
    /// runs its own election on that key; [`super::Rotator`] fences every
    /// change this way). `KeyringConflict` when the lease no longer holds it.
    pub fn rotate_now_fenced(&self, alg: Algorithm, now: i64, lease: i64) -> Result<KeyId> {
        let s = self.shared();
        let plan = s.plan();
        s.rotate_now_planned(
            &plan,
            generator(KeyPurpose::Bearer, alg),
            (KeyPurpose::Bearer, alg),
            now,
            Some(lease),
            true,
        )
    }

    /// Adds a new key of `alg` that becomes active at `publish_at`, which
    /// must be at least the lead time after `now` (`InvalidArgument`
    /// otherwise).
    pub fn prepublish(&self, alg: Algorithm, now: i64, publish_at: i64) -> Result<KeyId> {
        self.prepublish_purpose(KeyPurpose::Bearer, alg, now, publish_at)
    }

    /// [`EtcdKeyring::prepublish`] for the (`purpose`, `alg`) pair.
    pub fn prepublish_purpose(
        &self,
        purpose: KeyPurpose,
        alg: Algorithm,
        now: i64,
        publish_at: i64,
    ) -> Result<KeyId> {
        let s = self.shared();
        let plan = s.plan();
        s.prepublish_planned(&plan, generator(purpose, alg), now, publish_at, None)
    }

    /// Makes `kid` the active key of its (purpose, algorithm) pair (the previous active key
    /// becomes inactive), in one transaction. A prepublished key may be
    /// promoted only once the lead time has passed since it was published.
    pub fn promote(&self, kid: &str, now: i64) -> Result<()> {
        let s = self.shared();
        let plan = s.plan();
        s.promote_planned(&plan, kid, now, None)
    }

    /// Promotes every prepublished key whose publish time has come (earliest
    /// first, each its own transaction); returns the IDs promoted.
    pub fn promote_due(&self, now: i64) -> Result<Vec<KeyId>> {
        let s = self.shared();
        let mut done = Vec::new();
        loop {
            let plan = s.plan();
            let mut due: Vec<(i64, String)> = plan
                .keys
                .values()
                .map(|(_, k)| k)
                .filter(|k| {
                    k.state == KeyState::Prepublished.name()
                        && k.publish_time <= now
                        && !done.iter().any(|d: &KeyId| d.as_str() == k.id)
                })
                .map(|k| (k.publish_time, k.id.clone()))
                .collect();
            due.sort();
            let Some((_, kid)) = due.into_iter().next() else {
                return Ok(done);
            };
            s.promote_planned(&plan, &kid, now, None)?;
            done.push(KeyId::new(&kid)?);
        }
    }

    /// Deprecates `kid` (it leaves the JWKS and stops verifying everywhere).
    /// The active key cannot be deprecated.
    pub fn deprecate(&self, kid: &str, now: i64) -> Result<()> {
        let s = self.shared();
        let plan = s.plan();
        s.deprecate_planned(&plan, kid, now, None)
    }

    /// Revokes `kid` (a compromised key) in one transaction: it is
    /// deprecated at once (out of every JWKS, refused by every verifier fed
    /// by this keyring or its watch), and if it was the active key of its
    /// pair, a new key of the pair is made active in the same transaction
    /// (the pair's prepublished successors are cancelled: they were planned
    /// by whoever may hold the compromised key's secrets). Returns the new
    /// key's ID when one replaced it. A key already deprecated is left as
    /// it is (`Ok(None)`).
    pub fn revoke(&self, kid: &str, now: i64) -> Result<Option<KeyId>> {
        let s = self.shared();
        let plan = s.plan();
        let k = plan.get(kid)?.clone();
        let state = KeyState::from_name(&k.state).unwrap_or(KeyState::Deprecated);
        if state == KeyState::Deprecated {
            return Ok(None);
        }
        let mut gone = k.clone();
        gone.state = KeyState::Deprecated.name().into();
        if gone.retired_time == 0 {
            gone.retired_time = now;
        }
        let mut writes = vec![Write::Update(gone)];
        let mut replacement = None;
        if state == KeyState::Active {
            let alg = Algorithm::from_name(&k.algorithm).ok_or_else(|| {
                Error::invalid(
                    "EtcdKeyring",
                    "Algorithm",
                    format!(
                        "cannot replace {kid}: its record names the unknown algorithm {:?}",
                        truncate_for_message(&k.algorithm)
                    ),
                )
            })?;
            let purpose = crate::keyring::purpose_of(k.purpose.as_deref())
                .map_err(|why| Error::invalid("EtcdKeyring", "Purpose", why))?;
            for p in plan.keys.values().map(|(_, k)| k) {
                if of_pair(p, purpose, alg) && p.state == KeyState::Prepublished.name() {
                    let mut cancelled = p.clone();
                    cancelled.state = KeyState::Deprecated.name().into();
                    cancelled.retired_time = now;
                    writes.push(Write::Update(cancelled));
                }
            }
            let fresh = generator(purpose, alg)(KeyState::Active, now)?;
            replacement = Some(fresh.id().clone());
            writes.push(Write::Create(s.new_record(&fresh)?));
        }
        let what = match &replacement {
            Some(new) => format!("revoking {kid}, replaced at once by {new}"),
            None => format!("revoking {kid}"),
        };
        s.commit(&plan, writes, None, &what)?;
        log::warn!("replicated keyring at {}: {what}", s.prefix);
        Ok(replacement)
    }

    /// Removes `kid` from etcd. The active key cannot be removed.
    pub fn remove(&self, kid: &str) -> Result<()> {
        let s = self.shared();
        let plan = s.plan();
        s.remove_planned(&plan, kid, None)
    }

    /// Copies every key of `keyring` into an empty replicated keyring (one
    /// transaction; `KeyringConflict` if the prefix already holds keys).
    /// Each key's material is wrapped by this keyring's KEK. Keys without
    /// material (verify-only) and keys held by an external signer are
    /// refused: a replicated keyring holds only keys it can wrap. Returns
    /// the number of keys copied.
    pub fn import(&self, keyring: &Keyring) -> Result<usize> {
        let s = self.shared();
        let mut plan = s.plan();
        // The bundle those keys were served in never sees its sequence fall.
        plan.sequence = plan.sequence.max(keyring.spiffe_sequence());
        if !plan.keys.is_empty() {
            return Err(s.conflict(format!(
                "the keyring at {} already holds {} keys; import copies into an empty one",
                s.prefix,
                plan.keys.len()
            )));
        }
        let mut writes = Vec::new();
        for info in keyring.keys() {
            let Some(root) = keyring.root_key(info.kid.as_str()) else {
                return Err(Error::invalid(
                    "Keyring",
                    "keys",
                    format!(
                        "key {} has no material here ({}): a replicated keyring holds only keys whose material it wraps",
                        info.kid,
                        info.external.as_deref().unwrap_or("verify-only")
                    ),
                ));
            };
            writes.push(Write::Create(s.new_record(&root)?));
        }
        let n = writes.len();
        s.commit(&plan, writes, None, &format!("importing {n} keys"))?;
        Ok(n)
    }

    /// A standalone copy of the keys (material included), e.g. to save as a
    /// keystore file (`wid keyring migrate`). Changes to it stay local.
    pub fn export(&self) -> Result<Keyring> {
        let kr = self.keyring();
        let keys = kr
            .keys()
            .iter()
            .filter_map(|i| kr.root_key(i.kid.as_str()))
            .collect::<Vec<_>>();
        let copy = Keyring::from_keys(keys)?;
        copy.adopt_sequence(Some(kr.spiffe_sequence()));
        Ok(copy)
    }
}

impl EtcdKeyring {
    /// Whether this keyring's records are authenticated under its KEK.
    pub fn records_authenticated(&self) -> bool {
        self.shared().record_key().is_some()
    }

    /// Seals a keyring written before records were authenticated (opened
    /// with [`super::EtcdKeyringBuilder::allow_unauthenticated_records`]): one
    /// transaction writes a new record key (wrapped by the KEK) into the
    /// `wrapping` record and a manifest listing every key record and the
    /// policy as they are now, which from then on are the only ones any
    /// process follows. Check the keys first (`wid keyring list`): what is
    /// there now is what gets sealed. Returns the number of records sealed;
    /// `Ok(None)` when they were authenticated already. `KeyCustodyFailed`
    /// without a KEK (a plaintext keyring cannot be authenticated),
    /// `KeyringConflict` when the keys changed meanwhile.
    pub fn authenticate_records(&self) -> Result<Option<usize>> {
        let s = self.shared();
        let Some(w) = s.wrapper.clone() else {
            return Err(Error::KeyCustody {
                custodian: "plaintext".into(),
                reason: format!(
                    "the keyring at {} has no KEK (insecure_plaintext_keys): its records cannot be authenticated; copy its keys into a wrapped keyring with `wid keyring migrate`",
                    s.prefix
                ),
            });
        };
        if s.record_key().is_some() {
            return Ok(None);
        }
        super::listing::relist(s)?;
        let mut plan = s.plan();
        let digests: Digests = {
            let view = s.lock_view();
            view.entries
                .iter()
                .filter(|(name, _)| sealed(name))
                .map(|(name, e)| (name.clone(), digest(&e.value)))
                .collect()
        };
        let n = digests.len();
        plan.manifest = Some(digests);
        let key = Arc::new(RecordKey::generate()?);
        s.set_record_key(Some(Arc::clone(&key)));
        let wrapping = s.wrapping_record(w.as_ref(), false);
        let result = wrapping.and_then(|bytes| {
            s.commit(
                &plan,
                vec![Write::Wrapping(bytes)],
                None,
                &format!("authenticating the {n} records of the keyring under its KEK"),
            )
        });
        if let Err(e) = result {
            s.set_record_key(None);
            return Err(e);
        }
        Ok(Some(n))
    }
}
