//! Verifiers for the C ABI tests: a verifier builder over an allocation
//! lookup, verifiers built from it, a token verified (its result, or its
//! claims JSON) at `identity::NOW` or another time, and a verifier's stats.

use std::ffi::{c_char, c_void};
use std::ptr::null_mut;

use workload_identity_ffi::*;

use super::bytes::json_of;
use super::handles::made;
use super::identity::NOW;
use super::result::expect;

/// A verifier builder over `kr` for `aud`, asking `lookup` (with `userdata`)
/// about allocations.
pub fn builder(
    kr: *const wid_keyring,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
    aud: &str,
) -> *mut wid_verifier_builder {
    let (a, al) = (aud.as_ptr().cast(), aud.len());
    // SAFETY: the audience is valid for its length, `out` a valid output.
    made(|out| unsafe { wid_verifier_builder_new(kr, lookup, userdata, a, al, out) })
}

/// A verifier built from `b` (which stays usable).
pub fn build(b: *const wid_verifier_builder) -> *mut wid_verifier {
    // SAFETY: `out` is a valid output.
    made(|out| unsafe { wid_verifier_builder_build(b, out) })
}

/// `wid_verify` of `token` at `now`, without the claims.
pub fn verify_at(v: *const wid_verifier, token: &str, now: i64) -> wid_result {
    // SAFETY: the token is valid for its length; the claims output may be
    // NULL.
    unsafe { wid_verify(v, token.as_ptr().cast(), token.len(), now, null_mut()) }
}

/// [`verify_at`] `NOW`.
pub fn verify(v: *const wid_verifier, token: &str) -> wid_result {
    verify_at(v, token, NOW)
}

/// The claims of `token`, which must verify at `now`.
pub fn claims_at(v: *const wid_verifier, token: &str, now: i64) -> serde_json::Value {
    let (t, tl) = (token.as_ptr().cast(), token.len());
    // SAFETY: the token is valid for its length, `out` a valid output.
    json_of(|out| unsafe { wid_verify(v, t, tl, now, out) })
}

/// `v`'s stats (`wid_verifier_stats`).
pub fn stats(v: *const wid_verifier) -> serde_json::Value {
    // SAFETY: `out` is a valid output.
    json_of(|out| unsafe { wid_verifier_stats(v, out) })
}

/// `wid_verify_batch` of the tokens at `tokens` (with their lengths) at
/// `NOW`, which must succeed: the result of each.
pub fn verify_batch(
    v: *const wid_verifier,
    tokens: &[*const c_char],
    lens: &[usize],
) -> Vec<wid_result> {
    assert_eq!(tokens.len(), lens.len());
    let mut results = vec![u32::MAX; tokens.len()];
    let (t, l, n, r) = (
        tokens.as_ptr(),
        lens.as_ptr(),
        tokens.len(),
        results.as_mut_ptr(),
    );
    // SAFETY: `n` tokens valid for their lengths, and `n` results.
    expect(
        unsafe { wid_verify_batch(v, t, l, n, NOW, r) },
        WID_RESULT_OK,
    );
    results
}
