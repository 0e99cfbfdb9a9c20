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

// The functions every login's config has (the handle, `_new`, `_free`, the
// shared setters, adding it to a manager): made by ffi/build.rs from
// src/login_config/abi.rs.in.
include!(concat!(env!("OUT_DIR"), "/consul_login_abi.rs"));

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
        || with_feature!("consul", absent(), (cfg, key, key_len, value, value_len) => unsafe { meta::set_meta(cfg, key, key_len, value, value_len) }),
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

/// Consul's own: the `Meta` a login sends.
#[cfg(feature = "consul")]
mod meta {
    use std::ffi::c_char;

    use super::super::boundary::str_in;
    use super::super::handle;
    use super::super::login_config::{MAX_STR, change};
    use super::wid_consul_login_config;
    use workload_identity::ConsulLoginBuilder;
    use workload_identity::Error;

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
