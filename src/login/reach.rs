//! A server that could not be reached, or that refused a login, in plain
//! words: what every login says the same way.

use crate::manager::ExchangeError;

/// How a login names its server when it cannot be reached.
pub(crate) struct Reach {
    /// The server (`Vault`, `Consul`).
    pub(crate) server: &'static str,
    /// The builder whose CA bundle setters a refused certificate points to.
    pub(crate) builder: &'static str,
    /// What may be down (`server is down`, `agent is down`).
    pub(crate) down: &'static str,
}

impl Reach {
    /// The server at `url` could not be reached (or its answer not read):
    /// a refused TLS certificate in plain words (which check failed and
    /// what to do), else the network, the address or the server.
    pub(crate) fn unreachable(
        &self,
        url: &str,
        io: &std::io::Error,
        ca_bundle_given: bool,
    ) -> ExchangeError {
        let ca_bundle = format!("{}::ca_bundle_pem or ca_bundle_file", self.builder);
        let trust = crate::tls_pem::TrustSettings {
            ca_bundle: &ca_bundle,
            ca_bundle_given,
            client_certificate: None,
        };
        if let Some(plain) = crate::tls_pem::explain_refusal(url, io, &trust) {
            return ExchangeError(format!("cannot reach {} at {url}: {plain}", self.server));
        }
        ExchangeError(format!(
            "cannot reach {} at {url} ({io}): the network or the address is wrong, or the {}",
            self.server, self.down
        ))
    }
}

/// A login `kind` (`Vault login`) at `url`, logging in `as_what` (`as role
/// "web"`), refused with `status` and `said` (the server's error text):
/// `what` was wrong, in the server's terms (`None`: nothing recognised).
pub(crate) fn refused(
    kind: &str,
    url: &str,
    as_what: &str,
    what: Option<String>,
    status: u16,
    said: &str,
) -> ExchangeError {
    let what = what.unwrap_or_else(|| "the login was refused".to_string());
    let said = if said.is_empty() {
        "no error text"
    } else {
        said
    };
    ExchangeError(format!(
        "{kind} at {url} {as_what} refused: {what} (HTTP {status}: {said})"
    ))
}
