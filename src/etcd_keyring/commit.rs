//! Writing a change to a replicated keyring: the copy's keys as a change is
//! planned on them, and the one etcd transaction that writes it, which holds
//! only if nothing under `keys/` changed after the copy's revision (and, for
//! the rotator, only while it holds its lease); a transaction without a clear
//! answer is read back before anyone tries again.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::view::{KEYS, POLICY, ROTATOR, SEQUENCE, WRAPPING};
use super::{Counters, Shared};
use crate::codec::{self, Bin};
use crate::custody::KeyWrapper;
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{Algorithm, KeyPurpose, KeyState, Keyring, RootKey, StoredKey, stored_aad};
use crate::state::StoreError;
use crate::state::etcd::record::{Header, RangeResponse, b64, prefix_end, unb64};

/// The keys as the copy held them when a change was planned.
pub(crate) struct Plan {
    pub(crate) revision: i64,
    pub(crate) keys: BTreeMap<String, (i64, StoredKey)>,
    wrapping_revision: i64,
    /// The `policy` record's revision (0: none): a change planned under one
    /// policy is not written under another.
    policy_revision: i64,
    /// The SPIFFE bundle sequence served at the plan's revision, and the
    /// `sequence` record's revision (0: none): every change raises it.
    pub(super) sequence: u64,
    sequence_revision: i64,
    /// The authenticated manifest the change is planned on (`None`: the
    /// records are not authenticated); the change writes it anew.
    pub(super) manifest: Option<super::view::Digests>,
}

/// Whether a stored key is of the (`purpose`, `alg`) pair (a record naming an
/// unknown purpose is of none).
pub(super) fn of_pair(k: &StoredKey, purpose: KeyPurpose, alg: Algorithm) -> bool {
    k.algorithm == alg.name()
        && crate::keyring::purpose_of(k.purpose.as_deref()).is_ok_and(|p| p == purpose)
}

impl Plan {
    /// Whether a `policy` record was there when the change was planned.
    pub(super) fn has_policy_record(&self) -> bool {
        self.policy_revision != 0
    }

    pub(crate) fn active(&self, purpose: KeyPurpose, alg: Algorithm) -> Option<&StoredKey> {
        self.keys
            .values()
            .map(|(_, k)| k)
            .find(|k| k.state == KeyState::Active.name() && of_pair(k, purpose, alg))
    }

    /// The write that makes the active key of the (`purpose`, `alg`) pair
    /// (if any) inactive, as of `now`.
    pub(super) fn retire_active(
        &self,
        purpose: KeyPurpose,
        alg: Algorithm,
        now: i64,
    ) -> Option<Write> {
        self.active(purpose, alg).map(|active| {
            let mut old = active.clone();
            old.state = KeyState::Inactive.name().into();
            old.retired_time = now;
            Write::Update(old)
        })
    }

    pub(super) fn get(&self, kid: &str) -> Result<&StoredKey> {
        self.keys
            .get(kid)
            .map(|(_, k)| k)
            .ok_or_else(|| Error::UnknownKey {
                kid: truncate_for_message(kid),
                reason: "no key with this ID is in the replicated keyring".into(),
            })
    }
}

/// One write of a transaction.
pub(super) enum Write {
    /// A key record that already exists, rewritten (state and times).
    Update(StoredKey),
    /// A new key record (material wrapped already, or plaintext opt-in).
    Create(StoredKey),
    /// A key record removed.
    Delete(String),
    /// The `policy` record written (its bytes).
    Policy(Vec<u8>),
    /// The `wrapping` record written (its bytes), when records are first
    /// authenticated.
    Wrapping(Vec<u8>),
}

#[derive(Deserialize)]
struct TxnAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    succeeded: bool,
}

/// Writes the `wrapping` record if there is none yet (whoever wrote it
/// first, the caller lists again and checks it names this KEK).
pub(crate) fn create_wrapping(shared: &Shared, wrapper: &dyn KeyWrapper) -> Result<()> {
    // A new keyring's records are authenticated from the start.
    let value = shared.wrapping_record(wrapper, true)?;
    let key = b64(shared.key(WRAPPING));
    let body = serde_json::json!({
        "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
        "success": [{"request_put": {"key": key, "value": b64(&value)}}],
    });
    match txn(shared, &body) {
        Answer::Unknown(why) => Err(shared.unavailable(why)),
        Answer::Committed(_) | Answer::Refused => Ok(()),
    }
}

/// What became of a transaction.
enum Answer {
    Committed(i64),
    /// etcd answered that a compare failed, and no earlier attempt can have
    /// applied it.
    Refused,
    /// No answer, or a refusal after an attempt that may have applied it
    /// (a member that timed out after taking the write).
    Unknown(String),
}

/// Sends a transaction, trying each member in turn while none answers.
fn txn(shared: &Shared, body: &serde_json::Value) -> Answer {
    let client = &shared.client;
    let mut errors = Vec::new();
    for ep in &client.config.endpoints {
        match client.post(ep, "/v3/kv/txn", body) {
            Ok(text) => {
                let Ok(a) = serde_json::from_str::<TxnAnswer>(&text) else {
                    errors.push(format!("etcd {ep}: malformed txn answer"));
                    continue;
                };
                return match (a.succeeded, errors.is_empty()) {
                    (true, _) => Answer::Committed(a.header.revision),
                    (false, true) => Answer::Refused,
                    (false, false) => {
                        Answer::Unknown(format!("{}; then refused by {ep}", errors.join("; ")))
                    }
                };
            }
            Err(e) => errors.push(e.message),
        }
    }
    Answer::Unknown(format!("no etcd member answered: {}", errors.join("; ")))
}

impl Shared {
    /// The copy's keys and revision, to plan a change on.
    pub(crate) fn plan(&self) -> Plan {
        let mut view = self.lock_view();
        if view.synced < view.revision {
            // A change arrived that the keyring has not taken yet: the
            // sequence it serves is the one to raise, so wait for it.
            let revision = view.revision;
            drop(view);
            super::view::wait_for_revision(self, revision, Duration::from_secs(2));
            view = self.lock_view();
        }
        let stored = super::sequence::stored(&view).ok().flatten().unwrap_or(0);
        Plan {
            revision: view.revision,
            keys: view.keys(),
            wrapping_revision: view.mod_revision(WRAPPING),
            policy_revision: view.mod_revision(POLICY),
            sequence: stored.max(self.keyring.spiffe_sequence()),
            sequence_revision: view.mod_revision(SEQUENCE),
            manifest: view.trusted.clone(),
        }
    }

    /// A new key's record: its material wrapped by the KEK (or left in
    /// plaintext under the opt-in).
    pub(super) fn new_record(&self, key: &RootKey) -> Result<StoredKey> {
        let kr = Keyring::from_keys([key.clone()])?;
        let mut stored = kr.stored_key_of(key.id().as_str()).ok_or_else(|| {
            Error::invalid(
                "EtcdKeyring",
                "key",
                "the new key vanished before it was stored",
            )
        })?;
        if let Some(w) = &self.wrapper {
            let aad = stored_aad(&stored)?;
            let wrapped = w.wrap(stored.material.as_slice(), &aad)?;
            stored.material = Bin::default();
            stored.wrapped = Some(Bin::new(wrapped));
        }
        Ok(stored)
    }

    /// Commits `writes` planned on `plan`; `lease` fences the write to the
    /// rotator holding it. Returns the revision of the change, after the
    /// copy has caught up with it.
    pub(super) fn commit(
        &self,
        plan: &Plan,
        writes: Vec<Write>,
        lease: Option<i64>,
        what: &str,
    ) -> Result<i64> {
        if let Some(mismatch) = self.lock_view().wrapping_mismatch.clone() {
            return Err(Error::KeyCustody {
                custodian: self
                    .wrapper
                    .as_ref()
                    .map_or_else(|| "plaintext".into(), |w| format!("KEK {}", w.kek_id())),
                reason: format!("{what} refused: {mismatch}"),
            });
        }
        let keys_prefix = self.key(KEYS);
        let mut compare = vec![
            // Nothing under keys/ changed after the plan's revision ...
            serde_json::json!({
                "key": b64(&keys_prefix),
                "range_end": b64(prefix_end(keys_prefix.as_bytes())),
                "target": "MOD", "result": "LESS",
                "mod_revision": (plan.revision + 1).to_string(),
            }),
            // ... the KEK is the one planned with ...
            serde_json::json!({
                "key": b64(self.key(WRAPPING)),
                "target": "MOD", "result": "EQUAL",
                "mod_revision": plan.wrapping_revision.to_string(),
            }),
            // ... and so is the policy ...
            serde_json::json!({
                "key": b64(self.key(POLICY)),
                "target": "MOD", "result": "EQUAL",
                "mod_revision": plan.policy_revision.to_string(),
            }),
            // ... and the bundle sequence this change raises.
            serde_json::json!({
                "key": b64(self.key(SEQUENCE)),
                "target": "MOD", "result": "EQUAL",
                "mod_revision": plan.sequence_revision.to_string(),
            }),
        ];
        if let Some(lease) = lease {
            compare.push(serde_json::json!({
                "key": b64(self.key(ROTATOR)),
                "target": "LEASE", "result": "EQUAL", "lease": lease.to_string(),
            }));
        }
        let mut success = Vec::new();
        // What the transaction writes, to read back when its fate is unknown.
        let mut puts: Vec<(String, zeroize::Zeroizing<Vec<u8>>)> = Vec::new();
        let mut deletes: Vec<String> = Vec::new();
        let mut creates: Vec<String> = Vec::new();
        // What the manifest lists anew: each record written, by its name.
        let mut sealed: Vec<(String, Option<[u8; 32]>)> = Vec::new();
        for w in writes {
            match w {
                Write::Update(k) => {
                    let key = self.key(&format!("{KEYS}{}", k.id));
                    // Deleted since the plan: the range compare cannot see it.
                    let seen = plan.keys.get(&k.id).map_or(0, |(r, _)| *r);
                    compare.push(serde_json::json!({
                        "key": b64(&key), "target": "MOD", "result": "EQUAL",
                        "mod_revision": seen.to_string(),
                    }));
                    let value = zeroize::Zeroizing::new(codec::encode(&k)?);
                    success.push(serde_json::json!({"request_put": {
                        "key": b64(&key), "value": b64(value.as_slice()),
                    }}));
                    sealed.push((format!("{KEYS}{}", k.id), Some(super::view::digest(&value))));
                    puts.push((key, value));
                }
                Write::Create(k) => {
                    let key = self.key(&format!("{KEYS}{}", k.id));
                    compare.push(serde_json::json!({
                        "key": b64(&key), "target": "CREATE", "result": "EQUAL",
                        "create_revision": "0",
                    }));
                    let value = zeroize::Zeroizing::new(codec::encode(&k)?);
                    success.push(serde_json::json!({"request_put": {
                        "key": b64(&key), "value": b64(value.as_slice()),
                    }}));
                    creates.push(key.clone());
                    sealed.push((format!("{KEYS}{}", k.id), Some(super::view::digest(&value))));
                    puts.push((key, value));
                }
                Write::Delete(kid) => {
                    let key = self.key(&format!("{KEYS}{kid}"));
                    let seen = plan.keys.get(&kid).map_or(0, |(r, _)| *r);
                    compare.push(serde_json::json!({
                        "key": b64(&key), "target": "MOD", "result": "EQUAL",
                        "mod_revision": seen.to_string(),
                    }));
                    success.push(serde_json::json!({"request_delete_range": {"key": b64(&key)}}));
                    sealed.push((format!("{KEYS}{kid}"), None));
                    deletes.push(key);
                }
                Write::Policy(bytes) => {
                    let key = self.key(POLICY);
                    success.push(serde_json::json!({"request_put": {
                        "key": b64(&key), "value": b64(&bytes),
                    }}));
                    sealed.push((POLICY.to_string(), Some(super::view::digest(&bytes))));
                    puts.push((key, zeroize::Zeroizing::new(bytes)));
                }
                Write::Wrapping(bytes) => {
                    let key = self.key(WRAPPING);
                    success.push(serde_json::json!({"request_put": {
                        "key": b64(&key), "value": b64(&bytes),
                    }}));
                    puts.push((key, zeroize::Zeroizing::new(bytes)));
                }
            }
        }
        // A prefix emptied by hand (`etcdctl del --prefix`) lost its
        // wrapping record too: the first change writes it again, in the same
        // transaction (its compare above says it is still absent), so the
        // keys written are never left without the KEK that names them.
        if let (Some(w), 0) = (&self.wrapper, plan.wrapping_revision) {
            let key = self.key(WRAPPING);
            let value = self.wrapping_record(w.as_ref(), false)?;
            success.push(serde_json::json!({"request_put": {
                "key": b64(&key), "value": b64(&value),
            }}));
        }
        // Every change raises the bundle sequence in the same transaction
        // (a change of the policy too: it can move a deprecated key's
        // recorded moment), so the sequence changes with the keys on every
        // server at once.
        // The manifest, sealed by the record key, lists every record as this
        // change leaves it.
        let key = self.key(SEQUENCE);
        let record_key = self.record_key();
        let manifest = match (&record_key, &plan.manifest) {
            (Some(_), None) => {
                return Err(Error::KeyCustody {
                    custodian: self
                        .wrapper
                        .as_ref()
                        .map_or_else(|| "plaintext".into(), |w| format!("KEK {}", w.kek_id())),
                    reason: format!(
                        "{what} refused: no authenticated manifest of {} has been followed yet (see stats().last_error), and a change written now would drop every record it does not write",
                        self.prefix
                    ),
                });
            }
            (_, Some(m)) => super::sequence::apply_writes(m, &sealed),
            (None, None) => super::view::Digests::new(),
        };
        let value = super::sequence::SequenceRecord::encode(
            plan.sequence.saturating_add(1),
            &manifest,
            record_key.as_deref(),
        )?;
        success.push(serde_json::json!({"request_put": {
            "key": b64(&key), "value": b64(&value),
        }}));
        puts.push((key, zeroize::Zeroizing::new(value)));
        let body = serde_json::json!({"compare": compare, "success": success});
        let answer = match txn(self, &body) {
            Answer::Unknown(why) => self.read_back(&puts, &deletes, &creates, &why)?,
            known => known,
        };
        let revision = match answer {
            Answer::Committed(r) => r,
            _ => {
                let or_lease = if lease.is_some() {
                    " or this rotator no longer holds its lease"
                } else {
                    ""
                };
                return Err(self.conflict(format!(
                    "{what}: the keys or the policy changed after revision {}{or_lease}; nothing was written — plan again from the current keys",
                    plan.revision
                )));
            }
        };
        Counters::bump(&self.counters.commits);
        crate::audit::committed(
            &self.prefix,
            what,
            if lease.is_some() {
                "by the elected rotator, as the policy plans"
            } else {
                "by a direct call: an operator's command or the API"
            },
            revision,
        );
        // This process's copy has the change before the call returns, unless
        // etcd stopped answering just after the commit: then the watch or
        // the check thread brings it, and the change is still done.
        let wait = self.client.config.timeout.max(Duration::from_millis(100)) * 2;
        if !super::view::wait_for_revision(self, revision, wait) {
            if let Err(e) = super::listing::relist(self) {
                self.lock_view().note(format!(
                    "{what} committed at revision {revision}, but this copy could not catch up yet: {e}"
                ));
            }
        }
        Ok(revision)
    }

    /// Decides the fate of a transaction that got no clear answer by reading
    /// back what it writes (linearizably): every put holds its value and
    /// every delete is gone, so it committed; a key it creates is absent, so
    /// it did not (a transaction is all or nothing); otherwise nobody can
    /// tell, and the caller must look before trying again.
    fn read_back(
        &self,
        puts: &[(String, zeroize::Zeroizing<Vec<u8>>)],
        deletes: &[String],
        creates: &[String],
        why: &str,
    ) -> Result<Answer> {
        let client = &self.client;
        let mut revision = 0;
        let mut all_there = true;
        let mut create_absent = false;
        let keys = puts.iter().map(|(k, _)| k).chain(deletes);
        for key in keys {
            let body = serde_json::json!({"key": b64(key)});
            let a: RangeResponse = client
                .each_endpoint(|ep| {
                    let text = client.post(ep, "/v3/kv/range", &body)?;
                    serde_json::from_str(&text).map_err(|e| {
                        StoreError::new(format!("etcd {ep}: malformed range answer: {e}"))
                    })
                })
                .map_err(|e| {
                    self.unavailable(format!(
                        "the change may or may not have been written ({why}), and reading it back failed: {}; read the keys before trying again",
                        e.message
                    ))
                })?;
            revision = revision.max(a.header.revision);
            let stored = a
                .kvs
                .first()
                .and_then(|kv| unb64("a read-back value", &kv.value).ok())
                .map(zeroize::Zeroizing::new);
            match puts.iter().find(|(k, _)| k == key) {
                Some((_, value)) => {
                    if stored.as_deref() != Some(value) {
                        all_there = false;
                        create_absent |= stored.is_none() && creates.contains(key);
                    }
                }
                None => all_there &= stored.is_none(),
            }
        }
        if all_there {
            log::debug!("replicated keyring: a change without a clear answer was written ({why})");
            return Ok(Answer::Committed(revision));
        }
        if create_absent {
            return Ok(Answer::Refused);
        }
        Err(self.unavailable(format!(
            "the change may or may not have been written ({why}); read the keys before trying again"
        )))
    }

    /// Writes the `policy` record, planned on `plan`.
    pub(crate) fn commit_policy(&self, plan: &Plan, bytes: Vec<u8>, what: &str) -> Result<i64> {
        self.commit(plan, vec![Write::Policy(bytes)], None, what)
    }
}
