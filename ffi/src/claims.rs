//! `wid_claims`: a verified token's claims read from C without a JSON
//! parser: string claims, times and audiences by their JSON names (the
//! `WID_CLAIM_*` macros), and the identity's name.

use std::collections::BTreeMap;
use std::ffi::c_char;

use super::boundary::truncate_for_message;
use super::boundary::{bytes_in, call, call_void, invalid, str_in};
use super::handle::{self, Castable, require_out};
use super::keyring::MAX_JSON;
use super::verify::{token_in, verifier_ref, wid_verifier};
use super::wid_result;
use workload_identity::Error;

/// The allocation's ID (`nomad_allocation_id`).
pub const WID_CLAIM_ALLOCATION_ID: &str = "nomad_allocation_id";
/// The job's namespace (`nomad_namespace`).
pub const WID_CLAIM_NAMESPACE: &str = "nomad_namespace";
/// The job's ID (`nomad_job_id`; the parent's for a child job).
pub const WID_CLAIM_JOB_ID: &str = "nomad_job_id";
/// The task, for a task's identity (`nomad_task`).
pub const WID_CLAIM_TASK: &str = "nomad_task";
/// The service, for a service's identity (`nomad_service`).
pub const WID_CLAIM_SERVICE: &str = "nomad_service";
/// The subject (`sub`): Nomad's `region:namespace:job:group:workload:identity`,
/// or a SPIFFE ID or WIMSE URI.
pub const WID_CLAIM_SUBJECT: &str = "sub";
/// The issuer (`iss`), when the issuer sets one.
pub const WID_CLAIM_ISSUER: &str = "iss";
/// The token's ID (`jti`).
pub const WID_CLAIM_JWT_ID: &str = "jti";
/// Issued at (`iat`, Unix seconds).
pub const WID_CLAIM_ISSUED_AT: &str = "iat";
/// Not before (`nbf`, Unix seconds).
pub const WID_CLAIM_NOT_BEFORE: &str = "nbf";
/// Expires (`exp`, Unix seconds).
pub const WID_CLAIM_EXPIRES: &str = "exp";
/// A node identity's node ID (`nomad_node_id`).
pub const WID_CLAIM_NODE_ID: &str = "nomad_node_id";
/// A node identity's datacenter (`nomad_node_datacenter`).
pub const WID_CLAIM_NODE_DATACENTER: &str = "nomad_node_datacenter";
/// A node identity's node pool (`nomad_node_pool`).
pub const WID_CLAIM_NODE_POOL: &str = "nomad_node_pool";
/// A node identity's node class (`nomad_node_class`).
pub const WID_CLAIM_NODE_CLASS: &str = "nomad_node_class";
/// The task's Consul namespace (`consul_namespace`).
pub const WID_CLAIM_CONSUL_NAMESPACE: &str = "consul_namespace";
/// The task's Vault namespace (`vault_namespace`).
pub const WID_CLAIM_VAULT_NAMESPACE: &str = "vault_namespace";
/// The task's Vault role (`vault_role`).
pub const WID_CLAIM_VAULT_ROLE: &str = "vault_role";

/// A token's claims (opaque; one owner): made by `wid_verify_claims` or
/// `wid_claims_parse`, released by `wid_claims_free`. The strings it hands
/// out stay valid until then.
pub struct wid_claims {
    _private: [u8; 0],
}

/// What a claims handle holds: every string claim NUL-terminated, every
/// integer claim, the audiences.
pub(crate) struct HeldClaims {
    strings: BTreeMap<String, Box<[u8]>>,
    numbers: BTreeMap<String, i64>,
    audience: Vec<Box<[u8]>>,
}

impl Castable for wid_claims {
    type Rust = HeldClaims;
    const TAG: u64 = 0x5749_445f_434d_0001; // "WID_CM" v1
    const NAME: &'static str = "wid_claims";
    const OWNED: bool = true;
}

/// `s` with a NUL after it (not counted in the lengths handed out).
fn nul_terminated(s: &str) -> Box<[u8]> {
    let mut v = Vec::with_capacity(s.len() + 1);
    v.extend_from_slice(s.as_bytes());
    v.push(0);
    v.into_boxed_slice()
}

impl HeldClaims {
    fn from_json(json: &[u8]) -> Result<HeldClaims, Error> {
        let bad = |why: String| invalid("claims_json", why);
        let value: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| bad(format!("is not JSON: {e}")))?;
        let serde_json::Value::Object(map) = value else {
            return Err(bad(
                "is not a JSON object (expected the claims wid_verify writes)".into(),
            ));
        };
        let mut held = HeldClaims {
            strings: BTreeMap::new(),
            numbers: BTreeMap::new(),
            audience: Vec::new(),
        };
        for (k, v) in map {
            match v {
                serde_json::Value::String(s) => {
                    if k == "aud" {
                        held.audience.push(nul_terminated(&s));
                    }
                    held.strings.insert(k, nul_terminated(&s));
                }
                serde_json::Value::Number(n) => {
                    if let Some(i) = n.as_i64() {
                        held.numbers.insert(k, i);
                    }
                }
                serde_json::Value::Array(items) if k == "aud" => {
                    for item in items {
                        let serde_json::Value::String(s) = item else {
                            return Err(bad("has an aud that is not a string".into()));
                        };
                        held.audience.push(nul_terminated(&s));
                    }
                }
                // Objects (cnf, extra_claims) and others: read the JSON.
                _ => {}
            }
        }
        Ok(held)
    }
}

/// Reads `json` (the claims JSON `wid_verify`, `wid_issue_node` or
/// `wid_explain` wrote, at most 1 MiB) into a claims handle. Not a JSON
/// object is `WID_RESULT_INVALID_ARGUMENT`. `*out` receives a handle to free
/// with `wid_claims_free`. (It checks nothing about the token: verify first.)
///
/// # Safety
/// `json` NULL or valid for `len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_parse(
    json: *const u8,
    len: usize,
    out: *mut *mut wid_claims,
) -> wid_result {
    call(|| {
        // SAFETY: `json` NULL or valid for `len` bytes (the contract).
        let json = unsafe { bytes_in(json, len, "claims_json", MAX_JSON)? };
        require_out(out, "out")?;
        let held = HeldClaims::from_json(json)?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw_owned::<wid_claims>(held)) }
    })
}

/// Verifies `token` as `wid_verify` does (same checks, same result codes) and
/// gives its claims as a handle instead of JSON. `*out` receives a handle to
/// free with `wid_claims_free`; on failure it is not written.
///
/// # Safety
/// `v` NULL or a live handle; `token` NULL or valid for `token_len` bytes;
/// `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verify_claims(
    v: *const wid_verifier,
    token: *const c_char,
    token_len: usize,
    now_unix: i64,
    out: *mut *mut wid_claims,
) -> wid_result {
    call(|| {
        // SAFETY (this block): the contract.
        let verifier = unsafe { verifier_ref(v)? };
        let token = unsafe { token_in(token, token_len, verifier.max_token_bytes())? };
        require_out(out, "out")?;
        let verified = verifier.verify_bytes(token, now_unix)?;
        let held = HeldClaims::from_json(verified.claims.to_json().as_bytes())?;
        unsafe { handle::out(out, "out", || handle::into_raw_owned::<wid_claims>(held)) }
    })
}

/// Releases a claims handle (and the strings it handed out). NULL-safe.
///
/// # Safety
/// `c` must be NULL or a handle from this library not yet freed, with no
/// call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_free(c: *mut wid_claims) {
    // SAFETY: `c` is NULL or a live claims handle the caller gives up.
    call_void(|| unsafe { handle::free_owned(c) });
}

/// The handle and a claim's name (UTF-8, at most 256 bytes).
///
/// # Safety
/// `c` NULL or a live handle; `name` NULL or valid for `name_len` bytes.
unsafe fn claims_and_name<'a>(
    c: *const wid_claims,
    name: *const c_char,
    name_len: usize,
) -> Result<(&'a HeldClaims, &'a str), Error> {
    // SAFETY: the contract.
    let held = unsafe { handle::borrow::<wid_claims>(c, "c")? };
    // SAFETY: the contract.
    let name = unsafe { str_in(name, name_len, "name", 256)? };
    Ok((held, name))
}

/// `*out_ptr` and `*out_len` receive string claim `name` (a `WID_CLAIM_*`
/// name, or any other key of the claims JSON): UTF-8, NUL-terminated (the
/// NUL not counted), valid until `wid_claims_free`. A claim the token does
/// not carry, or one that is not a string, is `WID_RESULT_INVALID_ARGUMENT`
/// saying which, and nothing is written.
///
/// # Safety
/// `c` NULL or a live handle; `name` NULL or valid for `name_len` bytes;
/// `out_ptr` and `out_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_str(
    c: *const wid_claims,
    name: *const c_char,
    name_len: usize,
    out_ptr: *mut *const c_char,
    out_len: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: the contract.
        let (held, name) = unsafe { claims_and_name(c, name, name_len)? };
        require_out(out_ptr, "out_ptr")?;
        require_out(out_len, "out_len")?;
        let s = held
            .strings
            .get(name)
            .ok_or_else(|| absent(held, name, "string"))?;
        // SAFETY: both are writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_ptr, "out_ptr", || s.as_ptr().cast())?;
            handle::out(out_len, "out_len", || s.len() - 1)
        }
    })
}

/// `*out` receives integer claim `name` (`WID_CLAIM_ISSUED_AT`,
/// `_NOT_BEFORE`, `_EXPIRES`: Unix seconds). Absent, or not an integer:
/// `WID_RESULT_INVALID_ARGUMENT`, nothing written.
///
/// # Safety
/// `c` NULL or a live handle; `name` NULL or valid for `name_len` bytes;
/// `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_i64(
    c: *const wid_claims,
    name: *const c_char,
    name_len: usize,
    out: *mut i64,
) -> wid_result {
    call(|| {
        // SAFETY: the contract.
        let (held, name) = unsafe { claims_and_name(c, name, name_len)? };
        require_out(out, "out")?;
        let n = *held
            .numbers
            .get(name)
            .ok_or_else(|| absent(held, name, "integer"))?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || n) }
    })
}

/// `*out_count` receives how many audiences (`aud`) the token names (0
/// without `aud`); read each with `wid_claims_audience`.
///
/// # Safety
/// `c` NULL or a live handle; `out_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_audience_count(
    c: *const wid_claims,
    out_count: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: the contract.
        let held = unsafe { handle::borrow::<wid_claims>(c, "c")? };
        let n = held.audience.len();
        // SAFETY: `out_count` NULL or writable (the contract).
        unsafe { handle::out(out_count, "out_count", || n) }
    })
}

/// `*out_ptr` and `*out_len` receive audience `index` (from 0; as
/// `wid_claims_str`). An index past the last is `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `c` NULL or a live handle; `out_ptr` and `out_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_audience(
    c: *const wid_claims,
    index: usize,
    out_ptr: *mut *const c_char,
    out_len: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: the contract.
        let held = unsafe { handle::borrow::<wid_claims>(c, "c")? };
        require_out(out_ptr, "out_ptr")?;
        require_out(out_len, "out_len")?;
        let a = held.audience.get(index).ok_or_else(|| {
            invalid(
                "index",
                format!(
                    "is {index}, but the token names {} audiences",
                    held.audience.len()
                ),
            )
        })?;
        // SAFETY: both are writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_ptr, "out_ptr", || a.as_ptr().cast())?;
            handle::out(out_len, "out_len", || a.len() - 1)
        }
    })
}

/// `*out_ptr` and `*out_len` receive the identity's name: the last part of
/// a Nomad subject (`region:namespace:job:group:workload:identity`), as
/// `wid_claims_str`. A subject of another form (a SPIFFE ID, a WIMSE URI, a
/// node's) has no identity name in it: `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `c` NULL or a live handle; `out_ptr` and `out_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_claims_identity_name(
    c: *const wid_claims,
    out_ptr: *mut *const c_char,
    out_len: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: the contract.
        let held = unsafe { handle::borrow::<wid_claims>(c, "c")? };
        require_out(out_ptr, "out_ptr")?;
        require_out(out_len, "out_len")?;
        let sub = held
            .strings
            .get(WID_CLAIM_SUBJECT)
            .ok_or_else(|| absent(held, WID_CLAIM_SUBJECT, "string"))?;
        let text = &sub[..sub.len() - 1];
        let parts = text.split(|b| *b == b':').count();
        let start = text.iter().rposition(|b| *b == b':').map(|i| i + 1);
        let Some(start) = start.filter(|_| parts == 6 && !text.contains(&b'/')) else {
            return Err(invalid(
                "c",
                format!(
                    "its sub {:?} is not Nomad's region:namespace:job:group:workload:identity: it names no identity",
                    truncate_for_message(&String::from_utf8_lossy(text))
                ),
            ));
        };
        let ptr = sub[start..].as_ptr();
        let len = text.len() - start;
        // SAFETY: both are writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_ptr, "out_ptr", || ptr.cast())?;
            handle::out(out_len, "out_len", || len)
        }
    })
}

/// Why `name` cannot be read as a `kind`.
fn absent(held: &HeldClaims, name: &str, kind: &str) -> Error {
    let what = if held.strings.contains_key(name) {
        "is a string"
    } else if held.numbers.contains_key(name) {
        "is a number"
    } else {
        "is not in the token"
    };
    invalid(
        "name",
        format!(
            "claim {:?} {what}, not a {kind}",
            truncate_for_message(name)
        ),
    )
}
