//! Proof of possession (issue 17) beside a single bearer-token verification,
//! in one group, on the same keyring, store and claims.
//!
//! `cargo bench --bench proof`
//!
//! Rows: `bearer verify` (one EdDSA token through the whole pipeline, memory
//! store, as in benches/identity.rs); `verify_proof` of an EdDSA-signed WIT
//! with an EdDSA and with an ES256 workload key (WIT signature and pipeline,
//! WPT parse, `cnf.jwk` key lookup, WPT signature, claims, `wth`, replay
//! record); `WorkloadKey::prove` (EdDSA and ES256). Every `verify_proof`
//! iteration checks a fresh WPT: a `jti` is accepted once, so the proofs are
//! minted in `iter_batched`'s setup, which is not timed. The replay cache has
//! room for every proof of the run (each iteration adds one entry to it).
//!
//! Then the pieces of a proof verification that the public API exposes, to
//! see where the time goes: the WPT's raw signature check (ed25519-dalek
//! `verify_strict`, aws-lc-rs ECDSA with the key parsed once), the `wth` hash
//! (SHA-256 of the WIT, base64url), and `verify_proof` with a WPT that fails
//! its very first check (the WIT's cost, with the WPT's parse).
//!
//! One run's ratios depend on the process's memory layout: address-space
//! randomization moves the verify rows by up to 20 % from one run to the
//! next, each run steady within itself. BENCHMARKS.md records the median of
//! five runs.

use std::hint::black_box;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use sha2::{Digest, Sha256};
use workload_identity::model::IssueRequest;
use workload_identity::{
    Algorithm, Audience, Issuer, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, MemoryStore,
    ProofOptions, ProofRequest, ResultCode, RootKey, Verifier, WorkloadKey, unix_now,
};

#[path = "../tests/common/mod.rs"]
mod common;

const MATERIAL: [u8; 32] = [7; 32];
const TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";

/// The keyring of benches/identity.rs (one active EdDSA key, Nomad-style raw
/// seed), and an EdDSA WIT key beside it: WITs are signed only by WIT keys.
fn keyring() -> Keyring {
    Keyring::from_keys([
        RootKey::new(
            KeyId::new("bench-key").unwrap(),
            KeyMaterial::from_slice(&MATERIAL).unwrap(),
            KeyDerivation::NomadRawSeed,
            KeyState::Active,
            0,
        ),
        RootKey::new(
            KeyId::new("bench-wit-key").unwrap(),
            KeyMaterial::from_slice(&MATERIAL).unwrap(),
            KeyDerivation::NomadRawSeed,
            KeyState::Active,
            0,
        )
        .with_purpose(workload_identity::KeyPurpose::Wit),
    ])
    .unwrap()
}

fn request(proof_key: Option<&WorkloadKey>) -> IssueRequest {
    let mut req = common::issue_request_task();
    req.proof_key = proof_key.map(|k| k.proof_key().clone());
    req
}

fn bench(c: &mut Criterion) {
    let now = unix_now();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let kr = keyring();
    let issuer = Issuer::new(kr.clone())
        .issuer("https://nomad.example.com")
        .trust_domain("nomad.example.com")
        .unwrap();
    let verifier = Verifier::builder(
        kr.clone(),
        store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .issuer("https://nomad.example.com")
    // Room for every proof the run verifies: each stays remembered (the
    // clock does not move), and a full cache would refuse proofs. One
    // workload key may hold 1/64 of it, and each row proves with one key:
    // 31 million proofs each, far more than a row's iterations.
    .proof_replay_capacity(2_000_000_000)
    .build();
    let bearer = issuer.issue(&request(None), now).unwrap().token;
    verifier.verify(&bearer, now).unwrap();

    let ed_key = WorkloadKey::generate(Algorithm::EdDsa).unwrap();
    let es_key = WorkloadKey::generate(Algorithm::Es256).unwrap();
    let ed_wit = issuer
        .issue_with(Algorithm::EdDsa, &request(Some(&ed_key)), now)
        .unwrap()
        .token;
    let es_wit = issuer
        .issue_with(Algorithm::EdDsa, &request(Some(&es_key)), now)
        .unwrap()
        .token;
    let req = ProofRequest::new(TARGET);
    let opts = ProofOptions::new();
    for (key, wit) in [(&ed_key, &ed_wit), (&es_key, &es_wit)] {
        // Each is accepted once, then refused as replayed; a WIT is no bearer token.
        let wpt = key.prove(wit, TARGET, now, &opts).unwrap();
        verifier.verify_proof(wit, &wpt, &req, now).unwrap();
        let again = verifier.verify_proof(wit, &wpt, &req, now).unwrap_err();
        assert_eq!(again.code(), ResultCode::ProofReplayed);
        let e = verifier.verify(wit, now).unwrap_err();
        assert_eq!(e.code(), ResultCode::ProofRequired);
    }

    let mut g = c.benchmark_group("proof");
    g.bench_function("bearer verify (EdDSA, memory store)", |b| {
        b.iter(|| verifier.verify(black_box(&bearer), now).unwrap())
    });
    for (label, key, wit) in [
        ("EdDSA WIT, EdDSA key", &ed_key, &ed_wit),
        ("EdDSA WIT, ES256 key", &es_key, &es_wit),
    ] {
        g.bench_function(format!("verify_proof ({label}, fresh WPT)"), |b| {
            b.iter_batched(
                || key.prove(wit, TARGET, now, &opts).unwrap(),
                |wpt| {
                    verifier
                        .verify_proof(black_box(wit), black_box(&wpt), &req, now)
                        .unwrap()
                },
                BatchSize::SmallInput,
            )
        });
    }
    // The manager's normal case: a fresh workload key (and WIT) at every
    // renewal, so a key's first proofs are most of them. Key, WIT and WPT are
    // made in the untimed setup; the timed call checks the new key and the
    // proof (no Ed25519 table is built for a proof key until it is hot).
    for alg in [Algorithm::EdDsa, Algorithm::Es256] {
        g.bench_function(
            format!("verify_proof (EdDSA WIT, first proof of a new {alg} key)"),
            |b| {
                b.iter_batched(
                    || {
                        let key = WorkloadKey::generate(alg).unwrap();
                        let wit = issuer
                            .issue_with(Algorithm::EdDsa, &request(Some(&key)), now)
                            .unwrap()
                            .token;
                        let wpt = key.prove(&wit, TARGET, now, &opts).unwrap();
                        (wit, wpt)
                    },
                    |(wit, wpt)| {
                        verifier
                            .verify_proof(black_box(&wit), black_box(&wpt), &req, now)
                            .unwrap()
                    },
                    BatchSize::SmallInput,
                )
            },
        );
    }
    for (label, key, wit) in [("EdDSA", &ed_key, &ed_wit), ("ES256", &es_key, &es_wit)] {
        g.bench_function(format!("WorkloadKey::prove ({label})"), |b| {
            b.iter(|| key.prove(black_box(wit), TARGET, now, &opts).unwrap())
        });
    }

    // The pieces.
    let ed_wpt = ed_key.prove(&ed_wit, TARGET, now, &opts).unwrap();
    let (input, sig) = ed_wpt.rsplit_once('.').unwrap();
    let sig: [u8; 64] = B64.decode(sig).unwrap().try_into().unwrap();
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    let x: [u8; 32] = B64
        .decode(&ed_key.proof_key().x)
        .unwrap()
        .try_into()
        .unwrap();
    let vk = ed25519_dalek::VerifyingKey::from_bytes(&x).unwrap();
    vk.verify_strict(input.as_bytes(), &sig).unwrap();
    g.bench_function(
        "piece: WPT signature, raw ed25519-dalek verify_strict",
        |b| b.iter(|| vk.verify_strict(black_box(input.as_bytes()), black_box(&sig))),
    );
    let es_wpt = es_key.prove(&es_wit, TARGET, now, &opts).unwrap();
    let (es_input, es_sig) = es_wpt.rsplit_once('.').unwrap();
    let es_sig = B64.decode(es_sig).unwrap();
    let pk = es_key.proof_key();
    let point = [
        &[4u8][..],
        &B64.decode(&pk.x).unwrap(),
        &B64.decode(&pk.y).unwrap(),
    ]
    .concat();
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, ParsedPublicKey};
    let parsed = ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point).unwrap();
    parsed.verify_sig(es_input.as_bytes(), &es_sig).unwrap();
    g.bench_function(
        "piece: WPT signature, raw aws-lc-rs ES256 (parsed key)",
        |b| {
            b.iter(|| {
                parsed
                    .verify_sig(black_box(es_input.as_bytes()), black_box(&es_sig))
                    .unwrap()
            })
        },
    );
    g.bench_function("piece: wth, SHA-256 of the WIT + base64url", |b| {
        b.iter(|| B64.encode(Sha256::digest(black_box(ed_wit.as_bytes()))))
    });
    // A WPT whose alg is not the cnf.jwk's: refused right after the WIT is
    // verified and the WPT parsed, before any key lookup or signature.
    let wrong_alg = es_key.prove(&ed_wit, TARGET, now, &opts).unwrap();
    let e = verifier
        .verify_proof(&ed_wit, &wrong_alg, &req, now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::ProofInvalid);
    assert!(e.to_string().contains("alg"), "{e}");
    g.bench_function(
        "piece: verify_proof up to the WPT's alg (WIT pipeline + WPT parse)",
        |b| {
            b.iter(|| {
                verifier
                    .verify_proof(black_box(&ed_wit), black_box(&wrong_alg), &req, now)
                    .unwrap_err()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
