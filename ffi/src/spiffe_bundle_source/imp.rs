//! What every `wid_spiffe_bundle_source_*` function does in a build with
//! the cargo feature `remote-jwks`: the builder's settings, the handles'
//! Rust sides, and the translation to and from
//! [`workload_identity::SpiffeBundleSource`].

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};

use serde_json::json;

use super::super::boundary::str_in;
use super::super::fetch_tuning::{Tuning, millis_out};
use super::super::handle::{self, Castable, out_optional, require_out};
use super::super::keyring::wid_keyring;
use super::super::wid_bytes;
use super::{wid_spiffe_bundle_source, wid_spiffe_bundle_source_builder};
use workload_identity::{Error, Refresher, SpiffeBundleSource, SpiffeBundleSourceBuilder};

/// Longest bundle URL or trust domain read, in bytes.
const MAX_URL: usize = 8192;

/// What a builder holds.
pub(crate) struct Settings {
    trust_domain: String,
    bundle_url: String,
    tuning: Tuning,
}

impl Settings {
    fn builder(&self) -> SpiffeBundleSourceBuilder {
        self.tuning.apply(SpiffeBundleSource::builder(
            &self.trust_domain,
            &self.bundle_url,
        ))
    }
}

/// What a source handle holds: the source, and its refresher once
/// started (dropped with the last reference, which stops it).
pub(crate) struct Source {
    source: SpiffeBundleSource,
    refresher: Mutex<Option<Refresher>>,
}

impl Castable for wid_spiffe_bundle_source_builder {
    // A lock: setters change the settings behind a shared reference.
    type Rust = Mutex<Settings>;
    const TAG: u64 = 0x5749_445f_5342_0001; // "WID_SB" v1
    const NAME: &'static str = "wid_spiffe_bundle_source_builder";
    const OWNED: bool = true;
}

impl Castable for wid_spiffe_bundle_source {
    type Rust = Source;
    const TAG: u64 = 0x5749_445f_5353_0001; // "WID_SS" v1
    const NAME: &'static str = "wid_spiffe_bundle_source";
}

/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn builder_ref<'a>(
    b: *const wid_spiffe_bundle_source_builder,
) -> Result<&'a Mutex<Settings>, Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(b, "b") }
}

/// # Safety
/// `s` must be NULL or a live handle from this library.
unsafe fn source_ref<'a>(s: *const wid_spiffe_bundle_source) -> Result<&'a Source, Error> {
    // SAFETY: `s` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(s, "s") }
}

impl super::super::fetch_tuning::HoldsTuning for Settings {
    fn tuning(&mut self) -> &mut Tuning {
        &mut self.tuning
    }
}

/// # Safety
/// `td` NULL or valid for `td_len` bytes, `url` for `url_len`; `out` NULL
/// or writable.
pub(super) unsafe fn builder_new(
    td: *const c_char,
    td_len: usize,
    url: *const c_char,
    url_len: usize,
    out: *mut *mut wid_spiffe_bundle_source_builder,
) -> Result<(), Error> {
    // SAFETY: `td` and `url` are NULL or valid for their lengths (the
    // contract).
    let trust_domain = unsafe { str_in(td, td_len, "trust_domain", MAX_URL)? };
    let bundle_url = unsafe { str_in(url, url_len, "bundle_url", MAX_URL)? };
    require_out(out, "out")?;
    let settings = Settings {
        trust_domain: trust_domain.to_string(),
        bundle_url: bundle_url.to_string(),
        tuning: Tuning::default(),
    };
    // The trust domain, and the URL rules as far as they hold whatever the
    // loopback setting (the build checks them again with it): a source
    // built and dropped here fetches nothing.
    settings.builder().allow_http_loopback(true).build()?;
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe {
        handle::out(out, "out", || {
            handle::into_raw_owned::<wid_spiffe_bundle_source_builder>(Mutex::new(settings))
        })
    }
}

super::super::fetch_tuning::fetch_setters!(wid_spiffe_bundle_source_builder);

/// # Safety
/// `b` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn build(
    b: *const wid_spiffe_bundle_source_builder,
    out: *mut *mut wid_spiffe_bundle_source,
) -> Result<(), Error> {
    // SAFETY: `b` is NULL or a live handle (the contract).
    let builder = unsafe { builder_ref(b)? };
    require_out(out, "out")?;
    let source = builder
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .builder()
        .build()?;
    let source = Source {
        source,
        refresher: Mutex::new(None),
    };
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe {
        handle::out(out, "out", || {
            handle::into_raw::<wid_spiffe_bundle_source>(source)
        })
    }
}

/// # Safety
/// `s` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn keyring(
    s: *const wid_spiffe_bundle_source,
    out: *mut *mut wid_keyring,
) -> Result<(), Error> {
    // SAFETY: `s` is NULL or a live handle (the contract).
    let source = unsafe { source_ref(s)? };
    let keyring = source.source.keyring().clone();
    // SAFETY: `out` is NULL or writable (the contract).
    unsafe { handle::out(out, "out", || handle::into_raw::<wid_keyring>(keyring)) }
}

/// # Safety
/// `s` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn refresh(
    s: *const wid_spiffe_bundle_source,
    out: *mut wid_bytes,
) -> Result<(), Error> {
    // SAFETY: `s` is NULL or a live handle (the contract).
    let source = unsafe { source_ref(s)? };
    let report = source.source.refresh()?;
    let ids = |ids: &[workload_identity::KeyId]| {
        ids.iter()
            .map(|k| k.as_str().to_string())
            .collect::<Vec<_>>()
    };
    // SAFETY: `out` is NULL or writable (the contract).
    unsafe {
        out_optional(out, || {
            let json = json!({
                "bundle_url": report.jwks_uri,
                "keys": ids(&report.keys),
                "added": ids(&report.added),
                "removed": ids(&report.removed),
                "skipped": report.skipped,
                "max_age_ms": report.max_age.map(millis_out),
                "refresh_hint_ms": report.refresh_hint.map(millis_out),
                "sequence": report.sequence,
                "next_refresh_in_ms": millis_out(report.next_refresh_in),
            });
            wid_bytes::from_vec(json.to_string().into_bytes())
        })
    };
    Ok(())
}

/// # Safety
/// `s` NULL or a live handle.
pub(super) unsafe fn start_refresher(s: *const wid_spiffe_bundle_source) -> Result<(), Error> {
    // SAFETY: `s` is NULL or a live handle (the contract).
    let source = unsafe { source_ref(s)? };
    // A panic while the lock was held left `None` or a running refresher.
    let mut running = source
        .refresher
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if running.is_none() {
        *running = Some(source.source.spawn_refresher()?);
    }
    Ok(())
}

/// # Safety
/// `s` NULL or a live handle; `out` NULL or writable.
pub(super) unsafe fn stats(
    s: *const wid_spiffe_bundle_source,
    out: *mut wid_bytes,
) -> Result<(), Error> {
    // SAFETY: `s` is NULL or a live handle (the contract).
    let source = unsafe { source_ref(s)? };
    require_out(out, "out_json")?;
    let st = source.source.stats();
    let json = json!({
        "trust_domain": source.source.trust_domain(),
        "bundle_url": st.jwks_uri,
        "fetches": st.fetches,
        "failures": st.failures,
        "unknown_kid_fetches": st.unknown_kid_fetches,
        "unknown_kid_suppressed": st.unknown_kid_suppressed,
        "stale": st.stale,
        "last_error": st.last_error,
        "last_attempt_ms": st.last_attempt_ms,
        "last_success_ms": st.last_success_ms,
        "next_refresh_ms": st.next_refresh_ms,
        "keys": st.keys,
        "sequence": st.sequence,
        "sequence_refusals": st.sequence_refusals,
    })
    .to_string();
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe { handle::out(out, "out_json", || wid_bytes::from_vec(json.into_bytes())) }
}

/// # Safety
/// `s` NULL or a live handle; `out_previous` and `out_had` NULL or
/// writable.
pub(super) unsafe fn reset_sequence(
    s: *const wid_spiffe_bundle_source,
    out_previous: *mut u64,
    out_had: *mut u32,
) -> Result<(), Error> {
    // SAFETY: `s` is NULL or a live handle (the contract).
    let source = unsafe { source_ref(s)? };
    let previous = source.source.reset_sequence();
    // SAFETY: the outputs are NULL or writable (the contract).
    unsafe {
        out_optional(out_previous, || previous.unwrap_or(0));
        out_optional(out_had, || u32::from(previous.is_some()));
    }
    Ok(())
}
