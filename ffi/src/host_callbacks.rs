//! The host's side of a `wid_identity_manager`: a signer that returns tokens
//! its servers signed (over the host's RPC), token exchanges given as
//! derive/refresh/release callbacks, and the watcher told of every new token
//! and secret. Callbacks hand bytes back through a `wid_output`.
//!
//! Every callback is called by the thread running `wid_identity_manager_start`,
//! `_restore` or `_tick` (one at a time per manager), never while the
//! manager's state lock is held. A callback may call back into its own
//! manager: from inside the manager's work (the signer, an exchange, or the
//! watcher told while they run) `_start` and `_restore` fail with
//! `WID_RESULT_INVALID_ARGUMENT` and `_tick` does nothing (the running call
//! does what is due); `_current`, `_secret`, `_next_due_ms` and
//! `_health_json` answer anywhere. The events such calls make are told
//! after the watcher's callback returns, never from inside it. A callback that fails, or returns OK without
//! writing what it must, fails closed: the signing or exchange is counted as
//! failed and retried after a backoff; nothing it wrote is used.

use std::ffi::{c_char, c_void};

use zeroize::Zeroizing;

use super::boundary::{bytes_in, call, invalid, null};
use super::{wid_event, wid_managed, wid_refresh_reason, wid_refreshed, wid_result};
use workload_identity::codec;
use workload_identity::{Error, ResultCode};

mod events;
pub(super) use events::Events;

type Result<T, E = Error> = std::result::Result<T, E>;
use workload_identity::Keyring;
use workload_identity::SignedIdentity;
use workload_identity::manager::{
    Derived, EventKind, ExchangeError, IdentityId, IdentitySigner, IdentityToken, RefreshReason,
    Refreshed, TokenExchange,
};
use workload_identity::model::IssueRequest;

/// The most a callback may write to a `wid_output` for a token or a secret.
pub(super) const MAX_OUTPUT: usize = 64 * 1024;
/// The most of a failing callback's message that is kept.
const MAX_CALLBACK_MESSAGE: usize = 1024;

/// Where a callback writes the bytes it hands back (opaque; owned by the
/// library, valid only during the callback it was passed to): filled with
/// `wid_output_set`.
pub struct wid_output {
    _private: [u8; 0],
}

/// What a `wid_output` pointer points to: a tag first, so a pointer that is
/// not one is refused instead of written through.
#[repr(C)]
pub(super) struct OutputSlot {
    tag: u64,
    value: Option<Zeroizing<Vec<u8>>>,
}

const OUTPUT_TAG: u64 = 0x5749_445f_4f55_0001; // "WID_OU" v1

impl OutputSlot {
    pub(super) fn new() -> OutputSlot {
        OutputSlot {
            tag: OUTPUT_TAG,
            value: None,
        }
    }

    pub(super) fn as_ptr(&mut self) -> *mut wid_output {
        (self as *mut OutputSlot).cast()
    }

    /// What the callback wrote, as UTF-8 text.
    fn text(&self) -> Option<Zeroizing<String>> {
        let bytes = self.value.as_ref()?;
        // Checked UTF-8 by wid_output_set.
        std::str::from_utf8(bytes)
            .ok()
            .map(|s| Zeroizing::new(s.to_string()))
    }

    /// A failing callback's message, if it wrote one: at most 1 KiB, its
    /// control characters replaced (it goes into logs and health).
    fn message(&self) -> Option<String> {
        let m = self.text()?;
        let cut = &m[..floor(&m, MAX_CALLBACK_MESSAGE)];
        let shown: String = cut
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Some(if cut.len() < m.len() {
            format!("{shown}…")
        } else {
            shown
        })
    }
}

/// Why a callback failed, in the host's words first: "<what> failed: <its
/// message> (<code>)", or "<what> failed with <code>" without a message.
fn callback_failure(what: &str, rc: wid_result, out: &OutputSlot) -> String {
    match out.message() {
        Some(m) if !m.trim().is_empty() => format!("{what} failed: {m} ({})", rc_name(rc)),
        _ => format!("{what} failed with {} ({rc})", rc_name(rc)),
    }
}

/// The largest char boundary of `s` at most `max`.
fn floor(s: &str, max: usize) -> usize {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// Sets what a callback hands back (a signed token, a secret) to a copy of
/// `data` (UTF-8, at most 64 KiB), replacing anything set before. On a
/// callback's failure, what it set is read as its error message instead
/// (never put a secret there). `out` is valid only during the callback it
/// was passed to.
///
/// # Safety
/// `out` must be NULL or the `wid_output` passed to a callback that is still
/// running; `data` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_output_set(
    out: *mut wid_output,
    data: *const u8,
    len: usize,
) -> wid_result {
    call(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: `out` is a `wid_output` passed to a running callback (the
        // contract): an `OutputSlot` this module owns, tag first.
        let slot = unsafe { &mut *out.cast::<OutputSlot>() };
        if slot.tag != OUTPUT_TAG {
            return Err(invalid(
                "out",
                "is not a wid_output passed to a running callback",
            ));
        }
        // SAFETY: `data` is NULL or valid for `len` bytes (the contract).
        let bytes = unsafe { bytes_in(data, len, "data", MAX_OUTPUT)? };
        if let Err(e) = std::str::from_utf8(bytes) {
            return Err(invalid(
                "data",
                format!(
                    "is not valid UTF-8 (invalid byte at offset {})",
                    e.valid_up_to()
                ),
            ));
        }
        slot.value = Some(Zeroizing::new(bytes.to_vec()));
        Ok(())
    })
}

/// The name of result `rc`, for messages.
fn rc_name(rc: wid_result) -> &'static str {
    workload_identity::ResultCode::from_u32(rc)
        .map_or("WID_RESULT_UNKNOWN", workload_identity::ResultCode::name)
}

/// A host's signer: called once per identity with its msgpack
/// `IssueRequest` (as `wid_issue` takes it; for a proof-bound identity with
/// the `ProofKey` the manager made) and the time (Unix seconds); it writes
/// the signed token (the compact JWS its servers returned) to `out_token`
/// with `wid_output_set` and returns `WID_RESULT_OK`. Any other result (its
/// message, if it set one, in `out_token`) fails the whole signing, which is
/// retried after a backoff.
pub type wid_identity_sign_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        request_msgpack: *const u8,
        request_len: usize,
        now_unix: i64,
        out_token: *mut wid_output,
    ) -> wid_result,
>;

/// A host exchange's derive: trades the identity token (`token`, UTF-8) for a
/// secret at `now_ms` (Unix ms), writes it to `out_secret` (non-empty) and may
/// set `*out_refresh_at_ms` (preset to 0: refreshed only when the identity is
/// re-signed) to when it wants `refresh` called. Any result but OK (its
/// message in `out_secret`) is a failed exchange, retried after a backoff.
pub type wid_exchange_derive_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        token: *const c_char,
        token_len: usize,
        now_ms: i64,
        out_secret: *mut wid_output,
        out_refresh_at_ms: *mut i64,
    ) -> wid_result,
>;

/// A host exchange's refresh of `secret` (derived earlier from this
/// identity; `token` is the identity's newest token) for `reason` (a
/// `wid_refresh_reason`) at `now_ms`. It must write `*out_outcome` (a
/// `wid_refreshed`, preset to 0, which fails closed): `KEPT` (still good),
/// `RENEWED` (renewed with `token`) or `REPLACED` (a new secret, written to
/// `out_new_secret`); and may set `*out_refresh_at_ms` (preset to 0: only when
/// re-signed). After `WID_REFRESH_REASON_RESTORED` answer `KEPT` only when the
/// saved secret was checked and still works. Any result but OK is a failure:
/// the secret is not handed out unconfirmed, and the refresh is retried.
pub type wid_exchange_refresh_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        secret: *const c_char,
        secret_len: usize,
        token: *const c_char,
        token_len: usize,
        reason: wid_refresh_reason,
        now_ms: i64,
        out_outcome: *mut wid_refreshed,
        out_new_secret: *mut wid_output,
        out_refresh_at_ms: *mut i64,
    ) -> wid_result,
>;

/// A host exchange's release of a secret that was replaced (revoke it), best
/// effort; called only after its successor was saved and delivered.
pub type wid_exchange_release_fn =
    Option<unsafe extern "C" fn(userdata: *mut c_void, secret: *const c_char, secret_len: usize)>;

/// The watcher: told of every new identity token (`what` =
/// `WID_MANAGED_IDENTITY`: `workload` and `name` name the identity, `value`
/// is the token) and every secret delivered (`WID_MANAGED_SECRET`: `name` is
/// the exchange's, `workload` its identity's workload, `value` the secret),
/// with why (`kind`, a `wid_event`). The strings are valid only during the
/// call; copy what is kept. A token is always told before the secrets
/// derived from it.
pub type wid_identity_watch_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        what: wid_managed,
        workload: *const c_char,
        workload_len: usize,
        name: *const c_char,
        name_len: usize,
        value: *const c_char,
        value_len: usize,
        kind: wid_event,
    ),
>;

/// What the watcher is told about (`wid_managed` in C).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ManagedValue {
    /// A new identity token (`WID_MANAGED_IDENTITY`).
    Identity = 1,
    /// A secret delivered by a token exchange (`WID_MANAGED_SECRET`).
    Secret = 2,
}

/// Why a token or secret is new (`wid_event` in C): the C face of the
/// manager's `EventKind`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ManagedEvent {
    /// First signed for a new allocation (`WID_EVENT_INITIAL`).
    Initial = 1,
    /// Renewed (`WID_EVENT_RENEWED`).
    Renewed = 2,
    /// Restored after a restart, reused or re-signed (`WID_EVENT_RESTORED`).
    Restored = 3,
}

impl From<EventKind> for ManagedEvent {
    fn from(kind: EventKind) -> ManagedEvent {
        match kind {
            EventKind::Initial => ManagedEvent::Initial,
            EventKind::Renewed => ManagedEvent::Renewed,
            // EventKind is non_exhaustive; Restored and any later kind.
            _ => ManagedEvent::Restored,
        }
    }
}

/// Why a host exchange's refresh is called (`wid_refresh_reason` in C).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExchangeRefreshReason {
    /// The time it asked for has come, or a failed call is retried
    /// (`WID_REFRESH_REASON_DUE`).
    Due = 1,
    /// The identity was re-signed (`WID_REFRESH_REASON_RESIGNED`).
    Resigned = 2,
    /// After a restart: confirm the saved secret
    /// (`WID_REFRESH_REASON_RESTORED`).
    Restored = 3,
}

impl From<RefreshReason> for ExchangeRefreshReason {
    fn from(reason: RefreshReason) -> ExchangeRefreshReason {
        match reason {
            RefreshReason::Resigned => ExchangeRefreshReason::Resigned,
            RefreshReason::Restored => ExchangeRefreshReason::Restored,
            // RefreshReason is non_exhaustive; Due and any later reason.
            _ => ExchangeRefreshReason::Due,
        }
    }
}

/// What a host exchange's refresh did (`wid_refreshed` in C).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExchangeRefreshed {
    /// The secret stays in use (`WID_REFRESHED_KEPT`).
    Kept = 1,
    /// The secret was renewed with the newest token (`WID_REFRESHED_RENEWED`).
    Renewed = 2,
    /// A new secret replaces it (`WID_REFRESHED_REPLACED`).
    Replaced = 3,
}

/// A callback's `userdata`, sent between threads.
#[derive(Clone, Copy)]
pub(super) struct Userdata(pub(super) *mut c_void);

// SAFETY: the documented contract of every callback taking `userdata` in
// this module is that it may be called from any thread that drives the
// manager (start, restore, tick), with its userdata.
unsafe impl Send for Userdata {}
// SAFETY: as above; the library never reads through the pointer.
unsafe impl Sync for Userdata {}

/// The host's signer over its callback; tokens it returns are checked
/// against the keyring (`SignedIdentity::from_token`).
pub(super) struct HostSigner {
    pub(super) sign:
        unsafe extern "C" fn(*mut c_void, *const u8, usize, i64, *mut wid_output) -> wid_result,
    pub(super) userdata: Userdata,
    pub(super) keyring: Keyring,
}

impl HostSigner {
    fn sign_one(&self, request: &IssueRequest, now: i64) -> Result<SignedIdentity> {
        let bytes = codec::encode(request)?;
        let mut out = OutputSlot::new();
        // SAFETY: the callback's contract; `bytes` and `out` outlive the call.
        let rc = unsafe {
            (self.sign)(
                self.userdata.0,
                bytes.as_ptr(),
                bytes.len(),
                now,
                out.as_ptr(),
            )
        };
        let failed = |why: String| Error::invalid("wid_identity_manager", "signer", why);
        if rc != ResultCode::Ok as wid_result {
            return Err(failed(callback_failure("the host's signer", rc, &out)));
        }
        let token = out.text().filter(|t| !t.is_empty()).ok_or_else(|| {
            failed(
                "the host's signer answered success without setting a token (wid_output_set)"
                    .into(),
            )
        })?;
        SignedIdentity::from_token(token.to_string(), &self.keyring).map_err(|e| {
            failed(format!(
                "the token it returned does not verify against the manager's keyring: {e}"
            ))
        })
    }
}

impl IdentitySigner for HostSigner {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>> {
        requests.iter().map(|r| self.sign_one(r, now)).collect()
    }
}

/// The watcher callback's type.
pub(super) type WatchFn = unsafe extern "C" fn(
    *mut c_void,
    u32,
    *const c_char,
    usize,
    *const c_char,
    usize,
    *const c_char,
    usize,
    u32,
);
/// The derive callback's type.
pub(super) type DeriveFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    i64,
    *mut wid_output,
    *mut i64,
) -> wid_result;
/// The refresh callback's type.
pub(super) type RefreshFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *const c_char,
    usize,
    u32,
    i64,
    *mut u32,
    *mut wid_output,
    *mut i64,
) -> wid_result;
/// The release callback's type.
pub(super) type ReleaseFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize);

/// A host's token exchange over its callbacks.
pub(super) struct HostExchange {
    pub(super) name: String,
    pub(super) identity: IdentityId,
    pub(super) derive: DeriveFn,
    pub(super) refresh: Option<RefreshFn>,
    pub(super) release: Option<ReleaseFn>,
    pub(super) userdata: Userdata,
    pub(super) events: std::sync::Arc<Events>,
}

/// A refresh time from C: 0 or less is none.
fn refresh_time(ms: i64) -> Option<i64> {
    (ms > 0).then_some(ms)
}

impl HostExchange {
    fn failed(&self, what: &str, rc: wid_result, out: &OutputSlot) -> ExchangeError {
        ExchangeError(callback_failure(&format!("its {what}"), rc, out))
    }

    fn secret_from(
        &self,
        what: &str,
        out: &OutputSlot,
    ) -> std::result::Result<String, ExchangeError> {
        out.text()
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string())
            .ok_or_else(|| {
                ExchangeError(format!(
                    "its {what} answered success without setting a secret (wid_output_set)"
                ))
            })
    }
}

impl TokenExchange for HostExchange {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> &IdentityId {
        &self.identity
    }

    fn exchange(&self, token: &IdentityToken) -> std::result::Result<String, ExchangeError> {
        // The manager calls derive; this keeps the trait's contract.
        let d = self.derive(token, 0)?;
        Ok(d.secret.clone())
    }

    fn derive(
        &self,
        token: &IdentityToken,
        now_ms: i64,
    ) -> std::result::Result<Derived, ExchangeError> {
        let mut out = OutputSlot::new();
        let mut refresh_at = 0i64;
        // SAFETY: the callback's contract; every pointer outlives the call.
        let rc = unsafe {
            (self.derive)(
                self.userdata.0,
                token.token.as_ptr().cast(),
                token.token.len(),
                now_ms,
                out.as_ptr(),
                &mut refresh_at,
            )
        };
        if rc != ResultCode::Ok as wid_result {
            return Err(self.failed("derive", rc, &out));
        }
        let secret = self.secret_from("derive", &out)?;
        Ok(Derived::new(secret, refresh_time(refresh_at)))
    }

    fn refresh(
        &self,
        secret: &str,
        token: &IdentityToken,
        reason: RefreshReason,
        now_ms: i64,
    ) -> std::result::Result<Refreshed, ExchangeError> {
        let Some(refresh) = self.refresh else {
            // No refresh callback: a secret that never expires, except that
            // a restored one cannot be confirmed, so it is derived again.
            return match reason {
                RefreshReason::Restored => self.derive(token, now_ms).map(Refreshed::Replaced),
                _ => Ok(Refreshed::Kept {
                    refresh_at_ms: None,
                }),
            };
        };
        let mut outcome = 0u32;
        let mut out = OutputSlot::new();
        let mut refresh_at = 0i64;
        // SAFETY: the callback's contract; every pointer outlives the call.
        let rc = unsafe {
            refresh(
                self.userdata.0,
                secret.as_ptr().cast(),
                secret.len(),
                token.token.as_ptr().cast(),
                token.token.len(),
                ExchangeRefreshReason::from(reason) as u32,
                now_ms,
                &mut outcome,
                out.as_ptr(),
                &mut refresh_at,
            )
        };
        if rc != ResultCode::Ok as wid_result {
            return Err(self.failed("refresh", rc, &out));
        }
        let refresh_at_ms = refresh_time(refresh_at);
        match outcome {
            o if o == ExchangeRefreshed::Kept as u32 => Ok(Refreshed::Kept { refresh_at_ms }),
            o if o == ExchangeRefreshed::Renewed as u32 => Ok(Refreshed::Renewed { refresh_at_ms }),
            o if o == ExchangeRefreshed::Replaced as u32 => {
                let secret = self.secret_from("refresh", &out)?;
                Ok(Refreshed::Replaced(Derived::new(secret, refresh_at_ms)))
            }
            other => Err(ExchangeError(format!(
                "its refresh answered success with outcome {other}: expected kept (WID_REFRESHED_KEPT, 1), renewed (2) or replaced (3)"
            ))),
        }
    }

    fn deliver(&self, secret: &str, kind: EventKind) {
        self.events
            .deliver(&self.identity, &self.name, secret, kind);
    }

    fn release(&self, secret: &str) {
        if let Some(release) = self.release {
            // SAFETY: the callback's contract; `secret` outlives the call.
            unsafe { release(self.userdata.0, secret.as_ptr().cast(), secret.len()) };
        }
    }
}
