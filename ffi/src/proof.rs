//! Proof of possession: `wid_workload_key` (the workload's own key pair and
//! the proofs it makes), `wid_issue_wit` and `wid_verify_proof`.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{bytes_in, call, call_void, invalid, str_in};
use super::handle::{self, Castable, out_optional, require_out};
use super::keyring::{MAX_PATH, alg_in, keyring_ref, wid_keyring};
use super::verify::wid_verifier;
use super::{wid_alg, wid_bytes, wid_result};
use workload_identity::Error;
use workload_identity::Issuer;
use workload_identity::codec::{self, DecodeLimits};
use workload_identity::model::IssueRequest;
use workload_identity::{MAX_TOKEN_BYTES_LIMIT, ProofOptions, ProofRequest, Verifier, WorkloadKey};

/// A workload's key pair (opaque; one owner, not reference counted): made by
/// `wid_workload_key_generate`, released by `wid_workload_key_free`. Safe to
/// use from many threads at once (proving only reads it).
pub struct wid_workload_key {
    _private: [u8; 0],
}

impl Castable for wid_workload_key {
    type Rust = WorkloadKey;
    const TAG: u64 = 0x5749_445f_574b_0001; // "WID_WK" v1
    const NAME: &'static str = "wid_workload_key";
    const OWNED: bool = true;
}

/// Longest trust domain argument read (a DNS name is at most 253 bytes; the
/// library says what is wrong with a longer one up to this cap).
pub(crate) const MAX_TRUST_DOMAIN: usize = 4096;
/// Longest target URI read, in bytes (the request line limit of common
/// servers; the query, dropped anyway, is what makes URIs long).
const MAX_TARGET_URI: usize = 8192;

/// The workload key behind handle `key`.
///
/// # Safety
/// `key` must be NULL or a live handle from this library.
unsafe fn key_ref<'a>(key: *const wid_workload_key) -> Result<&'a WorkloadKey, Error> {
    // SAFETY: `key` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(key, "key") }
}

/// Borrows a token as text: a length over `max` is refused from the length
/// alone, before any byte is read, and so are bytes that are not UTF-8; both
/// with the error `refuse` makes (the code a bad token of this kind has).
///
/// # Safety
/// `ptr` must be NULL or valid for `len` bytes.
unsafe fn token_text<'a>(
    ptr: *const c_char,
    len: usize,
    name: &'static str,
    max: usize,
    refuse: fn(String) -> Error,
) -> Result<&'a str, Error> {
    if len > max {
        return Err(refuse(format!(
            "{name} is {len} bytes, longer than the {max}-byte limit"
        )));
    }
    // SAFETY: the caller's contract makes `ptr` valid for `len` bytes, and
    // `len <= max <= MAX_TOKEN_BYTES_LIMIT` (1 MiB), far below isize::MAX.
    debug_assert!(max <= MAX_TOKEN_BYTES_LIMIT);
    let bytes = unsafe { bytes_in(ptr.cast(), len, name, max)? };
    std::str::from_utf8(bytes).map_err(|_| refuse(format!("{name} is not UTF-8")))
}

fn malformed(reason: String) -> Error {
    Error::MalformedToken { reason }
}

fn proof_invalid(reason: String) -> Error {
    Error::ProofInvalid { reason }
}

/// Makes a fresh key pair for a workload from the OS's CSPRNG: `alg`
/// `WID_ALG_EDDSA` (Ed25519) or `WID_ALG_ES256` (P-256, the algorithm the
/// WIMSE drafts make mandatory). `WID_ALG_RS256` is
/// `WID_RESULT_UNSUPPORTED_ALGORITHM`, an unknown `alg`
/// `WID_RESULT_INVALID_ARGUMENT`. `*out` receives a handle to free with
/// `wid_workload_key_free`. The private key never leaves the library.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_workload_key_generate(
    alg: wid_alg,
    out: *mut *mut wid_workload_key,
) -> wid_result {
    call(|| {
        let alg = alg_in(alg)?;
        require_out(out, "out")?;
        let key = WorkloadKey::generate(alg)?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw_owned(key)) }
    })
}

/// Releases a workload key (its private key is zeroized). NULL-safe.
///
/// # Safety
/// `key` must be NULL or a handle from `wid_workload_key_generate` not yet
/// freed, with no call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_workload_key_free(key: *mut wid_workload_key) {
    // SAFETY: `key` is NULL or a live workload key handle the caller gives up.
    call_void(|| unsafe { handle::free_owned(key) });
}

/// The key's public half as a JWK with `alg`, the JSON the WIT's `cnf.jwk`
/// holds: `{"alg":"EdDSA","crv":"Ed25519","kty":"OKP","x":...}` or
/// `{"alg":"ES256","crv":"P-256","kty":"EC","x":...,"y":...}` (`x`, `y`
/// base64url). A request for a WIT carries the same members as its
/// `ProofKey` (`Alg`, `Crv`, `Kty`, `X`, `Y`; `Y` empty for Ed25519).
///
/// # Safety
/// `key` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_workload_key_public_jwk(
    key: *const wid_workload_key,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `key` is NULL or a live handle (the contract).
        let key = unsafe { key_ref(key)? };
        require_out(out_json, "out_json")?;
        let json = key.public_jwk_json();
        // SAFETY: `out_json` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_json, "out_json", || {
                wid_bytes::from_vec(json.into_bytes())
            })
        }
    })
}

/// Makes a workload proof token (WPT, typ `wpt+jwt`) for one request to
/// `target_uri` (its query and fragment are dropped), bound to the WIT
/// `wit` (`wth`) and, when `access_token` is not NULL or empty, to that
/// access token (`ath`; the value without `Bearer `). It is valid from
/// `now_unix` for `ttl_secs` seconds (0: the default, 60; negative is
/// `WID_RESULT_INVALID_ARGUMENT`) and carries a fresh 128-bit `jti`: make one
/// per request. `*out_wpt` receives the token. A `wit` that is not UTF-8 or
/// longer than 1 MiB is `WID_RESULT_MALFORMED_TOKEN`; an empty `wit` or
/// `target_uri` `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `key` NULL or a live handle; `wit`, `target_uri` and `access_token` NULL
/// or valid for their lengths; `out_wpt` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_workload_key_prove(
    key: *const wid_workload_key,
    wit: *const c_char,
    wit_len: usize,
    target_uri: *const c_char,
    target_uri_len: usize,
    access_token: *const c_char,
    access_token_len: usize,
    ttl_secs: i64,
    now_unix: i64,
    out_wpt: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `key` is NULL or a live handle; `wit`,
        // `target_uri` and `access_token` NULL or valid for their lengths
        // (the contract).
        let key = unsafe { key_ref(key)? };
        let wit = unsafe { token_text(wit, wit_len, "wit", MAX_TOKEN_BYTES_LIMIT, malformed)? };
        let target = unsafe { str_in(target_uri, target_uri_len, "target_uri", MAX_TARGET_URI)? };
        let access_token = unsafe {
            str_in(
                access_token,
                access_token_len,
                "access_token",
                MAX_TOKEN_BYTES_LIMIT,
            )?
        };
        require_out(out_wpt, "out_wpt")?;
        let mut options = ProofOptions::new();
        match ttl_secs {
            0 => {}
            n if n > 0 => options = options.ttl(Duration::from_secs(n.unsigned_abs())),
            n => {
                return Err(invalid(
                    "ttl_secs",
                    format!("must be >= 0 (0: the default, 60 s), got {n}"),
                ));
            }
        }
        if !access_token.is_empty() {
            options = options.access_token(access_token);
        }
        let wpt = key.prove(wit, target, now_unix, &options)?;
        // SAFETY: `out_wpt` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_wpt, "out_wpt", || wid_bytes::from_vec(wpt.into_bytes())) }
    })
}

/// Signs a WIMSE workload identity token (WIT, typ `wit+jwt`) with the
/// active WIT key of `alg` (a `WID_ALG_*`; a key of purpose
/// `WID_KEY_PURPOSE_WIT`, made with `wid_keyring_rotate_purpose`: a WIT is
/// never signed by a bearer key, whose JWKS relying parties trust) for a
/// msgpack `IssueRequest` that
/// carries the workload's public key (`ProofKey`, as
/// `wid_workload_key_public_jwk` gives it): `sub` is
/// `wimse://<trust_domain>/<region>/<namespace>/<job>/<group>/<task or service>/<identity>`,
/// `exp` the identity's TTL (required; at most 1 hour), `cnf.jwk` the key,
/// no `aud` (each proof names its audience).
/// `trust_domain` is required (a DNS name: lower-case letters, digits, `-`
/// and `.`); `issuer` NULL or empty means no `iss`. A request without
/// `ProofKey` (use `wid_issue_alg` for a bearer token), an unusable key, a TTL
/// of 0 or a bad trust domain is `WID_RESULT_INVALID_ARGUMENT`; an unknown
/// `alg` too; an `alg` without an active WIT key `WID_RESULT_NO_ACTIVE_KEY`
/// (the message names the fix; before keys had purposes any active key of
/// `alg` signed WITs: a deliberate tightening).
/// `*out_token` receives the WIT. A WIT is never a bearer token: `wid_verify`
/// refuses it (`WID_RESULT_PROOF_REQUIRED`); check it with `wid_verify_proof`.
///
/// # Safety
/// `kr` NULL or a live handle; `request_msgpack` NULL or valid for `len`
/// bytes; `issuer` and `trust_domain` NULL or valid for their lengths;
/// `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue_wit(
    kr: *const wid_keyring,
    alg: wid_alg,
    request_msgpack: *const u8,
    len: usize,
    issuer: *const c_char,
    issuer_len: usize,
    trust_domain: *const c_char,
    trust_domain_len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `kr` is NULL or a live handle; the byte and
        // string inputs NULL or valid for their lengths (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let alg = alg_in(alg)?;
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        let issuer = unsafe { str_in(issuer, issuer_len, "issuer", MAX_PATH)? };
        let trust_domain = unsafe {
            str_in(
                trust_domain,
                trust_domain_len,
                "trust_domain",
                MAX_TRUST_DOMAIN,
            )?
        };
        require_out(out_token, "out_token")?;
        let req: IssueRequest = codec::decode_with(request, &limits)?;
        if req.proof_key.is_none() {
            return Err(Error::invalid(
                "IssueRequest",
                "ProofKey",
                "is absent: a workload identity token binds the workload's public key (ProofKey: Alg, Crv, Kty, X, Y); use wid_issue_alg for a bearer token",
            ));
        }
        // NULL or empty issuer: no `iss`.
        let signer = Issuer::new(keyring.clone())
            .issuer(issuer)
            .trust_domain(trust_domain)?;
        let signed = signer.issue_with(alg, &req, now_unix)?;
        let token = wid_bytes::from_vec(signed.token.into_bytes());
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_token, "out_token", || token) }
    })
}

/// Verifies a WIT and the WPT that came with one request, at `now_unix`:
/// the WIT through the whole pipeline (`wid_verify`'s checks: signature,
/// times, issuer, live allocation, but no audience: a WIT has none; it must
/// be typ `wit+jwt` with `exp` and `cnf.jwk`, signed by a WIT key: one
/// signed by a bearer key is `WID_RESULT_UNKNOWN_KEY`), then the WPT (typ `wpt+jwt`, `alg` the `cnf.jwk`'s,
/// signed by that key, `aud` the request's `target_uri` without query or
/// fragment, `exp` neither past nor too far ahead, `wth` this WIT's hash,
/// `ath` present exactly when `access_token` (NULL or empty: none) is given
/// and its hash), and finally its `jti` unseen: the verifier remembers each
/// proof until it expires, so a proof is accepted once.
///
/// WIT failures have `wid_verify`'s codes (a WIT over the verifier's
/// `max_token_bytes` or not UTF-8 is `WID_RESULT_MALFORMED_TOKEN`, a bearer
/// token in its place `WID_RESULT_PROOF_INVALID`); WPT failures are
/// `WID_RESULT_PROOF_INVALID`, a replay `WID_RESULT_PROOF_REPLAYED`. On
/// success `*out_claims_json` (may be NULL when not wanted) receives the WIT's
/// claims as JSON, as `wid_verify` gives them, `cnf` included.
///
/// # Safety
/// `v` NULL or a live handle; `wit`, `wpt`, `target_uri` and `access_token`
/// NULL or valid for their lengths; `out_claims_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verify_proof(
    v: *const wid_verifier,
    wit: *const c_char,
    wit_len: usize,
    wpt: *const c_char,
    wpt_len: usize,
    target_uri: *const c_char,
    target_uri_len: usize,
    access_token: *const c_char,
    access_token_len: usize,
    now_unix: i64,
    out_claims_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `v` is NULL or a live handle; the token and
        // string inputs NULL or valid for their lengths (the contract).
        let verifier: &Verifier = unsafe { handle::borrow(v, "v")? };
        let max = verifier.max_token_bytes();
        let wit = unsafe { token_text(wit, wit_len, "wit", max, malformed)? };
        let wpt = unsafe { token_text(wpt, wpt_len, "wpt", max, proof_invalid)? };
        let target = unsafe { str_in(target_uri, target_uri_len, "target_uri", MAX_TARGET_URI)? };
        let access_token = unsafe {
            str_in(
                access_token,
                access_token_len,
                "access_token",
                MAX_TOKEN_BYTES_LIMIT,
            )?
        };
        if target.is_empty() {
            return Err(invalid(
                "target_uri",
                "is empty; expected the URI this request reached, e.g. https://svc.example/api",
            ));
        }
        let mut request = ProofRequest::new(target);
        if !access_token.is_empty() {
            request = request.access_token(access_token);
        }
        let verified = verifier.verify_proof(wit, wpt, &request, now_unix)?;
        // SAFETY: `out_claims_json` is NULL or writable (the contract).
        unsafe {
            out_optional(out_claims_json, || {
                wid_bytes::from_vec(verified.identity.claims.to_json().into_bytes())
            })
        };
        Ok(())
    })
}
