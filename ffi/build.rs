//! The build of the C library:
//! - a versioned SONAME on Linux, as C packaging expects:
//!   `libworkload_identity.so.1`, after the C ABI version (additive-only
//!   changes keep it; `scripts/c-install-check.sh` checks the two agree);
//! - the C functions every built-in login's config has
//!   (`src/login_config/abi.rs.in`, written once), made for each login of
//!   [`LOGINS`] into `$OUT_DIR/<login>_login_abi.rs`: the login's module
//!   includes it, and `tests/c_header.rs` gives it to cbindgen. A login's
//!   own setters stay in its module.

use std::path::Path;

/// What a login's config functions say of their login.
struct Login {
    /// `vault`: the functions' names (`wid_vault_login_config_*`), the
    /// cargo feature and the default exchange name.
    login: &'static str,
    /// `Vault`: the library's types (`VaultLogin`, `VaultLoginBuilder`).
    rust: &'static str,
    /// Whom it logs in to, for the error of a build without the feature.
    server: &'static str,
    /// The name of the login's own argument to `_new` (`role`).
    own: &'static str,
    /// The handle's tag (`Castable::TAG`): never changed once released.
    tag: &'static str,
    /// The C documentation of the functions whose text is the login's own.
    new_doc: &'static str,
    namespace_doc: &'static str,
    min_ttl_doc: &'static str,
    add_doc: &'static str,
}

const TEMPLATE: &str = "src/login_config/abi.rs.in";

const LOGINS: &[Login] = &[
    Login {
        login: "vault",
        rust: "Vault",
        server: "Vault or OpenBao",
        own: "role",
        // "WID_VL" v1
        tag: "0x5749_445f_564c_0001",
        new_doc: r"/// Starts configuring a login to the Vault or OpenBao at `addr`
/// (`https://host:port`; `http` only to a loopback host with
/// `_set_allow_http_loopback`) with the token of identity (`workload`,
/// `identity`), as JWT auth role `role`. Defaults: name `vault`, mount
/// `jwt`, no namespace, the Mozilla roots, a 10 s timeout, a least TTL of
/// 60 s. Checked when added to a manager. `*out` receives a handle to free
/// with `wid_vault_login_config_free`.",
        namespace_doc: r"/// Sets the namespace to log in to (sent as `X-Vault-Namespace`).",
        min_ttl_doc: r"/// Sets the least TTL a token must have left to be kept (default 60 000 ms;
/// 0 to 600 000): a saved token after a restore, or one just renewed; keep it
/// below the role's `token_ttl`.",
        add_doc: r"/// Adds the login configured by `cfg` to builder `b` (checked now: the
/// address, mount, namespace, role and name; `cfg` stays the caller's to
/// free, and may be added to other builders). Its client token is delivered
/// through the watcher (`WID_MANAGED_SECRET`, named as the exchange) and
/// readable with `wid_identity_manager_secret`.",
    },
    Login {
        login: "consul",
        rust: "Consul",
        server: "Consul",
        own: "auth_method",
        // "WID_CL" v1
        tag: "0x5749_445f_434c_0001",
        new_doc: r"/// Starts configuring a login to the Consul agent or server at `addr`
/// (`https://host:port`; `http` only to a loopback host with
/// `_set_allow_http_loopback`) with the token of identity (`workload`,
/// `identity`), at JWT auth method `auth_method` (`POST /v1/acl/login`).
/// Defaults: name `consul`, Meta `requested_by` = `nomad_task_<workload>`,
/// no namespace, partition or datacenter, the Mozilla roots, a 10 s timeout,
/// a leeway of 5 s, a least TTL of 10 s. Checked when added to a manager.
/// `*out` receives a handle to free with `wid_consul_login_config_free`.",
        namespace_doc: r"/// Sets the Consul Enterprise namespace to log in to (the login's
/// `Namespace`, `ns` on the token calls).",
        min_ttl_doc: r"/// Sets the least life a Consul token must have left (default 10 000 ms;
/// 0 to 600 000): a saved one with less after a restore is replaced, and a
/// new login is made at least this long before `ExpirationTime`.",
        add_doc: r"/// Adds the login configured by `cfg` to builder `b` (checked now: the
/// address, names and `Meta`; `cfg` stays the caller's to free, and may be
/// added to other builders). Its Consul token (`SecretID`) is delivered
/// through the watcher (`WID_MANAGED_SECRET`, named as the exchange) and
/// readable with `wid_identity_manager_secret`.",
    },
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={TEMPLATE}");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libworkload_identity.so.1");
    }
    let template = std::fs::read_to_string(TEMPLATE).expect("the login ABI template");
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for l in LOGINS {
        let made = [
            ("@new_doc@", l.new_doc),
            ("@namespace_doc@", l.namespace_doc),
            ("@min_ttl_doc@", l.min_ttl_doc),
            ("@add_doc@", l.add_doc),
            ("@login@", l.login),
            ("@Rust@", l.rust),
            ("@server@", l.server),
            ("@own@", l.own),
            ("@tag@", l.tag),
        ]
        .iter()
        .fold(template.clone(), |text, (name, value)| {
            text.replace(name, value)
        });
        if let Some(name) = unfilled(&made) {
            panic!(
                "{TEMPLATE}: {name} is not in build.rs's table (login {})",
                l.login
            );
        }
        let path = Path::new(&out_dir).join(format!("{}_login_abi.rs", l.login));
        std::fs::write(&path, made).expect("writing a login's ABI");
    }
}

/// The first `@name@` left in `text`.
fn unfilled(text: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(at) = text[from..].find('@').map(|i| from + i) {
        let after = &text[at + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if len > 0 && after[len..].starts_with('@') {
            return Some(&text[at..at + len + 2]);
        }
        from = at + 1;
    }
    None
}
