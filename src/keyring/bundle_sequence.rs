//! The SPIFFE bundle's `spiffe_sequence`: a counter stored with the keys
//! (the keystore body's `Sequence`, the replicated keyring's `sequence`
//! record), raised whenever the bundle's contents change, so that it changes
//! with every change (SPIFFE Trust Domain and Bundle 4.1: MUST) and is the
//! same on every server of one keyring.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::jwks::bundle_json;
use super::{Algorithm, KeyPurpose, KeyState, Keyring};

/// The sequence last served, and the digest of the bundle contents it was
/// served for (`None`: none recorded yet, as in a new keyring).
#[derive(Default)]
pub(super) struct BundleSequence {
    sequence: u64,
    contents: Option<[u8; 32]>,
}

pub(super) type Recorded = Mutex<BundleSequence>;

impl Keyring {
    /// The bundle's `spiffe_sequence`: raised whenever the contents of the
    /// SPIFFE bundle ([`Keyring::spiffe_bundle_json`]: every key added,
    /// removed or changed) differ from those it was last given for, to
    /// `max(previous + 1, the keys' latest recorded moment)`; never lowered.
    ///
    /// It is stored with the keys: [`Keyring::save`] writes it in the
    /// keystore body (`Sequence`), and a replicated keyring raises it in the
    /// etcd transaction of every change (its `sequence` record), so every
    /// server of one keystore or one etcd prefix serves the same sequence,
    /// and a restart serves the sequence served before. A keyring of a
    /// format without it (or a new keyring) starts at the keys' latest
    /// recorded moment (Unix seconds): a key's create time, its retired
    /// time and, for a deprecated key, the earliest time the stored policy
    /// let it be deprecated (over the keys of an algorithm a bundle can
    /// hold: every one but EdDSA), which is what servers of the format
    /// before it served; 0 for a keyring with no such key.
    pub fn spiffe_sequence(&self) -> u64 {
        let contents = self.bundle_contents();
        let mut rec = self.recorded_sequence();
        if rec.contents == Some(contents) {
            return rec.sequence;
        }
        if self.shared.replica_of.get().is_some() && rec.contents.is_some() {
            // A replica's sequence is its source's (adopt_sequence); only
            // the source raises it, so every replica serves the same one.
            return rec.sequence;
        }
        let moment = self.latest_moment();
        rec.sequence = match rec.contents {
            None => rec.sequence.max(moment),
            Some(_) => rec.sequence.saturating_add(1).max(moment),
        };
        rec.contents = Some(contents);
        rec.sequence
    }

    /// Takes a stored sequence (a keystore's `Sequence`, an etcd keyring's
    /// `sequence` record) as the one served for the keys held now, never
    /// below their latest recorded moment (so that one written by a version
    /// without the counter never lowers what was served).
    pub(crate) fn adopt_sequence(&self, stored: Option<u64>) {
        let contents = self.bundle_contents();
        let moment = self.latest_moment();
        let mut rec = self.recorded_sequence();
        rec.sequence = stored.unwrap_or(0).max(moment);
        rec.contents = Some(contents);
    }

    fn recorded_sequence(&self) -> std::sync::MutexGuard<'_, BundleSequence> {
        // Two plain assignments under the lock: a poisoned lock still holds
        // consistent data.
        self.shared
            .bundle_sequence
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A digest of what the bundle says about keys (its refresh hint and
    /// sequence left out).
    fn bundle_contents(&self) -> [u8; 32] {
        let json = bundle_json(
            &[
                (&self.jwks_for(KeyPurpose::Bearer), "jwt-svid"),
                (&self.jwks_for(KeyPurpose::Wit), "wit-svid"),
            ],
            Duration::ZERO,
            None,
        );
        Sha256::digest(json.as_bytes()).into()
    }

    /// The latest moment the bundle's keys record (see
    /// [`Keyring::spiffe_sequence`]).
    fn latest_moment(&self) -> u64 {
        let deprecate_after = self.policy();
        let latest = self
            .keys()
            .iter()
            .filter(|k| k.algorithm != Algorithm::EdDsa)
            .map(|k| {
                let left = match (k.state, &deprecate_after) {
                    (KeyState::Deprecated, Some(p)) => {
                        p.deprecate_after(k.retired_time).unwrap_or(k.retired_time)
                    }
                    _ => k.retired_time,
                };
                k.create_time.max(k.retired_time).max(left)
            })
            .max()
            .unwrap_or(0);
        u64::try_from(latest).unwrap_or(0)
    }
}
