//! What every login's builder shares: the address, name, CA bundle,
//! timeout, least TTL, loopback rule and the token callback, each checked
//! the same way; and the setters for them ([`common_setters`]).

use std::sync::Arc;
use std::time::Duration;

use super::{DEFAULT_TIMEOUT, OnToken};
use crate::error::{Error, Result};
use crate::manager::IdentityId;

/// A login builder's shared settings.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) addr: String,
    pub(crate) identity: IdentityId,
    pub(crate) name: String,
    pub(crate) ca_bundle_pem: Option<Vec<u8>>,
    pub(crate) timeout: Duration,
    pub(crate) min_ttl: Duration,
    pub(crate) allow_http_loopback: bool,
    pub(crate) on_token: Option<Arc<OnToken>>,
}

/// A built login's shared part.
#[derive(Clone)]
pub(crate) struct Common {
    pub(crate) name: String,
    pub(crate) identity: IdentityId,
    pub(crate) min_ttl: Duration,
    pub(crate) on_token: Option<Arc<OnToken>>,
}

/// What [`Settings::finish`] makes: the shared part, and what the server's
/// calls need.
pub(crate) struct Built {
    pub(crate) common: Common,
    pub(crate) agent: ureq::Agent,
    pub(crate) addr: String,
    /// Whether a CA bundle was given (for what a refused certificate means).
    pub(crate) ca_bundle_given: bool,
}

impl Settings {
    /// The defaults for a login to `addr` with `identity`'s token, named
    /// `name`, keeping tokens with at least `min_ttl` left.
    pub(crate) fn new(addr: &str, identity: IdentityId, name: &str, min_ttl: Duration) -> Self {
        Settings {
            addr: addr.trim_end_matches('/').to_string(),
            identity,
            name: name.to_string(),
            ca_bundle_pem: None,
            timeout: DEFAULT_TIMEOUT,
            min_ttl,
            allow_http_loopback: false,
            on_token: None,
        }
    }

    /// Checks the address (`who` names the login in the error; `carries`
    /// says what travels, for why https is needed).
    pub(crate) fn check_addr(&self, who: &'static str, carries: &str) -> Result<()> {
        crate::vault_http::check_addr(&self.addr, self.allow_http_loopback, who, carries)
    }

    /// Checks the name and timeout and makes the HTTP agent.
    pub(crate) fn finish(self, who: &'static str) -> Result<Built> {
        let bad = |field: &str, why: &str| Error::invalid(who, field, why.to_string());
        if self.name.is_empty() {
            return Err(bad("name", "the exchange's name is empty"));
        }
        if self.timeout.is_zero() {
            return Err(bad("timeout", "a zero timeout can never succeed"));
        }
        let agent = crate::vault_http::agent(
            self.ca_bundle_pem.as_deref(),
            self.timeout,
            self.allow_http_loopback,
            who,
        )?;
        Ok(Built {
            common: Common {
                name: self.name,
                identity: self.identity,
                min_ttl: self.min_ttl,
                on_token: self.on_token,
            },
            agent,
            addr: self.addr,
            ca_bundle_given: self.ca_bundle_pem.is_some(),
        })
    }
}

/// The setters every login builder has, over its field `common`
/// ([`Settings`]): `name`, `ca_bundle_pem`, `ca_bundle_file`, `timeout`,
/// `allow_http_loopback`, `on_token`. `$who` names the login type,
/// `$default` its default name, `$server` its server, `$secret` the token
/// it hands out.
macro_rules! common_setters {
    ($who:literal, $default:literal, $server:literal, $secret:literal) => {
        #[doc = concat!(
            "The exchange's name: where its token is saved and how\n",
            "[`IdentityManager::secret`](crate::manager::IdentityManager::secret)\n",
            "finds it (default `", $default, "`). Each exchange of a manager needs its own:\n",
            "give two logins of one allocation (two tasks', say) two names, such\n",
            "as `", $default, "-<task>`; a manager refuses two of one name."
        )]
        pub fn name(mut self, name: &str) -> Self {
            self.common.name = name.to_string();
            self
        }

        /// Trust only the certificates of this PEM bundle (default: the
        /// Mozilla roots).
        pub fn ca_bundle_pem(mut self, pem: &[u8]) -> Self {
            self.common.ca_bundle_pem = Some(pem.to_vec());
            self
        }

        /// Trust only the certificates of this PEM file.
        pub fn ca_bundle_file(
            self,
            path: impl AsRef<std::path::Path>,
        ) -> $crate::error::Result<Self> {
            let pem = $crate::vault_http::read_ca_bundle_file(path.as_ref(), $who)?;
            Ok(self.ca_bundle_pem(&pem))
        }

        /// The time a whole request may take (default 10 s).
        pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
            self.common.timeout = timeout;
            self
        }

        #[doc = concat!(
            "Allow `http://` to a loopback host (a dev ", $server, " on this machine);\n",
            "default: https only."
        )]
        pub fn allow_http_loopback(mut self, allow: bool) -> Self {
            self.common.allow_http_loopback = allow;
            self
        }

        #[doc = concat!(
            "Called with every ", $secret, " the workload should use from now on\n",
            "(on start, on every restore, whenever a new login replaces it)."
        )]
        pub fn on_token(
            mut self,
            f: impl Fn(&str, $crate::manager::EventKind) + Send + Sync + 'static,
        ) -> Self {
            self.common.on_token = Some(std::sync::Arc::new(f));
            self
        }
    };
}
pub(crate) use common_setters;
