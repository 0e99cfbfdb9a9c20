//! [`ConsulLogin`] (feature `consul`): its behaviour is documented on the type.

mod api;
mod builder;
mod diagnose;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::manager::{
    Derived, EventKind, ExchangeError, IdentityId, IdentityToken, RefreshReason, Refreshed,
    TokenExchange,
};

use api::{Api, TokenLife};
pub use builder::ConsulLoginBuilder;

/// The default time a whole request may take.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
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

/// What a [`ConsulLogin`] calls with each new Consul token.
type OnToken = dyn Fn(&str, EventKind) + Send + Sync;

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
/// out the token it replaced (`POST /v1/acl/logout`, best effort, logged)
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
    name: String,
    identity: IdentityId,
    auth_method: String,
    meta: BTreeMap<String, String>,
    leeway: Duration,
    min_ttl: Duration,
    api: Api,
    on_token: Option<Arc<OnToken>>,
}

impl fmt::Debug for ConsulLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsulLogin")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("addr", &self.api.addr)
            .field("auth_method", &self.auth_method)
            .field("namespace", &self.api.namespace)
            .field("partition", &self.api.partition)
            .field("datacenter", &self.api.datacenter)
            .field("meta", &self.meta)
            .field("leeway", &self.leeway)
            .field("min_ttl", &self.min_ttl)
            .finish_non_exhaustive()
    }
}

impl ConsulLogin {
    /// A builder for logging in to the Consul agent at `addr`
    /// (`https://consul.example.com:8501`: `scheme://host[:port]` only; a
    /// path, query, fragment or credentials are refused at
    /// [`build`](ConsulLoginBuilder::build), and errors never repeat them)
    /// with identity `identity`'s token, through the JWT auth method named
    /// `auth_method`.
    pub fn builder(addr: &str, identity: IdentityId, auth_method: &str) -> ConsulLoginBuilder {
        ConsulLoginBuilder {
            addr: addr.trim_end_matches('/').to_string(),
            identity,
            auth_method: auth_method.to_string(),
            name: "consul".into(),
            namespace: None,
            partition: None,
            datacenter: None,
            meta: BTreeMap::new(),
            service: false,
            node_id: None,
            ca_bundle_pem: None,
            timeout: DEFAULT_TIMEOUT,
            leeway: DEFAULT_LEEWAY,
            min_ttl: DEFAULT_MIN_TTL,
            allow_http_loopback: false,
            on_token: None,
        }
    }

    /// The agent's address.
    pub fn addr(&self) -> &str {
        &self.api.addr
    }

    /// The auth method it logs in with.
    pub fn auth_method(&self) -> &str {
        &self.auth_method
    }

    /// The `Meta` every login sends (`requested_by`, `node_id`, and any
    /// given with [`ConsulLoginBuilder::meta`]).
    pub fn meta(&self) -> &BTreeMap<String, String> {
        &self.meta
    }

    /// Logs in with `token` at `now_ms`: the SecretID and its life.
    fn login_raw(
        &self,
        token: &IdentityToken,
        now_ms: i64,
    ) -> std::result::Result<(String, TokenLife), ExchangeError> {
        if let Some(exp) = token.expires_at {
            let left_ms = exp.saturating_mul(1000).saturating_sub(now_ms);
            let leeway_ms = i64::try_from(self.leeway.as_millis()).unwrap_or(i64::MAX);
            if left_ms < leeway_ms {
                return Err(ExchangeError(format!(
                    "Consul login {:?}: not sent: identity {} expires {} (exp {}), within the {} s leeway a token must have left to log in with; it is logged in again once the identity is re-signed",
                    self.name,
                    self.identity,
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
        let (secret, life) = self
            .api
            .login(&self.auth_method, &token.token, &self.meta)?;
        log::debug!(
            "Consul login {:?}: logged in with auth method {:?}: token {} (expires {})",
            self.name,
            self.auth_method,
            life.accessor,
            life.expires_ms
                .map_or("never".to_string(), |ms| crate::clock::rfc3339(
                    ms.div_euclid(1000)
                ))
        );
        Ok((std::mem::take(&mut *secret.into_string()), life))
    }

    /// Logs in with `token` at `now_ms`.
    fn login(
        &self,
        token: &IdentityToken,
        now_ms: i64,
    ) -> std::result::Result<Derived, ExchangeError> {
        let (secret, life) = self.login_raw(token, now_ms)?;
        // A fresh token's life by Consul's own clock (CreateTime to
        // ExpirationTime) is immune to skew between our clocks.
        let left_ms = match (life.created_ms, life.expires_ms) {
            (Some(c), Some(e)) if e >= c => Some(e - c),
            (_, Some(e)) => Some(e.saturating_sub(now_ms)),
            (_, None) => None,
        };
        Ok(Derived::new(
            secret,
            left_ms.map(|l| self.refresh_time(l, now_ms)),
        ))
    }

    /// When to log in again for a token with `left_ms` to live at
    /// `now_ms`: two thirds into what is left, and no later than
    /// [`ConsulLoginBuilder::min_ttl`] before it ends (unless its whole life
    /// is shorter than that).
    fn refresh_time(&self, left_ms: i64, now_ms: i64) -> i64 {
        let margin_ms = i64::try_from(self.min_ttl.as_millis()).unwrap_or(i64::MAX);
        let two_thirds = left_ms.saturating_mul(2) / 3;
        let latest = left_ms.saturating_sub(margin_ms);
        let wait = if latest >= 1000 {
            two_thirds.min(latest)
        } else {
            two_thirds
        };
        now_ms.saturating_add(wait.max(1000))
    }

    /// A new login replacing a token, logged with why.
    fn replace(
        &self,
        token: &IdentityToken,
        now_ms: i64,
        why: &str,
    ) -> std::result::Result<Refreshed, ExchangeError> {
        log::debug!(
            "Consul login {:?}: logging in again with auth method {:?}: {why}",
            self.name,
            self.auth_method
        );
        self.login(token, now_ms).map(Refreshed::Replaced)
    }

    /// After a restore: keep the saved token only if Consul still knows it,
    /// it was made by this auth method, and it has at least `min_ttl` left.
    fn confirm(
        &self,
        secret: &str,
        token: &IdentityToken,
        now_ms: i64,
    ) -> std::result::Result<Refreshed, ExchangeError> {
        let life = match self.api.token_self(secret) {
            Ok(life) => life,
            Err(api::Refusal::Gone(why)) => {
                return self.replace(
                    token,
                    now_ms,
                    &format!(
                        "Consul no longer knows the saved token (deleted, logged out or expired: {why})"
                    ),
                );
            }
            Err(api::Refusal::Other(e)) => return Err(e),
        };
        if life.auth_method != self.auth_method {
            return self.replace(
                token,
                now_ms,
                &format!(
                    "the saved token {} was made by auth method {:?}, not {:?}",
                    life.accessor, life.auth_method, self.auth_method
                ),
            );
        }
        let Some(expires_ms) = life.expires_ms else {
            log::debug!(
                "Consul login {:?}: the saved token {} lives on (no expiration)",
                self.name,
                life.accessor
            );
            return Ok(Refreshed::Kept {
                refresh_at_ms: None,
            });
        };
        let left_ms = expires_ms.saturating_sub(now_ms);
        let margin_ms = i64::try_from(self.min_ttl.as_millis()).unwrap_or(i64::MAX);
        if left_ms >= margin_ms {
            log::debug!(
                "Consul login {:?}: the saved token {} lives {} ms more",
                self.name,
                life.accessor,
                left_ms
            );
            return Ok(Refreshed::Kept {
                refresh_at_ms: Some(self.refresh_time(left_ms, now_ms)),
            });
        }
        let why = format!(
            "the saved token {} has {} ms left, less than the {} s kept",
            life.accessor,
            left_ms,
            self.min_ttl.as_secs_f64()
        );
        match self.replace(token, now_ms, &why) {
            Ok(new) => Ok(new),
            // It still works for now: keep it, say so, and try again soon
            // (within its life).
            Err(e) => {
                log::warn!(
                    "Consul login {:?}: {why}, and logging in again failed: {e}; keeping it for now",
                    self.name
                );
                Ok(Refreshed::Kept {
                    refresh_at_ms: Some(now_ms.saturating_add((left_ms / 2).clamp(1000, 30_000))),
                })
            }
        }
    }
}

impl TokenExchange for ConsulLogin {
    fn name(&self) -> &str {
        &self.name
    }

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

    fn identity(&self) -> &IdentityId {
        &self.identity
    }

    fn exchange(&self, token: &IdentityToken) -> std::result::Result<String, ExchangeError> {
        let now_ms = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        self.login_raw(token, now_ms).map(|(secret, _)| secret)
    }

    fn deliver(&self, secret: &str, kind: EventKind) {
        if let Some(f) = &self.on_token {
            f(secret, kind);
        }
    }

    fn derive(
        &self,
        token: &IdentityToken,
        now_ms: i64,
    ) -> std::result::Result<Derived, ExchangeError> {
        self.login(token, now_ms)
    }

    fn refresh(
        &self,
        secret: &str,
        token: &IdentityToken,
        reason: RefreshReason,
        now_ms: i64,
    ) -> std::result::Result<Refreshed, ExchangeError> {
        match reason {
            RefreshReason::Restored => self.confirm(secret, token, now_ms),
            RefreshReason::Resigned => self.replace(
                token,
                now_ms,
                "the identity was re-signed (a Consul login token cannot be renewed)",
            ),
            // Due, and any reason added later: the token's time has come.
            _ => self.replace(
                token,
                now_ms,
                "the token nears its ExpirationTime (a Consul login token cannot be renewed)",
            ),
        }
    }

    fn release(&self, secret: &str) {
        if let Err(e) = self.revoke(secret) {
            log::warn!("{e}");
        }
    }

    fn revoke(&self, secret: &str) -> std::result::Result<(), ExchangeError> {
        match self.api.logout(secret) {
            Ok(()) => {
                log::debug!("Consul login {:?}: logged out a token", self.name);
                Ok(())
            }
            // Already deleted or expired: nothing left to log out.
            Err(api::Refusal::Gone(_)) => {
                log::debug!(
                    "Consul login {:?}: a token to log out was already gone",
                    self.name
                );
                Ok(())
            }
            Err(api::Refusal::Other(e)) => Err(ExchangeError(format!(
                "Consul login {:?}: logging out a token failed (it stays saved and is logged out on a later try; until then it lives until its ExpirationTime, or until deleted): {e}",
                self.name
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        use std::io::{Read, Write};
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
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
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

    /// Two thirds into a token's life, and never later than `min_ttl`
    /// before its end; a token shorter than `min_ttl` at two thirds; never
    /// sooner than a second.
    #[test]
    fn refresh_is_scheduled_before_the_expiration_time() {
        let l = ConsulLogin::builder(
            "https://c:8501",
            IdentityId::new("web", "consul_default"),
            "m",
        )
        .min_ttl(Duration::from_secs(30))
        .build()
        .unwrap();
        let now = 1_700_000_000_000;
        // 1 h: two thirds (40 min) is earlier than 30 s before the end.
        assert_eq!(l.refresh_time(3_600_000, now), now + 2_400_000);
        // 60 s: two thirds is 40 s, but 30 s before the end is 30 s.
        assert_eq!(l.refresh_time(60_000, now), now + 30_000);
        // 20 s, shorter than min_ttl: two thirds.
        assert_eq!(l.refresh_time(20_000, now), now + 13_333);
        // Expired or nearly: a second (never a busy loop).
        assert_eq!(l.refresh_time(0, now), now + 1000);
        assert_eq!(l.refresh_time(-5_000, now), now + 1000);
        assert_eq!(l.refresh_time(i64::MAX, i64::MAX - 10), i64::MAX);
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
