//! Instruction counts (repeatable, unlike wall time on a shared machine) for the
//! speed targets: `instructions <row> <calls>` runs one row's operation `calls`
//! times after the same setup, in [`measured`]; `scripts/bench-instructions.sh`
//! counts the instructions in that function under valgrind and divides them
//! by the calls.
use std::hint::black_box;
use std::sync::Arc;

use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey};
use workload_identity::{Algorithm, KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

use workload_identity::{
    Audience, Issuer, IssuerId, Keyring, MemoryStore, TrustSet, TrustedIssuer, Verifier,
};

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let row = args.get(1).map(String::as_str).unwrap_or("verify");
    let calls: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100);
    let rsa_pkcs8 = common::RSA_PKCS8;
    let kr = Keyring::from_keys([
        RootKey::new(
            KeyId::new("k").unwrap(),
            KeyMaterial::from_slice(&[7; 32]).unwrap(),
            KeyDerivation::NomadRawSeed,
            KeyState::Active,
            0,
        ),
        common::alg_key(Algorithm::Es256, "es", 7, KeyState::Active, 0),
        common::alg_key(Algorithm::Rs256, "rs", 7, KeyState::Active, 0),
    ])
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    let req = common::issue_request_task();
    store.upsert(&req.allocation);
    let now = 1_700_000_000;
    let issuer = Issuer::new(kr.clone());
    let verifier = Verifier::builder(
        kr.clone(),
        store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .build();
    let cached = Verifier::builder(
        kr.clone(),
        store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .cache(16)
    .build();
    // The same token with an iss, through a Verifier that requires it and
    // through trust sets of one, three and eight issuers.
    let iss = "https://nomad.example";
    let iss_token = Issuer::new(kr.clone())
        .issuer(iss)
        .issue(&req, now)
        .unwrap()
        .token;
    let iss_verifier = |cache: bool| {
        let b = Verifier::builder(
            kr.clone(),
            store.clone(),
            Audience::new("vault.io").unwrap(),
        )
        .issuer(iss);
        if cache { b.cache(16) } else { b }.build()
    };
    // A trust set of `n` issuers, the token's in the middle, the others
    // with keys of their own.
    let trust_set = |n: usize, cache: bool| {
        let issuer = |name: &str, keys: Keyring| {
            TrustedIssuer::nomad(
                IssuerId::iss(name).unwrap(),
                keys,
                store.clone(),
                Audience::new("vault.io").unwrap(),
            )
        };
        let other = Keyring::new();
        other.rotate(now).unwrap();
        let mut b = TrustSet::builder();
        for i in 0..n {
            b = if i == n / 2 {
                b.issuer(issuer(iss, kr.clone()))
            } else {
                b.issuer(issuer(&format!("https://other{i}.example"), other.clone()))
            };
        }
        if cache { b.cache(16) } else { b }.build().unwrap()
    };
    let (iss_plain, iss_cached) = (iss_verifier(false), iss_verifier(true));
    let (trust, trust_cached) = (trust_set(3, false), trust_set(3, true));
    let (trust1_cached, trust8_cached) = (trust_set(1, true), trust_set(8, true));
    for v in [&iss_plain, &iss_cached] {
        v.verify(&iss_token, now).unwrap();
    }
    for t in [&trust, &trust_cached, &trust1_cached, &trust8_cached] {
        t.verify(&iss_token, now).unwrap();
    }
    let iss_tokens: Vec<String> = (0..64)
        .map(|_| {
            Issuer::new(kr.clone())
                .issuer(iss)
                .issue(&req, now)
                .unwrap()
                .token
        })
        .collect();
    let iss_refs: Vec<&str> = iss_tokens.iter().map(String::as_str).collect();
    let token = issuer.issue(&req, now).unwrap().token;
    let (input, sig) = token.rsplit_once('.').unwrap();
    let sig: [u8; 64] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sig)
        .unwrap()
        .try_into()
        .unwrap();
    let sig = Signature::from_bytes(&sig);
    let sk = SigningKey::from_bytes(&[7; 32]);
    // Ed25519 as the issuer signs, with aws-lc-rs (the same seed, so the
    // same signatures as ed25519-dalek's `sk`).
    let ed_pair = aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(&[7; 32]).unwrap();
    let vk = sk.verifying_key();
    // Warm up lazily built tables outside the measured calls.
    verifier.verify(&token, now).unwrap();
    cached.verify(&token, now).unwrap();
    let tokens: Vec<String> = (0..64)
        .map(|_| issuer.issue(&req, now).unwrap().token)
        .collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    // ES256 and RS256: our issue and verify, and the raw aws-lc-rs operations
    // on the same signing input (the key parsed once, its fastest form).
    let alg_rows = |alg: Algorithm| {
        let token = issuer.issue_with(alg, &req, now).unwrap().token;
        verifier.verify(&token, now).unwrap();
        let (input, sig) = token.rsplit_once('.').unwrap();
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sig)
            .unwrap();
        (token.clone(), input.as_bytes().to_vec(), sig)
    };
    let (es_token, es_input, es_sig) = alg_rows(Algorithm::Es256);
    let (rs_token, rs_input, rs_sig) = alg_rows(Algorithm::Rs256);
    let rng = aws_lc_rs::rand::SystemRandom::new();
    use aws_lc_rs::signature::{self as lc, KeyPair as _};
    let es_pair = lc::EcdsaKeyPair::from_pkcs8(
        &lc::ECDSA_P256_SHA256_FIXED_SIGNING,
        lc::EcdsaKeyPair::generate_pkcs8(&lc::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap()
            .as_ref(),
    )
    .unwrap();
    let es_public = match kr.key_info("es").unwrap().public_key {
        workload_identity::PublicKey::P256 { x, y } => [&[4u8][..], &x, &y].concat(),
        _ => unreachable!("an ES256 key"),
    };
    let es_parsed = lc::ParsedPublicKey::new(&lc::ECDSA_P256_SHA256_FIXED, es_public).unwrap();
    let rs_pair = lc::RsaKeyPair::from_pkcs8(rsa_pkcs8).unwrap();
    let rs_parsed = lc::ParsedPublicKey::new(
        &lc::RSA_PKCS1_2048_8192_SHA256,
        rs_pair.public_key().as_ref(),
    )
    .unwrap();
    measured(calls, &mut || {
        match row {
            "verify_strict" => vk
                .verify_strict(black_box(input.as_bytes()), black_box(&sig))
                .unwrap(),
            "sign" => drop(black_box(sk.sign(black_box(input.as_bytes())))),
            "ed_raw_sign" => drop(black_box(ed_pair.sign(black_box(input.as_bytes())))),
            "verify" => drop(verifier.verify(black_box(&token), now).unwrap()),
            "issue" => drop(issuer.issue(black_box(&req), now).unwrap()),
            "cache_hit" => drop(cached.verify(black_box(&token), now).unwrap()),
            // One call here is a batch of 64: the script divides by 64 more.
            "batch64" => assert!(
                verifier
                    .verify_batch(black_box(&refs), now)
                    .iter()
                    .all(Result::is_ok)
            ),
            "es256_raw_sign" => drop(black_box(es_pair.sign(&rng, black_box(&es_input)).unwrap())),
            "es256_raw_verify" => es_parsed.verify_sig(black_box(&es_input), &es_sig).unwrap(),
            "es256_issue" => drop(
                issuer
                    .issue_with(Algorithm::Es256, black_box(&req), now)
                    .unwrap(),
            ),
            "es256_verify" => drop(verifier.verify(black_box(&es_token), now).unwrap()),
            "rs256_raw_sign" => {
                let mut s = vec![0u8; rs_pair.public_modulus_len()];
                rs_pair
                    .sign(&lc::RSA_PKCS1_SHA256, &rng, black_box(&rs_input), &mut s)
                    .unwrap();
                drop(black_box(s))
            }
            "rs256_raw_verify" => rs_parsed.verify_sig(black_box(&rs_input), &rs_sig).unwrap(),
            "rs256_issue" => drop(
                issuer
                    .issue_with(Algorithm::Rs256, black_box(&req), now)
                    .unwrap(),
            ),
            "rs256_verify" => drop(verifier.verify(black_box(&rs_token), now).unwrap()),
            // A token with an iss: a Verifier requiring it, and a trust set
            // of three issuers routing to the same keys and rules.
            "iss_verify" => drop(iss_plain.verify(black_box(&iss_token), now).unwrap()),
            "trust_verify" => drop(trust.verify(black_box(&iss_token), now).unwrap()),
            "iss_cache_hit" => drop(iss_cached.verify(black_box(&iss_token), now).unwrap()),
            "trust_cache_hit" => drop(trust_cached.verify(black_box(&iss_token), now).unwrap()),
            // The same hit through trust sets of one and of eight issuers:
            // one index across issuers, so eight cost what one does.
            "trust1_cache_hit" => drop(trust1_cached.verify(black_box(&iss_token), now).unwrap()),
            "trust8_cache_hit" => drop(trust8_cached.verify(black_box(&iss_token), now).unwrap()),
            // Both on the same token in one process (compare the two
            // functions' inclusive counts under callgrind: a token's random
            // jti moves the EdDSA check's count from one process to another).
            "iss_and_trust" => {
                drop(iss_plain.verify(black_box(&iss_token), now).unwrap());
                drop(trust.verify(black_box(&iss_token), now).unwrap());
            }
            "iss_and_trust_cache_hit" => {
                drop(iss_cached.verify(black_box(&iss_token), now).unwrap());
                drop(trust_cached.verify(black_box(&iss_token), now).unwrap());
            }
            "iss_and_trust_batch64" => {
                assert!(
                    iss_plain
                        .verify_batch(black_box(&iss_refs), now)
                        .iter()
                        .all(Result::is_ok)
                );
                assert!(
                    trust
                        .verify_batch(black_box(&iss_refs), now)
                        .iter()
                        .all(Result::is_ok)
                );
            }
            // Batches of 64, like batch64 (divide by 64 more).
            "iss_batch64" => assert!(
                iss_plain
                    .verify_batch(black_box(&iss_refs), now)
                    .iter()
                    .all(Result::is_ok)
            ),
            "trust_batch64" => assert!(
                trust
                    .verify_batch(black_box(&iss_refs), now)
                    .iter()
                    .all(Result::is_ok)
            ),
            other => panic!("unknown row {other}"),
        }
    });
}

/// The measured calls: `scripts/bench-instructions.sh` counts the
/// instructions inside this function alone (callgrind's `--toggle-collect`),
/// so the setup never enters a row, whatever it costs: aws-lc's entropy
/// collection for the ECDSA keys varies by up to a million instructions
/// from one process to the next, ten thousand a call at 100 calls.
#[inline(never)]
fn measured(calls: usize, op: &mut dyn FnMut()) {
    for _ in 0..calls {
        op();
    }
}
