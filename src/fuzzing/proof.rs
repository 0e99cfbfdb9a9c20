//! Proof of possession: WPTs over the proof world's WITs.

use std::sync::OnceLock;
use std::time::Duration;

use super::world::{ALLOC, NOW, b64, world};
use crate::issue::Issuer;
use crate::keyring::Algorithm;
use crate::model::{Allocation, IssueRequest, WorkloadIdentity};
use crate::verify::{Audience, Verifier};

/// The target URI of every proof in the `verify_proof` target.
const PROOF_TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";
/// The access token and other token (HTTP header `x-fuzz-token`) the request
/// of shape 7 carries, which its proofs must bind (`ath`, `oth`).
const PROOF_ACCESS_TOKEN: &str = "fuzz-access-token";
const PROOF_OTHER_HEADER: &str = "x-fuzz-token";
const PROOF_OTHER_TOKEN: &str = "fuzz-other-token";

/// A fixed P-256 workload key (PKCS#8 DER, made by Python `cryptography`
/// from d = 0x5eed…5eed), so committed ES256 seeds stay valid.
const P256_WORKLOAD_KEY: [u8; 138] = [
    0x30, 0x81, 0x87, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02,
    0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x6d, 0x30, 0x6b, 0x02,
    0x01, 0x01, 0x04, 0x20, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed,
    0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed,
    0x5e, 0xed, 0x5e, 0xed, 0xa1, 0x44, 0x03, 0x42, 0x00, 0x04, 0xf7, 0x27, 0x01, 0x91, 0x45, 0x26,
    0x8d, 0x2b, 0x07, 0x42, 0xa4, 0x17, 0x11, 0xb0, 0xce, 0x23, 0xd5, 0xcd, 0xe0, 0xf1, 0x9a, 0x0b,
    0xa5, 0x9a, 0xcf, 0x1a, 0x48, 0x6a, 0x27, 0x66, 0xf9, 0xdd, 0xd0, 0xec, 0x21, 0xbf, 0x75, 0xda,
    0xb3, 0x0b, 0x23, 0x00, 0x8a, 0xb4, 0x13, 0x19, 0x3b, 0xc9, 0x2e, 0x3a, 0xcf, 0x90, 0xbf, 0x2c,
    0x21, 0xa2, 0x0a, 0x57, 0xdd, 0x46, 0xe6, 0x0f, 0x95, 0xcc,
];

/// The `verify_proof` target's world: two workload keys and a WIT for each,
/// fixed (the WITs' `jti` too), so committed WPT seeds keep their `wth`.
struct ProofWorld {
    /// The EdDSA workload key's WIT is signed by the fuzz world's EdDSA key;
    /// the ES256 workload key's by its RS256 key (deterministic signatures).
    wits: [(crate::pop::WorkloadKey, String); 2],
}

fn proof_world() -> &'static ProofWorld {
    static WORLD: OnceLock<ProofWorld> = OnceLock::new();
    WORLD.get_or_init(|| {
        let w = world();
        let ed = crate::pop::WorkloadKey::from_secret(Algorithm::EdDsa, &[9; 32])
            .unwrap_or_else(|e| panic!("the fixed Ed25519 workload key: {e}"));
        let es = crate::pop::WorkloadKey::from_secret(Algorithm::Es256, &P256_WORKLOAD_KEY)
            .unwrap_or_else(|e| panic!("the fixed P-256 workload key: {e}"));
        let issuer = Issuer::new(w.keyring.clone())
            .trust_domain("fuzz.example.org")
            .unwrap_or_else(|e| panic!("a valid trust domain: {e}"));
        let wit = |key: &crate::pop::WorkloadKey, signer: Algorithm, jti: &str| {
            let req = IssueRequest {
                region: "global".into(),
                allocation: Allocation {
                    id: ALLOC.into(),
                    namespace: "default".into(),
                    job_id: "web".into(),
                    task_group: "frontend".into(),
                    ..Allocation::default()
                },
                task: "server".into(),
                identity: WorkloadIdentity {
                    name: "vault_default".into(),
                    audience: vec!["vault.io".into()],
                    ttl: crate::model::GoDuration::from_secs(3600),
                    ..WorkloadIdentity::default()
                },
                proof_key: Some(key.proof_key().clone()),
                ..IssueRequest::default()
            };
            let mut claims = issuer
                .issue_with(signer, &req, NOW)
                .unwrap_or_else(|e| panic!("the fuzz WIT issues: {e}"))
                .claims;
            // The issued jti is random: a fixed one keeps the WIT (and every
            // seed's wth) the same from run to run.
            claims.jwt_id = jti.into();
            let json = serde_json::to_vec(&claims)
                .unwrap_or_else(|e| panic!("the fuzz WIT's claims encode: {e}"));
            let signing = w
                .keyring
                .active_for_purpose(crate::keyring::KeyPurpose::Wit, signer)
                .unwrap_or_else(|e| panic!("the fuzz world's {signer} WIT key: {e}"));
            crate::jwt::encode_typed(&signing, crate::jwt::TokenType::Wit, &json)
                .unwrap_or_else(|e| panic!("the fuzz WIT signs: {e}"))
        };
        let wit_ed = wit(&ed, Algorithm::EdDsa, "fuzz-wit-eddsa");
        let wit_es = wit(&es, Algorithm::Rs256, "fuzz-wit-es256");
        ProofWorld {
            wits: [(ed, wit_ed), (es, wit_es)],
        }
    })
}

/// A WPT of `header` and `claims` (JSON bytes, as given) signed by `key`.
fn signed_wpt(key: &crate::pop::WorkloadKey, header: &[u8], claims: &[u8]) -> String {
    let input = format!("{}.{}", b64(header), b64(claims));
    // prove() signs only the claims it builds; fuzzed claims and headers are
    // signed here with the same key, from its secret form.
    let sig = sign_with(key, input.as_bytes());
    format!("{input}.{}", b64(&sig))
}

fn sign_with(key: &crate::pop::WorkloadKey, message: &[u8]) -> Vec<u8> {
    use aws_lc_rs::signature::{self as lc, EcdsaKeyPair};
    let secret = key.secret();
    match key.algorithm() {
        Algorithm::EdDsa => {
            use ed25519_dalek::Signer as _;
            let seed: [u8; 32] = secret[..]
                .try_into()
                .unwrap_or_else(|_| unreachable!("an Ed25519 seed is 32 bytes"));
            ed25519_dalek::SigningKey::from_bytes(&seed)
                .sign(message)
                .to_bytes()
                .to_vec()
        }
        _ => EcdsaKeyPair::from_pkcs8(&lc::ECDSA_P256_SHA256_FIXED_SIGNING, &secret)
            .ok()
            .and_then(|k| k.sign(&aws_lc_rs::rand::SystemRandom::new(), message).ok())
            .map(|s| s.as_ref().to_vec())
            .unwrap_or_else(|| panic!("the fixed P-256 workload key signs")),
    }
}

/// The claims of a genuine proof for `wit`, at the fuzz world's time.
fn genuine_claims(wit: &str, bound: bool) -> Vec<u8> {
    let mut claims = serde_json::json!({
        "aud": PROOF_TARGET,
        "exp": NOW + 60,
        "jti": "fuzz-proof-jti-0123456789",
        "wth": crate::pop::token_hash(wit),
    });
    if bound {
        claims["ath"] = crate::pop::token_hash(PROOF_ACCESS_TOKEN).into();
        claims["oth"] =
            serde_json::json!({ PROOF_OTHER_HEADER: crate::pop::token_hash(PROOF_OTHER_TOKEN) });
    }
    claims.to_string().into_bytes()
}

fn proof_header(alg: Algorithm) -> Vec<u8> {
    format!(r#"{{"alg":"{}","typ":"wpt+jwt"}}"#, alg.name()).into_bytes()
}

/// Proof of possession: [`Verifier::verify_proof`] with the real WITs of the
/// proof world, on a fresh verifier each time (so the verdict depends on the
/// input alone). The first byte picks the shape:
///
/// * 0, 1: the rest is the WPT, with the EdDSA-key / ES256-key WIT;
/// * 2, 3: the rest is a WPT payload, signed by the EdDSA / ES256 workload key
///   under a correct header (so the claim checks are reached with a valid
///   signature), with that key's WIT;
/// * 4: the rest is a WPT header, over a genuine payload signed by the EdDSA
///   workload key;
/// * 5: the rest is the WIT and the WPT, split at the first newline;
/// * 6: the rest is a payload signed by the EdDSA workload key, shown with the
///   ES256 key's WIT (another key's proof);
/// * 7: as 2, but the request carries an access token and another token the
///   proof must bind (`ath`, `oth`);
/// * 8: as 7, but the request carries the other token's header twice (the
///   bound value, then an injected one): never accepted;
/// * anything else: the whole input is the WPT, with the EdDSA-key WIT.
///
/// Acceptance only for the genuine proof: the WIT is one of the world's, byte
/// for byte; the WPT's header is exactly `alg` (its `cnf.jwk`'s) and `typ`
/// `wpt+jwt`; its signature verifies independently (ed25519-dalek
/// `verify_strict`, aws-lc-rs ECDSA) under that WIT's workload key; `aud`,
/// `exp`, `jti`, `wth`, `ath`, `oth` are right. An accepted proof is then
/// refused as replayed, and its WIT as a bearer token. Returns whether the
/// proof was accepted.
pub fn verify_proof(data: &[u8]) -> bool {
    let w = world();
    let pw = proof_world();
    let [(ed_key, ed_wit), (es_key, es_wit)] = &pw.wits;
    let mut bound = false;
    let mut repeated = false;
    let (wit, wpt): (std::borrow::Cow<'_, str>, String) = match data.split_first() {
        Some((0, rest)) => (ed_wit.into(), String::from_utf8_lossy(rest).into_owned()),
        Some((1, rest)) => (es_wit.into(), String::from_utf8_lossy(rest).into_owned()),
        Some((2, claims)) => (
            ed_wit.into(),
            signed_wpt(ed_key, &proof_header(Algorithm::EdDsa), claims),
        ),
        Some((3, claims)) => (
            es_wit.into(),
            signed_wpt(es_key, &proof_header(Algorithm::Es256), claims),
        ),
        Some((4, header)) => (
            ed_wit.into(),
            signed_wpt(ed_key, header, &genuine_claims(ed_wit, false)),
        ),
        Some((5, rest)) => {
            let cut = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            let (a, b) = rest.split_at(cut);
            (
                String::from_utf8_lossy(a).into_owned().into(),
                String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned(),
            )
        }
        Some((6, claims)) => (
            es_wit.into(),
            signed_wpt(ed_key, &proof_header(Algorithm::EdDsa), claims),
        ),
        Some((shape @ (7 | 8), claims)) => {
            bound = true;
            repeated = *shape == 8;
            (
                ed_wit.into(),
                signed_wpt(ed_key, &proof_header(Algorithm::EdDsa), claims),
            )
        }
        _ => (ed_wit.into(), String::from_utf8_lossy(data).into_owned()),
    };
    let mut request = crate::verify::ProofRequest::new(PROOF_TARGET);
    if bound {
        request = request
            .access_token(PROOF_ACCESS_TOKEN)
            .other_token(PROOF_OTHER_HEADER, PROOF_OTHER_TOKEN);
        if repeated {
            request = request.other_token(PROOF_OTHER_HEADER, "injected");
        }
    }
    let audience = Audience::new("vault.io").unwrap_or_else(|_| unreachable!("non-empty"));
    let verifier = Verifier::builder(w.keyring.clone(), w.store.clone(), audience)
        .key_wait(Duration::ZERO)
        .build();
    let Ok(proof) = verifier.verify_proof(&wit, &wpt, &request, NOW) else {
        return false;
    };

    // Accepted: it must be genuine, and for one request only.
    assert!(
        !repeated,
        "accepted a proof for a request that repeats a header oth binds"
    );
    let Some((key, _)) = pw.wits.iter().find(|(_, known)| *known == *wit) else {
        panic!("accepted a WIT that is not one of the world's: {wit:?}");
    };
    assert_eq!(
        proof.identity.claims.confirmation.as_ref(),
        Some(key.proof_key()),
        "the verified cnf.jwk is not the WIT's workload key"
    );
    let claims = assert_genuine_wpt(key, &wit, &wpt, bound);
    assert_eq!(claims["jti"].as_str(), Some(proof.jti.as_str()));
    assert_eq!(claims["exp"].as_i64(), Some(proof.expires_at));
    let again = verifier.verify_proof(&wit, &wpt, &request, NOW);
    assert_eq!(
        again.map(|_| ()).map_err(|e| e.code()),
        Err(crate::error::ResultCode::ProofReplayed),
        "a proof was accepted twice"
    );
    assert_eq!(
        verifier.verify(&wit, NOW).map(|_| ()).map_err(|e| e.code()),
        Err(crate::error::ResultCode::ProofRequired),
        "a WIT passed as a bearer token"
    );
    true
}

/// Checks an accepted WPT independently of the verifier; returns its claims.
fn assert_genuine_wpt(
    key: &crate::pop::WorkloadKey,
    wit: &str,
    wpt: &str,
    bound: bool,
) -> serde_json::Value {
    use base64::Engine;
    let b64d = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .unwrap_or_else(|e| panic!("an accepted WPT segment is not base64url: {e}: {wpt:?}"))
    };
    let parts: Vec<&str> = wpt.split('.').collect();
    let [h, p, s] = parts[..] else {
        panic!("an accepted WPT is not three segments: {wpt:?}");
    };
    let header: serde_json::Value = serde_json::from_slice(&b64d(h))
        .unwrap_or_else(|e| panic!("an accepted WPT header is not JSON: {e}"));
    assert_eq!(
        header,
        serde_json::json!({"alg": key.algorithm().name(), "typ": "wpt+jwt"}),
        "accepted a WPT header other than exactly alg (the cnf.jwk's) and typ wpt+jwt"
    );
    let signing_input = &wpt.as_bytes()[..h.len() + 1 + p.len()];
    let sig = b64d(s);
    let public = key.proof_key();
    let genuine = match key.algorithm() {
        Algorithm::EdDsa => {
            let x: [u8; 32] = b64d(&public.x)
                .try_into()
                .unwrap_or_else(|_| unreachable!("an Ed25519 key is 32 bytes"));
            let vk = ed25519_dalek::VerifyingKey::from_bytes(&x)
                .unwrap_or_else(|e| panic!("the fixed Ed25519 key: {e}"));
            <[u8; 64]>::try_from(sig.as_slice()).is_ok_and(|sig| {
                vk.verify_strict(signing_input, &ed25519_dalek::Signature::from_bytes(&sig))
                    .is_ok()
            })
        }
        _ => {
            let mut point = vec![4u8];
            point.extend(b64d(&public.x));
            point.extend(b64d(&public.y));
            aws_lc_rs::signature::UnparsedPublicKey::new(
                &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
                point,
            )
            .verify(signing_input, &sig)
            .is_ok()
        }
    };
    assert!(
        genuine,
        "accepted a WPT whose signature is not the workload key's"
    );
    let claims: serde_json::Value = serde_json::from_slice(&b64d(p))
        .unwrap_or_else(|e| panic!("accepted WPT claims that are not JSON: {e}"));
    assert_eq!(claims["aud"], PROOF_TARGET, "accepted another target");
    assert_eq!(
        claims["wth"].as_str(),
        Some(crate::pop::token_hash(wit).as_str()),
        "accepted a proof for another WIT"
    );
    let exp = claims["exp"]
        .as_i64()
        .unwrap_or_else(|| panic!("accepted a WPT without an integer exp"));
    assert!(
        (NOW - 60..=NOW + 300 + 60).contains(&exp),
        "accepted exp {exp} outside the window"
    );
    let jti = claims["jti"].as_str().unwrap_or_default();
    assert!((1..=128).contains(&jti.len()), "accepted jti {jti:?}");
    let (ath, oth) = (claims.get("ath"), claims.get("oth"));
    if bound {
        assert_eq!(
            ath.and_then(|v| v.as_str()),
            Some(crate::pop::token_hash(PROOF_ACCESS_TOKEN).as_str()),
            "accepted a proof not binding the access token"
        );
        assert_eq!(
            oth,
            Some(
                &serde_json::json!({ PROOF_OTHER_HEADER: crate::pop::token_hash(PROOF_OTHER_TOKEN) })
            ),
            "accepted a proof not binding exactly the other token"
        );
    } else {
        assert!(
            ath.is_none() && oth.is_none(),
            "accepted a binding of a token the request lacks"
        );
    }
    assert!(
        claims.get("tth").is_none(),
        "accepted a tth the request has no token for"
    );
    claims
}

/// Seed inputs for the `verify_proof` target, with whether each is accepted:
/// genuine proofs in every shape, and near misses. `fuzz/corpus/verify_proof/`
/// holds them (`WID_BLESS=1 cargo test --features fuzzing --test fuzz_corpus`
/// rewrites them after a deliberate change to the WITs).
pub fn verify_proof_seeds() -> Vec<(&'static str, Vec<u8>, bool)> {
    let pw = proof_world();
    let [(ed_key, ed_wit), (es_key, es_wit)] = &pw.wits;
    let with = |shape: u8, rest: &[u8]| [&[shape][..], rest].concat();
    let wpt_ed = signed_wpt(
        ed_key,
        &proof_header(Algorithm::EdDsa),
        &genuine_claims(ed_wit, false),
    );
    let wpt_es = signed_wpt(
        es_key,
        &proof_header(Algorithm::Es256),
        &genuine_claims(es_wit, false),
    );
    let patched = |wit: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_slice(&genuine_claims(wit, false))
            .unwrap_or_else(|_| unreachable!("our own JSON"));
        f(&mut v);
        v.to_string().into_bytes()
    };
    vec![
        ("wpt-eddsa", with(0, wpt_ed.as_bytes()), true),
        ("wpt-es256", with(1, wpt_es.as_bytes()), true),
        (
            "payload-eddsa",
            with(2, &genuine_claims(ed_wit, false)),
            true,
        ),
        (
            "payload-es256",
            with(3, &genuine_claims(es_wit, false)),
            true,
        ),
        (
            "header-eddsa",
            with(4, &proof_header(Algorithm::EdDsa)),
            true,
        ),
        (
            "split-wit-wpt",
            with(5, format!("{ed_wit}\n{wpt_ed}").as_bytes()),
            true,
        ),
        (
            "payload-bound",
            with(7, &genuine_claims(ed_wit, true)),
            true,
        ),
        ("other-key", with(6, &genuine_claims(es_wit, false)), false),
        (
            "payload-bound-repeated-header",
            with(8, &genuine_claims(ed_wit, true)),
            false,
        ),
        // No shape byte ('e' of the header): the whole input is the WPT.
        ("bare-wpt-eddsa", wpt_ed.into_bytes(), true),
        (
            "payload-expired",
            with(2, &patched(ed_wit, &|v| v["exp"] = (NOW - 3600).into())),
            false,
        ),
        (
            "payload-other-aud",
            with(
                2,
                &patched(ed_wit, &|v| v["aud"] = "https://consul.example.com/".into()),
            ),
            false,
        ),
        (
            "payload-other-wit",
            with(2, &genuine_claims(es_wit, false)),
            false,
        ),
        (
            "payload-unbound",
            with(7, &genuine_claims(ed_wit, false)),
            false,
        ),
        (
            "header-ed25519",
            with(4, br#"{"alg":"Ed25519","typ":"wpt+jwt"}"#),
            false,
        ),
        (
            "split-wit-as-wpt",
            with(5, format!("{ed_wit}\n{ed_wit}").as_bytes()),
            false,
        ),
    ]
}
