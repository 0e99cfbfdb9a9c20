//! Strings across the C ABI: a Rust string as the `(pointer, length)` pair
//! the calls take, and text the library or a callback hands back.

use std::ffi::c_char;
use std::ptr::null;

/// A string argument of a C call: its pointer and length.
pub type StrArg = (*const c_char, usize);

/// `v` as the `(pointer, length)` pair a C call takes.
pub fn s(v: &str) -> StrArg {
    (v.as_ptr().cast(), v.len())
}

/// Bytes (perhaps not UTF-8) as the `(pointer, length)` pair a C call takes.
pub fn raw(v: &[u8]) -> StrArg {
    (v.as_ptr().cast(), v.len())
}

/// An optional string as `(pointer, length)`: `None` is `(NULL, 0)`.
pub fn opt(v: Option<&str>) -> StrArg {
    v.map_or((null(), 0), s)
}

/// The `len` bytes of UTF-8 at `p` (a callback's argument: not necessarily
/// NUL-terminated).
pub fn text<'a>(p: *const c_char, len: usize) -> &'a str {
    // SAFETY: the caller passes a pointer valid for `len` bytes.
    unsafe { std::str::from_utf8(std::slice::from_raw_parts(p.cast::<u8>(), len)) }.unwrap()
}

/// [`text`] of what the library hands out, asserting the NUL it puts after
/// the `len` bytes.
pub fn nul_text<'a>(p: *const c_char, len: usize) -> &'a str {
    // SAFETY: the library's strings hold `len` bytes and a NUL after them.
    assert_eq!(unsafe { *p.add(len) }, 0, "NUL-terminated");
    text(p, len)
}
