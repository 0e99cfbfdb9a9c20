//! Saving and loading a keyring: a versioned msgpack file with a checksum,
//! replaced crash-safely.
//!
//! # Format (version 2)
//!
//! The file is one msgpack map, the envelope, whose layout never changes between
//! versions: `Format` (`"workload-identity-keystore"`), `Version` (2), `Body`
//! (bin: the msgpack-encoded key list) and `SHA256` (bin: SHA-256 of `Body`). The
//! body is `{"Keys": [...]}`, each key a map of `ID`, `Algorithm` (`EdDSA`,
//! `ES256` or `RS256`), `Material` (bin: 32 bytes for EdDSA and ES256, the
//! PKCS#8 DER private key for RS256; empty for a verify-only key), `PublicKey`
//! (bin: the 32-byte Ed25519 key, the 65-byte uncompressed P-256 point
//! `04 || x || y`, or the RSA modulus, whose exponent is always 65537),
//! `Derivation` (`hkdf-v1`, `nomad-raw-seed` or `pkcs8`; empty for a
//! verify-only key), `State`, `CreateTime`, `PublishTime` and `RetiredTime`
//! (Unix seconds).
//!
//! Version 1, written before keys had algorithms, is the same without
//! `Algorithm`: it still loads, every key as EdDSA (a committed fixture,
//! `tests/vectors/keystore-v1.bin`, proves it). A version 1 file that names an
//! algorithm, or a version 2 file that does not, is refused.
//!
//! Loading checks, in order: the envelope decodes, `Format` is ours, `Version` is
//! one this library reads, the checksum matches, the body decodes, and every key
//! is valid — including that its material makes exactly the stored public key.
//! Any failure is an error and no keyring is returned: never a partial one.
//! Files are written with mode 0600 through [`crate::storage::atomic_file`]'s
//! temporary-file-and-rename, so a crash leaves the old or the new file, whole.

use std::path::Path;

use ed25519_dalek::VerifyingKey;

use super::{
    Algorithm, KeyDerivation, KeyEntry, KeyId, KeyMaterial, KeyState, Keyring, Meta, PublicKey,
};
use crate::codec::{Bin, wire_struct};
use crate::error::{DecodeError, Error, Result};
use crate::storage::atomic_file::FileAccess;
use crate::storage::envelope::EnvelopeFormat;

/// The `Format` field of every keystore file.
pub const KEYSTORE_FORMAT: &str = "workload-identity-keystore";
/// The newest keystore version this library reads and the one it writes.
pub const KEYSTORE_VERSION: u32 = 2;
/// The keystore's envelope format.
const ENVELOPE: EnvelopeFormat = EnvelopeFormat {
    format: KEYSTORE_FORMAT,
    version: KEYSTORE_VERSION,
    oldest: 1,
    what: "keystore",
};

wire_struct! {
    /// The body (versions 1 and 2).
    pub(crate) struct Body {
        /// The keys, oldest first.
        pub(crate) keys: Vec<StoredKey> => "Keys",
    }
}

wire_struct! {
    /// One key in a body.
    pub(crate) struct StoredKey {
        /// `EdDSA`, `ES256` or `RS256` (version 2; absent in version 1).
        pub(crate) algorithm: String => "Algorithm",
        /// Unix seconds.
        pub(crate) create_time: i64 => "CreateTime",
        /// `hkdf-v1`, `nomad-raw-seed` or `pkcs8` (empty for verify-only keys).
        pub(crate) derivation: String => "Derivation",
        /// The key ID.
        pub(crate) id: String => "ID",
        /// The material (32 bytes, or PKCS#8 DER), or empty for a verify-only key.
        pub(crate) material: Bin => "Material",
        /// The public key (see the module docs for each algorithm's form).
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

/// The stored public key of a key of `alg`.
fn public_of(alg: Algorithm, bytes: &[u8]) -> std::result::Result<PublicKey, String> {
    match alg {
        Algorithm::EdDsa => {
            let b: [u8; 32] = bytes
                .try_into()
                .map_err(|_| format!("an Ed25519 key is 32 bytes, got {}", bytes.len()))?;
            VerifyingKey::from_bytes(&b)
                .map(PublicKey::Ed25519)
                .map_err(|_| "not a valid Ed25519 point".into())
        }
        Algorithm::Es256 => match bytes {
            [4, rest @ ..] if rest.len() == 64 => {
                let mut x = [0u8; 32];
                let mut y = [0u8; 32];
                x.copy_from_slice(&rest[..32]);
                y.copy_from_slice(&rest[32..]);
                Ok(PublicKey::P256 { x, y })
            }
            _ => Err(format!(
                "a P-256 key is a 65-byte uncompressed point (04 || x || y), got {} bytes",
                bytes.len()
            )),
        },
        Algorithm::Rs256 => Ok(PublicKey::Rsa { n: bytes.to_vec() }),
    }
}

/// Builds a keyring entry from a stored key of a version `version` file,
/// checking it whole.
fn entry_of(version: u32, i: usize, k: &StoredKey) -> Result<(KeyEntry, Meta)> {
    let at = |field: &str| format!("Keys[{i}].{field}");
    let id = KeyId::new(&k.id).map_err(|e| corrupt(at("ID"), e.to_string()))?;
    let state = KeyState::from_name(&k.state)
        .ok_or_else(|| corrupt(at("State"), format!("unknown key state {:?}", k.state)))?;
    let alg = match (version, k.algorithm.as_str()) {
        (1, "") => Algorithm::EdDsa,
        (1, named) => {
            return Err(corrupt(
                at("Algorithm"),
                format!(
                    "a version 1 keystore has no algorithms, but this key names {:?}",
                    crate::error::truncate_for_message(named)
                ),
            ));
        }
        (_, name) => Algorithm::from_name(name).ok_or_else(|| {
            corrupt(
                at("Algorithm"),
                format!(
                    "unknown algorithm {:?}: expected \"EdDSA\", \"ES256\" or \"RS256\"",
                    crate::error::truncate_for_message(name)
                ),
            )
        })?,
    };
    let public =
        public_of(alg, k.public_key.as_slice()).map_err(|why| corrupt(at("PublicKey"), why))?;
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
        let entry = KeyEntry::public_only(id, public)
            .map_err(|e| corrupt(at("PublicKey"), e.to_string()))?;
        return Ok((entry, meta));
    }
    let derivation = KeyDerivation::from_name(&k.derivation).ok_or_else(|| {
        corrupt(
            at("Derivation"),
            format!("unknown derivation {:?}", k.derivation),
        )
    })?;
    let material = match derivation {
        KeyDerivation::Pkcs8 => KeyMaterial::from_pkcs8_der(k.material.as_slice()),
        _ => KeyMaterial::from_slice(k.material.as_slice()),
    }
    .map_err(|e| corrupt(at("Material"), e.to_string()))?;
    let root = super::RootKey {
        id,
        alg,
        material,
        derivation,
        state,
        create_time: k.create_time,
        publish_time: k.publish_time,
        retired_time: k.retired_time,
    };
    let entry = KeyEntry::from_root(&root).map_err(|e| corrupt(at("Material"), e.to_string()))?;
    if entry.public_key() != &public {
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
                algorithm: info.algorithm.name().into(),
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
                public_key: Bin::new(info.public_key.to_bytes()),
                publish_time: info.publish_time,
                retired_time: info.retired_time,
                state: info.state.name().into(),
            })
            .collect();
        let hint = 64
            + keys
                .iter()
                .map(|k| {
                    256 + k.id.len() + k.material.as_slice().len() + k.public_key.as_slice().len()
                })
                .sum::<usize>();
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
        let (version, body) = ENVELOPE.load_versioned(path.as_ref(), access)?;
        Keyring::from_body(version, body)
    }

    /// Decodes a keystore file's bytes (see [`Keyring::load`]).
    pub fn from_keystore_bytes(bytes: &[u8]) -> Result<Keyring> {
        let (version, body) = ENVELOPE.decode_versioned(bytes)?;
        Keyring::from_body(version, body)
    }

    fn from_body(version: u32, body: Body) -> Result<Keyring> {
        let entries = body
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| entry_of(version, i, k))
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
        let public = kr.key_info("k1").unwrap().public_key.to_bytes();
        let body = Body {
            keys: vec![StoredKey {
                algorithm: "EdDSA".into(),
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
        kr.active().unwrap().sign(b"m").unwrap();
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
