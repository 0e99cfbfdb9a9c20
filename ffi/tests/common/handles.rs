//! The C ABI's handles in Rust tests: one made through a call's output
//! parameter ([`made`]), and handles freed, several at once and in order,
//! each by its own type's `wid_*_free` (`free!`).

use std::ptr::null_mut;

use workload_identity_ffi::*;

use super::result::expect;

/// The handle `call` writes to its output, asserting it succeeded and wrote
/// one.
#[track_caller]
pub fn made<T>(call: impl FnOnce(*mut *mut T) -> wid_result) -> *mut T {
    let mut h = null_mut();
    expect(call(&mut h), WID_RESULT_OK);
    assert!(!h.is_null(), "a handle on success");
    h
}

/// A handle of the C ABI, freed by its type's `wid_*_free`.
pub trait Handle: Copy {
    /// Frees the handle (NULL does nothing).
    ///
    /// # Safety
    /// `self` is NULL or a live handle of this type the caller gives up.
    unsafe fn free(self);
}

/// `Handle` for `*mut` and `*const` handles of each type, by its free.
macro_rules! handles {
    ($($t:ident => $free:ident),* $(,)?) => {$(
        impl Handle for *mut $t {
            unsafe fn free(self) {
                // SAFETY: as `Handle::free`'s caller promises.
                unsafe { $free(self as _) }
            }
        }
        impl Handle for *const $t {
            unsafe fn free(self) {
                // SAFETY: as `Handle::free`'s caller promises.
                unsafe { $free(self as _) }
            }
        }
    )*};
}

handles! {
    wid_claims => wid_claims_free,
    wid_consul_login_config => wid_consul_login_config_free,
    wid_identity_manager => wid_identity_manager_free,
    wid_identity_manager_builder => wid_identity_manager_builder_free,
    wid_issuer => wid_issuer_free,
    wid_issuer_builder => wid_issuer_builder_free,
    wid_key_wrapper => wid_key_wrapper_free,
    wid_keyring => wid_keyring_free,
    wid_node_identity_manager => wid_node_identity_manager_free,
    wid_remote_jwks => wid_remote_jwks_free,
    wid_remote_jwks_builder => wid_remote_jwks_builder_free,
    wid_trust_set => wid_trust_set_free,
    wid_trust_set_builder => wid_trust_set_builder_free,
    wid_vault_login_config => wid_vault_login_config_free,
    wid_verifier => wid_verifier_free,
    wid_verifier_builder => wid_verifier_builder_free,
    wid_workload_key => wid_workload_key_free,
}

/// Frees each handle given, in order, by its type's `wid_*_free` (an
/// `unsafe` operation: each must be NULL or live, and given up).
macro_rules! free {
    ($($h:expr),+ $(,)?) => {{
        $($crate::common::handles::Handle::free($h);)+
    }};
}
pub(crate) use free;
