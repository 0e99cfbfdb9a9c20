//! `wid_keyring`: keys, rotation, JWKS and keystore files.

use std::ffi::c_char;

use super::boundary::{bytes_in, call, call_void, invalid, str_in};
use super::handle::{self, Castable, out_optional, require_out};
use super::{wid_alg, wid_bytes, wid_key_derivation, wid_key_purpose, wid_key_state, wid_result};
use workload_identity::Error;
use workload_identity::{
    Algorithm, KeyDerivation, KeyId, KeyMaterial, KeyPurpose, KeyState, Keyring, MAX_KEY_ID_LEN,
    MAX_PKCS8_LEN, RootKey,
};

/// A shared keyring (opaque; reference counted).
pub struct wid_keyring {
    _private: [u8; 0],
}

impl Castable for wid_keyring {
    type Rust = Keyring;
    const TAG: u64 = 0x5749_445f_4b52_0001; // "WID_KR" v1
    const NAME: &'static str = "wid_keyring";
}

/// Longest path accepted, in bytes.
pub(crate) const MAX_PATH: usize = 4096;
/// Longest JSON document argument read, in bytes.
pub(crate) const MAX_JSON: usize = 1 << 20;

/// The keyring behind handle `kr`.
///
/// # Safety
/// `kr` must be NULL or a live handle from this library.
pub(crate) unsafe fn keyring_ref<'a>(kr: *const wid_keyring) -> Result<&'a Keyring, Error> {
    // SAFETY: `kr` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(kr, "kr") }
}

/// Creates an empty keyring; `*out` receives a handle to free with
/// `wid_keyring_free`.
///
/// # Safety
/// `out` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_new(out: *mut *mut wid_keyring) -> wid_result {
    call(|| {
        // SAFETY: `out` is NULL or writable (the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(Keyring::new())) }
    })
}

/// Releases a keyring handle (reference counted: verifiers made from it keep
/// their own reference). NULL-safe.
///
/// # Safety
/// `kr` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_free(kr: *const wid_keyring) {
    // SAFETY: `kr` is NULL or a live keyring handle the caller gives up.
    call_void(|| unsafe { handle::free(kr) });
}

/// Inserts an EdDSA key: `material` must be 32 bytes; `derivation` a
/// `WID_KEY_DERIVATION_*` (HKDF_V1 or NOMAD_RAW_SEED), `state` a
/// `WID_KEY_STATE_*`. A duplicate ID is `WID_RESULT_DUPLICATE_KEY`; a second
/// active EdDSA key is `WID_RESULT_INVALID_ARGUMENT`.
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
    derivation: wid_key_derivation,
    state: wid_key_state,
    create_time_unix: i64,
) -> wid_result {
    // SAFETY: the same contract, for EdDSA.
    unsafe {
        wid_keyring_insert_alg(
            kr,
            Algorithm::EdDsa.as_u32(),
            key_id,
            key_id_len,
            material,
            material_len,
            derivation,
            state,
            create_time_unix,
        )
    }
}

/// The algorithm a `wid_alg` names, or `WID_RESULT_INVALID_ARGUMENT`.
pub(crate) fn alg_in(alg: u32) -> Result<Algorithm, Error> {
    Algorithm::from_u32(alg).ok_or_else(|| {
        invalid(
            "alg",
            format!("{alg} is not a WID_ALG_* value (1 EdDSA, 2 ES256, 3 RS256)"),
        )
    })
}

/// The purpose a `wid_key_purpose` names, or `WID_RESULT_INVALID_ARGUMENT`.
pub(crate) fn purpose_in(purpose: u32) -> Result<KeyPurpose, Error> {
    KeyPurpose::from_u32(purpose).ok_or_else(|| {
        invalid(
            "purpose",
            format!("{purpose} is not a WID_KEY_PURPOSE_* value (1 bearer, 2 wit)"),
        )
    })
}

/// Inserts a bearer key of algorithm `alg` (a `WID_ALG_*`): EdDSA takes 32 bytes of
/// material with HKDF_V1 or NOMAD_RAW_SEED, ES256 32 bytes with HKDF_V1, RS256 a
/// PKCS#8 DER private key (2048 to 8192 bits, e = 65537) with
/// `WID_KEY_DERIVATION_PKCS8`. Any other pairing, an RSA key under 2048 bits
/// or with another exponent, or an unknown `alg` is
/// `WID_RESULT_INVALID_ARGUMENT`; a second active key of `alg` too.
///
/// # Safety
/// Pointers must be NULL or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_insert_alg(
    kr: *const wid_keyring,
    alg: wid_alg,
    key_id: *const c_char,
    key_id_len: usize,
    material: *const u8,
    material_len: usize,
    derivation: wid_key_derivation,
    state: wid_key_state,
    create_time_unix: i64,
) -> wid_result {
    // SAFETY: the same contract, for a bearer key.
    unsafe {
        wid_keyring_insert_purpose(
            kr,
            KeyPurpose::Bearer.as_u32(),
            alg,
            key_id,
            key_id_len,
            material,
            material_len,
            derivation,
            state,
            create_time_unix,
        )
    }
}

/// `wid_keyring_insert_alg` for a key of `purpose` (a `WID_KEY_PURPOSE_*`):
/// `WID_KEY_PURPOSE_WIT` inserts a key that signs WITs only
/// (`wid_issue_wit`) and is published only in the WIT key set
/// (`wid_keyring_jwks_purpose`). One active key per (purpose, algorithm); an
/// unknown `purpose` is `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// Pointers must be NULL or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_insert_purpose(
    kr: *const wid_keyring,
    purpose: wid_key_purpose,
    alg: wid_alg,
    key_id: *const c_char,
    key_id_len: usize,
    material: *const u8,
    material_len: usize,
    derivation: wid_key_derivation,
    state: wid_key_state,
    create_time_unix: i64,
) -> wid_result {
    call(|| {
        let purpose = purpose_in(purpose)?;
        // SAFETY: `kr` is NULL or a live handle; `key_id` and `material` are
        // NULL or valid for their lengths (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let alg = alg_in(alg)?;
        let id = unsafe { str_in(key_id, key_id_len, "key_id", MAX_KEY_ID_LEN + 1)? };
        let material = unsafe { bytes_in(material, material_len, "material", MAX_PKCS8_LEN)? };
        let derivation = KeyDerivation::from_u32(derivation).ok_or_else(|| {
            invalid(
                "derivation",
                format!("{derivation} is not a WID_KEY_DERIVATION_* value (1 to 3)"),
            )
        })?;
        let state = KeyState::from_u32(state).ok_or_else(|| {
            invalid(
                "state",
                format!("{state} is not a WID_KEY_STATE_* value (1 to 4)"),
            )
        })?;
        let material = match derivation {
            KeyDerivation::Pkcs8 => KeyMaterial::from_pkcs8_der(material)?,
            _ => KeyMaterial::from_slice(material)?,
        };
        let key = RootKey::for_algorithm(
            alg,
            KeyId::new(id)?,
            material,
            derivation,
            state,
            create_time_unix,
        )
        .with_purpose(purpose);
        keyring.insert(key)
    })
}

/// Rotates EdDSA: a fresh key becomes active and the previous one inactive;
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
    // SAFETY: the same contract, for EdDSA.
    unsafe { wid_keyring_rotate_alg(kr, Algorithm::EdDsa.as_u32(), now_unix, out_key_id) }
}

/// Rotates the bearer keys of `alg` (a `WID_ALG_*`): a fresh key (a 2048-bit
/// RSA key for RS256) becomes the active bearer key of `alg` and the previous
/// one inactive; other keys are untouched. `*out_key_id` (may be NULL)
/// receives the new key ID.
///
/// # Safety
/// `out_key_id` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_rotate_alg(
    kr: *const wid_keyring,
    alg: wid_alg,
    now_unix: i64,
    out_key_id: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the same contract, for bearer keys.
    unsafe {
        wid_keyring_rotate_purpose(kr, KeyPurpose::Bearer.as_u32(), alg, now_unix, out_key_id)
    }
}

/// Rotates the keys of the (`purpose`, `alg`) pair: a fresh key of that
/// purpose becomes the pair's active key and the previous one inactive.
/// `WID_KEY_PURPOSE_WIT` makes the key `wid_issue_wit` signs with (WITs are
/// never signed by a bearer key). `*out_key_id` (may be NULL) receives the
/// new key ID. An unknown `purpose` or `alg` is `WID_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `kr` must be NULL or a live handle; `out_key_id` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_rotate_purpose(
    kr: *const wid_keyring,
    purpose: wid_key_purpose,
    alg: wid_alg,
    now_unix: i64,
    out_key_id: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let id = keyring.rotate_purpose(purpose_in(purpose)?, alg_in(alg)?, now_unix)?;
        // SAFETY: `out_key_id` is NULL or writable (the contract).
        unsafe {
            out_optional(out_key_id, || {
                wid_bytes::from_vec(id.to_string().into_bytes())
            })
        };
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
        // SAFETY: `kr` is NULL or a live handle (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let id = keyring.prepublish(now_unix, publish_at_unix)?;
        // SAFETY: `out_key_id` is NULL or writable (the contract).
        unsafe {
            out_optional(out_key_id, || {
                wid_bytes::from_vec(id.to_string().into_bytes())
            })
        };
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
        // SAFETY: `kr` is NULL or a live handle (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let n = keyring.promote_due(now_unix).len();
        // SAFETY: `out_count` is NULL or writable (the contract).
        unsafe { out_optional(out_count, || n) };
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
        // SAFETY: `kr` is NULL or a live handle; `key_id` NULL or valid for
        // `key_id_len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let id = unsafe { str_in(key_id, key_id_len, "key_id", MAX_KEY_ID_LEN + 1)? };
        keyring.deprecate(id, now_unix)
    })
}

/// The JWKS (`{"keys":[...]}`) relying parties trust, as JSON: the bearer
/// keys that verify. WIT keys are never in it (see
/// `wid_keyring_jwks_purpose`).
///
/// # Safety
/// `out_json` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_jwks(
    kr: *const wid_keyring,
    out_json: *mut wid_bytes,
) -> wid_result {
    // SAFETY: the same contract, for bearer keys.
    unsafe { wid_keyring_jwks_purpose(kr, KeyPurpose::Bearer.as_u32(), out_json) }
}

/// The key set of `purpose` that verifies, as JSON: `WID_KEY_PURPOSE_BEARER`
/// is `wid_keyring_jwks`'s JWKS, `WID_KEY_PURPOSE_WIT` the WIT key set (what
/// `wid serve` serves at `/wit/jwks.json`), for receivers of WITs only: never
/// give it to a relying party that accepts bearer tokens.
///
/// # Safety
/// `kr` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_jwks_purpose(
    kr: *const wid_keyring,
    purpose: wid_key_purpose,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let purpose = purpose_in(purpose)?;
        // SAFETY: `out_json` is NULL or writable (the contract).
        unsafe {
            handle::out(out_json, "out_json", || {
                wid_bytes::from_vec(keyring.jwks_for(purpose).to_json().into_bytes())
            })
        }
    })
}

/// The default `spiffe_refresh_hint` of `wid_keyring_spiffe_bundle`, in
/// seconds (`wid keyring jwks --format spiffe`'s).
const DEFAULT_SPIFFE_REFRESH_HINT_SECS: u64 = 300;

/// The keyring's keys as a SPIFFE trust bundle's JWT authorities, as JSON:
/// `{"keys":[...],"spiffe_refresh_hint":<secs>}`, each key a JWK of the
/// JWKS with `"use":"jwt-svid"`. Only ES256 and RS256 keys are listed (a
/// JWT-SVID cannot be EdDSA), so a keyring of EdDSA keys gives
/// `{"keys":[],...}`. WIT keys are never listed (some validators ignore
/// `use`): `wid_keyring_jwks_purpose(kr, WID_KEY_PURPOSE_WIT, ...)` gives
/// the WIT key set. `refresh_hint_secs` is how often validators should
/// fetch the bundle again; 0 means the default, 300 (5 minutes).
///
/// # Safety
/// `kr` must be NULL or a live handle; `out_json` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_spiffe_bundle(
    kr: *const wid_keyring,
    refresh_hint_secs: u64,
    out_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        require_out(out_json, "out_json")?;
        let hint = match refresh_hint_secs {
            0 => DEFAULT_SPIFFE_REFRESH_HINT_SECS,
            n => n,
        };
        let json = keyring
            .jwks()
            .to_spiffe_bundle_json(std::time::Duration::from_secs(hint));
        // SAFETY: `out_json` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out_json, "out_json", || {
                wid_bytes::from_vec(json.into_bytes())
            })
        }
    })
}

/// Imports the keys of a JWKS as verify-only bearer keys (all or nothing):
/// OKP Ed25519, EC P-256, P-384 and P-521 (ES256, ES384, ES512), and RSA
/// (2048 to 8192 bits, e = 65537; RS256 without `alg`, else the `alg` given:
/// RS256/384/512 or PS256/384/512) with `use` absent or `sig` (a SPIFFE bundle's `jwt-svid` entries as bearer keys, its
/// `wit-svid` entries as WIT keys); `use: enc` entries and unknown key types
/// are skipped; a private member, an unusable point, a duplicate `kid` or an
/// `alg` that does not match the key refuses the whole set;
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
        // SAFETY: `kr` is NULL or a live handle; `jwks_json` NULL or valid for
        // `len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let json = unsafe { str_in(jwks_json, len, "jwks_json", MAX_JSON)? };
        let report = keyring.import_jwks(json)?;
        // SAFETY: `out_imported` is NULL or writable (the contract).
        unsafe { out_optional(out_imported, || report.imported.len()) };
        Ok(())
    })
}

/// `wid_keyring_import_jwks` for a key set of `purpose`: import the WIT key
/// set (`/wit/jwks.json`) with `WID_KEY_PURPOSE_WIT`, so its keys verify
/// WITs (`wid_verify_proof`) and never bearer tokens (`wid_verify`).
///
/// # Safety
/// `kr` must be NULL or a live handle; `jwks_json` NULL or valid for `len`
/// bytes; `out_imported` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_import_jwks_purpose(
    kr: *const wid_keyring,
    purpose: wid_key_purpose,
    jwks_json: *const c_char,
    len: usize,
    out_imported: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle; `jwks_json` NULL or valid for
        // `len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let purpose = purpose_in(purpose)?;
        let json = unsafe { str_in(jwks_json, len, "jwks_json", MAX_JSON)? };
        let report = keyring.import_jwks_as(json, purpose)?;
        // SAFETY: `out_imported` is NULL or writable (the contract).
        unsafe { out_optional(out_imported, || report.imported.len()) };
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
        // SAFETY: `kr` is NULL or a live handle; `path` NULL or valid for
        // `path_len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        // Empty paths and NUL bytes are refused by the core's save.
        keyring.save(path)
    })
}

/// Loads a keyring saved by `wid_keyring_save` into a new handle.
/// `*out` receives a handle to free with `wid_keyring_free`.
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
        // SAFETY: `path` is NULL or valid for `path_len` bytes (the contract).
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        require_out(out, "out")?;
        // Empty paths and NUL bytes are refused by the core's load.
        let keyring = Keyring::load(path)?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(keyring)) }
    })
}
