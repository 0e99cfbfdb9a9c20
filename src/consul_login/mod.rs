//! [`ConsulLogin`] (feature `consul`): its behaviour is documented on the type.
//! What is Consul's own lives here (its ACL calls in `api.rs`, its
//! refusals in `diagnose.rs`, the builder's names and `Meta` in
//! `builder.rs`, the leeway before a login); the rest is the login core
//! every login shares (`crate::login`).

mod api;
mod builder;
mod diagnose;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::login::{Life, LoggedIn, Login, Refusal, Saved, Server};
use crate::manager::{ExchangeError, IdentityToken};

use api::{Api, TokenLife};
pub use builder::ConsulLoginBuilder;

/// The default least life a Consul token must have left to be kept, and
/// the least before its `ExpirationTime` a new login is made (see
/// [`ConsulLoginBuilder::min_ttl`]).
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(10);
/// The default least life an identity token must have left to be sent to
/// Consul (see [`ConsulLoginBuilder::leeway`]).
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(5);
/// Nomad's `Meta` key for the workload that asked for the token.
pub const META_REQUESTED_BY: &str = "requested_by";
/// Nomad's `Meta` key (since Nomad 2.0.5) for the client node's ID.
pub const META_NODE_ID: &str = "node_id";

/// A token exchange that logs in to Consul with an identity token (a JWT
/// auth method) and keeps a Consul ACL token for the workload.
///
/// It logs in at `POST /v1/acl/login` with the identity token as
/// `BearerToken`, the auth method's name and Nomad's `Meta` (`requested_by`
/// = `nomad_task_<task>` or `nomad_service_<service>`, and `node_id` when
/// given), and hands the answer's `SecretID` to the workload as the derived
/// secret. Consul login tokens cannot be renewed, so it logs in again
/// whenever the identity is re-signed and before the token's
/// `ExpirationTime` (two thirds into its life, and at least
/// [`ConsulLoginBuilder::min_ttl`] before it ends); the manager then logs
/// out the token it replaced (`POST /v1/acl/logout`)
/// once its successor is saved and delivered. After a restore it reuses a
/// saved token only if `GET /v1/acl/token/self` shows it alive (and not
/// about to expire): a token Consul no longer knows (deleted out of band,
/// expired) is replaced by a new login and never handed out.
///
/// It never sends an identity token that expires within
/// [`ConsulLoginBuilder::leeway`]: such a login fails at once, without a
/// request.
///
/// Failures say what was wrong from Consul's own answer: the auth method,
/// the JWT's audience, issuer, signature or times, no binding rule
/// matching (403), ACLs being disabled, or the network (`diagnose.rs`).
/// Add it to an [`IdentityManager`](crate::manager::IdentityManager) with
/// [`exchange`](crate::manager::IdentityManagerBuilder::exchange); the
/// workload gets its token from [`on_token`](ConsulLoginBuilder::on_token)
/// or [`IdentityManager::secret`](crate::manager::IdentityManager::secret).
///
/// ```no_run
/// use std::sync::Arc;
/// use workload_identity::ConsulLogin;
/// use workload_identity::manager::IdentityId;
///
/// let consul = ConsulLogin::builder(
///     "https://consul.example.com:8501",
///     IdentityId::new("server", "consul_default"),
///     "nomad-workloads",
/// )
/// .node_id("9d3b7c2e-5a43-4b8e-9a39-2f4f1b6c0d11")
/// .on_token(|token, _kind| {
///     // Write it where the task reads it (CONSUL_HTTP_TOKEN, a secrets file, ...).
///     let _ = token;
/// })
/// .build()?;
/// // IdentityManager::builder(...).exchange(Arc::new(consul)).build()?;
/// # let _ = Arc::new(consul);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct ConsulLogin {
    login: Login<Consul>,
}

/// Consul's side of a [`ConsulLogin`]: the calls, the auth method and
/// `Meta`, and the leeway an identity token must have left to be sent.
#[derive(Clone)]
struct Consul {
    /// The exchange's name, for messages.
    name: String,
    auth_method: String,
    meta: BTreeMap<String, String>,
    leeway: Duration,
    api: Api,
}

impl ConsulLogin {
    /// A builder for logging in to the Consul agent at `addr`
    /// (`https://consul.example.com:8501`: `scheme://host[:port]` only; a
    /// path, query, fragment or credentials are refused at
    /// [`build`](ConsulLoginBuilder::build), and errors never repeat them)
    /// with identity `identity`'s token, through the JWT auth method named
    /// `auth_method`.
    pub fn builder(
        addr: &str,
        identity: crate::manager::IdentityId,
        auth_method: &str,
    ) -> ConsulLoginBuilder {
        ConsulLoginBuilder::new(addr, identity, auth_method)
    }

    /// The agent's address.
    pub fn addr(&self) -> &str {
        &self.login.server.api.addr
    }

    /// The auth method it logs in with.
    pub fn auth_method(&self) -> &str {
        &self.login.server.auth_method
    }

    /// The `Meta` every login sends (`requested_by`, `node_id`, and any
    /// given with [`ConsulLoginBuilder::meta`]).
    pub fn meta(&self) -> &BTreeMap<String, String> {
        &self.login.server.meta
    }
}

crate::login::login_exchange!(ConsulLogin);

/// A token's life left at `now_ms` by what Consul said: a fresh token's by
/// Consul's own clock (CreateTime to ExpirationTime, immune to skew between
/// the clocks), else to its ExpirationTime from now.
fn life(life: &TokenLife, now_ms: i64) -> Life {
    Life {
        left_ms: match (life.created_ms, life.expires_ms) {
            (Some(c), Some(e)) if e >= c => Some(e - c),
            (_, Some(e)) => Some(e.saturating_sub(now_ms)),
            (_, None) => None,
        },
    }
}

impl Server for Consul {
    const KIND: &'static str = "Consul login";
    const LOOK_UP: &'static str = "token/self";
    const RENEW: Option<&'static str> = None;
    const REVOKING: &'static str = "logging out";
    const LIVES_UNTIL: &'static str = "its ExpirationTime, or until deleted";

    /// `consul <addr> partition <p> namespace <ns> datacenter <dc>; method
    /// <auth method>`: a saved token is read or revoked only by a login of
    /// the same server, partition, namespace, datacenter and auth method.
    fn origin(&self) -> String {
        format!(
            "consul {} partition {} namespace {} datacenter {}; method {}",
            self.api.addr,
            self.api.partition.as_deref().unwrap_or(""),
            self.api.namespace.as_deref().unwrap_or(""),
            self.api.datacenter.as_deref().unwrap_or(""),
            self.auth_method
        )
    }

    fn logs_in_as(&self) -> String {
        format!("with auth method {:?}", self.auth_method)
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        let api = &self.api;
        d.field("addr", &api.addr)
            .field("auth_method", &self.auth_method)
            .field("namespace", &api.namespace)
            .field("partition", &api.partition)
            .field("datacenter", &api.datacenter)
            .field("meta", &self.meta)
            .field("leeway", &self.leeway);
    }

    /// Never sends an identity token that expires within the leeway.
    fn login(&self, token: &IdentityToken, now_ms: i64) -> Result<LoggedIn, ExchangeError> {
        if let Some(exp) = token.expires_at {
            let left_ms = exp.saturating_mul(1000).saturating_sub(now_ms);
            let leeway_ms = i64::try_from(self.leeway.as_millis()).unwrap_or(i64::MAX);
            if left_ms < leeway_ms {
                return Err(ExchangeError(format!(
                    "Consul login {:?}: not sent: identity {} expires {} (exp {}), within the {} s leeway a token must have left to log in with; it is logged in again once the identity is re-signed",
                    self.name,
                    token.key,
                    if left_ms <= 0 {
                        "now or earlier".to_string()
                    } else {
                        format!("in {} ms", left_ms)
                    },
                    crate::clock::rfc3339(exp),
                    self.leeway.as_secs_f64(),
                )));
            }
        }
        let (secret, told) = self
            .api
            .login(&self.auth_method, &token.token, &self.meta)?;
        log::debug!(
            "Consul login {:?}: logged in with auth method {:?}: token {} (expires {})",
            self.name,
            self.auth_method,
            told.accessor,
            told.expires_ms
                .map_or("never".to_string(), |ms| crate::clock::rfc3339(
                    ms.div_euclid(1000)
                ))
        );
        Ok((secret.into_string(), life(&told, now_ms)))
    }

    fn renew(&self, _secret: &str) -> std::result::Result<Life, Refusal> {
        Err(Refusal::Other(ExchangeError(
            "a Consul login token cannot be renewed".into(),
        )))
    }

    /// Kept only if Consul still knows it and it was made by this auth
    /// method; its life is to its ExpirationTime from now.
    fn look_up(&self, secret: &str, now_ms: i64) -> std::result::Result<Saved, Refusal> {
        let told = self.api.token_self(secret)?;
        if told.auth_method != self.auth_method {
            return Ok(Saved::Foreign(format!(
                "the saved token {} was made by auth method {:?}, not {:?}",
                told.accessor, told.auth_method, self.auth_method
            )));
        }
        Ok(Saved::Alive(Life {
            left_ms: told.expires_ms.map(|e| e.saturating_sub(now_ms)),
        }))
    }

    fn revoke(&self, secret: &str) -> std::result::Result<(), Refusal> {
        self.api.logout(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::{IdentityId, RefreshReason, TokenExchange};
    use crate::vault_http::test_addresses::{assert_no_secret, closed_port, secret_addresses};

    fn token(expires_at: Option<i64>) -> IdentityToken {
        IdentityToken {
            key: IdentityId::new("server", "consul_default"),
            token: "h.p.s".into(),
            kid: "k".into(),
            jwt_id: "j".into(),
            issued_at: 0,
            expires_at,
            workload_key: None,
        }
    }

    fn login(addr: &str) -> ConsulLogin {
        ConsulLogin::builder(addr, IdentityId::new("server", "consul_default"), "nomad")
            .allow_http_loopback(true)
            .build()
            .unwrap()
    }

    /// Malformed and unreachable addresses: the error (and so the logs and
    /// the manager's `TokenExchange` error) and `Debug` never repeat
    /// credentials, a path, a query or a fragment.
    #[test]
    fn login_errors_never_show_what_an_address_holds_beyond_its_host() {
        let identity = IdentityId::new("server", "consul_default");
        for addr in secret_addresses(closed_port()) {
            let builder = ConsulLogin::builder(&addr, identity.clone(), "nomad")
                .allow_http_loopback(true)
                .timeout(Duration::from_secs(5));
            assert_no_secret(&addr, &format!("{builder:?}"));
            let shown = match builder.build() {
                Err(e) => format!("{e} {e:?}"),
                Ok(login) => {
                    assert_no_secret(&addr, &format!("{login:?}"));
                    let e = login.derive(&token(None), 0).unwrap_err();
                    let r = login
                        .refresh("s", &token(None), RefreshReason::Restored, 0)
                        .unwrap_err();
                    format!("{e} {r}")
                }
            };
            assert_no_secret(&addr, &shown);
        }
        let port = closed_port();
        let e = login(&format!("http://127.0.0.1:{port}"))
            .derive(&token(None), 0)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("cannot reach Consul at http://127.0.0.1:{port}/")),
            "{e}"
        );
    }

    /// A redirect is not followed (it would resend the identity token, or
    /// the Consul token, to wherever it points): the login fails, naming
    /// the status, and the place it pointed to is never asked.
    #[test]
    fn redirects_are_not_followed() {
        use std::io::Write;
        use std::net::TcpListener;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
        let elsewhere_port = elsewhere.local_addr().unwrap().port();
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        elsewhere.set_nonblocking(true).unwrap();
        let redirector = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = redirector.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            // Two requests: the login, and the token/self of the restore.
            for _ in 0..2 {
                let (mut conn, _) = redirector.accept().unwrap();
                crate::test_http::read_request(&mut conn);
                let answer = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{elsewhere_port}/v1/acl/login\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        let login = login(&format!("http://127.0.0.1:{port}"));
        let e = login.derive(&token(None), 0).unwrap_err();
        assert!(e.to_string().contains("307"), "{e}");
        let r = login
            .refresh("s", &token(None), RefreshReason::Restored, 0)
            .unwrap_err();
        assert!(r.to_string().contains("307"), "{r}");
        server.join().unwrap();
        if elsewhere.accept().is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        assert_eq!(asked.load(Ordering::SeqCst), 0, "the redirect was followed");
    }

    #[test]
    fn https_only_except_loopback_when_allowed() {
        let id = || IdentityId::new("server", "consul_default");
        let e = ConsulLogin::builder("http://consul.example.com:8500", id(), "nomad")
            .allow_http_loopback(true)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("https is required"), "{e}");
        let e = ConsulLogin::builder("http://127.0.0.1:8500", id(), "nomad")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("https is required"), "{e}");
        let e = ConsulLogin::builder("consul.example.com:8501", id(), "nomad")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("consul.example.com:8501"), "{e}");
        ConsulLogin::builder("https://consul.example.com:8501/", id(), "nomad")
            .build()
            .unwrap();
        ConsulLogin::builder("http://[::1]:8500", id(), "nomad")
            .allow_http_loopback(true)
            .build()
            .unwrap();
    }

    #[test]
    fn names_and_meta_are_checked_and_nomads_meta_derived() {
        let id = IdentityId::new("web", "consul_default");
        let b = || ConsulLogin::builder("https://c:8501", id.clone(), "nomad-workloads");
        let l = b().node_id("node-1").build().unwrap();
        assert_eq!(l.meta()["requested_by"], "nomad_task_web");
        assert_eq!(l.meta()["node_id"], "node-1");
        assert_eq!(l.auth_method(), "nomad-workloads");
        let l = b().service(true).build().unwrap();
        assert_eq!(l.meta()["requested_by"], "nomad_service_web");
        assert!(!l.meta().contains_key("node_id"));
        let l = b()
            .meta("requested_by", "nomad_task_other")
            .meta("cluster", "eu")
            .build()
            .unwrap();
        assert_eq!(l.meta()["requested_by"], "nomad_task_other");
        assert_eq!(l.meta()["cluster"], "eu");
        for (builder, field) in [
            (b().namespace("a/b"), "namespace"),
            (b().partition(""), "partition"),
            (b().datacenter("dc1&x=y"), "datacenter"),
            (b().meta("", "v"), "meta"),
            (b().node_id(""), "node_id"),
            (b().name(""), "name"),
            (b().timeout(Duration::ZERO), "timeout"),
            (
                ConsulLogin::builder("https://c:8501", id.clone(), "a b"),
                "auth_method",
            ),
            (
                ConsulLogin::builder("https://c:8501", IdentityId::new("", "x"), "m"),
                "meta",
            ),
        ] {
            let e = builder.build().unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    /// An identity token that expires within the leeway is never sent: the
    /// refusal comes before any request (the address is unreachable, and
    /// the error does not say so).
    #[test]
    fn an_identity_token_expiring_within_the_leeway_is_not_sent() {
        let l = ConsulLogin::builder(
            &format!("http://127.0.0.1:{}", closed_port()),
            IdentityId::new("web", "consul_default"),
            "m",
        )
        .allow_http_loopback(true)
        .leeway(Duration::from_secs(60))
        .build()
        .unwrap();
        let now_ms = 1_700_000_000_000;
        for exp in [1_700_000_030, 1_700_000_000, 1_600_000_000] {
            let e = l.derive(&token(Some(exp)), now_ms).unwrap_err().to_string();
            assert!(e.contains("not sent") && e.contains("60 s leeway"), "{e}");
            assert!(!e.contains("cannot reach"), "{e}");
            let e = l
                .refresh("s", &token(Some(exp)), RefreshReason::Resigned, now_ms)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not sent"), "{e}");
        }
        // Past the leeway it is sent (and fails only at the network).
        let e = l
            .derive(&token(Some(1_700_000_061)), now_ms)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot reach Consul"), "{e}");
    }
}
