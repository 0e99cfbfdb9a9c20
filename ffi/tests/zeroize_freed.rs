//! No key material, seed or keystore body is left in freed heap memory by the
//! C ABI's insert, save and load (the library's own life cycle is
//! tests/zeroize_freed.rs in the repository root; the scanner is shared).

mod common;
#[path = "../../tests/zeroize_support/scanner.rs"]
mod scanner;

use common::RSA_PKCS8;
use scanner::{MATERIAL, Scanning};

#[global_allocator]
static GLOBAL: Scanning = Scanning;

fn life_cycle(dir: &std::path::Path) {
    unsafe {
        use workload_identity_ffi::*;
        let mut h = std::ptr::null_mut();
        assert_eq!(wid_keyring_new(&mut h), WID_RESULT_OK);
        let kid = "ffi-key";
        let rc = wid_keyring_insert(
            h,
            kid.as_ptr().cast(),
            kid.len(),
            MATERIAL.as_ptr(),
            32,
            WID_KEY_DERIVATION_HKDF_V1,
            WID_KEY_STATE_ACTIVE,
            0,
        );
        assert_eq!(rc, WID_RESULT_OK);
        let kid = "ffi-rsa";
        let rc = wid_keyring_insert_alg(
            h,
            WID_ALG_RS256,
            kid.as_ptr().cast(),
            kid.len(),
            RSA_PKCS8.as_ptr(),
            RSA_PKCS8.len(),
            WID_KEY_DERIVATION_PKCS8,
            WID_KEY_STATE_ACTIVE,
            0,
        );
        assert_eq!(rc, WID_RESULT_OK);
        let p = dir.join("ffi-keys");
        let p = p.to_str().unwrap();
        assert_eq!(
            wid_keyring_save(h, p.as_ptr().cast(), p.len()),
            WID_RESULT_OK
        );
        let mut loaded = std::ptr::null_mut();
        assert_eq!(
            wid_keyring_load(p.as_ptr().cast(), p.len(), &mut loaded),
            WID_RESULT_OK
        );
        wid_keyring_free(loaded);
        wid_keyring_free(h);
    }
}

#[test]
fn no_secret_is_left_in_freed_memory_by_the_c_abi() {
    scanner::check(RSA_PKCS8, life_cycle);
}
