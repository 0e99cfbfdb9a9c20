//! What every `wid_remote_jwks_*` function does in a build with the cargo
//! feature `remote-jwks`: the builder's settings, the handles' Rust sides,
//! and the translation to and from [`workload_identity::RemoteJwks`].

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};

use serde_json::json;

use super::super::boundary::str_in;
use super::super::fetch_tuning::{Tuning, millis_out};
use super::super::handle::{self, Castable, out_optional, require_out};
use super::super::keyring::wid_keyring;
use super::super::wid_bytes;
use super::{wid_remote_jwks, wid_remote_jwks_builder};
use workload_identity::Error;
use workload_identity::{Refresher, RemoteJwks, RemoteJwksBuilder};

/// Longest URL or issuer read, in bytes.
const MAX_URL: usize = 8192;

/// Where the keys come from.
#[derive(Clone)]
enum Source {
    Jwks(String),
    Issuer(String),
}

/// What a builder holds: where the keys come from, and the fetch settings
/// (shared with `wid_spiffe_bundle_source_builder`: fetch_tuning.rs).
pub(crate) struct Settings {
    source: Source,
    tuning: Tuning,
}

impl Settings {
    fn builder(&self) -> RemoteJwksBuilder {
        self.tuning.apply(match &self.source {
            Source::Jwks(url) => RemoteJwks::builder(url),
            Source::Issuer(issuer) => RemoteJwks::discover(issuer),
        })
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

impl super::super::fetch_tuning::HoldsTuning for Settings {
    fn tuning(&mut self) -> &mut Tuning {
        &mut self.tuning
    }
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
        tuning: Tuning::default(),
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

super::super::fetch_tuning::fetch_setters!(wid_remote_jwks_builder);

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
