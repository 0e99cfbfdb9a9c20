//! What can be learned about stored keys without their material (so
//! without the KEK): each key's ID, algorithm, purpose, state, times and
//! public key, the policy and which KEK wrapped them. `wid keyring list` and
//! `wid keyring status` read a keystore file or the replicated keyring this
//! way.

use std::path::Path;

use super::keystore::{Body, ENVELOPE};
use super::stored_key::{StoredKey, public_of, purpose_of};
use super::{JwsAlgorithm, KeyDerivation, KeyId, KeyInfo, KeyState, KeyringPolicy};
use crate::error::{Error, Result, truncate_for_message};
use crate::storage::atomic_file::FileAccess;

/// A keystore file's contents without the material: see
/// [`inspect_keystore`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeystoreSummary {
    /// The file's version (3: wrapped).
    pub version: u32,
    /// Every key, as stored (its state and times are not authenticated by
    /// the KEK: see the keystore format).
    pub keys: Vec<KeyInfo>,
    /// The policy stored with the keys.
    pub policy: Option<KeyringPolicy>,
    /// The KEK that wrapped the keys: its kind and ID (version 3).
    pub wrapping: Option<(String, String)>,
}

/// Reads a keystore file's keys, policy and wrapping without unwrapping
/// anything (no KEK needed): for listing and status. The envelope and
/// checksum are checked as [`super::Keyring::load`] checks them, and every
/// key record must be whole (a known algorithm, state and purpose, a valid
/// public key); the material is not looked at. A file others can read is
/// refused, as [`super::Keyring::load`] refuses it.
pub fn inspect_keystore(path: impl AsRef<Path>) -> Result<KeystoreSummary> {
    let (version, body) = ENVELOPE.load_versioned(path.as_ref(), FileAccess::OwnerOnly)?;
    summary_of(version, &body, &path.as_ref().display().to_string())
}

fn summary_of(version: u32, body: &Body, source: &str) -> Result<KeystoreSummary> {
    let keys = body
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            info_of_record(k)
                .map_err(|why| Error::invalid("keystore", format!("{source}: Keys[{i}]"), why))
        })
        .collect::<Result<Vec<_>>>()?;
    let policy = body
        .policy
        .as_ref()
        .map(|p| KeyringPolicy::from_parts(p, "Policy"))
        .transpose()?;
    Ok(KeystoreSummary {
        version,
        keys,
        policy,
        wrapping: body
            .wrapping
            .as_ref()
            .map(|w| (w.kind.clone(), w.kek_id.clone())),
    })
}

/// A stored key's public facts (never its material). Version-1 records
/// (no algorithm) are EdDSA.
pub(crate) fn info_of_record(k: &StoredKey) -> std::result::Result<KeyInfo, String> {
    let kid = KeyId::new(&k.id).map_err(|e| e.to_string())?;
    let algorithm = if k.algorithm.is_empty() {
        JwsAlgorithm::EdDsa
    } else {
        JwsAlgorithm::from_name(&k.algorithm)
            .ok_or_else(|| format!("unknown algorithm {:?}", truncate_for_message(&k.algorithm)))?
    };
    let state = KeyState::from_name(&k.state)
        .ok_or_else(|| format!("unknown state {:?}", truncate_for_message(&k.state)))?;
    let purpose = purpose_of(k.purpose.as_deref())?;
    let public_key = public_of(algorithm, k.public_key.as_slice())?;
    let has_material = !k.material.as_slice().is_empty()
        || k.wrapped.as_ref().is_some_and(|w| !w.as_slice().is_empty());
    Ok(KeyInfo {
        kid,
        algorithm,
        purpose,
        state,
        derivation: if has_material {
            KeyDerivation::from_name(&k.derivation)
        } else {
            None
        },
        create_time: k.create_time,
        publish_time: k.publish_time,
        retired_time: k.retired_time,
        public_key,
        external: None,
    })
}
