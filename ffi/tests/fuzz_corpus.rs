//! The committed corpus of the `ffi` fuzz target (`fuzz/corpus/ffi/`) replays
//! as a plain test, through the entry point the fuzz target uses.

#[test]
fn every_ffi_corpus_input_replays_cleanly() {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/ffi"));
    let n = workload_identity::fuzzing::replay_corpus(dir, workload_identity_ffi::fuzzing::ffi)
        .unwrap();
    assert!(n > 0, "fuzz/corpus/ffi has no seed inputs");
}
