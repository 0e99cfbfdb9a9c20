//! A built `wid_identity_manager` at work: started or restored, ticked, and
//! asked for its identities, its exchanges' secrets and its health.

use std::ffi::c_char;

use serde_json::json;

use super::super::boundary::{call, invalid, str_in};
use super::super::handle::{self, out_optional, require_out};
use super::super::{wid_bytes, wid_result};
use super::{HostManager, MAX_NAME, identity_in, manager_ref, wid_identity_manager};
use workload_identity::Error;
use workload_identity::manager::IdentityManager;

/// Runs `f` on the manager, then tells the watcher what it has not been
/// told.
fn driving<T>(
    host: &HostManager,
    f: impl FnOnce(&IdentityManager) -> Result<T, Error>,
) -> Result<T, Error> {
    let result = f(&host.manager);
    host.events.flush();
    result
}

/// A new allocation: signs every identity at `now_ms` (Unix milliseconds),
/// saves them, then runs every exchange (its secret saved, then delivered).
/// A signing failure is its code; an exchange's failure is
/// `WID_RESULT_TOKEN_EXCHANGE_FAILED` (the identities are signed and in use;
/// the exchange is retried by `_tick` after a backoff, and its secret is
/// never handed out before it succeeds). Called from inside one of this
/// manager's own callbacks while it works (its signer, an exchange, the
/// watcher told meanwhile): `WID_RESULT_INVALID_ARGUMENT`, nothing done.
///
/// # Safety
/// `m` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_start(
    m: *const wid_identity_manager,
    now_ms: i64,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let host = unsafe { manager_ref(m)? };
        driving(host, |mgr| mgr.start(now_ms))
    })
}

/// After a restart: takes the saved identities back if they still verify,
/// are what the requests ask for and are outside their renewal window (else
/// signs anew); each exchange's saved secret is confirmed by the exchange
/// (a Vault token with `lookup-self`, a Consul token with `token/self`) and
/// reused, or derived anew: an unconfirmed or empty secret is never handed
/// out. `*out_report_json` (may be NULL) receives
/// `{"reused":bool,"reason":"...","rederived":["<exchange>",...]}`. Codes as
/// `wid_identity_manager_start` (from inside one of the manager's own
/// callbacks, too).
///
/// # Safety
/// `m` must be NULL or a live handle; `out_report_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_restore(
    m: *const wid_identity_manager,
    now_ms: i64,
    out_report_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let host = unsafe { manager_ref(m)? };
        let report = driving(host, |mgr| mgr.restore(now_ms))?;
        let json = json!({
            "reused": report.reused,
            "reason": report.reason,
            "rederived": report.rederived,
        })
        .to_string();
        // SAFETY: `out_report_json` is NULL or writable (the contract).
        unsafe { out_optional(out_report_json, || wid_bytes::from_vec(json.into_bytes())) };
        Ok(())
    })
}

/// Does whatever is due at `now_ms` (a renewal, an exchange's refresh, a
/// retry) and always returns `WID_RESULT_OK`: failures are retried after a
/// backoff and shown by `_health_json`. `*out_next_due_ms` (may be NULL)
/// receives when to tick next (Unix ms), or -1 when nothing will expire.
/// From inside one of this manager's own callbacks while it works, it does
/// nothing (the running call does what is due) and says when to tick next.
///
/// # Safety
/// `m` must be NULL or a live handle; `out_next_due_ms` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_tick(
    m: *const wid_identity_manager,
    now_ms: i64,
    out_next_due_ms: *mut i64,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let host = unsafe { manager_ref(m)? };
        let next = driving(host, |mgr| Ok(mgr.tick(now_ms)))?;
        // SAFETY: `out_next_due_ms` is NULL or writable (the contract).
        unsafe { out_optional(out_next_due_ms, || next.unwrap_or(-1)) };
        Ok(())
    })
}

/// The allocation ended: revokes every secret its exchanges hold (in use,
/// replaced, or saved by an earlier process and not yet revoked: a manager
/// built after a restart and never started or restored ends it from its
/// saved state), then removes its saved state file. Afterwards the manager
/// signs nothing more: `_tick` does nothing (`*out_next_due_ms` -1),
/// `_start` and `_restore` are `WID_RESULT_INVALID_ARGUMENT`, `_current` and
/// `_secret` find nothing; identity tokens already handed out stay valid
/// until they expire. A secret saved from another server than its exchange
/// talks to now is not sent anywhere. A revocation that failed (its server
/// unreachable) is `WID_RESULT_TOKEN_EXCHANGE_FAILED`, naming the exchange;
/// the state file then keeps exactly the secrets not revoked: call again to
/// retry. The file not removable: `WID_RESULT_IO_ERROR`. From inside one of
/// the manager's own callbacks: `WID_RESULT_INVALID_ARGUMENT`, nothing done.
///
/// # Safety
/// `m` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_end_allocation(
    m: *const wid_identity_manager,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let host = unsafe { manager_ref(m)? };
        driving(host, IdentityManager::end_allocation)
    })
}

/// `*out` receives when `_tick` next has work (Unix ms). Nothing scheduled
/// (before `_start` or `_restore`, or nothing expires) is
/// `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `m` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_next_due_ms(
    m: *const wid_identity_manager,
    out: *mut i64,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let host = unsafe { manager_ref(m)? };
        require_out(out, "out")?;
        let due = host.manager.next_due_ms().ok_or_else(|| {
            invalid(
                "m",
                "has nothing scheduled (call wid_identity_manager_start or _restore first)",
            )
        })?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || due) }
    })
}

/// `*out_token` receives the token of identity (`workload`, `identity`) while
/// it is valid at `now_ms`. An identity not managed here, or one without a
/// valid token (never signed, or expired while renewals failed), is
/// `WID_RESULT_INVALID_ARGUMENT`, and `*out_token` is not written.
///
/// # Safety
/// `m` must be NULL or a live handle; the strings NULL or valid for their
/// lengths; `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_current(
    m: *const wid_identity_manager,
    workload: *const c_char,
    workload_len: usize,
    identity: *const c_char,
    identity_len: usize,
    now_ms: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `m` NULL or live, the strings NULL or valid
        // for their lengths (the contract).
        let host = unsafe { manager_ref(m)? };
        let key = unsafe { identity_in(workload, workload_len, identity, identity_len)? };
        require_out(out_token, "out_token")?;
        let token = host.manager.current(&key, now_ms).ok_or_else(|| {
            Error::invalid(
                "wid_identity_manager",
                "current",
                format!(
                    "no valid token for identity {key} (not managed here, never signed, or expired while renewals failed)"
                ),
            )
        })?;
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_token, "out_token", || {
                wid_bytes::from_vec(token.token.clone().into_bytes())
            })
        }
    })
}

/// `*out_secret` receives the secret exchange `exchange` (its name) holds: a
/// derived or confirmed one, never one held back unconfirmed. None (no such
/// exchange, or no secret yet) is `WID_RESULT_INVALID_ARGUMENT`. Free it with
/// `wid_bytes_free` (which does not zeroize it: overwrite it first if that
/// matters).
///
/// # Safety
/// `m` must be NULL or a live handle; `exchange` NULL or valid for
/// `exchange_len` bytes; `out_secret` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_secret(
    m: *const wid_identity_manager,
    exchange: *const c_char,
    exchange_len: usize,
    out_secret: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `m` NULL or live, `exchange` NULL or valid for
        // its length (the contract).
        let host = unsafe { manager_ref(m)? };
        let name = unsafe { str_in(exchange, exchange_len, "exchange", MAX_NAME)? };
        require_out(out_secret, "out_secret")?;
        let secret = host
            .manager
            .secret(name)
            .filter(|s| !s.secret.is_empty())
            .ok_or_else(|| {
                Error::invalid(
                    "wid_identity_manager",
                    "secret",
                    format!(
                        "exchange {name:?} holds no secret (no exchange of that name, or none derived or confirmed yet)"
                    ),
                )
            })?;
        // SAFETY: `out_secret` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_secret, "out_secret", || {
                wid_bytes::from_vec(secret.secret.clone().into_bytes())
            })
        }
    })
}

/// `*out_json` receives the manager's health at `now_ms` as a JSON object
/// (never a token or a secret): `alloc_id`; `identities`, each
/// `{"workload","identity","valid","expires_at" (Unix s or null),
/// "expires_in_ms" (negative once expired, or null)}`; `exchanges`, each
/// `{"name","workload","identity","has_secret","held_back","failures",
/// "next_attempt_ms","last_error"}`; `sign_failures`, `last_sign_error`,
/// `next_signing_ms` and `at_risk` (an identity without a valid token,
/// signing failing, an exchange failing or without a secret).
///
/// # Safety
/// `m` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_health_json(
    m: *const wid_identity_manager,
    now_ms: i64,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `m` is NULL or a live handle (the contract).
        let host = unsafe { manager_ref(m)? };
        require_out(out_json, "out_json")?;
        let h = host.manager.health(now_ms);
        let json = json!({
            "alloc_id": h.alloc_id,
            "identities": h.identities.iter().map(|i| json!({
                "workload": i.key.workload,
                "identity": i.key.name,
                "valid": i.valid,
                "expires_at": i.expires_at,
                "expires_in_ms": i.expires_in_ms,
            })).collect::<Vec<_>>(),
            "exchanges": h.exchanges.iter().map(|x| json!({
                "name": x.name,
                "workload": x.identity.workload,
                "identity": x.identity.name,
                "has_secret": x.has_secret,
                "held_back": x.held_back,
                "failures": x.failures,
                "next_attempt_ms": x.next_attempt_ms,
                "last_error": x.last_error,
            })).collect::<Vec<_>>(),
            "sign_failures": h.sign_failures,
            "last_sign_error": h.last_sign_error,
            "next_signing_ms": h.next_signing_ms,
            "at_risk": h.at_risk,
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
