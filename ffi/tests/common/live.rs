//! C ABI verifiers for the tests, benchmarks and instruction counts of the
//! C path.

use super::identity::AUD;

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

/// A C ABI verifier over a one-key keyring (raw-seed `material`, key `kid`)
/// whose allocation lookup answers "live": for benchmarks and instruction
/// counts of the C ABI path. Free it with `wid_verifier_free`.
pub fn ffi_live_verifier(
    kid: &str,
    material: &[u8; 32],
) -> *mut workload_identity_ffi::wid_verifier {
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
