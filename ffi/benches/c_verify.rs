//! The C ABI's verify against the native call on the same token.
//!
//! `cargo bench -p workload-identity-ffi --bench c_verify`
//!
//! Rows: the library's `verify` (memory store), `wid_verify` through its Rust
//! `extern "C"` definition without claims out, and with the claims JSON
//! written and freed (the lookup callback answers "live").

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use workload_identity_ffi::{wid_bytes, wid_bytes_free, wid_verifier_free, wid_verify};

#[path = "../tests/common/mod.rs"]
mod common;

const MATERIAL: [u8; 32] = [7; 32];

fn bench(c: &mut Criterion) {
    let now = 1_700_000_000;
    let (verifier, token) = common::live::native_verifier_and_token("bench-key", &MATERIAL, now);
    let ffi_verifier = common::live::ffi_live_verifier("bench-key", &MATERIAL);
    let ffi_verify = |out: *mut wid_bytes| unsafe {
        wid_verify(ffi_verifier, token.as_ptr().cast(), token.len(), now, out)
    };
    assert_eq!(ffi_verify(std::ptr::null_mut()), 0);

    let mut g = c.benchmark_group("c_verify");
    g.bench_function("workload-identity verify", |b| {
        b.iter(|| verifier.verify(black_box(&token), now).unwrap())
    });
    g.bench_function("C ABI wid_verify (no claims out)", |b| {
        b.iter(|| assert_eq!(ffi_verify(std::ptr::null_mut()), 0))
    });
    g.bench_function("C ABI wid_verify (claims JSON out, freed)", |b| {
        b.iter(|| {
            let mut out = wid_bytes {
                data: std::ptr::null_mut(),
                len: 0,
            };
            assert_eq!(ffi_verify(&mut out), 0);
            unsafe { wid_bytes_free(&mut out) };
        })
    });
    g.finish();
    unsafe { wid_verifier_free(ffi_verifier) };
}

criterion_group!(benches, bench);
criterion_main!(benches);
