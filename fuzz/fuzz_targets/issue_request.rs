//! Fuzz target `issue_request`: see `workload_identity::fuzzing::issue_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::issue_request(data);
});
