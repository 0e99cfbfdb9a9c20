//! Making the keyring match the copy's key records: new or changed records
//! decoded and unwrapped without the view's lock, then applied if the copy
//! did not move meanwhile; the stored policy adopted; every key change
//! audited.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::view::{Entry, KEYS, POLICY, View};
use super::{Counters, Shared};
use crate::codec::{self, Bin};
use crate::custody::WrapItem;
use crate::error::truncate_for_message;
use crate::keyring::{KeyringPolicy, ReplicaKey, StoredKey, stored_aad};

/// What makes a key pair: its algorithm, purpose, derivation, public key and
/// (wrapped) material. A record whose state or times change keeps its
/// digest, so the keyring keeps the key pair without unwrapping it again; one
/// whose purpose changed is looked at again (and refused: purposes are
/// fixed).
fn key_digest(k: &StoredKey) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        k.algorithm.as_bytes(),
        k.purpose.as_deref().unwrap_or("").as_bytes(),
        k.derivation.as_bytes(),
        k.public_key.as_slice(),
        k.material.as_slice(),
        k.wrapped.as_ref().map_or(&[][..], Bin::as_slice),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// What one sync did.
#[derive(Default)]
pub(crate) struct SyncOutcome {
    pub(super) unwrapped: usize,
    pub(super) unwrap_failures: usize,
    pub(super) first_problem: Option<String>,
}

/// Records decoded and unwrapped, ready to apply.
struct Prepared {
    /// Each key with the digest of the material it was unwrapped from
    /// (`None`: its material did not unwrap and the held key pair is kept).
    keys: Vec<(ReplicaKey, Option<[u8; 32]>)>,
    problems: Vec<String>,
    outcome: SyncOutcome,
}

/// Decodes the key records and unwraps those the keyring does not hold yet
/// (one batch; one at a time to find the culprit when the batch fails).
/// Runs without the view's lock: a KMS may be slow.
fn prepare(
    shared: &Shared,
    entries: &BTreeMap<String, Entry>,
    unwrapped: &HashMap<String, [u8; 32]>,
) -> Prepared {
    let mut problems = Vec::new();
    let mut keys: Vec<(ReplicaKey, Option<[u8; 32]>)> = Vec::new();
    let mut to_unwrap: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut outcome = SyncOutcome::default();
    for (suffix, entry) in entries {
        let Some(kid) = suffix.strip_prefix(KEYS) else {
            continue;
        };
        let shown = truncate_for_message(kid);
        // The decoder's message could quote a field's text: say only where.
        let Ok(mut k) = codec::decode::<StoredKey>(&entry.value) else {
            problems.push(format!(
                "record of key {shown:?} does not decode as a key record"
            ));
            continue;
        };
        if k.id != kid {
            problems.push(format!(
                "record under key {shown:?} is for {:?}",
                truncate_for_message(&k.id)
            ));
            continue;
        }
        let dig = key_digest(&k);
        let held = shared
            .keyring
            .holds_with_public(kid, k.public_key.as_slice());
        let known = held && unwrapped.get(kid) == Some(&dig);
        match (&shared.wrapper, known) {
            (_, true) => k.material = Bin::default(),
            (Some(_), false) => {
                let wrapped = k.wrapped.take().filter(|w| !w.as_slice().is_empty());
                if !k.material.as_slice().is_empty() || wrapped.is_none() {
                    problems.push(format!(
                        "key {shown:?} is not wrapped: every key of a wrapped keyring carries Wrapped and no Material"
                    ));
                    continue;
                }
                let aad = match stored_aad(&k) {
                    Ok(a) => a,
                    Err(e) => {
                        problems.push(format!("key {shown:?}: {e}"));
                        continue;
                    }
                };
                to_unwrap.push((keys.len(), aad));
                k.material = wrapped.unwrap_or_default();
            }
            (None, false) => {
                if k.wrapped.is_some() {
                    problems.push(format!(
                        "key {shown:?} is wrapped, and this keyring was opened without a KEK"
                    ));
                    continue;
                }
            }
        }
        keys.push((ReplicaKey { stored: k, known }, Some(dig)));
    }
    let failed = match &shared.wrapper {
        Some(wrapper) => unwrap_all(wrapper.as_ref(), &mut keys, &to_unwrap),
        None => Vec::new(),
    };
    outcome.unwrapped = to_unwrap.len() - failed.len();
    outcome.unwrap_failures = failed.len();
    for (i, why) in failed.into_iter().rev() {
        let (mut rk, _) = keys.remove(i);
        let kid = rk.stored.id.clone();
        if shared
            .keyring
            .holds_with_public(&kid, rk.stored.public_key.as_slice())
        {
            // The KMS may be down for a moment: keep the key pair held and
            // take the record's state; try the new material again later.
            problems.push(format!(
                "key {:?} does not unwrap ({why}); the key pair held here is kept",
                truncate_for_message(&kid)
            ));
            rk.stored.material = Bin::default();
            rk.known = true;
            keys.insert(i, (rk, None));
        } else {
            problems.push(format!(
                "key {:?} left out: it does not unwrap ({why})",
                truncate_for_message(&kid)
            ));
        }
    }
    outcome.first_problem = problems.first().cloned();
    Prepared {
        keys,
        problems,
        outcome,
    }
}

/// Unwraps the material of `keys[i]` for each `(i, associated data)` of
/// `to_unwrap` (its `material` holds the wrapped bytes until then): in one
/// batch, or key by key when the batch fails. Returns the keys that did not
/// unwrap, in `to_unwrap`'s order, with why. An empty plaintext is a failure
/// on either path, as when a keystore loads: no key has empty material, so
/// the wrapper answered wrongly, and an empty key must never be taken as one.
fn unwrap_all(
    wrapper: &dyn crate::custody::KeyWrapper,
    keys: &mut [(ReplicaKey, Option<[u8; 32]>)],
    to_unwrap: &[(usize, Vec<u8>)],
) -> Vec<(usize, String)> {
    const EMPTY: &str = "it unwrapped to nothing: the wrapper answered wrongly";
    let mut failed = Vec::new();
    let batch = {
        let items: Vec<WrapItem<'_>> = to_unwrap
            .iter()
            .map(|(i, aad)| {
                let k = &keys[*i].0.stored;
                WrapItem::new(&k.id, k.material.as_slice(), aad)
            })
            .collect();
        wrapper
            .unwrap_many(&items)
            .ok()
            .filter(|p| p.len() == items.len())
    };
    match batch {
        Some(plain) => {
            for ((i, _), p) in to_unwrap.iter().zip(plain) {
                if p.is_empty() {
                    failed.push((*i, EMPTY.to_string()));
                } else {
                    keys[*i].0.stored.material = Bin(p);
                }
            }
        }
        None => {
            for (i, aad) in to_unwrap {
                let k = &keys[*i].0.stored;
                match wrapper.unwrap(k.material.as_slice(), aad) {
                    Ok(p) if !p.is_empty() => keys[*i].0.stored.material = Bin(p),
                    Ok(_) => failed.push((*i, EMPTY.to_string())),
                    Err(e) => failed.push((*i, e.to_string())),
                }
            }
        }
    }
    failed
}

/// Makes the keyring match the copy's key records: new or changed records
/// are unwrapped, known ones keep their key pair; a record that cannot be
/// used is left out and reported (and one that did not unwrap is tried
/// again by the check thread). Two active keys of one algorithm keep the
/// previous keys. The view's lock is not held while records are unwrapped;
/// what was prepared is applied only if the copy did not move meanwhile.
pub(crate) fn sync(shared: &Shared) -> SyncOutcome {
    for _ in 0..8 {
        let (revision, entries, unwrapped, floor, followed) = {
            let v = shared.lock_view();
            (
                v.revision,
                v.entries.clone(),
                v.unwrapped.clone(),
                v.followed_sequence,
                v.followed.clone(),
            )
        };
        // Only what the authenticated manifest lists is followed (seal.rs).
        let step = shared
            .check_records(&entries, &followed, floor, revision)
            .map(|checked| {
                let prepared = prepare(shared, &checked.entries, &unwrapped);
                (checked, prepared)
            });
        let mut view = shared.lock_view();
        if view.revision != revision {
            continue; // a newer change arrived: prepare that instead
        }
        return match step {
            Ok((checked, mut prepared)) => {
                let mut problems = checked.problems.clone();
                problems.append(&mut prepared.problems);
                prepared.problems = problems;
                apply(shared, &mut view, prepared, &checked)
            }
            Err(why) => refuse_all(shared, &mut view, &why),
        };
    }
    // Changes keep arriving; the sync after the last one applies them.
    SyncOutcome::default()
}

/// The manifest was refused whole: the keys held stay, the copy counts as
/// caught up (nothing more can be taken from this revision), and the
/// refusal is logged under the audit target, once per distinct problem.
fn refuse_all(shared: &Shared, view: &mut View, why: &str) -> SyncOutcome {
    view.synced = view.synced.max(view.revision);
    Counters::bump(&shared.counters.sync_failures);
    if view.last_problem_reported.as_deref() != Some(why) {
        crate::audit::refused(&shared.prefix, super::view::SEQUENCE, why, view.revision);
        view.last_problem_reported = Some(why.to_string());
        view.last_error = Some(why.to_string());
    }
    view.bad_records = view.bad_records.max(1);
    SyncOutcome {
        first_problem: Some(why.to_string()),
        ..SyncOutcome::default()
    }
}

fn apply(
    shared: &Shared,
    view: &mut View,
    prepared: Prepared,
    checked: &super::seal::Checked,
) -> SyncOutcome {
    let Prepared {
        keys,
        mut problems,
        outcome,
    } = prepared;
    view.pending_retry = outcome.unwrap_failures > 0;
    view.synced = view.synced.max(view.revision);
    let (replica, digests): (Vec<ReplicaKey>, Vec<Option<[u8; 32]>>) = keys.into_iter().unzip();
    let before = key_states(shared);
    match shared.keyring.replace_with_replica(&replica) {
        Ok(more) => {
            problems.extend(more);
            view.unwrapped = replica
                .iter()
                .zip(digests)
                .filter_map(|(k, d)| Some((k.stored.id.clone(), d?)))
                .collect();
        }
        Err(e) => {
            Counters::bump(&shared.counters.sync_failures);
            problems.push(format!(
                "the records at revision {} do not make a keyring (the previous keys stay): {e}",
                view.revision
            ));
        }
    }
    audit_changes(shared, &before, view.revision);
    // A policy record refused (seal.rs) leaves the policy held as it was.
    if checked.entries.contains_key(POLICY) || !view.entries.contains_key(POLICY) {
        adopt_policy(shared, &checked.entries, &mut problems);
    }
    if let Some((digests, sequence)) = &checked.manifest {
        view.trusted = Some(digests.clone());
        view.followed_sequence = *sequence;
    } else {
        view.trusted = None;
    }
    view.followed = checked.entries.clone();
    shared.adopt_sequence(view, &mut problems);
    let now = Instant::now();
    let ids: Vec<String> = view
        .entries
        .keys()
        .filter_map(|s| s.strip_prefix(KEYS).map(str::to_string))
        .collect();
    view.first_seen.retain(|k, _| ids.contains(k));
    for id in ids {
        view.first_seen.entry(id).or_insert(now);
    }
    let deprecated: Vec<String> = shared
        .keyring
        .keys()
        .into_iter()
        .filter(|k| k.state == crate::keyring::KeyState::Deprecated)
        .map(|k| k.kid.as_str().to_string())
        .collect();
    view.deprecated_seen.retain(|k, _| deprecated.contains(k));
    for id in deprecated {
        view.deprecated_seen.entry(id).or_insert(now);
    }
    // Keys stood down while cut off stay down until the copy is proven
    // current again (a change that arrives is not proof the copy is whole).
    let proven = view
        .proven_at
        .is_some_and(|t| t.elapsed() <= shared.settings.max_lag);
    if proven {
        view.stood_down.clear();
    } else {
        let stamp = crate::clock::unix_now();
        for (purpose, alg) in view.stood_down.clone() {
            shared.keyring.stand_down(purpose, alg, stamp);
        }
    }
    view.bad_records = problems.len();
    if problems.is_empty() {
        view.last_problem_reported = None;
    } else if view.last_problem_reported.as_ref() != problems.first() {
        // Each distinct set of problems is logged once, not at every change.
        for p in &problems {
            log::warn!("replicated keyring at {}: {p}", shared.prefix);
        }
        view.last_problem_reported = problems.first().cloned();
        view.last_error = problems.first().cloned();
    }
    outcome
}

/// Takes the copy's `policy` record into the keyring (its longest TTL is
/// then a promise every issuer of this process keeps). A record that does not
/// decode is reported (the rotator does not act on a copy with a bad record)
/// and the policy held before is kept.
fn adopt_policy(shared: &Shared, entries: &BTreeMap<String, Entry>, problems: &mut Vec<String>) {
    match entries.get(POLICY) {
        None => shared.keyring.adopt_policy(None),
        Some(e) => match KeyringPolicy::from_record(&e.value, "policy") {
            Ok(p) => shared.keyring.adopt_policy(Some(p)),
            Err(err) => problems.push(format!(
                "the policy record at {}{POLICY} cannot be used (the policy held before is kept): {err}",
                shared.prefix
            )),
        },
    }
}

/// Each key's state, algorithm and purpose.
type KeyStates = HashMap<
    String,
    (
        crate::keyring::KeyState,
        crate::keyring::JwsAlgorithm,
        crate::keyring::KeyPurpose,
    ),
>;

fn key_states(shared: &Shared) -> KeyStates {
    shared
        .keyring
        .keys()
        .into_iter()
        .map(|k| {
            (
                k.kid.as_str().to_string(),
                (k.state, k.algorithm, k.purpose),
            )
        })
        .collect()
}

/// Logs every key whose state changed (or that came or went) to the audit
/// trail.
fn audit_changes(shared: &Shared, before: &KeyStates, revision: i64) {
    let after = key_states(shared);
    for (kid, (state, alg, purpose)) in &after {
        let old = before.get(kid).map(|(s, _, _)| *s);
        if old != Some(*state) {
            crate::audit::key_changed(
                &shared.prefix,
                kid,
                (*alg, *purpose),
                old,
                Some(*state),
                revision,
            );
        }
    }
    for (kid, (state, alg, purpose)) in before {
        if !after.contains_key(kid) {
            crate::audit::key_changed(
                &shared.prefix,
                kid,
                (*alg, *purpose),
                Some(*state),
                None,
                revision,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zeroize::Zeroizing;

    use crate::custody::KeyWrapper;
    use crate::error::{Error, Result};

    /// A wrapper whose "plaintext" is the wrapped bytes, except that `b"empty"`
    /// unwraps to nothing: a KMS answering wrongly. Without `batch`, its
    /// batch call always fails (so each key is unwrapped alone).
    #[derive(Debug)]
    struct Echo {
        batch: bool,
    }

    impl KeyWrapper for Echo {
        fn kind(&self) -> &str {
            "echo"
        }
        fn kek_id(&self) -> &str {
            "echo"
        }
        fn wrap(&self, material: &[u8], _: &[u8]) -> Result<Vec<u8>> {
            Ok(material.to_vec())
        }
        fn unwrap(&self, wrapped: &[u8], _: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
            Ok(Zeroizing::new(if wrapped == b"empty" {
                Vec::new()
            } else {
                wrapped.to_vec()
            }))
        }
        fn unwrap_many(&self, items: &[WrapItem<'_>]) -> Result<Vec<Zeroizing<Vec<u8>>>> {
            if !self.batch {
                return Err(Error::KeyCustody {
                    custodian: "echo".into(),
                    reason: "no batch".into(),
                });
            }
            items
                .iter()
                .map(|i| self.unwrap(i.bytes, i.associated_data))
                .collect()
        }
    }

    fn key(id: &str, wrapped: &[u8]) -> (ReplicaKey, Option<[u8; 32]>) {
        let stored = StoredKey {
            id: id.into(),
            material: Bin(Zeroizing::new(wrapped.to_vec())),
            ..StoredKey::default()
        };
        (
            ReplicaKey {
                stored,
                known: false,
            },
            None,
        )
    }

    #[test]
    fn an_empty_plaintext_is_refused_in_a_batch_as_alone() {
        for wrapper in [
            &Echo { batch: true } as &dyn KeyWrapper,
            &Echo { batch: false },
        ] {
            let mut keys = vec![key("a", b"material-a"), key("b", b"empty")];
            let to_unwrap = vec![(0, b"aad-a".to_vec()), (1, b"aad-b".to_vec())];
            let failed = unwrap_all(wrapper, &mut keys, &to_unwrap);
            assert_eq!(failed.len(), 1, "{wrapper:?}: {failed:?}");
            assert_eq!(failed[0].0, 1, "{wrapper:?}");
            assert!(
                failed[0].1.contains("unwrapped to nothing"),
                "{wrapper:?}: {}",
                failed[0].1
            );
            assert_eq!(keys[0].0.stored.material.as_slice(), b"material-a");
            assert!(
                !keys[1].0.stored.material.as_slice().is_empty(),
                "{wrapper:?}: never taken as the key's material"
            );
        }
    }
}
