//! `claims_supported` in the OIDC discovery document (issue 44 item 4) is
//! exactly what the issuer writes: every claim of every kind of token it
//! signs (a task's with the Vault and Consul blocks and an `iss`, a
//! service's, a node's, a WIT, one with extra claims) is listed, and every
//! listed claim appears in one of them.

mod common;

use std::collections::BTreeSet;

use base64::Engine;
use workload_identity::model::{Consul, IssueRequest, Node, Vault};
use workload_identity::profile::ExtraClaimsPolicy;
use workload_identity::{
    Algorithm, CLAIMS_SUPPORTED, Issuer, KeyPurpose, KeyState, Keyring, OidcDiscovery, WorkloadKey,
};

const NOW: i64 = 1_700_000_000;

/// The top-level names of a token's claims.
fn names(token: &str) -> BTreeSet<String> {
    let payload = token.split('.').nth(1).unwrap();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn claims_supported_is_what_the_issuer_writes() {
    let keyring = Keyring::new();
    keyring
        .insert(common::alg_key(
            Algorithm::EdDsa,
            "k",
            7,
            KeyState::Active,
            NOW - 10,
        ))
        .unwrap();
    keyring
        .insert(
            common::alg_key(Algorithm::EdDsa, "w", 8, KeyState::Active, NOW - 10)
                .with_purpose(KeyPurpose::Wit),
        )
        .unwrap();
    let policy = ExtraClaimsPolicy::new()
        .require("*", "unique_id", "${job.namespace}:${job.id}")
        .unwrap();
    let issuer = Issuer::new(keyring.clone())
        .issuer("https://nomad.example.com")
        .trust_domain("nomad.example.com")
        .unwrap()
        .extra_claims(policy);

    let task = IssueRequest {
        vault: Some(Vault {
            cluster: "default".into(),
            namespace: "eng".into(),
            role: "web".into(),
        }),
        consul: Some(Consul {
            namespace: "team".into(),
        }),
        node: Some(Node {
            id: "node-1".into(),
            ..Node::default()
        }),
        ..common::issue_request_task()
    };
    let mut consul_identity = task.clone();
    consul_identity.identity.name = "consul_default".into();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let mut wit = common::issue_request_task();
    wit.proof_key = Some(key.proof_key().clone());
    let mut node = common::node_identity_request();
    node.node.node_class = "gpu".into();

    let tokens = [
        issuer.issue(&task, NOW).unwrap().token,
        issuer.issue(&consul_identity, NOW).unwrap().token,
        issuer
            .issue(&common::issue_request_service(), NOW)
            .unwrap()
            .token,
        issuer.issue(&wit, NOW).unwrap().token,
        issuer.issue_node(&node, NOW).unwrap().token,
    ];
    let written: BTreeSet<String> = tokens.iter().flat_map(|t| names(t)).collect();
    let listed: BTreeSet<String> = CLAIMS_SUPPORTED.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        written,
        listed,
        "written but not listed: {:?}; listed but never written: {:?}",
        written.difference(&listed).collect::<Vec<_>>(),
        listed.difference(&written).collect::<Vec<_>>()
    );
    // The discovery document lists them.
    let d = keyring.oidc_discovery("https://nomad.example.com").unwrap();
    let v: serde_json::Value = serde_json::from_str(&d.to_json()).unwrap();
    assert_eq!(v["claims_supported"], serde_json::json!(CLAIMS_SUPPORTED));
    let plain = OidcDiscovery::new("https://nomad.example.com").unwrap();
    assert_eq!(plain.claims_supported, CLAIMS_SUPPORTED);
}
