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

use std::io::Read;
use std::path::Path;

use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::{KeyDerivation, KeyEntry, KeyId, KeyMaterial, KeyState, Keyring, Meta};
use crate::codec::{self, Bin, DecodeLimits, wire_struct};
use crate::error::{DecodeError, Error, Result};
use crate::persist;

/// The `Format` field of every keystore file.
pub const KEYSTORE_FORMAT: &str = "workload-identity-keystore";
/// The newest keystore version this library reads and the one it writes.
pub const KEYSTORE_VERSION: u32 = 1;
/// Largest keystore file accepted (about 50,000 keys).
const MAX_FILE_BYTES: u64 = 16 << 20;

wire_struct! {
    /// The keystore file: stable across versions.
    pub struct Envelope {
        /// The msgpack-encoded [`Body`].
        pub body: Bin => "Body",
        /// Always [`KEYSTORE_FORMAT`].
        pub format: String => "Format",
        /// SHA-256 of `body`.
        pub sha256: Bin => "SHA256",
        /// The body's format version.
        pub version: u32 => "Version",
    }
}

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

fn limits() -> DecodeLimits {
    DecodeLimits::default().max_bytes(MAX_FILE_BYTES as usize)
}

fn state_from_name(name: &str) -> Option<KeyState> {
    [
        KeyState::Active,
        KeyState::Inactive,
        KeyState::Prepublished,
        KeyState::Deprecated,
    ]
    .into_iter()
    .find(|s| s.name() == name)
}

/// Builds a keyring entry from a stored key, checking it whole.
fn entry_of(i: usize, k: &StoredKey) -> Result<(KeyEntry, Meta)> {
    let at = |field: &str| format!("Keys[{i}].{field}");
    let id = KeyId::new(&k.id).map_err(|e| corrupt(at("ID"), e.to_string()))?;
    let state = state_from_name(&k.state)
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
    /// Encodes every key (material included) as a keystore file's bytes.
    pub(crate) fn to_keystore_bytes(&self) -> Result<Zeroizing<Vec<u8>>> {
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
        let body = Body { keys };
        let body_bytes = codec::encode_secret(&body, hint)?;
        let sha = Sha256::digest(&*body_bytes);
        let envelope = Envelope {
            body: Bin::new(body_bytes.to_vec()),
            format: KEYSTORE_FORMAT.into(),
            sha256: Bin::new(sha.to_vec()),
            version: KEYSTORE_VERSION,
        };
        codec::encode_secret(&envelope, body_bytes.len() + 128)
    }

    /// Saves every key to `path` (mode 0600), crash-safely: after a crash at any
    /// point the file holds the previous keyring or this one, whole.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let bytes = self.to_keystore_bytes()?;
        persist::replace_file(path.as_ref(), &bytes)
    }

    /// Loads a keyring saved by [`Keyring::save`]. A truncated, corrupted or
    /// foreign file, or one from a newer format version, is an error; no partial
    /// keyring is ever returned.
    pub fn load(path: impl AsRef<Path>) -> Result<Keyring> {
        let path = path.as_ref();
        let io = |e| Error::Io {
            context: format!("reading keystore {}", path.display()),
            source: e,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut bytes = Zeroizing::new(Vec::new());
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(corrupt(
                String::new(),
                format!(
                    "{} is larger than the {MAX_FILE_BYTES}-byte limit",
                    path.display()
                ),
            ));
        }
        Keyring::from_keystore_bytes(&bytes)
    }

    /// Decodes a keystore file's bytes (see [`Keyring::load`]).
    pub fn from_keystore_bytes(bytes: &[u8]) -> Result<Keyring> {
        let envelope: Envelope = codec::decode_with(bytes, &limits()).map_err(|e| {
            corrupt(
                String::new(),
                format!("not a workload-identity keystore or truncated: {e}"),
            )
        })?;
        if envelope.format != KEYSTORE_FORMAT {
            return Err(corrupt(
                "Format".into(),
                format!(
                    "not a workload-identity keystore: Format is {:?}, expected {KEYSTORE_FORMAT:?}",
                    crate::error::truncate_for_message(&envelope.format)
                ),
            ));
        }
        match envelope.version {
            KEYSTORE_VERSION => {}
            v if v > KEYSTORE_VERSION => {
                return Err(corrupt(
                    "Version".into(),
                    format!(
                        "keystore format version {v} is newer than this library reads (up to {KEYSTORE_VERSION}); upgrade workload-identity"
                    ),
                ));
            }
            v => {
                return Err(corrupt(
                    "Version".into(),
                    format!(
                        "keystore format version {v} is not valid (expected {KEYSTORE_VERSION})"
                    ),
                ));
            }
        }
        let sha = Sha256::digest(envelope.body.as_slice());
        if !bool::from(sha.as_slice().ct_eq(envelope.sha256.as_slice())) {
            return Err(corrupt(
                "SHA256".into(),
                "checksum mismatch: the keystore is corrupted",
            ));
        }
        let body: Body = codec::decode_with(envelope.body.as_slice(), &limits())?;
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
