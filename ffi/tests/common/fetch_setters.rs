//! The fetch setters both remote key sources' builders have
//! (`wid_remote_jwks_builder_set_*`, `wid_spiffe_bundle_source_builder_set_*`:
//! ffi/src/fetch_tuning.rs), and one check of what each accepts and refuses.

use std::ptr::{null, null_mut};

use super::ffi_text::error_says;
use super::result::expect;
use workload_identity_ffi::*;

/// A builder type's setters.
pub struct FetchSetters<B> {
    pub ca_bundle_pem: unsafe extern "C" fn(*mut B, *const u8, usize) -> wid_result,
    pub allow_http_loopback: unsafe extern "C" fn(*mut B, u32) -> wid_result,
    pub timeout_ms: unsafe extern "C" fn(*mut B, u64) -> wid_result,
    pub refresh_bounds_ms: unsafe extern "C" fn(*mut B, u64, u64) -> wid_result,
    pub default_refresh_ms: unsafe extern "C" fn(*mut B, u64) -> wid_result,
    pub unknown_kid_cooldown_ms: unsafe extern "C" fn(*mut B, u64) -> wid_result,
    pub max_body_bytes: unsafe extern "C" fn(*mut B, usize) -> wid_result,
    pub max_keys: unsafe extern "C" fn(*mut B, usize) -> wid_result,
}

/// `wid_remote_jwks_builder`'s.
pub const REMOTE_JWKS: FetchSetters<wid_remote_jwks_builder> = FetchSetters {
    ca_bundle_pem: wid_remote_jwks_builder_set_ca_bundle_pem,
    allow_http_loopback: wid_remote_jwks_builder_set_allow_http_loopback,
    timeout_ms: wid_remote_jwks_builder_set_timeout_ms,
    refresh_bounds_ms: wid_remote_jwks_builder_set_refresh_bounds_ms,
    default_refresh_ms: wid_remote_jwks_builder_set_default_refresh_ms,
    unknown_kid_cooldown_ms: wid_remote_jwks_builder_set_unknown_kid_cooldown_ms,
    max_body_bytes: wid_remote_jwks_builder_set_max_body_bytes,
    max_keys: wid_remote_jwks_builder_set_max_keys,
};

/// `wid_spiffe_bundle_source_builder`'s.
pub const SPIFFE_BUNDLE_SOURCE: FetchSetters<wid_spiffe_bundle_source_builder> = FetchSetters {
    ca_bundle_pem: wid_spiffe_bundle_source_builder_set_ca_bundle_pem,
    allow_http_loopback: wid_spiffe_bundle_source_builder_set_allow_http_loopback,
    timeout_ms: wid_spiffe_bundle_source_builder_set_timeout_ms,
    refresh_bounds_ms: wid_spiffe_bundle_source_builder_set_refresh_bounds_ms,
    default_refresh_ms: wid_spiffe_bundle_source_builder_set_default_refresh_ms,
    unknown_kid_cooldown_ms: wid_spiffe_bundle_source_builder_set_unknown_kid_cooldown_ms,
    max_body_bytes: wid_spiffe_bundle_source_builder_set_max_body_bytes,
    max_keys: wid_spiffe_bundle_source_builder_set_max_keys,
};

impl<B> FetchSetters<B> {
    /// On builder `b`: valid settings, then every refusal (each named, the
    /// builder unchanged), then every setter with a NULL builder. Leaves
    /// `b` allowing loopback http, with a 2 s timeout and at most 3 keys.
    ///
    /// # Safety
    /// `b` must be a live builder of this type.
    pub unsafe fn check(&self, b: *mut B) {
        let bad = WID_RESULT_INVALID_ARGUMENT;
        let na = WID_RESULT_NULL_ARGUMENT;
        // SAFETY (this block): `b` is live (the contract); NULL is refused.
        unsafe {
            expect((self.allow_http_loopback)(b, 1), WID_RESULT_OK);
            expect((self.timeout_ms)(b, 2000), WID_RESULT_OK);
            expect((self.max_keys)(b, 3), WID_RESULT_OK);
            expect((self.allow_http_loopback)(b, 2), bad);
            expect((self.timeout_ms)(b, 0), bad);
            expect((self.timeout_ms)(b, 604_800_001), bad);
            expect((self.refresh_bounds_ms)(b, 10, 5), bad);
            error_says("min_ms");
            expect((self.refresh_bounds_ms)(b, 0, u64::MAX), bad);
            expect((self.default_refresh_ms)(b, u64::MAX), bad);
            expect((self.unknown_kid_cooldown_ms)(b, u64::MAX), bad);
            expect((self.max_body_bytes)(b, 0), bad);
            expect((self.max_body_bytes)(b, (16 << 20) + 1), bad);
            expect((self.max_keys)(b, 0), bad);
            expect((self.ca_bundle_pem)(b, b"not pem".as_ptr(), 7), bad);
            error_says("ca_bundle_pem");
            expect((self.ca_bundle_pem)(b, null(), 3), na);
            expect((self.ca_bundle_pem)(b, b"x".as_ptr(), usize::MAX), bad);
            // A real bundle, then back to the default roots with (NULL, 0).
            let pem = std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/vectors/tls/ca.pem"
            ))
            .unwrap();
            expect(
                (self.ca_bundle_pem)(b, pem.as_ptr(), pem.len()),
                WID_RESULT_OK,
            );
            expect((self.ca_bundle_pem)(b, null(), 0), WID_RESULT_OK);
            // 0: the library's defaults again.
            expect((self.refresh_bounds_ms)(b, 0, 0), WID_RESULT_OK);
            expect((self.default_refresh_ms)(b, 0), WID_RESULT_OK);
            expect((self.unknown_kid_cooldown_ms)(b, 0), WID_RESULT_OK);
            expect((self.max_body_bytes)(b, 16 << 20), WID_RESULT_OK);

            let n = null_mut();
            expect((self.ca_bundle_pem)(n, null(), 0), na);
            expect((self.allow_http_loopback)(n, 5), na);
            expect((self.timeout_ms)(n, 0), na);
            expect((self.refresh_bounds_ms)(n, 5, 1), na);
            expect((self.default_refresh_ms)(n, 0), na);
            expect((self.unknown_kid_cooldown_ms)(n, 0), na);
            expect((self.max_body_bytes)(n, 0), na);
            expect((self.max_keys)(n, 0), na);
        }
    }

    /// Every setter on `b` with values it would take, each answering
    /// `want` (a handle of another type: `WID_RESULT_INVALID_ARGUMENT`).
    ///
    /// # Safety
    /// `b` must be NULL or a live handle of this library (of any type).
    #[track_caller]
    pub unsafe fn all_answer(&self, b: *mut B, want: wid_result) {
        // SAFETY (this block): the contract; the library checks the type.
        unsafe {
            expect((self.ca_bundle_pem)(b, null(), 0), want);
            expect((self.allow_http_loopback)(b, 1), want);
            expect((self.timeout_ms)(b, 10), want);
            expect((self.refresh_bounds_ms)(b, 1, 2), want);
            expect((self.default_refresh_ms)(b, 1), want);
            expect((self.unknown_kid_cooldown_ms)(b, 1), want);
            expect((self.max_body_bytes)(b, 10), want);
            expect((self.max_keys)(b, 10), want);
        }
    }
}
