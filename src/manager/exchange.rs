//! Token-exchange hooks: consumers that trade a workload identity for a
//! third-party secret (a Consul ACL token, a Vault token).
//!
//! Seed 001: after a host restart, recovered workloads ran with an empty Consul
//! token because the exchange hook was skipped on restore. Here every hook is
//! run on every path: on start the secret is derived; on restore the persisted
//! secret is reused only when it is non-empty and was derived from the identity
//! token now in use — otherwise it is derived again — and the consumer is told
//! (`deliver`) every time, whichever way it went.

use std::fmt;

use super::{EventKind, IdentityId, IdentityToken};

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeError(pub String);

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExchangeError {}

/// A consumer of one identity that derives a secret from it.
pub trait TokenExchange: Send + Sync {
    /// A stable name, used to persist the derived secret (e.g. `consul`).
    fn name(&self) -> &str;
    /// The identity it consumes.
    fn identity(&self) -> &IdentityId;
    /// Trades the identity token for a secret (e.g. a Consul login).
    fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError>;
    /// Hands the secret to the workload (called on start and on every restore).
    fn deliver(&self, secret: &str, kind: EventKind);
}
