//! Asserting a C call's `wid_result`: by name, with the library's detail for
//! this thread when it is not the one wanted.

use workload_identity_ffi::wid_result;

use super::ffi_text::{last_error, name};

/// Asserts `rc` is `want`, naming both and the library's detail on failure.
#[track_caller]
pub fn expect(rc: wid_result, want: wid_result) {
    assert_eq!(name(rc), name(want), "{}", last_error());
}

/// The value of `r`, asserting (as [`expect`] does) that it is not a code.
#[track_caller]
pub fn ok<T>(r: Result<T, wid_result>) -> T {
    match r {
        Ok(v) => v,
        Err(rc) => {
            expect(rc, workload_identity_ffi::WID_RESULT_OK);
            unreachable!("{rc} is not WID_RESULT_OK")
        }
    }
}
