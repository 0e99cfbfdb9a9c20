//! The process's copy of the prefix: its layout, the records as last listed
//! (by `listing.rs`) or watched (`watch.rs`), proven current by `check.rs`,
//! and turned into the [`crate::Keyring`] by `sync.rs` after every change.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::Shared;
use crate::codec;
use crate::keyring::{Algorithm, StoredKey};

/// The suffix of the key records.
pub(crate) const KEYS: &str = "keys/";
/// The suffix of the wrapping record.
pub(crate) const WRAPPING: &str = "wrapping";
/// The suffix of the election key.
pub(crate) const ROTATOR: &str = "rotator";
/// The suffix of the policy record.
pub(crate) const POLICY: &str = "policy";
/// The suffix of the SPIFFE bundle sequence record.
pub(crate) const SEQUENCE: &str = "sequence";

/// Each authenticated record's SHA-256, by its name under the prefix.
pub(crate) type Digests = BTreeMap<String, [u8; 32]>;

/// Whether the record named `suffix` is one a process follows only as the
/// manifest lists it.
pub(crate) fn sealed(suffix: &str) -> bool {
    suffix.starts_with(KEYS) || suffix == POLICY
}

/// A record's digest, as the manifest lists it.
pub(crate) fn digest(value: &[u8]) -> [u8; 32] {
    Sha256::digest(value).into()
}

/// One record under the prefix.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) mod_revision: i64,
    pub(crate) value: Zeroizing<Vec<u8>>,
}

/// The copy.
#[derive(Default)]
pub(crate) struct View {
    /// The revision the copy reflects (0 before the first listing).
    pub(crate) revision: i64,
    /// The revision the keyring reflects: `revision` once the records are
    /// applied (what a change waits for before it returns).
    pub(crate) synced: i64,
    /// Every record under the prefix, by suffix.
    pub(crate) entries: BTreeMap<String, Entry>,
    /// For each key the keyring holds: the digest of the record's key pair
    /// fields ([`key_digest`]); a record whose material changed is unwrapped
    /// again.
    pub(crate) unwrapped: HashMap<String, [u8; 32]>,
    /// Keys under the prefix whose names are not UTF-8 (never ours): counted
    /// so the freshness check's count still matches.
    pub(crate) foreign: std::collections::BTreeSet<Vec<u8>>,
    /// When each key ID first appeared in this copy (monotonic): a key may
    /// be promoted only a lead time after it could have reached everyone.
    pub(crate) first_seen: HashMap<String, Instant>,
    /// When each deprecated key was first seen deprecated here (monotonic):
    /// the rotator removes a key only a `Retention` after that.
    pub(crate) deprecated_seen: HashMap<String, Instant>,
    /// Some record could not be unwrapped (the KMS did not answer, say):
    /// the check thread syncs again until it can.
    pub(crate) pending_retry: bool,
    /// The `wrapping` record names another KEK than this process holds:
    /// changes are refused until it is put right.
    pub(crate) wrapping_mismatch: Option<String>,
    pub(crate) proven_at: Option<Instant>,
    pub(crate) stood_down: Vec<(crate::keyring::KeyPurpose, Algorithm)>,
    pub(crate) bad_records: usize,
    pub(crate) last_error: Option<String>,
    pub(crate) last_problem_reported: Option<String>,
    /// The cut-off has been logged (once per cut).
    pub(crate) warned_cut_off: bool,
    /// The authenticated manifest last followed (`None`: the records are not
    /// authenticated): a change is planned on these records only.
    pub(crate) trusted: Option<Digests>,
    /// Its sequence: an older manifest is refused unless etcd's revision
    /// went back too.
    pub(crate) followed_sequence: u64,
    /// The records followed last (each the version the manifest lists).
    pub(crate) followed: BTreeMap<String, Entry>,
}

impl View {
    /// The decoded key records, by key ID (undecodable ones, and ones the
    /// authenticated manifest does not list as they are, left out).
    pub(crate) fn keys(&self) -> BTreeMap<String, (i64, StoredKey)> {
        self.entries
            .iter()
            .filter_map(|(suffix, e)| match &self.trusted {
                None => Some((suffix, e)),
                // The version the manifest lists: the one in etcd, or the
                // one followed before it was written over.
                Some(t) => {
                    let listed = t.get(suffix.as_str())?;
                    [Some(e), self.followed.get(suffix)]
                        .into_iter()
                        .flatten()
                        .find(|e| digest(&e.value) == *listed)
                        .map(|e| (suffix, e))
                }
            })
            .filter_map(|(suffix, e)| {
                let kid = suffix.strip_prefix(KEYS)?;
                let k: StoredKey = codec::decode(&e.value).ok()?;
                (k.id == kid).then(|| (kid.to_string(), (e.mod_revision, k)))
            })
            .collect()
    }

    pub(crate) fn mod_revision(&self, suffix: &str) -> i64 {
        self.entries.get(suffix).map_or(0, |e| e.mod_revision)
    }

    pub(crate) fn note(&mut self, what: String) {
        log::warn!("replicated keyring: {what}");
        self.last_error = Some(what);
    }
}

/// Waits until the copy reflects `revision`.
pub(crate) fn wait_for_revision(shared: &Shared, revision: i64, timeout: Duration) -> bool {
    let deadline = crate::deadline::deadline_after(timeout);
    let mut view = shared.lock_view();
    while view.synced < revision {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        view = shared
            .advanced
            .wait_timeout(view, left)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    true
}
