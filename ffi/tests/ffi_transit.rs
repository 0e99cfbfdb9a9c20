//! `wid_key_wrapper_transit` against a real OpenBao (feature `transit`):
//! a keystore saved and loaded through the C ABI, wrapped by a Transit key,
//! and a key name Transit does not have refused (the library's custody
//! tests are tests/transit.rs in the repository root; the server harness is
//! shared).

#[path = "../../tests/bao_support/mod.rs"]
mod bao_support;
mod common;

use bao_support::Bao;
use common::keys::new_keyring;
use common::strings::s;
use workload_identity_ffi::*;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn transit_through_the_c_abi() {
    let bao = Bao::start();
    let dir = tempfile::tempdir().unwrap();
    through_the_c_abi(&bao, dir.path());
}

/// `wid_key_wrapper_transit` (token from the argument, the server's CA as a
/// PEM bundle), then save and load through the C ABI.
fn through_the_c_abi(bao: &Bao, dir: &std::path::Path) {
    use std::ptr::{null, null_mut};
    bao.cmd(&["write", "-f", "transit/keys/wid-ffi", "type=aes256-gcm96"]);
    let ca = bao.ca_pem();
    let ks = dir.join("ffi-keystore").display().to_string();
    unsafe {
        let (ap, an) = s(&bao.addr);
        let (kp, kn) = s("wid-ffi");
        let (tp, tn) = s(&bao.root_token);
        let mut w = null_mut();
        let rc = wid_key_wrapper_transit(
            ap,
            an,
            null(),
            0,
            kp,
            kn,
            tp,
            tn,
            ca.as_ptr(),
            ca.len(),
            &mut w,
        );
        assert_eq!(rc, WID_RESULT_OK);
        let kr = new_keyring();
        assert_eq!(
            wid_keyring_rotate_alg(kr, WID_ALG_ES256, 0, null_mut()),
            WID_RESULT_OK
        );
        let (pp, pn) = s(&ks);
        assert_eq!(wid_keyring_save_wrapped(kr, pp, pn, w), WID_RESULT_OK);
        assert!(contains(&std::fs::read(&ks).unwrap(), b"vault:v1:"));
        let mut back = null_mut();
        assert_eq!(
            wid_keyring_load_wrapped(pp, pn, w, &mut back),
            WID_RESULT_OK
        );
        wid_keyring_free(back);
        // A key name Transit does not have.
        let (bp, bn) = s("no-such-key");
        let mut none = null_mut();
        let rc = wid_key_wrapper_transit(
            ap,
            an,
            null(),
            0,
            bp,
            bn,
            tp,
            tn,
            ca.as_ptr(),
            ca.len(),
            &mut none,
        );
        assert_eq!(rc, WID_RESULT_KEY_CUSTODY_FAILED);
        assert!(none.is_null());
        wid_key_wrapper_free(w);
        wid_keyring_free(kr);
    }
}
