//! The C ABI's text outputs, read from Rust tests: this thread's last error
//! detail (and what it says) and a result's name.

use std::ffi::{CStr, c_char};

use workload_identity_ffi::{wid_last_error_message, wid_result, wid_result_name};

/// This thread's last error detail (empty after a success).
pub fn last_error() -> String {
    let mut buf = [0 as c_char; 1024];
    // SAFETY: the buffer is valid for its length; the library NUL-terminates.
    unsafe { wid_last_error_message(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: NUL-terminated within `buf` (just written).
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// `WID_RESULT_<NAME>` of `rc`.
pub fn name(rc: wid_result) -> String {
    // SAFETY: wid_result_name returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(wid_result_name(rc)) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts this thread's last error detail contains `needle`.
#[track_caller]
pub fn error_says(needle: &str) {
    let e = last_error();
    assert!(e.contains(needle), "{e}");
}
