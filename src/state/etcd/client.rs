//! The transport to etcd's v3 JSON gateway: TLS (a CA bundle, a client
//! certificate), etcd's token auth, and trying members in order.

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use zeroize::Zeroizing;

use super::EtcdConfig;
use super::record::{RangeResponse, b64, prefix_end, unb64};
use crate::error::{Error, Result};
use crate::state::StoreError;

/// Largest answer read from a unary call (a page of a range read, say).
pub(crate) const MAX_ANSWER_BYTES: u64 = 64 * 1024 * 1024;

/// One cluster's transport. Safe to share between threads.
pub(crate) struct Client {
    pub(crate) config: EtcdConfig,
    /// Unary calls: the whole exchange within `config.timeout`.
    agent: ureq::Agent,
    /// Streams (watches): connecting and the response head within
    /// `config.timeout`, then each read within the idle limit, no total.
    stream_agent: ureq::Agent,
    /// Auth tokens by endpoint, when credentials are configured: etcd's
    /// simple tokens are known only to the member that granted them.
    tokens: Mutex<HashMap<String, Zeroizing<String>>>,
    /// One lock per endpoint, held while asking it for a token: threads
    /// renewing at one member wait for each other (one authentication, not
    /// one per thread), while `tokens` is held only for map operations, so
    /// an unreachable member never stalls requests to the others.
    renewing: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The endpoint that answered last: tried first next time, so a member
    /// that is down or partitioned costs one timeout, not one per read.
    preferred: AtomicUsize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config's own Debug redacts its secrets; the token is never shown.
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why one call failed: auth problems are retried once with a new token.
enum Failure {
    Auth(String),
    Other(String),
}

impl Client {
    pub(crate) fn new(config: EtcdConfig, stream_idle: Duration) -> Result<Client> {
        check_endpoints(&config)?;
        let tls = tls_config(&config)?;
        let base = || {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .https_only(!config.allow_plain_http)
                .max_redirects(0)
                .user_agent(concat!("workload-identity/", env!("CARGO_PKG_VERSION")))
                .tls_config(tls.clone())
        };
        let agent = base().timeout_global(Some(config.timeout)).build().into();
        let stream_agent = base()
            .timeout_connect(Some(config.timeout))
            .timeout_send_request(Some(config.timeout))
            .timeout_recv_response(Some(config.timeout))
            .timeout_per_read(Some(stream_idle))
            .build()
            .into();
        Ok(Client {
            config,
            agent,
            stream_agent,
            tokens: Mutex::new(HashMap::new()),
            renewing: Mutex::new(HashMap::new()),
            preferred: AtomicUsize::new(0),
        })
    }

    /// POSTs `body` to `path` on `endpoint` and returns the answer's body,
    /// getting (or renewing, once) an auth token when credentials are set.
    pub(crate) fn post(
        &self,
        endpoint: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> std::result::Result<String, StoreError> {
        let url = format!("{endpoint}{path}");
        let token = self.token(endpoint)?;
        match self.post_once(&url, body, token.as_deref().map(|t| t.as_str())) {
            Ok(text) => Ok(text),
            Err(Failure::Auth(why)) if self.config.username.is_some() => {
                log::debug!("etcd {url}: {why}; authenticating again");
                let fresh = self.renew_token(endpoint, token.as_deref().map(|t| t.as_str()))?;
                self.post_once(&url, body, Some(&fresh))
                    .map_err(|f| StoreError::new(format!("etcd {url}: {}", f.message())))
            }
            Err(f) => Err(StoreError::new(format!("etcd {url}: {}", f.message()))),
        }
    }

    fn post_once(
        &self,
        url: &str,
        body: &serde_json::Value,
        token: Option<&str>,
    ) -> std::result::Result<String, Failure> {
        let mut req = self
            .agent
            .post(url)
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", t);
        }
        let mut resp = req
            .send(body.to_string())
            .map_err(|e| Failure::Other(describe(&self.config, url, &e)))?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| Failure::Other(format!("reading the answer: {e}")))?;
        if status == 200 {
            return Ok(text);
        }
        let detail = format!(
            "HTTP {status}: {}",
            crate::error::truncate_for_message(&text)
        );
        if status == 401 || is_auth_problem(&text) {
            Err(Failure::Auth(detail))
        } else {
            Err(Failure::Other(detail))
        }
    }

    /// Opens a streaming POST (a watch) and returns its body as a reader.
    pub(crate) fn open_stream(
        &self,
        endpoint: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> std::result::Result<impl Read + use<>, StoreError> {
        let url = format!("{endpoint}{path}");
        let fail = |what: String| StoreError::new(format!("etcd {url}: {what}"));
        let mut retried = false;
        loop {
            let token = self.token(endpoint)?;
            // `hasleader`: the member cancels the watch when it has no leader
            // (partitioned), so the mirror moves to a member that has one
            // instead of waiting on one that will never see new changes.
            let mut req = self
                .stream_agent
                .post(&url)
                .header("content-type", "application/json")
                .header("grpc-metadata-hasleader", "true");
            if let Some(t) = token.as_deref() {
                req = req.header("authorization", t.as_str());
            }
            let resp = req
                .send(body.to_string())
                .map_err(|e| fail(describe(&self.config, &url, &e)))?;
            let status = resp.status();
            if status == 200 {
                return Ok(resp.into_body().into_reader());
            }
            let text = resp
                .into_body()
                .with_config()
                .limit(64 * 1024)
                .read_to_string()
                .unwrap_or_default();
            if (status == 401 || is_auth_problem(&text))
                && self.config.username.is_some()
                && !retried
            {
                retried = true;
                self.renew_token(endpoint, token.as_deref().map(|t| t.as_str()))?;
                continue;
            }
            return Err(fail(format!(
                "HTTP {status}: {}",
                crate::error::truncate_for_message(&text)
            )));
        }
    }

    /// The current token for `endpoint`, getting one first when credentials
    /// are set and none is held; `None` without credentials.
    fn token(&self, endpoint: &str) -> std::result::Result<Option<Zeroizing<String>>, StoreError> {
        if self.config.username.is_none() {
            return Ok(None);
        }
        if let Some(t) = self.lock_tokens().get(endpoint) {
            return Ok(Some(t.clone()));
        }
        self.renew_token(endpoint, None).map(Some)
    }

    /// Asks `endpoint` for a new token, unless another thread already replaced
    /// `stale` (the token that was refused) while this one waited.
    fn renew_token(
        &self,
        endpoint: &str,
        stale: Option<&str>,
    ) -> std::result::Result<Zeroizing<String>, StoreError> {
        let gate = Arc::clone(
            self.renewing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(endpoint.to_string())
                .or_default(),
        );
        let _renewing = gate.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = self.lock_tokens().get(endpoint) {
            if Some(current.as_str()) != stale {
                return Ok(current.clone());
            }
        }
        let (Some(name), Some(password)) = (&self.config.username, &self.config.password) else {
            return Err(StoreError::new("etcd: no credentials configured"));
        };
        let url = format!("{endpoint}/v3/auth/authenticate");
        let body = Zeroizing::new(
            serde_json::json!({"name": name, "password": password.as_str()}).to_string(),
        );
        let fail = |what: String| {
            StoreError::new(format!("etcd {url}: authenticating as {name:?}: {what}"))
        };
        let mut resp = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.as_bytes())
            .map_err(|e| fail(describe(&self.config, &url, &e)))?;
        let status = resp.status();
        let text = Zeroizing::new(
            resp.body_mut()
                .with_config()
                .limit(64 * 1024)
                .read_to_string()
                .map_err(|e| fail(format!("reading the answer: {e}")))?,
        );
        if status != 200 {
            // etcd's refusals ("authentication failed, invalid user ID or
            // password") never echo the password.
            return Err(fail(format!(
                "HTTP {status}: {}",
                crate::error::truncate_for_message(&text)
            )));
        }
        #[derive(serde::Deserialize)]
        struct Granted {
            #[serde(default)]
            token: Option<String>,
        }
        let granted: Granted =
            serde_json::from_str(&text).map_err(|e| fail(format!("malformed answer: {e}")))?;
        let token = match granted.token {
            Some(t) if !t.is_empty() => Zeroizing::new(t),
            _ => {
                return Err(fail(
                    "the answer holds no token (is auth enabled on the cluster?)".into(),
                ));
            }
        };
        self.lock_tokens()
            .insert(endpoint.to_string(), token.clone());
        Ok(token)
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, HashMap<String, Zeroizing<String>>> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on each endpoint until one succeeds, starting with the one
    /// that answered last and going round in configured order; all the errors
    /// when none does. Only for requests any member answers alike
    /// (linearizable reads, writes).
    pub(crate) fn each_endpoint<T>(
        &self,
        mut f: impl FnMut(&str) -> std::result::Result<T, StoreError>,
    ) -> std::result::Result<T, StoreError> {
        let eps = &self.config.endpoints;
        let first = self.preferred.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for k in 0..eps.len() {
            let i = (first + k) % eps.len();
            match f(&eps[i]) {
                Ok(v) => {
                    if i != first {
                        self.preferred.store(i, Ordering::Relaxed);
                    }
                    return Ok(v);
                }
                Err(e) => errors.push(e.message),
            }
        }
        if errors.is_empty() {
            errors.push("no endpoints configured".into());
        }
        Err(StoreError::new(format!(
            "no etcd member answered: {}",
            errors.join("; ")
        )))
    }

    /// The local endpoint first, then the others in order, without repeats.
    pub(crate) fn endpoints_local_first(&self) -> Vec<&str> {
        let mut all = vec![self.config.local_endpoint.as_str()];
        for ep in &self.config.endpoints {
            if !all.contains(&ep.as_str()) {
                all.push(ep);
            }
        }
        all
    }
}

/// What [`Client::list_prefix`] hands its caller.
pub(crate) enum Listed<'a> {
    /// Before the first pair: how many keys the prefix holds.
    Count(i64),
    /// One key (less the prefix), its value and its revision.
    Pair {
        suffix: &'a [u8],
        value: Vec<u8>,
        mod_revision: i64,
    },
}

impl Client {
    /// Lists every key under `prefix` (linearizable), page by page at the
    /// first page's revision, so the listing is one consistent snapshot.
    /// `visit` sees the count, then every pair; returning `false` stops the
    /// listing (`Ok(None)`). The revision of the listing otherwise.
    pub(crate) fn list_prefix(
        &self,
        prefix: &[u8],
        page_size: usize,
        mut visit: impl FnMut(Listed<'_>) -> std::result::Result<bool, StoreError>,
    ) -> std::result::Result<Option<i64>, StoreError> {
        let end = b64(prefix_end(prefix));
        let mut revision = 0;
        let mut from = prefix.to_vec();
        loop {
            let mut body = serde_json::json!({
                "key": b64(&from),
                "range_end": end,
                "limit": page_size,
            });
            if revision != 0 {
                body["revision"] = revision.to_string().into();
            }
            let page: RangeResponse = self.each_endpoint(|ep| {
                let text = self.post(ep, "/v3/kv/range", &body)?;
                serde_json::from_str(&text)
                    .map_err(|e| StoreError::new(format!("etcd {ep}: malformed range answer: {e}")))
            })?;
            if revision == 0 {
                revision = page.header.revision;
                if !visit(Listed::Count(page.count))? {
                    return Ok(None);
                }
            }
            let mut last = None;
            for kv in page.kvs {
                let key = unb64("a listed key", &kv.key).map_err(StoreError::new)?;
                let value = unb64("a listed value", &kv.value).map_err(StoreError::new)?;
                if let Some(suffix) = key.strip_prefix(prefix) {
                    let pair = Listed::Pair {
                        suffix,
                        value,
                        mod_revision: kv.mod_revision,
                    };
                    if !visit(pair)? {
                        return Ok(None);
                    }
                }
                last = Some(key);
            }
            match (page.more, last) {
                (true, Some(mut key)) => {
                    key.push(0);
                    from = key;
                }
                _ => return Ok(Some(revision)),
            }
        }
    }
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Auth(m) | Failure::Other(m) => m,
        }
    }
}

/// A transport error, with a hint where the usual cause is not obvious: a
/// refused certificate in plain words (which check failed and what to do).
fn describe(config: &EtcdConfig, url: &str, e: &ureq::Error) -> String {
    let trust = crate::tls_pem::TrustSettings {
        ca_bundle: "EtcdConfig::ca_bundle_pem (wid: --etcd-ca-bundle)",
        ca_bundle_given: config.ca_bundle_pem.is_some(),
        client_certificate: Some(
            "EtcdConfig::client_certificate_pem (wid: --etcd-cert with --etcd-key)",
        ),
    };
    if let Some(plain) = crate::tls_pem::explain_refusal(url, e, &trust) {
        return plain;
    }
    let text = e.to_string();
    let closed = matches!(e, ureq::Error::Io(io) if matches!(
        io.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    ));
    if closed && url.starts_with("https://") {
        format!(
            "{text} (a member started with --client-cert-auth closes the connection like this \
             when the client certificate is missing or not from its CA)"
        )
    } else {
        text
    }
}

/// etcd's answers when a request carries no token or one it no longer knows.
fn is_auth_problem(body: &str) -> bool {
    body.contains("invalid auth token") || body.contains("user name is empty")
}

fn check_endpoints(config: &EtcdConfig) -> Result<()> {
    if config.endpoints.is_empty() {
        return Err(Error::invalid(
            "EtcdConfig",
            "endpoints",
            "is empty; expected every member's client URL",
        ));
    }
    let all = std::iter::once(("local_endpoint", &config.local_endpoint))
        .chain(config.endpoints.iter().map(|e| ("endpoints", e)));
    for (field, url) in all {
        let shown = crate::error::truncate_for_message(url);
        if url.starts_with("https://") && url.len() > "https://".len() {
            continue;
        }
        if url.starts_with("http://") && url.len() > "http://".len() {
            if config.allow_plain_http {
                continue;
            }
            return Err(Error::invalid(
                "EtcdConfig",
                field,
                format!(
                    "{shown:?} is plain http, which anyone on the path can answer for; \
                     expected an https:// URL (or call allow_plain_http() for a trusted network)"
                ),
            ));
        }
        return Err(Error::invalid(
            "EtcdConfig",
            field,
            format!("{shown:?} is not a URL; expected https://host:port"),
        ));
    }
    if config.client_cert_pem.is_some() != config.client_key_pem.is_some() {
        return Err(Error::invalid(
            "EtcdConfig",
            "client_certificate_pem",
            "needs both the certificate chain and its private key",
        ));
    }
    Ok(())
}

fn tls_config(config: &EtcdConfig) -> Result<ureq::tls::TlsConfig> {
    let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
    if let Some(pem) = &config.ca_bundle_pem {
        let certs = crate::tls_pem::certificates(pem, "EtcdConfig", "ca_bundle_pem")?;
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
    }
    if let (Some(chain), Some(key)) = (&config.client_cert_pem, &config.client_key_pem) {
        let certs = crate::tls_pem::certificates(chain, "EtcdConfig", "client_certificate_pem")?;
        let key = ureq::tls::PrivateKey::from_pem(key).map_err(|_| {
            // ureq's error may quote the input: say only what was expected.
            Error::invalid(
                "EtcdConfig",
                "client_certificate_pem",
                "the private key is not a PEM PKCS#8, PKCS#1 or SEC1 key",
            )
        })?;
        tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&certs, key)));
    }
    Ok(tls.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member that accepts connections and never answers (a partition
    /// that drops packets after the handshake, a paused process) must not
    /// hold up authentication with another member: before, the tokens lock
    /// was held for the whole HTTP call to the silent one.
    #[test]
    fn a_silent_member_does_not_stall_authentication_with_the_others() {
        use std::io::Write;
        use std::net::TcpListener;
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let answering = TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_url = format!("http://{}", silent.local_addr().unwrap());
        let answering_url = format!("http://{}", answering.local_addr().unwrap());
        std::thread::spawn(move || {
            // Holds every connection open, reading nothing, answering nothing.
            let mut held = Vec::new();
            for c in silent.incoming() {
                held.push(c);
            }
        });
        std::thread::spawn(move || {
            for c in answering.incoming() {
                let Ok(mut c) = c else { continue };
                // The whole request is read before answering: closing a
                // socket with unread bytes sends a reset, which the client
                // may see before the answer (it did, once, in CI).
                crate::test_http::read_request(&mut c);
                let body = r#"{"token":"granted"}"#;
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        // The silent member's timeout is far longer than the test waits.
        let config = EtcdConfig::new(&silent_url, &[&silent_url, &answering_url], "/n")
            .allow_plain_http()
            .credentials("u", "p")
            .timeout(Duration::from_secs(600));
        let client = Arc::new(Client::new(config, Duration::from_secs(1)).unwrap());
        let stuck = Arc::clone(&client);
        let url = silent_url.clone();
        std::thread::spawn(move || {
            let _ = stuck.renew_token(&url, None);
        });
        // Wait until the stuck renewal holds its endpoint's gate.
        let entered = std::time::Instant::now();
        while client
            .renewing
            .lock()
            .unwrap()
            .get(&silent_url)
            .is_none_or(|g| g.try_lock().is_ok())
        {
            assert!(entered.elapsed() < Duration::from_secs(60), "never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The other member authenticates at once (within the 600 s that
        // the old lock would have made it wait).
        let (tx, rx) = std::sync::mpsc::channel();
        let other = Arc::clone(&client);
        std::thread::spawn(move || {
            let _ = tx.send(
                other
                    .token(&answering_url)
                    .map(|t| t.map(|t| t.to_string())),
            );
        });
        let got = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("authentication with the answering member was held up");
        assert_eq!(got.unwrap().as_deref(), Some("granted"));
    }

    fn refused(config: EtcdConfig, field: &str, says: &str) {
        let e = Client::new(config, Duration::from_secs(1)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(field) && text.contains(says), "{text}");
    }

    #[test]
    fn plain_http_only_when_asked_for() {
        let plain = EtcdConfig::new("http://127.0.0.1:2379", &["http://10.0.0.1:2379"], "/n");
        refused(plain.clone(), "local_endpoint", "plain http");
        assert!(Client::new(plain.allow_plain_http(), Duration::from_secs(1)).is_ok());
        let mixed = EtcdConfig::new("https://127.0.0.1:2379", &["http://10.0.0.1:2379"], "/n");
        refused(mixed, "endpoints", "plain http");
        refused(
            EtcdConfig::new("127.0.0.1:2379", &["https://a:1"], "/n"),
            "local_endpoint",
            "not a URL",
        );
        refused(
            EtcdConfig::new("https://a:1", &[], "/n"),
            "endpoints",
            "is empty",
        );
        assert!(
            Client::new(
                EtcdConfig::new("https://a:1", &["https://a:1"], "/n"),
                Duration::from_secs(1)
            )
            .is_ok()
        );
    }

    #[test]
    fn tls_material_that_does_not_parse_is_refused_without_echoing_it() {
        let base = EtcdConfig::new("https://a:1", &["https://a:1"], "/n");
        refused(
            base.clone().ca_bundle_pem(b"not pem".to_vec()),
            "ca_bundle_pem",
            "CERTIFICATE",
        );
        let secret =
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n";
        let e = Client::new(
            base.clone()
                .client_certificate_pem(b"nope".to_vec(), secret.as_bytes().to_vec()),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("client_certificate_pem"), "{e}");
        assert!(!e.to_string().contains("c2VjcmV0"), "{e}");
        let mut half = base;
        half.client_cert_pem = Some(b"x".to_vec());
        refused(half, "client_certificate_pem", "both");
    }

    #[test]
    fn debug_never_shows_secrets() {
        let c = EtcdConfig::new("https://a:1", &["https://a:1"], "/n")
            .client_certificate_pem(b"CERT".to_vec(), b"KEY-BYTES-SECRET".to_vec())
            .credentials("wid", "hunter2-pw");
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("KEY-BYTES-SECRET") && !shown.contains("hunter2-pw"),
            "{shown}"
        );
        assert!(
            shown.contains("[redacted]") && shown.contains("\"wid\""),
            "{shown}"
        );
    }
}
