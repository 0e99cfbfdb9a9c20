//! Wrapped keystores through the C ABI: `wid_key_wrapper_kek_file`,
//! `wid_keyring_save_wrapped`, `wid_keyring_load_wrapped`,
//! `wid_keystore_rewrap`; NULLs, wrong handle types, outputs left alone on
//! failure, and the Transit constructor's answers (a build without the
//! feature says so; with it, an unreachable server fails closed).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::ptr::{null, null_mut};

use common::ffi_text::{error_says, last_error, name};
use common::keys::{jwks, new_keyring};
use common::strings::s;
use workload_identity_ffi::*;

fn kek_file(dir: &std::path::Path, name: &str, byte: u8) -> String {
    let p = dir.join(name);
    std::fs::write(&p, [byte; 32]).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.display().to_string()
}

unsafe fn wrapper(path: &str) -> *mut wid_key_wrapper {
    let mut w = null_mut();
    let (p, n) = s(path);
    let rc = unsafe { wid_key_wrapper_kek_file(p, n, &mut w) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    w
}

#[test]
fn wrapped_keystores_through_the_c_abi() {
    let dir = tempfile::tempdir().unwrap();
    let ka = kek_file(dir.path(), "kek-a", 0x11);
    let kb = kek_file(dir.path(), "kek-b", 0x22);
    let ks = dir.path().join("keystore").display().to_string();
    unsafe {
        let a = wrapper(&ka);
        let b = wrapper(&kb);
        let kr = new_keyring();
        for alg in [WID_ALG_EDDSA, WID_ALG_ES256, WID_ALG_RS256] {
            assert_eq!(
                wid_keyring_rotate_alg(kr, alg, 1_700_000_000, null_mut()),
                WID_RESULT_OK
            );
        }
        let (p, n) = s(&ks);
        assert_eq!(wid_keyring_save_wrapped(kr, p, n, a), WID_RESULT_OK);
        let bytes = std::fs::read(&ks).unwrap();
        assert!(bytes.windows(9).any(|w| w == b"\xa7Version\x03"));

        // Loads with its KEK; the JWKS is the same.
        let mut back = null_mut();
        assert_eq!(wid_keyring_load_wrapped(p, n, a, &mut back), WID_RESULT_OK);
        assert_eq!(jwks(back), jwks(kr));
        wid_keyring_free(back);

        // Another KEK, no KEK: refused, the handle left alone.
        let sentinel = std::ptr::dangling_mut::<wid_keyring>();
        let mut out = sentinel;
        assert_eq!(
            wid_keyring_load_wrapped(p, n, b, &mut out),
            WID_RESULT_KEY_CUSTODY_FAILED
        );
        error_says("not by the given KEK");
        assert_eq!(out, sentinel, "no output on failure");
        assert_eq!(
            wid_keyring_load(p, n, &mut out),
            WID_RESULT_KEY_CUSTODY_FAILED
        );
        error_says("no KEK was given");
        assert_eq!(
            name(WID_RESULT_KEY_CUSTODY_FAILED),
            "WID_RESULT_KEY_CUSTODY_FAILED"
        );

        // A to B, B to plaintext, plaintext to A.
        let mut keys = 0usize;
        assert_eq!(wid_keystore_rewrap(p, n, a, b, &mut keys), WID_RESULT_OK);
        assert_eq!(keys, 3);
        assert_eq!(wid_keyring_load_wrapped(p, n, b, &mut back), WID_RESULT_OK);
        wid_keyring_free(back);
        assert_eq!(
            wid_keystore_rewrap(p, n, b, null(), null_mut()),
            WID_RESULT_OK
        );
        assert_eq!(wid_keyring_load(p, n, &mut back), WID_RESULT_OK);
        wid_keyring_free(back);
        // A plaintext keystore with a wrapper given is refused.
        assert_eq!(
            wid_keyring_load_wrapped(p, n, a, &mut out),
            WID_RESULT_KEY_CUSTODY_FAILED
        );
        error_says("plaintext");
        assert_eq!(
            wid_keystore_rewrap(p, n, null(), a, null_mut()),
            WID_RESULT_OK
        );
        // The wrong source KEK changes nothing.
        let kept = std::fs::read(&ks).unwrap();
        assert_eq!(
            wid_keystore_rewrap(p, n, b, null(), null_mut()),
            WID_RESULT_KEY_CUSTODY_FAILED
        );
        assert_eq!(std::fs::read(&ks).unwrap(), kept);

        // NULLs and wrong handle types.
        assert_eq!(
            wid_keyring_save_wrapped(kr, p, n, null()),
            WID_RESULT_NULL_ARGUMENT
        );
        assert_eq!(
            wid_keyring_save_wrapped(null(), p, n, a),
            WID_RESULT_NULL_ARGUMENT
        );
        assert_eq!(
            wid_keyring_save_wrapped(kr, null(), 4, a),
            WID_RESULT_NULL_ARGUMENT
        );
        assert_eq!(
            wid_keyring_load_wrapped(p, n, null(), &mut out),
            WID_RESULT_NULL_ARGUMENT
        );
        assert_eq!(
            wid_keyring_load_wrapped(p, n, a, null_mut()),
            WID_RESULT_NULL_ARGUMENT
        );
        assert_eq!(
            wid_keyring_save_wrapped(kr, p, n, kr.cast::<wid_key_wrapper>()),
            WID_RESULT_INVALID_ARGUMENT
        );
        error_says("wid_key_wrapper");
        assert_eq!(
            wid_keyring_save_wrapped(a.cast::<wid_keyring>(), p, n, a),
            WID_RESULT_INVALID_ARGUMENT
        );
        let mut w = std::ptr::dangling_mut::<wid_key_wrapper>();
        assert_eq!(
            wid_key_wrapper_kek_file(null(), 3, &mut w),
            WID_RESULT_NULL_ARGUMENT
        );
        let (mp, mn) = s("/nonexistent/kek");
        assert_eq!(
            wid_key_wrapper_kek_file(mp, mn, &mut w),
            WID_RESULT_IO_ERROR
        );
        assert_eq!(
            w,
            std::ptr::dangling_mut::<wid_key_wrapper>(),
            "no output on failure"
        );
        assert_eq!(
            wid_key_wrapper_kek_file(mp, mn, null_mut()),
            WID_RESULT_NULL_ARGUMENT
        );
        // A readable KEK file is refused.
        std::fs::set_permissions(&ka, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (kp, kn) = s(&ka);
        assert_eq!(
            wid_key_wrapper_kek_file(kp, kn, &mut w),
            WID_RESULT_IO_ERROR
        );
        error_says("mode 0644");

        // Transit: refused plainly when built without it, fails closed on an
        // unreachable server when built with it.
        let (ap, an) = s("https://127.0.0.1:1");
        let (kp, kn) = s("kek");
        let (tp, tn) = s("token");
        let rc = wid_key_wrapper_transit(ap, an, null(), 0, kp, kn, tp, tn, null(), 0, &mut w);
        if cfg!(feature = "transit") {
            assert_eq!(rc, WID_RESULT_KEY_CUSTODY_FAILED, "{}", last_error());
            error_says("cannot reach Transit");
        } else {
            assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
            error_says("--features transit");
        }
        assert_eq!(w, std::ptr::dangling_mut::<wid_key_wrapper>());
        let (hp, hn) = s("http://vault.example.com");
        let rc = wid_key_wrapper_transit(hp, hn, null(), 0, kp, kn, tp, tn, null(), 0, &mut w);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT, "{}", last_error());

        wid_key_wrapper_free(a);
        wid_key_wrapper_free(b);
        wid_key_wrapper_free(null());
        wid_keyring_free(kr);
    }
}
