//! `wid_bytes`: byte buffers the library hands out.

use super::boundary::call_void;

/// Bytes owned by the library until `wid_bytes_free`. `data` is followed by a
/// NUL byte not counted in `len`; `{NULL, 0}` is an empty value.
///
/// As an output it is written without being read or freed: passing one that
/// still holds bytes leaks them. Reuse one by `wid_bytes_free`ing it first
/// (which empties it).
#[repr(C)]
#[derive(Debug)]
pub struct wid_bytes {
    /// The bytes (NUL-terminated).
    pub data: *mut u8,
    /// Their number, without the NUL.
    pub len: usize,
}

impl wid_bytes {
    /// Hands `bytes` out to the caller (adding the trailing NUL).
    pub(crate) fn from_vec(mut bytes: Vec<u8>) -> wid_bytes {
        let len = bytes.len();
        bytes.push(0);
        let data = Box::into_raw(bytes.into_boxed_slice()).cast::<u8>();
        wid_bytes { data, len }
    }
}

/// Frees bytes returned by the library and resets them to `{NULL, 0}`.
/// NULL-safe, and safe on an already reset value.
///
/// # Safety
/// `b` must be NULL or point to a `wid_bytes` filled by this library (or reset).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_bytes_free(b: *mut wid_bytes) {
    call_void(|| {
        if b.is_null() {
            return;
        }
        // SAFETY: b points to a wid_bytes per the contract.
        let b = unsafe { &mut *b };
        if !b.data.is_null() {
            // SAFETY: data/len + 1 came from Box<[u8]> in from_vec.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(b.data, b.len + 1)) });
        }
        b.data = std::ptr::null_mut();
        b.len = 0;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_double_free_is_safe() {
        let mut b = wid_bytes::from_vec(b"hello".to_vec());
        assert_eq!(b.len, 5);
        assert_eq!(unsafe { *b.data.add(5) }, 0);
        unsafe { wid_bytes_free(&mut b) };
        assert!(b.data.is_null() && b.len == 0);
        unsafe { wid_bytes_free(&mut b) };
        unsafe { wid_bytes_free(std::ptr::null_mut()) };
    }
}
