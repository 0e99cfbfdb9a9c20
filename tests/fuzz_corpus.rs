//! The committed fuzz corpora (`fuzz/corpus/<target>/`) replay as a plain test,
//! through the same entry points the fuzz targets use: an input that once
//! crashed a target and was added to its corpus stays fixed.

use workload_identity::fuzzing;

#[test]
fn every_corpus_input_replays_cleanly() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus"));
    let counts = fuzzing::replay_corpora(root).unwrap();
    assert_eq!(counts.len(), 9);
    for (name, n) in counts {
        assert!(n > 0, "fuzz/corpus/{name} has no seed inputs");
    }
}

#[test]
fn the_structure_aware_verify_seeds_reach_acceptance() {
    // The signed-payload seed is a fully valid token for the fuzz world: the
    // target really exercises the accepting path, not only rejections.
    let seed = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus/verify/signed-payload"
    ))
    .unwrap();
    assert_eq!(seed[0], 0);
    assert!(
        fuzzing::verify(&seed),
        "the signed-payload seed is accepted"
    );
    // Tokens with extra claims (EdDSA) and a SPIFFE JWT-SVID with them
    // (ES256) take the claims scan and are accepted.
    for name in ["signed-payload-extra-claims", "signed-payload-spiffe-es256"] {
        let seed = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fuzz/corpus/verify")
                .join(name),
        )
        .unwrap();
        let claims: workload_identity::Claims = serde_json::from_slice(&seed[1..]).unwrap();
        assert!(!claims.extra_claims.is_empty(), "{name}");
        assert!(fuzzing::verify(&seed), "{name} is accepted");
    }
    let fixed = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus/verify/fixed-token"
    ))
    .unwrap();
    assert!(
        !fuzzing::verify(&fixed),
        "a token of a key the fuzz world lacks is rejected"
    );
}

#[test]
fn the_new_input_shapes_reach_their_checks() {
    let read =
        |p: &str| std::fs::read(format!("{}/fuzz/corpus/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    // A keystore whose active key lost its material: refused by name, not loaded.
    let e =
        workload_identity::Keyring::from_keystore_bytes(&read("keystore_load/verify-only-active"))
            .unwrap_err();
    assert!(e.to_string().contains("no private material"), "{e}");
    // Extreme time claims in a signed token reach verify, the batch, the
    // cache and explain (which once overflowed on them), all agreeing.
    assert!(fuzzing::verify(&read(
        "verify/signed-payload-extreme-times"
    )));
    assert!(!fuzzing::verify(&read(
        "verify/signed-payload-extreme-exp-past"
    )));
    // A kid one character past the longest key ID: refused, not truncated.
    for seed in [
        "verify/signed-header-kid-overlong",
        "verify/signed-header-kid-empty",
    ] {
        assert!(!fuzzing::verify(&read(seed)), "{seed}");
    }
}

#[test]
fn the_es256_and_rs256_seeds_reach_acceptance_and_confusion_is_refused() {
    let read =
        |p: &str| std::fs::read(format!("{}/fuzz/corpus/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for seed in ["verify/signed-payload-es256", "verify/signed-payload-rs256"] {
        assert!(fuzzing::verify(&read(seed)), "{seed} is accepted");
    }
    // An RS256 key's kid under an ES256 header, signed by the RS256 key.
    assert!(!fuzzing::verify(&read(
        "verify/signed-header-rs256-as-es256"
    )));
    // verify_algorithms checks its own invariant (acceptance only for the
    // kid's algorithm and key); every seed runs it.
    for seed in [
        "ed-ok",
        "es-ok",
        "rs-ok",
        "rs-key-es-header",
        "hs256",
        "none",
    ] {
        fuzzing::verify_algorithms(&read(&format!("verify_algorithms/{seed}")));
    }
    // The verify-only algorithms: each one's seed is accepted under its own
    // kid; every near miss (PS/RS on the one modulus the world publishes
    // under six algorithms, another curve's key, DER, HS384, none) is not.
    for seed in [
        "es384-ok", "es512-ok", "ps256-ok", "ps384-ok", "ps512-ok", "rs384-ok", "rs512-ok",
    ] {
        assert!(
            fuzzing::verify_algorithms(&read(&format!("verify_algorithms/{seed}"))),
            "{seed} is accepted"
        );
    }
    for seed in [
        "ps256-key-rs256-header-same-modulus",
        "rs256-key-ps256-header",
        "ps256-key-pkcs1-signature",
        "rs384-key-pss-signature",
        "es384-header-p256-key",
        "es512-header-p384-key",
        "es384-der",
        "es512-der",
        "ps384-header-ps256-key",
        "hs384-ps256-key",
        "none-es384-key",
    ] {
        assert!(
            !fuzzing::verify_algorithms(&read(&format!("verify_algorithms/{seed}"))),
            "{seed} is refused"
        );
    }
    // The seeds of the keystore and JWKS targets load all three algorithms.
    let kr =
        workload_identity::Keyring::from_keystore_bytes(&read("keystore_load/three-algorithms"))
            .unwrap();
    assert_eq!(kr.algorithms().len(), 3);
    let text = String::from_utf8(read("jwks_import/three-algorithms")).unwrap();
    let (kr, report) = workload_identity::Keyring::from_jwks(&text).unwrap();
    assert_eq!((report.imported.len(), kr.algorithms().len()), (3, 3));
}

#[test]
fn the_verify_proof_seeds_reach_acceptance_and_near_misses_are_refused() {
    // Each seed, fresh and as committed, gets its verdict: the genuine proofs
    // in every input shape are accepted (so the target reaches the accepting
    // path and its genuineness checks), the near misses refused. The WITs are
    // fixed, so a committed WPT keeps its wth; `WID_BLESS=1` rewrites the
    // seeds after a deliberate change to them.
    let seeds = fuzzing::verify_proof_seeds();
    assert!(seeds.iter().filter(|(_, _, ok)| *ok).count() >= 8);
    assert!(seeds.iter().filter(|(_, _, ok)| !*ok).count() >= 6);
    check_seeds("verify_proof", seeds, fuzzing::verify_proof);
}

/// Each seed, fresh and as committed under `fuzz/corpus/<target>/`, gets its
/// verdict from `run`; `WID_BLESS=1` writes the fresh ones first.
fn check_seeds(target: &str, seeds: Vec<(&str, Vec<u8>, bool)>, run: fn(&[u8]) -> bool) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let bless = std::env::var_os("WID_BLESS").is_some();
    for (name, fresh, verdict) in seeds {
        assert!(!fresh.is_empty(), "{name}");
        assert_eq!(run(&fresh), verdict, "fresh seed {name}");
        let path = dir.join(name);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &fresh).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; `WID_BLESS=1 cargo test --features fuzzing --test fuzz_corpus` writes it",
                path.display()
            )
        });
        assert_eq!(
            run(&committed),
            verdict,
            "committed seed {name} (stale? WID_BLESS=1 rewrites it)"
        );
    }
}

#[test]
fn every_one_bit_change_of_a_genuine_proof_is_refused() {
    // Shape 0: the rest is the WPT for the EdDSA workload key's WIT. The
    // genuine proof passes; flipping any one bit of it (header, claims,
    // signature, the dots) never does.
    let seeds = fuzzing::verify_proof_seeds();
    let (_, seed, _) = seeds
        .iter()
        .find(|(name, _, _)| *name == "wpt-eddsa")
        .unwrap();
    assert!(fuzzing::verify_proof(seed));
    let mut accepted = Vec::new();
    for i in 1..seed.len() {
        for bit in [0x01, 0x20] {
            let mut m = seed.clone();
            m[i] ^= bit;
            if fuzzing::verify_proof(&m) {
                accepted.push((i, bit));
            }
        }
    }
    assert!(accepted.is_empty(), "accepted after flipping {accepted:?}");
}

#[test]
fn the_wrapped_keystore_seeds_get_their_verdicts() {
    // A keystore wrapped by the fuzz KEK loads; one wrapped by another KEK,
    // one with a wrapped key changed (checksum made right) and a plaintext
    // one do not.
    let seeds = fuzzing::keystore_wrapped_seeds();
    assert_eq!(seeds.len(), 4);
    check_seeds("keystore_wrapped", seeds, fuzzing::keystore_wrapped);
}
