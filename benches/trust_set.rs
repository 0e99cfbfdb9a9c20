//! A trust set beside a plain verifier, on the same token, keys and rules.
//!
//! `cargo bench --bench trust_set`
//!
//! Rows, each for a plain `Verifier` (requiring the token's `iss`) and for a
//! `TrustSet` of 1 and of 8 issuers (the token's is in the middle, the others
//! have keys of their own): `verify`, a cache hit, and `verify_batch` of 64
//! (per token). The difference is the routing: one strict parse whose claims
//! the chosen verifier reuses, and a map look-up; on a cache hit, one probe
//! per issuer's cache.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use workload_identity::{
    Audience, Issuer, IssuerId, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, MemoryStore,
    RootKey, TrustSet, TrustedIssuer, Verifier,
};

#[path = "../tests/common/mod.rs"]
mod common;

const ISS: &str = "https://nomad.example";

fn keyring(material: u8) -> Keyring {
    Keyring::from_keys([RootKey::new(
        KeyId::new(&format!("key-{material}")).unwrap(),
        KeyMaterial::from_slice(&[material; 32]).unwrap(),
        KeyDerivation::HkdfV1,
        KeyState::Active,
        0,
    )])
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let now = workload_identity::unix_now();
    let req = common::issue_request_task();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&req.allocation);
    let aud = Audience::new("vault.io").unwrap();
    let kr = keyring(7);
    let issuer = Issuer::new(kr.clone()).issuer(ISS);
    let token = issuer.issue(&req, now).unwrap().token;
    let tokens: Vec<String> = (0..64)
        .map(|_| issuer.issue(&req, now).unwrap().token)
        .collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();

    let plain = |cache: bool| {
        let b = Verifier::builder(kr.clone(), store.clone(), aud.clone()).issuer(ISS);
        if cache { b.cache(1024) } else { b }.build()
    };
    let trust = |issuers: usize, cache: bool| {
        let mut b = TrustSet::builder();
        for i in 0..issuers {
            let (name, keys) = if i == issuers / 2 {
                (ISS.to_string(), kr.clone())
            } else {
                (format!("https://other-{i}.example"), keyring(100 + i as u8))
            };
            b = b.issuer(TrustedIssuer::nomad(
                IssuerId::iss(&name).unwrap(),
                keys,
                store.clone(),
                aud.clone(),
            ));
        }
        if cache { b.cache(1024) } else { b }.build().unwrap()
    };

    let mut g = c.benchmark_group("trust set");
    let v = plain(false);
    v.verify(&token, now).unwrap();
    g.bench_function("Verifier verify", |b| {
        b.iter(|| v.verify(black_box(&token), now).unwrap())
    });
    for n in [1, 8] {
        let t = trust(n, false);
        t.verify(&token, now).unwrap();
        g.bench_function(format!("TrustSet({n}) verify"), |b| {
            b.iter(|| t.verify(black_box(&token), now).unwrap())
        });
    }
    let v = plain(true);
    v.verify(&token, now).unwrap();
    g.bench_function("Verifier cache hit", |b| {
        b.iter(|| v.verify(black_box(&token), now).unwrap())
    });
    for n in [1, 8] {
        let t = trust(n, true);
        t.verify(&token, now).unwrap();
        g.bench_function(format!("TrustSet({n}) cache hit"), |b| {
            b.iter(|| t.verify(black_box(&token), now).unwrap())
        });
    }
    g.throughput(Throughput::Elements(64));
    let v = plain(false);
    g.bench_function("Verifier verify_batch 64", |b| {
        b.iter(|| {
            assert!(
                v.verify_batch(black_box(&refs), now)
                    .iter()
                    .all(Result::is_ok)
            )
        })
    });
    let t = trust(8, false);
    g.bench_function("TrustSet(8) verify_batch 64", |b| {
        b.iter(|| {
            assert!(
                t.verify_batch(black_box(&refs), now)
                    .iter()
                    .all(Result::is_ok)
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
