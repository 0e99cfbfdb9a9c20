//! `wid_spiffe_bundle_source`: a peer SPIFFE trust domain's bundle, followed
//! through its bundle endpoint (SPIFFE Federation, `https_web`), over the
//! Rust `SpiffeBundleSource` (cargo feature `remote-jwks`): the bundle's
//! `jwt-svid` keys in a verify-only keyring for a verifier or a trust set,
//! its refresh hint, its `spiffe_sequence` rollback protection and the
//! operator's reset, a background refresher, and its stats. The fetching is
//! `wid_remote_jwks`'s: the same builder settings, single flight,
//! unknown-kid cooldown and last good bundle kept on failure.
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

/// A SPIFFE bundle source being configured (opaque; one owner, not
/// reference counted): made by `wid_spiffe_bundle_source_builder_new`,
/// turned into sources by `wid_spiffe_bundle_source_builder_build`,
/// released by `wid_spiffe_bundle_source_builder_free`.
pub struct wid_spiffe_bundle_source_builder {
    _private: [u8; 0],
}

/// A SPIFFE bundle source (opaque; reference counted, safe to use from many
/// threads at once): made by `wid_spiffe_bundle_source_builder_build`,
/// released by `wid_spiffe_bundle_source_free` (which stops its refresher).
pub struct wid_spiffe_bundle_source {
    _private: [u8; 0],
}

/// The error of every function here in a build without `remote-jwks`.
#[cfg(not(feature = "remote-jwks"))]
fn disabled() -> workload_identity::Error {
    super::boundary::invalid(
        "wid_spiffe_bundle_source",
        "this library was built without the cargo feature `remote-jwks`: build it with \
         `cargo build --release -p workload-identity-ffi` (the feature is on by default) to follow a SPIFFE bundle endpoint",
    )
}

/// Starts configuring a source for the peer trust domain `trust_domain`
/// (without `spiffe://`: 1 to 255 bytes of lower-case letters, digits,
/// `.`, `-` and `_`) whose bundle endpoint is `bundle_url` (`https://...`;
/// plain `http` only to a loopback host, and only with
/// `wid_spiffe_bundle_source_builder_set_allow_http_loopback`). Both are
/// checked here (the URL as far as it can be without that setting: a URL,
/// with a host, no user info, fragment or whitespace, `https` or loopback
/// `http`) and again by `wid_spiffe_bundle_source_builder_build`; a bad one
/// is `WID_RESULT_INVALID_ARGUMENT` naming the problem (never the URL's
/// query). The URL is at most 8192 bytes. `*out` receives a handle to free
/// with `wid_spiffe_bundle_source_builder_free`.
///
/// The source reads the bundle's `jwt-svid` entries as bearer keys (they
/// verify JWT-SVIDs) and its `wit-svid` entries as WIT keys, and skips its
/// `x509-svid` entries. Its defaults are `wid_remote_jwks_builder_new`'s
/// (Mozilla's roots, a 5 s timeout, refreshes between a minute and a day
/// apart, 15 s between fetches started by unknown kids, bodies up to
/// 512 KiB, up to 100 entries); the bundle's `spiffe_refresh_hint`, when it
/// has one, schedules the next fetch (before the response's `max-age`),
/// within the refresh bounds. No redirect is followed.
///
/// Without the cargo feature `remote-jwks` this and every other
/// `wid_spiffe_bundle_source_*` function returns
/// `WID_RESULT_INVALID_ARGUMENT`, the message naming the feature.
///
/// # Safety
/// `trust_domain` must be NULL or valid for `trust_domain_len` bytes,
/// `bundle_url` NULL or valid for `bundle_url_len` bytes; `out` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_new(
    trust_domain: *const c_char,
    trust_domain_len: usize,
    bundle_url: *const c_char,
    bundle_url_len: usize,
    out: *mut *mut wid_spiffe_bundle_source_builder,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(|| {
        with_feature!("remote-jwks", disabled(), (trust_domain, trust_domain_len, bundle_url, bundle_url_len, out) => unsafe {
            imp::builder_new(trust_domain, trust_domain_len, bundle_url, bundle_url_len, out)
        })
    })
}

/// Releases a builder (sources built from it are not affected). NULL-safe.
///
/// # Safety
/// `b` must be NULL or a handle from this library not yet freed, with no
/// call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_free(
    b: *mut wid_spiffe_bundle_source_builder,
) {
    #[cfg(feature = "remote-jwks")]
    // SAFETY: `b` is NULL or a live builder handle the caller gives up.
    call_void(|| unsafe { super::handle::free_owned(b) });
    #[cfg(not(feature = "remote-jwks"))]
    call_void(|| {
        let _ = b;
    });
}

/// As `wid_remote_jwks_builder_set_ca_bundle_pem`: trusts only the
/// certificates of this PEM bundle (the peer's endpoint certificate signed
/// by a private CA) instead of Mozilla's roots; `(NULL, 0)` goes back to
/// them. A bundle without a certificate, or that is not PEM, is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged. At most
/// 1 MiB.
///
/// # Safety
/// `b` must be NULL or a live handle; `pem` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_ca_bundle_pem(
    b: *mut wid_spiffe_bundle_source_builder,
    pem: *const u8,
    len: usize,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, pem, len) => unsafe { imp::set_ca_bundle_pem(b, pem, len) }),
    )
}

/// As `wid_remote_jwks_builder_set_allow_http_loopback`: `allow` 1 allows
/// plain `http` to a loopback host (tests, a sidecar), 0 `https` only (the
/// default); any other value is `WID_RESULT_INVALID_ARGUMENT`, and the
/// builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_allow_http_loopback(
    b: *mut wid_spiffe_bundle_source_builder,
    allow: u32,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, allow) => unsafe { imp::set_allow_http_loopback(b, allow) }),
    )
}

/// As `wid_remote_jwks_builder_set_timeout_ms`: the whole time one request
/// may take, in milliseconds (default 5000); 0 or more than a week
/// (604800000) is `WID_RESULT_INVALID_ARGUMENT`, and the builder is
/// unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_timeout_ms(
    b: *mut wid_spiffe_bundle_source_builder,
    ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, ms) => unsafe { imp::set_timeout_ms(b, ms) }),
    )
}

/// As `wid_remote_jwks_builder_set_refresh_bounds_ms`: the bounds on the
/// time between successful fetches, in milliseconds, whatever the bundle's
/// `spiffe_refresh_hint` or the response's `max-age` says (default 60000
/// to 86400000); the minimum is also the wait after a failure. `min_ms`
/// above `max_ms`, or `max_ms` above a week (604800000), is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_refresh_bounds_ms(
    b: *mut wid_spiffe_bundle_source_builder,
    min_ms: u64,
    max_ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, min_ms, max_ms) => unsafe { imp::set_refresh_bounds_ms(b, min_ms, max_ms) }),
    )
}

/// As `wid_remote_jwks_builder_set_default_refresh_ms`: the time between
/// fetches when the bundle has no refresh hint and the response no
/// `max-age`, in milliseconds (default 3600000; clamped to the refresh
/// bounds). More than a week (604800000) is `WID_RESULT_INVALID_ARGUMENT`,
/// and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_default_refresh_ms(
    b: *mut wid_spiffe_bundle_source_builder,
    ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, ms) => unsafe { imp::set_default_refresh_ms(b, ms) }),
    )
}

/// As `wid_remote_jwks_builder_set_unknown_kid_cooldown_ms`: the least time
/// between two fetches started by unknown kids, in milliseconds (default
/// 15000; 0: no limit but the single flight). More than a week
/// (604800000) is `WID_RESULT_INVALID_ARGUMENT`, and the builder is
/// unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_unknown_kid_cooldown_ms(
    b: *mut wid_spiffe_bundle_source_builder,
    ms: u64,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, ms) => unsafe { imp::set_unknown_kid_cooldown_ms(b, ms) }),
    )
}

/// As `wid_remote_jwks_builder_set_max_body_bytes`: the largest response
/// body read, in bytes (default 524288); 0 or more than 16777216 (16 MiB)
/// is `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_max_body_bytes(
    b: *mut wid_spiffe_bundle_source_builder,
    max: usize,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, max) => unsafe { imp::set_max_body_bytes(b, max) }),
    )
}

/// As `wid_remote_jwks_builder_set_max_keys`: the most entries a bundle may
/// list, skipped ones (`x509-svid`) included (default 100); 0 is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_set_max_keys(
    b: *mut wid_spiffe_bundle_source_builder,
    max: usize,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (b, max) => unsafe { imp::set_max_keys(b, max) }),
    )
}

/// Makes a source with the builder's current settings: an empty keyring,
/// no sequence held, nothing fetched yet (call
/// `wid_spiffe_bundle_source_refresh` at startup, start the refresher, or
/// let the first unknown kid fetch). `*out` receives a handle to free with
/// `wid_spiffe_bundle_source_free`. The builder is not consumed. A URL that
/// the settings do not allow (plain `http` without
/// `wid_spiffe_bundle_source_builder_set_allow_http_loopback`) is
/// `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `b` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_builder_build(
    b: *const wid_spiffe_bundle_source_builder,
    out: *mut *mut wid_spiffe_bundle_source,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(|| with_feature!("remote-jwks", disabled(), (b, out) => unsafe { imp::build(b, out) }))
}

/// Releases a source handle (reference counted). The last reference stops
/// the refresher, as `wid_remote_jwks_free` does (after a fetch in
/// progress, which the timeout bounds, so this may block that long).
/// Keyrings from `wid_spiffe_bundle_source_keyring` keep the keys they hold
/// but are no longer refreshed. Do not unload the library within the
/// timeout of a free. NULL-safe.
///
/// # Safety
/// `s` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_free(s: *const wid_spiffe_bundle_source) {
    #[cfg(feature = "remote-jwks")]
    // SAFETY: `s` is NULL or a live source handle the caller gives up.
    call_void(|| unsafe { super::handle::free(s) });
    #[cfg(not(feature = "remote-jwks"))]
    call_void(|| {
        let _ = s;
    });
}

/// The source's keyring, as a new `wid_keyring` handle (free it with
/// `wid_keyring_free`): give it to `wid_trust_set_builder_add_trust_domain`
/// under the source's trust domain (or to `wid_verifier_builder_new`). It
/// is shared with the source, not a copy: each bundle taken replaces its
/// keys (an authority that left the bundle stops verifying), and a verifier
/// meeting an unknown `kid` starts a fetch while it waits for the key. It
/// belongs to the source: do not insert, rotate or import keys into it.
/// Once `wid_spiffe_bundle_source_free` releases the source, the keyring
/// keeps its last keys but is no longer refreshed.
///
/// # Safety
/// `s` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_keyring(
    s: *const wid_spiffe_bundle_source,
    out: *mut *mut wid_keyring,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (s, out) => unsafe { imp::keyring(s, "s", out) }),
    )
}

/// Fetches the bundle now, on this thread (waiting first for a fetch in
/// flight: one request at a time). On success `*out_report_json` (may be
/// NULL) receives what it did: `{"bundle_url":"...","keys":["kid",...],
/// "added":[...],"removed":[...],"skipped":N,"max_age_ms":N or null,
/// "refresh_hint_ms":N or null,"sequence":N or null,
/// "next_refresh_in_ms":N}` (the URL without its query; `skipped` counts
/// the entries that verify no token, `x509-svid` ones among them;
/// `sequence` is the bundle's `spiffe_sequence`). On failure the keyring
/// keeps the bundle it holds and the failure is counted in the stats: a
/// network or HTTP failure (a redirect included) is `WID_RESULT_IO_ERROR`;
/// a body that is no acceptable bundle (too large, too many entries, not
/// JSON) is `WID_RESULT_DECODE_ERROR`, and so is a rollback: once a bundle
/// with a `spiffe_sequence` was taken, a bundle whose sequence is lower, or
/// that carries none, is refused (counted in `sequence_refusals`) until
/// `wid_spiffe_bundle_source_reset_sequence`; an equal sequence is taken.
/// A key set the keyring refuses (a private key, a weak key, a duplicate
/// `kid`) is its code.
///
/// # Safety
/// `s` must be NULL or a live handle; `out_report_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_refresh(
    s: *const wid_spiffe_bundle_source,
    out_report_json: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (s, out_report_json) => unsafe { imp::refresh(s, "s", out_report_json) }),
    )
}

/// Starts a background thread that fetches whenever a fetch is due (at
/// once if none was made yet, then after each bundle's refresh hint within
/// the refresh bounds, and after the minimum bound following a failure).
/// It runs until the source is freed (`wid_spiffe_bundle_source_free`
/// stops it and waits for it). Calling it again while it runs does nothing
/// and returns `WID_RESULT_OK`. `WID_RESULT_IO_ERROR` if the thread cannot
/// be started.
///
/// # Safety
/// `s` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_start_refresher(
    s: *const wid_spiffe_bundle_source,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (s) => unsafe { imp::start_refresher(s, "s") }),
    )
}

/// What the source has done so far, as JSON: `{"trust_domain":"...",
/// "bundle_url":"...","fetches":N,"failures":N,"unknown_kid_fetches":N,
/// "unknown_kid_suppressed":N,"stale":bool,"last_error":"..." or null,
/// "last_attempt_ms":N or null,"last_success_ms":N or null,
/// "next_refresh_ms":N,"keys":N,"sequence":N or null,
/// "sequence_refusals":N}`: as `wid_remote_jwks_stats` (the URL without
/// its query; a rollback refused counts as a failure too, its message in
/// `last_error`), with the `spiffe_sequence` of the bundle held (null
/// before the first, when it carried none, or after a reset) and the
/// bundles refused as rollbacks. Members may be added.
///
/// # Safety
/// `s` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_stats(
    s: *const wid_spiffe_bundle_source,
    out_json: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (s, out_json) => unsafe { imp::stats(s, "s", out_json) }),
    )
}

/// The operator's reset of the rollback protection: forgets the
/// `spiffe_sequence` held, so that the next bundle is taken whatever its
/// sequence (or none). For a peer that restarted its sequence on purpose (a
/// rebuilt trust domain); the keys held stay until that fetch. The reset is
/// logged (warn). `*out_had` (may be NULL) receives 1 if a sequence was
/// held, else 0, and `*out_previous` (may be NULL) the sequence forgotten
/// (0 when none was held). A new source starts with no sequence held too.
///
/// # Safety
/// `s` must be NULL or a live handle; `out_previous` and `out_had` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_spiffe_bundle_source_reset_sequence(
    s: *const wid_spiffe_bundle_source,
    out_previous: *mut u64,
    out_had: *mut u32,
) -> wid_result {
    // SAFETY: the contract, passed on.
    call(
        || with_feature!("remote-jwks", disabled(), (s, out_previous, out_had) => unsafe { imp::reset_sequence(s, out_previous, out_had) }),
    )
}
