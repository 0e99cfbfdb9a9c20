//! Proof of possession (issue 17): WITs bound to a workload key and WPTs made
//! with it, against the attacks the drafts name and a few more.

mod common;

use std::sync::Arc;
use std::time::Duration;

use workload_identity::model::IssueRequest;
use workload_identity::{
    Algorithm, Audience, Issuer, KeyState, Keyring, MemoryStore, ProofOptions, ProofRequest,
    ResultCode, Verifier, WorkloadKey,
};

const NOW: i64 = 1_800_000_000;
const TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";
const TD: &str = "nomad.example.com";

struct World {
    keyring: Keyring,
    issuer: Issuer,
    store: Arc<MemoryStore>,
    verifier: Verifier,
}

fn world() -> World {
    let keyring = Keyring::new();
    for (i, alg) in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256]
        .into_iter()
        .enumerate()
    {
        keyring
            .insert(common::alg_key(
                alg,
                &format!("k-{i}"),
                7 + i as u8,
                KeyState::Active,
                NOW - 10,
            ))
            .unwrap();
        // WITs are signed only by WIT keys.
        keyring
            .insert(
                common::alg_key(
                    alg,
                    &format!("wit-{i}"),
                    17 + i as u8,
                    KeyState::Active,
                    NOW - 10,
                )
                .with_purpose(workload_identity::KeyPurpose::Wit),
            )
            .unwrap();
    }
    let issuer = Issuer::new(keyring.clone())
        .issuer("https://nomad.example.com")
        .trust_domain(TD)
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier = Verifier::builder(
        keyring.clone(),
        store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .issuer("https://nomad.example.com")
    .build();
    World {
        keyring,
        issuer,
        store,
        verifier,
    }
}

fn request_for(key: &WorkloadKey) -> IssueRequest {
    let mut req = common::issue_request_task();
    req.proof_key = Some(key.proof_key().clone());
    req
}

fn wit(w: &World, key: &WorkloadKey, alg: Algorithm) -> String {
    w.issuer
        .issue_with(alg, &request_for(key), NOW)
        .unwrap()
        .token
}

/// The error `v` refuses a proof with (a panic if it accepts it).
fn refused(
    v: &Verifier,
    wit: &str,
    wpt: &str,
    req: &ProofRequest,
    now: i64,
) -> workload_identity::Error {
    v.verify_proof(wit, wpt, req, now)
        .expect_err("the proof should have been refused")
}

fn code(r: workload_identity::Error) -> ResultCode {
    r.code()
}

#[test]
fn a_wit_and_its_proof_verify_for_every_key_pairing() {
    let w = world();
    for key_alg in [Algorithm::EdDsa, Algorithm::Es256] {
        let key = WorkloadKey::generate(key_alg).unwrap();
        for signer in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
            let wit = wit(&w, &key, signer);
            let header = common::identity::decode_segment(&wit, 0);
            assert_eq!(header["typ"], "wit+jwt", "{header}");
            let claims = common::identity::decode_segment(&wit, 1);
            assert_eq!(
                claims["sub"],
                "wimse://nomad.example.com/global/default/web/frontend/server/vault_default"
            );
            assert_eq!(claims["cnf"]["jwk"]["alg"], key_alg.name());
            assert_eq!(
                claims["exp"],
                NOW + 3600,
                "exp is the identity TTL, within the cap"
            );
            let wpt = key.prove(&wit, TARGET, NOW, &ProofOptions::new()).unwrap();
            let wpt_header = common::identity::decode_segment(&wpt, 0);
            assert_eq!(
                wpt_header,
                serde_json::json!({"alg": key_alg.name(), "typ": "wpt+jwt"})
            );
            let wpt_claims = common::identity::decode_segment(&wpt, 1);
            for absent in ["iss", "sub", "iat", "nbf"] {
                assert!(wpt_claims.get(absent).is_none(), "{absent} in {wpt_claims}");
            }
            assert_eq!(wpt_claims["aud"], TARGET);
            assert_eq!(
                wpt_claims["jti"].as_str().unwrap().len(),
                22,
                "128 random bits"
            );
            let ok = w
                .verifier
                .verify_proof(
                    &wit,
                    &wpt,
                    &ProofRequest::new(&format!("{TARGET}?x=1")),
                    NOW,
                )
                .unwrap();
            assert_eq!(ok.identity.claims.allocation_id, common::ALLOC_ID);
            assert_eq!(
                ok.identity.claims.confirmation.as_ref(),
                Some(key.proof_key())
            );
            assert_eq!(ok.expires_at, NOW + 60);
        }
    }
}

#[test]
fn a_replayed_proof_is_refused() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &key, Algorithm::EdDsa);
    let wpt = key.prove(&wit, TARGET, NOW, &ProofOptions::new()).unwrap();
    let req = ProofRequest::new(TARGET);
    w.verifier.verify_proof(&wit, &wpt, &req, NOW).unwrap();
    let e = refused(&w.verifier, &wit, &wpt, &req, NOW + 5);
    assert_eq!(code(e), ResultCode::ProofReplayed);
    // A fresh proof for the same WIT is fine.
    let again = key
        .prove(&wit, TARGET, NOW + 5, &ProofOptions::new())
        .unwrap();
    w.verifier
        .verify_proof(&wit, &again, &req, NOW + 5)
        .unwrap();
    assert_eq!(w.verifier.proofs_remembered(NOW + 5), 2);
}

#[test]
fn a_proof_is_accepted_once_across_threads() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let wit = wit(&w, &key, Algorithm::EdDsa);
    let wpt = key.prove(&wit, TARGET, NOW, &ProofOptions::new()).unwrap();
    let accepted: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    (0..20)
                        .filter(|_| {
                            w.verifier
                                .verify_proof(&wit, &wpt, &ProofRequest::new(TARGET), NOW)
                                .is_ok()
                        })
                        .count()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(accepted, 1);
}

#[test]
fn a_proof_for_another_audience_is_refused() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &key, Algorithm::EdDsa);
    let wpt = key
        .prove(
            &wit,
            "https://consul.example.com/v1/acl/login",
            NOW,
            &ProofOptions::new(),
        )
        .unwrap();
    let e = refused(&w.verifier, &wit, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("aud"), "{e}");
}

#[test]
fn a_stolen_wit_with_a_proof_from_another_key_is_refused() {
    let w = world();
    let owner = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let thief = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &owner, Algorithm::EdDsa);
    // The thief signs a fresh, well-formed proof for the stolen WIT.
    let wpt = thief
        .prove(&wit, TARGET, NOW, &ProofOptions::new())
        .unwrap();
    let e = refused(&w.verifier, &wit, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("signature"), "{e}");
    // Another algorithm's key: refused by alg before any signature check.
    let p256 = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let wpt = p256.prove(&wit, TARGET, NOW, &ProofOptions::new()).unwrap();
    let e = refused(&w.verifier, &wit, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("cnf.jwk.alg"), "{e}");
}

#[test]
fn a_wit_whose_cnf_was_changed_fails_its_signature() {
    let w = world();
    let owner = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let thief = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &owner, Algorithm::EdDsa);
    // Swap the cnf key for the thief's, keeping the issuer's signature.
    let mut claims = common::identity::decode_segment(&wit, 1);
    claims["cnf"]["jwk"]["x"] = thief.proof_key().x.clone().into();
    let forged = common::identity::replace_segment(&wit, 1, &claims.to_string());
    let wpt = thief
        .prove(&forged, TARGET, NOW, &ProofOptions::new())
        .unwrap();
    let e = refused(&w.verifier, &forged, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::BadSignature, "{e}");
}

#[test]
fn an_expired_proof_within_a_valid_wit_is_refused_and_so_is_one_too_far_ahead() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &key, Algorithm::EdDsa);
    let wpt = key
        .prove(
            &wit,
            TARGET,
            NOW,
            &ProofOptions::new().ttl(Duration::from_secs(30)),
        )
        .unwrap();
    // exp NOW+30, leeway 60: fine at NOW+90, expired at NOW+91.
    let e = refused(
        &w.verifier,
        &wit,
        &wpt,
        &ProofRequest::new(TARGET),
        NOW + 91,
    );
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("expired"), "{e}");
    w.verifier
        .verify_proof(&wit, &wpt, &ProofRequest::new(TARGET), NOW + 90)
        .unwrap();
    let long = key
        .prove(
            &wit,
            TARGET,
            NOW,
            &ProofOptions::new().ttl(Duration::from_secs(3600)),
        )
        .unwrap();
    let e = refused(&w.verifier, &wit, &long, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("too far ahead"), "{e}");
}

#[test]
fn a_wit_is_never_a_bearer_token_and_a_proof_verifier_takes_no_bearer_token() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &key, Algorithm::EdDsa);
    let e = w.verifier.verify(&wit, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::ProofRequired, "{e}");
    let e = w
        .verifier
        .verify_batch(&[&wit], NOW)
        .pop()
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::ProofRequired, "{e}");
    let explained = w.verifier.explain(&wit, NOW);
    assert_eq!(
        explained.result.unwrap_err().code(),
        ResultCode::ProofRequired
    );
    let cached = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .cache(16)
    .build();
    assert_eq!(
        cached.verify(&wit, NOW).unwrap_err().code(),
        ResultCode::ProofRequired
    );

    let strict = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .require_proof(true)
    .build();
    let bearer = w
        .issuer
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    w.verifier.verify(&bearer, NOW).unwrap();
    let e = strict.verify(&bearer, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::ProofRequired, "{e}");
    // A bearer token in the WIT's place carries no key: refused.
    let wpt = key
        .prove(&bearer, TARGET, NOW, &ProofOptions::new())
        .unwrap();
    let e = refused(&strict, &bearer, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid, "{e}");
    // The real thing passes the strict verifier.
    let wpt = key.prove(&wit, TARGET, NOW, &ProofOptions::new()).unwrap();
    strict
        .verify_proof(&wit, &wpt, &ProofRequest::new(TARGET), NOW)
        .unwrap();
}

#[test]
fn swapped_hashes_are_refused() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let wit_a = wit(&w, &key, Algorithm::EdDsa);
    let wit_b = wit(&w, &key, Algorithm::EdDsa);
    // A proof made for WIT A, presented with WIT B (same key): wth differs.
    let wpt = key
        .prove(&wit_a, TARGET, NOW, &ProofOptions::new())
        .unwrap();
    let e = refused(&w.verifier, &wit_b, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("wth"), "{e}");

    // ath: the proof binds one access token, the request carries another.
    let opts = ProofOptions::new().access_token("token-one");
    let wpt = key.prove(&wit_a, TARGET, NOW, &opts).unwrap();
    let e = refused(
        &w.verifier,
        &wit_a,
        &wpt,
        &ProofRequest::new(TARGET).access_token("token-two"),
        NOW,
    );
    assert!(e.to_string().contains("ath"), "{e}");
    // ... or none at all; or the request carries one the proof does not bind.
    let e = refused(&w.verifier, &wit_a, &wpt, &ProofRequest::new(TARGET), NOW);
    assert!(
        e.to_string()
            .contains("the WPT has ath, but the request carries no access token"),
        "{e}"
    );
    let plain = key
        .prove(&wit_a, TARGET, NOW, &ProofOptions::new())
        .unwrap();
    let e = refused(
        &w.verifier,
        &wit_a,
        &plain,
        &ProofRequest::new(TARGET).access_token("token-one"),
        NOW,
    );
    assert!(
        e.to_string()
            .contains("the request carries the access token, but the WPT has no ath"),
        "{e}"
    );
    // The right one passes, and tth likewise.
    let wpt = key
        .prove(&wit_a, TARGET, NOW, &opts.clone().transaction_token("txn"))
        .unwrap();
    w.verifier
        .verify_proof(
            &wit_a,
            &wpt,
            &ProofRequest::new(TARGET)
                .access_token("token-one")
                .transaction_token("txn"),
            NOW,
        )
        .unwrap();

    // oth: an entry the request has no token for is refused; the values are trimmed.
    let wpt = key
        .prove(
            &wit_a,
            TARGET,
            NOW,
            &ProofOptions::new().other_token("X-Extra", " v1 "),
        )
        .unwrap();
    let e = refused(&w.verifier, &wit_a, &wpt, &ProofRequest::new(TARGET), NOW);
    assert!(e.to_string().contains("oth"), "{e}");
    let e = refused(
        &w.verifier,
        &wit_a,
        &wpt,
        &ProofRequest::new(TARGET).other_token("x-extra", "v2"),
        NOW,
    );
    assert!(e.to_string().contains("oth"), "{e}");
    w.verifier
        .verify_proof(
            &wit_a,
            &wpt,
            &ProofRequest::new(TARGET).other_token("X-Extra", "v1"),
            NOW,
        )
        .unwrap();
}

#[test]
fn a_dead_workload_cannot_prove_anything() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit = wit(&w, &key, Algorithm::EdDsa);
    let mut alloc = common::allocation();
    alloc.client_status = "complete".into();
    w.store.upsert(&alloc);
    let wpt = key.prove(&wit, TARGET, NOW, &ProofOptions::new()).unwrap();
    let e = refused(&w.verifier, &wit, &wpt, &ProofRequest::new(TARGET), NOW);
    assert_eq!(e.code(), ResultCode::AllocationTerminal, "{e}");
    assert_eq!(
        w.verifier.proofs_remembered(NOW),
        0,
        "a refused proof is not remembered"
    );
}

#[test]
fn issuing_a_wit_needs_a_trust_domain_a_usable_key_and_an_expiry() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let plain = Issuer::new(w.keyring.clone());
    let e = plain.issue(&request_for(&key), NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("trust domain"), "{e}");
    let e = Issuer::new(w.keyring.clone())
        .trust_domain("Nomad.Example")
        .unwrap_err();
    assert!(e.to_string().contains("trust_domain"), "{e}");

    let mut req = request_for(&key);
    req.identity.ttl = workload_identity::model::GoDuration::from_secs(0);
    let e = w.issuer.issue(&req, NOW).unwrap_err();
    assert!(e.to_string().contains("TTL"), "{e}");
    let mut req = request_for(&key);
    req.identity.ttl = workload_identity::model::GoDuration::from_secs(7 * 24 * 3600);
    let long = w
        .issuer
        .clone()
        .max_wit_ttl(Duration::from_secs(600))
        .issue(&req, NOW)
        .unwrap();
    assert_eq!(
        long.claims.expires_at,
        Some(NOW + 600),
        "capped at max_wit_ttl"
    );

    // A private member, a small-order point, a key of the wrong type: refused.
    let mut req = request_for(&key);
    req.proof_key.as_mut().unwrap().x = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into();
    let e = w.issuer.issue(&req, NOW).unwrap_err();
    assert!(e.to_string().contains("ProofKey"), "{e}");
    let mut req = request_for(&key);
    req.proof_key.as_mut().unwrap().alg = "RS256".into();
    let e = w.issuer.issue(&req, NOW).unwrap_err();
    assert!(e.to_string().contains("expected OKP with EdDSA"), "{e}");
    // Without a ProofKey the request signs exactly as before: a bearer token.
    let bearer = w.issuer.issue(&common::issue_request_task(), NOW).unwrap();
    assert_eq!(
        common::identity::decode_segment(&bearer.token, 0)["typ"],
        "JWT"
    );
    assert!(bearer.claims.confirmation.is_none());
}

#[test]
fn workload_keys_round_trip_through_their_secret_and_never_show_it() {
    for alg in [Algorithm::EdDsa, Algorithm::Es256] {
        let key = WorkloadKey::generate(alg).unwrap();
        let again = WorkloadKey::from_secret(alg, &key.secret()).unwrap();
        assert_eq!(again.proof_key(), key.proof_key());
        let shown = format!("{key:?}");
        assert!(shown.contains("[redacted]"), "{shown}");
        let secret_hex: String = key.secret().iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&secret_hex[..16]), "{shown}");
    }
    assert_eq!(
        WorkloadKey::generate(Algorithm::Rs256).unwrap_err().code(),
        ResultCode::UnsupportedAlgorithm
    );
    assert!(WorkloadKey::from_secret(Algorithm::EdDsa, &[1; 31]).is_err());
}

/// A header that appears twice in a request cannot be bound by `oth`: a proof
/// made for the first value must not pass with a second, unbound value
/// injected beside it (frameworks often read the last one), and a workload
/// cannot make a proof that binds one header name twice.
#[test]
fn a_repeated_header_named_in_oth_is_refused_on_both_sides() {
    let w = world();
    let key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let wit_a = wit(&w, &key, Algorithm::EdDsa);
    let wpt = key
        .prove(
            &wit_a,
            TARGET,
            NOW,
            &ProofOptions::new().other_token("X-Extra", "t1"),
        )
        .unwrap();
    // The attacker's request: the bound T1, and an injected T2 after it.
    let injected = ProofRequest::new(TARGET)
        .other_token("X-Extra", "t1")
        .other_token("x-extra", "t2");
    let e = refused(&w.verifier, &wit_a, &wpt, &injected, NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(
        e.to_string().contains("\"x-extra\"") && e.to_string().contains("more than once"),
        "{e}"
    );
    // The same value twice is refused too: a repeated header is ambiguous.
    let twice = ProofRequest::new(TARGET)
        .other_token("X-Extra", "t1")
        .other_token("X-Extra", "t1");
    let e = refused(&w.verifier, &wit_a, &wpt, &twice, NOW);
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    // Nothing was remembered by the refusals: the genuine request passes once.
    w.verifier
        .verify_proof(
            &wit_a,
            &wpt,
            &ProofRequest::new(TARGET).other_token("X-Extra", "t1"),
            NOW,
        )
        .unwrap();

    // The proving side refuses to bind one header name twice (any case).
    let e = key
        .prove(
            &wit_a,
            TARGET,
            NOW,
            &ProofOptions::new()
                .other_token("X-Extra", "t1")
                .other_token("X-EXTRA", "t2"),
        )
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("\"x-extra\""), "{e}");
}

/// One workload holding a valid WIT signs as many proofs as it likes; it must
/// not be able to fill the replay cache and shut every other workload out.
#[test]
fn a_workload_flooding_proofs_cannot_deny_proofs_to_others() {
    let w = world();
    let verifier = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .issuer("https://nomad.example.com")
    .proof_replay_capacity(1024)
    .build();
    let flooder = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let flood_wit = wit(&w, &flooder, Algorithm::EdDsa);
    let req = ProofRequest::new(TARGET);
    let mut accepted = 0;
    let mut last = None;
    for _ in 0..200 {
        let wpt = flooder
            .prove(&flood_wit, TARGET, NOW, &ProofOptions::new())
            .unwrap();
        match verifier.verify_proof(&flood_wit, &wpt, &req, NOW) {
            Ok(_) => accepted += 1,
            Err(e) => last = Some(e),
        }
    }
    // Its share: 1/64 of the room.
    assert_eq!(accepted, 1024 / 64);
    let e = last.expect("the flood was refused past its share");
    assert_eq!(e.code(), ResultCode::ProofReplayed);
    assert!(e.to_string().contains("share"), "{e}");
    // Every other workload still proves, while the flooder stays refused.
    for _ in 0..20 {
        let other = WorkloadKey::generate(Algorithm::Es256).unwrap();
        let other_wit = wit(&w, &other, Algorithm::Es256);
        let wpt = other
            .prove(&other_wit, TARGET, NOW, &ProofOptions::new())
            .unwrap();
        verifier
            .verify_proof(&other_wit, &wpt, &req, NOW)
            .expect("another workload's proof is accepted during the flood");
    }
    let wpt = flooder
        .prove(&flood_wit, TARGET, NOW, &ProofOptions::new())
        .unwrap();
    assert_eq!(
        refused(&verifier, &flood_wit, &wpt, &req, NOW).code(),
        ResultCode::ProofReplayed
    );
}
