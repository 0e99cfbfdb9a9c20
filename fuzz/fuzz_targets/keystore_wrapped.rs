//! Fuzz target `keystore_wrapped`: see `workload_identity::fuzzing::keystore_wrapped`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::keystore_wrapped(data);
});
