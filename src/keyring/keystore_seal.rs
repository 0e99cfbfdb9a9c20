//! A wrapped keystore's (version 3) authenticated metadata: the KEK wraps
//! each key's material with its ID and algorithm, but not its state,
//! purpose or times, the policy, the bundle sequence, nor which keys the
//! file holds. The body carries a record key wrapped by the KEK
//! (`Wrapping.RecordKey`, see [`crate::custody`]) and a `MAC`: HMAC-SHA256
//! under it of the body encoded with `MAC` absent, for the record name
//! [`KEYSTORE_RECORD`]. A body whose MAC does not verify is refused; one
//! written before bodies carried it loads only when
//! [`KeystoreLoadOptions::allow_unauthenticated_metadata`] says so
//! (`wid keyring rewrap` writes it back sealed). `keystore.rs` hands the
//! body's parts here; this file knows nothing of the body itself.
//!
//! [`KeystoreLoadOptions::allow_unauthenticated_metadata`]: super::KeystoreLoadOptions::allow_unauthenticated_metadata

use crate::codec::Bin;
use crate::custody::{KeyWrapper, RecordKey};
use crate::error::{Error, Result};

/// The record name a keystore body's MAC is made for.
pub(crate) const KEYSTORE_RECORD: &str = "keystore";

/// A record key to seal a body with (`key`, or a new one) and its wrapped
/// form, for the body's `Wrapping.RecordKey`.
pub(crate) fn sealing_key(
    wrapper: &dyn KeyWrapper,
    key: Option<RecordKey>,
) -> Result<(RecordKey, Bin)> {
    let key = match key {
        Some(k) => k,
        None => RecordKey::generate()?,
    };
    let wrapped = Bin::new(key.wrap(wrapper)?);
    Ok((key, wrapped))
}

/// The `MAC` of a body whose encoding without it is `unsealed`.
pub(crate) fn mac(key: &RecordKey, unsealed: &[u8]) -> Bin {
    Bin::new(key.mac(KEYSTORE_RECORD, unsealed))
}

/// Checks a version-3 body's `RecordKey` and `MAC` with `wrapper` (after its
/// `Wrapping` map was checked to name it); `unsealed` encodes the body
/// without `MAC`. Returns the record key, or `None` for a body of the format
/// before (neither is there) when `allow_unauthenticated` says so.
pub(crate) fn check(
    record_key: Option<&Bin>,
    mac: Option<&Bin>,
    unsealed: impl FnOnce() -> Result<Vec<u8>>,
    wrapper: &dyn KeyWrapper,
    allow_unauthenticated: bool,
) -> Result<Option<RecordKey>> {
    let custody = |reason: String| Error::KeyCustody {
        custodian: format!("KEK {}", wrapper.kek_id()),
        reason,
    };
    let (Some(wrapped), Some(mac)) = (record_key, mac) else {
        if record_key.is_none() && mac.is_none() && allow_unauthenticated {
            return Ok(None);
        }
        return Err(custody(
            "the keystore's key states, purposes, times and policy are not authenticated (a keystore written before they carried a MAC under the KEK, or one whose MAC was taken out): anyone able to write the file could change them unseen. Seal it once with `wid keyring rewrap --keystore FILE` and its KEK, after checking `wid keyring list` shows the keys as they should be".into(),
        ));
    };
    let key = RecordKey::unwrap(wrapper, wrapped.as_slice(), "keystore")?;
    if !key.verify(KEYSTORE_RECORD, &unsealed()?, mac.as_slice()) {
        return Err(custody(
            "the keystore's MAC does not verify: its key states, purposes, times, policy or list of keys were changed by someone without the KEK; it is refused (restore it from a backup)".into(),
        ));
    }
    Ok(Some(key))
}
