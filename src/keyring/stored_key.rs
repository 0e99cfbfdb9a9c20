//! A key as the keystore file and the replicated keyring store it: the
//! record's fields, how a key becomes one, and the whole check that turns one
//! back into a key (every field valid, and the material making exactly the
//! stored public key).

use ed25519_dalek::VerifyingKey;

use super::{
    Algorithm, JwsAlgorithm, KeyDerivation, KeyEntry, KeyId, KeyMaterial, KeyPurpose, KeyState,
    Meta, PublicKey,
};
use crate::codec::{Bin, wire_struct};
use crate::custody::associated_data;
use crate::error::{DecodeError, Error, Result, truncate_for_message};

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
        /// The public key (see the keystore module's docs for each algorithm's form).
        pub(crate) public_key: Bin => "PublicKey",
        /// Unix seconds (0 when unset).
        pub(crate) publish_time: i64 => "PublishTime",
        /// Unix seconds (0 when unset).
        pub(crate) retired_time: i64 => "RetiredTime",
        /// `active`, `inactive`, `prepublished` or `deprecated`.
        pub(crate) state: String => "State",
        /// The material wrapped by the body's KEK (version 3 only).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) wrapped: Option<Bin> => "Wrapped",
        /// `wit` for a WIT key; absent (or `bearer`) for a bearer key.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) purpose: Option<String> => "Purpose",
    }
}

/// The purpose a stored key's `Purpose` names (absent: bearer).
pub(crate) fn purpose_of(stored: Option<&str>) -> std::result::Result<KeyPurpose, String> {
    match stored {
        None => Ok(KeyPurpose::Bearer),
        Some(name) => KeyPurpose::from_name(name).ok_or_else(|| {
            format!(
                "unknown key purpose {:?}: expected \"bearer\" or \"wit\" (or none, for a bearer key)",
                truncate_for_message(name)
            )
        }),
    }
}

/// How a key's purpose is stored: absent for a bearer key, so bodies of
/// bearer keys are exactly what they were before purposes existed.
pub(crate) fn stored_purpose(purpose: KeyPurpose) -> Option<String> {
    (purpose != KeyPurpose::Bearer).then(|| purpose.name().to_string())
}

pub(super) fn corrupt(path: String, reason: impl Into<String>) -> Error {
    Error::Decode(DecodeError {
        type_name: "keystore",
        path,
        reason: reason.into(),
    })
}

/// The stored public key of a key of `alg`.
pub(super) fn public_of(alg: JwsAlgorithm, bytes: &[u8]) -> std::result::Result<PublicKey, String> {
    let Some(alg) = alg.signing() else {
        return PublicKey::from_stored(alg, bytes);
    };
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
pub(crate) fn entry_of(version: u32, i: usize, k: &StoredKey) -> Result<(KeyEntry, Meta)> {
    let at = |field: &str| format!("Keys[{i}].{field}");
    let id = KeyId::new(&k.id).map_err(|e| corrupt(at("ID"), e.to_string()))?;
    let state = KeyState::from_name(&k.state)
        .ok_or_else(|| corrupt(at("State"), format!(
                "unknown key state {:?}: expected \"active\", \"inactive\", \"prepublished\" or \"deprecated\"",
                crate::error::truncate_for_message(&k.state)
            )))?;
    let alg = match (version, k.algorithm.as_str()) {
        (1, "") => JwsAlgorithm::EdDsa,
        (1, named) => {
            return Err(corrupt(
                at("Algorithm"),
                format!(
                    "a version 1 keystore has no algorithms, but this key names {:?}",
                    crate::error::truncate_for_message(named)
                ),
            ));
        }
        (_, name) => JwsAlgorithm::from_name(name).ok_or_else(|| {
            corrupt(
                at("Algorithm"),
                format!(
                    "unknown algorithm {:?}: expected \"EdDSA\", \"ES256\" or \"RS256\" (or, for a verify-only key, {})",
                    crate::error::truncate_for_message(name),
                    JwsAlgorithm::VERIFY_ONLY_NAMES
                ),
            )
        })?,
    };
    let purpose = purpose_of(k.purpose.as_deref()).map_err(|why| corrupt(at("Purpose"), why))?;
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
        let entry = KeyEntry::public_only(id, purpose, public)
            .map_err(|e| corrupt(at("PublicKey"), e.to_string()))?;
        return Ok((entry, meta));
    }
    // A key with material signs, so its algorithm must be a signing one.
    let Some(alg) = alg.signing() else {
        return Err(corrupt(
            at("Material"),
            format!(
                "key {id} is {alg}, a verify-only algorithm, but has private material: only EdDSA, ES256 and RS256 keys are held with material"
            ),
        ));
    };
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
        purpose,
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

/// A key as a body stores it: `material` in plaintext (empty for a
/// verify-only key), nothing wrapped yet.
pub(crate) fn stored_key(info: &super::KeyInfo, material: Option<&KeyMaterial>) -> StoredKey {
    StoredKey {
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
        wrapped: None,
        purpose: stored_purpose(info.purpose),
    }
}

/// The associated data a stored key's material is wrapped with.
pub(crate) fn stored_aad(k: &StoredKey) -> Result<Vec<u8>> {
    let id = KeyId::new(&k.id).map_err(|e| corrupt("ID".into(), e.to_string()))?;
    let alg = Algorithm::from_name(&k.algorithm).ok_or_else(|| {
        corrupt(
            "Algorithm".into(),
            format!(
                "unknown algorithm {:?}: expected \"EdDSA\", \"ES256\" or \"RS256\"",
                truncate_for_message(&k.algorithm)
            ),
        )
    })?;
    Ok(associated_data(&id, alg))
}
