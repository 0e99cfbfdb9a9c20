//! Token profiles (issue 30): SPIFFE JWT-SVIDs and WIT-SVIDs, templated extra
//! claims, what the verifier and the manager make of them, and the golden
//! tokens of both profiles (`tests/vectors/profiles.json`; regenerate with
//! `WID_BLESS=1 cargo test --test profiles`).

mod common;

use std::sync::Arc;

use serde_json::{Value, json};
use workload_identity::manager::{IdentityManager, MemoryIdentityDb};
use workload_identity::model::{GoDuration, IssueRequest, Node};
use workload_identity::profile::{ExtraClaimsPolicy, SpiffeProfile, spiffe_id_problem};
use workload_identity::{
    Algorithm, AllocState, Audience, Issuer, KeyDerivation, KeyId, KeyMaterial, KeyPurpose,
    KeyState, Keyring, MemoryStore, ResultCode, RootKey, Verifier, WorkloadKey,
};

const NOW: i64 = 1_700_000_000;
const TD: &str = "prod.example.org";

fn keyring() -> Keyring {
    Keyring::from_keys([
        RootKey::new(
            KeyId::new("ed-1").unwrap(),
            KeyMaterial::from_slice(&[1; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            NOW - 100,
        ),
        RootKey::for_algorithm(
            Algorithm::Es256,
            KeyId::new("es-1").unwrap(),
            KeyMaterial::from_slice(&[2; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            NOW - 100,
        ),
        // WITs are signed only by WIT keys.
        RootKey::new(
            KeyId::new("wit-ed-1").unwrap(),
            KeyMaterial::from_slice(&[3; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            NOW - 100,
        )
        .with_purpose(KeyPurpose::Wit),
        RootKey::for_algorithm(
            Algorithm::Es256,
            KeyId::new("wit-es-1").unwrap(),
            KeyMaterial::from_slice(&[4; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            NOW - 100,
        )
        .with_purpose(KeyPurpose::Wit),
    ])
    .unwrap()
}

fn verifier(kr: &Keyring, aud: &str) -> Verifier {
    let store = Arc::new(MemoryStore::new());
    store.set_state(common::ALLOC_ID, AllocState::Live);
    Verifier::builder(kr.clone(), store, Audience::new(aud).unwrap())
        .require_exp(true)
        .build()
}

/// The task request of the Go vectors (a child job of "web"), on node dc1.
fn request() -> IssueRequest {
    let mut r = common::issue_request_task();
    r.node = Some(Node {
        datacenter: "dc1".into(),
        id: "9d1e6a44-1111-2222-3333-444444444444".into(),
        name: "client-1".into(),
        node_class: String::new(),
        node_pool: "default".into(),
        status: "ready".into(),
    });
    r
}

fn policy() -> ExtraClaimsPolicy {
    ExtraClaimsPolicy::from_json(
        r#"{"namespaces":{"default":{
            "required_extra_claims":{"unique_id":"${job.region}:${job.namespace}:${job.id}"},
            "optional_extra_claims":{"dc":"dc:${node.datacenter}","owner":"${job.meta.owner}"}}}}"#,
    )
    .unwrap()
}

fn spiffe_issuer(kr: &Keyring) -> Issuer {
    Issuer::new(kr.clone())
        .algorithm(Algorithm::Es256)
        .spiffe(SpiffeProfile::new(TD).unwrap())
}

#[test]
fn jwt_svids_carry_a_spiffe_id_and_verify_as_any_token() {
    let kr = keyring();
    let signed = spiffe_issuer(&kr).issue(&request(), NOW).unwrap();
    let want = "spiffe://prod.example.org/global/default/web/frontend/server/vault_default";
    assert_eq!(signed.claims.subject, want);
    assert_eq!(spiffe_id_problem(&signed.claims.subject), None);
    assert!(signed.token.starts_with("eyJhbGciOiJFUzI1NiI")); // {"alg":"ES256"
    // The allocation binding is in the Nomad claims, as for any token.
    let ok = verifier(&kr, "vault.io")
        .verify(&signed.token, NOW)
        .unwrap();
    assert_eq!(ok.claims, signed.claims);
    assert_eq!(ok.claims.allocation_id, common::ALLOC_ID);
    // A custom path.
    let issuer = Issuer::new(kr.clone()).algorithm(Algorithm::Es256).spiffe(
        SpiffeProfile::new(TD)
            .unwrap()
            .path("/ns/${job.namespace}/job/${job.id}/${identity.name}")
            .unwrap(),
    );
    let signed = issuer.issue(&request(), NOW).unwrap();
    assert_eq!(
        signed.claims.subject,
        "spiffe://prod.example.org/ns/default/job/web/vault_default"
    );
}

#[test]
fn jwt_svid_rules_are_enforced_at_issue() {
    let kr = keyring();
    let refused = |issuer: &Issuer, req: &IssueRequest, needle: &str| {
        let e = issuer.issue(req, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    };
    // EdDSA: refused, with the way out.
    let eddsa = Issuer::new(kr.clone()).spiffe(SpiffeProfile::new(TD).unwrap());
    refused(&eddsa, &request(), "ES256 or RS256");
    // aud and exp are required.
    let issuer = spiffe_issuer(&kr);
    let mut r = request();
    r.identity.audience.clear();
    refused(&issuer, &r, "aud is required");
    let mut r = request();
    r.identity.ttl = GoDuration::from_nanos(0);
    refused(&issuer, &r, "exp is required");
    // A name that cannot be a SPIFFE ID segment is refused by name, never
    // escaped.
    let mut r = request();
    r.allocation.job = None;
    r.allocation.job_id = "web/dispatch-1".into();
    refused(&issuer, &r, "Allocation.JobID");
    let mut r = request();
    r.allocation.task_group = "front end".into();
    refused(&issuer, &r, "Allocation.TaskGroup");
}

/// `issuer` refuses `req` as an invalid argument whose message has `needle`.
fn refused_at_issue(issuer: &Issuer, req: &IssueRequest, needle: &str) {
    let e = issuer.issue(req, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains(needle), "{needle}: {e}");
}

#[test]
fn wits_of_a_spiffe_issuer_are_wit_svids() {
    let kr = keyring();
    let key = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let mut r = request();
    r.proof_key = Some(key.proof_key().clone());
    // No WIMSE trust domain needed; but a WIT-SVID is never EdDSA (the
    // WIT-SVID draft allows RS, ES and PS only), nor its cnf.jwk.
    let issuer = Issuer::new(kr.clone()).spiffe(SpiffeProfile::new(TD).unwrap());
    refused_at_issue(
        &issuer,
        &r,
        "WIT-SVID must be signed with an RS, ES or PS algorithm",
    );
    let issuer = issuer.algorithm(Algorithm::Es256);
    let wit = issuer.issue(&r, NOW).unwrap();
    assert_eq!(
        wit.claims.subject,
        "spiffe://prod.example.org/global/default/web/frontend/server/vault_default"
    );
    assert_eq!(wit.claims.confirmation.as_ref(), Some(key.proof_key()));
    assert_eq!(wit.kid.as_str(), "wit-es-1", "signed by the ES256 WIT key");
    assert!(wit.claims.audience.is_empty(), "a WIT carries no aud");
    let ed_key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let mut ed_req = request();
    ed_req.proof_key = Some(ed_key.proof_key().clone());
    refused_at_issue(
        &issuer,
        &ed_req,
        "cnf.jwk.alg must be an RS, ES or PS algorithm",
    );
    // A plain WIMSE WIT may still be EdDSA, with an EdDSA workload key.
    let wimse_ed = Issuer::new(kr.clone()).trust_domain(TD).unwrap();
    assert_eq!(
        wimse_ed.issue(&ed_req, NOW).unwrap().kid.as_str(),
        "wit-ed-1"
    );
    // Without SPIFFE the same request is a wimse:// WIT, and needs a domain.
    let plain = Issuer::new(kr.clone());
    assert!(
        plain
            .issue(&r, NOW)
            .unwrap_err()
            .to_string()
            .contains("trust domain")
    );
    let wimse = plain.trust_domain(TD).unwrap().issue(&r, NOW).unwrap();
    assert!(
        wimse
            .claims
            .subject
            .starts_with("wimse://prod.example.org/")
    );
}

#[test]
fn extra_claims_are_signed_and_verified_tokens_expose_them() {
    let kr = keyring();
    let issuer = Issuer::new(kr.clone()).extra_claims(policy());
    let mut r = request();
    r.identity.extra_claims = vec!["dc".into(), "owner".into()];
    let signed = issuer.issue(&r, NOW).unwrap();
    let want: Vec<(&str, &str)> = vec![
        ("dc", "dc:dc1"),
        ("owner", "team-a"),
        ("unique_id", "global:default:web"),
    ];
    let got: Vec<(&str, &str)> = signed
        .claims
        .extra_claims
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(got, want);
    assert!(
        signed.claims.to_json().ends_with(
            r#""extra_claims":{"dc":"dc:dc1","owner":"team-a","unique_id":"global:default:web"}}"#
        ),
        "{}",
        signed.claims.to_json()
    );
    // The verifier (twice: the second answer comes from its cache) hands
    // them back.
    let v = verifier(&kr, "consul.io");
    for _ in 0..2 {
        let ok = v.verify(&signed.token, NOW).unwrap();
        assert_eq!(ok.claims.extra_claims, signed.claims.extra_claims);
    }
    // Only the required claim when the identity names none.
    r.identity.extra_claims.clear();
    let plain = issuer.issue(&r, NOW).unwrap();
    assert_eq!(plain.claims.extra_claims.len(), 1);
    // Both profiles at once.
    let both = spiffe_issuer(&kr).extra_claims(policy());
    let svid = both.issue(&r, NOW).unwrap();
    assert!(svid.claims.subject.starts_with("spiffe://"));
    assert_eq!(svid.claims.extra_claims["unique_id"], "global:default:web");
}

#[test]
fn extra_claim_refusals_name_what_is_wrong() {
    let kr = keyring();
    let issuer = Issuer::new(kr.clone()).extra_claims(policy());
    let refused = |issuer: &Issuer, req: &IssueRequest, needles: &[&str]| {
        let e = issuer.issue(req, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
        for n in needles {
            assert!(e.to_string().contains(n), "{n}: {e}");
        }
    };
    // Asked for, but the node is not in the request.
    let mut r = request();
    r.node = None;
    r.identity.extra_claims = vec!["dc".into()];
    refused(
        &issuer,
        &r,
        &["Node.Datacenter", "\"dc\"", "${node.datacenter}"],
    );
    // Asked for, but not offered.
    let mut r = request();
    r.identity.extra_claims = vec!["secret".into()];
    refused(&issuer, &r, &["Identity.ExtraClaims[0]", "\"secret\""]);
    // Asked for, but the issuer has no policy at all.
    refused(&Issuer::new(kr.clone()), &r, &["no extra-claims policy"]);
    // A missing meta key.
    let mut r = request();
    r.allocation.job.as_mut().unwrap().meta.clear();
    r.identity.extra_claims = vec!["owner".into()];
    refused(&issuer, &r, &["Allocation.Job.Meta[\"owner\"]"]);
}

/// A restarted manager reuses SPIFFE and extra-claims tokens (their `sub` is
/// not Nomad's form, yet they are this identity's), and re-signs them when
/// the profile changed.
#[test]
fn the_manager_restores_profiled_tokens_and_notices_a_changed_profile() {
    let kr = keyring();
    let db = Arc::new(MemoryIdentityDb::default());
    let manager = |issuer: Issuer| {
        IdentityManager::builder(vec![request()], Arc::new(issuer), db.clone(), kr.clone())
            .build()
            .unwrap()
    };
    let profiled = || spiffe_issuer(&kr).extra_claims(policy());
    let t0 = NOW * 1000;
    let m = manager(profiled());
    m.start(t0).unwrap();
    drop(m);
    let report = manager(profiled()).restore(t0 + 60_000).unwrap();
    assert!(report.reused, "{report:?}");
    // Another trust domain: the saved token's sub is not what signing gives.
    let other = Issuer::new(kr.clone())
        .algorithm(Algorithm::Es256)
        .spiffe(SpiffeProfile::new("other.example.org").unwrap())
        .extra_claims(policy());
    let report = manager(other).restore(t0 + 60_000).unwrap();
    assert!(
        !report.reused && report.reason.contains("sub"),
        "{report:?}"
    );
    // Another policy: the extra claims differ.
    let m = manager(profiled());
    m.start(t0).unwrap();
    drop(m);
    let fewer = spiffe_issuer(&kr).extra_claims(ExtraClaimsPolicy::new());
    let report = manager(fewer).restore(t0 + 60_000).unwrap();
    assert!(
        !report.reused && report.reason.contains("extra claim \"unique_id\""),
        "{report:?}"
    );
}

/// The committed golden tokens of both profiles verify and carry exactly
/// the claims signing their request gives today (all but `jti`).
#[test]
fn golden_tokens_of_both_profiles() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/profiles.json");
    let kr = keyring();
    let mut r = request();
    r.identity.extra_claims = vec!["dc".into()];
    let profiles = [
        ("jwt_svid", spiffe_issuer(&kr).extra_claims(policy())),
        (
            "extra_claims",
            Issuer::new(kr.clone()).extra_claims(policy()),
        ),
    ];
    if std::env::var_os("WID_BLESS").is_some() {
        let mut tokens = serde_json::Map::new();
        for (name, issuer) in &profiles {
            let s = issuer.issue(&r, NOW).unwrap();
            let payload: Value = serde_json::from_str(&s.claims.to_json()).unwrap();
            tokens.insert(
                name.to_string(),
                json!({"kid": s.kid.as_str(), "token": s.token, "payload": payload}),
            );
        }
        let doc = json!({
            "description": "Golden tokens of the two token profiles (issue 30), made by tests/profiles.rs with WID_BLESS=1. Keys: HKDF v1 from 32 bytes of 0x01 (EdDSA, kid ed-1) and of 0x02 (ES256, kid es-1). jwt_svid: a SPIFFE JWT-SVID (ES256) of trust domain prod.example.org with the default path and the policy's extra claims; extra_claims: an EdDSA token with the policy's extra claims. tests/python/profiles_interop.py checks them with PyJWT.",
            "now": NOW,
            "trust_domain": TD,
            "jwks": serde_json::from_str::<Value>(&kr.jwks().to_json()).unwrap(),
            "spiffe_bundle": serde_json::from_str::<Value>(
                &kr.jwks().to_spiffe_bundle_json(std::time::Duration::from_secs(300))
            ).unwrap(),
            "policy": {"namespaces":{"default":{
                "required_extra_claims":{"unique_id":"${job.region}:${job.namespace}:${job.id}"},
                "optional_extra_claims":{"dc":"dc:${node.datacenter}","owner":"${job.meta.owner}"}}}},
            "tokens": tokens,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(doc["now"], NOW);
    assert_eq!(
        doc["spiffe_bundle"],
        serde_json::from_str::<Value>(
            &kr.jwks()
                .to_spiffe_bundle_json(std::time::Duration::from_secs(300))
        )
        .unwrap()
    );
    for (name, issuer) in &profiles {
        let g = &doc["tokens"][name];
        let token = g["token"].as_str().unwrap();
        let ok = verifier(&kr, "vault.io").verify(token, NOW).unwrap();
        let mut want: Value = g["payload"].clone();
        assert_eq!(
            serde_json::from_str::<Value>(&ok.claims.to_json()).unwrap(),
            want,
            "{name}: the golden token's claims"
        );
        let mut fresh: Value =
            serde_json::from_str(&issuer.issue(&r, NOW).unwrap().claims.to_json()).unwrap();
        fresh["jti"] = Value::Null;
        want["jti"] = Value::Null;
        assert_eq!(fresh, want, "{name}: signing the request today");
    }
    assert!(
        doc["tokens"]["jwt_svid"]["payload"]["sub"]
            .as_str()
            .unwrap()
            .starts_with("spiffe://prod.example.org/")
    );
    assert_eq!(
        doc["tokens"]["extra_claims"]["payload"]["extra_claims"]["dc"],
        "dc:dc1"
    );
}

/// A token too big for verifiers is refused at issue, not handed out to be
/// refused everywhere (extra claims are what can grow it).
#[test]
fn a_token_over_the_verifiers_cap_is_refused_at_issue() {
    let kr = keyring();
    let mut r = request();
    r.identity.audience = (0..400)
        .map(|i| format!("audience-number-{i:04}"))
        .collect();
    let e = Issuer::new(kr.clone()).issue(&r, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("over the 8192"), "{e}");
}

/// A signer that is not an `Issuer` and does not say what it writes: a
/// default-path SPIFFE ID is still recognised as the identity's; another
/// `sub` is refused with a message naming the way out.
#[test]
fn a_host_signer_of_default_path_svids_needs_no_expectation() {
    struct Host(Issuer);
    impl workload_identity::manager::IdentitySigner for Host {
        fn sign(
            &self,
            requests: &[IssueRequest],
            now: i64,
        ) -> Result<Vec<workload_identity::SignedIdentity>, workload_identity::Error> {
            requests.iter().map(|r| self.0.issue(r, now)).collect()
        }
    }
    let kr = keyring();
    let db = Arc::new(MemoryIdentityDb::default());
    let start = |issuer: Issuer| {
        IdentityManager::builder(
            vec![request()],
            Arc::new(Host(issuer)),
            db.clone(),
            kr.clone(),
        )
        .build()
        .unwrap()
        .start(NOW * 1000)
    };
    start(spiffe_issuer(&kr)).unwrap();
    let custom = Issuer::new(kr.clone()).algorithm(Algorithm::Es256).spiffe(
        SpiffeProfile::new(TD)
            .unwrap()
            .path("/custom/${job.id}")
            .unwrap(),
    );
    let e = start(custom).unwrap_err().to_string();
    assert!(e.contains("IdentitySigner::expected_claims"), "{e}");
}
