//! What every `wid_remote_jwks_*` function does in a build with the cargo
//! feature `remote-jwks`: the builder's settings, the handles' Rust sides,
//! and the translation to and from [`workload_identity::RemoteJwks`].

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::json;

use super::super::boundary::{bytes_in, invalid, str_in};
use super::super::handle::{self, Castable, out_optional, require_out};
use super::super::keyring::{MAX_JSON, wid_keyring};
use super::super::wid_bytes;
use super::{wid_remote_jwks, wid_remote_jwks_builder};
use workload_identity::Error;
use workload_identity::{MAX_JWKS_BODY_LIMIT, Refresher, RemoteJwks, RemoteJwksBuilder};

/// Longest URL or issuer read, in bytes.
const MAX_URL: usize = 8192;
/// The longest timeout or interval accepted: a week (the Rust builder's
/// saturation point, refused here rather than silently shortened).
const LONGEST_MS: u64 = 7 * 24 * 3600 * 1000;

/// Where the keys come from.
#[derive(Clone)]
enum Source {
    Jwks(String),
    Issuer(String),
}

/// What a builder holds (`None`: the Rust builder's default).
pub(crate) struct Settings {
    source: Source,
    ca_bundle_pem: Option<Vec<u8>>,
    allow_http_loopback: bool,
    timeout: Option<Duration>,
    refresh_bounds: Option<(Duration, Duration)>,
    default_refresh: Option<Duration>,
    unknown_kid_cooldown: Option<Duration>,
    max_body_bytes: Option<usize>,
    max_keys: Option<usize>,
}

impl Settings {
    fn builder(&self) -> RemoteJwksBuilder {
        let mut b = match &self.source {
            Source::Jwks(url) => RemoteJwks::builder(url),
            Source::Issuer(issuer) => RemoteJwks::discover(issuer),
        };
        b = b.allow_http_loopback(self.allow_http_loopback);
        if let Some(pem) = &self.ca_bundle_pem {
            b = b.ca_bundle_pem(pem);
        }
        if let Some(t) = self.timeout {
            b = b.timeout(t);
        }
        if let Some((min, max)) = self.refresh_bounds {
            b = b.refresh_bounds(min, max);
        }
        if let Some(d) = self.default_refresh {
            b = b.default_refresh(d);
        }
        if let Some(c) = self.unknown_kid_cooldown {
            b = b.unknown_kid_cooldown(c);
        }
        if let Some(n) = self.max_body_bytes {
            b = b.max_body_bytes(n);
        }
        if let Some(n) = self.max_keys {
            b = b.max_keys(n);
        }
        b
    }
}

/// What a source handle holds: the source, and its refresher once
/// started (dropped with the last reference, which stops it).
pub(crate) struct Remote {
    jwks: RemoteJwks,
    refresher: Mutex<Option<Refresher>>,
}

impl Castable for wid_remote_jwks_builder {
    // A lock: setters change the settings behind a shared reference.
    type Rust = Mutex<Settings>;
    const TAG: u64 = 0x5749_445f_5242_0001; // "WID_RB" v1
    const NAME: &'static str = "wid_remote_jwks_builder";
    const OWNED: bool = true;
}

impl Castable for wid_remote_jwks {
    type Rust = Remote;
    const TAG: u64 = 0x5749_445f_524a_0001; // "WID_RJ" v1
    const NAME: &'static str = "wid_remote_jwks";
}

/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn builder_ref<'a>(b: *const wid_remote_jwks_builder) -> Result<&'a Mutex<Settings>, Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(b, "builder") }
}

/// # Safety
/// `r` must be NULL or a live handle from this library.
unsafe fn remote_ref<'a>(r: *const wid_remote_jwks) -> Result<&'a Remote, Error> {
    // SAFETY: `r` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(r, "r") }
}

/// Applies `change` to the settings of `b` (checked values only).
///
/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn update(
    b: *const wid_remote_jwks_builder,
    change: impl FnOnce(&mut Settings),
) -> Result<(), Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    let builder = unsafe { builder_ref(b)? };
    // Settings are plain values assigned whole: a poisoned lock still
    // holds consistent ones.
    change(&mut builder.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(())
}

/// A duration in milliseconds, refused above a week (or below `least`).
fn millis_in(ms: u64, name: &'static str, least: u64) -> Result<Duration, Error> {
    if ms < least || ms > LONGEST_MS {
        return Err(invalid(
            name,
            format!("must be {least} to {LONGEST_MS} ms (a week), got {ms}"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

fn millis_out(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// # Safety
/// `url` NULL or valid for `len` bytes; `out` NULL or writable.
pub(super) unsafe fn builder_new(
    url: *const c_char,
    len: usize,
    discover: bool,
    out: *mut *mut wid_remote_jwks_builder,
) -> Result<(), Error> {
    let name = if discover { "issuer" } else { "jwks_url" };
    // SAFETY: `url` is NULL or valid for `len` bytes (the contract).
    let url = unsafe { str_in(url, len, name, MAX_URL)? };
    require_out(out, "out")?;
    let source = if discover {
        Source::Issuer(url.to_string())
    } else {
        Source::Jwks(url.to_string())
    };
    let settings = Settings {
        source,
        ca_bundle_pem: None,
        allow_http_loopback: false,
        timeout: None,
        refresh_bounds: None,
        default_refresh: None,
        unknown_kid_cooldown: None,
        max_body_bytes: None,
        max_keys: None,
    };
    // The URL rules, as far as they hold whatever the loopback setting
    // (the build checks them again with it): a source built and dropped
    // here fetches nothing.
    settings.builder().allow_http_loopback(true).build()?;
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe {
        handle::out(out, "out", || {
            handle::into_raw_owned::<wid_remote_jwks_builder>(Mutex::new(settings))
        })
    }
}

/// # Safety
/// `b` NULL or a live handle; `pem` NULL or valid for `len` bytes.
pub(super) unsafe fn set_ca_bundle_pem(
    b: *mut wid_remote_jwks_builder,
    pem: *const u8,
    len: usize,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle; `pem` NULL or
    // valid for `len` bytes (the contract).
    unsafe { builder_ref(b)? };
    let pem = unsafe { bytes_in(pem, len, "pem", MAX_JSON)? };
    let pem = if pem.is_empty() {
        None
    } else {
        RemoteJwksBuilder::check_ca_bundle_pem(pem)?;
        Some(pem.to_vec())
    };
    unsafe { update(b, |s| s.ca_bundle_pem = pem) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_allow_http_loopback(
    b: *mut wid_remote_jwks_builder,
    allow: u32,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    let allow = match allow {
        0 => false,
        1 => true,
        n => return Err(invalid("allow", format!("must be 0 or 1, got {n}"))),
    };
    unsafe { update(b, |s| s.allow_http_loopback = allow) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_timeout_ms(b: *mut wid_remote_jwks_builder, ms: u64) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    let t = millis_in(ms, "ms", 1)?;
    unsafe { update(b, |s| s.timeout = Some(t)) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_refresh_bounds_ms(
    b: *mut wid_remote_jwks_builder,
    min_ms: u64,
    max_ms: u64,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    let max = millis_in(max_ms, "max_ms", 0)?;
    if min_ms > max_ms {
        return Err(invalid(
            "min_ms",
            format!("must not exceed max_ms ({max_ms}), got {min_ms}"),
        ));
    }
    let min = Duration::from_millis(min_ms);
    unsafe { update(b, |s| s.refresh_bounds = Some((min, max))) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_default_refresh_ms(
    b: *mut wid_remote_jwks_builder,
    ms: u64,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    let d = millis_in(ms, "ms", 0)?;
    unsafe { update(b, |s| s.default_refresh = Some(d)) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_unknown_kid_cooldown_ms(
    b: *mut wid_remote_jwks_builder,
    ms: u64,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    let d = millis_in(ms, "ms", 0)?;
    unsafe { update(b, |s| s.unknown_kid_cooldown = Some(d)) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_max_body_bytes(
    b: *mut wid_remote_jwks_builder,
    max: usize,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    if max == 0 || max > MAX_JWKS_BODY_LIMIT {
        return Err(invalid(
            "max",
            format!("must be 1 to {MAX_JWKS_BODY_LIMIT} bytes (16 MiB), got {max}"),
        ));
    }
    unsafe { update(b, |s| s.max_body_bytes = Some(max)) }
}

/// # Safety
/// `b` NULL or a live handle.
pub(super) unsafe fn set_max_keys(
    b: *mut wid_remote_jwks_builder,
    max: usize,
) -> Result<(), Error> {
    // SAFETY (this block): `b` is NULL or a live handle (the contract).
    unsafe { builder_ref(b)? };
    if max == 0 {
        return Err(invalid("max", "must be at least 1 key, got 0"));
    }
    unsafe { update(b, |s| s.max_keys = Some(max)) }
}

/// # Safety
/// `b` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn build(
    b: *const wid_remote_jwks_builder,
    out: *mut *mut wid_remote_jwks,
) -> Result<(), Error> {
    // SAFETY: `b` is NULL or a live handle (the contract).
    let builder = unsafe { builder_ref(b)? };
    require_out(out, "out")?;
    let jwks = builder
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .builder()
        .build()?;
    let remote = Remote {
        jwks,
        refresher: Mutex::new(None),
    };
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe { handle::out(out, "out", || handle::into_raw::<wid_remote_jwks>(remote)) }
}

/// # Safety
/// `r` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn keyring(
    r: *const wid_remote_jwks,
    out: *mut *mut wid_keyring,
) -> Result<(), Error> {
    // SAFETY: `r` is NULL or a live handle (the contract).
    let remote = unsafe { remote_ref(r)? };
    let keyring = remote.jwks.keyring().clone();
    // SAFETY: `out` is NULL or writable (the contract).
    unsafe { handle::out(out, "out", || handle::into_raw::<wid_keyring>(keyring)) }
}

/// # Safety
/// `r` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn refresh(r: *const wid_remote_jwks, out: *mut wid_bytes) -> Result<(), Error> {
    // SAFETY: `r` is NULL or a live handle (the contract).
    let remote = unsafe { remote_ref(r)? };
    let report = remote.jwks.refresh()?;
    let ids = |ids: &[workload_identity::KeyId]| {
        ids.iter()
            .map(|k| k.as_str().to_string())
            .collect::<Vec<_>>()
    };
    // SAFETY: `out` is NULL or writable (the contract).
    unsafe {
        out_optional(out, || {
            let json = json!({
                "jwks_uri": report.jwks_uri,
                "keys": ids(&report.keys),
                "added": ids(&report.added),
                "removed": ids(&report.removed),
                "skipped": report.skipped,
                "max_age_ms": report.max_age.map(millis_out),
                "next_refresh_in_ms": millis_out(report.next_refresh_in),
            });
            wid_bytes::from_vec(json.to_string().into_bytes())
        })
    };
    Ok(())
}

/// # Safety
/// `r` NULL or a live handle.
pub(super) unsafe fn start_refresher(r: *const wid_remote_jwks) -> Result<(), Error> {
    // SAFETY: `r` is NULL or a live handle (the contract).
    let remote = unsafe { remote_ref(r)? };
    // A panic while the lock was held left `None` or a running refresher.
    let mut running = remote
        .refresher
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if running.is_none() {
        *running = Some(remote.jwks.spawn_refresher()?);
    }
    Ok(())
}

/// # Safety
/// `r` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn stats(r: *const wid_remote_jwks, out: *mut wid_bytes) -> Result<(), Error> {
    // SAFETY: `r` is NULL or a live handle (the contract).
    let remote = unsafe { remote_ref(r)? };
    require_out(out, "out_json")?;
    let s = remote.jwks.stats();
    let json = json!({
        "fetches": s.fetches,
        "failures": s.failures,
        "unknown_kid_fetches": s.unknown_kid_fetches,
        "unknown_kid_suppressed": s.unknown_kid_suppressed,
        "stale": s.stale,
        "last_error": s.last_error,
        "last_attempt_ms": s.last_attempt_ms,
        "last_success_ms": s.last_success_ms,
        "next_refresh_ms": s.next_refresh_ms,
        "jwks_uri": s.jwks_uri,
        "keys": s.keys,
    })
    .to_string();
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe { handle::out(out, "out_json", || wid_bytes::from_vec(json.into_bytes())) }
}
