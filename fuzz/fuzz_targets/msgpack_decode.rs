//! Fuzz target `msgpack_decode`: see `workload_identity::fuzzing::msgpack_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    workload_identity::fuzzing::msgpack_decode(data);
});
