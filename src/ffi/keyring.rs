//! `wid_keyring` and issuance.

use std::ffi::c_char;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::boundary::{bytes_in, call, call_void, invalid, null, str_in};
use super::{wid_bytes, wid_result};
use crate::codec::DecodeLimits;
use crate::error::Error;
use crate::keyring::{
    KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, MAX_KEY_ID_LEN, RootKey,
};
use crate::model::IssueRequest;
use crate::{Issuer, codec};

/// A shared keyring (opaque; reference counted).
pub struct wid_keyring {
    _private: [u8; 0],
}

const KEYRING_MAGIC: u64 = 0x5749_445f_4b52_0001; // "WID_KR" v1
const DEAD: u64 = 0xdead_dead_dead_dead;
const MAX_PATH: usize = 4096;
const MAX_JSON: usize = 1 << 20;

/// `repr(C)`: the type tag is the first field of every handle, so reading it
/// through the wrong handle type stays in bounds and sees a different tag.
#[repr(C)]
pub(crate) struct KeyringHandle {
    magic: AtomicU64,
    pub(crate) keyring: Keyring,
}

fn into_raw(keyring: Keyring) -> *const wid_keyring {
    Arc::into_raw(Arc::new(KeyringHandle {
        magic: AtomicU64::new(KEYRING_MAGIC),
        keyring,
    }))
    .cast()
}

/// The keyring behind a handle, checked for NULL and for the handle's type.
///
/// # Safety
/// `kr` must be NULL or a live handle from this library.
pub(crate) unsafe fn keyring_ref<'a>(kr: *const wid_keyring) -> Result<&'a Keyring, Error> {
    if kr.is_null() {
        return Err(null("kr"));
    }
    if kr.align_offset(align_of::<KeyringHandle>()) != 0 {
        return Err(invalid("kr", "is not a wid_keyring handle (misaligned)"));
    }
    // SAFETY: a live handle points to a KeyringHandle inside an Arc.
    let h = unsafe { &*kr.cast::<KeyringHandle>() };
    if h.magic.load(Ordering::Relaxed) != KEYRING_MAGIC {
        return Err(invalid("kr", "is not a live wid_keyring handle"));
    }
    Ok(&h.keyring)
}

/// Writes `v` through `out`, or reports a NULL `out`.
fn write_out<T>(out: *mut T, name: &'static str, v: T) -> Result<(), Error> {
    if out.is_null() {
        return Err(null(name));
    }
    // SAFETY: checked non-NULL; the caller provides writable storage.
    unsafe { out.write(v) };
    Ok(())
}

/// Writes `v` through `out` when the caller asked for it: outputs that only
/// report (a new key ID, a count) may be NULL.
fn write_optional<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: non-NULL; the caller provides writable storage.
        unsafe { out.write(v) };
    }
}

fn check_out<T>(out: *mut T, name: &'static str) -> Result<(), Error> {
    if out.is_null() {
        Err(null(name))
    } else {
        Ok(())
    }
}

/// Creates an empty keyring; `*out` receives a handle to free with
/// `wid_keyring_free`.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_new(out: *mut *mut wid_keyring) -> wid_result {
    call(|| {
        check_out(out, "out")?;
        write_out(out, "out", into_raw(Keyring::new()).cast_mut())
    })
}

/// Releases a keyring handle (reference counted: verifiers made from it keep
/// their own reference). NULL-safe.
///
/// # Safety
/// `kr` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_free(kr: *const wid_keyring) {
    call_void(|| {
        // SAFETY: contract; the type check keeps a wrong handle type out.
        if unsafe { keyring_ref(kr) }.is_err() {
            return;
        }
        // SAFETY: kr came from Arc::into_raw in into_raw.
        let arc = unsafe { Arc::from_raw(kr.cast::<KeyringHandle>()) };
        if Arc::strong_count(&arc) == 1 {
            arc.magic.store(DEAD, Ordering::Relaxed);
        }
        drop(arc);
    });
}

/// Inserts a key: `material` must be 32 bytes; `derivation` a
/// `WID_KEY_DERIVATION_*`, `state` a `WID_KEY_STATE_*`. A duplicate ID is
/// `WID_RESULT_DUPLICATE_KEY`; a second active key is
/// `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// Pointers must be NULL or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_insert(
    kr: *const wid_keyring,
    key_id: *const c_char,
    key_id_len: usize,
    material: *const u8,
    material_len: usize,
    derivation: u32,
    state: u32,
    create_time_unix: i64,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let id = unsafe { str_in(key_id, key_id_len, "key_id", MAX_KEY_ID_LEN + 1)? };
        let material = unsafe { bytes_in(material, material_len, "material", 64)? };
        let derivation = KeyDerivation::from_u32(derivation).ok_or_else(|| {
            invalid(
                "derivation",
                format!("{derivation} is not a WID_KEY_DERIVATION_* value (1 or 2)"),
            )
        })?;
        let state = KeyState::from_u32(state).ok_or_else(|| {
            invalid(
                "state",
                format!("{state} is not a WID_KEY_STATE_* value (1 to 4)"),
            )
        })?;
        let key = RootKey::new(
            KeyId::new(id)?,
            KeyMaterial::from_slice(material)?,
            derivation,
            state,
            create_time_unix,
        );
        keyring.insert(key)
    })
}

/// Rotates: a fresh key becomes active and the previous one inactive;
/// `*out_key_id` (may be NULL) receives the new key ID.
///
/// # Safety
/// `out_key_id` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_rotate(
    kr: *const wid_keyring,
    now_unix: i64,
    out_key_id: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let id = keyring.rotate(now_unix)?;
        if !out_key_id.is_null() {
            write_optional(out_key_id, wid_bytes::from_vec(id.to_string().into_bytes()));
        }
        Ok(())
    })
}

/// Adds a prepublished key that becomes active at `publish_at_unix` (see
/// wid_keyring_promote_due); `*out_key_id` (may be NULL) receives its ID.
///
/// # Safety
/// `out_key_id` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_prepublish(
    kr: *const wid_keyring,
    now_unix: i64,
    publish_at_unix: i64,
    out_key_id: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let id = keyring.prepublish(now_unix, publish_at_unix)?;
        if !out_key_id.is_null() {
            write_optional(out_key_id, wid_bytes::from_vec(id.to_string().into_bytes()));
        }
        Ok(())
    })
}

/// Promotes every prepublished key whose publish time has come; `*out_count`
/// (may be NULL) receives how many.
///
/// # Safety
/// `out_count` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_promote_due(
    kr: *const wid_keyring,
    now_unix: i64,
    out_count: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let n = keyring.promote_due(now_unix).len();
        write_optional(out_count, n);
        Ok(())
    })
}

/// Deprecates a key (it stops verifying and leaves the JWKS); the active key
/// cannot be deprecated.
///
/// # Safety
/// `key_id` must be NULL or valid for `key_id_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_deprecate(
    kr: *const wid_keyring,
    key_id: *const c_char,
    key_id_len: usize,
    now_unix: i64,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let id = unsafe { str_in(key_id, key_id_len, "key_id", MAX_KEY_ID_LEN + 1)? };
        keyring.deprecate(id, now_unix)
    })
}

/// The JWKS (`{"keys":[...]}`) of the keys that verify, as JSON.
///
/// # Safety
/// `out_json` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_jwks(
    kr: *const wid_keyring,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        check_out(out_json, "out_json")?;
        write_out(
            out_json,
            "out_json",
            wid_bytes::from_vec(keyring.jwks().to_json().into_bytes()),
        )
    })
}

/// Imports the Ed25519 keys of a JWKS as verify-only keys (all or nothing);
/// `*out_imported` (may be NULL) receives how many were added.
///
/// # Safety
/// `jwks_json` must be NULL or valid for `len` bytes; `out_imported` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_import_jwks(
    kr: *const wid_keyring,
    jwks_json: *const c_char,
    len: usize,
    out_imported: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let json = unsafe { str_in(jwks_json, len, "jwks_json", MAX_JSON)? };
        let report = keyring.import_jwks(json)?;
        write_optional(out_imported, report.imported.len());
        Ok(())
    })
}

/// Saves the keyring to `path` (mode 0600, crash-safe replace).
///
/// # Safety
/// `path` must be NULL or valid for `path_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_save(
    kr: *const wid_keyring,
    path: *const c_char,
    path_len: usize,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        // Empty paths and NUL bytes are refused by the core's save.
        keyring.save(path)
    })
}

/// Loads a keyring saved by `wid_keyring_save` into a new handle.
///
/// # Safety
/// `path` must be NULL or valid for `path_len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_load(
    path: *const c_char,
    path_len: usize,
    out: *mut *mut wid_keyring,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        check_out(out, "out")?;
        // Empty paths and NUL bytes are refused by the core's load.
        let keyring = Keyring::load(path)?;
        write_out(out, "out", into_raw(keyring).cast_mut())
    })
}

/// Signs the identity a msgpack `IssueRequest` (codec names, as Go's
/// go-msgpack writes it) asks for, at `now_unix`; `*out_token` receives the JWT.
///
/// # Safety
/// `request_msgpack` must be NULL or valid for `len` bytes; `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue(
    kr: *const wid_keyring,
    request_msgpack: *const u8,
    len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    // SAFETY: forwarded contract.
    unsafe {
        wid_issue_with_issuer(
            kr,
            request_msgpack,
            len,
            std::ptr::null(),
            0,
            now_unix,
            out_token,
        )
    }
}

/// Like `wid_issue`, with an `iss` claim (`(NULL, 0)` for none).
///
/// # Safety
/// As `wid_issue`; `issuer` NULL or valid for `issuer_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issue_with_issuer(
    kr: *const wid_keyring,
    request_msgpack: *const u8,
    len: usize,
    issuer: *const c_char,
    issuer_len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: contract.
        let keyring = unsafe { keyring_ref(kr)? };
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        let issuer = unsafe { str_in(issuer, issuer_len, "issuer", MAX_PATH)? };
        check_out(out_token, "out_token")?;
        let req: IssueRequest = codec::decode_with(request, &limits)?;
        // NULL or empty: no issuer.
        let signer = Issuer::new(keyring.clone()).issuer(issuer);
        let signed = signer.issue(&req, now_unix)?;
        write_out(
            out_token,
            "out_token",
            wid_bytes::from_vec(signed.token.into_bytes()),
        )
    })
}
