//! `wid_node_identity_manager`: a client node's own identity token, kept by
//! a [`NodeIdentityManager`] (renewed at two thirds of its life, retried
//! with a backoff, saved in a state directory and taken back after a
//! restart), for hosts that drive it from C or Go.

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::boundary::{bytes_in, call, call_void, invalid, str_in};
use super::handle::{self, Castable, out_optional, require_out};
use super::issuer::wid_issuer;
use super::keyring::{MAX_PATH, keyring_ref, wid_keyring};
use super::{wid_bytes, wid_result};
use workload_identity::Error;
use workload_identity::codec::{self, DecodeLimits};
use workload_identity::manager::{FileIdentityDb, NodeIdentityManager};
use workload_identity::model::NodeIdentityRequest;

/// A node identity manager (opaque; reference counted, safe to use from many
/// threads at once): made by `wid_node_identity_manager_new`, released by
/// `wid_node_identity_manager_free`.
pub struct wid_node_identity_manager {
    _private: [u8; 0],
}

impl Castable for wid_node_identity_manager {
    type Rust = NodeIdentityManager;
    const TAG: u64 = 0x5749_445f_4e4d_0001; // "WID_NM" v1
    const NAME: &'static str = "wid_node_identity_manager";
}

/// The manager behind handle `m`.
///
/// # Safety
/// `m` must be NULL or a live handle from this library.
unsafe fn manager_ref<'a>(
    m: *const wid_node_identity_manager,
) -> Result<&'a NodeIdentityManager, Error> {
    // SAFETY: `m` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(m, "m") }
}

/// Makes a manager for the node a msgpack `NodeIdentityRequest` describes
/// (decoded as `wid_issue_node` decodes it, and checked at once: an invalid
/// request is `WID_RESULT_INVALID_ARGUMENT` naming every problem, bytes that
/// are not such a map `WID_RESULT_DECODE_ERROR`). Tokens are signed by `iss`
/// (its algorithm and `iss`, as `wid_issuer_issue_node`), checked against
/// `kr` (a token that does not verify against it, restored or newly signed,
/// is never used: normally the keyring `iss` was built from) and saved in
/// the directory `state_dir` (UTF-8, at most 4096 bytes; it must exist: a
/// missing one, or a path that is not a directory, is
/// `WID_RESULT_IO_ERROR`; empty is `WID_RESULT_INVALID_ARGUMENT`). The
/// manager keeps its own references to the issuer and the keyring. Nothing
/// is signed yet: call `wid_node_identity_manager_start` (a fresh node) or
/// `wid_node_identity_manager_restore` (after a restart). `*out` receives a
/// handle to free with `wid_node_identity_manager_free`.
///
/// # Safety
/// `iss` and `kr` must be NULL or live handles; `request_msgpack` NULL or
/// valid for `len` bytes; `state_dir` NULL or valid for `state_dir_len`
/// bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_new(
    iss: *const wid_issuer,
    kr: *const wid_keyring,
    request_msgpack: *const u8,
    len: usize,
    state_dir: *const c_char,
    state_dir_len: usize,
    out: *mut *mut wid_node_identity_manager,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `iss` and `kr` are NULL or live handles,
        // `request_msgpack` and `state_dir` NULL or valid for their lengths
        // (the contract).
        let issuer = unsafe { handle::borrow::<wid_issuer>(iss, "iss")? };
        let keyring = unsafe { keyring_ref(kr)? };
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        let dir = unsafe { str_in(state_dir, state_dir_len, "state_dir", MAX_PATH)? };
        require_out(out, "out")?;
        let req: NodeIdentityRequest = codec::decode_with(request, &limits)?;
        req.validate()?;
        if dir.is_empty() {
            return Err(invalid("state_dir", "is empty (expected a directory path)"));
        }
        let meta = std::fs::metadata(Path::new(dir)).map_err(|e| Error::Io {
            context: format!("node identity state directory {dir}"),
            error: e,
        })?;
        if !meta.is_dir() {
            return Err(Error::Io {
                context: format!("node identity state directory {dir}"),
                error: std::io::Error::other("exists but is not a directory"),
            });
        }
        let manager = NodeIdentityManager::new(
            req,
            Arc::new(issuer.clone()),
            Arc::new(FileIdentityDb::new(dir)),
            keyring.clone(),
        );
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(manager)) }
    })
}

/// Releases a manager handle (reference counted). The saved state stays in
/// its directory for a later `wid_node_identity_manager_restore`. NULL-safe.
///
/// # Safety
/// `m` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_free(m: *const wid_node_identity_manager) {
    // SAFETY: `m` is NULL or a live manager handle the caller gives up.
    call_void(|| unsafe { handle::free(m) });
}

/// Signs a first token at `now_ms` (Unix milliseconds) and saves it (a token
/// that cannot be saved is still used; the failure is logged). A signing
/// failure is its code (`WID_RESULT_NO_ACTIVE_KEY`,
/// `WID_RESULT_INVALID_ARGUMENT`, ...); the next attempt is then backed off
/// and made by `wid_node_identity_manager_tick`.
///
/// # Safety
/// `m` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_start(
    m: *const wid_node_identity_manager,
    now_ms: i64,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let manager = unsafe { manager_ref(m)? };
        manager.start(now_ms).map(drop)
    })
}

/// After a restart: takes the saved token back if it still verifies against
/// the keyring, is this node's identity as the request gives it, matches its
/// saved record and has not expired at `now_ms` (renewing at once when it is
/// already due, and keeping it when that fails); anything else signs a new
/// one (a failure of that is its code). `*out_reused` (may be NULL) receives
/// 1 when the saved token was taken back, 0 when a new one was signed.
///
/// # Safety
/// `m` must be NULL or a live handle; `out_reused` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_restore(
    m: *const wid_node_identity_manager,
    now_ms: i64,
    out_reused: *mut u32,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let manager = unsafe { manager_ref(m)? };
        let reused = manager.restore(now_ms)?;
        // SAFETY: `out_reused` is NULL or writable (the contract).
        unsafe { out_optional(out_reused, || u32::from(reused)) };
        Ok(())
    })
}

/// Renews when due at `now_ms` (two thirds of the token's life, less up to
/// 5 % of it as jitter, or the retry after a failure); before that it does
/// nothing and returns `WID_RESULT_OK`. A failed renewal is its code
/// (`WID_RESULT_NO_ACTIVE_KEY`, ...): the current token is kept while it is
/// valid, and the next attempt backed off (1 s doubling to 60 s; see
/// `wid_node_identity_manager_next_due_ms`). Call it at least as often as
/// the due time says, e.g. from a timer.
///
/// # Safety
/// `m` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_tick(
    m: *const wid_node_identity_manager,
    now_ms: i64,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let manager = unsafe { manager_ref(m)? };
        manager.tick(now_ms)
    })
}

/// `*out` receives when `wid_node_identity_manager_tick` next has work (Unix
/// milliseconds). Before the first `_start` or `_restore` nothing is
/// scheduled: `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `m` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_next_due_ms(
    m: *const wid_node_identity_manager,
    out: *mut i64,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let manager = unsafe { manager_ref(m)? };
        require_out(out, "out")?;
        let due = manager.next_due_ms().ok_or_else(|| {
            invalid(
                "m",
                "has nothing scheduled (call wid_node_identity_manager_start or _restore first)",
            )
        })?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || due) }
    })
}

/// `*out_token` receives the current token (the compact JWS) while it has not
/// expired at `now_ms`. Without one (never signed, or expired while renewals
/// failed) the result is `WID_RESULT_INVALID_ARGUMENT` with the message "no
/// valid node identity ..." and `*out_token` is not written.
///
/// # Safety
/// `m` must be NULL or a live handle; `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_current(
    m: *const wid_node_identity_manager,
    now_ms: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let manager = unsafe { manager_ref(m)? };
        require_out(out_token, "out_token")?;
        let token = manager.current(now_ms).ok_or_else(|| {
            Error::invalid(
                "wid_node_identity_manager",
                "current",
                "no valid node identity (none signed yet, or it expired while renewals failed)",
            )
        })?;
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_token, "out_token", || {
                wid_bytes::from_vec(token.token.into_bytes())
            })
        }
    })
}

/// `*out_json` receives the manager's health at `now_ms` as a JSON object:
/// `expires_in_ms` (until the token expires, negative once it has; `null`
/// without a token), `renewal_overdue_ms` (how late the next attempt is, 0
/// when not due), `at_risk` (renewals failing, a renewal more than a minute
/// overdue, or no valid token), `signed`, `failures`,
/// `consecutive_failures`, `expires_at` (Unix seconds or `null`),
/// `next_attempt_ms` (Unix milliseconds or `null`),
/// `expires_before_next_attempt` and `last_error` (the last failure's
/// message, `null` after a success; never a token).
///
/// # Safety
/// `m` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_node_identity_manager_health_json(
    m: *const wid_node_identity_manager,
    now_ms: i64,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let manager = unsafe { manager_ref(m)? };
        require_out(out_json, "out_json")?;
        let h = manager.health(now_ms);
        let s = &h.stats;
        let json = json!({
            "expires_in_ms": h.expires_in_ms,
            "renewal_overdue_ms": h.renewal_overdue_ms,
            "at_risk": h.at_risk,
            "signed": s.signed,
            "failures": s.failures,
            "consecutive_failures": s.consecutive_failures,
            "expires_at": s.expires_at,
            "next_attempt_ms": s.next_attempt_ms,
            "expires_before_next_attempt": s.expires_before_next_attempt,
            "last_error": s.last_error,
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
