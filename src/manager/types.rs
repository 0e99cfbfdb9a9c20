//! The manager's vocabulary: which identity, the token kept for it, secrets
//! derived from it, what watchers are told, and how identities are signed.

use std::fmt;

use crate::error::Result;
use crate::issue::{Issuer, SignedIdentity};
use crate::model::IssueRequest;

/// Which identity: its task or service, and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityId {
    /// The task or service name.
    pub workload: String,
    /// The identity's name.
    pub name: String,
}

impl IdentityId {
    /// The key for `name` of `workload`.
    pub fn new(workload: &str, name: &str) -> IdentityId {
        IdentityId {
            workload: workload.to_string(),
            name: name.to_string(),
        }
    }

    pub(crate) fn of(req: &IssueRequest) -> IdentityId {
        let workload = req
            .workload()
            .map(|w| w.name().to_string())
            .unwrap_or_default();
        IdentityId::new(&workload, &req.identity.name)
    }
}

impl fmt::Display for IdentityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.workload, self.name)
    }
}

/// A signed identity as the manager keeps it. `Debug` redacts the token.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityToken {
    /// Which identity.
    pub key: IdentityId,
    /// The compact JWS.
    pub token: String,
    /// The signing key's ID.
    pub kid: String,
    /// Its `jti`.
    pub jwt_id: String,
    /// Its `iat` (Unix seconds).
    pub issued_at: i64,
    /// Its `exp` (Unix seconds), if any.
    pub expires_at: Option<i64>,
}

impl IdentityToken {
    pub(crate) fn from_signed(key: IdentityId, s: SignedIdentity) -> IdentityToken {
        IdentityToken {
            key,
            kid: s.kid.to_string(),
            jwt_id: s.claims.jwt_id,
            issued_at: s.claims.issued_at.unwrap_or_default(),
            expires_at: s.claims.expires_at,
            token: s.token,
        }
    }

    /// Whether the token may still be served at `now_ms`.
    pub fn valid_at(&self, now_ms: i64) -> bool {
        self.expires_at
            .is_none_or(|exp| now_ms < exp.saturating_mul(1000))
    }

    /// When its renewal window opens (Unix seconds): half-way through its life.
    /// Computed without overflow for any times (the midpoint of two `i64`s is
    /// an `i64`).
    pub fn renewal_window_start(&self) -> Option<i64> {
        self.expires_at.map(|exp| {
            let (iat, exp) = (i128::from(self.issued_at), i128::from(exp));
            // Between iat and exp, so within i64.
            i64::try_from(iat + (exp - iat) / 2).unwrap_or(i64::MAX)
        })
    }
}

impl fmt::Debug for IdentityToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityToken")
            .field("key", &self.key)
            .field(
                "token",
                &format_args!("[redacted, {} bytes]", self.token.len()),
            )
            .field("kid", &self.kid)
            .field("jwt_id", &self.jwt_id)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// A secret a token exchange derived from an identity.
#[derive(Clone, PartialEq, Eq)]
pub struct DerivedSecret {
    /// The exchange's name.
    pub exchange: String,
    /// The identity it was derived from.
    pub identity: IdentityId,
    /// The secret.
    pub secret: String,
    /// The `jti` of the identity token it was derived from.
    pub derived_from: String,
}

impl fmt::Debug for DerivedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DerivedSecret")
            .field("exchange", &self.exchange)
            .field("identity", &self.identity)
            .field(
                "secret",
                &format_args!("[redacted, {} bytes]", self.secret.len()),
            )
            .field("derived_from", &self.derived_from)
            .finish()
    }
}

/// Why a watcher was told about a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// First signed for a new allocation.
    Initial,
    /// Renewed before expiry.
    Renewed,
    /// Restored after a restart (reused or re-signed).
    Restored,
}

/// What a watcher receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityUpdate {
    /// The newest token.
    pub token: IdentityToken,
    /// Why.
    pub kind: EventKind,
}

/// How signed identities are obtained: the in-process [`Issuer`], or the host's
/// RPC. All requested identities, in order, or an error — never a partial set.
pub trait IdentitySigner: Send + Sync {
    /// Signs every request at `now` (Unix seconds).
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>>;
}

impl IdentitySigner for Issuer {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>> {
        requests.iter().map(|r| self.issue(r, now)).collect()
    }
}

/// How a restore went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Whether the saved tokens were reused (else everything was re-signed).
    pub reused: bool,
    /// Why they were not reused (empty when they were).
    pub reason: String,
    /// Exchanges whose secret was derived anew (not reused).
    pub rederived: Vec<String>,
}
