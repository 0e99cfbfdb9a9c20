//! What every `wid_remote_jwks_*` function does in a build with the cargo
//! feature `remote-jwks`: the builder's settings, the handles' Rust sides,
//! and the translation to and from [`workload_identity::RemoteJwks`].

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};

use super::super::boundary::str_in;
use super::super::fetch_tuning::Tuning;
use super::super::followed::Followed;
pub(super) use super::super::followed::{keyring, refresh, start_refresher, stats};
use super::super::handle::{self, Castable, require_out};
use super::{wid_remote_jwks, wid_remote_jwks_builder};
use workload_identity::Error;
use workload_identity::{RemoteJwks, RemoteJwksBuilder};

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

impl Castable for wid_remote_jwks_builder {
    // A lock: setters change the settings behind a shared reference.
    type Rust = Mutex<Settings>;
    const TAG: u64 = 0x5749_445f_5242_0001; // "WID_RB" v1
    const NAME: &'static str = "wid_remote_jwks_builder";
    const OWNED: bool = true;
}

impl Castable for wid_remote_jwks {
    type Rust = Followed<RemoteJwks>;
    const TAG: u64 = 0x5749_445f_524a_0001; // "WID_RJ" v1
    const NAME: &'static str = "wid_remote_jwks";
}

/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn builder_ref<'a>(b: *const wid_remote_jwks_builder) -> Result<&'a Mutex<Settings>, Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(b, "builder") }
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
    let remote = Followed::new(jwks);
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe { handle::out(out, "out", || handle::into_raw::<wid_remote_jwks>(remote)) }
}
