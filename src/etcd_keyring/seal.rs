//! Authenticated records: the facts the KEK does not wrap (a key's state,
//! purpose, algorithm and times; the policy; which keys there are) are
//! followed only as the keyring's manifest lists them.
//!
//! The `wrapping` record carries the record key, wrapped by the KEK
//! (`RecordKey`, see [`crate::custody`]). The `sequence` record is the
//! manifest: the SHA-256 of every `keys/<key id>` and `policy` record under
//! its name, with an HMAC-SHA256 under the record key (`sequence.rs`);
//! every change rewrites it in the same transaction. A process follows a
//! record only if the manifest's MAC verifies and it lists that record's
//! digest under that record's name: a record rewritten by someone without
//! the KEK (a revoked key's state flipped back, a WIT key's purpose made
//! bearer, a lower `LongestTTL`) is refused, logged under the audit target
//! and counted (`stats().refused_records`), and never followed; a manifest
//! that does not verify, or whose sequence went back while etcd's revision
//! did not (an older manifest written again), is refused whole and the keys
//! held are kept.
//!
//! A keyring written before records were authenticated has no record key:
//! it is opened only with [`EtcdKeyringBuilder::allow_unauthenticated_records`],
//! which [`super::EtcdKeyring::authenticate_records`] (`wid keyring migrate
//! --authenticate-records`) needs to seal it once. A plaintext keyring
//! (`insecure_plaintext_keys`) has no KEK, so nothing in it is authenticated.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::sequence::SequenceRecord;
use super::view::{Digests, Entry, SEQUENCE, WRAPPING, digest, sealed};
use super::{Counters, EtcdKeyringBuilder, Shared};
use crate::codec;
use crate::custody::{RecordKey, Wrapping};
use crate::error::{Error, Result};

/// The records of a listing a process may follow.
pub(crate) struct Checked {
    /// The records followed: those the manifest lists, and the ones it does
    /// not cover (`wrapping`, `sequence`, `rotator`, `servers/`).
    pub(crate) entries: BTreeMap<String, Entry>,
    /// The manifest's digests and sequence (`None`: the records are not
    /// authenticated).
    pub(crate) manifest: Option<(Digests, u64)>,
    /// Records refused or missing, said for the log.
    pub(crate) problems: Vec<String>,
}

impl Shared {
    /// The record key, once the keyring is opened (`None`: its records are
    /// not authenticated).
    pub(crate) fn record_key(&self) -> Option<Arc<RecordKey>> {
        self.record_key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_record_key(&self, key: Option<Arc<RecordKey>>) {
        *self
            .record_key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = key;
    }

    /// The `wrapping` record for this KEK, with the record key held (or a
    /// new one, for a new keyring) wrapped.
    pub(crate) fn wrapping_record(
        &self,
        wrapper: &dyn crate::custody::KeyWrapper,
        fresh: bool,
    ) -> Result<Vec<u8>> {
        let key = match (fresh, self.record_key()) {
            (false, Some(k)) => Some(k),
            (false, None) => None,
            (true, _) => Some(Arc::new(RecordKey::generate()?)),
        };
        let mut map = Wrapping::of(wrapper);
        if let Some(k) = &key {
            map.record_key = Some(codec::Bin::new(k.wrap(wrapper)?));
        }
        codec::encode(&map)
    }

    /// At open, once the `wrapping` record is there: unwraps its record key.
    /// A keyring without one is refused unless unauthenticated records were
    /// allowed; a plaintext keyring has none.
    pub(crate) fn take_record_key(&self, entries: &BTreeMap<String, Entry>) -> Result<()> {
        let (Some(w), Some(e)) = (&self.wrapper, entries.get(WRAPPING)) else {
            return Ok(());
        };
        let map: Wrapping = codec::decode(&e.value).map_err(|_| Error::KeyCustody {
            custodian: format!("KEK {}", w.kek_id()),
            reason: format!(
                "the wrapping record at {}{WRAPPING} does not decode as a Wrapping map",
                self.prefix
            ),
        })?;
        match map.record_key {
            Some(wrapped) => {
                let key = RecordKey::unwrap(
                    w.as_ref(),
                    wrapped.as_slice(),
                    &format!("replicated keyring at {}", self.prefix),
                )?;
                self.set_record_key(Some(Arc::new(key)));
                Ok(())
            }
            None if self.settings.allow_unauthenticated => Ok(()),
            None => Err(Error::KeyCustody {
                custodian: format!("KEK {}", w.kek_id()),
                reason: format!(
                    "the records at {} are not authenticated (the keyring was written before records carried a MAC under the KEK): anyone able to write etcd could change a key's state, purpose or the policy unseen. Seal them once with `wid keyring migrate --authenticate-records` (the same --etcd flags and KEK), after checking `wid keyring list` shows the keys as they should be",
                    self.prefix
                ),
            }),
        }
    }

    /// The records of `entries` a process may follow, the manifest's
    /// sequence at least `floor` (the last one followed). A record refused
    /// whose earlier version (`followed`, the records followed last) is the
    /// one the manifest lists is followed as that version: someone writing
    /// over a record changes nothing in a running copy. `Err`: no record is
    /// followed (the manifest is missing, does not verify, or went back).
    pub(crate) fn check_records(
        &self,
        entries: &BTreeMap<String, Entry>,
        followed_before: &BTreeMap<String, Entry>,
        floor: u64,
        revision: i64,
    ) -> std::result::Result<Checked, String> {
        let Some(key) = self.record_key() else {
            return Ok(Checked {
                entries: entries.clone(),
                manifest: None,
                problems: Vec::new(),
            });
        };
        let any_sealed = entries.keys().any(|s| sealed(s));
        let manifest = match entries.get(SEQUENCE) {
            None if !any_sealed => {
                return Ok(Checked {
                    entries: entries.clone(),
                    manifest: Some((Digests::new(), 0)),
                    problems: Vec::new(),
                });
            }
            None => {
                return Err(format!(
                    "the manifest ({}{SEQUENCE}) is missing while records are there: none is followed, the keys held are kept",
                    self.prefix
                ));
            }
            Some(e) => codec::decode::<SequenceRecord>(&e.value).map_err(|_| {
                format!(
                    "the manifest ({}{SEQUENCE}) does not decode: no record is followed, the keys held are kept",
                    self.prefix
                )
            })?,
        };
        if !manifest.verify(&key) {
            return Err(format!(
                "the manifest ({}{SEQUENCE}) is not authenticated by the record key (written without the KEK): no record is followed, the keys held are kept",
                self.prefix
            ));
        }
        if manifest.sequence < floor {
            return Err(format!(
                "the manifest's sequence went back from {floor} to {} while etcd's revision did not (an older manifest written again): no record is followed, the keys held are kept",
                manifest.sequence
            ));
        }
        let digests = manifest.digests();
        let mut problems = Vec::new();
        let mut followed = BTreeMap::new();
        for (suffix, entry) in entries {
            if sealed(suffix) && digests.get(suffix) != Some(&digest(&entry.value)) {
                let earlier = followed_before
                    .get(suffix)
                    .filter(|e| digests.get(suffix) == Some(&digest(&e.value)));
                if let Some(e) = earlier {
                    followed.insert(suffix.clone(), e.clone());
                }
                let why = if digests.contains_key(suffix) {
                    "it is not the record the manifest lists (rewritten without the KEK)"
                } else {
                    "the manifest does not list it (written without the KEK)"
                };
                crate::audit::refused(&self.prefix, suffix, why, revision);
                Counters::bump(&self.counters.refused_records);
                problems.push(format!(
                    "record {:?} refused: {why}",
                    crate::error::truncate_for_message(suffix)
                ));
                continue;
            }
            followed.insert(suffix.clone(), entry.clone());
        }
        for name in digests.keys().filter(|n| !entries.contains_key(*n)) {
            problems.push(format!(
                "record {:?} is listed by the manifest but absent (deleted by hand?)",
                crate::error::truncate_for_message(name)
            ));
        }
        Ok(Checked {
            entries: followed,
            manifest: Some((digests, manifest.sequence)),
            problems,
        })
    }
}

impl EtcdKeyringBuilder {
    /// Opens a keyring whose records are not authenticated (one written
    /// before records carried a MAC under the KEK), to seal it with
    /// [`super::EtcdKeyring::authenticate_records`]; default: such a keyring is
    /// refused (`KeyCustodyFailed`), since anyone able to write etcd could
    /// change what it follows. A keyring whose records are authenticated is
    /// authenticated whatever this says.
    pub fn allow_unauthenticated_records(mut self, allow: bool) -> EtcdKeyringBuilder {
        self.settings.allow_unauthenticated = allow;
        self
    }
}
