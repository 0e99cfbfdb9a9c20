//! Issuance: `wid_issue`, `wid_issue_with_issuer`, `wid_issue_alg`, and
//! `wid_issue_node` for client nodes' own identities.

use std::ffi::c_char;

use super::boundary::{bytes_in, call, str_in};
use super::handle::{self, require_out};
use super::keyring::{MAX_PATH, alg_in, keyring_ref, wid_keyring};
use super::{wid_alg, wid_bytes, wid_result};
use workload_identity::Algorithm;
use workload_identity::Issuer;
use workload_identity::codec::{self, DecodeLimits};
use workload_identity::model::{IssueRequest, NodeIdentityRequest};

/// Signs the identity a msgpack `IssueRequest` (codec names, as Go's
/// go-msgpack writes it) asks for, at `now_unix`; `*out_token` receives the JWT.
///
/// # Safety
/// `request_msgpack` must be NULL or valid for `len` bytes; `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue(
    kr: *const wid_keyring,
    request_msgpack: *const u8,
    len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the same contract, with no issuer.
    unsafe {
        wid_issue_with_issuer(
            kr,
            request_msgpack,
            len,
            std::ptr::null(),
            0,
            now_unix,
            out_token,
        )
    }
}

/// Like `wid_issue`, with an `iss` claim (`(NULL, 0)` for none).
///
/// # Safety
/// As `wid_issue`; `issuer` NULL or valid for `issuer_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue_with_issuer(
    kr: *const wid_keyring,
    request_msgpack: *const u8,
    len: usize,
    issuer: *const c_char,
    issuer_len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the same contract, for EdDSA.
    unsafe {
        wid_issue_alg(
            kr,
            Algorithm::EdDsa.as_u32(),
            request_msgpack,
            len,
            issuer,
            issuer_len,
            now_unix,
            out_token,
        )
    }
}

/// Like `wid_issue_with_issuer`, signed with the active key of `alg` (a
/// `WID_ALG_*`): an unknown `alg` is `WID_RESULT_INVALID_ARGUMENT`, an `alg`
/// without an active key `WID_RESULT_NO_ACTIVE_KEY`. `issuer` NULL or empty
/// means no `iss`.
///
/// # Safety
/// As `wid_issue`; `issuer` NULL or valid for `issuer_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue_alg(
    kr: *const wid_keyring,
    alg: wid_alg,
    request_msgpack: *const u8,
    len: usize,
    issuer: *const c_char,
    issuer_len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `kr` is NULL or a live handle, `request_msgpack`
        // NULL or valid for `len` bytes, `issuer` NULL or valid for
        // `issuer_len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let alg = alg_in(alg)?;
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        let issuer = unsafe { str_in(issuer, issuer_len, "issuer", MAX_PATH)? };
        require_out(out_token, "out_token")?;
        let req: IssueRequest = codec::decode_with(request, &limits)?;
        // NULL or empty: no issuer.
        let signer = Issuer::new(keyring.clone()).issuer(issuer);
        let signed = signer.issue_with(alg, &req, now_unix)?;
        let token = wid_bytes::from_vec(signed.token.into_bytes());
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_token, "out_token", || token) }
    })
}

/// Signs a client node's own identity (Nomad 1.11's node identity) from a
/// msgpack `NodeIdentityRequest` (codec names, as Go's go-msgpack writes it:
/// `Region`, `Node` with `ID`, `Name`, `Datacenter`, `NodeClass`,
/// `NodePool`, `Status`, `Audience`, `TTL` in nanoseconds; other keys
/// ignored; at most 4 MiB, nesting at most 32) at `now_unix`, with the
/// active key of `alg` (a `WID_ALG_*`); `*out_token` receives the JWT. The
/// token carries `nomad_node_id`, `nomad_node_pool`, `nomad_node_class`
/// (when the node has one), `nomad_node_datacenter`, `sub` =
/// `node:<region>:<node pool>:<node ID>:default`, `aud` (`nomadproject.io`
/// when `Audience` is empty), `iat` = `nbf` = now, `exp` = now + `TTL` (24 h
/// when `TTL` is 0: a node identity always expires), `jti`, and `iss` when
/// `issuer` is not `(NULL, 0)` or empty; never an allocation claim. Only a
/// verifier built with `wid_verifier_builder_set_node_tokens` accepts it.
///
/// A request missing `Region`, `Node.ID`, `Node.Datacenter` or
/// `Node.NodePool`, with a `:` in `Region`, `Node.ID` or `Node.NodePool`,
/// an empty audience, or a `TTL` that is negative or under one second is
/// `WID_RESULT_INVALID_ARGUMENT` naming every problem; bytes that are not
/// such a map `WID_RESULT_DECODE_ERROR`; an unknown `alg`
/// `WID_RESULT_INVALID_ARGUMENT`; no active key of `alg`
/// `WID_RESULT_NO_ACTIVE_KEY`.
///
/// # Safety
/// `kr` must be NULL or a live handle; `request_msgpack` NULL or valid for
/// `len` bytes; `issuer` NULL or valid for `issuer_len` bytes; `out_token`
/// NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue_node(
    kr: *const wid_keyring,
    alg: wid_alg,
    request_msgpack: *const u8,
    len: usize,
    issuer: *const c_char,
    issuer_len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `kr` is NULL or a live handle, `request_msgpack`
        // NULL or valid for `len` bytes, `issuer` NULL or valid for
        // `issuer_len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let alg = alg_in(alg)?;
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        let issuer = unsafe { str_in(issuer, issuer_len, "issuer", MAX_PATH)? };
        require_out(out_token, "out_token")?;
        let req: NodeIdentityRequest = codec::decode_with(request, &limits)?;
        // NULL or empty: no issuer.
        let signer = Issuer::new(keyring.clone()).issuer(issuer);
        let signed = signer.issue_node_with(alg, &req, now_unix)?;
        let token = wid_bytes::from_vec(signed.token.into_bytes());
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_token, "out_token", || token) }
    })
}
