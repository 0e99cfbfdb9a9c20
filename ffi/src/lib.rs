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
//! * `wid_keyring`, `wid_verifier`, `wid_issuer`, `wid_remote_jwks` and
//!   `wid_node_identity_manager` are reference counted (`Arc`) and safe to use from many threads at once;
//!   `wid_workload_key` and the builders (`wid_issuer_builder`,
//!   `wid_verifier_builder`, `wid_remote_jwks_builder`) have one owner
//!   (`Box`); `_free` is NULL-safe. A
//!   handle of the wrong type is detected (`WID_RESULT_INVALID_ARGUMENT`);
//!   using a handle after it was freed is undefined behaviour and is not
//!   reliably detected.
//! * `wid_bytes` outputs are owned by the library until `wid_bytes_free`; their
//!   data is always followed by a NUL byte (not counted in `len`), so text can be
//!   used as a C string.

#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![allow(non_camel_case_types)]

mod boundary;
mod bytes;
mod c_enum;
mod claims;
mod codes;
mod consul_login;
mod custody;
mod explain;
mod feature_gate;
#[cfg(feature = "remote-jwks")]
mod fetch_tuning;
#[cfg(feature = "remote-jwks")]
mod followed;
/// The `ffi` fuzz target's entry point (fuzz/, and the corpus replay):
/// not part of the C ABI (feature `fuzzing`, off by default).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handle;
mod host_callbacks;
mod identity_manager;
mod issue;
mod issuer;
mod keyring;
#[cfg(any(feature = "vault", feature = "consul"))]
mod login_config;
mod node_manager;
mod proof;
mod remote_jwks;
mod spiffe_bundle_source;
mod trust_set;
mod vault_login;
mod verifier_builder;
mod verify;

pub use boundary::{wid_last_error_message, wid_result_name};
pub use bytes::{wid_bytes, wid_bytes_free};
pub use claims::{
    WID_CLAIM_ALLOCATION_ID, WID_CLAIM_CONSUL_NAMESPACE, WID_CLAIM_EXPIRES, WID_CLAIM_ISSUED_AT,
    WID_CLAIM_ISSUER, WID_CLAIM_JOB_ID, WID_CLAIM_JWT_ID, WID_CLAIM_NAMESPACE,
    WID_CLAIM_NODE_CLASS, WID_CLAIM_NODE_DATACENTER, WID_CLAIM_NODE_ID, WID_CLAIM_NODE_POOL,
    WID_CLAIM_NOT_BEFORE, WID_CLAIM_SERVICE, WID_CLAIM_SUBJECT, WID_CLAIM_TASK,
    WID_CLAIM_VAULT_NAMESPACE, WID_CLAIM_VAULT_ROLE, wid_claims, wid_claims_audience,
    wid_claims_audience_count, wid_claims_free, wid_claims_i64, wid_claims_identity_name,
    wid_claims_parse, wid_claims_str, wid_verify_claims,
};
pub use codes::*;
pub use consul_login::{
    wid_consul_login_config, wid_consul_login_config_free, wid_consul_login_config_new,
    wid_consul_login_config_set_allow_http_loopback, wid_consul_login_config_set_ca_bundle_pem,
    wid_consul_login_config_set_datacenter, wid_consul_login_config_set_leeway_ms,
    wid_consul_login_config_set_meta, wid_consul_login_config_set_min_ttl_ms,
    wid_consul_login_config_set_name, wid_consul_login_config_set_namespace,
    wid_consul_login_config_set_node_id, wid_consul_login_config_set_partition,
    wid_consul_login_config_set_service, wid_consul_login_config_set_timeout_ms,
    wid_identity_manager_builder_add_consul_login,
};
pub use custody::{
    wid_key_wrapper, wid_key_wrapper_free, wid_key_wrapper_kek_file, wid_key_wrapper_transit,
    wid_keyring_load_wrapped, wid_keyring_save_wrapped, wid_keystore_rewrap,
};
pub use explain::{wid_explain, wid_verifier_stats};
pub use host_callbacks::{
    ExchangeRefreshReason, ExchangeRefreshed, ManagedEvent, ManagedValue, wid_exchange_derive_fn,
    wid_exchange_refresh_fn, wid_exchange_release_fn, wid_identity_sign_fn, wid_identity_watch_fn,
    wid_output, wid_output_set,
};
pub use identity_manager::{
    wid_identity_manager, wid_identity_manager_builder, wid_identity_manager_builder_add_exchange,
    wid_identity_manager_builder_add_identity, wid_identity_manager_builder_build,
    wid_identity_manager_builder_free, wid_identity_manager_builder_new,
    wid_identity_manager_builder_set_issuer, wid_identity_manager_builder_set_proof_of_possession,
    wid_identity_manager_builder_set_signer, wid_identity_manager_builder_set_watcher,
    wid_identity_manager_current, wid_identity_manager_end_allocation, wid_identity_manager_free,
    wid_identity_manager_health_json, wid_identity_manager_next_due_ms,
    wid_identity_manager_restore, wid_identity_manager_secret, wid_identity_manager_start,
    wid_identity_manager_tick,
};
pub use issue::{wid_issue, wid_issue_alg, wid_issue_node, wid_issue_with_issuer};
pub use issuer::{
    wid_issuer, wid_issuer_builder, wid_issuer_builder_build, wid_issuer_builder_free,
    wid_issuer_builder_new, wid_issuer_builder_set_algorithm,
    wid_issuer_builder_set_extra_claims_policy, wid_issuer_builder_set_issuer,
    wid_issuer_builder_set_spiffe, wid_issuer_builder_set_wimse_trust_domain, wid_issuer_free,
    wid_issuer_issue, wid_issuer_issue_node,
};
pub use keyring::{
    wid_keyring, wid_keyring_deprecate, wid_keyring_free, wid_keyring_import_jwks,
    wid_keyring_import_jwks_purpose, wid_keyring_insert, wid_keyring_insert_alg,
    wid_keyring_insert_purpose, wid_keyring_jwks, wid_keyring_jwks_purpose, wid_keyring_load,
    wid_keyring_new, wid_keyring_prepublish, wid_keyring_promote_due, wid_keyring_rotate,
    wid_keyring_rotate_alg, wid_keyring_rotate_purpose, wid_keyring_save,
    wid_keyring_spiffe_bundle,
};
pub use node_manager::{
    wid_node_identity_manager, wid_node_identity_manager_current, wid_node_identity_manager_free,
    wid_node_identity_manager_health_json, wid_node_identity_manager_new,
    wid_node_identity_manager_next_due_ms, wid_node_identity_manager_restore,
    wid_node_identity_manager_start, wid_node_identity_manager_tick,
};
pub use proof::{
    wid_issue_wit, wid_verify_proof, wid_workload_key, wid_workload_key_free,
    wid_workload_key_generate, wid_workload_key_prove, wid_workload_key_public_jwk,
};
pub use remote_jwks::{
    wid_remote_jwks, wid_remote_jwks_builder, wid_remote_jwks_builder_build,
    wid_remote_jwks_builder_free, wid_remote_jwks_builder_new,
    wid_remote_jwks_builder_new_discover, wid_remote_jwks_builder_set_allow_http_loopback,
    wid_remote_jwks_builder_set_ca_bundle_pem, wid_remote_jwks_builder_set_default_refresh_ms,
    wid_remote_jwks_builder_set_max_body_bytes, wid_remote_jwks_builder_set_max_keys,
    wid_remote_jwks_builder_set_refresh_bounds_ms, wid_remote_jwks_builder_set_timeout_ms,
    wid_remote_jwks_builder_set_unknown_kid_cooldown_ms, wid_remote_jwks_free,
    wid_remote_jwks_keyring, wid_remote_jwks_refresh, wid_remote_jwks_start_refresher,
    wid_remote_jwks_stats,
};
pub use spiffe_bundle_source::{
    wid_spiffe_bundle_source, wid_spiffe_bundle_source_builder,
    wid_spiffe_bundle_source_builder_build, wid_spiffe_bundle_source_builder_free,
    wid_spiffe_bundle_source_builder_new, wid_spiffe_bundle_source_builder_set_allow_http_loopback,
    wid_spiffe_bundle_source_builder_set_ca_bundle_pem,
    wid_spiffe_bundle_source_builder_set_default_refresh_ms,
    wid_spiffe_bundle_source_builder_set_max_body_bytes,
    wid_spiffe_bundle_source_builder_set_max_keys,
    wid_spiffe_bundle_source_builder_set_refresh_bounds_ms,
    wid_spiffe_bundle_source_builder_set_timeout_ms,
    wid_spiffe_bundle_source_builder_set_unknown_kid_cooldown_ms, wid_spiffe_bundle_source_free,
    wid_spiffe_bundle_source_keyring, wid_spiffe_bundle_source_refresh,
    wid_spiffe_bundle_source_reset_sequence, wid_spiffe_bundle_source_start_refresher,
    wid_spiffe_bundle_source_stats,
};
pub use trust_set::{
    wid_trust_set, wid_trust_set_builder, wid_trust_set_builder_add_iss,
    wid_trust_set_builder_add_trust_domain, wid_trust_set_builder_build,
    wid_trust_set_builder_free, wid_trust_set_builder_new, wid_trust_set_free,
    wid_trust_set_verify,
};
pub use vault_login::{
    wid_identity_manager_builder_add_vault_login, wid_vault_login_config,
    wid_vault_login_config_free, wid_vault_login_config_new,
    wid_vault_login_config_set_allow_http_loopback, wid_vault_login_config_set_ca_bundle_pem,
    wid_vault_login_config_set_min_ttl_ms, wid_vault_login_config_set_mount,
    wid_vault_login_config_set_name, wid_vault_login_config_set_namespace,
    wid_vault_login_config_set_timeout_ms,
};
pub use verifier_builder::{
    NodeTokenMode, wid_verifier_builder, wid_verifier_builder_build, wid_verifier_builder_free,
    wid_verifier_builder_new, wid_verifier_builder_set_cache_entries,
    wid_verifier_builder_set_issuer, wid_verifier_builder_set_key_wait_ms,
    wid_verifier_builder_set_leeway_secs, wid_verifier_builder_set_max_proof_lifetime_secs,
    wid_verifier_builder_set_max_token_bytes, wid_verifier_builder_set_node_lookup,
    wid_verifier_builder_set_node_tokens, wid_verifier_builder_set_proof_replay_capacity,
    wid_verifier_builder_set_require_exp, wid_verifier_builder_set_require_proof,
};
pub use verify::{
    wid_alloc_lookup_fn, wid_node_lookup_fn, wid_verifier, wid_verifier_free, wid_verifier_new,
    wid_verifier_new_with_options, wid_verifier_options, wid_verify, wid_verify_batch,
};

/// Result codes (`wid_result`): stable forever, see `ResultCode` (Rust).
/// cbindgen:ignore
pub type wid_result = u32;

/// Signing algorithms (`wid_alg`): `WID_ALG_EDDSA 1`, `WID_ALG_ES256 2`,
/// `WID_ALG_RS256 3`; see `Algorithm` (Rust).
/// cbindgen:ignore
pub type wid_alg = u32;

/// Key purposes (`wid_key_purpose`): `WID_KEY_PURPOSE_BEARER 1`,
/// `WID_KEY_PURPOSE_WIT 2`, `WID_KEY_PURPOSE_KUBERNETES 3`; see
/// `KeyPurpose` (Rust).
/// cbindgen:ignore
pub type wid_key_purpose = u32;

/// Key states (`wid_key_state`); see `KeyState` (Rust).
/// cbindgen:ignore
pub type wid_key_state = u32;

/// Key derivations (`wid_key_derivation`); see `KeyDerivation` (Rust).
/// cbindgen:ignore
pub type wid_key_derivation = u32;

/// Read consistencies a lookup is asked for (`wid_consistency`); see
/// `Consistency` (Rust).
/// cbindgen:ignore
pub type wid_consistency = u32;

/// Allocation states a lookup answers (`wid_alloc`); see `AllocState` (Rust).
/// cbindgen:ignore
pub type wid_alloc = u32;

/// Node states a node lookup answers (`wid_node`); see `NodeState` (Rust).
/// cbindgen:ignore
pub type wid_node = u32;

/// Which token kinds a verifier accepts (`wid_node_tokens`); see
/// `NodeTokenMode`.
/// cbindgen:ignore
pub type wid_node_tokens = u32;

/// What an identity manager's watcher is told about (`wid_managed`).
/// cbindgen:ignore
pub type wid_managed = u32;

/// Why a token or secret is new (`wid_event`).
/// cbindgen:ignore
pub type wid_event = u32;

/// Why a host exchange's refresh is called (`wid_refresh_reason`).
/// cbindgen:ignore
pub type wid_refresh_reason = u32;

/// What a host exchange's refresh did (`wid_refreshed`).
/// cbindgen:ignore
pub type wid_refreshed = u32;

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
    use workload_identity::ResultCode;

    #[test]
    fn versions_are_the_package_version() {
        let v: Vec<u32> = env!("CARGO_PKG_VERSION")
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(v, [WID_VERSION_MAJOR, WID_VERSION_MINOR, WID_VERSION_PATCH]);
        assert_eq!(wid_abi_version(), WID_ABI_VERSION);
        let ver = unsafe { std::ffi::CStr::from_ptr(wid_version()) };
        assert_eq!(ver.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn the_rust_constants_are_the_enums() {
        use workload_identity::{
            Algorithm, AllocState, Consistency, KeyDerivation, KeyPurpose, KeyState, NodeState,
        };
        // Every value of each library enum has its C name here (the
        // library's enums are non-exhaustive to this crate: this is the
        // check that a new variant got one), and every name is the
        // library's own for result codes.
        fn same<T: CEnum + PartialEq + std::fmt::Debug>(all: &[T]) {
            assert_eq!(T::VALUES, all);
            for v in all {
                assert_ne!(v.c_name(), c"WID_UNKNOWN", "{v:?} has no C name");
                assert_eq!(T::from_number(v.number()), Some(*v));
            }
        }
        same(ResultCode::ALL);
        same(KeyState::ALL);
        same(KeyDerivation::ALL);
        same(Algorithm::ALL);
        same(KeyPurpose::ALL);
        same(Consistency::ALL);
        same(AllocState::ALL);
        same(NodeState::ALL);
        for c in ResultCode::ALL {
            assert_eq!(c.c_name().to_str().unwrap(), c.name());
        }
        assert_eq!(
            WID_RESULT_ISSUER_MISMATCH,
            ResultCode::IssuerMismatch.as_u32()
        );
        assert_eq!(ResultCode::Expired.c_name(), c"WID_RESULT_EXPIRED");
        assert_eq!(KeyState::Active.c_name(), c"WID_KEY_STATE_ACTIVE");
        assert_eq!(AllocState::from_u32(WID_ALLOC_LIVE), Some(AllocState::Live));
        assert_eq!(ResultCode::from_number(6), None);
        assert_eq!(ResultCode::from_number(u32::MAX), None);
    }
}
