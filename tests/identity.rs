//! Issuance and verification end to end: the claims, every rejection rule (with a
//! valid signature wherever the rule is not about the signature), replica lag,
//! key waits, rotation and the cache.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::identity::{AUD, HEADER, KID, NOW, payload_with, root_key, world};
use serde_json::json;
use workload_identity::KeyState;
use workload_identity::model::GoDuration;
use workload_identity::{AllocState, Audience, Consistency, Issuer, Keyring, ResultCode, Verifier};

fn code(r: Result<workload_identity::VerifiedIdentity, workload_identity::Error>) -> ResultCode {
    match r {
        Ok(v) => panic!("expected a rejection, got {v:?}"),
        Err(e) => e.code(),
    }
}

#[test]
fn issued_claims_follow_the_contract() {
    let w = world();
    let signed = Issuer::new(w.keyring.clone())
        .issuer("https://nomad.example.com")
        .issue(&common::issue_request_task(), NOW)
        .unwrap();
    let c = &signed.claims;
    assert_eq!(signed.kid.as_str(), KID);
    assert_eq!(c.namespace, "default");
    assert_eq!(c.job_id, "web", "child jobs name their parent");
    assert_eq!(c.allocation_id, common::ALLOC_ID);
    assert_eq!(c.task.as_deref(), Some("server"));
    assert_eq!(c.service, None);
    assert_eq!(
        c.subject,
        "global:default:web:frontend:server:vault_default"
    );
    assert_eq!(c.audience, ["vault.io", "consul.io"]);
    assert_eq!(
        (c.issued_at, c.not_before, c.expires_at),
        (Some(NOW), Some(NOW), Some(NOW + 3600))
    );
    assert_eq!(c.issuer.as_deref(), Some("https://nomad.example.com"));
    let jti = uuid::Uuid::parse_str(&c.jwt_id).unwrap();
    assert_eq!(jti.get_version_num(), 4);

    // The token's segments, decoded: the exact header, integer dates, aud array.
    let parts: Vec<&str> = signed.token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let header = URL_SAFE_NO_PAD.decode(parts[0]).unwrap();
    assert_eq!(header, br#"{"alg":"EdDSA","kid":"key-1","typ":"JWT"}"#);
    let payload: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(payload["exp"], json!(NOW + 3600));
    assert!(payload["iat"].is_i64());
    assert_eq!(payload["aud"], json!(["vault.io", "consul.io"]));

    // One audience: a string; a service: nomad_service; no TTL: no exp; no iss.
    let svc = w
        .issuer
        .issue(&common::issue_request_service(), NOW)
        .unwrap();
    let p: serde_json::Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(svc.token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(p["aud"], json!("consul.io"));
    assert_eq!(p["nomad_service"], json!("web-api"));
    assert!(p.get("nomad_task").is_none() && p.get("iss").is_none());
    assert_eq!(
        p["sub"],
        json!("eu-west:default:web:frontend:web-api:consul-service_web-api")
    );
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_nanos(0);
    let forever = w.issuer.issue(&req, NOW).unwrap();
    assert_eq!(forever.claims.expires_at, None);
    assert!(!forever.token.is_empty());
}

#[test]
fn issue_rejects_invalid_requests_and_needs_an_active_key() {
    let w = world();
    let mut req = common::issue_request_task();
    req.identity.name = "bad name".into();
    req.allocation.id.clear();
    let e = w.issuer.issue(&req, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(
        e.to_string().contains("Allocation.ID") && e.to_string().contains("Identity.Name"),
        "{e}"
    );
    let empty = Issuer::new(Keyring::new());
    let e = empty.issue(&common::issue_request_task(), NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::NoActiveKey);
    // An empty issuer means no iss, as in the C ABI.
    let w2 = world();
    let plain = Issuer::new(w2.keyring.clone())
        .issuer("")
        .issue(&common::issue_request_task(), NOW)
        .unwrap();
    assert_eq!(plain.claims.issuer, None);
}

#[test]
fn a_valid_token_verifies_and_names_its_key() {
    let w = world();
    let token = w.token();
    let v = w.verifier.verify(&token, NOW).unwrap();
    assert_eq!(v.kid.as_str(), KID);
    assert_eq!(v.claims.allocation_id, common::ALLOC_ID);
    // Within the leeway on both sides.
    w.verifier.verify(&token, NOW - 59).unwrap();
    w.verifier.verify(&token, NOW + 3600 + 59).unwrap();
    assert_eq!(w.verifier.stats().accepted, 3);
}

#[test]
fn replica_lag_falls_back_to_a_consistent_read() {
    // Seed 000: the allocation is known to the leader but not yet to this replica.
    let w = world();
    let token = w.token();
    w.store.set_state(common::ALLOC_ID, AllocState::Missing);
    w.store.set_lagging(true);
    w.store.upsert(&common::allocation());
    assert_eq!(
        workload_identity::StateStore::allocation_state(
            &*w.store,
            common::ALLOC_ID,
            Consistency::Stale
        ),
        Ok(AllocState::Missing)
    );
    let stale_before = w.store.reads(Consistency::Stale);
    w.verifier.verify(&token, NOW).unwrap();
    assert_eq!(w.store.reads(Consistency::Stale), stale_before + 1);
    assert_eq!(w.store.reads(Consistency::Consistent), 1);
    assert_eq!(w.verifier.stats().consistent_fallbacks, 1);

    // A live stale answer needs no second read.
    w.store.set_lagging(false);
    w.verifier.verify(&token, NOW).unwrap();
    assert_eq!(w.store.reads(Consistency::Consistent), 1);

    // Missing in both views: not found.
    w.store.set_state(common::ALLOC_ID, AllocState::Missing);
    let e = w.verifier.verify(&token, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::AllocationNotFound);
    assert!(e.to_string().contains(common::ALLOC_ID));

    // Terminal on the leader while the replica lags: terminal.
    w.store.set_lagging(true);
    let mut dead = common::allocation();
    dead.client_status = "complete".into();
    w.store.upsert(&dead);
    assert_eq!(
        code(w.verifier.verify(&token, NOW)),
        ResultCode::AllocationTerminal
    );

    // The store failing: closed, never open.
    w.store.set_lagging(false);
    w.store.upsert(&common::allocation());
    w.store.set_unavailable(Some("connection refused"));
    let e = w.verifier.verify(&token, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable);
    assert!(e.to_string().contains("connection refused"), "{e}");
}

#[test]
fn a_key_that_arrives_late_is_waited_for_and_one_that_never_does_is_unknown() {
    let w = world();
    // A token from another server's new key that has not reached our keyring.
    let other = Keyring::from_keys([root_key("key-2", 2, KeyState::Active)]).unwrap();
    let token = Issuer::new(other.clone())
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let verifier = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new(AUD).unwrap(),
    )
    .key_wait(Duration::from_secs(30))
    .build();
    let kr = w.keyring.clone();
    let watched = verifier.clone();
    // The key arrives only once the verifier has started waiting for it
    // (`key_waits` is counted just before the wait begins), however the
    // threads are scheduled.
    let late = std::thread::spawn(move || {
        let start = Instant::now();
        while watched.stats().key_waits == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the verifier never waited for the key"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        kr.insert(root_key("key-2", 2, KeyState::Inactive)).unwrap();
    });
    let v = verifier.verify(&token, NOW).unwrap();
    late.join().unwrap();
    assert_eq!(v.kid.as_str(), "key-2");
    assert_eq!(verifier.stats().key_waits, 1, "it waited for the key once");

    let never = Keyring::from_keys([root_key("key-3", 3, KeyState::Active)]).unwrap();
    let token = Issuer::new(never)
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let start = Instant::now();
    let e = w.verifier.verify(&token, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey);
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert!(
        e.to_string().contains("key-3") && e.to_string().contains("after waiting"),
        "{e}"
    );
}

#[test]
fn every_rejection_rule_rejects_a_validly_signed_token() {
    let w = world();
    let good = payload_with(json!({}));
    w.verifier.verify(&w.sign_json(HEADER, &good), NOW).unwrap();
    let h = |s: &str| URL_SAFE_NO_PAD.encode(s);
    let hdr = h(HEADER);
    let pay = h(&good);
    let mut trailing = hdr.clone();
    // The header's base64 is 56 chars for 42 bytes: the last char carries 2
    // trailing bits that must be zero. Set one.
    let last = trailing.pop().unwrap();
    let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    trailing.push(alphabet.as_bytes()[alphabet.find(last).unwrap() | 1] as char);
    assert_ne!(
        trailing, hdr,
        "the header's last char must have carried trailing bits"
    );
    // A payload whose base64url has '-' or '_', re-encoded in the standard alphabet.
    let std_alphabet = (0..)
        .map(|n| h(&payload_with(json!({ "pad": "?>".repeat(n) }))))
        .find(|p| p.contains(['-', '_']))
        .unwrap()
        .replace('-', "+")
        .replace('_', "/");

    let cases: Vec<(&str, String, ResultCode)> = vec![
        (
            "alg none",
            w.sign_json(r#"{"alg":"none","kid":"key-1","typ":"JWT"}"#, &good),
            ResultCode::UnsupportedAlgorithm,
        ),
        (
            "alg HS256",
            w.sign_json(r#"{"alg":"HS256","kid":"key-1","typ":"JWT"}"#, &good),
            ResultCode::UnsupportedAlgorithm,
        ),
        (
            "alg RS256",
            w.sign_json(r#"{"alg":"RS256","kid":"key-1","typ":"JWT"}"#, &good),
            ResultCode::UnsupportedAlgorithm,
        ),
        (
            "missing kid",
            w.sign_json(r#"{"alg":"EdDSA","typ":"JWT"}"#, &good),
            ResultCode::UnknownKey,
        ),
        (
            "unknown kid",
            w.sign_json(r#"{"alg":"EdDSA","kid":"nope","typ":"JWT"}"#, &good),
            ResultCode::UnknownKey,
        ),
        (
            "crit",
            w.sign_json(
                r#"{"alg":"EdDSA","kid":"key-1","typ":"JWT","crit":["exp"]}"#,
                &good,
            ),
            ResultCode::MalformedToken,
        ),
        (
            "jku",
            w.sign_json(
                r#"{"alg":"EdDSA","kid":"key-1","jku":"https://evil/jwks"}"#,
                &good,
            ),
            ResultCode::MalformedToken,
        ),
        (
            "jwk",
            w.sign_json(
                r#"{"alg":"EdDSA","kid":"key-1","jwk":{"kty":"OKP"}}"#,
                &good,
            ),
            ResultCode::MalformedToken,
        ),
        (
            "x5c",
            w.sign_json(r#"{"alg":"EdDSA","kid":"key-1","x5c":["MIIB"]}"#, &good),
            ResultCode::MalformedToken,
        ),
        (
            "cty",
            w.sign_json(r#"{"alg":"EdDSA","kid":"key-1","cty":"JWT"}"#, &good),
            ResultCode::MalformedToken,
        ),
        (
            "typ other",
            w.sign_json(r#"{"alg":"EdDSA","kid":"key-1","typ":"JOSE+JSON"}"#, &good),
            ResultCode::MalformedToken,
        ),
        (
            "padding",
            w.sign_segments(&format!("{hdr}="), &pay),
            ResultCode::MalformedToken,
        ),
        (
            "padded payload",
            w.sign_segments(&hdr, &format!("{pay}==")),
            ResultCode::MalformedToken,
        ),
        (
            "trailing bits",
            w.sign_segments(&trailing, &pay),
            ResultCode::MalformedToken,
        ),
        (
            "whitespace",
            w.sign_segments(&format!("{hdr} "), &pay),
            ResultCode::MalformedToken,
        ),
        (
            "newline",
            w.sign_segments(&hdr, &format!("{}\n{}", &pay[..10], &pay[10..])),
            ResultCode::MalformedToken,
        ),
        (
            "standard base64",
            w.sign_segments(&hdr, &std_alphabet),
            ResultCode::MalformedToken,
        ),
        (
            "2 segments",
            format!("{hdr}.{pay}"),
            ResultCode::MalformedToken,
        ),
        (
            "4 segments",
            format!("{}.x", w.sign_segments(&hdr, &pay)),
            ResultCode::MalformedToken,
        ),
        (
            "dup header key",
            w.sign_json(r#"{"alg":"EdDSA","kid":"key-1","kid":"key-1"}"#, &good),
            ResultCode::MalformedToken,
        ),
        (
            "dup payload key",
            w.sign_json(HEADER, &good.replacen('{', r#"{"exp":1,"#, 1)),
            ResultCode::MalformedToken,
        ),
        (
            "exp string",
            w.sign_json(
                HEADER,
                &payload_with(json!({"exp": (NOW + 10).to_string()})),
            ),
            ResultCode::MalformedToken,
        ),
        (
            "exp float",
            w.sign_json(
                HEADER,
                &payload_with(json!({"exp": (NOW + 10) as f64 + 0.5})),
            ),
            ResultCode::MalformedToken,
        ),
        (
            "expired",
            w.sign_json(HEADER, &payload_with(json!({"exp": NOW - 60}))),
            ResultCode::Expired,
        ),
        (
            "nbf future",
            w.sign_json(HEADER, &payload_with(json!({"nbf": NOW + 61}))),
            ResultCode::NotYetValid,
        ),
        (
            "iat future",
            w.sign_json(HEADER, &payload_with(json!({"iat": NOW + 61}))),
            ResultCode::NotYetValid,
        ),
        (
            "aud mismatch",
            w.sign_json(HEADER, &payload_with(json!({"aud": "consul.io"}))),
            ResultCode::AudienceMismatch,
        ),
        (
            "aud array without ours",
            w.sign_json(HEADER, &payload_with(json!({"aud": ["a", "b"]}))),
            ResultCode::AudienceMismatch,
        ),
        (
            "no aud",
            w.sign_json(HEADER, &payload_with(json!({"aud": null}))),
            ResultCode::AudienceMismatch,
        ),
        (
            "no allocation",
            w.sign_json(HEADER, &payload_with(json!({"nomad_allocation_id": null}))),
            ResultCode::MalformedToken,
        ),
        (
            "payload not JSON",
            w.sign_json(HEADER, "not json"),
            ResultCode::MalformedToken,
        ),
        (
            "payload array",
            w.sign_json(HEADER, "[]"),
            ResultCode::MalformedToken,
        ),
        (
            "oversize",
            w.sign_json(HEADER, &payload_with(json!({"pad": "x".repeat(9000)}))),
            ResultCode::MalformedToken,
        ),
        ("empty", String::new(), ResultCode::MalformedToken),
        (
            "bad signature",
            format!("{hdr}.{pay}.{}", URL_SAFE_NO_PAD.encode([0u8; 64])),
            ResultCode::BadSignature,
        ),
        (
            "short signature",
            format!("{hdr}.{pay}.{}", URL_SAFE_NO_PAD.encode([0u8; 63])),
            ResultCode::MalformedToken,
        ),
    ];
    for (name, token, want) in cases {
        match w.verifier.verify(&token, NOW) {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => assert_eq!(e.code(), want, "{name}: {e}"),
        }
    }
    // Tokens of other algorithms, with their real signature sizes (found by the
    // PyJWT interop check: the alg must be reported whatever the size).
    for (alg, sig_len) in [
        ("none", 0),
        ("HS256", 32),
        ("HS384", 48),
        ("RS256", 256),
        ("ES384", 96),
        ("RS512", 512),
    ] {
        let header = format!(r#"{{"alg":"{alg}","kid":"key-1","typ":"JWT"}}"#);
        let t = format!(
            "{}.{}.{}",
            h(&header),
            pay,
            URL_SAFE_NO_PAD.encode(vec![7u8; sig_len])
        );
        let e = w.verifier.verify(&t, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::UnsupportedAlgorithm, "{alg}: {e}");
    }
    // An audience array containing ours is accepted.
    let ok = w.sign_json(HEADER, &payload_with(json!({"aud": ["x", AUD, "y"]})));
    w.verifier.verify(&ok, NOW).unwrap();
    // Non-UTF-8 bytes.
    let mut bytes = w.token().into_bytes();
    bytes[5] = 0xff;
    assert_eq!(
        code(w.verifier.verify_bytes(&bytes, NOW)),
        ResultCode::MalformedToken
    );
}

#[test]
fn a_signature_that_passes_verify_but_not_verify_strict_is_rejected() {
    use curve25519_dalek::scalar::Scalar;
    use ed25519_dalek::Verifier as _;
    use sha2::{Digest, Sha512};
    let w = world();
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(HEADER),
        URL_SAFE_NO_PAD.encode(payload_with(json!({})))
    );
    // R = the identity point (small order); s = k·a satisfies the equation.
    let root = w.keyring.root_key(KID).unwrap();
    let sk =
        ed25519_dalek::SigningKey::from_bytes(&root.derivation().seed(root.material(), root.id()));
    let vk = sk.verifying_key();
    let mut r = [0u8; 32];
    r[0] = 1;
    let k = Scalar::from_bytes_mod_order_wide(
        &Sha512::new()
            .chain_update(r)
            .chain_update(vk.as_bytes())
            .chain_update(input.as_bytes())
            .finalize()
            .into(),
    );
    let s = k * sk.to_scalar();
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&r);
    sig[32..].copy_from_slice(s.as_bytes());
    let signature = ed25519_dalek::Signature::from_bytes(&sig);
    assert!(
        vk.verify(input.as_bytes(), &signature).is_ok(),
        "passes plain verify"
    );
    assert!(
        vk.verify_strict(input.as_bytes(), &signature).is_err(),
        "fails verify_strict"
    );
    let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig));
    assert_eq!(
        code(w.verifier.verify(&token, NOW)),
        ResultCode::BadSignature
    );
}

#[test]
fn tokens_from_inactive_and_prepublished_keys_verify_deprecated_and_removed_do_not() {
    let w = world();
    let old = w.token();
    w.keyring.rotate(NOW).unwrap();
    assert_eq!(w.keyring.key_info(KID).unwrap().state, KeyState::Inactive);
    w.verifier.verify(&old, NOW).unwrap();

    // Another server promoted key-9 early; here it is still prepublished.
    w.keyring
        .insert(root_key("key-9", 9, KeyState::Prepublished).with_publish_time(NOW + 100))
        .unwrap();
    let elsewhere = Keyring::from_keys([root_key("key-9", 9, KeyState::Active)]).unwrap();
    let early = Issuer::new(elsewhere)
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    w.verifier.verify(&early, NOW).unwrap();

    w.keyring.deprecate(KID, NOW).unwrap();
    let e = w.verifier.verify(&old, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey);
    assert!(e.to_string().contains("deprecated"), "{e}");
    w.keyring.remove(KID).unwrap();
    assert_eq!(code(w.verifier.verify(&old, NOW)), ResultCode::UnknownKey);
}

#[test]
fn the_cache_skips_the_signature_but_not_time_state_or_key_checks() {
    let w = world();
    let verifier = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new(AUD).unwrap(),
    )
    .cache(16)
    .key_wait(Duration::from_millis(10))
    .build();
    let token = w.token();
    verifier.verify(&token, NOW).unwrap();
    verifier.verify(&token, NOW).unwrap();
    assert_eq!(verifier.stats().cache_hits, 1);
    assert_eq!(verifier.stats().cache_entries, 1);
    // After exp: rejected even from the cache.
    assert_eq!(
        code(verifier.verify(&token, NOW + 3600 + 60)),
        ResultCode::Expired
    );
    verifier.verify(&token, NOW).unwrap();
    // After the allocation turned terminal: rejected.
    let mut dead = common::allocation();
    dead.client_status = "failed".into();
    w.store.upsert(&dead);
    let hits = verifier.stats().cache_hits;
    assert_eq!(
        code(verifier.verify(&token, NOW)),
        ResultCode::AllocationTerminal
    );
    assert_eq!(
        verifier.stats().cache_hits,
        hits + 1,
        "rejected on the cache hit itself"
    );
    assert_eq!(
        verifier.stats().cache_entries,
        0,
        "and the entry is dropped"
    );
    w.store.upsert(&common::allocation());
    verifier.verify(&token, NOW).unwrap();
    // After its key is deprecated: not honoured.
    w.keyring.rotate(NOW).unwrap();
    w.keyring.deprecate(KID, NOW).unwrap();
    assert_eq!(code(verifier.verify(&token, NOW)), ResultCode::UnknownKey);
    assert_eq!(verifier.stats().cache_entries, 0);
}

#[test]
fn batch_verification_names_each_result() {
    let w = world();
    let good = w.token();
    let other = Keyring::from_keys([root_key("key-4", 4, KeyState::Active)]).unwrap();
    let foreign = Issuer::new(other)
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let mut tampered = good.clone().into_bytes();
    let n = tampered.len();
    tampered[n - 5] = if tampered[n - 5] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let results = w
        .verifier
        .verify_batch(&[&good, &foreign, &tampered, &good], NOW);
    assert!(results[0].is_ok() && results[3].is_ok());
    assert_eq!(
        results[1].as_ref().unwrap_err().code(),
        ResultCode::UnknownKey
    );
    assert_eq!(
        results[2].as_ref().unwrap_err().code(),
        ResultCode::BadSignature
    );
}

#[test]
fn verifier_requires_an_audience() {
    assert_eq!(
        Audience::new("").unwrap_err().code(),
        ResultCode::InvalidArgument
    );
    let w = world();
    let v = Verifier::builder(
        w.keyring.clone(),
        Arc::new(workload_identity::MemoryStore::new()),
        Audience::new("other").unwrap(),
    )
    .build();
    assert_eq!(
        code(v.verify(&w.token(), NOW)),
        ResultCode::AudienceMismatch
    );
}

#[test]
fn issuer_is_checked_when_configured() {
    let w = world();
    let v = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new(AUD).unwrap(),
    )
    .issuer("https://nomad.example.com")
    .require_exp(true)
    .build();
    let plain = w.token();
    let e = v.verify(&plain, NOW).unwrap_err();
    assert!(e.to_string().contains("issuer mismatch"), "{e}");
    assert_eq!(e.code(), ResultCode::IssuerMismatch);
    let with_iss = Issuer::new(w.keyring.clone()).issuer("https://nomad.example.com");
    v.verify(
        &with_iss
            .issue(&common::issue_request_task(), NOW)
            .unwrap()
            .token,
        NOW,
    )
    .unwrap();
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_nanos(0);
    let no_exp = with_iss.issue(&req, NOW).unwrap().token;
    let e = v.verify(&no_exp, NOW).unwrap_err();
    assert!(
        e.to_string().contains("the required claim exp is missing"),
        "{e}"
    );
    assert_eq!(e.code(), ResultCode::MalformedToken, "the code stays");
    w.verifier.verify(&no_exp, NOW).unwrap();
}

#[test]
fn batch_and_single_verification_accept_exactly_the_same_tokens() {
    use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
    use curve25519_dalek::scalar::Scalar;
    use sha2::{Digest, Sha512};
    let w = world();
    let root = w.keyring.root_key(KID).unwrap();
    let sk =
        ed25519_dalek::SigningKey::from_bytes(&root.derivation().seed(root.material(), root.id()));
    let vk = sk.verifying_key();
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(HEADER),
        URL_SAFE_NO_PAD.encode(payload_with(json!({})))
    );
    // A signature whose nonce point is R = [r]B + T (signed with the secret key).
    let forge = |r: u64, t: usize, s_plus_l: bool| {
        let r = Scalar::from(r);
        let big_r = (ED25519_BASEPOINT_POINT * r + EIGHT_TORSION[t])
            .compress()
            .to_bytes();
        let k = Scalar::from_bytes_mod_order_wide(
            &Sha512::new()
                .chain_update(big_r)
                .chain_update(vk.as_bytes())
                .chain_update(input.as_bytes())
                .finalize()
                .into(),
        );
        let s = r + k * sk.to_scalar();
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&big_r);
        sig[32..].copy_from_slice(s.as_bytes());
        if s_plus_l {
            // s + l, little-endian: the same signature, non-canonical scalar.
            let l: [u8; 32] = [
                0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
                0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
            ];
            let mut carry = 0u16;
            for i in 0..32 {
                let v = u16::from(sig[32 + i]) + u16::from(l[i]) + carry;
                sig[32 + i] = v as u8;
                carry = v >> 8;
            }
        }
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
    };
    let mut tokens: Vec<String> = vec![w.token(), forge(11, 0, false), forge(12, 0, true)];
    for t in 1..8 {
        tokens.push(forge(20 + t as u64, t, false));
    }
    tokens.push(forge(40, 0, false).replace(".ey", ".xx"));
    tokens.push(w.sign_json(HEADER, &payload_with(json!({"exp": NOW - 100}))));
    tokens.push("not.a.token".into());
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let batch = w.verifier.verify_batch(&refs, NOW);
    assert_eq!(batch.len(), tokens.len());
    for (i, (t, b)) in tokens.iter().zip(&batch).enumerate() {
        let single = w.verifier.verify(t, NOW);
        match (&single, b) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "token {i}"),
            (Err(a), Err(b)) => assert_eq!(a.code(), b.code(), "token {i}: {a} / {b}"),
            _ => panic!("token {i}: single {single:?} vs batch {b:?}"),
        }
    }
    let accepted: Vec<bool> = batch.iter().map(Result::is_ok).collect();
    assert_eq!(
        &accepted[..3],
        [true, true, false],
        "valid, valid (r=11), malleated s"
    );
    assert!(
        accepted[3..10].iter().all(|a| !a),
        "every torsioned R is rejected"
    );
}

/// A key source (a remote JWKS) learns of an unknown kid through the
/// keyring's hook and inserts the key while the verifier waits for it.
#[test]
fn the_unknown_key_hook_lets_a_source_supply_the_key_during_the_wait() {
    use std::sync::Mutex;
    let source = Keyring::from_keys([root_key("late-key", 9, KeyState::Active)]).unwrap();
    let token = Issuer::new(source.clone())
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let verify_only = Keyring::new();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    {
        let seen = seen.clone();
        let target = verify_only.clone();
        let jwks = source.jwks().to_json();
        verify_only.on_unknown_key(move |kid| {
            seen.lock().unwrap().push(kid.to_string());
            // Not on the verifying thread: the hook must not block.
            let (target, jwks) = (target.clone(), jwks.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                target.import_jwks(&jwks).unwrap();
            });
        });
    }
    let store = Arc::new(workload_identity::MemoryStore::new());
    store.upsert(&common::allocation());
    let v = Verifier::builder(verify_only.clone(), store, Audience::new(AUD).unwrap())
        .key_wait(Duration::from_secs(5))
        .build();
    let started = Instant::now();
    assert_eq!(v.verify(&token, NOW).unwrap().kid.as_str(), "late-key");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the wait ended at the insert"
    );
    assert_eq!(*seen.lock().unwrap(), ["late-key"]);
    // Known keys, and kids that can never be key IDs, never call it.
    v.verify(&token, NOW).unwrap();
    let bad = v.verify(
        "eyJhbGciOiJFZERTQSIsImtpZCI6Ii4uIiwidHlwIjoiSldUIn0.e30.AA",
        NOW,
    );
    assert_eq!(bad.unwrap_err().code(), ResultCode::UnknownKey);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // A deprecated key is refused at once, without the hook.
    verify_only.deprecate("late-key", NOW).unwrap();
    assert_eq!(
        v.verify(&token, NOW).unwrap_err().code(),
        ResultCode::UnknownKey
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// `explain` runs the same checks as `verify`, in order, and stops at the
/// first failure: the same verdict, and the step that failed named.
#[test]
fn explain_names_the_failing_step_and_agrees_with_verify() {
    let w = world();
    let good = w.token();
    let (hdr, pay, sig) = {
        let mut it = good.split('.');
        (
            it.next().unwrap().to_string(),
            it.next().unwrap().to_string(),
            it.next().unwrap().to_string(),
        )
    };
    let mut flipped = URL_SAFE_NO_PAD.decode(&sig).unwrap();
    flipped[3] ^= 1;
    let cases: Vec<(&str, String, Option<&str>)> = vec![
        ("good", good.clone(), None),
        ("too long", "x".repeat(9000), Some("length")),
        ("two segments", format!("{hdr}.{pay}"), Some("structure")),
        (
            "unknown kid",
            w.sign_json(
                r#"{"alg":"EdDSA","kid":"nope","typ":"JWT"}"#,
                &payload_with(json!({})),
            ),
            Some("key"),
        ),
        (
            "alg of another key",
            format!(
                "{}.{pay}.{sig}",
                URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"ES256","kid":"{KID}","typ":"JWT"}}"#))
            ),
            Some("algorithm"),
        ),
        (
            "bad signature",
            format!("{hdr}.{pay}.{}", URL_SAFE_NO_PAD.encode(&flipped)),
            Some("signature"),
        ),
        (
            "float date",
            w.sign_json(HEADER, &payload_with(json!({"iat": 1.5}))),
            Some("claims"),
        ),
        (
            "expired",
            w.sign_json(HEADER, &payload_with(json!({"exp": NOW - 3600}))),
            Some("times"),
        ),
        (
            "other audience",
            w.sign_json(HEADER, &payload_with(json!({"aud": "consul.io"}))),
            Some("audience"),
        ),
        (
            "missing allocation",
            w.sign_json(
                HEADER,
                &payload_with(json!({"nomad_allocation_id": "gone"})),
            ),
            Some("allocation"),
        ),
    ];
    let order = [
        "length",
        "structure",
        "key",
        "algorithm",
        "signature",
        "claims",
        "times",
        "audience",
        "issuer",
        "allocation",
    ];
    for (name, token, failing) in cases {
        let e = w.verifier.explain(&token, NOW);
        let verdict = w
            .verifier
            .verify(&token, NOW)
            .map(|v| v.kid)
            .map_err(|e| e.code());
        assert_eq!(
            e.result
                .as_ref()
                .map(|v| v.kid.clone())
                .map_err(|e| e.code()),
            verdict,
            "{name}"
        );
        let names: Vec<&str> = e.steps.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            order[..names.len()],
            "{name}: steps in pipeline order"
        );
        assert!(
            e.steps.iter().rev().skip(1).all(|s| s.passed),
            "{name}: only the last may fail"
        );
        match failing {
            None => {
                assert_eq!(names.len(), order.len(), "{name}");
                assert!(e.failed_step().is_none());
            }
            Some(step) => {
                let failed = e
                    .failed_step()
                    .unwrap_or_else(|| panic!("{name}: nothing failed"));
                assert_eq!(failed.name, step, "{name}");
                assert_eq!(
                    failed.detail,
                    e.result.as_ref().unwrap_err().to_string(),
                    "{name}"
                );
            }
        }
    }
}

/// `typ` `JOSE` (RFC 7515's compact JWS, allowed for JWT-SVIDs by the SPIFFE
/// spec) is a bearer token as `JWT` is: it verifies to the same claims, and
/// the proof-of-possession rules that refuse bearer tokens refuse it too.
#[test]
fn typ_jose_is_a_bearer_token_like_jwt() {
    let w = world();
    let good = payload_with(json!({}));
    let jwt = w.verifier.verify(&w.sign_json(HEADER, &good), NOW).unwrap();
    let jose = w
        .verifier
        .verify(
            &w.sign_json(r#"{"alg":"EdDSA","kid":"key-1","typ":"JOSE"}"#, &good),
            NOW,
        )
        .unwrap();
    assert_eq!(jose, jwt);
    // Case matters, as for JWT: a near name is refused.
    let e = w
        .verifier
        .verify(
            &w.sign_json(r#"{"alg":"EdDSA","kid":"key-1","typ":"jose"}"#, &good),
            NOW,
        )
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::MalformedToken, "{e}");
}
