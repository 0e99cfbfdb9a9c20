//! `wid_vault_login_config`: the built-in Vault/OpenBao login (the Rust
//! `VaultLogin`, cargo feature `vault`) for a `wid_identity_manager`,
//! configured by setters.
//!
//! The symbols are the same in every build: without the feature,
//! `wid_vault_login_config_new` returns `WID_RESULT_INVALID_ARGUMENT` and says
//! why (so no config can exist, and the other functions refuse a NULL one).

use std::ffi::c_char;

use super::boundary::{call, call_void};
use super::feature_gate::with_feature;
use super::identity_manager::wid_identity_manager_builder;
use super::wid_result;

// The functions every login's config has (the handle, `_new`, `_free`, the
// shared setters, adding it to a manager): made by ffi/build.rs from
// src/login_config/abi.rs.in.
include!(concat!(env!("OUT_DIR"), "/vault_login_abi.rs"));

/// Sets the JWT auth method's mount path (default `jwt`).
///
/// # Safety
/// As `wid_vault_login_config_set_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_mount(
    cfg: *mut wid_vault_login_config,
    mount: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, mount, len) => unsafe { imp::set_str(cfg, mount, len, "mount", |b, v| b.mount(v)) }),
    )
}
