//! Reaching a login's server and reading its answer, and a server that
//! could not be reached or that refused a login, in plain words: what every
//! login does and says the same way.

use zeroize::Zeroizing;

use super::Refusal;
use crate::manager::ExchangeError;
use crate::vault_http::read_zeroizing;

/// What a request came to, before its answer is read.
pub(crate) type Sent = Result<ureq::http::Response<ureq::Body>, ureq::Error>;

/// How a login names its server when it cannot be reached.
pub(crate) struct Reach {
    /// The login (`Vault login`).
    pub(crate) kind: &'static str,
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

    /// The answer to the request to `url`, read whole into memory that is
    /// wiped when dropped: its status and body; a server that could not be
    /// reached, or whose answer could not be read, as
    /// [`unreachable`](Self::unreachable) says.
    pub(crate) fn read(
        &self,
        url: &str,
        sent: Sent,
        ca_bundle_given: bool,
    ) -> Result<(u16, Zeroizing<Vec<u8>>), ExchangeError> {
        let read = |sent: Sent| -> std::io::Result<_> {
            let mut resp = sent.map_err(ureq::Error::into_io)?;
            let status = resp.status().as_u16();
            Ok((status, read_zeroizing(resp.body_mut())?))
        };
        read(sent).map_err(|io| self.unreachable(url, &io, ca_bundle_given))
    }

    /// A call to `url` made with a token: its answer if the status is 2xx;
    /// else what `refused(status, body)` makes of it (the server refused
    /// the token itself, or something else failed).
    pub(crate) fn token_call(
        &self,
        url: &str,
        sent: Sent,
        ca_bundle_given: bool,
        refused: impl FnOnce(u16, &[u8]) -> Refusal,
    ) -> Result<Zeroizing<Vec<u8>>, Refusal> {
        let (status, answer) = self
            .read(url, sent, ca_bundle_given)
            .map_err(Refusal::Other)?;
        if (200..300).contains(&status) {
            Ok(answer)
        } else {
            Err(refused(status, &answer))
        }
    }

    /// A login at `url`, logging in `as_what` (`as role "web"`), refused
    /// with `status` and `said` (the server's error text): `what` was
    /// wrong, in the server's terms (`None`: nothing recognised).
    pub(crate) fn refused(
        &self,
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
            "{} at {url} {as_what} refused: {what} (HTTP {status}: {said})",
            self.kind
        ))
    }
}
