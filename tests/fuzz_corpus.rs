//! The committed fuzz corpora (`fuzz/corpus/<target>/`) replay as a plain test,
//! through the same entry points the fuzz targets use: an input that once
//! crashed a target and was added to its corpus stays fixed.

use workload_identity::fuzzing;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 7] = [
    ("jwt_decode", fuzzing::jwt_decode),
    ("verify", |d| {
        fuzzing::verify(d);
    }),
    ("msgpack_decode", fuzzing::msgpack_decode),
    ("jwks_import", fuzzing::jwks_import),
    ("keystore_load", fuzzing::keystore_load),
    ("issue_request", fuzzing::issue_request),
    ("ffi", fuzzing::ffi),
];

#[test]
fn every_corpus_input_replays_cleanly() {
    for (name, target) in TARGETS {
        let dir = format!("{}/fuzz/corpus/{name}", env!("CARGO_MANIFEST_DIR"));
        let mut inputs = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            target(&data);
            // Truncations too: cheap extra coverage of every early exit.
            for cut in [
                0,
                data.len() / 3,
                data.len() / 2,
                data.len().saturating_sub(1),
            ] {
                target(&data[..cut]);
            }
            inputs += 1;
        }
        assert!(inputs > 0, "{dir} has no seed inputs");
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
