//! Instruction counts of the C path (repeatable, unlike wall time on a shared
//! machine): `c_instructions <row> <calls>` runs one row's operation `calls`
//! times after the same setup, in `measured`; `scripts/bench-instructions.sh`
//! counts the instructions in that function under valgrind and divides them
//! by the calls, beside the library's rows (examples/instructions.rs in the
//! repository root).
//!
//! Rows: `ffi_verify` (`wid_verify` through its Rust definition, no claims
//! out, the lookup callback answering "live") and `verify` (the native call
//! on the same token, for the difference); `ffi_issue` (`wid_issue` of the
//! committed Go-encoded task request, which decodes the msgpack and builds
//! an `Issuer` per call, and frees the token), `ffi_native_issue` (the
//! native `Issuer::issue` of the same request, decoded once) and
//! `ffi_raw_sign` (the bare Ed25519 signature of that token's signing input
//! with aws-lc-rs, as the issuer signs: the floor under both).
use std::hint::black_box;

#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let row = args.get(1).map(String::as_str).unwrap_or("ffi_verify");
    let calls: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100);
    let now = 1_700_000_000;
    let material = [7; 32];
    let (verifier, token) = common::live::native_verifier_and_token("k", &material, now);
    let ffi_verifier = common::live::ffi_live_verifier("k", &material);
    let ffi_verify = |token: &str| unsafe {
        workload_identity_ffi::wid_verify(
            ffi_verifier,
            token.as_ptr().cast(),
            token.len(),
            now,
            std::ptr::null_mut(),
        )
    };
    // Issuing: the same key through the C ABI and natively.
    let request = common::request::task_vector();
    let decoded: workload_identity::model::IssueRequest =
        workload_identity::codec::decode(&request).unwrap();
    let ffi_keyring = common::live::ffi_keyring("k", &material);
    let issuer = workload_identity::Issuer::new(common::live::native_keyring("k", &material));
    let ffi_issue = || unsafe {
        let mut out = workload_identity_ffi::wid_bytes {
            data: std::ptr::null_mut(),
            len: 0,
        };
        let rc = workload_identity_ffi::wid_issue(
            ffi_keyring,
            request.as_ptr(),
            request.len(),
            now,
            &mut out,
        );
        assert_eq!(rc, 0);
        workload_identity_ffi::wid_bytes_free(&mut out);
    };
    let issued = issuer.issue(&decoded, now).unwrap().token;
    let input = issued.rsplit_once('.').unwrap().0.to_owned();
    let pair = aws_lc_rs::signature::Ed25519KeyPair::from_seed_unchecked(&material).unwrap();
    // Both keyrings' tables are built before counting.
    verifier.verify(&token, now).unwrap();
    assert_eq!(ffi_verify(&token), 0);
    ffi_issue();
    measured(calls, &mut || match row {
        "ffi_verify" => assert_eq!(ffi_verify(black_box(&token)), 0),
        "verify" => drop(verifier.verify(black_box(&token), now).unwrap()),
        "ffi_issue" => ffi_issue(),
        "ffi_native_issue" => drop(issuer.issue(black_box(&decoded), now).unwrap()),
        "ffi_raw_sign" => drop(black_box(pair.sign(black_box(input.as_bytes())))),
        other => panic!(
            "unknown row {other}: ffi_verify, verify, ffi_issue, ffi_native_issue or ffi_raw_sign"
        ),
    });
    unsafe {
        workload_identity_ffi::wid_verifier_free(ffi_verifier);
        workload_identity_ffi::wid_keyring_free(ffi_keyring);
    }
}

/// The measured calls: `scripts/bench-instructions.sh` counts the
/// instructions inside this function alone (callgrind's `--toggle-collect`),
/// so the setup never enters a row, whatever it costs: aws-lc's entropy
/// collection for the ECDSA keys varies by up to a million instructions
/// from one process to the next, ten thousand a call at 100 calls.
#[inline(never)]
fn measured(calls: usize, op: &mut dyn FnMut()) {
    for _ in 0..calls {
        op();
    }
}
