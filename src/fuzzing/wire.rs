//! The msgpack wire types and JWKS import: what decodes re-encodes to itself.

use super::keystore::keystore_load;
use crate::codec::{self, WireType};
use crate::keyring::Keyring;
use crate::model::{Allocation, ConsulExposeConfig, IssueRequest, WorkloadIdentity};

fn round_trip<T: WireType + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = codec::decode::<T>(data) {
        let again =
            codec::encode(&v).unwrap_or_else(|e| panic!("a decoded value must encode: {e}"));
        let back: T =
            codec::decode(&again).unwrap_or_else(|e| panic!("our encoding must decode: {e}"));
        assert_eq!(back, v, "re-encoding changed the value");
    }
}

/// Every msgpack wire type, and the keystore.
pub fn msgpack_decode(data: &[u8]) {
    round_trip::<Allocation>(data);
    round_trip::<WorkloadIdentity>(data);
    round_trip::<IssueRequest>(data);
    round_trip::<ConsulExposeConfig>(data);
    round_trip::<crate::model::NodeIdentityRequest>(data);
    keystore_load(data);
}

/// JWKS import; an imported set re-exports and re-imports to the same keys.
pub fn jwks_import(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((kr, _)) = Keyring::from_jwks(text) {
        let (again, report) = Keyring::from_jwks(&kr.jwks().to_json())
            .unwrap_or_else(|e| panic!("our JWKS must import: {e}"));
        assert!(report.skipped.is_empty());
        assert_eq!(again.keys(), kr.keys());
    }
}
