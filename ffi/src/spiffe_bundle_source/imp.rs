//! What every `wid_spiffe_bundle_source_*` function does in a build with
//! the cargo feature `remote-jwks`: the builder's settings, the handles'
//! Rust sides, and the translation to and from
//! [`workload_identity::SpiffeBundleSource`].

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};

use super::super::boundary::str_in;
use super::super::fetch_tuning::Tuning;
use super::super::followed::Followed;
pub(super) use super::super::followed::{keyring, refresh, start_refresher, stats};
use super::super::handle::{self, Castable, out_optional, require_out};
use super::{wid_spiffe_bundle_source, wid_spiffe_bundle_source_builder};
use workload_identity::{Error, SpiffeBundleSource, SpiffeBundleSourceBuilder};

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

impl Castable for wid_spiffe_bundle_source_builder {
    // A lock: setters change the settings behind a shared reference.
    type Rust = Mutex<Settings>;
    const TAG: u64 = 0x5749_445f_5342_0001; // "WID_SB" v1
    const NAME: &'static str = "wid_spiffe_bundle_source_builder";
    const OWNED: bool = true;
}

impl Castable for wid_spiffe_bundle_source {
    type Rust = Followed<SpiffeBundleSource>;
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
unsafe fn source_ref<'a>(
    s: *const wid_spiffe_bundle_source,
) -> Result<&'a Followed<SpiffeBundleSource>, Error> {
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
    let source = Followed::new(source);
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe {
        handle::out(out, "out", || {
            handle::into_raw::<wid_spiffe_bundle_source>(source)
        })
    }
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
