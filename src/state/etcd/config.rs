//! Where the etcd cluster is and how to reach it safely.

use std::fmt;
use std::time::Duration;

use zeroize::Zeroizing;

/// Where the cluster is, and how to talk to it: TLS roots, a client
/// certificate, and etcd's username/password auth.
///
/// Endpoints are `https://` URLs. Plain `http://` is refused unless
/// [`allow_plain_http`](EtcdConfig::allow_plain_http) is called: over plain
/// HTTP anyone on the path can answer "live" for a dead allocation.
///
/// `Debug` never prints the password, the client key or the auth token.
#[derive(Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// The local member's client URL (e.g. `https://127.0.0.1:2379`), used for
    /// `Stale` reads (and first for the mirror's watch).
    pub local_endpoint: String,
    /// Every member's client URL, tried in order for `Consistent` reads and
    /// writes.
    pub endpoints: Vec<String>,
    /// The key prefix (e.g. `/nomad`); records live at `<prefix>/allocations/<ID>`.
    pub prefix: String,
    /// Per-request timeout (default 2 s).
    pub timeout: Duration,
    pub(crate) ca_bundle_pem: Option<Vec<u8>>,
    pub(crate) client_cert_pem: Option<Vec<u8>>,
    pub(crate) client_key_pem: Option<Zeroizing<Vec<u8>>>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<Zeroizing<String>>,
    pub(crate) allow_plain_http: bool,
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("local_endpoint", &self.local_endpoint)
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("ca_bundle", &self.ca_bundle_pem.as_ref().map(|_| "set"))
            .field(
                "client_certificate",
                &self.client_cert_pem.as_ref().map(|_| "set"),
            )
            .field(
                "client_key",
                &self.client_key_pem.as_ref().map(|_| "[redacted]"),
            )
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("allow_plain_http", &self.allow_plain_http)
            .finish()
    }
}

/// Longest per-request timeout accepted; longer ones saturate here.
const LONGEST_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl EtcdConfig {
    /// A configuration with the default 2 s timeout, TLS with the system's
    /// usual web roots (Mozilla's), no client certificate and no auth.
    pub fn new(local_endpoint: &str, endpoints: &[&str], prefix: &str) -> EtcdConfig {
        EtcdConfig {
            local_endpoint: local_endpoint.trim_end_matches('/').to_string(),
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_string())
                .collect(),
            prefix: prefix.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(2),
            ca_bundle_pem: None,
            client_cert_pem: None,
            client_key_pem: None,
            username: None,
            password: None,
            allow_plain_http: false,
        }
    }

    /// Sets the per-request timeout (at most a day: longer values, up to
    /// `Duration::MAX`, saturate there instead of overflowing the clock).
    pub fn timeout(mut self, timeout: Duration) -> EtcdConfig {
        self.timeout = timeout.min(LONGEST_TIMEOUT);
        self
    }

    /// Trusts only the CA certificates of this PEM bundle for the members'
    /// certificates (etcd's `--trusted-ca-file` side of the client). Every
    /// member's certificate must name the host of its URL.
    pub fn ca_bundle_pem(mut self, pem: impl Into<Vec<u8>>) -> EtcdConfig {
        self.ca_bundle_pem = Some(pem.into());
        self
    }

    /// Presents this client certificate (PEM, leaf first, then any
    /// intermediates) and its private key (PEM: PKCS#8, PKCS#1 or SEC1) to
    /// members started with `--client-cert-auth`. The key is zeroized when the
    /// configuration is dropped and never printed.
    pub fn client_certificate_pem(
        mut self,
        certificate_chain: impl Into<Vec<u8>>,
        private_key: impl Into<Vec<u8>>,
    ) -> EtcdConfig {
        self.client_cert_pem = Some(certificate_chain.into());
        self.client_key_pem = Some(Zeroizing::new(private_key.into()));
        self
    }

    /// Authenticates as `username` with `password` (etcd's `auth enable`):
    /// the store asks for a token before its first request and asks again
    /// whenever etcd says the token expired. The password is zeroized when the
    /// configuration is dropped and never printed.
    pub fn credentials(mut self, username: &str, password: &str) -> EtcdConfig {
        self.username = Some(username.to_string());
        self.password = Some(Zeroizing::new(password.to_string()));
        self
    }

    /// Allows `http://` endpoints. Only for a cluster reached over a network
    /// no one else can touch (loopback, a test): without TLS anyone on the
    /// path can forge the answers, and credentials travel in clear.
    pub fn allow_plain_http(mut self) -> EtcdConfig {
        self.allow_plain_http = true;
        self
    }
}
