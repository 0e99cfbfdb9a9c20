//! Fuzz target `verify`: see `workload_identity::fuzzing::verify`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _accepted = workload_identity::fuzzing::verify(data);
});
