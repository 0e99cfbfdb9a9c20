//! Keys whose private half never enters this process: an [`ExternalSigner`]
//! (a KMS, such as Vault/OpenBao Transit) signs, the keyring verifies.

use std::fmt;
use std::sync::Arc;

use super::{KeyEntry, KeyId, KeyPurpose, KeyState, Keyring, Meta, PublicKey, bad_key_error};
use crate::error::Result;
use crate::keyring::public_key::Checker;

/// Signs with a private key held elsewhere (a KMS). The keyring holds only
/// the public key; every signature is checked against it before a token
/// leaves the library, so a signer that answers with another key never
/// yields a token.
pub trait ExternalSigner: Send + Sync + fmt::Debug {
    /// Signs `message` (the JWS signing input) with the key's algorithm and
    /// returns the JWS signature bytes (Ed25519: 64 bytes; ES256: `r || s`,
    /// 64 bytes; RS256: as long as the modulus). Failures of the KMS are
    /// [`crate::Error::KeyCustody`].
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>>;

    /// Where the key lives, for [`crate::KeyInfo::external`] and messages
    /// (never a secret), e.g. `transit:transit/wid-es256 v2`.
    fn describe(&self) -> String;

    /// What the key signs (bearer tokens unless the signer says otherwise):
    /// a KMS key kept for WITs answers [`KeyPurpose::Wit`], and the keyring
    /// then publishes it only in the WIT key set.
    fn purpose(&self) -> KeyPurpose {
        KeyPurpose::Bearer
    }
}

impl Keyring {
    /// Inserts a key held by an external signer: `public` is its public key
    /// (its algorithm is the key's), `signer` signs with it. States work as
    /// for local keys (a prepublished key signs from `publish_time`; at most
    /// one active key per (purpose, algorithm) pair; the purpose is the
    /// signer's [`ExternalSigner::purpose`]). Such keys are published in the
    /// JWKS (or, WIT keys, the WIT key set) and
    /// verify locally; [`Keyring::save`] leaves them out (they live in the
    /// KMS; whatever synchronizes them, such as `TransitSigner::sync`, brings
    /// them back).
    pub fn insert_external(
        &self,
        id: KeyId,
        public: PublicKey,
        signer: Arc<dyn ExternalSigner>,
        state: KeyState,
        create_time: i64,
        publish_time: i64,
    ) -> Result<()> {
        let check = Checker::new(public).map_err(|why| bad_key_error(&id, why))?;
        let entry = KeyEntry {
            id,
            purpose: signer.purpose(),
            check,
            secret: None,
            external: Some(signer),
            headers: Default::default(),
        };
        let meta = Meta {
            state,
            create_time,
            publish_time,
            retired_time: 0,
        };
        self.insert_entries(vec![(entry, meta)])
    }
}
