//! Proof of possession through the C ABI: WITs issued from a request
//! carrying a `ProofKey`, the proofs a workload key makes for them, and
//! their verification.

use std::ptr::null_mut;

use workload_identity_ffi::*;

use super::bytes::{empty, is_empty, is_sentinel, sentinel, taken};
use super::strings::{opt, raw, s};

/// `wid_issue_wit` of `request` by `kr`'s WIT key of `alg`, with this
/// issuer and trust domain (bytes, so that they may be anything), at `now`,
/// into `out`.
pub fn issue_wit_into(
    kr: *const wid_keyring,
    alg: wid_alg,
    request: &[u8],
    iss: &[u8],
    td: &[u8],
    now: i64,
    out: &mut wid_bytes,
) -> wid_result {
    let (r, rl) = (request.as_ptr(), request.len());
    let ((i, il), (t, tl)) = (raw(iss), raw(td));
    // SAFETY: every input is valid for its length, `out` a valid output.
    unsafe { wid_issue_wit(kr, alg, r, rl, i, il, t, tl, now, out) }
}

/// The proof `key` makes (`wid_workload_key_prove`) for `wit`, `target` and
/// the access token if any, living `ttl_secs` (0: the default) from `now`;
/// or the code, the output untouched.
pub fn prove(
    key: *const wid_workload_key,
    wit: &str,
    target: &str,
    access_token: Option<&str>,
    ttl_secs: i64,
    now: i64,
) -> Result<String, wid_result> {
    let ((w, wl), (t, tl), (a, al)) = (s(wit), s(target), opt(access_token));
    let mut out = empty();
    // SAFETY: every input is valid for its length, `out` a valid output.
    let rc = unsafe { wid_workload_key_prove(key, w, wl, t, tl, a, al, ttl_secs, now, &mut out) };
    taken(rc, &mut out, is_empty)
}

/// The claims `wid_verify_proof` gives for `wit` and its proof `wpt` for
/// `target` and the access token if any, at `now`; or the code, the output
/// checked untouched.
pub fn verify_proof(
    v: *const wid_verifier,
    wit: &str,
    wpt: &str,
    target: &str,
    access_token: Option<&str>,
    now: i64,
) -> Result<serde_json::Value, wid_result> {
    let ((w, wl), (p, pl)) = (s(wit), s(wpt));
    let ((t, tl), (a, al)) = (s(target), opt(access_token));
    let mut out = sentinel();
    // SAFETY: every input is valid for its length, `out` a valid output.
    let rc = unsafe { wid_verify_proof(v, w, wl, p, pl, t, tl, a, al, now, &mut out) };
    taken(rc, &mut out, is_sentinel).map(|claims| serde_json::from_str(&claims).unwrap())
}
