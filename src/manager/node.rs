//! The node identity manager: a client node's own identity token (Nomad
//! 1.11), renewed at two thirds of its life, and loud before it can lapse.
//!
//! Nomad's users met the failure that matters (Nomad #27763): renewals
//! stopped and every client went down when its 24 h token expired. Here a
//! failed renewal is retried with a backoff while the current token is
//! still valid, and every failure says, at warn level and in
//! [`NodeIdentityStats`], how long the token has left and whether it will
//! expire before the next attempt.

use std::sync::{Arc, Mutex, PoisonError};

use super::renewal::{Jitter, OsJitter};
use super::{IdentityDb, IdentityId, IdentityToken, PersistedState};
use crate::error::{Error, Result};
use crate::issue::{Issuer, SignedIdentity};
use crate::keyring::Keyring;
use crate::model::NodeIdentityRequest;

/// How node identities are signed: the in-process [`Issuer`], or the host's
/// RPC to its servers.
pub trait NodeSigner: Send + Sync {
    /// Signs `request` at `now` (Unix seconds).
    fn sign_node(&self, request: &NodeIdentityRequest, now: i64) -> Result<SignedIdentity>;
}

impl NodeSigner for Issuer {
    fn sign_node(&self, request: &NodeIdentityRequest, now: i64) -> Result<SignedIdentity> {
        self.issue_node(request, now)
    }
}

/// The first retry after a failed renewal; it doubles per failure...
const BACKOFF_BASE_MS: i64 = 1_000;
/// ...up to a minute: a node identity that is about to lapse is worth trying
/// often.
const BACKOFF_CAP_MS: i64 = 60_000;
/// Renewal is due at two thirds of the life, minus up to this fraction of
/// the life as jitter (so a fleet started together does not renew together).
const JITTER_FRACTION: f64 = 0.05;

/// What a node identity manager has done, and whether its token is at risk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct NodeIdentityStats {
    /// Tokens signed (the first included).
    pub signed: u64,
    /// Renewal attempts that failed.
    pub failures: u64,
    /// Failures since the last success (0 when the last attempt succeeded).
    pub consecutive_failures: u32,
    /// The current token's `exp` (Unix seconds), if there is a token.
    pub expires_at: Option<i64>,
    /// When the next renewal attempt is due (Unix milliseconds).
    pub next_attempt_ms: Option<i64>,
    /// Renewals are failing and the token expires before the next attempt:
    /// unless something changes, this node loses its identity.
    pub expires_before_next_attempt: bool,
    /// The last failure's message (never a token).
    pub last_error: Option<String>,
}

/// [`NodeIdentityManager::health`]: the counters and what the clock says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeIdentityHealth {
    /// Milliseconds until the current token expires (negative: expired);
    /// `None` without a token. Saturates at the ends of `i64` (a `now` far
    /// from the token's `exp`).
    pub expires_in_ms: Option<i64>,
    /// How long past due the next renewal attempt is (0 when it is not due;
    /// saturates at `i64::MAX`).
    pub renewal_overdue_ms: i64,
    /// Renewals are failing, a renewal is more than a minute overdue, or
    /// there is no valid token: someone should look.
    pub at_risk: bool,
    /// The counters.
    pub stats: NodeIdentityStats,
}

/// A renewal more than this late means whatever calls `tick` stalled.
const OVERDUE_WARN_MS: i64 = 60_000;

struct State {
    token: Option<IdentityToken>,
    next_attempt_ms: Option<i64>,
    /// The current token's renewal time.
    due_ms: Option<i64>,
    stats: NodeIdentityStats,
}

/// Keeps one client node's identity token: renewed at two thirds of its
/// life, retried with a backoff, loud before it lapses.
///
/// ```
/// use std::sync::Arc;
/// use workload_identity::manager::{MemoryIdentityDb, NodeIdentityManager};
/// use workload_identity::model::{Node, NodeIdentityRequest};
/// use workload_identity::{Issuer, Keyring};
///
/// let keyring = Keyring::new();
/// keyring.rotate(1_700_000_000)?;
/// let req = NodeIdentityRequest {
///     region: "global".into(),
///     node: Node { id: "n1".into(), datacenter: "dc1".into(), node_pool: "default".into(), ..Node::default() },
///     ..NodeIdentityRequest::default()
/// };
/// let m = NodeIdentityManager::new(req, Arc::new(Issuer::new(keyring.clone())), Arc::new(MemoryIdentityDb::default()), keyring);
/// let t0 = 1_700_000_000_000;
/// m.start(t0)?;
/// // Due at two thirds of 24 h (16 h), less up to 5 % of 24 h (72 min) as jitter.
/// let due = m.next_due_ms().unwrap();
/// assert!(due >= t0 + 14 * 3600 * 1000 + 48 * 60 * 1000 && due <= t0 + 16 * 3600 * 1000);
/// m.tick(due)?; // renews
/// assert_eq!(m.stats().signed, 2);
/// # Ok::<(), workload_identity::Error>(())
/// ```
pub struct NodeIdentityManager {
    request: NodeIdentityRequest,
    signer: Arc<dyn NodeSigner>,
    db: Arc<dyn IdentityDb>,
    keyring: Keyring,
    jitter: Arc<dyn Jitter>,
    state: Mutex<State>,
    /// Held for a whole renewal: one at a time.
    renewing: Mutex<()>,
}

impl std::fmt::Debug for NodeIdentityManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentityManager")
            .field("node", &self.request.node.id)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl NodeIdentityManager {
    /// A manager for `request`'s node, signing with `signer`, saving to `db`
    /// (under `node.<hash of the node ID>`), checking restored and newly
    /// signed tokens against `keyring`.
    pub fn new(
        request: NodeIdentityRequest,
        signer: Arc<dyn NodeSigner>,
        db: Arc<dyn IdentityDb>,
        keyring: Keyring,
    ) -> NodeIdentityManager {
        NodeIdentityManager {
            request,
            signer,
            db,
            keyring,
            jitter: Arc::new(OsJitter),
            state: Mutex::new(State {
                token: None,
                next_attempt_ms: None,
                due_ms: None,
                stats: NodeIdentityStats::default(),
            }),
            renewing: Mutex::new(()),
        }
    }

    /// Replaces the jitter source (tests make it fixed).
    pub fn with_jitter(mut self, jitter: Arc<dyn Jitter>) -> NodeIdentityManager {
        self.jitter = jitter;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `node.<hex of SHA-256 of the node ID, 16 bytes>`: a safe file name
    /// whatever the ID holds, and never an allocation ID's form.
    fn db_key(&self) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(self.request.node.id.as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("node.{hex}")
    }

    fn identity_id() -> IdentityId {
        IdentityId::new("node", "default")
    }

    /// When a token signed at `iat` and expiring at `exp` is due for
    /// renewal: two thirds of its life, less up to 5 % of it as jitter.
    fn due_ms(&self, iat: i64, exp: i64) -> i64 {
        // In i128: a signer's iat and exp may be anywhere in i64.
        let life_ms = (i128::from(exp) - i128::from(iat)).max(0) * 1000;
        let jitter =
            (life_ms as f64 * JITTER_FRACTION * self.jitter.draw().clamp(0.0, 1.0)) as i128;
        let due = i128::from(iat) * 1000 + life_ms * 2 / 3 - jitter;
        i64::try_from(due).unwrap_or(i64::MAX)
    }

    /// Signs a first token and saves it.
    pub fn start(&self, now_ms: i64) -> Result<IdentityToken> {
        self.renew(now_ms)
    }

    /// After a restart: takes the saved token back if it still verifies
    /// against the keyring, is this node's (node claims, `sub`, `aud` as the
    /// request gives them), matches its saved record (`jti`, `iat`, `exp`)
    /// and has not expired. If it is already due for renewal it is renewed
    /// at once, and kept in use when that fails (retried with the backoff):
    /// a restart while the servers are unreachable never costs the node a
    /// token that is still good. Anything else signs a new one. `Ok(true)`
    /// when the saved token was taken back.
    pub fn restore(&self, now_ms: i64) -> Result<bool> {
        match self.saved(now_ms) {
            Ok(token) => {
                let exp = token.expires_at.unwrap_or(token.issued_at);
                let due = self.due_ms(token.issued_at, exp);
                {
                    let mut st = self.lock();
                    st.stats.expires_at = token.expires_at;
                    st.next_attempt_ms = Some(due);
                    st.stats.next_attempt_ms = Some(due);
                    st.due_ms = Some(due);
                    st.token = Some(token);
                }
                if now_ms >= due {
                    // Logged and backed off by renew; the saved token stays.
                    let _ = self.renew(now_ms);
                }
                Ok(true)
            }
            Err(why) => {
                log::info!(
                    "node identity of {:?} re-signed on restore: {why}",
                    self.request.node.id
                );
                self.renew(now_ms).map(|_| false)
            }
        }
    }

    /// `sub` as signing the request gives it.
    fn expected_subject(&self) -> String {
        let r = &self.request;
        format!(
            "node:{}:{}:{}:default",
            r.region, r.node.node_pool, r.node.id
        )
    }

    /// Why `claims` are not this node's identity as configured, if they are
    /// not (node claims, `sub`, `aud`; times, `jti` and `iss` aside).
    fn not_ours(&self, claims: &crate::claims::Claims) -> Option<&'static str> {
        let r = &self.request;
        if claims.node.as_ref() != Some(&crate::claims::NodeClaims::of(&r.node)) {
            return Some("its nomad_node_* claims are not this node's");
        }
        if claims.subject != self.expected_subject() {
            return Some("its sub is not this node's");
        }
        if claims.audience != r.audiences() {
            return Some("its aud is not the request's");
        }
        None
    }

    /// The saved token, if it may be taken back at `now_ms`; else why not.
    fn saved(&self, now_ms: i64) -> std::result::Result<IdentityToken, String> {
        let state = self
            .db
            .load(&self.db_key())
            .map_err(|e| format!("saved state unreadable: {e}"))?
            .ok_or("no saved state")?;
        let [token] = <[IdentityToken; 1]>::try_from(state.identities)
            .map_err(|v| format!("the saved state holds {} identities, not one", v.len()))?;
        let claims = crate::verify::check_signature(&self.keyring, &token.token)
            .map_err(|e| format!("the saved token no longer verifies: {e}"))?;
        if let Some(why) = self.not_ours(&claims) {
            return Err(format!(
                "the saved token is not this node's identity as configured: {why}"
            ));
        }
        if claims.jwt_id != token.jwt_id
            || claims.expires_at != token.expires_at
            || claims.issued_at != Some(token.issued_at)
        {
            return Err(
                "the saved token does not match its saved record (jti, iat or exp differ)".into(),
            );
        }
        let Some(exp) = token.expires_at else {
            return Err("the saved token has no exp".into());
        };
        if now_ms >= exp.saturating_mul(1000) {
            return Err("the saved token has expired".into());
        }
        Ok(token)
    }

    /// Why `s` cannot be this node's next token at `now_ms`, if it cannot.
    fn refuse_signed(&self, s: &SignedIdentity, now_ms: i64) -> Option<String> {
        let claims = match crate::verify::check_signature(&self.keyring, &s.token) {
            Ok(c) => c,
            Err(e) => {
                return Some(format!(
                    "its token does not verify against the keyring: {e}"
                ));
            }
        };
        if claims != s.claims {
            return Some("the claims it reports differ from its token's".into());
        }
        if let Some(why) = self.not_ours(&claims) {
            return Some(why.into());
        }
        let (Some(iat), Some(exp)) = (claims.issued_at, claims.expires_at) else {
            return Some("its token lacks iat or exp (a node identity must expire)".into());
        };
        if exp.saturating_mul(1000) <= now_ms || exp <= iat {
            return Some(format!(
                "its token expires at {exp}, not after now and its iat"
            ));
        }
        if self.due_ms(iat, exp) <= now_ms {
            return Some("its token is already due for renewal (not a fresh token)".into());
        }
        let current_exp = self.lock().token.as_ref().and_then(|t| t.expires_at);
        if current_exp.is_some_and(|c| exp <= c) {
            return Some(
                "its token does not outlive the current one (the signer did not renew)".into(),
            );
        }
        None
    }

    /// Signs, installs and saves a new token now. One renewal at a time; a
    /// token that cannot be saved is still used (and the failure logged).
    fn renew(&self, now_ms: i64) -> Result<IdentityToken> {
        let Some(_one) = super::reentry::enter(&self.renewing) else {
            return Err(super::reentry::refused("NodeIdentityManager", "start"));
        };
        self.renew_locked(now_ms)
    }

    /// [`NodeIdentityManager::renew`] with the renewal lock held.
    fn renew_locked(&self, now_ms: i64) -> Result<IdentityToken> {
        let now = now_ms.div_euclid(1000);
        let attempt = self.signer.sign_node(&self.request, now).and_then(|s| {
            if let Some(why) = self.refuse_signed(&s, now_ms) {
                return Err(Error::invalid(
                    "NodeSigner",
                    "token",
                    format!("the signer returned a token that cannot be this node's next identity: {why}"),
                ));
            }
            Ok(IdentityToken::from_signed(Self::identity_id(), s, None))
        });
        let attempt = attempt.inspect(|token| {
            let saved = self.db.store(
                &self.db_key(),
                &PersistedState {
                    identities: vec![token.clone()],
                    ..PersistedState::default()
                },
            );
            if let Err(e) = saved {
                log::warn!(
                    "node identity of {:?}: the new token is in use but could not be saved ({e}); a restart will sign again",
                    self.request.node.id
                );
            }
        });
        let mut st = self.lock();
        match attempt {
            Ok(token) => {
                let exp = token.expires_at.unwrap_or(token.issued_at);
                let due = self.due_ms(token.issued_at, exp);
                st.stats.signed += 1;
                st.stats.consecutive_failures = 0;
                st.stats.expires_at = token.expires_at;
                st.stats.expires_before_next_attempt = false;
                st.stats.last_error = None;
                st.next_attempt_ms = Some(due);
                st.stats.next_attempt_ms = Some(due);
                st.due_ms = Some(due);
                st.token = Some(token.clone());
                Ok(token)
            }
            Err(e) => {
                st.stats.failures += 1;
                st.stats.consecutive_failures = st.stats.consecutive_failures.saturating_add(1);
                let n = st.stats.consecutive_failures;
                let delay = (BACKOFF_BASE_MS << n.saturating_sub(1).min(16)).min(BACKOFF_CAP_MS);
                let next = now_ms.saturating_add(delay);
                st.next_attempt_ms = Some(next);
                st.stats.next_attempt_ms = Some(next);
                st.stats.last_error = Some(e.to_string());
                let exp_ms = st
                    .token
                    .as_ref()
                    .and_then(|t| t.expires_at)
                    .map(|exp| exp.saturating_mul(1000));
                st.stats.expires_before_next_attempt = exp_ms.is_some_and(|x| x <= next);
                match exp_ms {
                    Some(x) if x > now_ms => log::warn!(
                        "node identity of {:?}: renewal failed {n} time(s) in a row ({e}); the current token expires in {} s{}; next attempt in {} s",
                        self.request.node.id,
                        x.saturating_sub(now_ms) / 1000,
                        if x <= next {
                            ", BEFORE the next attempt: the node will lose its identity"
                        } else {
                            ""
                        },
                        delay / 1000
                    ),
                    Some(_) => log::warn!(
                        "node identity of {:?}: renewal failed {n} time(s) in a row ({e}) and the token HAS EXPIRED: the node has no valid identity; next attempt in {} s",
                        self.request.node.id,
                        delay / 1000
                    ),
                    None => log::warn!(
                        "node identity of {:?}: signing failed {n} time(s) in a row ({e}); the node has no identity yet; next attempt in {} s",
                        self.request.node.id,
                        delay / 1000
                    ),
                }
                Err(e)
            }
        }
    }

    /// Renews when due (two thirds of the life, or the retry after a
    /// failure). A failure keeps the current token and is returned; the next
    /// attempt is backed off (1 s doubling to 60 s). Called from inside this
    /// manager's own signer (as `start` and `restore` too), on the thread
    /// running it: `InvalidArgument`, nothing done.
    pub fn tick(&self, now_ms: i64) -> Result<()> {
        // Decided and done under the renewal lock: two threads ticking at
        // the due time renew once.
        let Some(_one) = super::reentry::enter(&self.renewing) else {
            return Err(super::reentry::refused("NodeIdentityManager", "tick"));
        };
        let due = self.lock().next_attempt_ms;
        match due {
            Some(due) if now_ms < due => Ok(()),
            Some(due) => {
                // `now_ms` is the caller's: any i64, so every distance
                // from it saturates.
                let overdue = now_ms.saturating_sub(due);
                if overdue > OVERDUE_WARN_MS {
                    log::warn!(
                        "node identity of {:?}: the renewal due {} s ago is only being tried now: whatever calls tick() was stalled",
                        self.request.node.id,
                        overdue / 1000
                    );
                }
                self.renew_locked(now_ms).map(drop)
            }
            None => self.renew_locked(now_ms).map(drop),
        }
    }

    /// What [`NodeIdentityManager::stats`] says, plus what only the time
    /// can tell: how long the token has left and how late its renewal is.
    /// Call it from a health check or a metrics scrape: it sees a renewal
    /// that is not happening because nothing calls
    /// [`NodeIdentityManager::tick`] (a stalled loop, Nomad #27763's
    /// failure), which no failure would report.
    pub fn health(&self, now_ms: i64) -> NodeIdentityHealth {
        let st = self.lock();
        let exp_ms = st
            .token
            .as_ref()
            .and_then(|t| t.expires_at)
            .map(|e| e.saturating_mul(1000));
        // `now_ms` is the caller's: any i64, so every distance from it
        // saturates (a distance past either end reads as that end).
        let overdue = st.next_attempt_ms.map(|d| now_ms.saturating_sub(d));
        NodeIdentityHealth {
            expires_in_ms: exp_ms.map(|x| x.saturating_sub(now_ms)),
            renewal_overdue_ms: overdue.map_or(0, |o| o.max(0)),
            at_risk: st.stats.consecutive_failures > 0
                || overdue.is_some_and(|o| o > OVERDUE_WARN_MS)
                || exp_ms.is_none_or(|x| x <= now_ms),
            stats: st.stats.clone(),
        }
    }

    /// When [`NodeIdentityManager::tick`] next has work (Unix milliseconds).
    pub fn next_due_ms(&self) -> Option<i64> {
        self.lock().next_attempt_ms
    }

    /// The current token, while it has not expired.
    pub fn current(&self, now_ms: i64) -> Option<IdentityToken> {
        let st = self.lock();
        st.token
            .as_ref()
            .filter(|t| {
                t.expires_at
                    .is_some_and(|exp| exp.saturating_mul(1000) > now_ms)
            })
            .cloned()
    }

    /// The counters and the risk (see [`NodeIdentityStats`]).
    pub fn stats(&self) -> NodeIdentityStats {
        self.lock().stats.clone()
    }
}
