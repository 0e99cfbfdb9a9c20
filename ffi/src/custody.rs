//! `wid_key_wrapper`: key-encryption keys for wrapped keystores (version 3),
//! a local KEK file or a Vault/OpenBao Transit key.

use std::ffi::c_char;
use std::sync::Arc;

use super::boundary::{bytes_in, call, call_void, str_in};
use super::handle::{self, Castable, require_out};
use super::keyring::{MAX_PATH, keyring_ref, wid_keyring};
use super::wid_result;
use workload_identity::Error;
use workload_identity::{KekFile, KeyWrapper};
use workload_identity::{Keyring, KeystoreLoadOptions};

/// A key-encryption key that wraps keystores (opaque; reference counted).
pub struct wid_key_wrapper {
    _private: [u8; 0],
}

impl Castable for wid_key_wrapper {
    type Rust = Arc<dyn KeyWrapper>;
    const TAG: u64 = 0x5749_445f_4b57_0001; // "WID_KW" v1
    const NAME: &'static str = "wid_key_wrapper";
}

/// The wrapper behind handle `w`.
///
/// # Safety
/// `w` must be NULL or a live handle from this library.
unsafe fn wrapper_ref<'a>(w: *const wid_key_wrapper) -> Result<&'a Arc<dyn KeyWrapper>, Error> {
    // SAFETY: `w` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(w, "wrapper") }
}

/// A wrapper whose KEK is read from a file: exactly 32 raw bytes, or 44
/// standard-base64 characters and an optional newline; a file group or
/// others can access is refused (`WID_RESULT_IO_ERROR`, naming its mode).
/// AES-256-GCM, a fresh nonce per key, the key's ID and algorithm as
/// associated data. `*out` receives a handle to free with
/// `wid_key_wrapper_free`.
///
/// # Safety
/// `path` must be NULL or valid for `path_len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_key_wrapper_kek_file(
    path: *const c_char,
    path_len: usize,
    out: *mut *mut wid_key_wrapper,
) -> wid_result {
    call(|| {
        // SAFETY: `path` is NULL or valid for `path_len` bytes (the contract).
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        require_out(out, "out")?;
        let kek: Arc<dyn KeyWrapper> = Arc::new(KekFile::load(path)?);
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw::<wid_key_wrapper>(kek)) }
    })
}

/// A wrapper whose KEK is the Vault/OpenBao Transit encryption key `key`
/// (type `aes256-gcm96`) at `addr` (https; http only to a loopback host),
/// mounted at `mount` (NULL or empty: `transit`). `token` NULL or empty: the
/// environment's `VAULT_TOKEN`, then `BAO_TOKEN`. `ca_pem` NULL: the Mozilla
/// roots; else a PEM bundle to trust instead. Checks with Transit that the
/// key exists and is an AEAD key (`WID_RESULT_KEY_CUSTODY_FAILED` naming
/// what was wrong: address, token, permission or key). Only in a library
/// built with the `transit` feature; otherwise `WID_RESULT_INVALID_ARGUMENT`
/// saying so.
///
/// # Safety
/// Every (pointer, length) pair must be NULL or valid for its length; `out`
/// NULL or writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // a flat C signature
pub unsafe extern "C" fn wid_key_wrapper_transit(
    addr: *const c_char,
    addr_len: usize,
    mount: *const c_char,
    mount_len: usize,
    key: *const c_char,
    key_len: usize,
    token: *const c_char,
    token_len: usize,
    ca_pem: *const u8,
    ca_pem_len: usize,
    out: *mut *mut wid_key_wrapper,
) -> wid_result {
    call(|| {
        // SAFETY: each pair is NULL or valid for its length (the contract).
        let addr = unsafe { str_in(addr, addr_len, "addr", 2048)? };
        let mount = unsafe { str_in(mount, mount_len, "mount", 1024)? };
        let key = unsafe { str_in(key, key_len, "key", 1024)? };
        let token = unsafe { str_in(token, token_len, "token", 64 << 10)? };
        let ca = if ca_pem.is_null() {
            None
        } else {
            Some(unsafe { bytes_in(ca_pem, ca_pem_len, "ca_pem", 1 << 20)? })
        };
        require_out(out, "out")?;
        let wrapper = transit_wrapper(addr, mount, key, token, ca)?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw::<wid_key_wrapper>(wrapper)) }
    })
}

#[cfg(feature = "transit")]
fn transit_wrapper(
    addr: &str,
    mount: &str,
    key: &str,
    token: &str,
    ca: Option<&[u8]>,
) -> Result<Arc<dyn KeyWrapper>, Error> {
    let mut b = workload_identity::TransitClient::builder(addr).allow_http_loopback(true);
    if !mount.is_empty() {
        b = b.mount(mount);
    }
    if !token.is_empty() {
        b = b.token(token);
    }
    if let Some(pem) = ca {
        b = b.ca_bundle_pem(pem);
    }
    Ok(Arc::new(workload_identity::Transit::new(b.build()?, key)?))
}

#[cfg(not(feature = "transit"))]
fn transit_wrapper(
    _: &str,
    _: &str,
    _: &str,
    _: &str,
    _: Option<&[u8]>,
) -> Result<Arc<dyn KeyWrapper>, Error> {
    Err(super::boundary::invalid(
        "addr",
        "this build of the C library has no Transit support: rebuild it with `cargo build --release -p workload-identity-ffi --features transit`",
    ))
}

/// Releases a wrapper handle (reference counted). NULL-safe.
///
/// # Safety
/// `w` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_key_wrapper_free(w: *const wid_key_wrapper) {
    // SAFETY: `w` is NULL or a live wrapper handle the caller gives up.
    call_void(|| unsafe { handle::free(w) });
}

/// Saves the keyring to `path` as a wrapped keystore (version 3): every key's
/// material wrapped by `wrapper`, none in plaintext (mode 0600, crash-safe
/// replace; nothing is written unless every key wrapped).
///
/// # Safety
/// `kr` and `wrapper` must be NULL or live handles; `path` NULL or valid for
/// `path_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_save_wrapped(
    kr: *const wid_keyring,
    path: *const c_char,
    path_len: usize,
    wrapper: *const wid_key_wrapper,
) -> wid_result {
    call(|| {
        // SAFETY: handles NULL or live, `path` NULL or valid (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        let wrapper = unsafe { wrapper_ref(wrapper)? };
        keyring.save_wrapped(path, &**wrapper)
    })
}

/// Loads a keystore wrapped by `wrapper` into a new handle. No KEK or
/// another KEK, or any change to a wrapped key, is
/// `WID_RESULT_KEY_CUSTODY_FAILED` (the message says which); a plaintext
/// keystore is refused too (wrap it first with `wid_keystore_rewrap`).
/// `*out` receives a handle to free with `wid_keyring_free`.
///
/// # Safety
/// `path` must be NULL or valid for `path_len` bytes; `wrapper` NULL or a
/// live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keyring_load_wrapped(
    path: *const c_char,
    path_len: usize,
    wrapper: *const wid_key_wrapper,
    out: *mut *mut wid_keyring,
) -> wid_result {
    call(|| {
        // SAFETY: `path` NULL or valid, `wrapper` NULL or live (the contract).
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        let wrapper = unsafe { wrapper_ref(wrapper)? };
        require_out(out, "out")?;
        let keyring = Keyring::load_with(
            path,
            &KeystoreLoadOptions::default().wrapper(Arc::clone(wrapper)),
        )?;
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(keyring)) }
    })
}

/// Converts the keystore at `path` in place, crash-safely: read with `from`
/// (NULL: a plaintext keystore) and written wrapped by `to` (NULL: in
/// plaintext). Plaintext to wrapped, one KEK to another, and back are each
/// one call; with `from` and `to` the same KEK the keys are rewrapped. On
/// failure the file is unchanged. `out_keys` (may be NULL) receives the
/// number of keys.
///
/// # Safety
/// `path` must be NULL or valid for `path_len` bytes; `from` and `to` NULL
/// or live handles; `out_keys` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_keystore_rewrap(
    path: *const c_char,
    path_len: usize,
    from: *const wid_key_wrapper,
    to: *const wid_key_wrapper,
    out_keys: *mut usize,
) -> wid_result {
    call(|| {
        // SAFETY: `path` NULL or valid; `from`/`to` NULL or live (the contract).
        let path = unsafe { str_in(path, path_len, "path", MAX_PATH)? };
        let from = if from.is_null() {
            None
        } else {
            Some(Arc::clone(unsafe { wrapper_ref(from)? }))
        };
        let to = if to.is_null() {
            None
        } else {
            Some(Arc::clone(unsafe { wrapper_ref(to)? }))
        };
        let mut options = KeystoreLoadOptions::default();
        if let Some(w) = from {
            options = options.wrapper(w);
        }
        let n = Keyring::rewrap_keystore(path, &options, to.as_deref())?;
        // SAFETY: `out_keys` is NULL or writable (the contract).
        unsafe { handle::out_optional(out_keys, || n) };
        Ok(())
    })
}
