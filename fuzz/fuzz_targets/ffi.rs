//! Fuzz target `ffi`: see `workload_identity_ffi::fuzzing::ffi`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity_ffi::fuzzing::ffi(data);
});
