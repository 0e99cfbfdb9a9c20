//! ES256 and RS256, side by side in one run, on the same claims: the raw
//! constant-time libraries (aws-lc-rs, the one we use, and ring), our issue and
//! verify, and the `jsonwebtoken` crate; then verification with 1 to 1,000 keys
//! of mixed algorithms in the keyring.
//!
//! `cargo bench --bench algorithms`
//!
//! Rows per algorithm: `raw aws-lc-rs sign`, `raw ring sign` (over the token's
//! signing input), `raw aws-lc-rs verify` (the public key parsed per call, as
//! aws-lc-rs's `UnparsedPublicKey` does), `raw aws-lc-rs verify (parsed key)`
//! (`ParsedPublicKey`, the fastest form), `raw ring verify`, `issue`, `verify`
//! (memory store), `jsonwebtoken encode` and `jsonwebtoken decode` (its
//! aws-lc-rs provider, the faster of its two for these algorithms).
//!
//! Then the verify-only algorithms (keys of other issuers, imported from a
//! JWKS; tokens signed here by aws-lc-rs with the same claims): `raw aws-lc-rs
//! verify`, `raw aws-lc-rs verify (parsed key)` and our `verify` (memory
//! store), per algorithm in groups named `<alg> (verify-only)`; e.g.
//! `cargo bench --bench algorithms -- 'ES384 \(verify-only\)'`.

use std::hint::black_box;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use workload_identity::{
    Algorithm, Audience, Issuer, JwsAlgorithm, KeyState, Keyring, MemoryStore, PublicKey, RootKey,
    Verifier,
};

#[path = "../tests/common/mod.rs"]
mod common;

use common::RSA_PKCS8;
const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
const AUD: &str = "vault.io";

/// jsonwebtoken at its fastest per algorithm: aws-lc-rs for ES256 and RS256
/// (RustCrypto's p256 and rsa are 4-10 x slower; see BENCHMARKS.md).
fn install_jsonwebtoken_provider() {
    let provider = jsonwebtoken::crypto::CryptoProvider {
        signer_factory: jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.signer_factory,
        verifier_factory: jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER.verifier_factory,
        jwk_utils: jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER
            .jwk_utils
            .clone(),
    };
    Box::leak(Box::new(provider)).install_default().unwrap();
}

fn root(alg: Algorithm, kid: &str, seed: u64, state: KeyState) -> RootKey {
    common::alg_key(alg, kid, (seed % 251) as u8 + 1, state, 0)
}

/// A keyring with one active key of each algorithm and `extra` inactive keys
/// of mixed algorithms (the RSA ones share the fixture's modulus under their
/// own kids).
fn keyring(extra: usize) -> Keyring {
    let kr = Keyring::from_keys([
        root(Algorithm::EdDsa, "ed", 0, KeyState::Active),
        root(Algorithm::Es256, "es", 0, KeyState::Active),
        root(Algorithm::Rs256, "rs", 0, KeyState::Active),
    ])
    .unwrap();
    let keys: Vec<RootKey> = (0..extra)
        .map(|i| {
            let alg = Algorithm::ALL[i % 3];
            root(alg, &format!("old-{i}"), i as u64 + 1, KeyState::Inactive)
        })
        .collect();
    kr.insert_all(&keys).unwrap();
    kr
}

/// The PKCS#1 `RSAPrivateKey` inside the fixture's PKCS#8 (what
/// jsonwebtoken's `from_rsa_der` takes): a 2048-bit key's PKCS#8 is a fixed
/// 26-byte prefix ending in the OCTET STRING header, then the PKCS#1 key.
fn pkcs1(pkcs8: &[u8]) -> &[u8] {
    assert_eq!(
        &pkcs8[22..24],
        &[0x04, 0x82],
        "an OCTET STRING with a 2-byte length"
    );
    let len = usize::from(pkcs8[24]) << 8 | usize::from(pkcs8[25]);
    assert_eq!(pkcs8.len(), 26 + len);
    &pkcs8[26..]
}

fn bench(c: &mut Criterion) {
    install_jsonwebtoken_provider();
    let now = workload_identity::unix_now();
    let store = Arc::new(MemoryStore::new());
    let mut req = common::issue_request_task();
    req.allocation.id = ALLOC.into();
    store.upsert(&req.allocation);
    let kr = keyring(0);
    let issuer = Issuer::new(kr.clone());
    let verifier =
        Verifier::builder(kr.clone(), store.clone(), Audience::new(AUD).unwrap()).build();
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let ring_rng = ring::rand::SystemRandom::new();

    for alg in [Algorithm::Es256, Algorithm::Rs256] {
        let signed = issuer.issue_with(alg, &req, now).unwrap();
        let token = signed.token.clone();
        verifier.verify(&token, now).unwrap();
        let (input, sig_b64) = token.rsplit_once('.').unwrap();
        let input = input.as_bytes().to_vec();
        let sig = B64.decode(sig_b64).unwrap();
        let kid = if alg == Algorithm::Es256 { "es" } else { "rs" };
        let public = kr.key_info(kid).unwrap().public_key;
        let mut g = c.benchmark_group(alg.name());

        // The raw libraries, on the same signing input.
        match &public {
            PublicKey::P256 { x, y } => {
                let mut point = vec![4u8];
                point.extend_from_slice(x);
                point.extend_from_slice(y);
                // A fresh P-256 key for the raw signers (same curve, same cost).
                let p8 = aws_lc_rs::signature::EcdsaKeyPair::generate_pkcs8(
                    &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &rng,
                )
                .unwrap();
                let lc = aws_lc_rs::signature::EcdsaKeyPair::from_pkcs8(
                    &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    p8.as_ref(),
                )
                .unwrap();
                let rg = ring::signature::EcdsaKeyPair::from_pkcs8(
                    &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    p8.as_ref(),
                    &ring_rng,
                )
                .unwrap();
                g.bench_function("raw aws-lc-rs sign", |b| {
                    b.iter(|| lc.sign(&rng, black_box(&input)).unwrap())
                });
                g.bench_function("raw ring sign", |b| {
                    b.iter(|| rg.sign(&ring_rng, black_box(&input)).unwrap())
                });
                let unparsed = aws_lc_rs::signature::UnparsedPublicKey::new(
                    &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
                    point.clone(),
                );
                let parsed = unparsed.parse().unwrap();
                let ring_pub = ring::signature::UnparsedPublicKey::new(
                    &ring::signature::ECDSA_P256_SHA256_FIXED,
                    point.clone(),
                );
                g.bench_function("raw aws-lc-rs verify", |b| {
                    b.iter(|| unparsed.verify(black_box(&input), &sig).unwrap())
                });
                g.bench_function("raw aws-lc-rs verify (parsed key)", |b| {
                    b.iter(|| parsed.verify_sig(black_box(&input), &sig).unwrap())
                });
                g.bench_function("raw ring verify", |b| {
                    b.iter(|| ring_pub.verify(black_box(&input), &sig).unwrap())
                });
            }
            PublicKey::Rsa { n } => {
                let lc = aws_lc_rs::signature::RsaKeyPair::from_pkcs8(RSA_PKCS8).unwrap();
                let rg = ring::signature::RsaKeyPair::from_pkcs8(RSA_PKCS8).unwrap();
                g.bench_function("raw aws-lc-rs sign", |b| {
                    b.iter(|| {
                        let mut s = vec![0u8; lc.public_modulus_len()];
                        lc.sign(
                            &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                            &rng,
                            black_box(&input),
                            &mut s,
                        )
                        .unwrap();
                        s
                    })
                });
                g.bench_function("raw ring sign", |b| {
                    b.iter(|| {
                        let mut s = vec![0u8; rg.public().modulus_len()];
                        rg.sign(
                            &ring::signature::RSA_PKCS1_SHA256,
                            &ring_rng,
                            black_box(&input),
                            &mut s,
                        )
                        .unwrap();
                        s
                    })
                });
                let e = [1u8, 0, 1];
                let comps = aws_lc_rs::signature::RsaPublicKeyComponents {
                    n: n.as_slice(),
                    e: &e[..],
                };
                let parsed = comps
                    .to_parsed_public_key(&aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256)
                    .unwrap();
                let ring_comps = ring::signature::RsaPublicKeyComponents {
                    n: n.as_slice(),
                    e: &e[..],
                };
                g.bench_function("raw aws-lc-rs verify", |b| {
                    b.iter(|| {
                        comps
                            .verify(
                                &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
                                black_box(&input),
                                &sig,
                            )
                            .unwrap()
                    })
                });
                g.bench_function("raw aws-lc-rs verify (parsed key)", |b| {
                    b.iter(|| parsed.verify_sig(black_box(&input), &sig).unwrap())
                });
                g.bench_function("raw ring verify", |b| {
                    b.iter(|| {
                        ring_comps
                            .verify(
                                &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                                black_box(&input),
                                &sig,
                            )
                            .unwrap()
                    })
                });
            }
            PublicKey::Ed25519(_) => unreachable!("only ES256 and RS256 here"),
            _ => unreachable!("no other key types"),
        }

        g.bench_function("workload-identity issue", |b| {
            b.iter(|| issuer.issue_with(alg, black_box(&req), now).unwrap())
        });
        g.bench_function("workload-identity verify (memory store)", |b| {
            b.iter(|| verifier.verify(black_box(&token), now).unwrap())
        });

        // jsonwebtoken, the same claims and key.
        let jwt_alg = match alg {
            Algorithm::Es256 => jsonwebtoken::Algorithm::ES256,
            _ => jsonwebtoken::Algorithm::RS256,
        };
        let mut header = jsonwebtoken::Header::new(jwt_alg);
        header.kid = Some(kid.into());
        let (enc_key, dec_key) = match &public {
            PublicKey::P256 { x, y } => {
                // The same P-256 key: its PKCS#8 from the root key's scalar is
                // not exposed, so jsonwebtoken signs with a fresh key of the
                // curve and verifies our token with our public key.
                let p8 = aws_lc_rs::signature::EcdsaKeyPair::generate_pkcs8(
                    &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &rng,
                )
                .unwrap();
                (
                    jsonwebtoken::EncodingKey::from_ec_der(p8.as_ref()),
                    jsonwebtoken::DecodingKey::from_ec_components(&B64.encode(x), &B64.encode(y))
                        .unwrap(),
                )
            }
            PublicKey::Rsa { n } => (
                jsonwebtoken::EncodingKey::from_rsa_der(pkcs1(RSA_PKCS8)),
                jsonwebtoken::DecodingKey::from_rsa_components(&B64.encode(n), "AQAB").unwrap(),
            ),
            _ => unreachable!("only ES256 and RS256 here"),
        };
        let mut validation = jsonwebtoken::Validation::new(jwt_alg);
        validation.set_audience(&[AUD]);
        jsonwebtoken::decode::<serde_json::Value>(&token, &dec_key, &validation).unwrap();
        g.bench_function("jsonwebtoken encode", |b| {
            b.iter(|| jsonwebtoken::encode(&header, black_box(&signed.claims), &enc_key).unwrap())
        });
        g.bench_function("jsonwebtoken decode", |b| {
            b.iter(|| {
                jsonwebtoken::decode::<serde_json::Value>(black_box(&token), &dec_key, &validation)
                    .unwrap()
            })
        });
        g.finish();
    }

    verify_only(c, &store, now, &req);

    // Verification cost against the number of keys (mixed algorithms).
    let mut g = c.benchmark_group("verify vs keys");
    for n in [1usize, 10, 100, 1000] {
        let kr = keyring(n.saturating_sub(3));
        let issuer = Issuer::new(kr.clone());
        let v = Verifier::builder(kr.clone(), store.clone(), Audience::new(AUD).unwrap()).build();
        for alg in Algorithm::ALL {
            let token = issuer.issue_with(*alg, &req, now).unwrap().token;
            v.verify(&token, now).unwrap();
            g.bench_with_input(BenchmarkId::new(alg.name(), kr.len()), &token, |b, t| {
                b.iter(|| v.verify(black_box(t), now).unwrap())
            });
        }
    }
    g.finish();
}

/// A verify-only key of `alg` made by aws-lc-rs: its JWK, its SEC1 point or
/// RSA modulus (for the raw rows), and a signer of the signing input.
#[allow(clippy::type_complexity)]
fn verify_only_key(
    alg: JwsAlgorithm,
) -> (
    serde_json::Value,
    &'static dyn aws_lc_rs::signature::VerificationAlgorithm,
    Vec<u8>,
    Box<dyn Fn(&[u8]) -> Vec<u8>>,
) {
    use aws_lc_rs::signature::{self as lc, EcdsaKeyPair, KeyPair, RsaKeyPair};
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let ec = |sign: &'static lc::EcdsaSigningAlgorithm,
              verify: &'static lc::EcdsaVerificationAlgorithm,
              crv: &str,
              size: usize| {
        let p8 = EcdsaKeyPair::generate_pkcs8(sign, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(sign, p8.as_ref()).unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let jwk = serde_json::json!({"kty": "EC", "crv": crv,
            "x": B64.encode(&point[1..=size]), "y": B64.encode(&point[1 + size..])});
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let signer: Box<dyn Fn(&[u8]) -> Vec<u8>> =
            Box::new(move |m| pair.sign(&rng, m).unwrap().as_ref().to_vec());
        (
            jwk,
            verify as &'static dyn lc::VerificationAlgorithm,
            point,
            signer,
        )
    };
    let rsa = |enc: &'static dyn lc::RsaEncoding, verify: &'static lc::RsaParameters| {
        let pair = RsaKeyPair::from_pkcs8(RSA_PKCS8).unwrap();
        let n = pair
            .public_key()
            .modulus()
            .big_endian_without_leading_zero()
            .to_vec();
        let jwk = serde_json::json!({"kty": "RSA", "e": "AQAB", "n": B64.encode(&n)});
        let der = pair.public_key().as_ref().to_vec();
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let signer: Box<dyn Fn(&[u8]) -> Vec<u8>> = Box::new(move |m| {
            let mut sig = vec![0u8; pair.public_modulus_len()];
            pair.sign(enc, &rng, m, &mut sig).unwrap();
            sig
        });
        (
            jwk,
            verify as &'static dyn lc::VerificationAlgorithm,
            der,
            signer,
        )
    };
    match alg {
        JwsAlgorithm::Es384 => ec(
            &lc::ECDSA_P384_SHA384_FIXED_SIGNING,
            &lc::ECDSA_P384_SHA384_FIXED,
            "P-384",
            48,
        ),
        JwsAlgorithm::Es512 => ec(
            &lc::ECDSA_P521_SHA512_FIXED_SIGNING,
            &lc::ECDSA_P521_SHA512_FIXED,
            "P-521",
            66,
        ),
        JwsAlgorithm::Ps256 => rsa(&lc::RSA_PSS_SHA256, &lc::RSA_PSS_2048_8192_SHA256),
        JwsAlgorithm::Ps384 => rsa(&lc::RSA_PSS_SHA384, &lc::RSA_PSS_2048_8192_SHA384),
        JwsAlgorithm::Ps512 => rsa(&lc::RSA_PSS_SHA512, &lc::RSA_PSS_2048_8192_SHA512),
        JwsAlgorithm::Rs384 => rsa(&lc::RSA_PKCS1_SHA384, &lc::RSA_PKCS1_2048_8192_SHA384),
        _ => rsa(&lc::RSA_PKCS1_SHA512, &lc::RSA_PKCS1_2048_8192_SHA512),
    }
}

/// The verify-only algorithms: our verify of a token signed elsewhere (the
/// claims our issuer writes) beside aws-lc-rs's own verify of the same
/// signature over the same signing input.
fn verify_only(
    c: &mut Criterion,
    store: &Arc<MemoryStore>,
    now: i64,
    req: &workload_identity::model::IssueRequest,
) {
    let claims = Issuer::new(keyring(0))
        .issue_with(Algorithm::Es256, req, now)
        .unwrap()
        .claims;
    let payload = B64.encode(serde_json::to_vec(&claims).unwrap());
    for alg in JwsAlgorithm::ALL.into_iter().filter(|a| a.is_verify_only()) {
        let (mut jwk, verify_alg, public, sign) = verify_only_key(alg);
        let kid = alg.name().to_lowercase();
        jwk["kid"] = serde_json::json!(kid);
        jwk["alg"] = serde_json::json!(alg.name());
        let (kr, _) = Keyring::from_jwks(&serde_json::json!({"keys": [jwk]}).to_string()).unwrap();
        let v = Verifier::builder(kr, store.clone(), Audience::new(AUD).unwrap()).build();
        let header = B64.encode(format!(r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT"}}"#));
        let input = format!("{header}.{payload}");
        let sig = sign(input.as_bytes());
        let token = format!("{input}.{}", B64.encode(&sig));
        v.verify(&token, now).unwrap();
        let unparsed = aws_lc_rs::signature::UnparsedPublicKey::new(verify_alg, public);
        let parsed = unparsed.parse().unwrap();
        let input = input.into_bytes();
        let mut g = c.benchmark_group(format!("{alg} (verify-only)"));
        g.bench_function("raw aws-lc-rs verify", |b| {
            b.iter(|| unparsed.verify(black_box(&input), &sig).unwrap())
        });
        g.bench_function("raw aws-lc-rs verify (parsed key)", |b| {
            b.iter(|| parsed.verify_sig(black_box(&input), &sig).unwrap())
        });
        g.bench_function("workload-identity verify (memory store)", |b| {
            b.iter(|| v.verify(black_box(&token), now).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
