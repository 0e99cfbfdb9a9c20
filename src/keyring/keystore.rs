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
//! Files are written with mode 0600 through [`crate::persist`]'s
//! temporary-file-and-rename, so a crash leaves the old or the new file, whole.

use std::path::Path;

use ed25519_dalek::VerifyingKey;

use super::{KeyDerivation, KeyEntry, KeyId, KeyMaterial, KeyState, Keyring, Meta};
use crate::codec::{Bin, wire_struct};
use crate::error::{DecodeError, Error, Result};
use crate::sealed::SealedFormat;

/// The `Format` field of every keystore file.
pub const KEYSTORE_FORMAT: &str = "workload-identity-keystore";
/// The newest keystore version this library reads and the one it writes.
pub const KEYSTORE_VERSION: u32 = 1;
/// The keystore's sealed-file format.
const SEALED: SealedFormat = SealedFormat {
    format: KEYSTORE_FORMAT,
    version: KEYSTORE_VERSION,
    what: "keystore",
};

wire_struct! {
    /// Version 1 body.
    pub struct Body {
        /// The keys, oldest first.
        pub keys: Vec<StoredKey> => "Keys",
    }
}

wire_struct! {
    /// One key in a version 1 body.
    pub struct StoredKey {
        /// Unix seconds.
        pub create_time: i64 => "CreateTime",
        /// `hkdf-v1` or `nomad-raw-seed` (empty for verify-only keys).
        pub derivation: String => "Derivation",
        /// The key ID.
        pub id: String => "ID",
        /// 32 bytes of material, or empty for a verify-only key.
        pub material: Bin => "Material",
        /// The Ed25519 public key (32 bytes).
        pub public_key: Bin => "PublicKey",
        /// Unix seconds (0 when unset).
        pub publish_time: i64 => "PublishTime",
        /// Unix seconds (0 when unset).
        pub retired_time: i64 => "RetiredTime",
        /// `active`, `inactive`, `prepublished` or `deprecated`.
        pub state: String => "State",
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
                id: info.id.to_string(),
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
        SEALED.save(path.as_ref(), &body, hint)
    }

    /// Loads a keyring saved by [`Keyring::save`]. A truncated, corrupted or
    /// foreign file, or one from a newer format version, is an error; no partial
    /// keyring is ever returned.
    pub fn load(path: impl AsRef<Path>) -> Result<Keyring> {
        Keyring::from_body(SEALED.load(path.as_ref())?)
    }

    /// Decodes a keystore file's bytes (see [`Keyring::load`]).
    pub fn from_keystore_bytes(bytes: &[u8]) -> Result<Keyring> {
        Keyring::from_body(SEALED.unseal(bytes)?)
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
