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

/// A Vault login being configured (opaque; one owner): made by
/// `wid_vault_login_config_new`, added to a manager by
/// `wid_identity_manager_builder_add_vault_login`, released by
/// `wid_vault_login_config_free`.
pub struct wid_vault_login_config {
    _private: [u8; 0],
}

/// The error of every function here in a build without `vault`.
#[cfg(not(feature = "vault"))]
fn absent() -> workload_identity::Error {
    super::boundary::invalid(
        "wid_vault_login_config",
        "this library was built without the cargo feature `vault`: build it with \
         `cargo build --release -p workload-identity-ffi` (the feature is on by default) to log in to Vault or OpenBao",
    )
}

/// Starts configuring a login to the Vault or OpenBao at `addr`
/// (`https://host:port`; `http` only to a loopback host with
/// `_set_allow_http_loopback`) with the token of identity (`workload`,
/// `identity`), as JWT auth role `role`. Defaults: name `vault`, mount
/// `jwt`, no namespace, the Mozilla roots, a 10 s timeout, a least TTL of
/// 60 s. Checked when added to a manager. `*out` receives a handle to free
/// with `wid_vault_login_config_free`.
///
/// # Safety
/// The strings NULL or valid for their lengths; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_new(
    addr: *const c_char,
    addr_len: usize,
    workload: *const c_char,
    workload_len: usize,
    identity: *const c_char,
    identity_len: usize,
    role: *const c_char,
    role_len: usize,
    out: *mut *mut wid_vault_login_config,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (addr, addr_len, workload, workload_len, identity, identity_len, role, role_len, out) => unsafe { imp::new_config([(addr, addr_len), (workload, workload_len), (identity, identity_len)], (role, role_len, "role"), workload_identity::VaultLogin::builder, out) }),
    )
}

/// Releases a config. NULL-safe.
///
/// # Safety
/// `cfg` must be NULL or a handle from this library not yet freed, with no
/// call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_free(cfg: *mut wid_vault_login_config) {
    // SAFETY: `cfg` is NULL or a live config handle the caller gives up.
    call_void(|| {
        let _nothing_to_report: Result<(), workload_identity::Error> =
            with_feature!("vault", absent(), (cfg) => unsafe { imp::free(cfg) });
    });
}

/// Sets the exchange's name (default `vault`): where its token is saved and
/// how `wid_identity_manager_secret` finds it; each exchange of a manager
/// needs its own.
///
/// # Safety
/// `cfg` NULL or a live handle; `name` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_name(
    cfg: *mut wid_vault_login_config,
    name: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, name, len) => unsafe { imp::set_str(cfg, name, len, "name", |b, v| b.name(v)) }),
    )
}

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

/// Sets the namespace to log in to (sent as `X-Vault-Namespace`).
///
/// # Safety
/// As `wid_vault_login_config_set_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_namespace(
    cfg: *mut wid_vault_login_config,
    namespace: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, namespace, len) => unsafe { imp::set_str(cfg, namespace, len, "namespace", |b, v| b.namespace(v)) }),
    )
}

/// Trusts only the certificates of this PEM bundle (default: the Mozilla
/// roots).
///
/// # Safety
/// `cfg` NULL or a live handle; `pem` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_ca_bundle_pem(
    cfg: *mut wid_vault_login_config,
    pem: *const u8,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, pem, len) => unsafe { imp::set_pem(cfg, pem, len, |b, v| b.ca_bundle_pem(v)) }),
    )
}

/// Sets the time a whole request may take (default 10 000 ms; 1 to
/// 600 000).
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_timeout_ms(
    cfg: *mut wid_vault_login_config,
    timeout_ms: u64,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, timeout_ms) => unsafe { imp::set_ms(cfg, timeout_ms, "timeout_ms", 1, |b, d| b.timeout(d)) }),
    )
}

/// Sets the least TTL a token must have left to be kept (default 60 000 ms;
/// 0 to 600 000): a saved token after a restore, or one just renewed; keep it
/// below the role's `token_ttl`.
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_min_ttl_ms(
    cfg: *mut wid_vault_login_config,
    min_ttl_ms: u64,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, min_ttl_ms) => unsafe { imp::set_ms(cfg, min_ttl_ms, "min_ttl_ms", 0, |b, d| b.min_ttl(d)) }),
    )
}

/// Allows `http://` to a loopback host (1) or not (0, the default).
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_vault_login_config_set_allow_http_loopback(
    cfg: *mut wid_vault_login_config,
    allow: u32,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("vault", absent(), (cfg, allow) => unsafe { imp::set_flag(cfg, allow, "allow", |b, v| b.allow_http_loopback(v)) }),
    )
}

/// Adds the login configured by `cfg` to builder `b` (checked now: the
/// address, mount, namespace, role and name; `cfg` stays the caller's to
/// free, and may be added to other builders). Its client token is delivered
/// through the watcher (`WID_MANAGED_SECRET`, named as the exchange) and
/// readable with `wid_identity_manager_secret`.
///
/// # Safety
/// `b` and `cfg` NULL or live handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_add_vault_login(
    b: *mut wid_identity_manager_builder,
    cfg: *const wid_vault_login_config,
) -> wid_result {
    // SAFETY: the contract.
    call(|| with_feature!("vault", absent(), (b, cfg) => unsafe { imp::add(b, cfg) }))
}

#[cfg(feature = "vault")]
mod imp {
    use std::sync::Mutex;

    use super::super::handle::Castable;
    use super::super::login_config::login_builder;
    use super::wid_vault_login_config;
    use workload_identity::{VaultLogin, VaultLoginBuilder};

    pub(super) use super::super::login_config::{
        add, free_config as free, new_config, set_flag, set_ms, set_pem, set_str,
    };

    impl Castable for wid_vault_login_config {
        type Rust = Mutex<Option<VaultLoginBuilder>>;
        const TAG: u64 = 0x5749_445f_564c_0001; // "WID_VL" v1
        const NAME: &'static str = "wid_vault_login_config";
        const OWNED: bool = true;
    }

    login_builder!(VaultLoginBuilder => VaultLogin);
}
