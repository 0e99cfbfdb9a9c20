//! Fuzz target `ffi`: see `workload_identity::fuzzing::ffi`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::ffi(data);
});
