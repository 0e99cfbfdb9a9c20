//! C ABI verifiers for the tests, benchmarks and instruction counts of the
//! C path.

use std::sync::Arc;

use super::identity::AUD;
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, Verifier};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

/// A C ABI allocation lookup that answers "live" for every allocation.
pub unsafe extern "C" fn ffi_live(
    _: *mut std::ffi::c_void,
    _: *const u8,
    _: usize,
    _: u32,
    out: *mut u32,
) -> u32 {
    unsafe { *out = workload_identity_ffi::WID_ALLOC_LIVE };
    workload_identity_ffi::WID_RESULT_OK
}

/// A C ABI keyring of one active key (raw-seed `material`, key `kid`). Free
/// it with `wid_keyring_free`.
pub fn ffi_keyring(kid: &str, material: &[u8; 32]) -> *mut workload_identity_ffi::wid_keyring {
    use workload_identity_ffi::*;
    unsafe {
        let mut kr = std::ptr::null_mut();
        assert_eq!(wid_keyring_new(&mut kr), WID_RESULT_OK);
        let rc = wid_keyring_insert(
            kr,
            kid.as_ptr().cast(),
            kid.len(),
            material.as_ptr(),
            32,
            WID_KEY_DERIVATION_NOMAD_RAW_SEED,
            WID_KEY_STATE_ACTIVE,
            0,
        );
        assert_eq!(rc, WID_RESULT_OK);
        kr
    }
}

/// A C ABI verifier over a one-key keyring (raw-seed `material`, key `kid`)
/// whose allocation lookup answers "live": for benchmarks and instruction
/// counts of the C ABI path. Free it with `wid_verifier_free`.
pub fn ffi_live_verifier(
    kid: &str,
    material: &[u8; 32],
) -> *mut workload_identity_ffi::wid_verifier {
    use workload_identity_ffi::*;
    unsafe {
        let kr = ffi_keyring(kid, material);
        let mut v = std::ptr::null_mut();
        let rc = wid_verifier_new(
            kr,
            AUD.as_ptr().cast(),
            AUD.len(),
            60,
            Some(ffi_live),
            std::ptr::null_mut(),
            &mut v,
        );
        assert_eq!(rc, WID_RESULT_OK);
        wid_keyring_free(kr);
        v
    }
}

/// A keyring of one active key (raw-seed `material`, key `kid`): the same
/// key as [`ffi_keyring`]'s.
pub fn native_keyring(kid: &str, material: &[u8; 32]) -> Keyring {
    Keyring::from_keys([RootKey::new(
        KeyId::new(kid).unwrap(),
        KeyMaterial::from_slice(material).unwrap(),
        KeyDerivation::NomadRawSeed,
        KeyState::Active,
        0,
    )])
    .unwrap()
}

/// The native side of the same comparison: a verifier over a one-key keyring
/// (raw-seed `material`, key `kid`) whose store holds the sample task's
/// allocation, and a token of that task issued at `now`.
pub fn native_verifier_and_token(kid: &str, material: &[u8; 32], now: i64) -> (Verifier, String) {
    let kr = native_keyring(kid, material);
    let req = super::issue_request_task();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&req.allocation);
    let token = Issuer::new(kr.clone()).issue(&req, now).unwrap().token;
    let verifier = Verifier::builder(kr, store, Audience::new(AUD).unwrap()).build();
    (verifier, token)
}
