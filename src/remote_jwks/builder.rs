//! [`RemoteJwksBuilder`]: the settings and their bounds, and the checks made
//! at build: the URL rules (`https`, or `http` to loopback when allowed) and
//! the CA bundle.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::{Config, RemoteJwks, Shared, Source, State, without_query};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{KeyPurpose, Keyring};

/// The largest body [`RemoteJwksBuilder::max_body_bytes`] accepts: 16 MiB.
pub const MAX_JWKS_BODY_LIMIT: usize = 16 << 20;

/// Longest timeout or refresh interval accepted; longer ones saturate here.
const LONGEST: Duration = Duration::from_secs(7 * 24 * 3600);

/// Builds a [`RemoteJwks`]; the URL (or the issuer) is the one required input.
pub struct RemoteJwksBuilder {
    /// The settings the source keeps (its URL checked at build).
    config: Config,
    ca_bundle_pem: Option<Vec<u8>>,
    timeout: Duration,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for RemoteJwksBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteJwksBuilder")
            .field("source", &self.config.source)
            .field("allow_http_loopback", &self.config.allow_http_loopback)
            .field("ca_bundle", &self.ca_bundle_pem.is_some())
            .field("timeout", &self.timeout)
            .field("min_refresh", &self.config.min_refresh)
            .field("max_refresh", &self.config.max_refresh)
            .finish_non_exhaustive()
    }
}

impl RemoteJwksBuilder {
    pub(super) fn new(source: Source) -> RemoteJwksBuilder {
        RemoteJwksBuilder {
            config: Config {
                source,
                allow_http_loopback: false,
                min_refresh: Duration::from_secs(60),
                max_refresh: Duration::from_secs(24 * 3600),
                default_refresh: Duration::from_secs(3600),
                unknown_kid_cooldown: Duration::from_secs(15),
                max_body_bytes: 512 << 10,
                max_keys: 100,
                purpose: None,
                ca_bundle_given: false,
            },
            ca_bundle_pem: None,
            timeout: Duration::from_secs(5),
            clock: Arc::new(SystemClock),
        }
    }

    /// Trusts only the certificates of this PEM bundle (one or more
    /// `CERTIFICATE` blocks) instead of Mozilla's root set: for an issuer
    /// behind a private CA.
    pub fn ca_bundle_pem(mut self, pem: &[u8]) -> RemoteJwksBuilder {
        self.ca_bundle_pem = Some(pem.to_vec());
        self
    }

    /// Checks a PEM bundle as [`RemoteJwksBuilder::ca_bundle_pem`] uses it
    /// (one or more `CERTIFICATE` blocks, each a certificate), without
    /// keeping it: for front ends that refuse a bad bundle when it is given
    /// rather than when the source is built.
    pub fn check_ca_bundle_pem(pem: &[u8]) -> Result<(), Error> {
        crate::tls_pem::certificates(pem, "RemoteJwks", "ca_bundle_pem").map(drop)
    }

    /// Allows plain `http` URLs whose host is a loopback address (`127.0.0.0/8`,
    /// `::1`, `localhost`); default off. Other `http` URLs are always refused,
    /// and with this set no redirect is followed.
    pub fn allow_http_loopback(mut self, allow: bool) -> RemoteJwksBuilder {
        self.config.allow_http_loopback = allow;
        self
    }

    /// The whole time one request may take, connection to last byte (default
    /// 5 s; at least 1 ms, at most a week).
    pub fn timeout(mut self, timeout: Duration) -> RemoteJwksBuilder {
        self.timeout = timeout.clamp(Duration::from_millis(1), LONGEST);
        self
    }

    /// The bounds on the time between successful fetches, whatever the
    /// server's `max-age` says (default 1 minute to 1 day; at most a week). The
    /// minimum is also the wait before retrying after a failure.
    /// [`RemoteJwksBuilder::build`] refuses `min > max`.
    pub fn refresh_bounds(mut self, min: Duration, max: Duration) -> RemoteJwksBuilder {
        self.config.min_refresh = min.min(LONGEST);
        self.config.max_refresh = max.min(LONGEST);
        self
    }

    /// The time between fetches when the response has no `max-age` (default
    /// 1 hour; clamped to the refresh bounds).
    pub fn default_refresh(mut self, interval: Duration) -> RemoteJwksBuilder {
        self.config.default_refresh = interval.min(LONGEST);
        self
    }

    /// The least time between two fetches started by unknown kids (default
    /// 15 s; zero: no limit but the single flight).
    pub fn unknown_kid_cooldown(mut self, cooldown: Duration) -> RemoteJwksBuilder {
        self.config.unknown_kid_cooldown = cooldown.min(LONGEST);
        self
    }

    /// The largest response body read, in bytes (default 512 KiB; clamped to
    /// 1 byte .. [`MAX_JWKS_BODY_LIMIT`]). A larger body fails the fetch.
    pub fn max_body_bytes(mut self, max: usize) -> RemoteJwksBuilder {
        self.config.max_body_bytes = max.clamp(1, MAX_JWKS_BODY_LIMIT);
        self
    }

    /// The most entries a JWKS may list, skipped ones included (default 100).
    /// A larger set fails the fetch.
    pub fn max_keys(mut self, max: usize) -> RemoteJwksBuilder {
        self.config.max_keys = max;
        self
    }

    /// The clock that schedules refreshes and cooldowns (default the system
    /// clock), so tests need not sleep.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> RemoteJwksBuilder {
        self.clock = clock;
        self
    }

    /// The purpose of the set's keys. Unset, it is learned from the source:
    /// a JWKS URL whose path ends in `/wit/jwks.json` (the WIT key set `wid
    /// serve` publishes) holds WIT keys, which verify WITs only; any other
    /// URL, and an issuer's discovered `jwks_uri`, bearer keys. A SPIFFE
    /// bundle's entries carry their own (`jwt-svid`, `wit-svid`).
    pub fn purpose(mut self, purpose: KeyPurpose) -> RemoteJwksBuilder {
        self.config.purpose = Some(purpose);
        self
    }

    /// The source, with an empty keyring and the first fetch due at once.
    /// Nothing is fetched yet: call [`RemoteJwks::refresh`] at startup (or let
    /// the first unknown kid, or the refresher, fetch).
    ///
    /// Fails with `InvalidArgument` for a URL that is not `https` (or allowed
    /// loopback `http`), has user info, a fragment, no host or whitespace; an
    /// issuer with a query; a CA bundle without a certificate; or refresh
    /// bounds with `min > max`.
    pub fn build(self) -> Result<RemoteJwks> {
        let source = match &self.config.source {
            Source::Jwks(url) => Source::Jwks(
                check_url(url, self.config.allow_http_loopback, "jwks_url")?.to_string(),
            ),
            Source::Issuer(issuer) => {
                check_url(issuer, self.config.allow_http_loopback, "issuer")?;
                if issuer.contains('?') {
                    return Err(invalid("issuer", "must not have a query", issuer));
                }
                Source::Issuer(issuer.clone())
            }
            Source::SpiffeBundle(url) => Source::SpiffeBundle(
                check_url(url, self.config.allow_http_loopback, "bundle_url")?.to_string(),
            ),
        };
        // A bundle endpoint is fetched at its URL (SPIFFE Federation, 5.2:
        // https_web); a redirect is refused rather than followed, so the
        // peer named is the peer trusted.
        let max_redirects = match (&source, self.config.allow_http_loopback) {
            (Source::SpiffeBundle(_), _) | (_, true) => 0,
            _ => 5,
        };
        if self.config.min_refresh > self.config.max_refresh {
            return Err(Error::invalid(
                "RemoteJwks",
                "refresh_bounds",
                format!(
                    "the minimum ({:?}) must not exceed the maximum ({:?})",
                    self.config.min_refresh, self.config.max_refresh
                ),
            ));
        }
        let tls = crate::tls_pem::tls_config(
            self.ca_bundle_pem.as_deref(),
            "RemoteJwks",
            "ca_bundle_pem",
        )?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .https_only(!self.config.allow_http_loopback)
            // A redirect could leave loopback for plain http elsewhere; an https
            // one is followed (a few hops), every hop checked as https.
            .max_redirects(max_redirects)
            .max_redirects_will_error(false)
            .user_agent(concat!("workload-identity/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls)
            .build()
            .into();
        let jwks_uri = match &source {
            Source::Jwks(url) | Source::SpiffeBundle(url) => Some(url.clone()),
            Source::Issuer(_) => None,
        };
        let shared = Arc::new(Shared {
            config: Config {
                source,
                ca_bundle_given: self.ca_bundle_pem.is_some(),
                ..self.config
            },
            clock: self.clock,
            agent,
            keyring: Keyring::new(),
            state: Mutex::new(State {
                jwks_uri,
                ..State::default()
            }),
            finished: Condvar::new(),
        });
        // Weak: the keyring holds the hook, and this source holds the keyring.
        let weak = Arc::downgrade(&shared);
        shared
            .keyring
            .on_unknown_key(move |kid| match weak.upgrade() {
                Some(shared) => Shared::unknown_kid(&shared, kid),
                None => log::debug!("remote JWKS: source dropped, unknown kid {kid} not fetched"),
            });
        Ok(RemoteJwks { shared })
    }
}

fn invalid(field: &str, why: &str, value: &str) -> Error {
    Error::invalid(
        "RemoteJwks",
        field,
        format!(
            "{why} (got {:?})",
            truncate_for_message(&without_query(value))
        ),
    )
}

/// Checks a URL against the source's rules: `https` with a host, or `http` to
/// a loopback host when allowed; no user info, fragment or whitespace.
pub(super) fn check_url<'a>(
    url: &'a str,
    allow_http_loopback: bool,
    field: &str,
) -> Result<&'a str> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            field,
            "must not contain whitespace or control characters",
            url,
        ));
    }
    if url.contains('#') {
        return Err(invalid(field, "must not have a fragment", url));
    }
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|_| invalid(field, "is not a URL", url))?;
    let Some(authority) = uri.authority() else {
        return Err(invalid(field, "must have a host", url));
    };
    if authority.as_str().contains('@') {
        return Err(invalid(field, "must not contain user info", url));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(invalid(field, "must have a host", url));
    }
    match uri.scheme_str() {
        Some("https") => Ok(url),
        Some("http") if allow_http_loopback && is_loopback(host) => Ok(url),
        Some("http") if allow_http_loopback => Err(invalid(
            field,
            "plain http is allowed to a loopback host only (127.0.0.0/8, ::1, localhost)",
            url,
        )),
        _ => Err(invalid(
            field,
            "must be an https URL (plain http only to loopback, when allowed)",
            url,
        )),
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_https_or_allowed_loopback_http() {
        let ok = |u: &str, allow: bool| check_url(u, allow, "url").is_ok();
        assert!(ok(
            "https://issuer.example.com/.well-known/jwks.json",
            false
        ));
        assert!(ok("https://10.0.0.1:8443/keys?x=1", false));
        assert!(!ok("http://127.0.0.1:8080/jwks", false));
        assert!(ok("http://127.0.0.1:8080/jwks", true));
        assert!(ok("http://127.1.2.3/jwks", true));
        assert!(ok("http://[::1]:80/jwks", true));
        assert!(ok("http://localhost/jwks", true));
        assert!(!ok("http://10.0.0.1/jwks", true));
        assert!(!ok("http://example.com/jwks", true));
        assert!(!ok("ftp://example.com/jwks", true));
        assert!(!ok("https://user:pw@example.com/jwks", false));
        assert!(!ok("https://example.com/jwks#frag", false));
        assert!(!ok("https://example.com/j wks", false));
        assert!(!ok("/jwks", false));
        assert!(!ok("", false));
        let e = check_url("http://example.com/a?secret=1", true, "jwks_url").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn builder_refuses_bad_inputs() {
        let code = |b: RemoteJwksBuilder| b.build().unwrap_err().code();
        use crate::error::ResultCode::InvalidArgument;
        assert_eq!(
            code(RemoteJwks::builder("http://example.com/")),
            InvalidArgument
        );
        assert_eq!(
            code(RemoteJwks::discover("https://issuer.example.com?x=1")),
            InvalidArgument
        );
        assert_eq!(
            code(
                RemoteJwks::builder("https://example.com/jwks")
                    .refresh_bounds(Duration::from_secs(10), Duration::from_secs(5))
            ),
            InvalidArgument
        );
        assert_eq!(
            code(RemoteJwks::builder("https://example.com/jwks").ca_bundle_pem(b"not pem")),
            InvalidArgument
        );
        assert!(
            RemoteJwks::builder("https://example.com/jwks")
                .build()
                .is_ok()
        );
    }
}
