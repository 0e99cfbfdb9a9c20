//! Token-exchange hooks: consumers that trade a workload identity for a
//! third-party secret (a Consul ACL token, a Vault token).
//!
//! Seed 001: after a host restart, recovered workloads ran with an empty Consul
//! token because the exchange hook was skipped on restore. Here every hook is
//! run on every path: on start the secret is derived; on restore the persisted
//! secret is reused only when it is non-empty, was derived from the identity
//! token now in use and the exchange's [`TokenExchange::refresh`] keeps it
//! (a Vault login checks its token with `lookup-self`) — otherwise it is
//! derived again — and the consumer is told (`deliver`) every time, whichever
//! way it went.
//!
//! Secrets with a life of their own (a Vault token's TTL) are kept alive by
//! [`TokenExchange::refresh`]: at the time the exchange asks for
//! ([`Derived::refresh_at_ms`]), whenever the identity is re-signed, and on
//! restore. A secret that is replaced is handed to
//! [`TokenExchange::revoke`] (a Vault login revokes it) once its successor
//! is saved and delivered; it stays in the saved state until that is done.

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

/// A secret an exchange derived, and when it wants to look at it again.
/// `Debug` shows the secret's length only.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Derived {
    /// The secret (a Vault or Consul token).
    pub secret: String,
    /// When to call [`TokenExchange::refresh`] with [`RefreshReason::Due`]
    /// (Unix ms); `None`: only when the identity is re-signed.
    pub refresh_at_ms: Option<i64>,
}

impl Derived {
    /// A secret, refreshed at `refresh_at_ms` (Unix ms) or only when the
    /// identity is re-signed (`None`).
    pub fn new(secret: String, refresh_at_ms: Option<i64>) -> Derived {
        Derived {
            secret,
            refresh_at_ms,
        }
    }
}

impl fmt::Debug for Derived {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Derived")
            .field(
                "secret",
                &format_args!("[redacted, {} bytes]", self.secret.len()),
            )
            .field("refresh_at_ms", &self.refresh_at_ms)
            .finish()
    }
}

impl Drop for Derived {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.secret);
    }
}

/// Why [`TokenExchange::refresh`] is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefreshReason {
    /// The time the exchange asked for has come (or a failed refresh is
    /// retried).
    Due,
    /// The identity was re-signed (renewed); `token` is the new one.
    Resigned,
    /// After a restart: the saved secret, derived from the saved token that
    /// is still in use. Return [`Refreshed::Kept`] only if it still works.
    Restored,
}

/// What [`TokenExchange::refresh`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refreshed {
    /// The secret stays in use (still fresh, or checked and still alive);
    /// refresh again at this time (Unix ms), or only when the identity is
    /// re-signed.
    Kept {
        /// When to refresh next.
        refresh_at_ms: Option<i64>,
    },
    /// The secret was renewed with the identity's current token (`token`):
    /// it stays in use and now counts as derived from that token, so a
    /// restore after a restart asks the exchange to confirm it
    /// ([`RefreshReason::Restored`]) instead of deriving a new one.
    Renewed {
        /// When to refresh next.
        refresh_at_ms: Option<i64>,
    },
    /// A new secret replaces it (derived again from `token`): the manager
    /// saves and delivers it, then revokes the old one.
    Replaced(Derived),
}

/// A consumer of one identity that derives a secret from it.
///
/// Only [`name`](TokenExchange::name), [`identity`](TokenExchange::identity),
/// [`exchange`](TokenExchange::exchange) and [`deliver`](TokenExchange::deliver)
/// are required; the others default to a secret that never expires and is
/// never revoked.
///
/// # When each method runs
///
/// Every call is made by the thread running the manager's
/// [`start`](super::IdentityManager::start),
/// [`restore`](super::IdentityManager::restore) or
/// [`tick`](super::IdentityManager::tick) (one at a time: they hold the
/// manager's renewal lock), never while the manager's state lock is held, so
/// a method may be slow (a network login) and may read the manager.
///
/// | when | call | then |
/// |---|---|---|
/// | `start` | [`derive`](TokenExchange::derive) (default: `exchange`) with the freshly signed token | the secret is saved to the state directory, then [`deliver`](TokenExchange::deliver)`(secret, Started)` |
/// | `restore`, the saved identity still in use and its saved secret derived from it | [`refresh`](TokenExchange::refresh) with [`RefreshReason::Restored`]: confirm it (a Vault login's `lookup-self`) | `Kept`/`Renewed`: `deliver(secret, Restored)`; `Replaced`: the new one saved, delivered, and the old one [`revoke`](TokenExchange::revoke)d; an error: nothing is delivered (never an unconfirmed secret), the old one is held back and the confirmation retried (1 s, doubling, at most 60 s) |
/// | `restore`, the saved secret missing, empty or derived from another token; or the identities re-signed at restore | `derive` with the token in use | saved, `deliver(secret, Restored)`, the saved one revoked once its successor is delivered |
/// | `tick`, the identity re-signed (renewal window) | `refresh` with [`RefreshReason::Resigned`] and the new token (or `derive` when there is no secret yet) | `Replaced`: saved, `deliver(secret, Renewed)`, then the old one revoked |
/// | `tick`, the time a previous call asked for (`refresh_at_ms`) has come, or a failed call is retried | `refresh` with [`RefreshReason::Due`] | as above |
///
/// | [`end_allocation`](super::IdentityManager::end_allocation) | [`revoke`](TokenExchange::revoke) for every secret held or saved | the saved state removed once all are revoked |
///
/// A secret is always saved before it is delivered, and a replaced one is
/// revoked only after its successor was saved and delivered, and saved (in
/// the successor's write) until its revocation is done: a crash at any
/// point leaves a state directory whose secret either is the one delivered or
/// is confirmed (or replaced) by the next restore, and whose replaced
/// secrets the next start revokes.
pub trait TokenExchange: Send + Sync {
    /// A stable name, used to persist the derived secret (e.g. `consul`);
    /// unique among a manager's exchanges (its builder refuses two of one
    /// name).
    fn name(&self) -> &str;
    /// The identity it consumes.
    fn identity(&self) -> &IdentityId;
    /// Trades the identity token for a secret (e.g. a Consul login).
    fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError>;
    /// Hands the secret to the workload (called on start, on every restore,
    /// and whenever it is replaced).
    fn deliver(&self, secret: &str, kind: EventKind);
    /// Trades the identity token for a secret at `now_ms`, saying when to
    /// refresh it. Default: [`exchange`](TokenExchange::exchange), refreshed
    /// only when the identity is re-signed.
    fn derive(&self, token: &IdentityToken, now_ms: i64) -> Result<Derived, ExchangeError> {
        let _ = now_ms;
        Ok(Derived::new(self.exchange(token)?, None))
    }
    /// Keeps `secret` (derived earlier from this identity) usable at
    /// `now_ms`: renew it, or derive a new one from `token` (the identity's
    /// newest token; it may have expired when signing has been failing, as a
    /// renewal needs only the secret). On an error the secret stays in use
    /// (after [`RefreshReason::Restored`] it is held back: never handed out
    /// unconfirmed, and revoked only once a new one has been delivered) and
    /// the refresh is retried with [`RefreshReason::Due`] after a backoff (1 s,
    /// doubling, at most 60 s). Default: kept as it is.
    fn refresh(
        &self,
        secret: &str,
        token: &IdentityToken,
        reason: RefreshReason,
        now_ms: i64,
    ) -> Result<Refreshed, ExchangeError> {
        let _ = (secret, token, reason);
        let _ = now_ms;
        Ok(Refreshed::Kept {
            refresh_at_ms: None,
        })
    }
    /// Releases a secret that was replaced (revokes it), best effort.
    /// The manager calls [`revoke`](TokenExchange::revoke), whose default
    /// calls this and counts it done. Default: nothing.
    fn release(&self, secret: &str) {
        let _ = secret;
    }
    /// Revokes a secret taken out of use, saying whether that is done:
    /// `Ok` when the server revoked it or it was no longer valid there,
    /// an error when it may still be live (the server unreachable), so the
    /// manager keeps it saved and tries again (after a later delivery, on
    /// the next start, and in
    /// [`end_allocation`](super::IdentityManager::end_allocation)). Called
    /// only after its successor (if any) was saved and delivered.
    /// Default: [`release`](TokenExchange::release), then `Ok`.
    fn revoke(&self, secret: &str) -> Result<(), ExchangeError> {
        self.release(secret);
        Ok(())
    }
    /// Where this exchange's secrets are minted, saved with each of them: a
    /// login's server (address, namespace or partition) and what it logs in
    /// as (mount and role, auth method), as `<server>; <as>`. A restore
    /// confirms, uses or revokes a saved secret only when it was minted
    /// with this exchange's origin; any other is dropped and derived anew,
    /// never sent to the server configured now. Default: `""` (secrets not
    /// bound to a server).
    fn origin(&self) -> String {
        String::new()
    }
    /// Whether a secret minted with `origin` (another than this exchange's)
    /// came from the very server this exchange talks to, so that revoking
    /// it there ([`TokenExchange::revoke`]) sends it nowhere else (a role
    /// or mount changed, the server kept). Default: the part of both
    /// origins before `;` is the same and not empty.
    fn same_server(&self, origin: &str) -> bool {
        let own = self.origin();
        let server = |o: &str| o.split(';').next().unwrap_or_default().to_string();
        !server(&own).is_empty() && server(&own) == server(origin)
    }
}
