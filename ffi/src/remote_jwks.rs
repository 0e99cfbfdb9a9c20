//! `wid_remote_jwks`: a verify-only keyring that follows a remote JWKS (a
//! URL, or an OIDC issuer's discovery document), over the Rust
//! `RemoteJwks` (cargo feature `remote-jwks`): its cooldown, single flight,
//! last-good-set and HTTPS rules, a background refresher, and its stats.
//!
//! The symbols are the same in every build: without the feature every
//! function here returns `WID_RESULT_INVALID_ARGUMENT` and says why, and the
//! `_free` functions do nothing (no handle can exist).

#[cfg(feature = "remote-jwks")]
mod imp;

use std::ffi::c_char;

use super::boundary::{call, call_void};
use super::feature_gate::with_feature;
use super::keyring::wid_keyring;
use super::{wid_bytes, wid_result};

/// A remote JWKS source being configured (opaque; one owner, not reference
/// counted): made by `wid_remote_jwks_builder_new` or
/// `wid_remote_jwks_builder_new_discover`, turned into sources by
/// `wid_remote_jwks_builder_build`, released by
/// `wid_remote_jwks_builder_free`.
pub struct wid_remote_jwks_builder {
    _private: [u8; 0],
}

/// A remote JWKS source (opaque; reference counted, safe to use from many
/// threads at once): made by `wid_remote_jwks_builder_build`, released by
/// `wid_remote_jwks_free` (which stops its refresher).
pub struct wid_remote_jwks {
    _private: [u8; 0],
}

/// The error of every function here in a build without `remote-jwks`.
#[cfg(not(feature = "remote-jwks"))]
fn disabled() -> workload_identity::Error {
    super::boundary::invalid(
        "wid_remote_jwks",
        "this library was built without the cargo feature `remote-jwks`: build it with \
         `cargo build --release -p workload-identity-ffi` (the feature is on by default) to follow a remote JWKS",
    )
}

/// Starts configuring a source that fetches the JWKS at `jwks_url`
/// (`https://...`; plain `http` only to a loopback host, and only with
/// `wid_remote_jwks_builder_set_allow_http_loopback`). The URL is checked
/// here as far as it can be without that setting (a URL, with a host, no
/// user info, fragment or whitespace, `https` or loopback `http`) and again
/// by `wid_remote_jwks_builder_build`; a bad one is
/// `WID_RESULT_INVALID_ARGUMENT` naming the problem (never the URL's query,
/// which may carry a secret). At most 8192 bytes. `*out` receives a handle
/// to free with `wid_remote_jwks_builder_free`.
///
/// Defaults: Mozilla's root certificates, a 5 s timeout per request,
/// refreshes between 1 minute and 1 day apart (1 hour when the response has
/// no `Cache-Control: max-age`), 15 s between fetches started by unknown
/// kids, bodies up to 512 KiB, up to 100 keys.
///
/// Without the cargo feature `remote-jwks` (see bindings/c/README.md) this
/// and every other `wid_remote_jwks_*` function returns
/// `WID_RESULT_INVALID_ARGUMENT`, the message naming the feature.
///
/// # Safety
/// `jwks_url` must be NULL or valid for `len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_new(
    jwks_url: *const c_char,
    len: usize,
    out: *mut *mut wid_remote_jwks_builder,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (jwks_url, len, out) => unsafe { imp::builder_new(jwks_url, len, false, out) }),
    )
}

/// Like `wid_remote_jwks_builder_new`, for an OIDC issuer: the source reads
/// `<issuer>/.well-known/openid-configuration`, whose `issuer` must equal
/// `issuer` exactly, and fetches its `jwks_uri` (which must pass the same
/// URL rules). An issuer with a query is `WID_RESULT_INVALID_ARGUMENT`.
/// `*out` receives a builder to free with `wid_remote_jwks_builder_free`.
///
/// # Safety
/// `issuer` must be NULL or valid for `len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_new_discover(
    issuer: *const c_char,
    len: usize,
    out: *mut *mut wid_remote_jwks_builder,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (issuer, len, out) => unsafe { imp::builder_new(issuer, len, true, out) }),
    )
}

/// Releases a builder (sources built from it are not affected). NULL-safe.
///
/// # Safety
/// `b` must be NULL or a handle from this library not yet freed, with no
/// call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_free(b: *mut wid_remote_jwks_builder) {
    #[cfg(feature = "remote-jwks")]
    // SAFETY: `b` is NULL or a live builder handle the caller gives up.
    call_void(|| unsafe { super::handle::free_owned(b) });
    #[cfg(not(feature = "remote-jwks"))]
    call_void(|| {
        let _ = b;
    });
}

/// Trusts only the certificates of this PEM bundle (one or more
/// `CERTIFICATE` blocks; other PEM items are ignored) instead of Mozilla's
/// roots: for an issuer behind a private CA. `(NULL, 0)` goes back to
/// Mozilla's roots. A bundle without a certificate, or that is not PEM, is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged. At most
/// 1 MiB.
///
/// # Safety
/// `b` must be NULL or a live handle; `pem` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_ca_bundle_pem(
    b: *mut wid_remote_jwks_builder,
    pem: *const u8,
    len: usize,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, pem, len) => unsafe { imp::set_ca_bundle_pem(b, pem, len) }),
    )
}

/// `allow` 1: plain `http` URLs whose host is a loopback address
/// (`127.0.0.0/8`, `::1`, `localhost`) are allowed (tests, a sidecar on
/// the same machine), and no redirect is followed; 0: `https` only (the
/// default). Other `http` URLs are always refused. Any other value is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_allow_http_loopback(
    b: *mut wid_remote_jwks_builder,
    allow: u32,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, allow) => unsafe { imp::set_allow_http_loopback(b, allow) }),
    )
}

/// Sets the whole time one request may take, connection to last byte, in
/// milliseconds (default 5000). 0 or more than a week (604800000) is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_timeout_ms(
    b: *mut wid_remote_jwks_builder,
    ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, ms) => unsafe { imp::set_timeout_ms(b, ms) }),
    )
}

/// Sets the bounds on the time between successful fetches, in
/// milliseconds, whatever the server's `max-age` says (default 60000 to
/// 86400000: a minute to a day); the minimum is also the wait before
/// retrying after a failure. `min_ms` above `max_ms`, or `max_ms` above a
/// week (604800000), is `WID_RESULT_INVALID_ARGUMENT`, and the builder is
/// unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_refresh_bounds_ms(
    b: *mut wid_remote_jwks_builder,
    min_ms: u64,
    max_ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, min_ms, max_ms) => unsafe { imp::set_refresh_bounds_ms(b, min_ms, max_ms) }),
    )
}

/// Sets the time between fetches when a response has no `max-age`, in
/// milliseconds (default 3600000, an hour; clamped to the refresh bounds
/// when used). More than a week (604800000) is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_default_refresh_ms(
    b: *mut wid_remote_jwks_builder,
    ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, ms) => unsafe { imp::set_default_refresh_ms(b, ms) }),
    )
}

/// Sets the least time between two fetches started by unknown kids, in
/// milliseconds (default 15000; 0: no limit but the single flight, one
/// fetch at a time). A verifier over the source's keyring that meets a
/// `kid` it does not hold starts a fetch at once (on a thread of the
/// library's) and waits for the key (its key wait); a flood of made-up kids
/// costs the issuer one request per cooldown. More than a week (604800000)
/// is `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(
    b: *mut wid_remote_jwks_builder,
    ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, ms) => unsafe { imp::set_unknown_kid_cooldown_ms(b, ms) }),
    )
}

/// Sets the largest response body read, in bytes (default 524288, 512 KiB);
/// a larger body fails the fetch. 0 or more than 16777216 (16 MiB) is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_max_body_bytes(
    b: *mut wid_remote_jwks_builder,
    max: usize,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, max) => unsafe { imp::set_max_body_bytes(b, max) }),
    )
}

/// Sets the most entries a JWKS may list, skipped ones included (default
/// 100); a larger set fails the fetch. 0 is `WID_RESULT_INVALID_ARGUMENT`,
/// and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_set_max_keys(
    b: *mut wid_remote_jwks_builder,
    max: usize,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, max) => unsafe { imp::set_max_keys(b, max) }),
    )
}

/// Makes a source with the builder's current settings: an empty keyring,
/// nothing fetched yet (call `wid_remote_jwks_refresh` at startup, start the
/// refresher, or let the first unknown kid fetch). `*out` receives a handle
/// to free with `wid_remote_jwks_free`. The builder is not consumed. A URL
/// that the settings do not allow (plain `http` without
/// `wid_remote_jwks_builder_set_allow_http_loopback`) is
/// `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `b` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_builder_build(
    b: *const wid_remote_jwks_builder,
    out: *mut *mut wid_remote_jwks,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(|| with_feature!("remote-jwks", disabled(), (b, out) => unsafe { imp::build(b, out) }))
}

/// Releases a source handle (reference counted). The last reference stops
/// the refresher (after a fetch in progress, which the timeout bounds, so
/// this may block that long); a fetch for an unknown kid already started
/// (on a thread of its own) is not waited for: it may still finish, within
/// the timeout, and put the keys it fetched into the keyring. Keyrings from
/// `wid_remote_jwks_keyring` keep the keys they hold but are no longer
/// refreshed. Do not unload the library within the timeout of a free.
/// NULL-safe.
///
/// # Safety
/// `r` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_free(r: *const wid_remote_jwks) {
    #[cfg(feature = "remote-jwks")]
    // SAFETY: `r` is NULL or a live source handle the caller gives up.
    call_void(|| unsafe { super::handle::free(r) });
    #[cfg(not(feature = "remote-jwks"))]
    call_void(|| {
        let _ = r;
    });
}

/// The source's keyring, as a new `wid_keyring` handle (free it with
/// `wid_keyring_free`): give it to `wid_verifier_builder_new` (or
/// `wid_verifier_new*`). It is shared with the source, not a copy: each
/// successful fetch replaces its keys (a key that left the remote set stops
/// verifying), and a verifier meeting an unknown `kid` starts a fetch while
/// it waits for the key. It belongs to the source: do not insert, rotate or
/// import keys into it. Keep the source alive while it is used: once
/// `wid_remote_jwks_free` releases the source, the keyring keeps its last
/// keys but is no longer refreshed.
///
/// # Safety
/// `r` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_keyring(
    r: *const wid_remote_jwks,
    out: *mut *mut wid_keyring,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (r, out) => unsafe { imp::keyring(r, "r", out) }),
    )
}

/// Fetches now, on this thread (waiting first for a fetch in flight: one
/// request at a time). On success `*out_report_json` (may be NULL)
/// receives what it did: `{"jwks_uri":"...","keys":["kid",...],
/// "added":[...],"removed":[...],"skipped":N,"max_age_ms":N or null,
/// "next_refresh_in_ms":N}` (the URL without its query). On failure the
/// keyring keeps its last good keys and the failure is counted in the
/// stats: a network or HTTP failure (down, slow past the timeout, a status
/// other than 200) is `WID_RESULT_IO_ERROR`, a body that is not an
/// acceptable JWKS (too large, too many keys, not JSON) or discovery
/// document `WID_RESULT_DECODE_ERROR`, a set the keyring refuses (a
/// private key, a weak key, a duplicate `kid`) its code
/// (`WID_RESULT_INVALID_ARGUMENT`, ...).
///
/// # Safety
/// `r` must be NULL or a live handle; `out_report_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_refresh(
    r: *const wid_remote_jwks,
    out_report_json: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (r, out_report_json) => unsafe { imp::refresh(r, "r", out_report_json) }),
    )
}

/// Starts a background thread that fetches whenever a fetch is due (at
/// once if none was made yet, then after each response's `max-age` within
/// the refresh bounds, and after the minimum bound following a failure).
/// It runs until the source is freed (`wid_remote_jwks_free` stops it and
/// waits for it). Calling it again while it runs does nothing and returns
/// `WID_RESULT_OK`. `WID_RESULT_IO_ERROR` if the thread cannot be started.
///
/// # Safety
/// `r` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_start_refresher(r: *const wid_remote_jwks) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (r) => unsafe { imp::start_refresher(r, "r") }),
    )
}

/// What the source has done so far, as JSON: `{"fetches":N, "failures":N,
/// "unknown_kid_fetches":N, "unknown_kid_suppressed":N, "stale":bool,
/// "last_error":"..." or null, "last_attempt_ms":N or null,
/// "last_success_ms":N or null, "next_refresh_ms":N, "jwks_uri":"..." or
/// null, "keys":N}`: fetches attempted (a discovery and its JWKS count
/// once) and failed, fetches started by unknown kids and unknown kids that
/// started none (one in flight, or the cooldown), whether the last fetch
/// failed (the keys are from an earlier one), the last failure's message,
/// when the last fetch started and the last success finished and when the
/// next fetch is due (Unix milliseconds; `next_refresh_ms` 0 before the
/// first fetch), the JWKS URL in use (without its query; null before
/// discovery), and the keys held now. Members may be added.
///
/// # Safety
/// `r` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_remote_jwks_stats(
    r: *const wid_remote_jwks,
    out_json: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (r, out_json) => unsafe { imp::stats(r, "r", out_json) }),
    )
}
