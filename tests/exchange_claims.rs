//! Nomad 2.x's claims for the Vault and Consul logins (issue 42 item 5):
//! `consul_namespace`, `vault_namespace` and `vault_role` in exactly the
//! identities Nomad's servers give them, in Nomad's order, read back by the
//! verifier; `${vault.cluster}`, `${vault.namespace}` and `${vault.role}` in
//! extra-claim templates; tokens of requests without the blocks unchanged.

mod common;

use std::sync::Arc;

use base64::Engine;
use workload_identity::model::{Consul, IssueRequest, Vault};
use workload_identity::profile::ExtraClaimsPolicy;
use workload_identity::{
    AllocState, Audience, Issuer, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring,
    MemoryStore, ResultCode, RootKey, Verifier,
};

const NOW: i64 = 1_700_000_000;

fn keyring() -> Keyring {
    Keyring::from_keys([RootKey::new(
        KeyId::new("ed-1").unwrap(),
        KeyMaterial::from_slice(&[1; 32]).unwrap(),
        KeyDerivation::HkdfV1,
        KeyState::Active,
        NOW - 100,
    )])
    .unwrap()
}

fn verifier(kr: &Keyring, aud: &str) -> Verifier {
    let store = Arc::new(MemoryStore::new());
    store.set_state(common::ALLOC_ID, AllocState::Live);
    Verifier::builder(kr.clone(), store, Audience::new(aud).unwrap()).build()
}

fn vault() -> Vault {
    Vault {
        cluster: "default".into(),
        namespace: "engineering/web".into(),
        role: "nomad-web".into(),
    }
}

fn consul() -> Consul {
    Consul {
        namespace: "web-team".into(),
    }
}

/// The task request of the Go vectors (identity `vault_default`) with both
/// blocks.
fn request() -> IssueRequest {
    IssueRequest {
        vault: Some(vault()),
        consul: Some(consul()),
        ..common::issue_request_task()
    }
}

/// The token's payload, as signed (not our parse of it).
fn payload(token: &str) -> String {
    let middle = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(middle)
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

/// The three claims a token carries, `None` for each it lacks (from the
/// signed payload), after checking that the verifier reads the token's
/// claims back exactly.
fn exchange_claims(req: &IssueRequest) -> [Option<String>; 3] {
    let kr = keyring();
    let signed = Issuer::new(kr.clone()).issue(req, NOW).unwrap();
    let aud = req.identity.audience[0].clone();
    let ok = verifier(&kr, &aud).verify(&signed.token, NOW).unwrap();
    assert_eq!(
        ok.claims, signed.claims,
        "verify reads back what was signed"
    );
    let json: serde_json::Value = serde_json::from_str(&payload(&signed.token)).unwrap();
    ["consul_namespace", "vault_namespace", "vault_role"].map(|name| {
        json.get(name)
            .map(|v| v.as_str().expect("a string claim").to_string())
    })
}

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[test]
fn a_vault_identity_of_a_task_carries_vault_namespace_and_role() {
    let signed = Issuer::new(keyring()).issue(&request(), NOW).unwrap();
    assert_eq!(signed.claims.vault_namespace, "engineering/web");
    assert_eq!(signed.claims.vault_role, "nomad-web");
    // A vault_ identity is no Consul identity: no consul_namespace.
    assert_eq!(signed.claims.consul_namespace, "");
    // Nomad's order: after nomad_task, before the registered claims.
    let json = payload(&signed.token);
    assert!(
        json.contains(r#""nomad_task":"server","vault_namespace":"engineering/web","vault_role":"nomad-web","sub":"#),
        "{json}"
    );
    assert_eq!(
        exchange_claims(&request()),
        [None, some("engineering/web"), some("nomad-web")]
    );
    // Nomad leaves an empty one out (omitempty); the other stays.
    let mut r = request();
    r.vault.as_mut().unwrap().namespace.clear();
    assert_eq!(exchange_claims(&r), [None, None, some("nomad-web")]);
    r.vault.as_mut().unwrap().role.clear();
    assert_eq!(exchange_claims(&r), [None, None, None]);
    // Any cluster's identity (Nomad takes the task's block whatever its
    // Cluster says).
    let mut r = request();
    r.identity.name = "vault_infra".into();
    assert_eq!(
        exchange_claims(&r),
        [None, some("engineering/web"), some("nomad-web")]
    );
}

#[test]
fn other_identities_carry_no_vault_claims() {
    for (name, service) in [
        ("default", false),
        ("vault", false),
        // "vault_" names no cluster: Nomad finds no Vault configuration.
        ("vault_", false),
        ("Vault_default", false),
        ("aws", false),
        // A service's identity: Nomad never adds the task's Vault block.
        ("vault_default", true),
    ] {
        let mut r = request();
        r.identity.name = name.into();
        if service {
            r.task.clear();
            r.service = "web-api".into();
        }
        let got = exchange_claims(&r);
        assert_eq!(got[1..], [None, None], "{name} (service: {service})");
    }
}

#[test]
fn a_consul_identity_carries_consul_namespace() {
    for (name, service) in [
        ("consul_default", false),
        ("consul_infra", false),
        ("consul-service_web-api", true),
        // Nomad's test is the prefix "consul", nothing more.
        ("consul", false),
    ] {
        let mut r = request();
        r.identity.name = name.into();
        if service {
            r.task.clear();
            r.service = "web-api".into();
        }
        assert_eq!(
            exchange_claims(&r),
            [some("web-team"), None, None],
            "{name}"
        );
    }
    // An empty namespace, or no block: no claim.
    let mut r = request();
    r.identity.name = "consul_default".into();
    r.consul = Some(Consul::default());
    assert_eq!(exchange_claims(&r), [None, None, None]);
    r.consul = None;
    assert_eq!(exchange_claims(&r), [None, None, None]);
    // Not a Consul identity.
    for name in ["default", "Consul_default", "my-consul"] {
        let mut r = request();
        r.identity.name = name.into();
        assert_eq!(exchange_claims(&r)[0], None, "{name}");
    }
}

#[test]
fn requests_without_the_blocks_sign_as_before() {
    let plain = common::issue_request_task();
    assert_eq!(exchange_claims(&plain), [None, None, None]);
    // Same claims, jti aside, as the request with blocks its identity does
    // not take.
    let kr = keyring();
    let a = Issuer::new(kr.clone()).issue(&plain, NOW).unwrap().claims;
    let mut r = request();
    r.vault = None;
    let b = Issuer::new(kr).issue(&r, NOW).unwrap().claims;
    assert_eq!(
        a.to_json().replace(&a.jwt_id, ""),
        b.to_json().replace(&b.jwt_id, "")
    );
    for claim in ["consul_namespace", "vault_namespace", "vault_role"] {
        assert!(!a.to_json().contains(claim), "{claim}");
    }
}

#[test]
fn vault_variables_render_the_vault_identitys_block_and_else_empty() {
    let policy = ExtraClaimsPolicy::new()
        .require(
            "*",
            "vault_target",
            "${vault.cluster}|${vault.namespace}|${vault.role}",
        )
        .unwrap()
        .offer("default", "role", "${vault.role}")
        .unwrap();
    let issuer = Issuer::new(keyring()).extra_claims(policy);
    let claims = |r: &IssueRequest| issuer.issue(r, NOW).unwrap().claims.extra_claims;

    let mut r = request();
    r.identity.extra_claims = vec!["role".into()];
    let c = claims(&r);
    assert_eq!(c["vault_target"], "default|engineering/web|nomad-web");
    assert_eq!(c["role"], "nomad-web");

    // No Vault block, or not a Vault identity: empty, as Nomad renders them
    // (not a missing field: the claim of "*" must not refuse every other
    // identity).
    for edit in [
        (|r: &mut IssueRequest| r.vault = None) as fn(&mut IssueRequest),
        |r| r.identity.name = "default".into(),
        |r| r.identity.name = "consul_default".into(),
        |r| {
            r.task.clear();
            r.service = "web-api".into();
        },
    ] {
        let mut r = request();
        r.identity.extra_claims = vec!["role".into()];
        edit(&mut r);
        let c = claims(&r);
        assert_eq!(c["vault_target"], "||", "{r:?}");
        assert_eq!(c["role"], "", "{r:?}");
    }

    // The variables are known; a near miss is still refused when set.
    let e = ExtraClaimsPolicy::new()
        .require("*", "x", "${vault.token}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("${vault.role}"), "{e}");
}

#[test]
fn the_blocks_are_bounded() {
    let long = "n".repeat(workload_identity::model::MAX_BLOCK_FIELD_BYTES + 1);
    let mut r = request();
    r.vault.as_mut().unwrap().role = long.clone();
    r.consul.as_mut().unwrap().namespace = long.clone();
    let e = Issuer::new(keyring()).issue(&r, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    let msg = e.to_string();
    assert!(
        msg.contains("Vault.Role: is 257 bytes; expected at most 256")
            && msg.contains("Consul.Namespace: is 257 bytes"),
        "{msg}"
    );
    // At the bound, signed.
    let mut r = request();
    r.vault.as_mut().unwrap().namespace = long[1..].to_string();
    Issuer::new(keyring()).issue(&r, NOW).unwrap();
}
