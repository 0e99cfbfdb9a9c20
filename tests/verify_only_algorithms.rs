//! The verify-only algorithms (ES384, ES512, PS256, PS384, PS512, RS384,
//! RS512): keys of other issuers, imported from a JWKS, verify tokens that
//! PyJWT and go-jose made, and refuse every near miss (PS/RS swapped on one
//! RSA key, a curve's token under another curve's key, wrong signature
//! lengths, DER signatures, a header alg that is not the JWK's, HS384, none).
//! Such keys never sign.
//!
//! The PyJWT and go-jose vectors are committed in tests/vectors/verify_only/
//! (written by tests/python/verify_only_vectors.py and
//! tests/go/verifyonly/main.go); `scripts/verify-only-interop.sh` writes fresh
//! ones and points `WID_VERIFY_ONLY_VECTORS` at them.

mod common;

use std::sync::Arc;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as lc, EcdsaKeyPair, KeyPair, RsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};
use workload_identity::{
    Algorithm, Audience, ExternalSigner, JwsAlgorithm, KeyId, KeyState, Keyring, MemoryStore,
    PublicKey, ResultCode, Verifier,
};

/// The vector file `name` (fresh ones when the interop script says where).
fn vectors(name: &str) -> Value {
    let dir = std::env::var("WID_VERIFY_ONLY_VECTORS").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/verify_only").into()
    });
    let path = format!("{dir}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn verifier(kr: Keyring, aud: &str) -> Verifier {
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    Verifier::builder(kr, store, Audience::new(aud).unwrap()).build()
}

/// Every valid token verifies under its kid; every near miss gets its code.
fn check_vectors(name: &str) {
    let doc = vectors(name);
    let generator = doc["generator"].as_str().unwrap();
    let now = doc["now"].as_i64().unwrap();
    let (kr, report) = Keyring::from_jwks(&doc["jwks"].to_string()).unwrap();
    assert_eq!(
        report.imported.len(),
        doc["jwks"]["keys"].as_array().unwrap().len(),
        "{generator}: every key imports ({report:?})"
    );
    for (kid, want) in [
        ("es384", JwsAlgorithm::Es384),
        ("es512", JwsAlgorithm::Es512),
        ("ps256", JwsAlgorithm::Ps256),
        ("ps384", JwsAlgorithm::Ps384),
        ("ps512", JwsAlgorithm::Ps512),
        ("rs384", JwsAlgorithm::Rs384),
        ("rs512", JwsAlgorithm::Rs512),
        ("shared-rs256", JwsAlgorithm::Rs256),
        // No alg in the JWK: RS256, never guessed from a token.
        ("shared-noalg", JwsAlgorithm::Rs256),
    ] {
        let info = kr.key_info(kid).unwrap();
        assert_eq!(info.algorithm, want, "{generator}: {kid}");
        assert_eq!(info.state, KeyState::Inactive);
    }
    let v = verifier(kr, doc["aud"].as_str().unwrap());
    let valid = doc["valid"].as_array().unwrap();
    assert_eq!(valid.len(), 9, "{generator}: one token per algorithm");
    for t in valid {
        let what = t["name"].as_str().unwrap();
        let verified = v
            .verify(t["token"].as_str().unwrap(), now)
            .unwrap_or_else(|e| panic!("{generator}: {what} must verify: {e}"));
        assert_eq!(verified.kid.as_str(), t["kid"].as_str().unwrap(), "{what}");
        assert_eq!(verified.claims.allocation_id, common::ALLOC_ID);
    }
    let refused = doc["refused"].as_array().unwrap();
    assert!(
        refused.len() >= 30,
        "{generator}: the near misses are there"
    );
    for t in refused {
        let what = t["name"].as_str().unwrap();
        let e = v
            .verify(t["token"].as_str().unwrap(), now)
            .err()
            .unwrap_or_else(|| panic!("{generator}: {what} must be refused"));
        assert_eq!(
            format!("{:?}", e.code()),
            t["code"].as_str().unwrap(),
            "{generator}: {what}: {e}"
        );
    }
}

#[test]
fn pyjwt_tokens_of_every_verify_only_algorithm_verify_and_near_misses_are_refused() {
    check_vectors("pyjwt.json");
}

#[test]
fn go_jose_tokens_of_every_verify_only_algorithm_verify_and_near_misses_are_refused() {
    check_vectors("gojose.json");
}

const NOW: i64 = 1_767_225_660;
const AUD: &str = "wid-native";

fn claims() -> Value {
    json!({
        "aud": AUD, "exp": NOW + 3600, "iat": NOW, "nbf": NOW,
        "jti": "6c8f3a52-0c5d-4a4e-9f0e-1b2c3d4e5f60",
        "nomad_allocation_id": common::ALLOC_ID, "nomad_job_id": "web",
        "nomad_namespace": "default", "nomad_task": "server",
        "sub": "global:default:web:frontend:server:default",
    })
}

fn signing_input(alg: &str, kid: &str) -> String {
    format!(
        "{}.{}",
        B64.encode(format!(r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT"}}"#)),
        B64.encode(claims().to_string())
    )
}

/// A signer of one algorithm, made by aws-lc-rs, with its JWK.
enum Native {
    Ec(EcdsaKeyPair, &'static str, usize),
    Rsa(RsaKeyPair, &'static dyn lc::RsaEncoding),
}

impl Native {
    fn new(alg: JwsAlgorithm) -> Native {
        let rng = SystemRandom::new();
        let ec = |a: &'static lc::EcdsaSigningAlgorithm, crv, size| {
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(a, &rng).unwrap();
            Native::Ec(
                EcdsaKeyPair::from_pkcs8(a, pkcs8.as_ref()).unwrap(),
                crv,
                size,
            )
        };
        let rsa = |enc: &'static dyn lc::RsaEncoding| {
            Native::Rsa(
                RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap(),
                enc,
            )
        };
        match alg {
            JwsAlgorithm::Es384 => ec(&lc::ECDSA_P384_SHA384_FIXED_SIGNING, "P-384", 48),
            JwsAlgorithm::Es512 => ec(&lc::ECDSA_P521_SHA512_FIXED_SIGNING, "P-521", 66),
            JwsAlgorithm::Ps256 => rsa(&lc::RSA_PSS_SHA256),
            JwsAlgorithm::Ps384 => rsa(&lc::RSA_PSS_SHA384),
            JwsAlgorithm::Ps512 => rsa(&lc::RSA_PSS_SHA512),
            JwsAlgorithm::Rs384 => rsa(&lc::RSA_PKCS1_SHA384),
            JwsAlgorithm::Rs512 => rsa(&lc::RSA_PKCS1_SHA512),
            other => panic!("{other} is not verify-only"),
        }
    }

    fn jwk(&self, kid: &str, alg: Option<&str>) -> Value {
        let mut jwk = match self {
            Native::Ec(pair, crv, size) => {
                let point = pair.public_key().as_ref();
                assert_eq!(point.len(), 1 + 2 * size);
                json!({"kty": "EC", "crv": crv, "x": B64.encode(&point[1..1 + size]),
                       "y": B64.encode(&point[1 + size..])})
            }
            Native::Rsa(pair, _) => {
                let public = pair.public_key();
                json!({"kty": "RSA", "e": "AQAB",
                       "n": B64.encode(public.modulus().big_endian_without_leading_zero())})
            }
        };
        jwk["kid"] = json!(kid);
        if let Some(alg) = alg {
            jwk["alg"] = json!(alg);
        }
        jwk
    }

    fn sign(&self, input: &str) -> Vec<u8> {
        let rng = SystemRandom::new();
        match self {
            Native::Ec(pair, _, _) => pair.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Native::Rsa(pair, enc) => {
                let mut sig = vec![0u8; pair.public_modulus_len()];
                pair.sign(*enc, &rng, input.as_bytes(), &mut sig).unwrap();
                sig
            }
        }
    }

    fn token(&self, alg: &str, kid: &str) -> String {
        let input = signing_input(alg, kid);
        let sig = self.sign(&input);
        format!("{input}.{}", B64.encode(sig))
    }
}

const VERIFY_ONLY: [JwsAlgorithm; 7] = [
    JwsAlgorithm::Es384,
    JwsAlgorithm::Es512,
    JwsAlgorithm::Ps256,
    JwsAlgorithm::Ps384,
    JwsAlgorithm::Ps512,
    JwsAlgorithm::Rs384,
    JwsAlgorithm::Rs512,
];

/// aws-lc-rs signs, we verify; and the keys survive a keystore round trip
/// (saved as public-only keys with their algorithm).
#[test]
fn every_verify_only_algorithm_verifies_and_survives_a_keystore() {
    let natives: Vec<(JwsAlgorithm, Native)> =
        VERIFY_ONLY.iter().map(|a| (*a, Native::new(*a))).collect();
    let jwks = json!({"keys": natives.iter().map(|(a, n)| n.jwk(&a.name().to_lowercase(), Some(a.name()))).collect::<Vec<_>>()});
    let (kr, _) = Keyring::from_jwks(&jwks.to_string()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    kr.save(dir.path().join("ks")).unwrap();
    let loaded = Keyring::load(dir.path().join("ks")).unwrap();
    assert_eq!(loaded.keys(), kr.keys());
    for keyring in [kr, loaded] {
        let v = verifier(keyring.clone(), AUD);
        for (alg, native) in &natives {
            let kid = alg.name().to_lowercase();
            let info = keyring.key_info(&kid).unwrap();
            assert_eq!(info.algorithm, *alg);
            assert!(info.algorithm.is_verify_only() && !info.can_sign());
            let token = native.token(alg.name(), &kid);
            assert_eq!(v.verify(&token, NOW).unwrap().kid.as_str(), kid, "{alg}");
            // Every other algorithm's name on the same token and key:
            // refused before any signature check.
            for other in JwsAlgorithm::ALL.iter().filter(|o| *o != alg) {
                let swapped = native.token(other.name(), &kid);
                assert_eq!(
                    v.verify(&swapped, NOW).unwrap_err().code(),
                    ResultCode::UnsupportedAlgorithm,
                    "{other} under a {alg} key"
                );
            }
        }
    }
}

#[test]
fn jwks_import_of_p384_p521_and_named_rsa_algorithms_is_exact() {
    let p384 = Native::new(JwsAlgorithm::Es384);
    let p521 = Native::new(JwsAlgorithm::Es512);
    let rsa = Native::new(JwsAlgorithm::Ps256);
    let edit = |jwk: &Value, f: &dyn Fn(&mut Value)| {
        let mut v = jwk.clone();
        f(&mut v);
        v
    };
    let e384 = p384.jwk("k", Some("ES384"));
    let e521 = p521.jwk("k", None);
    let r = rsa.jwk("k", Some("PS256"));
    let long = |v: &Value, m: &str, extra: u8| {
        let mut b = B64.decode(v[m].as_str().unwrap()).unwrap();
        b.insert(0, extra);
        json!(B64.encode(b))
    };
    let short = |v: &Value, m: &str| {
        let b = B64.decode(v[m].as_str().unwrap()).unwrap();
        json!(B64.encode(&b[1..]))
    };
    let mut off = B64.decode(e384["y"].as_str().unwrap()).unwrap();
    off[47] ^= 1;
    for (name, entry, path) in [
        (
            "P-384 x of 47 bytes",
            edit(&e384, &|v| v["x"] = short(v, "x")),
            "keys[0].x",
        ),
        (
            "P-384 x of 49 bytes",
            edit(&e384, &|v| v["x"] = long(v, "x", 0)),
            "keys[0].x",
        ),
        (
            "P-384 y of 47 bytes",
            edit(&e384, &|v| v["y"] = short(v, "y")),
            "keys[0].y",
        ),
        (
            "P-384 off the curve",
            edit(&e384, &|v| v["y"] = json!(B64.encode(&off))),
            "keys[0].x",
        ),
        (
            "P-521 x of 65 bytes",
            edit(&e521, &|v| v["x"] = short(v, "x")),
            "keys[0].x",
        ),
        (
            "P-521 y of 67 bytes",
            edit(&e521, &|v| v["y"] = long(v, "y", 0)),
            "keys[0].y",
        ),
        (
            "P-384 key with alg ES512",
            edit(&e384, &|v| v["alg"] = json!("ES512")),
            "keys[0].crv",
        ),
        (
            "P-384 key with alg ES256",
            edit(&e384, &|v| v["alg"] = json!("ES256")),
            "keys[0].crv",
        ),
        (
            "P-384 key with alg PS384",
            edit(&e384, &|v| v["alg"] = json!("PS384")),
            "keys[0].alg",
        ),
        (
            "EC P-192",
            edit(&e384, &|v| {
                v["crv"] = json!("P-192");
                v.as_object_mut().unwrap().remove("alg");
            }),
            "keys[0].crv",
        ),
        (
            "RSA key with alg HS384",
            edit(&r, &|v| v["alg"] = json!("HS384")),
            "keys[0].alg",
        ),
        (
            "RSA key with alg ES384",
            edit(&r, &|v| v["alg"] = json!("ES384")),
            "keys[0].alg",
        ),
        (
            "RSA key with alg none",
            edit(&r, &|v| v["alg"] = json!("none")),
            "keys[0].alg",
        ),
        (
            "RSA key with alg ps256",
            edit(&r, &|v| v["alg"] = json!("ps256")),
            "keys[0].alg",
        ),
        (
            "OKP key with alg PS256",
            json!({"kty": "OKP", "crv": "Ed25519", "kid": "k", "alg": "PS256",
            "x": B64.encode(ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key().as_bytes())}),
            "keys[0].alg",
        ),
        (
            "P-384 private d",
            edit(&e384, &|v| v["d"] = json!("AAAA")),
            "keys[0].d",
        ),
    ] {
        let kr = Keyring::new();
        let e = kr
            .import_jwks(&json!({"keys": [entry]}).to_string())
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::DecodeError, "{name}: {e}");
        assert!(e.to_string().contains(path), "{name}: {e}");
        assert!(kr.is_empty(), "{name}: all or nothing");
    }
    // The same modulus under two kids, PS256 and (no alg) RS256: two keys,
    // each verifying its own algorithm only.
    let jwks = json!({"keys": [rsa.jwk("pss", Some("PS256")), rsa.jwk("plain", None)]});
    let (kr, _) = Keyring::from_jwks(&jwks.to_string()).unwrap();
    assert_eq!(kr.key_info("pss").unwrap().algorithm, JwsAlgorithm::Ps256);
    assert_eq!(kr.key_info("plain").unwrap().algorithm, Algorithm::Rs256);
    assert!(matches!(
        kr.key_info("pss").unwrap().public_key,
        PublicKey::RsaVerifyOnly {
            alg: JwsAlgorithm::Ps256,
            ..
        }
    ));
    // Importing the PS256 kid again as RS256 is another key under that kid.
    let e = kr
        .import_jwks(&json!({"keys": [rsa.jwk("pss", Some("RS256"))]}).to_string())
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey);
    // The published JWKS gives each key back with its algorithm and curve.
    let back: Value = serde_json::from_str(&kr.jwks().to_json()).unwrap();
    let algs: Vec<&str> = back["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["alg"].as_str().unwrap())
        .collect();
    assert!(algs.contains(&"PS256") && algs.contains(&"RS256"), "{back}");
    let (kr, _) = Keyring::from_jwks(&json!({"keys": [p521.jwk("e", None)]}).to_string()).unwrap();
    let back: Value = serde_json::from_str(&kr.jwks().to_json()).unwrap();
    assert_eq!(back["keys"][0]["crv"], "P-521");
    assert_eq!(back["keys"][0]["alg"], "ES512");
    assert_eq!(back["keys"][0]["x"], e521["x"]);
}

#[derive(Debug)]
struct NeverSigns;

impl ExternalSigner for NeverSigns {
    fn sign(&self, _message: &[u8]) -> Result<Vec<u8>, workload_identity::Error> {
        Ok(vec![0; 96])
    }
    fn describe(&self) -> String {
        "test:never".into()
    }
}

/// A verify-only key cannot be made to sign: not active, not prepublished,
/// not promoted, and the refusal names the algorithm and what signs.
#[test]
fn verify_only_keys_never_sign() {
    let p384 = Native::new(JwsAlgorithm::Es384);
    let jwk = p384.jwk("k", None);
    let coord = |m: &str| -> [u8; 48] {
        B64.decode(jwk[m].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap()
    };
    let public = PublicKey::P384 {
        x: coord("x"),
        y: coord("y"),
    };
    let kr = Keyring::new();
    for state in [KeyState::Active, KeyState::Prepublished] {
        let e = kr
            .insert_external(
                KeyId::new("p384").unwrap(),
                public.clone(),
                Arc::new(NeverSigns),
                state,
                NOW,
                NOW,
            )
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("ES384")
                && msg.contains("verify-only")
                && msg.contains("EdDSA, ES256 or RS256"),
            "{msg}"
        );
    }
    kr.insert_external(
        KeyId::new("p384").unwrap(),
        public,
        Arc::new(NeverSigns),
        KeyState::Inactive,
        NOW,
        NOW,
    )
    .unwrap();
    let info = kr.key_info("p384").unwrap();
    assert!(!info.can_sign(), "held by a signer, but verify-only");
    let e = kr.promote("p384", NOW).unwrap_err();
    assert!(e.to_string().contains("ES384"), "{e}");
    assert_eq!(kr.active_id_for(Algorithm::Es256), None);
    // It verifies all the same.
    let token = p384.token("ES384", "p384");
    assert!(verifier(kr, AUD).verify(&token, NOW).is_ok());
}

/// The numbers are a contract: 1..3 are `Algorithm`'s (`WID_ALG_*`), the
/// verify-only ones are appended.
#[test]
fn jws_algorithm_numbers_and_names_are_fixed() {
    let want = [
        (1, "EdDSA"),
        (2, "ES256"),
        (3, "RS256"),
        (4, "ES384"),
        (5, "ES512"),
        (6, "PS256"),
        (7, "PS384"),
        (8, "PS512"),
        (9, "RS384"),
        (10, "RS512"),
    ];
    for (alg, (n, name)) in JwsAlgorithm::ALL.iter().zip(want) {
        assert_eq!(alg.as_u32(), n);
        assert_eq!(alg.name(), name);
        assert_eq!(JwsAlgorithm::from_u32(n), Some(*alg));
        assert_eq!(JwsAlgorithm::from_name(name), Some(*alg));
        assert_eq!(alg.is_verify_only(), n > 3);
    }
    for a in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
        assert_eq!(JwsAlgorithm::from(a).as_u32(), a as u32);
        assert_eq!(JwsAlgorithm::from(a).signing(), Some(a));
    }
    for bad in [
        "HS256",
        "HS384",
        "HS512",
        "none",
        "es384",
        "PS256 ",
        "ES256K",
        "EdDSA25519",
    ] {
        assert_eq!(JwsAlgorithm::from_header(bad), None, "{bad}");
    }
    assert_eq!(JwsAlgorithm::from_u32(0), None);
    assert_eq!(JwsAlgorithm::from_u32(11), None);
}
