//! Key purposes (issue 40): bearer keys sign bearer tokens and are published
//! in the JWKS; WIT keys sign workload identity tokens only and are published
//! apart. Each check here fails if keys lose their purpose.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use workload_identity::model::IssueRequest;
use workload_identity::{
    ActiveKey, Algorithm, Audience, Issuer, KeyPurpose, KeyState, Keyring, MemoryStore,
    ProofOptions, ProofRequest, ResultCode, RootKey, RotationAction, RotationPolicy, Verifier,
    WorkloadKey, plan_rotation, plan_rotation_for, plan_rotation_for_purpose,
};

const NOW: i64 = 1_800_000_000;
const HOUR: i64 = 3600;
const TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";
const TD: &str = "nomad.example.com";
const ISS: &str = "https://nomad.example.com";
const AUD: &str = "vault.io";

/// A key of `alg` and `purpose` (see [`common::alg_key`]: every RS256 key
/// made here has the committed RSA material).
fn key(
    alg: Algorithm,
    kid: &str,
    byte: u8,
    state: KeyState,
    purpose: KeyPurpose,
    create_time: i64,
) -> RootKey {
    common::alg_key(alg, kid, byte, state, create_time).with_purpose(purpose)
}

struct World {
    keyring: Keyring,
    issuer: Issuer,
    store: Arc<MemoryStore>,
    verifier: Verifier,
}

/// Active bearer keys of every algorithm, active WIT keys of EdDSA and ES256
/// (no WIT key of RS256).
fn world_keyring() -> Keyring {
    Keyring::from_keys([
        key(
            Algorithm::EdDsa,
            "bearer-ed",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW - 10,
        ),
        key(
            Algorithm::Es256,
            "bearer-es",
            2,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW - 10,
        ),
        key(
            Algorithm::Rs256,
            "bearer-rs",
            0,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW - 10,
        ),
        key(
            Algorithm::EdDsa,
            "wit-ed",
            3,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW - 10,
        ),
        key(
            Algorithm::Es256,
            "wit-es",
            4,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW - 10,
        ),
    ])
    .unwrap()
}

fn store() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    store
}

/// A verifier of `keyring` for audience `vault.io` that never waits for an
/// unknown key.
fn verifier_of(keyring: &Keyring, store: &Arc<MemoryStore>) -> Verifier {
    Verifier::builder(keyring.clone(), store.clone(), Audience::new(AUD).unwrap())
        .issuer(ISS)
        .key_wait(Duration::ZERO)
        .build()
}

fn issuer_of(keyring: &Keyring) -> Issuer {
    Issuer::new(keyring.clone())
        .issuer(ISS)
        .trust_domain(TD)
        .unwrap()
}

fn world() -> World {
    let keyring = world_keyring();
    let store = store();
    World {
        issuer: issuer_of(&keyring),
        verifier: verifier_of(&keyring, &store),
        keyring,
        store,
    }
}

fn wit_request(key: &WorkloadKey) -> IssueRequest {
    let mut req = common::issue_request_task();
    req.proof_key = Some(key.proof_key().clone());
    req
}

fn header(token: &str) -> serde_json::Value {
    common::identity::decode_segment(token, 0)
}

fn payload(token: &str) -> serde_json::Value {
    common::identity::decode_segment(token, 1)
}

fn payload_segment(token: &str) -> &str {
    token.split('.').nth(1).unwrap()
}

/// `b64url(header).payload_segment.b64url(signature by key)`.
fn craft(key: &ActiveKey, header_json: &str, payload_segment: &str) -> String {
    let input = format!("{}.{payload_segment}", URL_SAFE_NO_PAD.encode(header_json));
    let sig = key.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

fn kids(jwks: &workload_identity::Jwks) -> BTreeSet<String> {
    jwks.keys.iter().map(|k| k.kid.clone()).collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn prove(key: &WorkloadKey, wit: &str) -> String {
    key.prove(wit, TARGET, NOW, &ProofOptions::new()).unwrap()
}

#[test]
fn wits_are_signed_by_wit_keys_without_aud_and_bearer_tokens_by_bearer_keys() {
    let w = world();
    for (alg, bearer_kid, wit_kid) in [
        (Algorithm::EdDsa, "bearer-ed", "wit-ed"),
        (Algorithm::Es256, "bearer-es", "wit-es"),
    ] {
        let wk = WorkloadKey::generate(Algorithm::Es256).unwrap();
        let wit = w.issuer.issue_with(alg, &wit_request(&wk), NOW).unwrap();
        assert_eq!(wit.kid.as_str(), wit_kid, "{alg}");
        let h = header(&wit.token);
        assert_eq!(h["kid"], wit_kid, "{h}");
        assert_eq!(h["typ"], "wit+jwt", "{h}");
        let claims = payload(&wit.token);
        let claims = claims.as_object().unwrap();
        assert!(
            !claims.contains_key("aud"),
            "a WIT carries no aud at all: {claims:?}"
        );
        assert!(claims.contains_key("cnf"), "{claims:?}");
        assert!(wit.claims.audience.is_empty());

        let bearer = w
            .issuer
            .issue_with(alg, &common::issue_request_task(), NOW)
            .unwrap();
        assert_eq!(bearer.kid.as_str(), bearer_kid, "{alg}");
        let h = header(&bearer.token);
        assert_eq!(h["kid"], bearer_kid, "{h}");
        assert_eq!(h["typ"], "JWT", "{h}");
        assert_eq!(
            payload(&bearer.token)["aud"],
            serde_json::json!(["vault.io", "consul.io"])
        );

        // Both verify, each on its own path.
        let ok = w.verifier.verify(&bearer.token, NOW).unwrap();
        assert_eq!(ok.kid.as_str(), bearer_kid);
        let ok = w
            .verifier
            .verify_proof(
                &wit.token,
                &prove(&wk, &wit.token),
                &ProofRequest::new(TARGET),
                NOW,
            )
            .unwrap();
        assert_eq!(ok.identity.kid.as_str(), wit_kid);
    }
}

#[test]
fn wit_keys_are_published_only_in_the_wit_key_set() {
    let w = world();
    let kr = &w.keyring;
    let wit_rs = kr
        .rotate_purpose(KeyPurpose::Wit, Algorithm::Rs256, NOW)
        .unwrap();
    assert_eq!(
        kr.key_info(wit_rs.as_str()).unwrap().purpose,
        KeyPurpose::Wit
    );

    // The JWKS: bearer keys only.
    let jwks = kr.jwks();
    assert_eq!(kids(&jwks), set(&["bearer-ed", "bearer-es", "bearer-rs"]));
    let json = jwks.to_json();
    for wit_kid in ["wit-ed", "wit-es", wit_rs.as_str()] {
        assert!(!json.contains(wit_kid), "{wit_kid} in the JWKS: {json}");
    }
    // The WIT key set: exactly the WIT keys.
    assert_eq!(
        kids(&kr.jwks_for(KeyPurpose::Wit)),
        set(&["wit-ed", "wit-es", wit_rs.as_str()])
    );
    assert_eq!(kids(&kr.jwks_for(KeyPurpose::Bearer)), kids(&jwks));

    // The SPIFFE bundle: ES256/RS256 bearer keys as jwt-svid, ES256/RS256
    // WIT keys as wit-svid, no Ed25519 key at all.
    let bundle: serde_json::Value =
        serde_json::from_str(&kr.spiffe_bundle_json(Duration::from_secs(300))).unwrap();
    assert_eq!(bundle["spiffe_refresh_hint"], 300);
    let entries: BTreeSet<(String, String, String)> = bundle["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kid"].as_str().unwrap().to_string(),
                k["use"].as_str().unwrap().to_string(),
                k["kty"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String, String)> = [
        ("bearer-es", "jwt-svid", "EC"),
        ("bearer-rs", "jwt-svid", "RSA"),
        ("wit-es", "wit-svid", "EC"),
        (wit_rs.as_str(), "wit-svid", "RSA"),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(entries, want, "{bundle}");

    // Discovery lists the bearer keys' algorithms: not RS256, which only a
    // WIT key has here.
    let kr = Keyring::from_keys([
        key(
            Algorithm::EdDsa,
            "b-ed",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ),
        key(
            Algorithm::Es256,
            "b-es",
            2,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ),
        key(
            Algorithm::Rs256,
            "w-rs",
            0,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW,
        ),
    ])
    .unwrap();
    assert_eq!(kr.algorithms(), [Algorithm::EdDsa, Algorithm::Es256]);
    assert_eq!(kr.algorithms_for(KeyPurpose::Wit), [Algorithm::Rs256]);
    let discovery = kr.oidc_discovery(ISS).unwrap();
    assert_eq!(
        discovery.id_token_signing_alg_values_supported,
        ["EdDSA", "ES256"]
    );
    assert!(!discovery.to_json().contains("RS256"), "{discovery:?}");
    assert_eq!(kids(&kr.jwks()), set(&["b-ed", "b-es"]));
    assert_eq!(kids(&kr.jwks_for(KeyPurpose::Wit)), set(&["w-rs"]));
}

#[test]
fn verify_refuses_a_bearer_typ_token_signed_by_a_wit_key() {
    let w = world();
    for (alg, bearer_kid, wit_kid) in [
        (Algorithm::Es256, "bearer-es", "wit-es"),
        (Algorithm::EdDsa, "bearer-ed", "wit-ed"),
    ] {
        let bearer = w
            .issuer
            .issue_with(alg, &common::issue_request_task(), NOW)
            .unwrap()
            .token;
        let claims = payload_segment(&bearer);
        let wit_key = w.keyring.active_for_purpose(KeyPurpose::Wit, alg).unwrap();
        assert_eq!(wit_key.id().as_str(), wit_kid);
        assert_eq!(wit_key.purpose(), KeyPurpose::Wit);
        let forged = craft(
            &wit_key,
            &format!(
                r#"{{"alg":"{}","kid":"{wit_kid}","typ":"JWT"}}"#,
                alg.name()
            ),
            claims,
        );
        let e = w.verifier.verify(&forged, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
        let msg = e.to_string();
        assert!(msg.contains(wit_kid), "{msg}");
        assert!(msg.contains("is a wit key"), "{msg}");
        // The batch path refuses it too.
        let batch = w.verifier.verify_batch(&[&forged, &bearer], NOW);
        assert_eq!(
            batch[0].as_ref().unwrap_err().code(),
            ResultCode::UnknownKey
        );
        assert_eq!(batch[1].as_ref().unwrap().kid.as_str(), bearer_kid);

        // The same crafting with the bearer key verifies: only the key's
        // purpose made the difference.
        let control = craft(
            &w.keyring.active_for(alg).unwrap(),
            &format!(
                r#"{{"alg":"{}","kid":"{bearer_kid}","typ":"JWT"}}"#,
                alg.name()
            ),
            claims,
        );
        assert_eq!(
            w.verifier.verify(&control, NOW).unwrap().kid.as_str(),
            bearer_kid
        );
    }
}

#[test]
fn verify_proof_refuses_a_wit_signed_by_a_bearer_key() {
    let w = world();
    let wk = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let wit = w
        .issuer
        .issue_with(Algorithm::Es256, &wit_request(&wk), NOW)
        .unwrap()
        .token;
    let forged = craft(
        &w.keyring.active_for(Algorithm::Es256).unwrap(),
        r#"{"alg":"ES256","kid":"bearer-es","typ":"wit+jwt"}"#,
        payload_segment(&wit),
    );
    assert_eq!(header(&forged)["typ"], "wit+jwt");
    assert!(payload(&forged)["cnf"]["jwk"].is_object());
    let e = w
        .verifier
        .verify_proof(
            &forged,
            &prove(&wk, &forged),
            &ProofRequest::new(TARGET),
            NOW,
        )
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("bearer-es"), "{msg}");
    assert!(msg.contains("is a bearer key"), "{msg}");

    // The WIT as issued verifies, though the verifier's audience (vault.io)
    // is nowhere in it: a WIT has no aud.
    let ok = w
        .verifier
        .verify_proof(&wit, &prove(&wk, &wit), &ProofRequest::new(TARGET), NOW)
        .unwrap();
    assert_eq!(ok.identity.kid.as_str(), "wit-es");
    assert!(ok.identity.claims.audience.is_empty());
    assert!(payload(&wit).get("aud").is_none());
}

#[test]
fn verify_only_keyrings_keep_the_purposes_apart() {
    let w = world();
    let wk = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let wit = w
        .issuer
        .issue_with(Algorithm::Es256, &wit_request(&wk), NOW)
        .unwrap()
        .token;
    let bearer = w
        .issuer
        .issue_with(Algorithm::Es256, &common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let forged = craft(
        &w.keyring
            .active_for_purpose(KeyPurpose::Wit, Algorithm::Es256)
            .unwrap(),
        r#"{"alg":"ES256","kid":"wit-es","typ":"JWT"}"#,
        payload_segment(&bearer),
    );

    // From the JWKS: bearer tokens verify, the WIT's key is not there.
    let (from_jwks, _) = Keyring::from_jwks(&w.keyring.jwks().to_json()).unwrap();
    assert!(from_jwks.key_info("wit-es").is_none());
    let v = verifier_of(&from_jwks, &w.store);
    assert_eq!(v.verify(&bearer, NOW).unwrap().kid.as_str(), "bearer-es");
    let e = v
        .verify_proof(&wit, &prove(&wk, &wit), &ProofRequest::new(TARGET), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
    assert_eq!(
        v.verify(&forged, NOW).unwrap_err().code(),
        ResultCode::UnknownKey
    );

    // From the WIT key set as WIT keys: the WIT verifies, a bearer-typ token
    // of a WIT key does not.
    let (wit_only, report) = Keyring::from_jwks_as(
        &w.keyring.jwks_for(KeyPurpose::Wit).to_json(),
        KeyPurpose::Wit,
    )
    .unwrap();
    let imported: BTreeSet<String> = report.imported.iter().map(|k| k.to_string()).collect();
    assert_eq!(imported, set(&["wit-ed", "wit-es"]));
    for info in wit_only.keys() {
        assert_eq!(info.purpose, KeyPurpose::Wit, "{}", info.kid);
        assert_eq!(info.state, KeyState::Inactive, "{}", info.kid);
    }
    let v = verifier_of(&wit_only, &w.store);
    let ok = v
        .verify_proof(&wit, &prove(&wk, &wit), &ProofRequest::new(TARGET), NOW)
        .unwrap();
    assert_eq!(ok.identity.kid.as_str(), "wit-es");
    let e = v.verify(&forged, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
    assert!(e.to_string().contains("is a wit key"), "{e}");

    // The same kid again with another purpose than held: refused, and the
    // keyring keeps its purpose.
    let wit_set = w.keyring.jwks_for(KeyPurpose::Wit).to_json();
    let e = wit_only
        .import_jwks_as(&wit_set, KeyPurpose::Bearer)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey, "{e}");
    let e = wit_only.import_jwks(&wit_set).unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey, "{e}");
    assert_eq!(
        wit_only.key_info("wit-es").unwrap().purpose,
        KeyPurpose::Wit
    );
    // With the purpose held, nothing changes.
    let again = wit_only.import_jwks_as(&wit_set, KeyPurpose::Wit).unwrap();
    assert!(again.imported.is_empty());
    assert_eq!(again.unchanged.len(), 2);

    // A SPIFFE bundle: wit-svid entries become WIT keys and jwt-svid entries
    // bearer keys; read as WIT keys, its jwt-svid entries are skipped (a
    // caller who asked for WIT keys never gets one that verifies bearer
    // tokens).
    let bundle = w.keyring.spiffe_bundle_json(Duration::from_secs(60));
    for default in [KeyPurpose::Bearer, KeyPurpose::Wit] {
        let (kr, report) = if default == KeyPurpose::Bearer {
            Keyring::from_jwks(&bundle).unwrap()
        } else {
            Keyring::from_jwks_as(&bundle, default).unwrap()
        };
        let purposes: Vec<(String, KeyPurpose)> = kr
            .keys()
            .into_iter()
            .map(|k| (k.kid.to_string(), k.purpose))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let v = verifier_of(&kr, &w.store);
        v.verify_proof(&wit, &prove(&wk, &wit), &ProofRequest::new(TARGET), NOW)
            .unwrap();
        assert_eq!(
            v.verify(&forged, NOW).unwrap_err().code(),
            ResultCode::UnknownKey
        );
        if default == KeyPurpose::Bearer {
            assert!(report.skipped.is_empty(), "{report:?}");
            assert_eq!(
                purposes,
                [
                    ("bearer-es".to_string(), KeyPurpose::Bearer),
                    ("bearer-rs".to_string(), KeyPurpose::Bearer),
                    ("wit-es".to_string(), KeyPurpose::Wit),
                ]
            );
            assert_eq!(v.verify(&bearer, NOW).unwrap().kid.as_str(), "bearer-es");
        } else {
            let skipped: Vec<&str> = report
                .skipped
                .iter()
                .map(|s| s.kid.as_deref().unwrap_or(""))
                .collect();
            assert_eq!(skipped, ["bearer-es", "bearer-rs"], "{report:?}");
            assert!(report.skipped[0].reason.contains("read as WIT keys"));
            assert_eq!(purposes, [("wit-es".to_string(), KeyPurpose::Wit)]);
            assert_eq!(
                v.verify(&bearer, NOW).unwrap_err().code(),
                ResultCode::UnknownKey
            );
        }
    }
}

#[test]
fn keystores_keep_purposes_and_bearer_keys_are_stored_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let w = world();
    let path = dir.path().join("keys.bin");
    w.keyring.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.windows(b"Purpose".len()).any(|x| x == b"Purpose"),
        "a WIT key is stored with its Purpose"
    );

    let loaded = Keyring::load(&path).unwrap();
    let purposes = |kr: &Keyring| -> Vec<(String, KeyPurpose, KeyState)> {
        kr.keys()
            .into_iter()
            .map(|k| (k.kid.to_string(), k.purpose, k.state))
            .collect()
    };
    assert_eq!(purposes(&loaded), purposes(&w.keyring));
    assert_eq!(loaded.key_info("wit-es").unwrap().purpose, KeyPurpose::Wit);
    assert_eq!(
        loaded.key_info("bearer-es").unwrap().purpose,
        KeyPurpose::Bearer
    );
    assert_eq!(
        loaded
            .active_id_for_purpose(KeyPurpose::Wit, Algorithm::Es256)
            .unwrap()
            .as_str(),
        "wit-es"
    );
    assert_eq!(kids(&loaded.jwks()), kids(&w.keyring.jwks()));
    assert_eq!(
        kids(&loaded.jwks_for(KeyPurpose::Wit)),
        set(&["wit-ed", "wit-es"])
    );
    // The loaded WIT key still signs WITs, which the original verifies.
    let wk = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let wit = issuer_of(&loaded)
        .issue_with(Algorithm::Es256, &wit_request(&wk), NOW)
        .unwrap();
    assert_eq!(wit.kid.as_str(), "wit-es");
    w.verifier
        .verify_proof(
            &wit.token,
            &prove(&wk, &wit.token),
            &ProofRequest::new(TARGET),
            NOW,
        )
        .unwrap();

    // Bearer keys are stored without Purpose, as before purposes existed.
    let bearer_only = Keyring::from_keys([
        key(
            Algorithm::EdDsa,
            "b-ed",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ),
        key(
            Algorithm::Es256,
            "b-es",
            2,
            KeyState::Inactive,
            KeyPurpose::Bearer,
            NOW,
        ),
    ])
    .unwrap();
    let path = dir.path().join("bearer.bin");
    bearer_only.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        !bytes.windows(b"Purpose".len()).any(|x| x == b"Purpose"),
        "a bearer-only keystore carries no Purpose"
    );
    let loaded = Keyring::load(&path).unwrap();
    for info in loaded.keys() {
        assert_eq!(info.purpose, KeyPurpose::Bearer, "{}", info.kid);
    }
}

#[test]
fn no_wit_key_is_no_active_key_and_each_pair_has_one_active_key() {
    // Only bearer keys: a WIT is refused, never signed by a bearer key.
    let bearer_only = Keyring::from_keys([
        key(
            Algorithm::EdDsa,
            "b-ed",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ),
        key(
            Algorithm::Es256,
            "b-es",
            2,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ),
    ])
    .unwrap();
    let wk = WorkloadKey::generate(Algorithm::Es256).unwrap();
    for alg in [Algorithm::EdDsa, Algorithm::Es256] {
        let e = issuer_of(&bearer_only)
            .issue_with(alg, &wit_request(&wk), NOW)
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::NoActiveKey, "{e}");
        assert!(e.to_string().contains("--purpose wit"), "{e}");
        let e = bearer_only
            .active_for_purpose(KeyPurpose::Wit, alg)
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::NoActiveKey, "{e}");
        // Bearer tokens of the same algorithm are signed.
        issuer_of(&bearer_only)
            .issue_with(alg, &common::issue_request_task(), NOW)
            .unwrap();
    }
    // The world has an active bearer RS256 key but no WIT RS256 key.
    let w = world();
    let e = w
        .issuer
        .issue_with(Algorithm::Rs256, &wit_request(&wk), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::NoActiveKey, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("--purpose wit"), "{msg}");
    assert!(msg.contains("RS256"), "{msg}");

    // A second active WIT ES256 key is refused, and nothing changes.
    let e = w
        .keyring
        .insert(key(
            Algorithm::Es256,
            "wit-es-2",
            9,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW,
        ))
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(w.keyring.key_info("wit-es-2").is_none());
    // So is a set with two of them.
    let e = Keyring::from_keys([
        key(
            Algorithm::Es256,
            "w1",
            1,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW,
        ),
        key(
            Algorithm::Es256,
            "w2",
            2,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW,
        ),
    ])
    .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    // An active WIT ES256 key beside an active bearer ES256 key is fine.
    let both = Keyring::from_keys([
        key(
            Algorithm::Es256,
            "b",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ),
        key(
            Algorithm::Es256,
            "w",
            2,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW,
        ),
    ])
    .unwrap();
    assert_eq!(both.active_id_for(Algorithm::Es256).unwrap().as_str(), "b");
    assert_eq!(
        both.active_id_for_purpose(KeyPurpose::Wit, Algorithm::Es256)
            .unwrap()
            .as_str(),
        "w"
    );
    // Inserted one by one too.
    let one_by_one = Keyring::new();
    one_by_one
        .insert(key(
            Algorithm::Es256,
            "b",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW,
        ))
        .unwrap();
    one_by_one
        .insert(key(
            Algorithm::Es256,
            "w",
            2,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW,
        ))
        .unwrap();
    assert_eq!(
        one_by_one
            .active_id_for_purpose(KeyPurpose::Wit, Algorithm::Es256)
            .unwrap()
            .as_str(),
        "w"
    );

    // rotate_purpose retires only the previous WIT ES256 key.
    let new = w
        .keyring
        .rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW + 5)
        .unwrap();
    let info = w.keyring.key_info(new.as_str()).unwrap();
    assert_eq!(
        (info.purpose, info.algorithm, info.state),
        (KeyPurpose::Wit, Algorithm::Es256.into(), KeyState::Active)
    );
    let old = w.keyring.key_info("wit-es").unwrap();
    assert_eq!(old.state, KeyState::Inactive);
    assert_eq!(old.retired_time, NOW + 5);
    for kid in ["bearer-ed", "bearer-es", "bearer-rs", "wit-ed"] {
        assert_eq!(
            w.keyring.key_info(kid).unwrap().state,
            KeyState::Active,
            "{kid}"
        );
    }
    assert_eq!(
        w.keyring.active_id_for(Algorithm::Es256).unwrap().as_str(),
        "bearer-es"
    );
    let wit = w
        .issuer
        .issue_with(Algorithm::Es256, &wit_request(&wk), NOW + 5)
        .unwrap();
    assert_eq!(wit.kid, new);
    let bearer = w
        .issuer
        .issue_with(Algorithm::Es256, &common::issue_request_task(), NOW + 5)
        .unwrap();
    assert_eq!(bearer.kid.as_str(), "bearer-es");

    // A prepublished WIT key replaces only the WIT key of its pair.
    let next = w
        .keyring
        .prepublish_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW + 5, NOW + 100)
        .unwrap();
    assert_eq!(
        w.keyring.key_info(next.as_str()).unwrap().purpose,
        KeyPurpose::Wit
    );
    assert!(!kids(&w.keyring.jwks()).contains(next.as_str()));
    assert!(kids(&w.keyring.jwks_for(KeyPurpose::Wit)).contains(next.as_str()));
    assert_eq!(
        w.keyring.promote_due(NOW + 100),
        std::slice::from_ref(&next)
    );
    assert_eq!(
        w.keyring
            .active_id_for_purpose(KeyPurpose::Wit, Algorithm::Es256),
        Some(next)
    );
    assert_eq!(
        w.keyring.active_id_for(Algorithm::Es256).unwrap().as_str(),
        "bearer-es"
    );
}

#[test]
fn rotation_plans_are_per_purpose() {
    let policy = RotationPolicy::new(Some(Duration::from_secs(HOUR as u64)));
    let threshold = 720 * HOUR;
    let old = NOW - 400 * HOUR; // past half the threshold
    let none: Vec<RotationAction> = Vec::new();
    let kr = Keyring::from_keys([
        key(
            Algorithm::EdDsa,
            "bearer-ed",
            1,
            KeyState::Active,
            KeyPurpose::Bearer,
            old,
        ),
        key(
            Algorithm::Es256,
            "bearer-es",
            2,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW - 10,
        ),
        key(
            Algorithm::EdDsa,
            "wit-ed",
            3,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW - 10,
        ),
        key(
            Algorithm::Es256,
            "wit-es",
            4,
            KeyState::Active,
            KeyPurpose::Wit,
            old,
        ),
    ])
    .unwrap();
    let keys = kr.keys();
    assert_eq!(
        plan_rotation(&keys, NOW, &policy),
        [
            RotationAction::Prepublish {
                algorithm: Algorithm::EdDsa,
                purpose: KeyPurpose::Bearer,
                publish_at: old + threshold,
            },
            RotationAction::Prepublish {
                algorithm: Algorithm::Es256,
                purpose: KeyPurpose::Wit,
                publish_at: old + threshold,
            },
        ]
    );
    // Each pair's plan ignores the other purpose's keys.
    assert_eq!(
        plan_rotation_for_purpose(&keys, KeyPurpose::Bearer, Algorithm::Es256, NOW, &policy),
        none
    );
    assert_eq!(
        plan_rotation_for(&keys, Algorithm::Es256, NOW, &policy),
        none
    );
    assert_eq!(
        plan_rotation_for_purpose(&keys, KeyPurpose::Wit, Algorithm::Es256, NOW, &policy),
        [RotationAction::Prepublish {
            algorithm: Algorithm::Es256,
            purpose: KeyPurpose::Wit,
            publish_at: old + threshold,
        }]
    );
    assert_eq!(
        plan_rotation_for_purpose(&keys, KeyPurpose::Wit, Algorithm::EdDsa, NOW, &policy),
        none
    );
    // A pair with no key (WIT RS256, beside an active bearer RS256 key
    // elsewhere) is to be rotated in with its purpose.
    assert_eq!(
        plan_rotation_for_purpose(&keys, KeyPurpose::Wit, Algorithm::Rs256, NOW, &policy),
        [RotationAction::Rotate {
            algorithm: Algorithm::Rs256,
            purpose: KeyPurpose::Wit,
        }]
    );

    // Prepublishing the WIT successor settles the WIT pair only.
    let next = kr
        .prepublish_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW, old + threshold)
        .unwrap();
    let keys = kr.keys();
    assert_eq!(
        plan_rotation(&keys, NOW, &policy),
        [RotationAction::Prepublish {
            algorithm: Algorithm::EdDsa,
            purpose: KeyPurpose::Bearer,
            publish_at: old + threshold,
        }]
    );
    // When it is due, it is promoted.
    assert_eq!(
        plan_rotation_for_purpose(
            &keys,
            KeyPurpose::Wit,
            Algorithm::Es256,
            old + threshold,
            &policy
        ),
        [RotationAction::Promote { kid: next }]
    );

    // A retired WIT key is deprecated by the WIT pair's plan once its
    // tokens have expired; the bearer pair's plan never names it.
    let kr = Keyring::from_keys([
        key(
            Algorithm::Es256,
            "bearer-es",
            2,
            KeyState::Active,
            KeyPurpose::Bearer,
            NOW - 3 * HOUR,
        ),
        key(
            Algorithm::Es256,
            "wit-old",
            4,
            KeyState::Active,
            KeyPurpose::Wit,
            NOW - 3 * HOUR,
        ),
    ])
    .unwrap();
    kr.rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW - 2 * HOUR)
        .unwrap();
    let keys = kr.keys();
    let deprecate = RotationAction::Deprecate {
        kid: workload_identity::KeyId::new("wit-old").unwrap(),
    };
    assert_eq!(
        plan_rotation(&keys, NOW, &policy),
        std::slice::from_ref(&deprecate)
    );
    assert_eq!(
        plan_rotation_for_purpose(&keys, KeyPurpose::Wit, Algorithm::Es256, NOW, &policy),
        [deprecate]
    );
    assert_eq!(
        plan_rotation_for(&keys, Algorithm::Es256, NOW, &policy),
        none
    );
}

/// The bundle endpoint's `spiffe_sequence` (`Keyring::spiffe_sequence`):
/// the latest moment the bundle's keys record while keys are added, of
/// either purpose; EdDSA keys (never in a bundle) do not move it; every
/// other change of the bundle's keys raises it by one at least, a hand
/// deprecation and a removal included (SPIFFE Trust Domain and Bundle 4.1:
/// it MUST change whenever the contents change), and it never falls; a
/// keyring saved and loaded again (a restart, another server) has the same.
#[test]
fn the_bundle_sequence_changes_with_every_change_of_the_bundle() {
    let kr = Keyring::new();
    assert_eq!(kr.spiffe_sequence(), 0);
    kr.rotate(NOW).unwrap();
    assert_eq!(kr.spiffe_sequence(), 0, "EdDSA keys are in no bundle");
    let first = kr.rotate_alg(Algorithm::Es256, NOW + 10).unwrap();
    assert_eq!(kr.spiffe_sequence(), (NOW + 10) as u64);
    kr.rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW + 20)
        .unwrap();
    assert_eq!(kr.spiffe_sequence(), (NOW + 20) as u64);
    kr.rotate_alg(Algorithm::Es256, NOW + 30).unwrap();
    assert_eq!(kr.spiffe_sequence(), (NOW + 30) as u64);
    kr.rotate(NOW + 40).unwrap();
    assert_eq!(kr.spiffe_sequence(), (NOW + 30) as u64, "an EdDSA key");
    // A deprecation by hand: no recorded moment moves, the bundle loses a
    // key, so the sequence rises by one.
    kr.deprecate(first.as_str(), NOW + 50).unwrap();
    assert_eq!(kr.spiffe_sequence(), (NOW + 31) as u64);
    assert_eq!(
        kr.spiffe_sequence(),
        (NOW + 31) as u64,
        "read again: unchanged"
    );

    let bundle: serde_json::Value =
        serde_json::from_str(&kr.spiffe_endpoint_bundle_json(Duration::from_secs(60))).unwrap();
    assert_eq!(bundle["spiffe_sequence"], NOW + 31);
    assert_eq!(bundle["spiffe_refresh_hint"], 60);
    assert_eq!(bundle["keys"].as_array().unwrap().len(), 2, "{bundle}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    kr.save(&path).unwrap();
    let again = Keyring::load(&path).unwrap();
    assert_eq!(again.spiffe_sequence(), (NOW + 31) as u64);
    assert_eq!(
        again.spiffe_endpoint_bundle_json(Duration::from_secs(60)),
        kr.spiffe_endpoint_bundle_json(Duration::from_secs(60))
    );
    // Removing the deprecated key does not change the bundle (it had left
    // it): the sequence stays. A policy stored later does not lower it.
    again.remove(first.as_str()).unwrap();
    assert_eq!(again.spiffe_sequence(), (NOW + 31) as u64);
    // A key added with a time older than the newest moment (a clock behind)
    // still raises it; so does removing a published key (the first WIT key,
    // by way of a deprecation), which lowers no recorded maximum here.
    let wit = again
        .keys()
        .into_iter()
        .find(|k| k.purpose == KeyPurpose::Wit)
        .unwrap()
        .kid;
    again
        .rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW + 25)
        .unwrap();
    assert_eq!(again.spiffe_sequence(), (NOW + 32) as u64);
    again.deprecate(wit.as_str(), NOW + 60).unwrap();
    again.remove(wit.as_str()).unwrap();
    assert_eq!(again.spiffe_sequence(), (NOW + 33) as u64);
    again.save(&path).unwrap();
    let third = Keyring::load(&path).unwrap();
    assert_eq!(third.spiffe_sequence(), (NOW + 33) as u64);
    // The next rotation's create time is the newest moment again.
    third.rotate_alg(Algorithm::Es256, NOW + 3600).unwrap();
    assert_eq!(third.spiffe_sequence(), (NOW + 3600) as u64);
}
