//! The fetch settings both remote key sources' builders hold
//! (`wid_remote_jwks_builder_set_*`, `wid_spiffe_bundle_source_builder_set_*`),
//! each checked as the C ABI documents it (`None`: the Rust builder's
//! default), and their application to either Rust builder
//! (`RemoteJwksBuilder`, `SpiffeBundleSourceBuilder`: the same fetching).

use std::time::Duration;

use super::boundary::invalid;
use workload_identity::{Error, MAX_JWKS_BODY_LIMIT, RemoteJwksBuilder, SpiffeBundleSourceBuilder};

/// The longest timeout or interval accepted: a week (the Rust builder's
/// saturation point, refused here rather than silently shortened).
const LONGEST_MS: u64 = 7 * 24 * 3600 * 1000;

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

/// The settings of a builder. Each setter checks its value first and
/// changes nothing when it refuses it.
#[derive(Default)]
pub(crate) struct Tuning {
    ca_bundle_pem: Option<Vec<u8>>,
    allow_http_loopback: bool,
    timeout: Option<Duration>,
    refresh_bounds: Option<(Duration, Duration)>,
    default_refresh: Option<Duration>,
    unknown_kid_cooldown: Option<Duration>,
    max_body_bytes: Option<usize>,
    max_keys: Option<usize>,
}

impl Tuning {
    /// A PEM bundle of at least one certificate; empty: Mozilla's roots.
    pub(crate) fn set_ca_bundle_pem(&mut self, pem: &[u8]) -> Result<(), Error> {
        self.ca_bundle_pem = if pem.is_empty() {
            None
        } else {
            RemoteJwksBuilder::check_ca_bundle_pem(pem)?;
            Some(pem.to_vec())
        };
        Ok(())
    }

    /// 0 or 1.
    pub(crate) fn set_allow_http_loopback(&mut self, allow: u32) -> Result<(), Error> {
        self.allow_http_loopback = match allow {
            0 => false,
            1 => true,
            n => return Err(invalid("allow", format!("must be 0 or 1, got {n}"))),
        };
        Ok(())
    }

    /// 1 ms to a week.
    pub(crate) fn set_timeout_ms(&mut self, ms: u64) -> Result<(), Error> {
        self.timeout = Some(millis_in(ms, "ms", 1)?);
        Ok(())
    }

    /// `min_ms` up to `max_ms`, itself at most a week.
    pub(crate) fn set_refresh_bounds_ms(&mut self, min_ms: u64, max_ms: u64) -> Result<(), Error> {
        let max = millis_in(max_ms, "max_ms", 0)?;
        if min_ms > max_ms {
            return Err(invalid(
                "min_ms",
                format!("must not exceed max_ms ({max_ms}), got {min_ms}"),
            ));
        }
        self.refresh_bounds = Some((Duration::from_millis(min_ms), max));
        Ok(())
    }

    /// At most a week.
    pub(crate) fn set_default_refresh_ms(&mut self, ms: u64) -> Result<(), Error> {
        self.default_refresh = Some(millis_in(ms, "ms", 0)?);
        Ok(())
    }

    /// At most a week (0: none).
    pub(crate) fn set_unknown_kid_cooldown_ms(&mut self, ms: u64) -> Result<(), Error> {
        self.unknown_kid_cooldown = Some(millis_in(ms, "ms", 0)?);
        Ok(())
    }

    /// 1 byte to 16 MiB.
    pub(crate) fn set_max_body_bytes(&mut self, max: usize) -> Result<(), Error> {
        if max == 0 || max > MAX_JWKS_BODY_LIMIT {
            return Err(invalid(
                "max",
                format!("must be 1 to {MAX_JWKS_BODY_LIMIT} bytes (16 MiB), got {max}"),
            ));
        }
        self.max_body_bytes = Some(max);
        Ok(())
    }

    /// At least 1.
    pub(crate) fn set_max_keys(&mut self, max: usize) -> Result<(), Error> {
        if max == 0 {
            return Err(invalid("max", "must be at least 1 key, got 0"));
        }
        self.max_keys = Some(max);
        Ok(())
    }

    /// `b` with these settings.
    pub(crate) fn apply<B: Fetching>(&self, mut b: B) -> B {
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

/// A builder handle's settings, which hold the fetch settings.
pub(crate) trait HoldsTuning {
    /// The fetch settings.
    fn tuning(&mut self) -> &mut Tuning;
}

/// Applies `change` (which checks its value and changes nothing when it
/// refuses it) to the fetch settings of the builder handle `b` (named `arg`
/// in messages).
///
/// # Safety
/// `b` must be NULL or a live handle from this library.
pub(crate) unsafe fn update<H, S>(
    b: *const H,
    arg: &'static str,
    change: impl FnOnce(&mut Tuning) -> Result<(), Error>,
) -> Result<(), Error>
where
    H: super::handle::Castable<Rust = std::sync::Mutex<S>>,
    S: HoldsTuning + Send,
{
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    let builder = unsafe { super::handle::borrow(b, arg)? };
    // Settings are plain values assigned whole: a poisoned lock still
    // holds consistent ones.
    change(
        builder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tuning(),
    )
}

/// A duration in whole milliseconds, saturating (for reports and stats).
pub(crate) fn millis_out(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A Rust builder that fetches keys over HTTPS: both take the same settings.
pub(crate) trait Fetching: Sized {
    fn allow_http_loopback(self, allow: bool) -> Self;
    fn ca_bundle_pem(self, pem: &[u8]) -> Self;
    fn timeout(self, timeout: Duration) -> Self;
    fn refresh_bounds(self, min: Duration, max: Duration) -> Self;
    fn default_refresh(self, interval: Duration) -> Self;
    fn unknown_kid_cooldown(self, cooldown: Duration) -> Self;
    fn max_body_bytes(self, max: usize) -> Self;
    fn max_keys(self, max: usize) -> Self;
}

macro_rules! fetching {
    ($($builder:ty),*) => {$(
        impl Fetching for $builder {
            fn allow_http_loopback(self, allow: bool) -> Self { <$builder>::allow_http_loopback(self, allow) }
            fn ca_bundle_pem(self, pem: &[u8]) -> Self { <$builder>::ca_bundle_pem(self, pem) }
            fn timeout(self, timeout: Duration) -> Self { <$builder>::timeout(self, timeout) }
            fn refresh_bounds(self, min: Duration, max: Duration) -> Self { <$builder>::refresh_bounds(self, min, max) }
            fn default_refresh(self, interval: Duration) -> Self { <$builder>::default_refresh(self, interval) }
            fn unknown_kid_cooldown(self, cooldown: Duration) -> Self { <$builder>::unknown_kid_cooldown(self, cooldown) }
            fn max_body_bytes(self, max: usize) -> Self { <$builder>::max_body_bytes(self, max) }
            fn max_keys(self, max: usize) -> Self { <$builder>::max_keys(self, max) }
        }
    )*};
}

fetching!(RemoteJwksBuilder, SpiffeBundleSourceBuilder);

/// The builder setters of a remote key source's handle `$handle`, over
/// [`update`] (which borrows the handle, so a NULL or foreign one is
/// refused before any value is read): one
/// definition for `wid_remote_jwks_builder` and
/// `wid_spiffe_bundle_source_builder`, whose C entry points stay their own.
macro_rules! fetch_setters {
    ($handle:ty) => {
        /// # Safety
        /// `b` NULL or a live handle; `pem` NULL or valid for `len` bytes.
        pub(super) unsafe fn set_ca_bundle_pem(b: *mut $handle, pem: *const u8, len: usize) -> Result<(), Error> {
            // SAFETY (this block): `b` is NULL or a live handle, checked
            // before the bundle is read; `pem` NULL or valid for `len`
            // bytes (the contract).
            unsafe {
                $crate::fetch_tuning::update(b, "b", |_| Ok(()))?;
                let pem = super::super::boundary::bytes_in(pem, len, "pem", super::super::keyring::MAX_JSON)?;
                $crate::fetch_tuning::update(b, "b", |t| t.set_ca_bundle_pem(pem))
            }
        }
        $crate::fetch_tuning::fetch_setters!(@numeric $handle;
            set_allow_http_loopback(allow: u32);
            set_timeout_ms(ms: u64);
            set_refresh_bounds_ms(min_ms: u64, max_ms: u64);
            set_default_refresh_ms(ms: u64);
            set_unknown_kid_cooldown_ms(ms: u64);
            set_max_body_bytes(max: usize);
            set_max_keys(max: usize);
        );
    };
    (@numeric $handle:ty; $($name:ident($($arg:ident: $ty:ty),+);)*) => {$(
        /// # Safety
        /// `b` NULL or a live handle.
        pub(super) unsafe fn $name(b: *mut $handle, $($arg: $ty),+) -> Result<(), Error> {
            // SAFETY: `b` is NULL or a live handle (the contract).
            unsafe { $crate::fetch_tuning::update(b, "b", |t| t.$name($($arg),+)) }
        }
    )*};
}
pub(crate) use fetch_setters;
