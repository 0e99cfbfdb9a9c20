//! Fuzz target `jwt_decode`: see `workload_identity::fuzzing::jwt_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::jwt_decode(data);
});
