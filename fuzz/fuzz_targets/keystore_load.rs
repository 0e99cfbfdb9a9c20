//! Fuzz target `keystore_load`: see `workload_identity::fuzzing::keystore_load`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::keystore_load(data);
});
