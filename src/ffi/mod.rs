//! The stable C ABI, version 1.
//!
//! Conventions (as in rustls-ffi):
//!
//! * Every function is a panic boundary: a panic inside the library becomes
//!   `WID_RESULT_PANIC` (with a message from `wid_last_error_message`), never an
//!   abort or an unwind into C. The library must be built with `panic = "unwind"`
//!   (the default).
//! * Every pointer argument is checked for NULL (`WID_RESULT_NULL_ARGUMENT`). A
//!   (pointer, length) input may be `(NULL, 0)`, meaning empty; `(NULL, n > 0)` is
//!   `WID_RESULT_NULL_ARGUMENT`. Strings are UTF-8, not NUL-terminated; invalid
//!   UTF-8 is `WID_RESULT_INVALID_ARGUMENT` (a token that is not UTF-8 is
//!   `WID_RESULT_MALFORMED_TOKEN`). Lengths beyond a documented cap are rejected
//!   before the memory is read, so a wrong length cannot make the library read
//!   past a small buffer by much.
//! * Outputs are written only on success.
//! * On failure a detail message is kept per thread (`wid_last_error_message`);
//!   it never contains key material or a whole token. Success clears it.
//! * `wid_keyring` and `wid_verifier` are reference counted (`Arc`) and safe to
//!   use from many threads at once; `_free` is NULL-safe. A handle of the wrong
//!   type is detected (`WID_RESULT_INVALID_ARGUMENT`); using a handle after it was
//!   freed is undefined behaviour and is not reliably detected.
//! * `wid_bytes` outputs are owned by the library until `wid_bytes_free`; their
//!   data is always followed by a NUL byte (not counted in `len`), so text can be
//!   used as a C string.

#![allow(unsafe_code)]
#![allow(non_camel_case_types)]

mod boundary;
mod bytes;
#[cfg(feature = "fuzzing")]
mod fuzz;
mod keyring;
mod verify;

pub use boundary::{wid_last_error_message, wid_result_name};
pub use bytes::{wid_bytes, wid_bytes_free};
#[cfg(feature = "fuzzing")]
pub(crate) use fuzz::fuzz_entry;
pub use keyring::{
    wid_issue, wid_issue_with_issuer, wid_keyring, wid_keyring_deprecate, wid_keyring_free,
    wid_keyring_import_jwks, wid_keyring_insert, wid_keyring_jwks, wid_keyring_load,
    wid_keyring_new, wid_keyring_prepublish, wid_keyring_promote_due, wid_keyring_rotate,
    wid_keyring_save,
};
pub use verify::{
    wid_alloc_lookup_fn, wid_verifier, wid_verifier_free, wid_verifier_new,
    wid_verifier_new_with_options, wid_verifier_options, wid_verify, wid_verify_batch,
};

/// Result codes (`wid_result`): stable forever, see `ResultCode` (Rust).
pub type wid_result = u32;

/// Success.
pub const WID_RESULT_OK: wid_result = 0;
/// A required pointer was NULL.
pub const WID_RESULT_NULL_ARGUMENT: wid_result = 1;
/// An argument was not acceptable.
pub const WID_RESULT_INVALID_ARGUMENT: wid_result = 2;
/// Bytes could not be decoded.
pub const WID_RESULT_DECODE_ERROR: wid_result = 3;
/// A file or OS operation failed.
pub const WID_RESULT_IO_ERROR: wid_result = 4;
/// A panic was contained.
pub const WID_RESULT_PANIC: wid_result = 5;
/// The token is not a well-formed compact JWS.
pub const WID_RESULT_MALFORMED_TOKEN: wid_result = 10;
/// The token's `alg` is not `EdDSA`.
pub const WID_RESULT_UNSUPPORTED_ALGORITHM: wid_result = 11;
/// The token's `kid` names no usable key.
pub const WID_RESULT_UNKNOWN_KEY: wid_result = 12;
/// The signature does not verify.
pub const WID_RESULT_BAD_SIGNATURE: wid_result = 13;
/// The token expired.
pub const WID_RESULT_EXPIRED: wid_result = 14;
/// The token is not valid yet.
pub const WID_RESULT_NOT_YET_VALID: wid_result = 15;
/// The token is not for this audience.
pub const WID_RESULT_AUDIENCE_MISMATCH: wid_result = 16;
/// The verifier requires an `iss` and the token's differs or lacks it.
pub const WID_RESULT_ISSUER_MISMATCH: wid_result = 17;
/// The allocation does not exist.
pub const WID_RESULT_ALLOCATION_NOT_FOUND: wid_result = 20;
/// The allocation is terminal.
pub const WID_RESULT_ALLOCATION_TERMINAL: wid_result = 21;
/// The state store could not answer (failed closed).
pub const WID_RESULT_STORE_UNAVAILABLE: wid_result = 22;
/// No key is active.
pub const WID_RESULT_NO_ACTIVE_KEY: wid_result = 30;
/// A key with this ID already exists.
pub const WID_RESULT_DUPLICATE_KEY: wid_result = 31;
/// A token-exchange hook failed (Rust identity manager; never returned by the C ABI).
pub const WID_RESULT_TOKEN_EXCHANGE_FAILED: wid_result = 40;

/// Key state: signs.
pub const WID_KEY_STATE_ACTIVE: u32 = 1;
/// Key state: verifies only.
pub const WID_KEY_STATE_INACTIVE: u32 = 2;
/// Key state: published ahead of signing.
pub const WID_KEY_STATE_PREPUBLISHED: u32 = 3;
/// Key state: neither signs nor verifies.
pub const WID_KEY_STATE_DEPRECATED: u32 = 4;
/// Derivation: HKDF-SHA256 v1 (the default).
pub const WID_KEY_DERIVATION_HKDF_V1: u32 = 1;
/// Derivation: the material is the seed (Nomad compatibility).
pub const WID_KEY_DERIVATION_NOMAD_RAW_SEED: u32 = 2;
/// Consistency: the local replica (may lag).
pub const WID_CONSISTENCY_STALE: u32 = 0;
/// Consistency: agreed with the leader.
pub const WID_CONSISTENCY_CONSISTENT: u32 = 1;
/// Allocation state: no such allocation.
pub const WID_ALLOC_MISSING: u32 = 0;
/// Allocation state: exists, not terminal.
pub const WID_ALLOC_LIVE: u32 = 1;
/// Allocation state: client-terminal.
pub const WID_ALLOC_TERMINAL: u32 = 2;

/// The ABI version this library implements.
pub const WID_ABI_VERSION: u32 = 1;
/// The library's major version.
pub const WID_VERSION_MAJOR: u32 = 0;
/// The library's minor version.
pub const WID_VERSION_MINOR: u32 = 1;
/// The library's patch version.
pub const WID_VERSION_PATCH: u32 = 0;

/// The ABI version (`WID_ABI_VERSION`, 1). Compare with the header's macro.
#[unsafe(no_mangle)]
pub extern "C" fn wid_abi_version() -> u32 {
    WID_ABI_VERSION
}

/// The library version, a static NUL-terminated string such as `"0.1.0"`.
#[unsafe(no_mangle)]
pub extern "C" fn wid_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ResultCode;

    #[test]
    fn constants_are_the_contract() {
        let table: Vec<(u32, u32)> = ResultCode::ALL
            .iter()
            .map(|c| (c.as_u32(), c.as_u32()))
            .collect();
        let ours = [
            WID_RESULT_OK,
            WID_RESULT_NULL_ARGUMENT,
            WID_RESULT_INVALID_ARGUMENT,
            WID_RESULT_DECODE_ERROR,
            WID_RESULT_IO_ERROR,
            WID_RESULT_PANIC,
            WID_RESULT_MALFORMED_TOKEN,
            WID_RESULT_UNSUPPORTED_ALGORITHM,
            WID_RESULT_UNKNOWN_KEY,
            WID_RESULT_BAD_SIGNATURE,
            WID_RESULT_EXPIRED,
            WID_RESULT_NOT_YET_VALID,
            WID_RESULT_AUDIENCE_MISMATCH,
            WID_RESULT_ISSUER_MISMATCH,
            WID_RESULT_ALLOCATION_NOT_FOUND,
            WID_RESULT_ALLOCATION_TERMINAL,
            WID_RESULT_STORE_UNAVAILABLE,
            WID_RESULT_NO_ACTIVE_KEY,
            WID_RESULT_DUPLICATE_KEY,
            WID_RESULT_TOKEN_EXCHANGE_FAILED,
        ];
        assert_eq!(
            table.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            ours.to_vec()
        );
        let v: Vec<u32> = env!("CARGO_PKG_VERSION")
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(v, [WID_VERSION_MAJOR, WID_VERSION_MINOR, WID_VERSION_PATCH]);
        assert_eq!(wid_abi_version(), 1);
        let ver = unsafe { std::ffi::CStr::from_ptr(wid_version()) };
        assert_eq!(ver.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
