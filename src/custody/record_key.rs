//! The record key: what authenticates the facts the KEK does not wrap (a
//! key's state, purpose, algorithm and times, the policy, the bundle
//! sequence, which keys there are), so that someone who can write the
//! records but holds no KEK cannot change what a process follows.
//!
//! It is 32 random bytes, made once per keyring and stored wrapped by the
//! KEK in the `Wrapping` map (`RecordKey`), with associated data
//! [`RECORD_KEY_AAD`] 0x00 KekID; any KEK (a local one, Transit) can wrap it,
//! and a process unwraps it once when it opens the keyring. A record's MAC
//! is HMAC-SHA256 under it of [`RECORD_KEY_AAD`] 0x00 the record's name 0x00
//! its bytes, so a MAC made for one record (one etcd key name) never passes
//! for another.

use aws_lc_rs::hmac;
use zeroize::Zeroizing;

use super::KeyWrapper;
use crate::error::{Error, Result};

/// The domain of every record key use (version 1).
pub(crate) const RECORD_KEY_AAD: &str = "workload-identity/records/v1";

/// Length of the record key and of a MAC.
pub(crate) const RECORD_KEY_LEN: usize = 32;

/// A keyring's record key, unwrapped.
pub(crate) struct RecordKey {
    key: hmac::Key,
    /// The bytes, for wrapping under another KEK.
    bytes: Zeroizing<[u8; RECORD_KEY_LEN]>,
}

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordKey([redacted])")
    }
}

/// The associated data the record key is wrapped with under `kek_id`.
fn wrap_aad(kek_id: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(RECORD_KEY_AAD.len() + 1 + kek_id.len());
    aad.extend_from_slice(RECORD_KEY_AAD.as_bytes());
    aad.push(0);
    aad.extend_from_slice(kek_id.as_bytes());
    aad
}

impl RecordKey {
    fn from_bytes(bytes: Zeroizing<[u8; RECORD_KEY_LEN]>) -> RecordKey {
        RecordKey {
            key: hmac::Key::new(hmac::HMAC_SHA256, bytes.as_slice()),
            bytes,
        }
    }

    /// A new random record key.
    pub(crate) fn generate() -> Result<RecordKey> {
        let mut bytes = Zeroizing::new([0u8; RECORD_KEY_LEN]);
        getrandom::fill(bytes.as_mut_slice()).map_err(|e| Error::Io {
            context: "drawing a record key".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        Ok(RecordKey::from_bytes(bytes))
    }

    /// The key wrapped by `wrapper` (the `RecordKey` of a `Wrapping` map).
    pub(crate) fn wrap(&self, wrapper: &dyn KeyWrapper) -> Result<Vec<u8>> {
        wrapper.wrap(self.bytes.as_slice(), &wrap_aad(wrapper.kek_id()))
    }

    /// The key a `Wrapping` map's `RecordKey` holds, unwrapped by
    /// `wrapper`; `KeyCustody` when it does not unwrap (another KEK, or a
    /// value nobody with this KEK wrote) or is not 32 bytes.
    pub(crate) fn unwrap(
        wrapper: &dyn KeyWrapper,
        wrapped: &[u8],
        what: &str,
    ) -> Result<RecordKey> {
        let plain = wrapper
            .unwrap(wrapped, &wrap_aad(wrapper.kek_id()))
            .map_err(|e| Error::KeyCustody {
                custodian: format!("KEK {}", wrapper.kek_id()),
                reason: format!(
                    "the record key of the {what} could not be unwrapped ({e}): its records cannot be authenticated, so none is followed"
                ),
            })?;
        let bytes: [u8; RECORD_KEY_LEN] =
            plain.as_slice().try_into().map_err(|_| Error::KeyCustody {
                custodian: format!("KEK {}", wrapper.kek_id()),
                reason: format!(
                    "the record key of the {what} unwrapped to {} bytes, expected {RECORD_KEY_LEN}",
                    plain.len()
                ),
            })?;
        Ok(RecordKey::from_bytes(Zeroizing::new(bytes)))
    }

    fn input(name: &str, bytes: &[u8]) -> Vec<u8> {
        let mut input = Vec::with_capacity(RECORD_KEY_AAD.len() + name.len() + bytes.len() + 2);
        input.extend_from_slice(RECORD_KEY_AAD.as_bytes());
        input.push(0);
        input.extend_from_slice(name.as_bytes());
        input.push(0);
        input.extend_from_slice(bytes);
        input
    }

    /// The MAC of record `name` holding `bytes`.
    pub(crate) fn mac(&self, name: &str, bytes: &[u8]) -> Vec<u8> {
        hmac::sign(&self.key, &Self::input(name, bytes))
            .as_ref()
            .to_vec()
    }

    /// Whether `mac` is the MAC of record `name` holding `bytes` (compared
    /// in constant time).
    pub(crate) fn verify(&self, name: &str, bytes: &[u8], mac: &[u8]) -> bool {
        hmac::verify(&self.key, &Self::input(name, bytes), mac).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::custody::KekFile;

    #[test]
    fn a_mac_is_bound_to_the_key_the_name_and_the_bytes() {
        let kek = KekFile::from_bytes(&[7u8; 32]).unwrap();
        let rk = RecordKey::generate().unwrap();
        let mac = rk.mac("keys/k1", b"record");
        assert_eq!(mac.len(), 32);
        assert!(rk.verify("keys/k1", b"record", &mac));
        assert!(!rk.verify("keys/k2", b"record", &mac), "another name");
        assert!(!rk.verify("keys/k1", b"recorD", &mac), "other bytes");
        assert!(!rk.verify("keys/k1\0", b"record", &mac[..31]), "a cut MAC");
        // Wrapped and unwrapped, it is the same key; under another KEK it
        // does not unwrap.
        let wrapped = rk.wrap(&kek).unwrap();
        let again = RecordKey::unwrap(&kek, &wrapped, "test").unwrap();
        assert!(again.verify("keys/k1", b"record", &mac));
        let other = KekFile::from_bytes(&[8u8; 32]).unwrap();
        let e = RecordKey::unwrap(&other, &wrapped, "test").unwrap_err();
        assert!(e.to_string().contains("could not be unwrapped"), "{e}");
        // HMAC-SHA256 of the documented input, as any implementation computes it.
        let fixed = RecordKey::from_bytes(Zeroizing::new([1u8; 32]));
        let by_hand = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &[1u8; 32]),
            b"workload-identity/records/v1\0policy\0abc",
        );
        assert_eq!(fixed.mac("policy", b"abc"), by_hand.as_ref());
    }
}
