//! What a replicated keyring is doing, read without its KEK: one
//! linearizable listing of the prefix ([`EtcdKeyring::status`]).

use std::time::Duration;

use super::servers::{SERVERS, ServerRecord, records_of};
use super::view::{KEYS, POLICY, ROTATOR, SEQUENCE, WRAPPING};
use super::{EtcdKeyring, normalized_prefix};
use crate::codec;
use crate::custody::Wrapping;
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{KeyInfo, KeyringPolicy, StoredKey, info_of_record};
use crate::state::etcd::EtcdConfig;
use crate::state::etcd::client::{Client, Listed};

/// A replicated keyring as one listing saw it (no key material: no KEK is
/// needed to read it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyringStatus {
    /// The prefix (ends with `/`).
    pub prefix: String,
    /// etcd's revision at the listing.
    pub revision: i64,
    /// The newest change to a key, the wrapping or the policy.
    pub keyring_revision: i64,
    /// Who holds the `rotator` key (the elected rotator's identity).
    pub rotator: Option<String>,
    /// The stored policy.
    pub policy: Option<KeyringPolicy>,
    /// The KEK that wraps the keys: kind and ID.
    pub wrapping: Option<(String, String)>,
    /// The live servers (their leased records).
    pub servers: Vec<ServerRecord>,
    /// Every key, as its record says.
    pub keys: Vec<KeyInfo>,
    /// Records that could not be read (never a secret).
    pub problems: Vec<String>,
}

impl KeyringStatus {
    /// Since when the elected rotator has held the election, as its server
    /// record says (`None`: no rotator, or it runs in no announced server).
    pub fn elected_since(&self) -> Option<i64> {
        let who = self.rotator.as_deref()?;
        self.servers
            .iter()
            .filter(|s| s.id == who)
            .find_map(|s| s.elected_since)
    }
}

impl EtcdKeyring {
    /// Lists the keyring at `prefix` on the cluster of `config` once
    /// (linearizable) and says what it holds: keys and their states and
    /// times, the stored policy, the elected rotator, the live servers. No
    /// KEK is needed: no material is read. `KeyringUnavailable` when etcd
    /// does not answer.
    pub fn status(config: EtcdConfig, prefix: &str) -> Result<KeyringStatus> {
        let prefix = normalized_prefix(prefix);
        let client = Client::new(config, Duration::from_secs(60))?;
        let mut entries: Vec<(String, Vec<u8>, i64)> = Vec::new();
        let revision = client
            .list_prefix(prefix.as_bytes(), 500, |item| {
                if let Listed::Pair {
                    suffix,
                    value,
                    mod_revision,
                } = item
                {
                    if let Ok(s) = String::from_utf8(suffix.to_vec()) {
                        entries.push((s, value, mod_revision));
                    }
                }
                Ok(true)
            })
            .map_err(|e| Error::KeyringUnavailable {
                source_name: prefix.clone(),
                cause: e.message,
            })?
            .unwrap_or_default();
        let mut status = KeyringStatus {
            prefix: prefix.clone(),
            revision,
            keyring_revision: 0,
            rotator: None,
            policy: None,
            wrapping: None,
            servers: records_of(
                entries
                    .iter()
                    .filter(|(s, _, _)| s.starts_with(SERVERS))
                    .map(|(s, v, _)| (s, v.as_slice())),
            ),
            keys: Vec::new(),
            problems: Vec::new(),
        };
        for (suffix, value, mod_revision) in &entries {
            let counts = suffix.starts_with(KEYS)
                || suffix == WRAPPING
                || suffix == POLICY
                || suffix == SEQUENCE;
            if counts {
                status.keyring_revision = status.keyring_revision.max(*mod_revision);
            }
            if let Some(kid) = suffix.strip_prefix(KEYS) {
                let shown = truncate_for_message(kid);
                match codec::decode::<StoredKey>(value) {
                    Ok(k) if k.id == kid => match info_of_record(&k) {
                        Ok(info) => status.keys.push(info),
                        Err(why) => status.problems.push(format!("key {shown:?}: {why}")),
                    },
                    Ok(_) => status
                        .problems
                        .push(format!("the record under key {shown:?} is for another ID")),
                    Err(_) => status.problems.push(format!(
                        "the record of key {shown:?} does not decode as a key record"
                    )),
                }
            } else if suffix == POLICY {
                match KeyringPolicy::from_record(value, "policy") {
                    Ok(p) => status.policy = Some(p),
                    Err(e) => status.problems.push(e.to_string()),
                }
            } else if suffix == WRAPPING {
                match codec::decode::<Wrapping>(value) {
                    Ok(w) => status.wrapping = Some((w.kind, w.kek_id)),
                    Err(_) => status
                        .problems
                        .push("the wrapping record does not decode".into()),
                }
            } else if suffix == ROTATOR {
                status.rotator = Some(truncate_for_message(&String::from_utf8_lossy(value)));
            }
        }
        status
            .keys
            .sort_by(|a, b| (a.create_time, &a.kid).cmp(&(b.create_time, &b.kid)));
        status.servers.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(status)
    }
}
