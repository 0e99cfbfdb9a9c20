//! What a host shows an operator about one allocation's identities: each
//! token's remaining life, each exchange's secret, and what is failing.

use super::{IdentityId, IdentityManager, slot_of};

/// One identity's health (see [`IdentityManager::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdentityHealth {
    /// Which identity.
    pub key: IdentityId,
    /// Its token's `exp` (Unix seconds); `None` without a token, or for a
    /// token that does not expire.
    pub expires_at: Option<i64>,
    /// Milliseconds until it expires (negative once it has); `None` as
    /// `expires_at`.
    pub expires_in_ms: Option<i64>,
    /// Whether a token is held that is valid at the time asked about.
    pub valid: bool,
}

/// One token exchange's health (see [`IdentityManager::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExchangeHealth {
    /// The exchange's name.
    pub name: String,
    /// The identity it consumes.
    pub identity: IdentityId,
    /// Whether it holds a secret it may hand out (derived, or confirmed
    /// after a restore).
    pub has_secret: bool,
    /// Whether a secret is held back: taken out of use (unconfirmed after a
    /// restore, or saved by an earlier process to be revoked) and revoked
    /// once a successor is delivered.
    pub held_back: bool,
    /// Failures since its last success.
    pub failures: u32,
    /// When it is refreshed or retried next (Unix ms), if scheduled.
    pub next_attempt_ms: Option<i64>,
    /// Its last failure's message (never a secret); `None` after a success.
    pub last_error: Option<String>,
}

/// One allocation's identities and exchanges at a point in time, for a
/// host's health endpoint. `Debug` shows no token and no secret (none is
/// held here).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdentityManagerHealth {
    /// The allocation.
    pub alloc_id: String,
    /// Every identity, in the order requested.
    pub identities: Vec<IdentityHealth>,
    /// Every exchange, in the order added.
    pub exchanges: Vec<ExchangeHealth>,
    /// Signing failures since the last success.
    pub sign_failures: u32,
    /// The last signing failure's message; `None` after a success.
    pub last_sign_error: Option<String>,
    /// When the next signing is due (Unix ms), if scheduled.
    pub next_signing_ms: Option<i64>,
    /// Whether something needs an operator: an identity without a valid
    /// token, signing failing, an exchange failing, or a secret missing.
    pub at_risk: bool,
}

impl IdentityManager {
    /// The health of every identity and exchange at `now_ms` (Unix ms).
    pub fn health(&self, now_ms: i64) -> IdentityManagerHealth {
        let st = self.lock();
        let identities: Vec<IdentityHealth> = self
            .inner
            .keys
            .iter()
            .map(|key| {
                let t = st.tokens.get(key);
                let expires_at = t.and_then(|t| t.expires_at);
                IdentityHealth {
                    key: key.clone(),
                    expires_at,
                    expires_in_ms: expires_at
                        .map(|exp| exp.saturating_mul(1000).saturating_sub(now_ms)),
                    valid: t.is_some_and(|t| t.valid_at(now_ms)),
                }
            })
            .collect();
        let exchanges: Vec<ExchangeHealth> = self
            .inner
            .parts
            .exchanges
            .iter()
            .map(|x| {
                let slot = slot_of(x.as_ref());
                let name = x.name();
                ExchangeHealth {
                    name: name.to_string(),
                    identity: x.identity().clone(),
                    has_secret: st.secrets.get(&slot).is_some_and(|s| !s.secret.is_empty()),
                    held_back: st.holds_back(&slot),
                    failures: st.exchange_failures.get(name).copied().unwrap_or(0),
                    next_attempt_ms: st.refresh_at.get(name).copied(),
                    last_error: st.exchange_errors.get(name).cloned(),
                }
            })
            .collect();
        let at_risk = st.failures > 0
            || identities.iter().any(|i| !i.valid)
            || exchanges.iter().any(|x| x.failures > 0 || !x.has_secret);
        IdentityManagerHealth {
            alloc_id: self.inner.alloc_id.clone(),
            identities,
            exchanges,
            sign_failures: st.failures,
            last_sign_error: st.sign_error.clone(),
            next_signing_ms: st.next_ms,
            at_risk,
        }
    }
}
