//! Issuance from arbitrary requests.

use super::world::{ALLOC, NOW, world};
use crate::codec;
use crate::issue::Issuer;
use crate::keyring::Algorithm;
use crate::model::{IssueRequest, NodeIdentityRequest};
use crate::state::AllocState;

/// Arbitrary msgpack into issuance; whatever issues must verify.
pub fn issue_request(data: &[u8]) {
    let w = world();
    if let Ok(req) = codec::decode::<NodeIdentityRequest>(data) {
        let alg = Algorithm::ALL[data.len() % Algorithm::ALL.len()];
        if let Ok(signed) = Issuer::new(w.keyring.clone()).issue_node_with(alg, &req, NOW) {
            let claims = crate::verify::check_signature(&w.keyring, &signed.token)
                .unwrap_or_else(|e| panic!("an issued node token must verify: {e}"));
            assert_eq!(claims, signed.claims);
            assert!(claims.node.is_some() && claims.allocation_id.is_empty());
        }
    }
    let Ok(req) = codec::decode::<IssueRequest>(data) else {
        return;
    };
    // Every algorithm in turn, chosen by the input's length, and the
    // profiles: none, SPIFFE, extra claims, both.
    let alg = Algorithm::ALL[data.len() % Algorithm::ALL.len()];
    let mut issuer = Issuer::new(w.keyring.clone());
    let profile = (data.len() / Algorithm::ALL.len()) % 4;
    if profile & 1 == 1 {
        let spiffe = crate::profile::SpiffeProfile::new("fuzz.example.org")
            .unwrap_or_else(|e| panic!("the fuzz trust domain is valid: {e}"));
        issuer = issuer.spiffe(spiffe);
    }
    if profile & 2 == 2 {
        issuer = issuer.extra_claims(fuzz_policy());
    }
    let Ok(signed) = issuer.issue_with(alg, &req, NOW) else {
        return;
    };
    if profile & 1 == 1 {
        assert_eq!(
            crate::profile::spiffe_id_problem(&signed.claims.subject),
            None
        );
    }
    let claims = crate::verify::check_signature(&w.keyring, &signed.token)
        .unwrap_or_else(|e| panic!("an issued token must verify: {e}"));
    assert_eq!(claims, signed.claims);
    if req.allocation.id == ALLOC && req.identity.audience.iter().any(|a| a == "vault.io") {
        w.store.set_state(ALLOC, AllocState::Live);
        let r = w.verifier.verify(&signed.token, NOW);
        assert!(r.is_ok(), "{r:?}");
    }
}

/// An extra-claims policy for every namespace naming every template variable.
fn fuzz_policy() -> crate::profile::ExtraClaimsPolicy {
    let all = [
        ("dc", "${node.datacenter}"),
        ("owner", "${job.meta.owner}"),
        (
            "where",
            "${node.id}/${node.name}/${node.pool}/${node.class}",
        ),
        (
            "what",
            "${alloc.id}/${group.name}/${workload.name}/${identity.name}",
        ),
        ("parent", "${job.parent_id}@${job.node_pool}"),
    ];
    let mut policy = crate::profile::ExtraClaimsPolicy::new()
        .require("*", "unique_id", "${job.region}:${job.namespace}:${job.id}")
        .unwrap_or_else(|e| panic!("the fuzz policy is valid: {e}"));
    for (name, template) in all {
        policy = policy
            .offer("*", name, template)
            .unwrap_or_else(|e| panic!("the fuzz policy is valid: {e}"));
    }
    policy
}
