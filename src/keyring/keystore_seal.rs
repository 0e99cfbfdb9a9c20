//! A wrapped keystore's (version 3) authenticated metadata: the KEK wraps
//! each key's material with its ID and algorithm, but not its state,
//! purpose or times, the policy, the bundle sequence, nor which keys the
//! file holds. The body carries a record key wrapped by the KEK
//! (`Wrapping.RecordKey`, see [`crate::custody`]) and a `MAC`: HMAC-SHA256
//! under it of the body encoded with `MAC` absent, for the record name
//! [`KEYSTORE_RECORD`]. A body whose MAC does not verify is refused; one
//! written before bodies carried it loads only when
//! [`KeystoreLoadOptions::allow_unauthenticated_metadata`] says so
//! (`wid keyring rewrap` writes it back sealed).
//!
//! [`KeystoreLoadOptions::allow_unauthenticated_metadata`]: super::KeystoreLoadOptions::allow_unauthenticated_metadata

use super::keystore::Body;
use crate::codec::{self, Bin};
use crate::custody::{KeyWrapper, RecordKey, Wrapping};
use crate::error::{Error, Result};

/// The record name a keystore body's MAC is made for.
pub(crate) const KEYSTORE_RECORD: &str = "keystore";

/// The bytes a body's MAC covers.
fn unsealed_bytes(body: &Body) -> Result<Vec<u8>> {
    let mut copy = body.clone();
    copy.mac = None;
    codec::encode(&copy)
}

/// Seals `body` (its keys wrapped already) under `wrapper`: `key`, or a new
/// record key, wrapped into its `Wrapping`, then its MAC.
pub(crate) fn seal(
    body: &mut Body,
    wrapper: &dyn KeyWrapper,
    key: Option<RecordKey>,
) -> Result<()> {
    let key = match key {
        Some(k) => k,
        None => RecordKey::generate()?,
    };
    let wrapping = body.wrapping.get_or_insert_with(|| Wrapping::of(wrapper));
    wrapping.record_key = Some(Bin::new(key.wrap(wrapper)?));
    let bytes = unsealed_bytes(body)?;
    body.mac = Some(Bin::new(key.mac(KEYSTORE_RECORD, &bytes)));
    Ok(())
}

/// Checks a version-3 body's MAC with `wrapper` (after the `Wrapping` map
/// was checked to name it); returns its record key, or `None` for a body
/// of the format before when `allow_unauthenticated` says so.
pub(crate) fn check(
    body: &Body,
    wrapper: &dyn KeyWrapper,
    allow_unauthenticated: bool,
) -> Result<Option<RecordKey>> {
    let custody = |reason: String| Error::KeyCustody {
        custodian: format!("KEK {}", wrapper.kek_id()),
        reason,
    };
    let wrapped = body.wrapping.as_ref().and_then(|w| w.record_key.as_ref());
    let (Some(wrapped), Some(mac)) = (wrapped, body.mac.as_ref()) else {
        if wrapped.is_none() && body.mac.is_none() && allow_unauthenticated {
            return Ok(None);
        }
        return Err(custody(
            "the keystore's key states, purposes, times and policy are not authenticated (a keystore written before they carried a MAC under the KEK, or one whose MAC was taken out): anyone able to write the file could change them unseen. Seal it once with `wid keyring rewrap --keystore FILE` and its KEK, after checking `wid keyring list` shows the keys as they should be".into(),
        ));
    };
    let key = RecordKey::unwrap(wrapper, wrapped.as_slice(), "keystore")?;
    if !key.verify(KEYSTORE_RECORD, &unsealed_bytes(body)?, mac.as_slice()) {
        return Err(custody(
            "the keystore's MAC does not verify: its key states, purposes, times, policy or list of keys were changed by someone without the KEK; it is refused (restore it from a backup)".into(),
        ));
    }
    Ok(Some(key))
}
