//! `wid_consul_login_config`: the built-in Consul login (the Rust
//! `ConsulLogin`, cargo feature `consul`) for a `wid_identity_manager`,
//! configured by setters.
//!
//! The symbols are the same in every build: without the feature,
//! `wid_consul_login_config_new` returns `WID_RESULT_INVALID_ARGUMENT` and says
//! why (so no config can exist, and the other functions refuse a NULL one).

use std::ffi::c_char;

use super::boundary::{call, call_void};
use super::feature_gate::with_feature;
use super::identity_manager::wid_identity_manager_builder;
use super::wid_result;

/// A Consul login being configured (opaque; one owner): made by
/// `wid_consul_login_config_new`, added to a manager by
/// `wid_identity_manager_builder_add_consul_login`, released by
/// `wid_consul_login_config_free`.
pub struct wid_consul_login_config {
    _private: [u8; 0],
}

/// The error of every function here in a build without `consul`.
#[cfg(not(feature = "consul"))]
fn absent() -> workload_identity::Error {
    super::boundary::invalid(
        "wid_consul_login_config",
        "this library was built without the cargo feature `consul`: build it with \
         `cargo build --release -p workload-identity-ffi` (the feature is on by default) to log in to Consul",
    )
}

/// Starts configuring a login to the Consul agent or server at `addr`
/// (`https://host:port`; `http` only to a loopback host with
/// `_set_allow_http_loopback`) with the token of identity (`workload`,
/// `identity`), at JWT auth method `auth_method` (`POST /v1/acl/login`).
/// Defaults: name `consul`, Meta `requested_by` = `nomad_task_<workload>`,
/// no namespace, partition or datacenter, the Mozilla roots, a 10 s timeout,
/// a leeway of 5 s, a least TTL of 10 s. Checked when added to a manager.
/// `*out` receives a handle to free with `wid_consul_login_config_free`.
///
/// # Safety
/// The strings NULL or valid for their lengths; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_new(
    addr: *const c_char,
    addr_len: usize,
    workload: *const c_char,
    workload_len: usize,
    identity: *const c_char,
    identity_len: usize,
    auth_method: *const c_char,
    auth_method_len: usize,
    out: *mut *mut wid_consul_login_config,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (addr, addr_len, workload, workload_len, identity, identity_len, auth_method, auth_method_len, out) => unsafe { imp::new_config([(addr, addr_len), (workload, workload_len), (identity, identity_len)], (auth_method, auth_method_len, "auth_method"), workload_identity::ConsulLogin::builder, out) }),
    )
}

/// Releases a config. NULL-safe.
///
/// # Safety
/// `cfg` must be NULL or a handle from this library not yet freed, with no
/// call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_free(cfg: *mut wid_consul_login_config) {
    // SAFETY: `cfg` is NULL or a live config handle the caller gives up.
    call_void(|| {
        let _nothing_to_report: Result<(), workload_identity::Error> =
            with_feature!("consul", absent(), (cfg) => unsafe { imp::free(cfg) });
    });
}

/// Sets the exchange's name (default `consul`): where its token is saved and
/// how `wid_identity_manager_secret` finds it; each exchange of a manager
/// needs its own.
///
/// # Safety
/// `cfg` NULL or a live handle; `name` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_name(
    cfg: *mut wid_consul_login_config,
    name: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, name, len) => unsafe { imp::set_str(cfg, name, len, "name", |b, v| b.name(v)) }),
    )
}

/// Sets the Consul Enterprise namespace to log in to (the login's
/// `Namespace`, `ns` on the token calls).
///
/// # Safety
/// `cfg` NULL or a live handle; `namespace` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_namespace(
    cfg: *mut wid_consul_login_config,
    namespace: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, namespace, len) => unsafe { imp::set_str(cfg, namespace, len, "namespace", |b, v| b.namespace(v)) }),
    )
}

/// Sets the Consul Enterprise admin partition to log in to (the login's
/// `Partition`, `partition` on the token calls).
///
/// # Safety
/// `cfg` NULL or a live handle; `partition` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_partition(
    cfg: *mut wid_consul_login_config,
    partition: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, partition, len) => unsafe { imp::set_str(cfg, partition, len, "partition", |b, v| b.partition(v)) }),
    )
}

/// Sets the datacenter to log in to (`dc` on every call).
///
/// # Safety
/// `cfg` NULL or a live handle; `datacenter` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_datacenter(
    cfg: *mut wid_consul_login_config,
    datacenter: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, datacenter, len) => unsafe { imp::set_str(cfg, datacenter, len, "datacenter", |b, v| b.datacenter(v)) }),
    )
}

/// Sets the client node's ID, sent as `Meta` `node_id` (as Nomad 2.0.5 and
/// later do).
///
/// # Safety
/// `cfg` NULL or a live handle; `node_id` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_node_id(
    cfg: *mut wid_consul_login_config,
    node_id: *const c_char,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, node_id, len) => unsafe { imp::set_str(cfg, node_id, len, "node_id", |b, v| b.node_id(v)) }),
    )
}

/// Adds `key` = `value` to the login's `Meta` (Consul puts it in the
/// token's `Description`); a key given here replaces a derived one
/// (`requested_by`, `node_id`).
///
/// # Safety
/// `cfg` NULL or a live handle; `key` and `value` NULL or valid for their
/// lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_meta(
    cfg: *mut wid_consul_login_config,
    key: *const c_char,
    key_len: usize,
    value: *const c_char,
    value_len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, key, key_len, value, value_len) => unsafe { imp::set_meta(cfg, key, key_len, value, value_len) }),
    )
}

/// Trusts only the certificates of this PEM bundle (default: the Mozilla
/// roots).
///
/// # Safety
/// `cfg` NULL or a live handle; `pem` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_ca_bundle_pem(
    cfg: *mut wid_consul_login_config,
    pem: *const u8,
    len: usize,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, pem, len) => unsafe { imp::set_pem(cfg, pem, len, |b, v| b.ca_bundle_pem(v)) }),
    )
}

/// Whether the identity's workload is a service (1: `requested_by` =
/// `nomad_service_<workload>`) or a task (0, the default:
/// `nomad_task_<workload>`), as Nomad sends.
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_service(
    cfg: *mut wid_consul_login_config,
    service: u32,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, service) => unsafe { imp::set_flag(cfg, service, "service", |b, v| b.service(v)) }),
    )
}

/// Sets the time a whole request may take (default 10 000 ms; 1 to
/// 600 000).
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_timeout_ms(
    cfg: *mut wid_consul_login_config,
    timeout_ms: u64,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, timeout_ms) => unsafe { imp::set_ms(cfg, timeout_ms, "timeout_ms", 1, |b, d| b.timeout(d)) }),
    )
}

/// Sets the least life an identity token must have left to be sent
/// (default 5 000 ms; 0 to 600 000): match the auth method's
/// `ClockSkewLeeway`.
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_leeway_ms(
    cfg: *mut wid_consul_login_config,
    leeway_ms: u64,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, leeway_ms) => unsafe { imp::set_ms(cfg, leeway_ms, "leeway_ms", 0, |b, d| b.leeway(d)) }),
    )
}

/// Sets the least life a Consul token must have left (default 10 000 ms;
/// 0 to 600 000): a saved one with less after a restore is replaced, and a
/// new login is made at least this long before `ExpirationTime`.
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_min_ttl_ms(
    cfg: *mut wid_consul_login_config,
    min_ttl_ms: u64,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, min_ttl_ms) => unsafe { imp::set_ms(cfg, min_ttl_ms, "min_ttl_ms", 0, |b, d| b.min_ttl(d)) }),
    )
}

/// Allows `http://` to a loopback host (1) or not (0, the default).
///
/// # Safety
/// `cfg` NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_consul_login_config_set_allow_http_loopback(
    cfg: *mut wid_consul_login_config,
    allow: u32,
) -> wid_result {
    // SAFETY: the contract.
    call(
        || with_feature!("consul", absent(), (cfg, allow) => unsafe { imp::set_flag(cfg, allow, "allow", |b, v| b.allow_http_loopback(v)) }),
    )
}

/// Adds the login configured by `cfg` to builder `b` (checked now: the
/// address, names and `Meta`; `cfg` stays the caller's to free, and may be
/// added to other builders). Its Consul token (`SecretID`) is delivered
/// through the watcher (`WID_MANAGED_SECRET`, named as the exchange) and
/// readable with `wid_identity_manager_secret`.
///
/// # Safety
/// `b` and `cfg` NULL or live handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_add_consul_login(
    b: *mut wid_identity_manager_builder,
    cfg: *const wid_consul_login_config,
) -> wid_result {
    // SAFETY: the contract.
    call(|| with_feature!("consul", absent(), (b, cfg) => unsafe { imp::add(b, cfg) }))
}

#[cfg(feature = "consul")]
mod imp {
    use std::ffi::c_char;
    use std::sync::Mutex;

    use super::super::boundary::str_in;
    use super::super::handle::{self, Castable};
    use super::super::login_config::{MAX_STR, change, login_builder};
    use super::wid_consul_login_config;
    use workload_identity::Error;
    use workload_identity::{ConsulLogin, ConsulLoginBuilder};

    pub(super) use super::super::login_config::{
        add, free_config as free, new_config, set_flag, set_ms, set_pem, set_str,
    };

    impl Castable for wid_consul_login_config {
        type Rust = Mutex<Option<ConsulLoginBuilder>>;
        const TAG: u64 = 0x5749_445f_434c_0001; // "WID_CL" v1
        const NAME: &'static str = "wid_consul_login_config";
        const OWNED: bool = true;
    }

    login_builder!(ConsulLoginBuilder => ConsulLogin);

    pub(super) unsafe fn set_meta(
        cfg: *mut wid_consul_login_config,
        key: *const c_char,
        key_len: usize,
        value: *const c_char,
        value_len: usize,
    ) -> Result<(), Error> {
        // SAFETY (this block): the contract.
        unsafe { handle::borrow::<wid_consul_login_config>(cfg, "cfg")? };
        let key = unsafe { str_in(key, key_len, "key", MAX_STR)? };
        let value = unsafe { str_in(value, value_len, "value", MAX_STR)? };
        unsafe { change(cfg, |b: ConsulLoginBuilder| b.meta(key, value)) }
    }
}
