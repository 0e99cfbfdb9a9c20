//! Issue and verify against the raw primitives and a peer, on the same claims.
//!
//! `cargo bench --bench identity`
//!
//! Rows: raw ed25519-dalek `sign` and `verify_strict` over the token's signing
//! input; the `jsonwebtoken` crate's EdDSA encode and decode of the same claims;
//! our `issue`, `verify` (memory store), `verify_batch` of 64 (per token), a
//! cache hit, and `verify` with 1,000 keys in the keyring.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::{Signature, Signer, SigningKey};
use workload_identity::model::IssueRequest;
use workload_identity::unix_now;
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, Verifier};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

#[path = "../tests/common/mod.rs"]
mod common;

const MATERIAL: [u8; 32] = [7; 32];

/// The shared sample task request, for allocation `alloc`.
fn request(alloc: &str) -> IssueRequest {
    let mut req = common::issue_request_task();
    req.allocation.id = alloc.into();
    req
}

fn keyring(extra_keys: usize) -> Keyring {
    let kr = Keyring::from_keys([RootKey::new(
        KeyId::new("bench-key").unwrap(),
        KeyMaterial::from_slice(&MATERIAL).unwrap(),
        KeyDerivation::NomadRawSeed,
        KeyState::Active,
        0,
    )])
    .unwrap();
    for i in 0..extra_keys {
        let mut m = [0u8; 32];
        m[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        kr.insert(RootKey::new(
            KeyId::new(&format!("old-{i}")).unwrap(),
            KeyMaterial::from_slice(&m).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Inactive,
            0,
        ))
        .unwrap();
    }
    kr
}

fn bench(c: &mut Criterion) {
    // jsonwebtoken with RustCrypto's ed25519-dalek, as in earlier runs.
    jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER
        .install_default()
        .unwrap();
    let now = unix_now();
    let alloc = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
    let store = Arc::new(MemoryStore::new());
    store.upsert(&request(alloc).allocation);
    let kr = keyring(0);
    let issuer = Issuer::new(kr.clone());
    let audience = Audience::new("vault.io").unwrap();
    let verifier = Verifier::builder(kr.clone(), store.clone(), audience.clone()).build();
    let signed = issuer.issue(&request(alloc), now).unwrap();
    let token = signed.token.clone();
    let (input, sig_b64) = token.rsplit_once('.').unwrap();
    use base64::Engine;
    let sig_bytes: [u8; 64] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sig_b64)
        .unwrap()
        .try_into()
        .unwrap();
    let sig = Signature::from_bytes(&sig_bytes);
    // Nomad-style key: the material is the Ed25519 seed.
    let sk = SigningKey::from_bytes(&MATERIAL);
    let vk = sk.verifying_key();
    assert!(vk.verify_strict(input.as_bytes(), &sig).is_ok());
    verifier.verify(&token, now).unwrap();

    let mut g = c.benchmark_group("identity");
    g.bench_function("raw ed25519-dalek sign", |b| {
        b.iter(|| sk.sign(black_box(input.as_bytes())))
    });
    g.bench_function("raw ed25519-dalek verify_strict", |b| {
        b.iter(|| vk.verify_strict(black_box(input.as_bytes()), black_box(&sig)))
    });

    // jsonwebtoken, EdDSA, same claims.
    let mut pkcs8 = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    pkcs8.extend_from_slice(&MATERIAL);
    let enc_key = jsonwebtoken::EncodingKey::from_ed_der(&pkcs8);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("bench-key".into());
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vk.as_bytes());
    let dec_key = jsonwebtoken::DecodingKey::from_ed_components(&x).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    validation.set_audience(&["vault.io"]);
    let jwt_token = jsonwebtoken::encode(&header, &signed.claims, &enc_key).unwrap();
    jsonwebtoken::decode::<serde_json::Value>(&token, &dec_key, &validation).unwrap();
    g.bench_function("jsonwebtoken encode (EdDSA)", |b| {
        b.iter(|| jsonwebtoken::encode(&header, black_box(&signed.claims), &enc_key).unwrap())
    });
    g.bench_function("jsonwebtoken decode (EdDSA)", |b| {
        b.iter(|| {
            jsonwebtoken::decode::<serde_json::Value>(black_box(&jwt_token), &dec_key, &validation)
                .unwrap()
        })
    });

    let handle = kr.verifying_key("bench-key").unwrap();
    g.bench_function("keyring strict check alone (precomputed)", |b| {
        b.iter(|| assert!(handle.verify(black_box(input.as_bytes()), &sig_bytes)))
    });

    let req = request(alloc);
    g.bench_function("workload-identity issue", |b| {
        b.iter(|| issuer.issue(black_box(&req), now).unwrap())
    });
    g.bench_function("workload-identity verify (memory store)", |b| {
        b.iter(|| verifier.verify(black_box(&token), now).unwrap())
    });

    let many = Verifier::builder(keyring(999), store.clone(), audience.clone()).build();
    many.verify(&token, now).unwrap();
    g.bench_function("workload-identity verify, 1000 keys", |b| {
        b.iter(|| many.verify(black_box(&token), now).unwrap())
    });

    let cached = Verifier::builder(kr.clone(), store.clone(), audience.clone())
        .cache(1024)
        .build();
    cached.verify(&token, now).unwrap();
    g.bench_function("workload-identity verify, cache hit", |b| {
        b.iter(|| cached.verify(black_box(&token), now).unwrap())
    });

    let tokens: Vec<String> = (0..64)
        .map(|_| issuer.issue(&req, now).unwrap().token)
        .collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    g.throughput(Throughput::Elements(64));
    g.bench_function("workload-identity verify_batch 64", |b| {
        b.iter(|| {
            let r = verifier.verify_batch(black_box(&refs), now);
            assert!(r.iter().all(Result::is_ok));
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
