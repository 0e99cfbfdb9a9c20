//! Fuzz target `verify_algorithms`: see `workload_identity::fuzzing::verify_algorithms`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::verify_algorithms(data);
});
