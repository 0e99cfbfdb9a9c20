//! Saving and loading a keyring: a versioned msgpack file with a checksum,
//! replaced crash-safely.
//!
//! # Format (version 1)
//!
//! The file is one msgpack map, the envelope, whose layout never changes between
//! versions: `Format` (`"workload-identity-keystore"`), `Version` (1), `Body`
//! (bin: the msgpack-encoded key list) and `SHA256` (bin: SHA-256 of `Body`). The
//! body is `{"Keys": [...]}`, each key a map of `ID`, `Material` (bin, 32 bytes;
//! empty for a verify-only key), `PublicKey` (bin, 32 bytes), `Derivation`
//! (`hkdf-v1`/`nomad-raw-seed`), `State`, `CreateTime`, `PublishTime` and
//! `RetiredTime` (Unix seconds).
//!
//! Loading checks, in order: the envelope decodes, `Format` is ours, `Version` is
//! one this library reads, the checksum matches, the body decodes, and every key
//! is valid — including that its material derives exactly the stored public key.
//! Any failure is an error and no keyring is returned: never a partial one.
//! Files are written with mode 0600 through [`crate::storage::atomic_file`]'s
//! temporary-file-and-rename, so a crash leaves the old or the new file, whole.

use std::path::Path;

use ed25519_dalek::VerifyingKey;

use super::{KeyDerivation, KeyEntry, KeyId, KeyMaterial, KeyState, Keyring, Meta};
use crate::codec::{Bin, wire_struct};
use crate::error::{DecodeError, Error, Result};
use crate::storage::atomic_file::FileAccess;
use crate::storage::envelope::EnvelopeFormat;

/// The `Format` field of every keystore file.
pub const KEYSTORE_FORMAT: &str = "workload-identity-keystore";
/// The newest keystore version this library reads and the one it writes.
pub const KEYSTORE_VERSION: u32 = 1;
/// The keystore's envelope format.
const ENVELOPE: EnvelopeFormat = EnvelopeFormat {
    format: KEYSTORE_FORMAT,
    version: KEYSTORE_VERSION,
    what: "keystore",
};

wire_struct! {
    /// Version 1 body.
    pub(crate) struct Body {
        /// The keys, oldest first.
        pub(crate) keys: Vec<StoredKey> => "Keys",
    }
}

wire_struct! {
    /// One key in a version 1 body.
    pub(crate) struct StoredKey {
        /// Unix seconds.
        pub(crate) create_time: i64 => "CreateTime",
        /// `hkdf-v1` or `nomad-raw-seed` (empty for verify-only keys).
        pub(crate) derivation: String => "Derivation",
        /// The key ID.
        pub(crate) id: String => "ID",
        /// 32 bytes of material, or empty for a verify-only key.
        pub(crate) material: Bin => "Material",
        /// The Ed25519 public key (32 bytes).
        pub(crate) public_key: Bin => "PublicKey",
        /// Unix seconds (0 when unset).
        pub(crate) publish_time: i64 => "PublishTime",
        /// Unix seconds (0 when unset).
        pub(crate) retired_time: i64 => "RetiredTime",
        /// `active`, `inactive`, `prepublished` or `deprecated`.
        pub(crate) state: String => "State",
    }
}

/// How [`Keyring::load_with`] treats the keystore file.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct KeystoreLoadOptions {
    /// Load a keystore that group or others may read (default: refuse it).
    pub allow_readable_by_others: bool,
}

impl KeystoreLoadOptions {
    /// Whether to load a keystore that group or others may read. Only for files
    /// whose mode you cannot control (some container volume mounts); the
    /// keystore holds every private key.
    pub fn allow_readable_by_others(mut self, allow: bool) -> KeystoreLoadOptions {
        self.allow_readable_by_others = allow;
        self
    }
}

fn corrupt(path: String, reason: impl Into<String>) -> Error {
    Error::Decode(DecodeError {
        type_name: "keystore",
        path,
        reason: reason.into(),
    })
}

/// Builds a keyring entry from a stored key, checking it whole.
fn entry_of(i: usize, k: &StoredKey) -> Result<(KeyEntry, Meta)> {
    let at = |field: &str| format!("Keys[{i}].{field}");
    let id = KeyId::new(&k.id).map_err(|e| corrupt(at("ID"), e.to_string()))?;
    let state = KeyState::from_name(&k.state)
        .ok_or_else(|| corrupt(at("State"), format!("unknown key state {:?}", k.state)))?;
    let public: [u8; 32] = k
        .public_key
        .as_slice()
        .try_into()
        .map_err(|_| corrupt(at("PublicKey"), "must be 32 bytes"))?;
    let meta = Meta {
        state,
        create_time: k.create_time,
        publish_time: k.publish_time,
        retired_time: k.retired_time,
    };
    if k.material.as_slice().is_empty() {
        if state.signs_or_will() {
            return Err(corrupt(
                at("Material"),
                format!(
                    "key {id} is {} but has no private material: only inactive or deprecated keys may be verify-only",
                    state.name()
                ),
            ));
        }
        let vk = VerifyingKey::from_bytes(&public)
            .map_err(|_| corrupt(at("PublicKey"), "not a valid Ed25519 point"))?;
        return Ok((KeyEntry::public_only(id, vk)?, meta));
    }
    let material = KeyMaterial::from_slice(k.material.as_slice())
        .map_err(|e| corrupt(at("Material"), e.to_string()))?;
    let derivation = KeyDerivation::from_name(&k.derivation).ok_or_else(|| {
        corrupt(
            at("Derivation"),
            format!("unknown derivation {:?}", k.derivation),
        )
    })?;
    let root = super::RootKey {
        id,
        material,
        derivation,
        state,
        create_time: k.create_time,
        publish_time: k.publish_time,
        retired_time: k.retired_time,
    };
    let entry = KeyEntry::from_root(&root)?;
    if entry.verifying.as_bytes() != &public {
        return Err(corrupt(
            at("PublicKey"),
            "does not match the key derived from the material",
        ));
    }
    Ok((entry, meta))
}

impl Keyring {
    /// The keys as a keystore body (material included).
    fn keystore_body(&self) -> (Body, usize) {
        let keys: Vec<StoredKey> = self
            .stored()
            .into_iter()
            .map(|(info, material)| StoredKey {
                create_time: info.create_time,
                derivation: info
                    .derivation
                    .map(KeyDerivation::name)
                    .unwrap_or("")
                    .into(),
                id: info.kid.to_string(),
                material: Bin::new(
                    material
                        .map(|m| m.expose_secret().to_vec())
                        .unwrap_or_default(),
                ),
                public_key: Bin::new(info.public_key.as_bytes().to_vec()),
                publish_time: info.publish_time,
                retired_time: info.retired_time,
                state: info.state.name().into(),
            })
            .collect();
        let hint = 64 + keys.len() * (256 + super::MAX_KEY_ID_LEN);
        (Body { keys }, hint)
    }

    /// Saves every key to `path` (mode 0600), crash-safely: after a crash at any
    /// point the file holds the previous keyring or this one, whole.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let (body, hint) = self.keystore_body();
        ENVELOPE.save(path.as_ref(), &body, hint)
    }

    /// Loads a keyring saved by [`Keyring::save`]. A truncated, corrupted or
    /// foreign file, or one from a newer format version, is an error; no partial
    /// keyring is ever returned. On Unix a file that group or others may read is
    /// refused (`IoError`, naming its mode), as ssh refuses such private keys:
    /// see [`Keyring::load_with`] to opt out.
    pub fn load(path: impl AsRef<Path>) -> Result<Keyring> {
        Keyring::load_with(path, &KeystoreLoadOptions::default())
    }

    /// [`Keyring::load`] with options.
    pub fn load_with(path: impl AsRef<Path>, options: &KeystoreLoadOptions) -> Result<Keyring> {
        let access = if options.allow_readable_by_others {
            FileAccess::AnyMode
        } else {
            FileAccess::OwnerOnly
        };
        Keyring::from_body(ENVELOPE.load(path.as_ref(), access)?)
    }

    /// Decodes a keystore file's bytes (see [`Keyring::load`]).
    pub fn from_keystore_bytes(bytes: &[u8]) -> Result<Keyring> {
        Keyring::from_body(ENVELOPE.decode(bytes)?)
    }

    fn from_body(body: Body) -> Result<Keyring> {
        let entries = body
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| entry_of(i, k))
            .collect::<Result<Vec<_>>>()?;
        let kr = Keyring::new();
        kr.insert_entries(entries)?;
        Ok(kr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_with(state: &str, material: Vec<u8>, derivation: &str) -> Vec<u8> {
        let kr = Keyring::from_keys([super::super::RootKey::new(
            KeyId::new("k1").unwrap(),
            KeyMaterial::from_slice(&[5; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Inactive,
            0,
        )])
        .unwrap();
        let public = kr.key_info("k1").unwrap().public_key.to_bytes().to_vec();
        let body = Body {
            keys: vec![StoredKey {
                create_time: 0,
                derivation: derivation.into(),
                id: "k1".into(),
                material: Bin::new(material),
                public_key: Bin::new(public),
                publish_time: 0,
                retired_time: 0,
                state: state.into(),
            }],
        };
        ENVELOPE.encode(&body, 512).unwrap().to_vec()
    }

    /// A verify-only key (no material) may never be one that signs: loading it
    /// as active used to make issuing reach an `unreachable!`.
    #[test]
    fn a_verify_only_key_that_would_sign_is_refused_on_load() {
        for state in ["active", "prepublished"] {
            let e = Keyring::from_keystore_bytes(&body_with(state, vec![], "")).unwrap_err();
            assert_eq!(e.code(), crate::ResultCode::DecodeError, "{e}");
            let text = e.to_string();
            assert!(
                text.contains("Keys[0].Material") && text.contains("no private material"),
                "{text}"
            );
        }
        for state in ["inactive", "deprecated"] {
            let kr = Keyring::from_keystore_bytes(&body_with(state, vec![], "")).unwrap();
            assert!(!kr.key_info("k1").unwrap().can_sign());
            assert_eq!(
                kr.active().unwrap_err().code(),
                crate::ResultCode::NoActiveKey
            );
        }
        // With its material, the same key loads active and signs.
        let kr =
            Keyring::from_keystore_bytes(&body_with("active", vec![5; 32], "hkdf-v1")).unwrap();
        kr.active().unwrap().sign(b"m");
    }

    #[test]
    fn the_keyring_itself_refuses_a_verify_only_signer() {
        let kr = Keyring::new();
        let vk = Keyring::from_keys([super::super::RootKey::new(
            KeyId::new("k2").unwrap(),
            KeyMaterial::from_slice(&[6; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Inactive,
            0,
        )])
        .unwrap()
        .key_info("k2")
        .unwrap()
        .public_key;
        let entry = KeyEntry::public_only(KeyId::new("k2").unwrap(), vk).unwrap();
        let meta = Meta {
            state: KeyState::Active,
            create_time: 0,
            publish_time: 0,
            retired_time: 0,
        };
        let e = kr.insert_entries(vec![(entry, meta)]).unwrap_err();
        assert_eq!(e.code(), crate::ResultCode::InvalidArgument, "{e}");
        assert!(kr.is_empty());
    }
}
