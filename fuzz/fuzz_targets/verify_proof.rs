//! Fuzz target `verify_proof`: see `workload_identity::fuzzing::verify_proof`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _accepted = workload_identity::fuzzing::verify_proof(data);
});
