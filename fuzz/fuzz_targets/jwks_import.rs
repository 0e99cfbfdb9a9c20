//! Fuzz target `jwks_import`: see `workload_identity::fuzzing::jwks_import`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::jwks_import(data);
});
