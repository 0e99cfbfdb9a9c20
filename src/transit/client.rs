//! The HTTP side of Vault/OpenBao Transit: one agent, one token, JSON in and
//! out, and errors that say whether the address, the token, the key name or
//! the token's permissions were wrong, in Transit's own words.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use zeroize::Zeroizing;

use crate::vault_http::{
    agent, check_addr, is_mount_path, is_path_byte, read_zeroizing, vault_errors,
};

use crate::error::{Error, Result, truncate_for_message};
use crate::storage::atomic_file::{self, FileAccess};

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
    /// Whether a CA bundle was given (for what a refused certificate means).
    ca_bundle_given: bool,
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
    /// [`TransitClientBuilder::allow_http_loopback`]). `scheme://host[:port]`
    /// only: a path, query, fragment or credentials are refused at
    /// [`build`](TransitClientBuilder::build), and errors never repeat them.
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
            let trust = crate::tls_pem::TrustSettings {
                ca_bundle: "TransitClientBuilder::ca_bundle_pem (wid: --transit-ca-bundle)",
                ca_bundle_given: self.ca_bundle_given,
                client_certificate: None,
            };
            let reason = match crate::tls_pem::explain_refusal(&self.addr, &e, &trust) {
                Some(plain) => format!("cannot reach Transit at {}: {plain}", self.addr),
                None => format!(
                    "cannot reach Transit at {} ({}): check the address and that the server is up",
                    self.addr,
                    e.into_io()
                ),
            };
            self.fail(what, reason)
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

/// The `data` of a Transit answer (`null` when there is none).
fn data_of(answer: &[u8]) -> Value {
    serde_json::from_slice::<Value>(answer)
        .ok()
        .and_then(|mut v| v.get_mut("data").map(Value::take))
        .unwrap_or(Value::Null)
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
        check_addr(
            &self.addr,
            self.allow_http_loopback,
            "TransitClient",
            "Transit carries key material and a token",
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
        let agent = agent(
            self.ca_bundle_pem.as_deref(),
            self.timeout,
            self.allow_http_loopback,
            "TransitClient",
        )?;
        Ok(TransitClient {
            agent,
            addr: self.addr,
            mount: self.mount,
            token: std::sync::Arc::new(token),
            ca_bundle_given: self.ca_bundle_pem.is_some(),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault_http::shown_addr;
    use crate::vault_http::test_addresses::{assert_no_secret, closed_port, secret_addresses};

    #[test]
    fn an_address_is_shown_as_scheme_host_and_port_only() {
        for (addr, shown) in [
            (
                "https://vault.example.com:8200",
                "https://vault.example.com:8200",
            ),
            (
                "https://user:pass@vault.example.com:8200/a/b?token=x#f",
                "https://vault.example.com:8200",
            ),
            ("http://[::1]:8200/x", "http://[::1]:8200"),
            // An @ after the host: it may be credentials with a raw '/'.
            ("https://host?x=a@b", "https://[host not shown]"),
            ("https://user:pa/ss@host", "https://[host not shown]"),
            ("user:pass@host", "[not a URL]"),
            ("hvs.token", "[not a URL]"),
            ("", "[not a URL]"),
        ] {
            assert_eq!(shown_addr(addr), shown, "{addr:?}");
        }
    }

    /// Malformed and unreachable addresses: the error (and so the logs,
    /// `wid_last_error_message` and the CLI's stderr) and `Debug` never
    /// repeat credentials, a path, a query or a fragment.
    #[test]
    fn transit_errors_never_show_what_an_address_holds_beyond_its_host() {
        for addr in secret_addresses(closed_port()) {
            let built = TransitClient::builder(&addr)
                .token("t0ken")
                .allow_http_loopback(true)
                .timeout(Duration::from_secs(5))
                .build();
            let e = match built {
                Err(e) => e,
                Ok(client) => {
                    assert_no_secret(&addr, &format!("{client:?}"));
                    let signer = crate::transit::TransitSigner::new(client.clone(), "k").unwrap();
                    let e = signer.rotate().unwrap_err();
                    assert_no_secret(&addr, &e.to_string());
                    crate::transit::Transit::new(client, "k").unwrap_err()
                }
            };
            assert_no_secret(&addr, &e.to_string());
            assert_no_secret(&addr, &format!("{e:?}"));
        }
        let port = closed_port();
        let client = TransitClient::builder(&format!("http://127.0.0.1:{port}"))
            .token("t0ken")
            .allow_http_loopback(true)
            .build()
            .unwrap();
        let e = crate::transit::Transit::new(client, "k").unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("cannot reach Transit at http://127.0.0.1:{port}")),
            "{e}"
        );
    }
}
