//! `wid_bytes` outputs read from Rust tests: an empty one for a call to fill,
//! a sentinel a failed call must leave exactly as it was, a filled one's text
//! taken (checked set and NUL-terminated, freed, checked reset), and the text
//! (or JSON) a call that must succeed writes.

use std::ptr::null_mut;

use workload_identity_ffi::{WID_RESULT_OK, wid_bytes, wid_bytes_free, wid_result};

use super::result::expect;

/// `{NULL, 0}`: an output for a call to fill.
pub fn empty() -> wid_bytes {
    wid_bytes {
        data: null_mut(),
        len: 0,
    }
}

/// Whether `b` is still `{NULL, 0}` (see [`empty`]).
pub fn is_empty(b: &wid_bytes) -> bool {
    b.data.is_null() && b.len == 0
}

/// An output a failed call must leave exactly as it was (see [`is_sentinel`]).
pub fn sentinel() -> wid_bytes {
    wid_bytes {
        data: std::ptr::dangling_mut::<u8>(),
        len: 12345,
    }
}

/// Whether `b` still holds [`sentinel`]'s value.
pub fn is_sentinel(b: &wid_bytes) -> bool {
    b.data == std::ptr::dangling_mut::<u8>() && b.len == 12345
}

/// The text of an output the library filled: asserts it is set, UTF-8 and
/// NUL-terminated, frees it and asserts the free reset it to `{NULL, 0}`.
pub fn take(b: &mut wid_bytes) -> String {
    assert!(!b.data.is_null());
    // SAFETY: the library's outputs hold `len` bytes and a NUL after them.
    assert_eq!(unsafe { *b.data.add(b.len) }, 0, "NUL-terminated");
    // SAFETY: `data` holds `len` bytes (above).
    let s = unsafe { std::str::from_utf8(std::slice::from_raw_parts(b.data, b.len)) }
        .unwrap()
        .to_string();
    // SAFETY: `b` was filled by the library and is freed once.
    unsafe { wid_bytes_free(b) };
    assert!(is_empty(b), "wid_bytes_free resets the output");
    s
}

/// [`take`], parsed as JSON.
pub fn json(b: &mut wid_bytes) -> serde_json::Value {
    serde_json::from_str(&take(b)).unwrap()
}

/// The text `call` writes to its output ([`take`]), asserting it succeeded.
#[track_caller]
pub fn text_of(call: impl FnOnce(*mut wid_bytes) -> wid_result) -> String {
    let mut out = empty();
    expect(call(&mut out), WID_RESULT_OK);
    take(&mut out)
}

/// [`text_of`], parsed as JSON.
#[track_caller]
pub fn json_of(call: impl FnOnce(*mut wid_bytes) -> wid_result) -> serde_json::Value {
    serde_json::from_str(&text_of(call)).unwrap()
}

/// What a call filling `out` gave: its text ([`take`]) when `rc` is OK, else
/// `Err(rc)`, asserting the failed call left `out` as `untouched` says it
/// was (`is_empty` for an [`empty`] output, `is_sentinel` for a
/// [`sentinel`]).
#[track_caller]
pub fn taken(
    rc: wid_result,
    out: &mut wid_bytes,
    untouched: fn(&wid_bytes) -> bool,
) -> Result<String, wid_result> {
    if rc == WID_RESULT_OK {
        Ok(take(out))
    } else {
        assert!(untouched(out), "outputs only on success");
        Err(rc)
    }
}
