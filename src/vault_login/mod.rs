//! [`VaultLogin`] (feature `vault`): its behaviour is documented on the type.
//! What is Vault's own lives here (the JWT login's calls in `api.rs`, its
//! refusals in `diagnose.rs`, the checks of a mount, namespace and role);
//! the rest is the login core every login shares (`crate::login`).

mod api;
mod diagnose;

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result, truncate_for_message};
use crate::login::{Life, LoggedIn, Login, Refusal, Saved, Server, Settings, common_setters};
use crate::manager::{ExchangeError, IdentityId, IdentityToken};
use crate::vault_http::{is_mount_path, is_path_byte};

use api::{Api, Lease};

/// The default least TTL a token must have left to be kept (see
/// [`VaultLoginBuilder::min_ttl`]).
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(60);

/// A token exchange that logs in to Vault or OpenBao with an identity token
/// (JWT auth method) and keeps the client token alive.
///
/// It logs in at `auth/<mount>/login` with the identity token and a role,
/// hands the client token to the workload as the derived secret, keeps it
/// alive (`auth/token/renew-self` when the identity is re-signed or two
/// thirds of its TTL have passed; a new login when renewal is refused, the
/// token is not renewable, or its max TTL is near), revokes a token that was replaced
/// (`auth/token/revoke-self`), and after a restore reuses a saved
/// token only if `auth/token/lookup-self` says it still lives for at least
/// [`VaultLoginBuilder::min_ttl`] — otherwise it logs in again, so a restored
/// workload never runs with a dead token.
///
/// Failures say what was wrong from Vault's own answer: the role, the
/// audience, a bound claim, the signing key, the token's age, the mount, or
/// the network (`diagnose.rs`).
/// Add it to an [`IdentityManager`](crate::manager::IdentityManager) with
/// [`exchange`](crate::manager::IdentityManagerBuilder::exchange); the
/// workload gets its token from
/// [`on_token`](VaultLoginBuilder::on_token) or
/// [`IdentityManager::secret`](crate::manager::IdentityManager::secret).
///
/// ```no_run
/// use std::sync::Arc;
/// use workload_identity::VaultLogin;
/// use workload_identity::manager::IdentityId;
///
/// let vault = VaultLogin::builder(
///     "https://vault.example.com:8200",
///     IdentityId::new("server", "vault_default"),
///     "nomad-workloads",
/// )
/// .mount("jwt-nomad")
/// .on_token(|token, _kind| {
///     // Write it where the task reads it (VAULT_TOKEN, a secrets file, ...).
///     let _ = token;
/// })
/// .build()?;
/// // IdentityManager::builder(...).exchange(Arc::new(vault)).build()?;
/// # let _ = Arc::new(vault);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct VaultLogin {
    login: Login<Vault>,
}

/// Vault's side of a [`VaultLogin`]: the calls and the role.
#[derive(Clone)]
struct Vault {
    role: String,
    api: Api,
}

/// Builds a [`VaultLogin`].
#[derive(Clone)]
pub struct VaultLoginBuilder {
    common: Settings,
    role: String,
    mount: String,
    namespace: Option<String>,
}

impl fmt::Debug for VaultLoginBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultLoginBuilder")
            .field("addr", &self.common.addr)
            .field("identity", &self.common.identity)
            .field("role", &self.role)
            .field("name", &self.common.name)
            .field("mount", &self.mount)
            .field("namespace", &self.namespace)
            .field("timeout", &self.common.timeout)
            .field("min_ttl", &self.common.min_ttl)
            .finish_non_exhaustive()
    }
}

impl VaultLogin {
    /// A builder for logging in to the server at `addr`
    /// (`https://vault.example.com:8200`: `scheme://host[:port]` only; a
    /// path, query, fragment or credentials are refused at
    /// [`build`](VaultLoginBuilder::build), and errors never repeat them)
    /// with identity `identity`'s token,
    /// as role `role` of the JWT auth method (mounted at `jwt` unless
    /// [`VaultLoginBuilder::mount`] says otherwise).
    pub fn builder(addr: &str, identity: IdentityId, role: &str) -> VaultLoginBuilder {
        VaultLoginBuilder {
            common: Settings::new(addr, identity, "vault", DEFAULT_MIN_TTL),
            role: role.to_string(),
            mount: "jwt".into(),
            namespace: None,
        }
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.login.server.api.addr
    }

    /// The JWT auth method's mount path.
    pub fn mount(&self) -> &str {
        &self.login.server.api.mount
    }

    /// The role it logs in as.
    pub fn role(&self) -> &str {
        &self.login.server.role
    }
}

crate::login::login_exchange!(VaultLogin);

/// A Vault lease as the core reads a life: a TTL of 0 never expires.
fn life(lease: Lease) -> Life {
    Life {
        left_ms: (lease.ttl_secs > 0)
            .then(|| i64::try_from(lease.ttl_secs.saturating_mul(1000)).unwrap_or(i64::MAX)),
    }
}

impl Server for Vault {
    const KIND: &'static str = "Vault login";
    const LOOK_UP: &'static str = "lookup-self";
    const RENEW: Option<&'static str> = Some("renew-self");
    const REVOKING: &'static str = "revoking";
    const LIVES_UNTIL: &'static str = "its TTL ends";

    /// `vault <addr> namespace <ns>; mount <mount> role <role>`: a saved
    /// token is looked up, renewed or revoked only by a login of the same
    /// server, namespace, mount and role.
    fn origin(&self) -> String {
        format!(
            "vault {} namespace {}; mount {} role {}",
            self.api.addr,
            self.api.namespace.as_deref().unwrap_or(""),
            self.api.mount,
            self.role
        )
    }

    fn logs_in_as(&self) -> String {
        format!("as role {:?}", self.role)
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("addr", &self.api.addr)
            .field("mount", &self.api.mount)
            .field("role", &self.role);
    }

    fn login(&self, token: &IdentityToken, _now_ms: i64) -> Result<LoggedIn, ExchangeError> {
        let (secret, lease) = self.api.login(&self.role, &token.token)?;
        Ok((secret.into_string(), life(lease)))
    }

    fn renew(&self, secret: &str) -> std::result::Result<Life, Refusal> {
        self.api.renew_self(secret).map(life)
    }

    fn look_up(&self, secret: &str, _now_ms: i64) -> std::result::Result<Saved, Refusal> {
        let looked = self.api.lookup_self(secret)?;
        // A token minted for another mount or role (saved by another
        // configuration of this server) is not kept.
        let login_path = format!("auth/{}/login", self.api.mount);
        if let Some(path) = looked.path.as_deref().filter(|p| *p != login_path) {
            return Ok(Saved::Foreign(format!(
                "the saved token was minted at {path:?}, not {login_path:?}"
            )));
        }
        if let Some(role) = looked.role.as_deref().filter(|r| *r != self.role) {
            return Ok(Saved::Foreign(format!(
                "the saved token is of role {role:?}, not {:?}",
                self.role
            )));
        }
        Ok(looked
            .lease
            .map_or(Saved::NoLife, |l| Saved::Alive(life(l))))
    }

    fn revoke(&self, secret: &str) -> std::result::Result<(), Refusal> {
        self.api.revoke_self(secret)
    }
}

impl VaultLoginBuilder {
    common_setters!("VaultLogin", "vault", "server", "client token");

    /// The JWT auth method's mount path (default `jwt`).
    pub fn mount(mut self, mount: &str) -> Self {
        self.mount = mount.trim_matches('/').to_string();
        self
    }

    /// The Vault Enterprise / OpenBao namespace to log in to (sent as
    /// `X-Vault-Namespace`); default none (the root namespace).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.trim_matches('/').to_string());
        self
    }

    /// The least TTL a token must have left to be kept (default 60 s): a
    /// saved token after a restore, or a token just renewed (a renewal capped
    /// by the role's `token_max_ttl` leaves less); otherwise it logs in
    /// again. Keep it below the role's `token_ttl`, or every renewal becomes
    /// a new login.
    pub fn min_ttl(mut self, min_ttl: Duration) -> Self {
        self.common.min_ttl = min_ttl;
        self
    }

    /// The exchange, after checking the address, mount, role and name.
    pub fn build(self) -> Result<VaultLogin> {
        let bad = |field: &str, why: String| Error::invalid("VaultLogin", field, why);
        self.common.check_addr(
            "VaultLogin",
            "a login carries the identity token and its answer a Vault token",
        )?;
        if !is_mount_path(&self.mount) {
            return Err(bad(
                "mount",
                format!(
                    "{:?} is not a mount path (segments of letters, digits, '-', '_' and '.')",
                    truncate_for_message(&self.mount)
                ),
            ));
        }
        if let Some(ns) = &self.namespace {
            if !is_mount_path(ns) {
                return Err(bad(
                    "namespace",
                    format!(
                        "{:?} is not a namespace path (segments of letters, digits, '-', '_' and '.')",
                        truncate_for_message(ns)
                    ),
                ));
            }
        }
        if self.role.is_empty() || self.role.len() > 256 || !self.role.bytes().all(is_path_byte) {
            return Err(bad(
                "role",
                format!(
                    "{:?} is not a role name (1 to 256 letters, digits, '-', '_' and '.')",
                    truncate_for_message(&self.role)
                ),
            ));
        }
        let built = self.common.finish("VaultLogin")?;
        Ok(VaultLogin {
            login: Login {
                common: built.common,
                server: Vault {
                    role: self.role,
                    api: Api {
                        agent: built.agent,
                        addr: built.addr,
                        mount: self.mount,
                        namespace: self.namespace,
                        ca_bundle_given: built.ca_bundle_given,
                    },
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::{RefreshReason, Refreshed, TokenExchange};
    use crate::vault_http::test_addresses::{assert_no_secret, closed_port, secret_addresses};
    use std::sync::Arc;

    /// A signed identity's token as the exchange gets it (its JWT is not
    /// looked at by these tests).
    fn identity_token(identity: &IdentityId) -> IdentityToken {
        IdentityToken {
            key: identity.clone(),
            token: "h.p.s".into(),
            kid: "k".into(),
            jwt_id: "j".into(),
            issued_at: 0,
            expires_at: None,
            workload_key: None,
        }
    }

    /// A loopback HTTP server answering lookup-self with `lookup_body` and
    /// renew-self with a 600 s lease; it counts the renewals. One request
    /// per connection (`Connection: close`).
    fn stand_in(lookup_body: &'static str) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let renewals = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = renewals.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let mut reader = BufReader::new(conn);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let request = line.clone();
                let mut length = 0usize;
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut body);
                let answer = if request.starts_with("GET /v1/auth/token/lookup-self") {
                    lookup_body
                } else if request.starts_with("POST /v1/auth/token/renew-self") {
                    counted.fetch_add(1, Ordering::SeqCst);
                    r#"{"auth":{"client_token":"s","lease_duration":600,"renewable":true}}"#
                } else if request.starts_with("POST /v1/auth/jwt/login") {
                    r#"{"auth":{"client_token":"fresh","lease_duration":600,"renewable":true}}"#
                } else {
                    r#"{"errors":["not here"]}"#
                };
                let mut conn = reader.into_inner();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        (addr, renewals)
    }

    /// Security round 4 (issue 51, item 4): a restored token that
    /// lookup-self says was minted at another mount's login, or for another
    /// role, is not kept: a new login replaces it (the manager then revokes
    /// the old one on this server, after delivering the new one).
    #[test]
    fn a_restored_token_of_another_mount_or_role_is_replaced() {
        let identity = IdentityId::new("server", "vault_default");
        let token = identity_token(&identity);
        let now_ms = 1_700_000_000_000;
        for (body, kept) in [
            (
                r#"{"data":{"ttl":3000,"path":"auth/jwt/login","meta":{"role":"web"}}}"#,
                true,
            ),
            (
                r#"{"data":{"ttl":3000,"path":"auth/jwt-other/login","meta":{"role":"web"}}}"#,
                false,
            ),
            (
                r#"{"data":{"ttl":3000,"path":"auth/jwt/login","meta":{"role":"admin"}}}"#,
                false,
            ),
        ] {
            let (addr, _) = stand_in(body);
            let login = VaultLogin::builder(&addr, identity.clone(), "web")
                .allow_http_loopback(true)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            let got = login
                .refresh("s", &token, RefreshReason::Restored, now_ms)
                .unwrap_or_else(|e| panic!("{body}: {e}"));
            match got {
                Refreshed::Kept { .. } => assert!(kept, "{body}: kept"),
                Refreshed::Replaced(d) => {
                    assert!(!kept, "{body}: replaced");
                    assert_eq!(d.secret, "fresh");
                }
                other => panic!("{body}: {other:?}"),
            }
            // Where it logs in, as the manager saves with each token.
            assert_eq!(
                login.origin(),
                format!("vault {addr} namespace ; mount jwt role web")
            );
        }
    }

    /// A restored token whose lookup-self answer has no usable `ttl`
    /// (missing, null, a string, negative) is renewed to learn its lease,
    /// never kept as a token that never expires; a numeric one is kept on
    /// it, and `ttl` 0 (Vault's never-expiring token) stays that.
    #[test]
    fn lookup_self_without_a_numeric_ttl_is_not_a_token_that_never_expires() {
        use std::sync::atomic::Ordering;
        let identity = IdentityId::new("server", "vault_default");
        let token = identity_token(&identity);
        let now_ms = 1_700_000_000_000;
        for (body, renewed, refresh_at_ms) in [
            (
                r#"{"data":{"policies":["default"]}}"#,
                1,
                Some(now_ms + 400_000),
            ),
            (r#"{"data":{"ttl":null}}"#, 1, Some(now_ms + 400_000)),
            (r#"{"data":{"ttl":"3600"}}"#, 1, Some(now_ms + 400_000)),
            (r#"{"data":{"ttl":-5}}"#, 1, Some(now_ms + 400_000)),
            (r#"{"data":{"ttl":3000}}"#, 0, Some(now_ms + 2_000_000)),
            (r#"{"data":{"ttl":0}}"#, 0, None),
        ] {
            let (addr, renewals) = stand_in(body);
            let login = VaultLogin::builder(&addr, identity.clone(), "role")
                .allow_http_loopback(true)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            let got = login
                .refresh("s", &token, RefreshReason::Restored, now_ms)
                .unwrap_or_else(|e| panic!("{body}: {e}"));
            assert_eq!(got, Refreshed::Kept { refresh_at_ms }, "{body}");
            assert_eq!(renewals.load(Ordering::SeqCst), renewed, "{body}");
        }
    }

    /// Malformed and unreachable addresses: the error (and so the logs and
    /// the manager's `TokenExchange` error) and `Debug` never repeat
    /// credentials, a path, a query or a fragment.
    #[test]
    fn login_errors_never_show_what_an_address_holds_beyond_its_host() {
        let identity = IdentityId::new("server", "vault_default");
        let token = identity_token(&identity);
        for addr in secret_addresses(closed_port()) {
            let built = VaultLogin::builder(&addr, identity.clone(), "role")
                .allow_http_loopback(true)
                .timeout(Duration::from_secs(5))
                .build();
            let shown = match built {
                Err(e) => format!("{e} {e:?}"),
                Ok(login) => {
                    assert_no_secret(&addr, &format!("{login:?}"));
                    let e = login.derive(&token, 0).unwrap_err();
                    let r = login
                        .refresh("s", &token, RefreshReason::Restored, 0)
                        .unwrap_err();
                    format!("{e} {r}")
                }
            };
            assert_no_secret(&addr, &shown);
        }
        let port = closed_port();
        let login = VaultLogin::builder(&format!("http://127.0.0.1:{port}"), identity, "role")
            .allow_http_loopback(true)
            .build()
            .unwrap();
        let e = login.derive(&token, 0).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("cannot reach Vault at http://127.0.0.1:{port}/")),
            "{e}"
        );
    }
}
