//! The HTTP side of Vault/OpenBao Transit: one agent, one token, JSON in and
//! out, and errors that say whether the address, the token, the key name or
//! the token's permissions were wrong, in Transit's own words.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use zeroize::Zeroizing;

use crate::error::{Error, Result, truncate_for_message};
use crate::storage::atomic_file::{self, FileAccess};

/// The largest Transit answer read (a batch of 1,000 wrapped RSA keys is
/// well under this).
const MAX_ANSWER_BYTES: u64 = 16 << 20;
/// The default time a whole request may take.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to one Vault/OpenBao server's Transit engine: its address,
/// mount and token. Cheap to clone (the HTTP agent and token are shared).
///
/// The token comes from [`TransitClientBuilder::token`], a token file, or the
/// environment (`VAULT_TOKEN`, then `BAO_TOKEN`), in that order; it is sent
/// only in the `X-Vault-Token` header and never printed (`Debug` shows
/// `[redacted]`).
#[derive(Clone)]
pub struct TransitClient {
    agent: ureq::Agent,
    addr: String,
    mount: String,
    token: std::sync::Arc<Zeroizing<String>>,
}

impl fmt::Debug for TransitClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitClient")
            .field("addr", &self.addr)
            .field("mount", &self.mount)
            .field("token", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// Builds a [`TransitClient`].
pub struct TransitClientBuilder {
    addr: String,
    mount: String,
    token: Option<Zeroizing<String>>,
    token_file: Option<PathBuf>,
    ca_bundle_pem: Option<Vec<u8>>,
    timeout: Duration,
    allow_http_loopback: bool,
}

impl fmt::Debug for TransitClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitClientBuilder")
            .field("addr", &self.addr)
            .field("mount", &self.mount)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("token_file", &self.token_file)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TransitClient {
    /// A builder for the server at `addr` (`https://vault.example.com:8200`;
    /// `http://` only to a loopback host with
    /// [`TransitClientBuilder::allow_http_loopback`]).
    pub fn builder(addr: &str) -> TransitClientBuilder {
        TransitClientBuilder {
            addr: addr.trim_end_matches('/').to_string(),
            mount: "transit".into(),
            token: None,
            token_file: None,
            ca_bundle_pem: None,
            timeout: DEFAULT_TIMEOUT,
            allow_http_loopback: false,
        }
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The Transit engine's mount path (default `transit`).
    pub fn mount(&self) -> &str {
        &self.mount
    }

    /// `POST /v1/<mount>/<path>` with a JSON body; the answer's `data`.
    pub(crate) fn post(&self, path: &str, body: &Value, what: &str) -> Result<Value> {
        let bytes = serde_json::to_vec(body).map_err(|e| self.fail(what, e.to_string()))?;
        let answer = self.post_raw(path, &bytes, what)?;
        Ok(data_of(&answer))
    }

    /// `POST /v1/<mount>/<path>` with a body already encoded (it may hold
    /// material: the caller keeps it in a zeroizing buffer); the whole
    /// answer's bytes, in a zeroizing buffer.
    pub(crate) fn post_raw(
        &self,
        path: &str,
        body: &[u8],
        what: &str,
    ) -> Result<Zeroizing<Vec<u8>>> {
        let url = format!("{}/v1/{}/{path}", self.addr, self.mount);
        let resp = self
            .agent
            .post(&url)
            .header("X-Vault-Token", self.token.as_str())
            .header("content-type", "application/json")
            .send(body);
        self.answer(resp, what)
    }

    /// `GET /v1/<mount>/<path>`; the answer's `data`.
    pub(crate) fn get(&self, path: &str, what: &str) -> Result<Value> {
        let url = format!("{}/v1/{}/{path}", self.addr, self.mount);
        let resp = self
            .agent
            .get(&url)
            .header("X-Vault-Token", self.token.as_str())
            .call();
        Ok(data_of(&self.answer(resp, what)?))
    }

    fn fail(&self, what: &str, reason: String) -> Error {
        Error::KeyCustody {
            custodian: format!("Transit {}/v1/{}", self.addr, self.mount),
            reason: format!("{what}: {reason}"),
        }
    }

    fn answer(
        &self,
        resp: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        what: &str,
    ) -> Result<Zeroizing<Vec<u8>>> {
        let mut resp = resp.map_err(|e| {
            self.fail(
                what,
                format!(
                    "cannot reach Transit at {} ({}): check the address and that the server is up",
                    self.addr,
                    e.into_io()
                ),
            )
        })?;
        let status = resp.status().as_u16();
        let body = read_zeroizing(resp.body_mut())
            .map_err(|e| self.fail(what, format!("reading the answer: {e}")))?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        // A batch whose every item failed is a 400 that still carries each
        // item's own error: the caller reports those.
        if status == 400 && json.pointer("/data/batch_results").is_some() {
            return Ok(body);
        }
        let said = vault_errors(&json);
        let reason = match status {
            // Vault and OpenBao refuse an unknown, expired or revoked token
            // with a bare "permission denied", and a valid token that its
            // policy does not allow with a wrapped one ("1 error occurred:
            // * permission denied").
            403 if said == "permission denied" => format!(
                "the token was refused (HTTP 403: {said}): it is invalid, expired or revoked; give a valid token"
            ),
            403 if said.contains("error occurred") => format!(
                "permission denied (HTTP 403: {said}): the token's policy does not allow this on {}/; grant it",
                self.mount
            ),
            403 => format!(
                "HTTP 403: {said}: the token is invalid, or its policy does not allow this on {}/",
                self.mount
            ),
            404 => format!(
                "not found (HTTP 404{}): check the key name and that Transit is mounted at {:?}",
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                },
                self.mount
            ),
            400 if said.contains("not found") => format!(
                "HTTP 400: {said}: check the key name and that Transit is mounted at {:?}",
                self.mount
            ),
            503 => format!("Transit is unavailable (HTTP 503: {said}): is the server sealed?"),
            _ => format!("HTTP {status}: {said}"),
        };
        Err(self.fail(what, reason))
    }
}

/// The whole body (at most [`MAX_ANSWER_BYTES`]) in a zeroizing buffer: an
/// unwrap answer holds every root key, and growing a plain `Vec` would leave
/// copies in the blocks it frees. Each growth copies into a new zeroizing
/// buffer and drops (zeroizes) the old one; the read chunk is cleared too.
fn read_zeroizing(body: &mut ureq::Body) -> std::io::Result<Zeroizing<Vec<u8>>> {
    use std::io::Read;
    let hint = body
        .content_length()
        .unwrap_or(16 << 10)
        .min(MAX_ANSWER_BYTES);
    let mut out = Zeroizing::new(Vec::with_capacity(hint as usize + 1));
    let mut reader = body.as_reader();
    let mut chunk = Zeroizing::new([0u8; 16 << 10]);
    loop {
        let n = reader.read(&mut chunk[..])?;
        if n == 0 {
            return Ok(out);
        }
        if (out.len() + n) as u64 > MAX_ANSWER_BYTES {
            return Err(std::io::Error::other(format!(
                "the answer is larger than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        if out.len() + n > out.capacity() {
            let mut bigger = Zeroizing::new(Vec::with_capacity((out.len() + n) * 2));
            bigger.extend_from_slice(&out);
            out = bigger;
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The `data` of a Transit answer (`null` when there is none).
fn data_of(answer: &[u8]) -> Value {
    serde_json::from_slice::<Value>(answer)
        .ok()
        .and_then(|mut v| v.get_mut("data").map(Value::take))
        .unwrap_or(Value::Null)
}

/// Transit's `errors` array, joined (its messages name paths and keys,
/// never secrets), shortened.
fn vault_errors(json: &Value) -> String {
    let joined = json
        .get("errors")
        .and_then(Value::as_array)
        .map(|errs| {
            errs.iter()
                .filter_map(Value::as_str)
                .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    let mut out = truncate_for_message(&joined);
    if out.len() < joined.len() {
        out.push_str(" (shortened)");
    }
    out
}

impl TransitClientBuilder {
    /// The Transit engine's mount path (default `transit`).
    pub fn mount(mut self, mount: &str) -> Self {
        self.mount = mount.trim_matches('/').to_string();
        self
    }

    /// The token to use.
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(Zeroizing::new(token.trim().to_string()));
        self
    }

    /// Read the token from this file (0600, like a keystore; surrounding
    /// whitespace is ignored).
    pub fn token_file(mut self, path: impl AsRef<Path>) -> Self {
        self.token_file = Some(path.as_ref().to_path_buf());
        self
    }

    /// Trust only the certificates of this PEM bundle (default: the Mozilla
    /// roots).
    pub fn ca_bundle_pem(mut self, pem: &[u8]) -> Self {
        self.ca_bundle_pem = Some(pem.to_vec());
        self
    }

    /// The time a whole request may take (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Allow `http://` to a loopback host (a dev server on this machine);
    /// default: https only.
    pub fn allow_http_loopback(mut self, allow: bool) -> Self {
        self.allow_http_loopback = allow;
        self
    }

    /// The client, after checking the address, mount and token source.
    pub fn build(self) -> Result<TransitClient> {
        let bad = |field: &str, why: String| Error::invalid("TransitClient", field, why);
        let rest = if let Some(rest) = self.addr.strip_prefix("https://") {
            rest
        } else if let Some(rest) = self.addr.strip_prefix("http://") {
            let host = if let Some(v6) = rest.strip_prefix('[') {
                v6.split(']').next().unwrap_or_default()
            } else {
                rest.split([':', '/']).next().unwrap_or_default()
            };
            let loopback = host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if !(self.allow_http_loopback && loopback) {
                return Err(bad(
                    "addr",
                    format!(
                        "{:?} is plain http: Transit carries key material and a token, so https is required (http only to a loopback host, when allowed)",
                        truncate_for_message(&self.addr)
                    ),
                ));
            }
            rest
        } else {
            return Err(bad(
                "addr",
                format!(
                    "{:?} is not an https:// URL (e.g. https://vault.example.com:8200)",
                    truncate_for_message(&self.addr)
                ),
            ));
        };
        if rest.is_empty() || rest.contains(['?', '#', '@']) {
            return Err(bad(
                "addr",
                format!(
                    "{:?} must be scheme://host[:port] with no query, fragment or credentials",
                    truncate_for_message(&self.addr)
                ),
            ));
        }
        if self.mount.is_empty()
            || !self.mount.split('/').all(|seg| {
                !seg.is_empty() && seg != ".." && seg != "." && seg.bytes().all(is_path_byte)
            })
        {
            return Err(bad(
                "mount",
                format!(
                    "{:?} is not a mount path (segments of letters, digits, '-', '_' and '.')",
                    truncate_for_message(&self.mount)
                ),
            ));
        }
        let token = match (self.token, &self.token_file) {
            (Some(t), _) => t,
            (None, Some(path)) => {
                let bytes = atomic_file::read_secret_file(
                    path,
                    "Transit token file",
                    64 << 10,
                    FileAccess::OwnerOnly,
                )?;
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| bad("token_file", format!("{} is not UTF-8", path.display())))?;
                Zeroizing::new(text.trim().to_string())
            }
            (None, None) => {
                let from_env = ["VAULT_TOKEN", "BAO_TOKEN"]
                    .iter()
                    .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
                match from_env {
                    Some(t) => Zeroizing::new(t.trim().to_string()),
                    None => {
                        return Err(bad(
                            "token",
                            "no Transit token: give one, a token file, or set VAULT_TOKEN or BAO_TOKEN".into(),
                        ));
                    }
                }
            }
        };
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(
                "token",
                "the Transit token is empty or has characters a token never has".into(),
            ));
        }
        let tls = crate::tls_pem::tls_config(
            self.ca_bundle_pem.as_deref(),
            "TransitClient",
            "ca_bundle_pem",
        )?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .https_only(!self.allow_http_loopback)
            // A redirect would resend the token elsewhere.
            .max_redirects(0)
            .user_agent(concat!("workload-identity/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls)
            .build()
            .into();
        Ok(TransitClient {
            agent,
            addr: self.addr,
            mount: self.mount,
            token: std::sync::Arc::new(token),
        })
    }
}

fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// Whether `name` is a Transit key name we put into a URL path.
pub(crate) fn check_key_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 128
        || name == "."
        || name == ".."
        || !name.bytes().all(is_path_byte)
    {
        return Err(Error::invalid(
            "Transit",
            "key",
            format!(
                "{:?} is not a Transit key name (1 to 128 letters, digits, '-', '_' and '.')",
                truncate_for_message(name)
            ),
        ));
    }
    Ok(())
}
