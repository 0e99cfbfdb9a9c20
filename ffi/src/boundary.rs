//! The panic boundary, argument checks, and the per-thread last error.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::c_enum::CEnum;
use super::{WID_RESULT_OK, WID_RESULT_PANIC, wid_result};
use workload_identity::Error;
use workload_identity::ResultCode;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// Runs `f` as an ABI call: `Ok` is `WID_RESULT_OK` (and clears the last error),
/// an error is its code (and sets the last error), a panic is `WID_RESULT_PANIC`.
pub(crate) fn call(f: impl FnOnce() -> Result<(), Error>) -> wid_result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error(String::new());
            WID_RESULT_OK
        }
        Ok(Err(e)) => {
            set_last_error(e.to_string());
            e.code().as_u32()
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".into());
            set_last_error(
                Error::Panic {
                    message: truncate_for_message(&message),
                }
                .to_string(),
            );
            WID_RESULT_PANIC
        }
    }
}

/// Runs `f` where no result can be returned (the `_free` functions): a panic
/// is contained and recorded; otherwise the last error is left as it was, so a
/// caller may free its outputs before reading why a call failed.
pub(crate) fn call_void(f: impl FnOnce()) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(f)) {
        let _ = call(|| std::panic::resume_unwind(panic));
    }
}

pub(crate) fn null(name: &'static str) -> Error {
    Error::NullArgument { name }
}

pub(crate) fn invalid(name: &'static str, problem: impl Into<String>) -> Error {
    Error::invalid("argument", name, problem)
}

/// The most any (pointer, length) input may claim, whatever `max` a caller of
/// `bytes_in` passes: the slice made from it stays far below `isize::MAX`.
const HARD_MAX_INPUT: usize = 64 << 20;

/// Borrows a (pointer, length) byte input; `(NULL, 0)` is empty. A length
/// above `max` (itself clamped to 64 MiB) is rejected before anything is read.
///
/// # Safety
/// `ptr` must be NULL or valid for reads of `len` bytes for the returned lifetime.
pub(crate) unsafe fn bytes_in<'a>(
    ptr: *const u8,
    len: usize,
    name: &'static str,
    max: usize,
) -> Result<&'a [u8], Error> {
    if ptr.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(null(name)) };
    }
    let max = max.min(HARD_MAX_INPUT);
    if len > max {
        return Err(invalid(
            name,
            format!("is {len} bytes, more than the {max}-byte limit"),
        ));
    }
    // SAFETY: the caller guarantees ptr is valid for len bytes; len <= max <=
    // 64 MiB keeps the slice far below isize::MAX.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrows a (pointer, length) UTF-8 string input (see `bytes_in`).
///
/// # Safety
/// As `bytes_in`.
pub(crate) unsafe fn str_in<'a>(
    ptr: *const c_char,
    len: usize,
    name: &'static str,
    max: usize,
) -> Result<&'a str, Error> {
    // SAFETY: `ptr` is NULL or valid for `len` bytes (this function's contract).
    let bytes = unsafe { bytes_in(ptr.cast(), len, name, max)? };
    std::str::from_utf8(bytes).map_err(|e| {
        invalid(
            name,
            format!(
                "is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// The name of a result code, e.g. `"WID_RESULT_EXPIRED"`; a static
/// NUL-terminated string. Unknown codes give `"WID_RESULT_UNKNOWN"`.
#[unsafe(no_mangle)]
pub extern "C" fn wid_result_name(result: wid_result) -> *const c_char {
    ResultCode::from_u32(result)
        .map_or(c"WID_RESULT_UNKNOWN", ResultCode::c_name)
        .as_ptr()
}

/// Copies this thread's last error detail into `buf` (at most `len - 1` bytes,
/// cut at a character boundary, then a NUL) and returns the detail's full length
/// in bytes (without the NUL). With `buf` NULL or `len` 0 nothing is written:
/// use it to size a buffer. Empty after a successful call.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_last_error_message(buf: *mut c_char, len: usize) -> usize {
    let message = LAST_ERROR.with(|e| e.borrow().clone());
    if !buf.is_null() && len > 0 {
        let mut n = message.len().min(len - 1);
        while !message.is_char_boundary(n) {
            n -= 1;
        }
        // SAFETY: buf is valid for len bytes and n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    message.len()
}

/// Shortens a caller's value (or a panic's message) for quoting in an error
/// message: 64 bytes at most, cut at a character boundary, as the library's
/// own messages quote.
pub(crate) fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        let mut buf = vec![0 as c_char; 512];
        let n = unsafe { wid_last_error_message(buf.as_mut_ptr(), buf.len()) };
        let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(s.to_bytes().len(), n.min(511));
        s.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_a_result_code() {
        let rc = call(|| panic!("boom at the boundary"));
        assert_eq!(rc, WID_RESULT_PANIC);
        assert!(last_error().contains("boom at the boundary"));
        assert_eq!(call(|| Ok(())), WID_RESULT_OK);
        assert_eq!(last_error(), "");
        call_void(|| panic!("in a free function"));
        assert!(last_error().contains("in a free function"));
        // A free that does not panic leaves the detail of the last failure.
        call_void(|| {});
        assert!(last_error().contains("in a free function"));
    }

    #[test]
    fn last_error_is_truncated_safely_and_sized_on_request() {
        let rc = call(|| {
            Err(Error::UnsupportedAlgorithm {
                alg: "é".repeat(10),
                expected: "EdDSA".into(),
            })
        });
        assert_eq!(rc, 11);
        let full = unsafe { wid_last_error_message(std::ptr::null_mut(), 0) };
        assert!(full > 20);
        let mut small = [0x7f as c_char; 8];
        let n = unsafe { wid_last_error_message(small.as_mut_ptr(), small.len()) };
        assert_eq!(n, full);
        assert_eq!(small[7], 0, "always NUL-terminated");
        let text = unsafe { std::ffi::CStr::from_ptr(small.as_ptr()) };
        assert!(text.to_str().is_ok(), "cut at a character boundary");
    }

    #[test]
    fn inputs_are_checked_before_reading() {
        unsafe {
            assert!(bytes_in(std::ptr::null(), 0, "x", 10).unwrap().is_empty());
            assert_eq!(
                bytes_in(std::ptr::null(), 1, "x", 10).unwrap_err().code(),
                ResultCode::NullArgument
            );
            // A huge length is rejected without touching memory.
            let one = [1u8];
            assert_eq!(
                bytes_in(one.as_ptr(), usize::MAX, "x", 10)
                    .unwrap_err()
                    .code(),
                ResultCode::InvalidArgument
            );
            let bad = [0xffu8, 0xfe];
            let e = str_in(bad.as_ptr().cast(), 2, "key_id", 10).unwrap_err();
            assert!(e.to_string().contains("not valid UTF-8"), "{e}");
        }
        for code in 0..40u32 {
            let name = unsafe { std::ffi::CStr::from_ptr(wid_result_name(code)) };
            let want = ResultCode::from_u32(code).map_or("WID_RESULT_UNKNOWN", ResultCode::name);
            assert_eq!(name.to_str().unwrap(), want);
        }
    }
}
