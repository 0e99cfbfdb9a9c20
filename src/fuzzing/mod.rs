//! Entry points shared by the fuzz targets (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! Each function takes arbitrary bytes, must never panic, hang or allocate
//! without bound, and checks an invariant where one exists (a decoded value
//! re-encodes to itself, an issued token verifies).

mod algorithms;
mod issue;
mod keystore;
mod proof;
mod tokens;
mod wire;
mod world;

pub use algorithms::verify_algorithms;
pub use issue::issue_request;
pub use keystore::{FUZZ_KEK, keystore_load, keystore_wrapped, keystore_wrapped_seeds};
pub use proof::{verify_proof, verify_proof_seeds};
pub use tokens::{jwt_decode, verify};
pub use wire::{jwks_import, msgpack_decode};

/// A fuzz target's entry point.
pub type Target = fn(&[u8]);

/// Every target of the library, by name (the names of the `fuzz/`
/// binaries); the C ABI's target, `ffi`, is the workload-identity-ffi
/// crate's (`workload_identity_ffi::fuzzing::ffi`).
pub const TARGETS: [(&str, Target); 9] = [
    ("jwt_decode", jwt_decode),
    ("verify", |d| {
        verify(d);
    }),
    ("verify_algorithms", |d| {
        verify_algorithms(d);
    }),
    ("msgpack_decode", msgpack_decode),
    ("jwks_import", jwks_import),
    ("keystore_load", keystore_load),
    ("issue_request", issue_request),
    ("verify_proof", |d| {
        verify_proof(d);
    }),
    ("keystore_wrapped", |d| {
        keystore_wrapped(d);
    }),
];

/// Replays every input of every target's corpus under `corpus_root`, with a few
/// truncations of each; returns the number of inputs per target.
pub fn replay_corpora(
    corpus_root: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, usize)>> {
    TARGETS
        .iter()
        .map(|(name, target)| Ok((*name, replay_corpus(&corpus_root.join(name), *target)?)))
        .collect()
}

/// Replays every input in `dir` (one target's corpus) through `target`, with
/// a few truncations of each; returns the number of inputs.
pub fn replay_corpus(dir: &std::path::Path, target: Target) -> std::io::Result<usize> {
    let mut inputs = 0;
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    for path in paths {
        let data = std::fs::read(&path)?;
        target(&data);
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
    Ok(inputs)
}
