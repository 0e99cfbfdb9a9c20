//! `wid_trust_set`: one verifier for several issuers (the Rust `TrustSet`),
//! each an `iss` or a SPIFFE trust domain with its own keyring (a
//! `wid_keyring`, e.g. `wid_remote_jwks_keyring`'s), audience, and
//! allocation lookup or none (foreign tokens).

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use super::boundary::{call, call_void, str_in};
use super::handle::{self, Castable, out_optional, require_out};
use super::keyring::{keyring_ref, wid_keyring};
use super::verify::{CallbackStore, MAX_AUDIENCE, token_in, wid_alloc_lookup_fn};
use super::{wid_bytes, wid_result};
use workload_identity::{Audience, Error, IssuerId, Keyring, TrustSet, TrustedIssuer};

/// A trust set being configured (opaque; one owner, not reference counted):
/// made by `wid_trust_set_builder_new`, given issuers by
/// `wid_trust_set_builder_add_iss` and `wid_trust_set_builder_add_trust_domain`,
/// turned into trust sets by `wid_trust_set_builder_build`, released by
/// `wid_trust_set_builder_free`.
pub struct wid_trust_set_builder {
    _private: [u8; 0],
}

/// One issuer as added: built into a `TrustedIssuer` by each build.
pub(crate) struct Spec {
    id: IssuerId,
    keyring: Keyring,
    audience: Audience,
    store: Option<CallbackStore>,
}

impl Castable for wid_trust_set_builder {
    type Rust = Mutex<Vec<Spec>>;
    const TAG: u64 = 0x5749_445f_5442_0001; // "WID_TB" v1
    const NAME: &'static str = "wid_trust_set_builder";
    const OWNED: bool = true;
}

/// A trust set (opaque; reference counted).
pub struct wid_trust_set {
    _private: [u8; 0],
}

impl Castable for wid_trust_set {
    type Rust = TrustSet;
    const TAG: u64 = 0x5749_445f_5453_0001; // "WID_TS" v1
    const NAME: &'static str = "wid_trust_set";
}

/// Starts an empty trust set. `*out` receives a handle to free with
/// `wid_trust_set_builder_free`.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_trust_set_builder_new(
    out: *mut *mut wid_trust_set_builder,
) -> wid_result {
    call(|| {
        require_out(out, "out")?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out, "out", || {
                handle::into_raw_owned(Mutex::new(Vec::new()))
            })
        }
    })
}

/// Releases a builder (trust sets built from it are not affected). NULL-safe.
///
/// # Safety
/// `b` must be NULL or a handle from `wid_trust_set_builder_new` not yet
/// freed, with no call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_trust_set_builder_free(b: *mut wid_trust_set_builder) {
    // SAFETY: `b` is NULL or a live builder handle the caller gives up.
    call_void(|| unsafe { handle::free_owned(b) });
}

/// Adds an issuer to builder `b`.
///
/// # Safety
/// As the callers'.
#[allow(clippy::too_many_arguments)]
unsafe fn add(
    b: *const wid_trust_set_builder,
    id: impl FnOnce(&str) -> Result<IssuerId, Error>,
    name: *const c_char,
    name_len: usize,
    kr: *const wid_keyring,
    audience: *const c_char,
    audience_len: usize,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
) -> Result<(), Error> {
    // SAFETY (this block): every pointer is NULL or valid as the callers'
    // contracts say.
    let builder = unsafe { handle::borrow::<wid_trust_set_builder>(b, "builder")? };
    let name = unsafe { str_in(name, name_len, "issuer", MAX_AUDIENCE)? };
    let keyring = unsafe { keyring_ref(kr)? }.clone();
    let audience = unsafe { str_in(audience, audience_len, "audience", MAX_AUDIENCE)? };
    let spec = Spec {
        id: id(name)?,
        keyring,
        audience: Audience::new(audience)?,
        store: match lookup {
            Some(_) => Some(CallbackStore::new(lookup, userdata)?),
            None => None,
        },
    };
    // Specs are whole values pushed at once: a poisoned lock still holds
    // consistent ones.
    builder
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(spec);
    Ok(())
}

/// Trusts the issuer whose tokens carry `iss` (1 to 4096 bytes of UTF-8),
/// verified with `kr`'s keys (shared: later changes are seen; a
/// `wid_remote_jwks_keyring` keyring follows its JWKS while that handle
/// lives) for `audience` (required). With `lookup` (see
/// `wid_alloc_lookup_fn`; `userdata` passed to it untouched, valid until
/// every trust set built is freed) its tokens are Nomad identity tokens
/// whose allocation must be live; with `lookup` NULL they are foreign tokens
/// (SPIRE, Kubernetes, AWS): no Nomad claims, no lookup, `sub` required.
/// Refused values leave the builder unchanged.
///
/// # Safety
/// `b`, `kr` NULL or live handles; `iss`, `audience` NULL or valid for
/// their lengths.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn wid_trust_set_builder_add_iss(
    b: *mut wid_trust_set_builder,
    iss: *const c_char,
    iss_len: usize,
    kr: *const wid_keyring,
    audience: *const c_char,
    audience_len: usize,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
) -> wid_result {
    call(|| {
        // SAFETY: the contract above.
        unsafe {
            add(
                b,
                IssuerId::iss,
                iss,
                iss_len,
                kr,
                audience,
                audience_len,
                lookup,
                userdata,
            )
        }
    })
}

/// Trusts the SPIFFE trust domain `trust_domain` (without `spiffe://`:
/// lower-case letters, digits, `.`, `-`, `_`): JWT-SVIDs whose `sub` is a
/// SPIFFE ID in it, with `exp`, signed with an RS, ES or PS algorithm by a
/// key of `kr`. `audience`, `lookup` and `userdata` as in
/// `wid_trust_set_builder_add_iss`.
///
/// # Safety
/// As `wid_trust_set_builder_add_iss`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn wid_trust_set_builder_add_trust_domain(
    b: *mut wid_trust_set_builder,
    trust_domain: *const c_char,
    trust_domain_len: usize,
    kr: *const wid_keyring,
    audience: *const c_char,
    audience_len: usize,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
) -> wid_result {
    call(|| {
        // SAFETY: the contract above.
        unsafe {
            add(
                b,
                IssuerId::trust_domain,
                trust_domain,
                trust_domain_len,
                kr,
                audience,
                audience_len,
                lookup,
                userdata,
            )
        }
    })
}

/// Builds a trust set from the issuers added so far (the builder stays
/// usable). No issuer, or two under one `iss` or trust domain, is
/// `WID_RESULT_INVALID_ARGUMENT`. `*out` receives a handle to free with
/// `wid_trust_set_free`.
///
/// # Safety
/// `b` NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_trust_set_builder_build(
    b: *const wid_trust_set_builder,
    out: *mut *mut wid_trust_set,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        let builder = unsafe { handle::borrow::<wid_trust_set_builder>(b, "builder")? };
        require_out(out, "out")?;
        let specs = builder.lock().unwrap_or_else(PoisonError::into_inner);
        let mut set = TrustSet::builder();
        for s in specs.iter() {
            let issuer = match s.store {
                Some(store) => TrustedIssuer::nomad(
                    s.id.clone(),
                    s.keyring.clone(),
                    Arc::new(store),
                    s.audience.clone(),
                ),
                None => TrustedIssuer::foreign(s.id.clone(), s.keyring.clone(), s.audience.clone()),
            };
            set = set.issuer(issuer);
        }
        let set = set.build()?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(set)) }
    })
}

/// Releases a trust set. NULL-safe.
///
/// # Safety
/// `t` must be NULL or a handle from `wid_trust_set_builder_build` not yet
/// freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_trust_set_free(t: *const wid_trust_set) {
    // SAFETY: `t` is NULL or a live handle the caller gives up.
    call_void(|| unsafe { handle::free(t) });
}

/// Verifies `token` at `now_unix` with the one issuer it claims (its `iss`,
/// or the trust domain of its SPIFFE `sub`; routed before any key is
/// used). A token naming no trusted issuer, or two, is
/// `WID_RESULT_ISSUER_MISMATCH`. On success `*out_claims_json` receives the
/// claims and `*out_issuer` the issuer that verified it (the `iss`, or
/// `spiffe://<trust domain>`); either may be NULL.
///
/// # Safety
/// `t` NULL or a live handle; `token` NULL or valid for `token_len` bytes;
/// the outputs NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_trust_set_verify(
    t: *const wid_trust_set,
    token: *const c_char,
    token_len: usize,
    now_unix: i64,
    out_claims_json: *mut wid_bytes,
    out_issuer: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `t` is NULL or a live handle; `token` NULL or
        // valid for `token_len` bytes; the outputs NULL or writable.
        let set = unsafe { handle::borrow::<wid_trust_set>(t, "trust_set")? };
        let token = unsafe { token_in(token, token_len, set.max_token_bytes())? };
        let verified = set.verify_bytes(token, now_unix)?;
        unsafe {
            out_optional(out_claims_json, || {
                wid_bytes::from_vec(verified.identity.claims.to_json().into_bytes())
            });
            out_optional(out_issuer, || {
                wid_bytes::from_vec(verified.issuer.into_bytes())
            });
        }
        Ok(())
    })
}
