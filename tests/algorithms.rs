//! ES256 and RS256 beside EdDSA: per-algorithm keys and rotation, issuance
//! choices, and every adversarial case the EdDSA tests cover, repeated for the
//! other algorithms (alg confusion, wrong sizes, out-of-range ECDSA scalars,
//! high-s, bad imported keys, weak RSA keys), with batch and cache verdicts
//! equal to single verification for every algorithm.

mod common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use common::identity::{AUD, NOW, sign_segments_alg};
use serde_json::{Value, json};
use workload_identity::{
    Algorithm, Audience, Issuer, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, MemoryStore,
    PublicKey, ResultCode, RootKey, RotationAction, RotationPolicy, Verifier, plan_rotation,
    plan_rotation_for,
};

const ES_KID: &str = "es-1";
const RS_KID: &str = "rs-1";
const ED_KID: &str = "ed-1";

fn key(alg: Algorithm, kid: &str, state: KeyState) -> RootKey {
    common::alg_key(alg, kid, kid.len() as u8 + 1, state, NOW - 1000)
}

/// A keyring with an active key of each algorithm, a live allocation, and a
/// verifier (optionally caching).
struct Three {
    keyring: Keyring,
    issuer: Issuer,
    verifier: Verifier,
    cached: Verifier,
}

fn three() -> Three {
    let keyring = Keyring::from_keys([
        key(Algorithm::EdDsa, ED_KID, KeyState::Active),
        key(Algorithm::Es256, ES_KID, KeyState::Active),
        key(Algorithm::Rs256, RS_KID, KeyState::Active),
    ])
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let build = |cache: bool| {
        let b = Verifier::builder(keyring.clone(), store.clone(), Audience::new(AUD).unwrap())
            .key_wait(Duration::ZERO);
        if cache { b.cache(64) } else { b }.build()
    };
    Three {
        issuer: Issuer::new(keyring.clone()),
        verifier: build(false),
        cached: build(true),
        keyring,
    }
}

impl Three {
    fn token(&self, alg: Algorithm) -> String {
        self.issuer
            .issue_with(alg, &common::issue_request_task(), NOW)
            .unwrap()
            .token
    }

    /// The verdict of single, batch and cached verification, which must agree.
    fn verdict(&self, token: &str) -> Result<(), ResultCode> {
        let single = self
            .verifier
            .verify(token, NOW)
            .map(|_| ())
            .map_err(|e| e.code());
        let batch = self.verifier.verify_batch(&[token], NOW).remove(0);
        assert_eq!(batch.map(|_| ()).map_err(|e| e.code()), single, "batch");
        for round in 0..2 {
            let cached = self
                .cached
                .verify(token, NOW)
                .map(|_| ())
                .map_err(|e| e.code());
            assert_eq!(cached, single, "cache round {round}");
        }
        single
    }
}

fn parts(token: &str) -> (String, String, Vec<u8>) {
    let mut it = token.split('.');
    let h = it.next().unwrap().to_string();
    let p = it.next().unwrap().to_string();
    let s = B64.decode(it.next().unwrap()).unwrap();
    (h, p, s)
}

fn with_sig(token: &str, sig: &[u8]) -> String {
    let (h, p, _) = parts(token);
    format!("{h}.{p}.{}", B64.encode(sig))
}

fn with_header(header: &str, token: &str) -> String {
    let (_, p, s) = parts(token);
    format!("{}.{p}.{}", B64.encode(header), B64.encode(s))
}

/// The P-256 group order.
const N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// a - b for big-endian 32-byte numbers with a >= b.
fn sub(a: &[u8; 32], b: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut v = a[i] as i16 - b[i] as i16 - borrow;
        borrow = i16::from(v < 0);
        if v < 0 {
            v += 256;
        }
        out[i] = v as u8;
    }
    out
}

#[test]
fn every_algorithm_round_trips_and_names_itself_in_the_header() {
    let t = three();
    for (alg, kid) in [
        (Algorithm::EdDsa, ED_KID),
        (Algorithm::Es256, ES_KID),
        (Algorithm::Rs256, RS_KID),
    ] {
        let token = t.token(alg);
        let (h, _, sig) = parts(&token);
        let header: Value = serde_json::from_slice(&B64.decode(h).unwrap()).unwrap();
        assert_eq!(header, json!({"alg": alg.name(), "kid": kid, "typ": "JWT"}));
        assert_eq!(sig.len(), if alg == Algorithm::Rs256 { 256 } else { 64 });
        assert_eq!(t.verdict(&token), Ok(()), "{alg}");
        assert_eq!(t.verifier.verify(&token, NOW).unwrap().kid.as_str(), kid);
    }
}

#[test]
fn the_header_alg_must_be_the_keys_algorithm() {
    let t = three();
    let ed = t.token(Algorithm::EdDsa);
    let es = t.token(Algorithm::Es256);
    let rs = t.token(Algorithm::Rs256);
    for (name, token) in [
        // Each token re-labelled with another algorithm, its kid unchanged.
        (
            "ES256 token as RS256",
            with_header(
                &format!(r#"{{"alg":"RS256","kid":"{ES_KID}","typ":"JWT"}}"#),
                &es,
            ),
        ),
        (
            "ES256 token as EdDSA",
            with_header(
                &format!(r#"{{"alg":"EdDSA","kid":"{ES_KID}","typ":"JWT"}}"#),
                &es,
            ),
        ),
        (
            "RS256 token as ES256",
            with_header(
                &format!(r#"{{"alg":"ES256","kid":"{RS_KID}","typ":"JWT"}}"#),
                &rs,
            ),
        ),
        (
            "EdDSA token as ES256",
            with_header(
                &format!(r#"{{"alg":"ES256","kid":"{ED_KID}","typ":"JWT"}}"#),
                &ed,
            ),
        ),
        (
            "Ed25519 name on an ES256 key",
            with_header(
                &format!(r#"{{"alg":"Ed25519","kid":"{ES_KID}","typ":"JWT"}}"#),
                &es,
            ),
        ),
        // Properly signed by one key, but naming another algorithm's kid.
        (
            "ES256 signature under the RS256 kid",
            with_header(
                &format!(r#"{{"alg":"ES256","kid":"{RS_KID}","typ":"JWT"}}"#),
                &es,
            ),
        ),
        (
            "RS256 signature under the ES256 kid",
            with_header(
                &format!(r#"{{"alg":"RS256","kid":"{ES_KID}","typ":"JWT"}}"#),
                &rs,
            ),
        ),
    ] {
        assert_eq!(
            t.verdict(&token),
            Err(ResultCode::UnsupportedAlgorithm),
            "{name}"
        );
    }
    let e = t
        .verifier
        .verify(
            &with_header(
                &format!(r#"{{"alg":"RS256","kid":"{ES_KID}","typ":"JWT"}}"#),
                &rs,
            ),
            NOW,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "unsupported algorithm \"RS256\": expected \"ES256\", the algorithm of key es-1"
    );
}

#[test]
fn ed25519_is_rfc_9864s_name_for_eddsa() {
    let t = three();
    let ed = t.token(Algorithm::EdDsa);
    let (_, p, s) = parts(&ed);
    // Re-signed under the same key with the fully specified name in the header.
    let header = B64.encode(format!(
        r#"{{"alg":"Ed25519","kid":"{ED_KID}","typ":"JWT"}}"#
    ));
    let token = sign_segments_alg(&t.keyring, Algorithm::EdDsa, &header, &p);
    assert_eq!(t.verdict(&token), Ok(()));
    // The signature covers the header: swapping the name alone breaks it.
    let swapped = format!("{header}.{p}.{}", B64.encode(s));
    assert_eq!(t.verdict(&swapped), Err(ResultCode::BadSignature));
}

#[test]
fn none_and_hs256_never_pass_even_keyed_with_the_rsa_public_key() {
    let t = three();
    let rs = t.token(Algorithm::Rs256);
    let (_, p, _) = parts(&rs);
    let PublicKey::Rsa { n } = t.keyring.key_info(RS_KID).unwrap().public_key else {
        panic!("an RSA key")
    };
    // The classic confusion attack: HMAC keyed with the public key's bytes, in
    // every form a confused verifier might use.
    let jwk = t.keyring.jwks().to_json();
    for secret in [
        n.clone(),
        jwk.clone().into_bytes(),
        B64.encode(&n).into_bytes(),
    ] {
        for alg in ["HS256", "HS384", "HS512"] {
            let header = B64.encode(format!(r#"{{"alg":"{alg}","kid":"{RS_KID}","typ":"JWT"}}"#));
            let input = format!("{header}.{p}");
            let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret);
            let tag = aws_lc_rs::hmac::sign(&key, input.as_bytes());
            let token = format!("{input}.{}", B64.encode(tag.as_ref()));
            assert_eq!(
                t.verdict(&token),
                Err(ResultCode::UnsupportedAlgorithm),
                "{alg}"
            );
        }
    }
    for alg in [
        "none", "None", "NONE", "PS256", "ES384", "RS512", "es256", "EdDSA ",
    ] {
        let header = B64.encode(format!(r#"{{"alg":"{alg}","kid":"{RS_KID}","typ":"JWT"}}"#));
        for sig in ["", "AA"] {
            let token = format!("{header}.{p}.{sig}");
            assert_eq!(
                t.verdict(&token),
                Err(ResultCode::UnsupportedAlgorithm),
                "{alg:?}"
            );
        }
    }
}

#[test]
fn signatures_of_the_wrong_size_are_malformed() {
    let t = three();
    for alg in [Algorithm::Es256, Algorithm::Rs256] {
        let token = t.token(alg);
        let (_, _, sig) = parts(&token);
        let mut padded = sig.clone();
        padded.push(0);
        let mut left_padded = vec![0u8];
        left_padded.extend(&sig);
        for (name, bad) in [
            ("truncated", sig[..sig.len() - 1].to_vec()),
            ("padded", padded),
            ("left-padded", left_padded),
            ("empty", vec![]),
            ("DER-encoded length", vec![0x30; 72]),
        ] {
            assert_eq!(
                t.verdict(&with_sig(&token, &bad)),
                Err(ResultCode::MalformedToken),
                "{alg} {name}"
            );
        }
        // The right size with the wrong bytes is a bad signature.
        let mut flipped = sig.clone();
        flipped[10] ^= 1;
        assert_eq!(
            t.verdict(&with_sig(&token, &flipped)),
            Err(ResultCode::BadSignature)
        );
    }
}

#[test]
fn es256_scalars_outside_1_to_n_minus_1_are_refused_and_high_s_is_accepted() {
    let t = three();
    let token = t.token(Algorithm::Es256);
    let (_, _, sig) = parts(&token);
    let (r, s) = sig.split_at(32);
    let zero = [0u8; 32];
    for (name, r2, s2) in [
        ("r = 0", zero.to_vec(), s.to_vec()),
        ("s = 0", r.to_vec(), zero.to_vec()),
        ("r = n", N.to_vec(), s.to_vec()),
        ("s = n", r.to_vec(), N.to_vec()),
        ("r = 2^256 - 1", vec![0xff; 32], s.to_vec()),
        ("s = 2^256 - 1", r.to_vec(), vec![0xff; 32]),
    ] {
        let bad = [r2, s2].concat();
        assert_eq!(
            t.verdict(&with_sig(&token, &bad)),
            Err(ResultCode::BadSignature),
            "{name}"
        );
    }
    // (r, n - s) is the other valid signature for the same nonce: accepted, as
    // other JOSE libraries produce either.
    let high = [r.to_vec(), sub(&N, s).to_vec()].concat();
    assert_ne!(high, sig);
    assert_eq!(t.verdict(&with_sig(&token, &high)), Ok(()));
}

#[test]
fn keys_from_other_tokens_or_other_keys_do_not_verify() {
    let t = three();
    // The same ES256 material under another kid derives another key.
    let ours = key(Algorithm::Es256, ES_KID, KeyState::Active);
    let second = Keyring::from_keys([RootKey::for_algorithm(
        Algorithm::Es256,
        KeyId::new("es-2").unwrap(),
        ours.material().clone(),
        KeyDerivation::HkdfV1,
        KeyState::Active,
        0,
    )])
    .unwrap();
    assert_ne!(
        ours.public_key().unwrap(),
        second.key_info("es-2").unwrap().public_key
    );
    // A token signed by a different RSA key under our RS256 kid.
    let stranger = Keyring::from_keys([RootKey::for_algorithm(
        Algorithm::Rs256,
        KeyId::new(RS_KID).unwrap(),
        RootKey::generate_rsa(Default::default(), KeyState::Active, 0)
            .unwrap()
            .material()
            .clone(),
        KeyDerivation::Pkcs8,
        KeyState::Active,
        0,
    )])
    .unwrap();
    let forged = Issuer::new(stranger)
        .issue_with(Algorithm::Rs256, &common::issue_request_task(), NOW)
        .unwrap()
        .token;
    assert_eq!(t.verdict(&forged), Err(ResultCode::BadSignature));
    let es = Issuer::new(second)
        .issue_with(Algorithm::Es256, &common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let relabelled = with_header(
        &format!(r#"{{"alg":"ES256","kid":"{ES_KID}","typ":"JWT"}}"#),
        &es,
    );
    assert_eq!(t.verdict(&relabelled), Err(ResultCode::BadSignature));
}

#[test]
fn a_mixed_batch_agrees_with_single_verification_token_by_token() {
    let t = three();
    let mut tokens = Vec::new();
    for alg in Algorithm::ALL {
        let good = t.token(*alg);
        let (_, _, sig) = parts(&good);
        let mut flipped = sig.clone();
        flipped[5] ^= 0x40;
        tokens.push(good.clone());
        tokens.push(with_sig(&good, &flipped));
        tokens.push(with_sig(&good, &sig[1..]));
        tokens.push(with_header(
            r#"{"alg":"RS256","kid":"es-1","typ":"JWT"}"#,
            &good,
        ));
    }
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let batch = t.verifier.verify_batch(&refs, NOW);
    let mut accepted = 0;
    for (token, b) in tokens.iter().zip(batch) {
        let single = t
            .verifier
            .verify(token, NOW)
            .map(|_| ())
            .map_err(|e| e.code());
        assert_eq!(b.map(|_| ()).map_err(|e| e.code()), single);
        accepted += usize::from(single.is_ok());
    }
    // Only the three untouched tokens.
    assert_eq!(accepted, 3);
}

#[test]
fn one_active_key_per_algorithm_and_rotation_per_algorithm() {
    let kr = Keyring::new();
    let ed = kr.rotate(NOW).unwrap();
    let es = kr.rotate_alg(Algorithm::Es256, NOW).unwrap();
    let rs = kr.rotate_alg(Algorithm::Rs256, NOW).unwrap();
    assert_eq!(kr.active_id(), Some(ed.clone()));
    assert_eq!(kr.active_id_for(Algorithm::Es256), Some(es.clone()));
    assert_eq!(kr.active_id_for(Algorithm::Rs256), Some(rs.clone()));
    assert_eq!(
        kr.key_info(rs.as_str()).unwrap().public_key.rsa_bits(),
        Some(2048)
    );
    // Rotating ES256 retires only the ES256 key.
    let es2 = kr.rotate_alg(Algorithm::Es256, NOW + 10).unwrap();
    assert_eq!(kr.key_info(es.as_str()).unwrap().state, KeyState::Inactive);
    assert_eq!(kr.key_info(es.as_str()).unwrap().retired_time, NOW + 10);
    assert_eq!(kr.key_info(ed.as_str()).unwrap().state, KeyState::Active);
    assert_eq!(kr.key_info(rs.as_str()).unwrap().state, KeyState::Active);
    assert_eq!(kr.active_id_for(Algorithm::Es256), Some(es2.clone()));
    // A second active key of one algorithm is refused; of another, fine.
    let e = kr
        .insert(key(Algorithm::Es256, "es-x", KeyState::Active))
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(
        e.to_string().contains("second active ES256 bearer key"),
        "{e}"
    );
    // Active keys cannot be deprecated or removed, whatever their algorithm.
    for kid in [&ed, &es2, &rs] {
        assert_eq!(
            kr.deprecate(kid, NOW).unwrap_err().code(),
            ResultCode::InvalidArgument
        );
    }
    // Prepublish and promote work per algorithm.
    let next_rs = kr
        .prepublish_alg(Algorithm::Rs256, NOW + 20, NOW + 100)
        .unwrap();
    let next_ed = kr.prepublish(NOW + 20, NOW + 200).unwrap();
    assert_eq!(kr.promote_due(NOW + 150), vec![next_rs.clone()]);
    assert_eq!(kr.active_id_for(Algorithm::Rs256), Some(next_rs));
    assert_eq!(kr.active_id(), Some(ed.clone()), "EdDSA untouched");
    assert_eq!(kr.promote_due(NOW + 250), vec![next_ed.clone()]);
    assert_eq!(kr.active_id(), Some(next_ed));
    assert_eq!(kr.active_id_for(Algorithm::Es256), Some(es2));
    // The JWKS and OIDC document list all three algorithms.
    let algs: Vec<&str> = kr.jwks().keys.iter().map(|k| k.alg).collect();
    for alg in ["EdDSA", "ES256", "RS256"] {
        assert!(algs.contains(&alg), "{algs:?}");
    }
    let oidc = kr.oidc_discovery("https://nomad.example.com").unwrap();
    assert_eq!(
        oidc.id_token_signing_alg_values_supported,
        vec!["EdDSA", "ES256", "RS256"]
    );
}

#[test]
fn issuing_with_an_algorithm_without_an_active_key_says_which() {
    let kr = Keyring::new();
    kr.rotate(NOW).unwrap();
    let e = Issuer::new(kr)
        .issue_with(Algorithm::Rs256, &common::issue_request_task(), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::NoActiveKey);
    assert!(e.to_string().contains("no active RS256 key"), "{e}");
}

#[test]
fn the_issuer_picks_the_most_specific_algorithm() {
    let t = three();
    let issuer = t
        .issuer
        .clone()
        .algorithm(Algorithm::Rs256)
        .algorithm_for_audience("sts.amazonaws.com", Algorithm::Es256)
        .algorithm_for_identity("consul", Algorithm::EdDsa)
        .algorithm_for_identity_and_audience("consul", "sts.amazonaws.com", Algorithm::Rs256);
    let mut req = common::issue_request_task();
    let pick = |name: &str, aud: &[&str]| {
        let mut r = req.clone();
        r.identity.name = name.into();
        r.identity.audience = aud.iter().map(|a| a.to_string()).collect();
        issuer.algorithm_of(&r)
    };
    assert_eq!(pick("vault", &["vault.io"]), Algorithm::Rs256, "default");
    assert_eq!(
        pick("aws", &["sts.amazonaws.com"]),
        Algorithm::Es256,
        "audience"
    );
    assert_eq!(
        pick("aws", &["x", "sts.amazonaws.com"]),
        Algorithm::Es256,
        "any audience"
    );
    assert_eq!(pick("consul", &["consul.io"]), Algorithm::EdDsa, "identity");
    assert_eq!(
        pick("consul", &["sts.amazonaws.com"]),
        Algorithm::Rs256,
        "both"
    );
    // And the token really is signed that way.
    req.identity.audience = vec!["sts.amazonaws.com".into(), AUD.into()];
    let signed = issuer.issue(&req, NOW).unwrap();
    assert_eq!(signed.kid.as_str(), ES_KID);
    assert_eq!(t.verdict(&signed.token), Ok(()));
    // Without overrides the default is EdDSA.
    assert_eq!(
        Issuer::new(t.keyring.clone()).algorithm_of(&req),
        Algorithm::EdDsa
    );
}

#[test]
fn rotation_plans_are_per_algorithm() {
    const HOUR: i64 = 3600;
    let kr = Keyring::new();
    let ed = kr.rotate(0).unwrap();
    kr.rotate_alg(Algorithm::Es256, 300 * HOUR).unwrap();
    let policy = RotationPolicy::new(Some(Duration::from_secs(HOUR as u64)));
    // At 361 h only the EdDSA key is past half its life.
    let plan = plan_rotation(&kr.keys(), 361 * HOUR, &policy);
    assert_eq!(
        plan,
        vec![RotationAction::Prepublish {
            algorithm: Algorithm::EdDsa,
            purpose: workload_identity::KeyPurpose::Bearer,
            publish_at: 720 * HOUR
        }]
    );
    assert_eq!(
        plan_rotation_for(&kr.keys(), Algorithm::Rs256, 361 * HOUR, &policy),
        vec![RotationAction::Rotate {
            algorithm: Algorithm::Rs256,
            purpose: workload_identity::KeyPurpose::Bearer,
        }]
    );
    assert!(plan_rotation_for(&kr.keys(), Algorithm::Es256, 361 * HOUR, &policy).is_empty());
    // Rotating EdDSA never plans the ES256 key's deprecation.
    kr.rotate(400 * HOUR).unwrap();
    let plan = plan_rotation(&kr.keys(), 402 * HOUR, &policy);
    assert_eq!(plan, vec![RotationAction::Deprecate { kid: ed }]);
}

#[test]
fn weak_and_malformed_rsa_keys_are_refused_at_insert() {
    let kr = Keyring::new();
    for (name, der, why) in [
        (
            "1024-bit",
            &include_bytes!("vectors/rsa1024.pk8")[..],
            "RSA key is too small: at least 2048 bits",
        ),
        (
            "e = 3",
            &include_bytes!("vectors/rsa2048_e3.pk8")[..],
            "exponent must be 65537",
        ),
        (
            "garbage",
            &b"\x30\x03\x02\x01\x00"[..],
            "not a PKCS#8 DER RSA private key",
        ),
    ] {
        let e = kr
            .insert(RootKey::for_algorithm(
                Algorithm::Rs256,
                KeyId::new("weak").unwrap(),
                KeyMaterial::from_pkcs8_der(der).unwrap(),
                KeyDerivation::Pkcs8,
                KeyState::Inactive,
                0,
            ))
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{name}");
        assert!(e.to_string().contains(why), "{name}: {e}");
        assert!(
            !e.to_string().contains("MII"),
            "no key material in messages"
        );
    }
    // Material and derivation must pair as the contract says.
    for (alg, derivation) in [
        (Algorithm::Es256, KeyDerivation::NomadRawSeed),
        (Algorithm::Rs256, KeyDerivation::HkdfV1),
        (Algorithm::EdDsa, KeyDerivation::Pkcs8),
    ] {
        let e = kr
            .insert(RootKey::for_algorithm(
                alg,
                KeyId::new("pair").unwrap(),
                KeyMaterial::from_slice(&[1; 32]).unwrap(),
                derivation,
                KeyState::Inactive,
                0,
            ))
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument);
        assert!(e.to_string().contains("cannot use the"), "{e}");
    }
    assert!(kr.is_empty());
}

fn jwks_with(entry: Value) -> String {
    json!({"keys": [entry]}).to_string()
}

#[test]
fn imported_ec_and_rsa_keys_verify_and_bad_ones_refuse_the_set() {
    let t = three();
    let (verify_only, report) = Keyring::from_jwks(&t.keyring.jwks().to_json()).unwrap();
    assert_eq!(report.imported.len(), 3);
    assert!(verify_only.keys().iter().all(|k| !k.can_sign()));
    // The same kids, algorithms and public keys, every one imported inactive.
    let summary = |kr: &Keyring| {
        let mut v: Vec<_> = kr
            .keys()
            .into_iter()
            .map(|k| (k.kid, k.algorithm, k.public_key))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(summary(&verify_only), summary(&t.keyring));
    assert!(
        verify_only
            .keys()
            .iter()
            .all(|k| k.state == KeyState::Inactive)
    );
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let v = Verifier::builder(verify_only, store, Audience::new(AUD).unwrap()).build();
    for alg in Algorithm::ALL {
        v.verify(&t.token(*alg), NOW).unwrap();
    }

    let jwks: Value = serde_json::from_str(&t.keyring.jwks().to_json()).unwrap();
    let ec = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kty"] == "EC")
        .unwrap()
        .clone();
    let rsa = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kty"] == "RSA")
        .unwrap()
        .clone();
    assert_eq!(ec["crv"], "P-256");
    assert_eq!(rsa["e"], "AQAB");
    let edit = |base: &Value, f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        v
    };
    let y = B64.decode(ec["y"].as_str().unwrap()).unwrap();
    let mut off_curve = y.clone();
    off_curve[31] ^= 1;
    let n = B64.decode(rsa["n"].as_str().unwrap()).unwrap();
    let mut small_n = n[..128].to_vec();
    small_n[127] |= 1;
    let mut lead_zero = vec![0u8];
    lead_zero.extend(&n);
    for (name, entry, path) in [
        (
            "off-curve point",
            edit(&ec, &|v| v["y"] = json!(B64.encode(&off_curve))),
            "keys[0].x",
        ),
        (
            "x too short",
            edit(&ec, &|v| v["x"] = json!(B64.encode([1u8; 31]))),
            "keys[0].x",
        ),
        (
            "no y",
            edit(&ec, &|v| {
                v.as_object_mut().unwrap().remove("y");
            }),
            "keys[0].y",
        ),
        (
            "P-384 curve",
            edit(&ec, &|v| v["crv"] = json!("P-384")),
            "keys[0].crv",
        ),
        (
            "EC key with alg RS256",
            edit(&ec, &|v| v["alg"] = json!("RS256")),
            "keys[0].alg",
        ),
        (
            "EC private d",
            edit(&ec, &|v| v["d"] = json!("AAAA")),
            "keys[0].d",
        ),
        (
            "RSA 1024-bit",
            edit(&rsa, &|v| v["n"] = json!(B64.encode(&small_n))),
            "keys[0].n",
        ),
        (
            "RSA leading zero",
            edit(&rsa, &|v| v["n"] = json!(B64.encode(&lead_zero))),
            "keys[0].n",
        ),
        (
            "RSA e = 3",
            edit(&rsa, &|v| v["e"] = json!("Aw")),
            "keys[0].e",
        ),
        (
            "RSA padded base64",
            edit(&rsa, &|v| v["e"] = json!("AQAB=")),
            "keys[0].e",
        ),
        (
            "RSA key with alg ES256",
            edit(&rsa, &|v| v["alg"] = json!("ES256")),
            "keys[0].alg",
        ),
        (
            "RSA private p",
            edit(&rsa, &|v| v["p"] = json!("AQAB")),
            "keys[0].p",
        ),
        (
            "RSA private qi",
            edit(&rsa, &|v| v["qi"] = json!("AQAB")),
            "keys[0].qi",
        ),
        (
            "RSA without n",
            edit(&rsa, &|v| {
                v.as_object_mut().unwrap().remove("n");
            }),
            "keys[0].n",
        ),
    ] {
        let kr = Keyring::new();
        let e = kr.import_jwks(&jwks_with(entry)).unwrap_err();
        assert_eq!(e.code(), ResultCode::DecodeError, "{name}: {e}");
        assert!(e.to_string().contains(path), "{name}: {e}");
        assert!(kr.is_empty(), "{name}: all or nothing");
    }
    // An encryption key of a known type is skipped, not refused.
    let kr = Keyring::new();
    let report = kr
        .import_jwks(&jwks_with(edit(&rsa, &|v| v["use"] = json!("enc"))))
        .unwrap();
    assert_eq!(report.skipped.len(), 1);
    assert!(kr.is_empty());
}

#[test]
fn a_nomad_style_rs256_jwks_and_token_verify() {
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::{KeyPair, RSA_PKCS1_SHA256, RsaKeyPair};
    // A key as a Nomad 1.7+ server makes it, signed outside this library.
    let pair = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    let _ = pair.as_der().unwrap();
    let kid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let public = pair.public_key();
    let jwks = json!({"keys": [{
        "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
        "n": B64.encode(public.modulus().big_endian_without_leading_zero()),
        "e": B64.encode(public.exponent().big_endian_without_leading_zero()),
    }]});
    let (kr, report) = Keyring::from_jwks(&jwks.to_string()).unwrap();
    assert_eq!(report.imported.len(), 1);
    let claims = json!({
        "aud": AUD, "exp": NOW + 3600, "iat": NOW, "nbf": NOW,
        "jti": "6c8f3a52-0c5d-4a4e-9f0e-1b2c3d4e5f60",
        "nomad_allocation_id": common::ALLOC_ID, "nomad_job_id": "web",
        "nomad_namespace": "default", "nomad_task": "server",
        "sub": "global:default:web:frontend:server:default",
    });
    let input = format!(
        "{}.{}",
        B64.encode(format!(r#"{{"alg":"RS256","kid":"{kid}","typ":"JWT"}}"#)),
        B64.encode(claims.to_string())
    );
    let mut sig = vec![0u8; pair.public_modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &aws_lc_rs::rand::SystemRandom::new(),
        input.as_bytes(),
        &mut sig,
    )
    .unwrap();
    let token = format!("{input}.{}", B64.encode(&sig));
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let v = Verifier::builder(kr, store, Audience::new(AUD).unwrap()).build();
    let verified = v.verify(&token, NOW).unwrap();
    assert_eq!(verified.kid.as_str(), kid);
    assert_eq!(verified.claims.allocation_id, common::ALLOC_ID);
}

#[test]
fn keystores_keep_every_algorithm_and_the_v1_fixture_loads_as_eddsa() {
    let t = three();
    kr_round_trip(&t.keyring);
    // A keystore written by the library before algorithms existed.
    let v1 = include_bytes!("vectors/keystore-v1.bin");
    let expect: Value = serde_json::from_str(include_str!("vectors/keystore-v1.json")).unwrap();
    let kr = Keyring::from_keystore_bytes(v1).unwrap();
    let keys = kr.keys();
    assert_eq!(keys.len(), expect["keys"].as_array().unwrap().len());
    for (k, e) in keys.iter().zip(expect["keys"].as_array().unwrap()) {
        assert_eq!(k.algorithm, Algorithm::EdDsa);
        assert_eq!(k.kid.as_str(), e["kid"]);
        assert_eq!(k.state.name(), e["state"]);
        assert_eq!(k.derivation.map(|d| d.name()), e["derivation"].as_str());
        assert_eq!(k.create_time, e["create_time"]);
        assert_eq!(k.publish_time, e["publish_time"]);
        assert_eq!(k.retired_time, e["retired_time"]);
        let x = B64.encode(k.public_key.as_ed25519().unwrap().as_bytes());
        assert_eq!(x, e["x"].as_str().unwrap());
    }
    assert_eq!(
        kr.active_id().map(|k| k.to_string()).as_deref(),
        expect["active"].as_str()
    );
    // It still signs, and saving it writes version 2 that loads the same.
    kr.active().unwrap().sign(b"m").unwrap();
    kr_round_trip(&kr);
}

fn kr_round_trip(kr: &Keyring) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    kr.save(&path).unwrap();
    let back = Keyring::load(&path).unwrap();
    assert_eq!(back.keys(), kr.keys());
    for alg in Algorithm::ALL {
        assert_eq!(back.active_id_for(*alg), kr.active_id_for(*alg));
        if let Ok(active) = back.active_for(*alg) {
            let sig = active.sign(b"message").unwrap();
            assert!(
                kr.verifying_key(active.id())
                    .unwrap()
                    .verify(b"message", &sig)
            );
        }
    }
    for k in kr.keys() {
        assert_eq!(back.root_key(&k.kid), kr.root_key(&k.kid));
    }
}

#[test]
fn generated_rsa_keys_come_in_the_three_sizes_and_verify() {
    use workload_identity::RsaKeySize;
    let t = three();
    for (size, bits) in [
        (RsaKeySize::Bits2048, 2048),
        (RsaKeySize::Bits3072, 3072),
        (RsaKeySize::Bits4096, 4096),
    ] {
        assert_eq!(RsaKeySize::from_bits(bits), Some(size));
        let kid = t.keyring.rotate_rsa(size, NOW).unwrap();
        let info = t.keyring.key_info(&kid).unwrap();
        assert_eq!(info.public_key.rsa_bits(), Some(bits));
        assert_eq!(info.algorithm, Algorithm::Rs256);
        assert_eq!(info.derivation, Some(KeyDerivation::Pkcs8));
        let token = t.token(Algorithm::Rs256);
        assert_eq!(parts(&token).2.len(), bits as usize / 8);
        assert_eq!(t.verdict(&token), Ok(()), "{bits}");
    }
    assert_eq!(RsaKeySize::from_bits(1024), None);
    // A prepublished RS256 successor of a chosen size.
    let next = t
        .keyring
        .prepublish_rsa(RsaKeySize::Bits3072, NOW, NOW + 60)
        .unwrap();
    let info = t.keyring.key_info(&next).unwrap();
    assert_eq!(
        (info.state, info.publish_time, info.public_key.rsa_bits()),
        (KeyState::Prepublished, NOW + 60, Some(3072))
    );
    assert_eq!(
        t.keyring
            .prepublish_rsa(RsaKeySize::Bits2048, NOW, NOW - 1)
            .unwrap_err()
            .code(),
        ResultCode::InvalidArgument
    );
}

#[test]
fn strictness_carries_over_to_every_algorithm() {
    let t = three();
    for alg in [Algorithm::Es256, Algorithm::Rs256] {
        let token = t.token(alg);
        let (h, p, s) = parts(&token);
        let kid = if alg == Algorithm::Es256 {
            ES_KID
        } else {
            RS_KID
        };
        let resign = |header: &str| sign_segments_alg(&t.keyring, alg, &B64.encode(header), &p);
        for (name, bad) in [
            ("padded signature", format!("{h}.{p}.{}=", B64.encode(&s))),
            ("whitespace", format!("{h}.{p} .{}", B64.encode(&s))),
            (
                "crit header",
                resign(&format!(
                    r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT","crit":["exp"]}}"#
                )),
            ),
            (
                "jwk header",
                resign(&format!(
                    r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT","jwk":{{}}}}"#
                )),
            ),
            (
                "duplicate alg",
                resign(&format!(
                    r#"{{"alg":"{alg}","alg":"{alg}","kid":"{kid}","typ":"JWT"}}"#
                )),
            ),
            ("four segments", format!("{token}.AA")),
        ] {
            assert_eq!(
                t.verdict(&bad),
                Err(ResultCode::MalformedToken),
                "{alg} {name}"
            );
        }
        // The standard alphabet, when it differs from base64url ('+' or '/').
        let standard = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&s);
        if standard != B64.encode(&s) {
            let bad = format!("{h}.{p}.{standard}");
            assert_eq!(t.verdict(&bad), Err(ResultCode::MalformedToken), "{alg}");
        }
        // Claims strictness: a float date, a duplicate claim, signed properly.
        let header = B64.encode(format!(r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT"}}"#));
        for payload in [
            r#"{"nomad_allocation_id":"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc","aud":"vault.io","iat":1.5}"#,
            r#"{"nomad_allocation_id":"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc","aud":"vault.io","aud":"vault.io"}"#,
        ] {
            let bad = sign_segments_alg(&t.keyring, alg, &header, &B64.encode(payload));
            assert_eq!(
                t.verdict(&bad),
                Err(ResultCode::MalformedToken),
                "{alg} {payload}"
            );
        }
    }
}
