//! Keys for the C ABI tests: keyrings (empty, with keys of fixed material,
//! with one freshly rotated key, with bearer and WIT keys) and their JWKS,
//! issuer builders and issuers (with the defaults, or built), and workload
//! keys with their public JWK.

use std::ptr::null_mut;

use workload_identity_ffi::*;

use super::bytes::{json_of, text_of};
use super::handles::{free, made};
use super::result::expect;

/// A new, empty keyring.
pub fn new_keyring() -> *mut wid_keyring {
    // SAFETY: `out` is a valid output.
    made(|out| unsafe { wid_keyring_new(out) })
}

/// A keyring with one active EdDSA key `kid` (`wid_keyring_insert`: HKDF v1,
/// 32 bytes of `byte`, created at 0).
pub fn keyring(kid: &str, byte: u8) -> *mut wid_keyring {
    let kr = new_keyring();
    let m = [byte; 32];
    // SAFETY: the key ID and material are valid for their lengths.
    let rc = unsafe {
        wid_keyring_insert(
            kr,
            kid.as_ptr().cast(),
            kid.len(),
            m.as_ptr(),
            m.len(),
            WID_KEY_DERIVATION_HKDF_V1,
            WID_KEY_STATE_ACTIVE,
            0,
        )
    };
    expect(rc, WID_RESULT_OK);
    kr
}

/// Inserts into `kr` an active key of `alg` for `purpose` (ID `kid`, HKDF
/// v1, 32 bytes of `byte`, created at `created`): with
/// `wid_keyring_insert_alg` for `None`, `wid_keyring_insert_purpose`
/// otherwise.
pub fn insert(
    kr: *const wid_keyring,
    purpose: Option<wid_key_purpose>,
    alg: wid_alg,
    kid: &str,
    byte: u8,
    created: i64,
) {
    let m = [byte; 32];
    let (k, kl, (d, dl)) = (kid.as_ptr().cast(), kid.len(), (m.as_ptr(), m.len()));
    let (hkdf, active) = (WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE);
    // SAFETY: the key ID and material are valid for their lengths.
    let rc = unsafe {
        match purpose {
            None => wid_keyring_insert_alg(kr, alg, k, kl, d, dl, hkdf, active, created),
            Some(p) => wid_keyring_insert_purpose(kr, p, alg, k, kl, d, dl, hkdf, active, created),
        }
    };
    expect(rc, WID_RESULT_OK);
}

/// A keyring with active EdDSA and ES256 bearer keys ("ed", "es") and WIT
/// keys ("wit-ed", "wit-es"), of materials 7 to 10, created at `created`:
/// WITs are signed only by WIT keys.
pub fn bearer_and_wit_keyring(created: i64) -> *mut wid_keyring {
    let kr = new_keyring();
    for (purpose, alg, kid, byte) in [
        (WID_KEY_PURPOSE_BEARER, WID_ALG_EDDSA, "ed", 7u8),
        (WID_KEY_PURPOSE_BEARER, WID_ALG_ES256, "es", 8),
        (WID_KEY_PURPOSE_WIT, WID_ALG_EDDSA, "wit-ed", 9),
        (WID_KEY_PURPOSE_WIT, WID_ALG_ES256, "wit-es", 10),
    ] {
        insert(kr, Some(purpose), alg, kid, byte, created);
    }
    kr
}

/// A keyring with one fresh active EdDSA key (`wid_keyring_rotate` at `now`).
pub fn rotated_keyring(now: i64) -> *mut wid_keyring {
    let kr = new_keyring();
    // SAFETY: `kr` is a keyring; the key ID output may be NULL.
    expect(
        unsafe { wid_keyring_rotate(kr, now, null_mut()) },
        WID_RESULT_OK,
    );
    kr
}

/// `kr`'s JWKS (`wid_keyring_jwks`), as the text the library wrote.
pub fn jwks(kr: *const wid_keyring) -> String {
    // SAFETY: `out` is a valid output.
    text_of(|out| unsafe { wid_keyring_jwks(kr, out) })
}

/// A new issuer builder over `kr`.
pub fn issuer_builder(kr: *const wid_keyring) -> *mut wid_issuer_builder {
    // SAFETY: `out` is a valid output.
    made(|out| unsafe { wid_issuer_builder_new(kr, out) })
}

/// An issuer built from `b` (which stays usable).
pub fn build_issuer(b: *const wid_issuer_builder) -> *mut wid_issuer {
    // SAFETY: `out` is a valid output.
    made(|out| unsafe { wid_issuer_builder_build(b, out) })
}

/// An issuer over `kr` with the builder's defaults (the builder freed).
pub fn issuer(kr: *const wid_keyring) -> *mut wid_issuer {
    let b = issuer_builder(kr);
    let iss = build_issuer(b);
    // SAFETY: the issuer does not need its builder, freed once.
    unsafe { free!(b) };
    iss
}

/// A fresh workload key of `alg` (`wid_workload_key_generate`).
pub fn workload_key(alg: wid_alg) -> *mut wid_workload_key {
    // SAFETY: `out` is a valid output.
    made(|out| unsafe { wid_workload_key_generate(alg, out) })
}

/// `key`'s public JWK (`wid_workload_key_public_jwk`).
pub fn public_jwk(key: *const wid_workload_key) -> serde_json::Value {
    // SAFETY: `out` is a valid output.
    json_of(|out| unsafe { wid_workload_key_public_jwk(key, out) })
}
