//! The committed fuzz corpora (`fuzz/corpus/<target>/`) replay as a plain test,
//! through the same entry points the fuzz targets use: an input that once
//! crashed a target and was added to its corpus stays fixed.

use workload_identity::fuzzing;

#[test]
fn every_corpus_input_replays_cleanly() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus"));
    let counts = fuzzing::replay_corpora(root).unwrap();
    assert_eq!(counts.len(), 8);
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
    // The seeds of the keystore and JWKS targets load all three algorithms.
    let kr =
        workload_identity::Keyring::from_keystore_bytes(&read("keystore_load/three-algorithms"))
            .unwrap();
    assert_eq!(kr.algorithms().len(), 3);
    let text = String::from_utf8(read("jwks_import/three-algorithms")).unwrap();
    let (kr, report) = workload_identity::Keyring::from_jwks(&text).unwrap();
    assert_eq!((report.imported.len(), kr.algorithms().len()), (3, 3));
}
