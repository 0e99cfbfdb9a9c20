//! Key custody: root keys wrapped by a key-encryption key (KEK) before they
//! touch a disk.
//!
//! A [`KeyWrapper`] wraps and unwraps one key's material at a time, with
//! associated data that binds the ciphertext to the key's ID and algorithm
//! ([`associated_data`]), so a wrapped key moved onto another ID or algorithm
//! does not unwrap. The keystore's version 3 (see `Keyring::save_wrapped`)
//! stores only wrapped material, with the wrapper's [`KeyWrapper::kind`] and
//! [`KeyWrapper::kek_id`] in its `Wrapping` map, so a reader can say which KEK
//! a keystore needs before it tries one.
//!
//! [`KekFile`] is the local implementation: a 32-byte AES-256-GCM KEK from a
//! 0600 file. Another KMS plugs in by implementing the trait.

mod kek_file;
mod record_key;

use std::fmt;

use zeroize::Zeroizing;

use crate::algorithm::Algorithm;
use crate::codec::wire_struct;
use crate::error::{Error, Result};
use crate::key_id::KeyId;

pub use kek_file::{KEK_LEN, KekFile};
pub(crate) use record_key::RecordKey;

/// The prefix of every key's associated data (version 1 of the wrapping).
pub const WRAP_AAD_PREFIX: &str = "workload-identity/kek/v1";

/// The `Kind` of a keystore wrapped by a local AES-256-GCM KEK ([`KekFile`]).
pub const KIND_AEAD_KEK: &str = "aead-kek";
/// The `Kind` of a keystore wrapped by Vault/OpenBao Transit.
pub const KIND_TRANSIT: &str = "transit";

/// The associated data a key's material is wrapped with: the ASCII of
/// [`WRAP_AAD_PREFIX`], a zero byte, the key ID, a zero byte, and the
/// algorithm's JOSE name (`EdDSA`, `ES256` or `RS256`). Key IDs never contain
/// a zero byte, so the encoding is unambiguous.
pub fn associated_data(kid: &KeyId, alg: Algorithm) -> Vec<u8> {
    let mut aad =
        Vec::with_capacity(WRAP_AAD_PREFIX.len() + kid.as_str().len() + alg.name().len() + 2);
    aad.extend_from_slice(WRAP_AAD_PREFIX.as_bytes());
    aad.push(0);
    aad.extend_from_slice(kid.as_str().as_bytes());
    aad.push(0);
    aad.extend_from_slice(alg.name().as_bytes());
    aad
}

/// Wraps and unwraps root-key material with a key-encryption key that lives
/// elsewhere: a local file ([`KekFile`]), Vault/OpenBao Transit, or any KMS a
/// user plugs in.
///
/// Implementations must be authenticated encryption: `unwrap` fails (never
/// returns other bytes) when the wrapped bytes, the associated data or the
/// KEK differ from those of the `wrap` that made them. Errors never carry
/// material; use [`Error::KeyCustody`] for failures of the KEK or the KMS.
pub trait KeyWrapper: Send + Sync + fmt::Debug {
    /// The keystore's `Wrapping.Kind` for this wrapper: [`KIND_AEAD_KEK`],
    /// [`KIND_TRANSIT`], or a name of your own for another KMS.
    fn kind(&self) -> &str;

    /// The identifier of the KEK (`Wrapping.KekID`): it names the KEK without
    /// revealing it, so a reader can tell "wrong KEK" from "tampered".
    fn kek_id(&self) -> &str;

    /// Wraps one key's material, bound to `associated_data`.
    fn wrap(&self, material: &[u8], associated_data: &[u8]) -> Result<Vec<u8>>;

    /// Unwraps what [`KeyWrapper::wrap`] made with the same associated data.
    fn unwrap(&self, wrapped: &[u8], associated_data: &[u8]) -> Result<Zeroizing<Vec<u8>>>;

    /// Unwraps many keys; a KMS with a batch call overrides this to make one
    /// round trip. All or nothing: the first failure is the error, naming
    /// its key.
    fn unwrap_many(&self, items: &[WrapItem<'_>]) -> Result<Vec<Zeroizing<Vec<u8>>>> {
        items
            .iter()
            .map(|it| {
                self.unwrap(it.bytes, it.associated_data)
                    .map_err(|e| it.name_in(e))
            })
            .collect()
    }

    /// Wraps many keys (see [`KeyWrapper::unwrap_many`]).
    fn wrap_many(&self, items: &[WrapItem<'_>]) -> Result<Vec<Vec<u8>>> {
        items
            .iter()
            .map(|it| {
                self.wrap(it.bytes, it.associated_data)
                    .map_err(|e| it.name_in(e))
            })
            .collect()
    }

    /// Wraps again what this wrapper wrapped, with the KEK's newest version
    /// (a KMS that rotates its keys, such as Transit, overrides this so the
    /// material never leaves it); by default unwrap then wrap.
    fn rewrap(&self, wrapped: &[u8], associated_data: &[u8]) -> Result<Vec<u8>> {
        let material = self.unwrap(wrapped, associated_data)?;
        self.wrap(&material, associated_data)
    }
}

/// One key for [`KeyWrapper::wrap_many`] or [`KeyWrapper::unwrap_many`].
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct WrapItem<'a> {
    /// The key's ID (for messages; it is in the associated data too).
    pub key_id: &'a str,
    /// The material to wrap, or the wrapped bytes to unwrap.
    pub bytes: &'a [u8],
    /// See [`associated_data`].
    pub associated_data: &'a [u8],
}

impl fmt::Debug for WrapItem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `bytes` may be material: only its length.
        f.debug_struct("WrapItem")
            .field("key_id", &self.key_id)
            .field("bytes", &format_args!("{} bytes", self.bytes.len()))
            .finish_non_exhaustive()
    }
}

impl<'a> WrapItem<'a> {
    /// An item.
    pub fn new(key_id: &'a str, bytes: &'a [u8], associated_data: &'a [u8]) -> WrapItem<'a> {
        WrapItem {
            key_id,
            bytes,
            associated_data,
        }
    }

    /// `e`, with a key-wrapping failure's reason naming this item's key.
    pub fn name_in(&self, e: Error) -> Error {
        match e {
            Error::KeyCustody { custodian, reason } => Error::KeyCustody {
                custodian,
                reason: format!(
                    "key {:?}: {reason}",
                    crate::error::truncate_for_message(self.key_id)
                ),
            },
            other => other,
        }
    }
}

wire_struct! {
    /// A version-3 keystore body's `Wrapping` map: which KEK wrapped its keys.
    pub(crate) struct Wrapping {
        /// The KEK's identifier ([`KeyWrapper::kek_id`]).
        pub(crate) kek_id: String => "KekID",
        /// [`KeyWrapper::kind`].
        pub(crate) kind: String => "Kind",
        /// The record key, wrapped by the KEK ([`RecordKey`]); absent in
        /// keystores and keyrings written before records were
        /// authenticated.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) record_key: Option<crate::codec::Bin> => "RecordKey",
    }
}

impl Wrapping {
    /// The map for `wrapper`'s KEK.
    pub(crate) fn of(wrapper: &dyn KeyWrapper) -> Wrapping {
        Wrapping {
            kek_id: wrapper.kek_id().to_string(),
            kind: wrapper.kind().to_string(),
            record_key: None,
        }
    }

    /// Whether `wrapper` is the KEK this map names; the error says which KEK
    /// the keystore needs and which one was given.
    pub(crate) fn check(&self, wrapper: &dyn KeyWrapper, what: &str) -> Result<()> {
        if wrapper.kind() != self.kind {
            return Err(Error::KeyCustody {
                custodian: format!("KEK {}", wrapper.kek_id()),
                reason: format!(
                    "the {what} is wrapped by a {:?} KEK ({:?}), but a {:?} KEK was given",
                    crate::error::truncate_for_message(&self.kind),
                    crate::error::truncate_for_message(&self.kek_id),
                    wrapper.kind()
                ),
            });
        }
        if wrapper.kek_id() != self.kek_id {
            return Err(Error::KeyCustody {
                custodian: format!("KEK {}", wrapper.kek_id()),
                reason: format!(
                    "the {what} is wrapped by KEK {:?}, not by the given KEK {:?}: give the KEK it was wrapped with",
                    crate::error::truncate_for_message(&self.kek_id),
                    wrapper.kek_id()
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn associated_data_is_prefix_nul_kid_nul_alg() {
        let kid = KeyId::new("k-1").unwrap();
        assert_eq!(
            associated_data(&kid, Algorithm::Es256),
            b"workload-identity/kek/v1\0k-1\0ES256".to_vec()
        );
        assert_eq!(
            associated_data(&kid, Algorithm::EdDsa),
            b"workload-identity/kek/v1\0k-1\0EdDSA".to_vec()
        );
    }
}
