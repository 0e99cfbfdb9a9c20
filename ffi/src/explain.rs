//! `wid_explain` and `wid_verifier_stats`: why a verifier accepts or
//! rejects a token, step by step, and what it has done so far, as JSON.

use std::ffi::c_char;

use serde_json::{Value, json};

use super::boundary::{bytes_in, call};
use super::handle::{self, require_out};
use super::verify::{verifier_ref, wid_verifier};
use super::{wid_bytes, wid_result};
use workload_identity::Error;
use workload_identity::Explanation;

/// The explanation as `wid_explain` writes it: `Explanation::to_json`'s
/// members (those of `wid inspect --json`) and the verdict's number.
fn explanation_json(x: &Explanation) -> Vec<u8> {
    let mut value: Value = serde_json::from_str(&x.to_json()).unwrap_or_else(|_| json!({}));
    let code = x.result.as_ref().map_or_else(|e| e.code().as_u32(), |_| 0);
    if let Some(members) = value.as_object_mut() {
        members.insert("result".into(), Value::from(code));
    }
    value.to_string().into_bytes()
}

/// Verifies `token` at `now_unix` as `wid_verify` would, recording every
/// check, and writes what happened to `*out_json`:
/// `{"accepted":false,"code":"WID_RESULT_EXPIRED","result":14,"steps":[{"detail":"...","name":"length","passed":true},...]}`.
/// `steps` are the checks run, in order (`length`, `structure`, `key`,
/// `algorithm`, `signature`, `claims`, `times`, `audience`, `issuer`,
/// `allocation`, or `node` for a node token), each with `passed` and a `detail` saying what was found
/// (on failure, the error's message); the first failure ends them. `code`
/// is the name of the result `wid_verify` returns for this token (`null`
/// when accepted), `result` its number (0 when accepted): the same steps,
/// verdict and code as `wid inspect --json` prints under `verification`.
///
/// Returns `WID_RESULT_OK` whenever the explanation was written, whatever
/// the verdict. The verified-token cache is neither read nor filled and
/// the stats do not count the verdict; an unknown key is waited for, and the
/// lookup callback called, as `wid_verify` would. A token longer than the
/// verifier's `max_token_bytes` is explained by its failed `length` step
/// without being read; a token that is not UTF-8 is
/// `WID_RESULT_MALFORMED_TOKEN` (nothing written).
///
/// # Safety
/// `v` must be NULL or a live handle; `token` NULL or valid for `token_len`
/// bytes; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_explain(
    v: *const wid_verifier,
    token: *const c_char,
    token_len: usize,
    now_unix: i64,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `v` is NULL or a live handle; `token` NULL or
        // valid for `token_len` bytes (the contract).
        let verifier = unsafe { verifier_ref(v)? };
        require_out(out_json, "out_json")?;
        let max = verifier.max_token_bytes();
        let explanation = match verifier.explain_length(token_len) {
            // The first step, and the last: the pipeline's own length check
            // and message, and the token is not read.
            Some(refused) => refused,
            None => {
                let bytes = unsafe { bytes_in(token.cast(), token_len, "token", max)? };
                let text = std::str::from_utf8(bytes).map_err(|e| Error::MalformedToken {
                    reason: format!(
                        "the token is not UTF-8 (invalid byte at offset {})",
                        e.valid_up_to()
                    ),
                })?;
                verifier.explain(text, now_unix)
            }
        };
        let json = explanation_json(&explanation);
        // SAFETY: `out_json` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_json, "out_json", || wid_bytes::from_vec(json)) }
    })
}

/// What verifier `v` has done so far, as JSON: `{"accepted":N,
/// "rejected":N, "consistent_fallbacks":N, "key_waits":N, "cache_hits":N,
/// "cache_entries":N}`: tokens accepted and rejected (by `wid_verify`,
/// `wid_verify_batch` and `wid_verify_proof`; `wid_explain` is not
/// counted), stale lookups that said missing and were asked again
/// consistently, unknown `kid`s waited for (`wid_explain`'s included), cache
/// hits, and tokens in the cache now. Counters only grow; members may be
/// added (node tokens will add theirs).
///
/// # Safety
/// `v` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_stats(
    v: *const wid_verifier,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `v` is NULL or a live handle (the contract).
        let verifier = unsafe { verifier_ref(v)? };
        require_out(out_json, "out_json")?;
        let s = verifier.stats();
        let json = json!({
            "accepted": s.accepted,
            "rejected": s.rejected,
            "consistent_fallbacks": s.consistent_fallbacks,
            "key_waits": s.key_waits,
            "cache_hits": s.cache_hits,
            "cache_entries": s.cache_entries,
        })
        .to_string();
        // SAFETY: `out_json` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_json, "out_json", || {
                wid_bytes::from_vec(json.into_bytes())
            })
        }
    })
}
