//! Requests for the C ABI tests: the committed Go-encoded task request
//! (`tests/vectors/msgpack/issue_request_task.msgpack`: allocation
//! `ALLOC_ID`, audiences `vault.io` and `consul.io`, an hour's TTL), tokens
//! issued from it at `identity::NOW`, a request carrying a workload key's
//! JWK as its `ProofKey`, and the node identity request.

use workload_identity::model::{Node, NodeIdentityRequest, ProofKey};
use workload_identity_ffi::*;

use super::bytes::text_of;
use super::identity::NOW;
use super::strings::s;

/// The node of [`node_request`].
pub const NODE: &str = "da86421c-7de9-85e4-2f50-3b2bf95102c1";

/// The committed Go-encoded task request.
pub fn task_vector() -> Vec<u8> {
    super::go_vector("issue_request_task.msgpack")
}

/// A token `kr` issues (`wid_issue`) from [`task_vector`] at `NOW`.
pub fn issue(kr: *const wid_keyring) -> String {
    let req = task_vector();
    // SAFETY: the request is valid for its length, `out` a valid output.
    text_of(|out| unsafe { wid_issue(kr, req.as_ptr(), req.len(), NOW, out) })
}

/// A token `kr` issues from [`task_vector`] at `NOW` with `iss` as its
/// issuer (`wid_issue_with_issuer`; "" for none).
pub fn issue_with_issuer(kr: *const wid_keyring, iss: &str) -> String {
    let (req, (i, il)) = (task_vector(), s(iss));
    let (r, rl) = (req.as_ptr(), req.len());
    // SAFETY: the request and issuer are valid for their lengths, `out` a
    // valid output.
    text_of(|out| unsafe { wid_issue_with_issuer(kr, r, rl, i, il, NOW, out) })
}

/// The `ProofKey` of a workload key's public `jwk` (its members under the
/// codec's names; an absent one is "").
pub fn proof_key(jwk: &serde_json::Value) -> ProofKey {
    let member = |m: &str| jwk[m].as_str().unwrap_or("").to_string();
    ProofKey {
        alg: member("alg"),
        crv: member("crv"),
        kty: member("kty"),
        x: member("x"),
        y: member("y"),
    }
}

/// The sample task request carrying `jwk` as its `ProofKey`, msgpack-encoded
/// (what a workload sends: its public JWK's members under the codec names).
pub fn with_proof_key(jwk: &serde_json::Value) -> Vec<u8> {
    let mut req = super::issue_request_task();
    req.proof_key = Some(proof_key(jwk));
    workload_identity::codec::encode(&req).unwrap()
}

/// The node identity request of node [`NODE`] (`client-1`, dc1, class gpu,
/// pool default, ready) in `global`, with Nomad's defaults for audience
/// (`nomadproject.io`) and TTL (24 h).
pub fn node_request() -> NodeIdentityRequest {
    NodeIdentityRequest {
        region: "global".into(),
        node: Node {
            id: NODE.into(),
            name: "client-1".into(),
            datacenter: "dc1".into(),
            node_class: "gpu".into(),
            node_pool: "default".into(),
            status: "ready".into(),
        },
        ..NodeIdentityRequest::default()
    }
}
