//! The keyring: derivation vectors from independent implementations, rotation
//! states, bad input leaving the keyring unchanged, JWKS/OIDC export and import.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::Verifier;
use serde_json::{Value, json};
use workload_identity::ResultCode;
use workload_identity::{
    KeyDerivation, KeyId, KeyInfo, KeyMaterial, KeyPurpose, KeyState, Keyring, OidcDiscovery,
    RootKey, RotationPolicy,
};

const HOUR: i64 = 3600;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn key(id: &str, byte: u8, state: KeyState, create: i64) -> RootKey {
    RootKey::new(
        KeyId::new(id).unwrap(),
        KeyMaterial::from_slice(&[byte; 32]).unwrap(),
        KeyDerivation::HkdfV1,
        state,
        create,
    )
}

#[test]
fn derivation_matches_the_independent_vectors() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/keyring.json"
    ))
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["salt"], "workload-identity/ed25519/v1");
    let vectors = doc["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 12);
    let mut by_derivation = [0, 0];
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let derivation = KeyDerivation::from_name(v["derivation"].as_str().unwrap()).unwrap();
        by_derivation[(derivation.as_u32() - 1) as usize] += 1;
        let id = KeyId::new(v["key_id"].as_str().unwrap()).unwrap();
        let material = KeyMaterial::from_slice(&hex(v["material_hex"].as_str().unwrap())).unwrap();
        let seed = derivation.seed(&material, &id);
        assert_eq!(
            seed.to_vec(),
            hex(v["seed_hex"].as_str().unwrap()),
            "{name}: seed"
        );
        let root = RootKey::new(id, material, derivation, KeyState::Active, 0);
        let x = URL_SAFE_NO_PAD.encode(root.public_key().unwrap().as_ed25519().unwrap().as_bytes());
        assert_eq!(x, v["x"].as_str().unwrap(), "{name}: public key");
        // And through the keyring's JWKS, as a third party would read it.
        let kr = Keyring::from_keys([root]).unwrap();
        assert_eq!(
            kr.jwks().keys[0].x.as_deref(),
            Some(x.as_str()),
            "{name}: JWKS x"
        );
    }
    assert_eq!(by_derivation, [8, 4]);
}

#[test]
fn rotate_makes_exactly_one_active_and_keeps_the_old_verifying() {
    let kr = Keyring::new();
    assert_eq!(kr.active().unwrap_err().code(), ResultCode::NoActiveKey);
    let a = kr.rotate(100).unwrap();
    let sig = kr.active().unwrap().sign(b"m").unwrap();
    let b = kr.rotate(200).unwrap();
    assert_ne!(a, b);
    assert_eq!(kr.active().unwrap().id(), &b);
    let infos = kr.keys();
    assert_eq!(
        infos.iter().filter(|k| k.state == KeyState::Active).count(),
        1
    );
    let old = kr.key_info(a.as_str()).unwrap();
    assert_eq!(old.state, KeyState::Inactive);
    assert_eq!(old.retired_time, 200);
    assert_eq!(kr.key_info(b.as_str()).unwrap().create_time, 200);
    let h = kr.verifying_key(a.as_str()).unwrap();
    assert_eq!(h.state(), KeyState::Inactive);
    assert!(h.verify(b"m", &sig));
    assert!(!h.verify(b"other", &sig));
    // Fresh keys are UUIDs with HKDF v1 and distinct material.
    assert_eq!(a.as_str().len(), 36);
    let (ra, rb) = (
        kr.root_key(a.as_str()).unwrap(),
        kr.root_key(b.as_str()).unwrap(),
    );
    assert_eq!(ra.derivation(), KeyDerivation::HkdfV1);
    assert_ne!(ra.material(), rb.material());
}

#[test]
fn prepublished_keys_verify_and_promote_earliest_first() {
    let kr = Keyring::new();
    let a = kr.rotate(0).unwrap();
    let late = kr.prepublish(10, 500).unwrap();
    let early = kr.prepublish(20, 300).unwrap();
    assert_eq!(kr.key_info(early.as_str()).unwrap().publish_time, 300);
    assert_eq!(
        kr.verifying_key(late.as_str()).unwrap().state(),
        KeyState::Prepublished
    );
    assert!(kr.promote_due(299).is_empty());
    assert_eq!(kr.active().unwrap().id(), &a);
    assert_eq!(kr.promote_due(300), vec![early.clone()]);
    assert_eq!(kr.active().unwrap().id(), &early);
    assert_eq!(kr.key_info(a.as_str()).unwrap().state, KeyState::Inactive);
    // Both due at once: earliest first, so the latest ends up active.
    let kr = Keyring::new();
    kr.rotate(0).unwrap();
    let late = kr.prepublish(0, 500).unwrap();
    let early = kr.prepublish(0, 300).unwrap();
    assert_eq!(kr.promote_due(1000), vec![early.clone(), late.clone()]);
    assert_eq!(kr.active_id(), Some(late));
    assert_eq!(
        kr.key_info(early.as_str()).unwrap().state,
        KeyState::Inactive
    );
    assert_eq!(
        kr.keys()
            .iter()
            .filter(|k| k.state == KeyState::Active)
            .count(),
        1
    );
    let e = kr.prepublish(100, 99).unwrap_err();
    assert!(e.to_string().contains("must not be in the past"), "{e}");
}

#[test]
fn deprecated_and_removed_keys_stop_verifying() {
    let kr = Keyring::new();
    let a = kr.rotate(0).unwrap();
    let b = kr.rotate(10).unwrap();
    let e = kr.deprecate(b.as_str(), 20).unwrap_err();
    assert!(
        e.to_string().contains("it is the active key; rotate first"),
        "{e}"
    );
    kr.deprecate(a.as_str(), 20).unwrap();
    assert!(kr.verifying_key(a.as_str()).is_none());
    assert_eq!(kr.key_info(a.as_str()).unwrap().state, KeyState::Deprecated);
    assert!(!kr.jwks().to_json().contains(a.as_str()));
    let e = kr.promote(a.as_str(), 30).unwrap_err();
    assert!(e.to_string().contains("deprecated"), "{e}");
    kr.remove(a.as_str()).unwrap();
    assert!(kr.key_info(a.as_str()).is_none());
    assert_eq!(
        kr.remove(b.as_str()).unwrap_err().code(),
        ResultCode::InvalidArgument
    );
    assert_eq!(
        kr.remove("nope").unwrap_err().code(),
        ResultCode::UnknownKey
    );
}

#[test]
fn bad_input_is_a_distinct_error_and_leaves_the_keyring_unchanged() {
    let kr = Keyring::from_keys([key("k1", 1, KeyState::Active, 0)]).unwrap();
    let before = kr.keys();

    for len in [0usize, 16, 31, 33] {
        let e = KeyMaterial::from_slice(&vec![9; len]).unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument);
        assert!(e.to_string().contains(&format!("got {len} bytes")), "{e}");
    }
    let long = "k".repeat(129);
    for (bad, why) in [
        ("", "must not be empty"),
        (long.as_str(), "at most 128"),
        ("a/b", "found '/'"),
        ("a..b", "\"..\""),
        ("a\0", "found '\\0'"),
        ("clé", "found 'é'"),
    ] {
        let e = KeyId::new(bad).unwrap_err();
        assert!(e.to_string().contains(why), "{bad:?}: {e}");
    }
    let e = kr.insert(key("k1", 2, KeyState::Inactive, 5)).unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey);
    assert_eq!(
        e.to_string(),
        "duplicate key ID \"k1\": a key with this ID is already in the keyring"
    );
    let e = kr.insert(key("k2", 2, KeyState::Active, 5)).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(
        e.to_string()
            .contains("second active EdDSA bearer key: k1 is active"),
        "{e}"
    );
    let e = kr
        .insert_all(&[
            key("k3", 3, KeyState::Inactive, 5),
            key("k3", 4, KeyState::Inactive, 6),
        ])
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey);
    let e = kr.promote("k9", 10).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey);
    assert!(e.to_string().contains("\"k9\": no key with this ID"), "{e}");
    assert_eq!(
        kr.deprecate("k9", 10).unwrap_err().code(),
        ResultCode::UnknownKey
    );

    assert_eq!(
        kr.keys(),
        before,
        "every failed call left the keyring as it was"
    );
    assert_eq!(kr.len(), 1);
}

#[test]
fn jwks_is_deterministic_and_complete() {
    let kr = Keyring::from_keys([
        key("c", 3, KeyState::Inactive, 100),
        key("a", 1, KeyState::Active, 200),
        key("b", 2, KeyState::Prepublished, 200).with_publish_time(900),
        key("z", 4, KeyState::Deprecated, 50),
    ])
    .unwrap();
    let jwks: Value = serde_json::from_str(&kr.jwks().to_json()).unwrap();
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(
        kids,
        ["c", "a", "b"],
        "by create time then kid; deprecated left out"
    );
    let a = kr.key_info("a").unwrap();
    assert_eq!(
        jwks["keys"][1],
        json!({"kty":"OKP","crv":"Ed25519","x": URL_SAFE_NO_PAD.encode(a.public_key.as_ed25519().unwrap().as_bytes()),
               "kid":"a","alg":"EdDSA","use":"sig"})
    );
    // Exact text, field order included.
    let text = kr.jwks().to_json();
    assert!(
        text.starts_with("{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\""),
        "{text}"
    );
    assert_eq!(text, kr.jwks().to_json());
}

#[test]
fn jwks_max_age_is_half_the_time_to_the_next_switch_with_a_floor() {
    let policy = RotationPolicy::new(Some(Duration::from_secs(HOUR as u64)));
    let kr = Keyring::from_keys([key("a", 1, KeyState::Active, 0)]).unwrap();
    // Next switch: 720 h after creation; at 20 h, half of 700 h.
    assert_eq!(
        kr.jwks_max_age(20 * HOUR, &policy),
        Duration::from_secs(350 * HOUR as u64)
    );
    // Close to (or past) the switch: the 15-minute floor.
    assert_eq!(
        kr.jwks_max_age(720 * HOUR - 60, &policy),
        Duration::from_secs(900)
    );
    assert_eq!(
        kr.jwks_max_age(800 * HOUR, &policy),
        Duration::from_secs(900)
    );
    // A pending prepublished key is the next switch.
    kr.insert(key("b", 2, KeyState::Prepublished, 400 * HOUR).with_publish_time(720 * HOUR))
        .unwrap();
    assert_eq!(
        kr.jwks_max_age(700 * HOUR, &policy),
        Duration::from_secs(10 * HOUR as u64)
    );
    // No keys at all: the floor.
    assert_eq!(
        Keyring::new().jwks_max_age(0, &policy),
        Duration::from_secs(900)
    );
}

/// The operator's 15 days with a 30 s lead time: bounded by the next
/// planned change less the lead time, a cache fetches the set again before
/// any planned key can sign unseen.
#[test]
fn jwks_max_age_never_outlasts_the_next_planned_change_less_the_lead_time() {
    let policy = RotationPolicy::new(Some(Duration::from_secs(HOUR as u64)));
    let lead = Duration::from_secs(30);
    let kr = Keyring::from_keys([key("a", 1, KeyState::Active, 0)]).unwrap();
    // The successor is prepublished just after 360 h: at 20 h, 340 h less
    // the lead time (half the time to the switch would be 350 h).
    assert_eq!(
        kr.jwks_max_age_with_lead(20 * HOUR, &policy, lead),
        Duration::from_secs((340 * HOUR + 1 - 30) as u64)
    );
    // Close to the prepublish: well under the 15-minute floor.
    assert_eq!(
        kr.jwks_max_age_with_lead(360 * HOUR - 60, &policy, lead),
        Duration::from_secs(31)
    );
    // Due (overdue) now: nothing may be cached.
    assert_eq!(
        kr.jwks_max_age_with_lead(500 * HOUR, &policy, lead),
        Duration::ZERO
    );
    // Far from any change, half the time to the switch still rules.
    assert!(
        kr.jwks_max_age_with_lead(20 * HOUR, &policy, lead) <= kr.jwks_max_age(20 * HOUR, &policy)
    );
}

#[test]
fn oidc_discovery_document() {
    let d = OidcDiscovery::new("https://nomad.example.com:4646").unwrap();
    let v: Value = serde_json::from_str(&d.to_json()).unwrap();
    assert_eq!(
        v,
        json!({
            "issuer": "https://nomad.example.com:4646",
            "jwks_uri": "https://nomad.example.com:4646/.well-known/jwks.json",
            "id_token_signing_alg_values_supported": ["EdDSA"],
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "claims_supported": workload_identity::CLAIMS_SUPPORTED
        })
    );
    let d = OidcDiscovery::new("https://example.com/nomad/").unwrap();
    assert_eq!(
        d.jwks_uri,
        "https://example.com/nomad/.well-known/jwks.json"
    );
    assert_eq!(d.issuer, "https://example.com/nomad/");
    for (bad, why) in [
        ("http://nomad.example.com", "must start with https://"),
        ("http://10.0.0.1:4646", "http only to localhost"),
        ("http://localhost.example.com", "http only to localhost"),
        ("nomad.example.com", "must start with https://"),
        ("https://nomad.example.com/?a=b", "query"),
        ("https://nomad.example.com/#x", "fragment"),
        ("https://user@nomad.example.com", "user info"),
        ("https://", "host"),
        ("https:///path", "host"),
        ("https://nomad example.com", "whitespace"),
    ] {
        let e = OidcDiscovery::new(bad).unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument);
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
    // http only to this machine, so OIDC clients can be tested on loopback.
    for local in [
        "http://127.0.0.1:8080",
        "http://127.1.2.3",
        "http://localhost:4646/nomad",
        "http://[::1]:9000",
    ] {
        let d = OidcDiscovery::new(local).unwrap();
        assert_eq!(d.issuer, local);
        assert!(d.jwks_uri.starts_with("http://"), "{}", d.jwks_uri);
    }
}

fn jwk(kid: &str, x: &str) -> Value {
    json!({"kty":"OKP","crv":"Ed25519","x":x,"kid":kid,"alg":"EdDSA","use":"sig"})
}

#[test]
fn jwks_import_gives_a_verify_only_keyring_that_verifies() {
    let signer = Keyring::new();
    let a = signer.rotate(0).unwrap();
    let sig_a = signer.active().unwrap().sign(b"token a").unwrap();
    let b = signer.rotate(10).unwrap();
    let sig_b = signer.active().unwrap().sign(b"token b").unwrap();

    let mut doc: Value = serde_json::from_str(&signer.jwks().to_json()).unwrap();
    doc["keys"].as_array_mut().unwrap().extend([
        json!({"kty":"oct","k":"c2VjcmV0","kid":"hmac-1"}),
        json!({"kty":"OKP","crv":"Ed25519","x":"irrelevant","kid":"enc-1","use":"enc"}),
    ]);
    let (verifier, report) = Keyring::from_jwks(&doc.to_string()).unwrap();
    assert_eq!(report.imported, vec![a.clone(), b.clone()]);
    assert_eq!(report.skipped.len(), 2);
    assert_eq!(report.skipped[0].kid.as_deref(), Some("hmac-1"));
    assert!(
        report.skipped[0].reason.contains("kty is Some(\"oct\")"),
        "{:?}",
        report.skipped
    );
    assert!(
        report.skipped[1].reason.contains("use is \"enc\""),
        "{:?}",
        report.skipped
    );

    assert!(
        verifier
            .verifying_key(a.as_str())
            .unwrap()
            .verify(b"token a", &sig_a)
    );
    assert!(
        verifier
            .verifying_key(b.as_str())
            .unwrap()
            .verify(b"token b", &sig_b)
    );
    assert_eq!(
        verifier.active().unwrap_err().code(),
        ResultCode::NoActiveKey
    );
    assert!(verifier.keys().iter().all(|k| !k.can_sign()));
    let e = verifier.promote(a.as_str(), 20).unwrap_err();
    assert!(e.to_string().contains("verify-only"), "{e}");

    // Importing the same set again changes nothing.
    let again = verifier.import_jwks(&signer.jwks().to_json()).unwrap();
    assert!(again.imported.is_empty());
    assert_eq!(again.unchanged, vec![a, b]);
}

#[test]
fn jwks_import_rejects_bad_keys_all_or_nothing() {
    let signer = Keyring::new();
    let good_id = signer.rotate(0).unwrap();
    let good_x = signer.jwks().keys[0].x.clone().unwrap();
    let good = jwk(good_id.as_str(), &good_x);
    // The identity point (small order) and a non-canonical encoding of it (y = p + 1).
    let identity = URL_SAFE_NO_PAD.encode({
        let mut b = [0u8; 32];
        b[0] = 1;
        b
    });
    let non_canonical = URL_SAFE_NO_PAD.encode({
        let mut b = [0xffu8; 32];
        b[0] = 0xee;
        b[31] = 0x7f;
        b
    });
    let mut trailing_bits = good_x.clone();
    let last = trailing_bits.pop().unwrap();
    // 32 bytes = 43 chars; the last carries 4 data bits + 2 zero bits: flip a low bit.
    let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let idx = alphabet.find(last).unwrap();
    trailing_bits.push(alphabet.as_bytes()[idx ^ 1] as char);

    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"kty":"OKP","crv":"X25519","x":good_x,"kid":"k"}),
            "keys[1].crv: expected \"Ed25519\"",
        ),
        (
            json!({"kty":"OKP","crv":"Ed448","x":good_x,"kid":"k"}),
            "keys[1].crv",
        ),
        (
            json!({"kty":"OKP","crv":"Ed25519","x":good_x,"kid":"k","alg":"RS256"}),
            "keys[1].alg",
        ),
        (
            json!({"kty":"OKP","crv":"Ed25519","x":good_x,"kid":"k","d":"c2VjcmV0"}),
            "private key material",
        ),
        (
            json!({"kty":"OKP","crv":"Ed25519","x":good_x}),
            "keys[1].kid: missing",
        ),
        (
            json!({"kty":"OKP","crv":"Ed25519","x":good_x,"kid":"a/b"}),
            "keys[1].kid",
        ),
        (
            json!({"kty":"OKP","crv":"Ed25519","kid":"k"}),
            "keys[1].x: missing",
        ),
        (jwk("k", &format!("{good_x}=")), "base64url"),
        (jwk("k", &format!(" {good_x}")), "base64url"),
        (jwk("k", &trailing_bits), "base64url"),
        (jwk("k", &format!("+{}", &good_x[1..])), "base64url"),
        (jwk("k", "AAAA"), "32 bytes, got 3"),
        (jwk("k", &identity), "small-order"),
        (jwk("k", &non_canonical), "keys[1].x"),
    ];
    for (bad, why) in cases {
        let doc = json!({"keys": [good.clone(), bad.clone()]});
        let kr = Keyring::new();
        let e = kr.import_jwks(&doc.to_string()).unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
        assert!(kr.is_empty(), "{bad}: nothing imported");
    }
    // Duplicate kid inside one document, and a kid already present with another key.
    let doc = json!({"keys": [good.clone(), good.clone()]});
    let e = Keyring::new().import_jwks(&doc.to_string()).unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey);
    let other = Keyring::from_keys([key(good_id.as_str(), 7, KeyState::Active, 0)]).unwrap();
    let e = other
        .import_jwks(&json!({"keys": [good]}).to_string())
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey);
    // Not a JWKS at all, and duplicate JSON members inside a JWK.
    for text in [
        "",
        "[]",
        "{\"keys\":{}}",
        "{\"kid\":\"x\"}",
        "{\"keys\":[{\"kty\":\"OKP\",\"kty\":\"OKP\"}]}",
    ] {
        let e = Keyring::new().import_jwks(text).unwrap_err();
        assert_eq!(e.code(), ResultCode::DecodeError, "{text}: {e}");
    }
}

#[test]
fn nomad_raw_seed_keys_sign_like_nomad() {
    // Nomad seeds Ed25519 with the 32-byte root key itself.
    let material = [42u8; 32];
    let kr = Keyring::from_keys([RootKey::new(
        KeyId::new("nomad-root").unwrap(),
        KeyMaterial::from_slice(&material).unwrap(),
        KeyDerivation::NomadRawSeed,
        KeyState::Active,
        0,
    )])
    .unwrap();
    let nomad = ed25519_dalek::SigningKey::from_bytes(&material);
    let sig = kr.active().unwrap().sign(b"claims").unwrap();
    let sig = ed25519_dalek::Signature::from_slice(&sig).unwrap();
    assert!(nomad.verifying_key().verify(b"claims", &sig).is_ok());
    assert_eq!(
        kr.key_info("nomad-root").unwrap().public_key,
        workload_identity::PublicKey::Ed25519(nomad.verifying_key())
    );
}

#[test]
fn waiting_for_a_key_sees_it_arrive_and_gives_up_at_the_bound() {
    let kr = Keyring::new();
    let kr2 = kr.clone();
    let inserter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        kr2.insert(key("late", 5, KeyState::Active, 0)).unwrap();
    });
    let found = kr.wait_for_key("late", Duration::from_secs(10));
    inserter.join().unwrap();
    assert_eq!(found.unwrap().id().as_str(), "late");
    let start = std::time::Instant::now();
    assert!(
        kr.wait_for_key("never", Duration::from_millis(100))
            .is_none()
    );
    assert!(start.elapsed() >= Duration::from_millis(100));
}

fn info(id: &str, state: KeyState, create: i64, publish: i64, retired: i64) -> KeyInfo {
    let k = key(id, id.len() as u8, state, create);
    KeyInfo {
        purpose: KeyPurpose::Bearer,
        kid: k.id().clone(),
        algorithm: workload_identity::Algorithm::EdDsa.into(),
        state,
        derivation: Some(KeyDerivation::HkdfV1),
        create_time: create,
        publish_time: publish,
        retired_time: retired,
        public_key: k.public_key().unwrap(),
        external: None,
    }
}

#[test]
fn rotation_policy_timeline_with_defaults() {
    use workload_identity::{RotationAction as A, plan_rotation};
    let policy = RotationPolicy::new(Some(Duration::from_secs(HOUR as u64)));
    let a = info("a", KeyState::Active, 0, 0, 0);
    // Young key: nothing to do. Exactly half: still nothing (older than half acts).
    assert!(plan_rotation(std::slice::from_ref(&a), 100 * HOUR, &policy).is_empty());
    assert!(plan_rotation(std::slice::from_ref(&a), 360 * HOUR, &policy).is_empty());
    // Older than half the threshold: prepublish for create + 720 h.
    assert_eq!(
        plan_rotation(std::slice::from_ref(&a), 361 * HOUR, &policy),
        vec![A::Prepublish {
            algorithm: workload_identity::Algorithm::EdDsa,
            purpose: KeyPurpose::Bearer,
            publish_at: 720 * HOUR
        }]
    );
    // Successor pending: nothing more until it is due.
    let b = info("b", KeyState::Prepublished, 361 * HOUR, 720 * HOUR, 0);
    assert!(plan_rotation(&[a.clone(), b.clone()], 500 * HOUR, &policy).is_empty());
    // Due: promote; B's age counts from its publish time, so no new prepublish.
    assert_eq!(
        plan_rotation(&[a.clone(), b.clone()], 720 * HOUR, &policy),
        vec![A::Promote { kid: b.kid.clone() }]
    );
    // A retired at 720 h: deprecated once the longest TTL + 60 s skew has passed.
    let a_old = info("a", KeyState::Inactive, 0, 0, 720 * HOUR);
    let b_on = info("b", KeyState::Active, 361 * HOUR, 720 * HOUR, 0);
    assert!(plan_rotation(&[a_old.clone(), b_on.clone()], 721 * HOUR + 59, &policy).is_empty());
    assert_eq!(
        plan_rotation(&[a_old.clone(), b_on.clone()], 721 * HOUR + 60, &policy),
        vec![A::Deprecate {
            kid: a_old.kid.clone()
        }]
    );
    // B has signed for half the threshold at 1080 h: prepublish C for 1440 h.
    assert_eq!(
        plan_rotation(std::slice::from_ref(&b_on), 1081 * HOUR, &policy),
        vec![A::Prepublish {
            algorithm: workload_identity::Algorithm::EdDsa,
            purpose: KeyPurpose::Bearer,
            publish_at: 1440 * HOUR
        }]
    );
    // Tokens without exp in use: never deprecate. Unknown retire time: never.
    let forever = RotationPolicy::new(None);
    assert!(
        plan_rotation(&[a_old.clone(), b_on.clone()], 99_999 * HOUR, &forever)
            .iter()
            .all(|x| !matches!(x, A::Deprecate { .. }))
    );
    let unknown = info("u", KeyState::Inactive, 0, 0, 0);
    assert!(plan_rotation(&[unknown, b_on.clone()], 730 * HOUR, &policy).is_empty());
    // No active key: rotate. Overdue with no successor: publish now.
    assert_eq!(
        plan_rotation(&[], 5, &policy),
        vec![A::Rotate {
            algorithm: workload_identity::Algorithm::EdDsa,
            purpose: KeyPurpose::Bearer,
        }]
    );
    assert_eq!(
        plan_rotation(std::slice::from_ref(&a), 900 * HOUR, &policy),
        vec![A::Prepublish {
            algorithm: workload_identity::Algorithm::EdDsa,
            purpose: KeyPurpose::Bearer,
            publish_at: 900 * HOUR
        }]
    );
    // Pure: same inputs, same plan.
    let keys = [a_old, b_on];
    assert_eq!(
        plan_rotation(&keys, 2000 * HOUR, &policy),
        plan_rotation(&keys, 2000 * HOUR, &policy)
    );
}
