//! The C ABI's side of the security review's length cap (tests/security.rs
//! holds the library's): a length past the cap is refused from the length
//! alone, never turned into a slice.

mod common;

use common::bytes::empty;
use common::identity::{AUD, NOW};
use common::keys::new_keyring;
use workload_identity_ffi::*;

#[test]
fn the_c_abi_never_reads_past_the_clamped_cap() {
    unsafe {
        let kr = new_keyring();
        let mut options: wid_verifier_options = std::mem::zeroed();
        options.max_token_bytes = usize::MAX;
        let mut v = std::ptr::null_mut();
        let rc = wid_verifier_new_with_options(
            kr,
            AUD.as_ptr().cast(),
            AUD.len(),
            &options,
            Some(common::live::ffi_live),
            std::ptr::null_mut(),
            &mut v,
        );
        assert_eq!(rc, WID_RESULT_OK);
        // A length past isize::MAX over a one-byte buffer: refused from the
        // length alone, never turned into a slice.
        let one = [b'a'];
        let mut out = empty();
        let rc = wid_verify(v, one.as_ptr().cast(), usize::MAX / 2 + 1, NOW, &mut out);
        assert_eq!(rc, WID_RESULT_MALFORMED_TOKEN);
        assert!(out.data.is_null());
        let ptrs = [one.as_ptr().cast()];
        let lens = [usize::MAX - 7];
        let mut results = [0u32; 1];
        let rc = wid_verify_batch(
            v,
            ptrs.as_ptr(),
            lens.as_ptr(),
            1,
            NOW,
            results.as_mut_ptr(),
        );
        assert_eq!(rc, WID_RESULT_OK, "the call works; the token fails");
        assert_eq!(results[0], WID_RESULT_MALFORMED_TOKEN);
        wid_verifier_free(v);
        wid_keyring_free(kr);
    }
}
