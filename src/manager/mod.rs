//! The client side: one allocation's identities, kept signed, renewed, persisted
//! and restored, with watchers and token-exchange hooks.
//!
//! An [`IdentityManager`] is a state machine driven by [`IdentityManager::tick`]
//! with the current time; [`Runner`] drives it from a thread with the system
//! clock, and tests drive it with a fake one, never sleeping.
//!
//! # Restore decision table
//!
//! | saved state | decision | watchers told | exchange secrets |
//! |---|---|---|---|
//! | missing | re-sign all | `Restored` | derived anew, delivered |
//! | unreadable (corrupt, truncated, foreign) | re-sign all (reason logged) | `Restored` | derived anew, delivered |
//! | identities differ from the requested set | re-sign all | `Restored` | derived anew, delivered |
//! | any token no longer verifies (key removed or deprecated, bad signature) | re-sign all | `Restored` | derived anew, delivered |
//! | any token expired or inside its renewal window | re-sign all | `Restored` | derived anew, delivered |
//! | every token verifies and is outside its renewal window | reuse all | `Restored` | reused if non-empty and derived from the token in use, else derived anew; delivered either way |
//!
//! A token's renewal window starts half-way through its lifetime
//! (`iat + (exp - iat) / 2`); tokens without `exp` are never renewed.

mod db;
mod exchange;
mod renewal;
mod runner;
mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::issue::{Issuer, SignedIdentity};
use crate::keyring::Keyring;
use crate::model::IssueRequest;
use crate::verify::{check_signature, decode_unverified};

pub use db::{FileIdentityDb, IdentityDb, MemoryIdentityDb, PersistedState};
pub use exchange::{ExchangeError, TokenExchange};
pub use renewal::{Jitter, OsJitter, RenewalPolicy};
pub use runner::Runner;
pub use watch::Watcher;

/// Which identity: its task or service, and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityKey {
    /// The task or service name.
    pub workload: String,
    /// The identity's name.
    pub name: String,
}

impl IdentityKey {
    /// The key for `name` of `workload`.
    pub fn new(workload: &str, name: &str) -> IdentityKey {
        IdentityKey {
            workload: workload.to_string(),
            name: name.to_string(),
        }
    }

    fn of(req: &IssueRequest) -> IdentityKey {
        let workload = req
            .workload()
            .map(|w| w.name().to_string())
            .unwrap_or_default();
        IdentityKey::new(&workload, &req.identity.name)
    }
}

impl fmt::Display for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.workload, self.name)
    }
}

/// A signed identity as the manager keeps it. `Debug` redacts the token.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityToken {
    /// Which identity.
    pub key: IdentityKey,
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
    fn from_signed(key: IdentityKey, s: SignedIdentity) -> IdentityToken {
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
    pub identity: IdentityKey,
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
pub trait Signer: Send + Sync {
    /// Signs every request at `now` (Unix seconds).
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>>;
}

impl Signer for Issuer {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>> {
        requests.iter().map(|r| self.issue(r, now)).collect()
    }
}

/// A clock in Unix milliseconds.
pub trait Clock: Send + Sync {
    /// Now.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock that moves only when told to (for tests and simulations).
#[derive(Debug, Default)]
pub struct FakeClock(AtomicI64);

impl FakeClock {
    /// A clock at `now_ms`.
    pub fn new(now_ms: i64) -> FakeClock {
        FakeClock(AtomicI64::new(now_ms))
    }
    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
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

struct State {
    tokens: BTreeMap<IdentityKey, IdentityToken>,
    secrets: BTreeMap<String, DerivedSecret>,
    /// When to sign next (Unix ms); `None` when nothing expires.
    next_ms: Option<i64>,
    /// The kind the next signing is announced as.
    pending: EventKind,
    failures: u32,
    watchers: BTreeMap<IdentityKey, Vec<Arc<watch::Slot>>>,
    last_kind: EventKind,
}

/// Keeps one allocation's identities signed (see the module docs). Its times
/// are Unix milliseconds.
///
/// ```
/// use std::sync::Arc;
/// use workload_identity::manager::{IdentityKey, IdentityManager, MemoryIdentityDb};
/// use workload_identity::model::{IssueRequest, WorkloadIdentity};
/// use workload_identity::{Issuer, Keyring};
///
/// let now_ms = 1_700_000_000_000;
/// let keyring = Keyring::new();
/// keyring.rotate(now_ms / 1000)?;
/// let mut req = IssueRequest::default();
/// req.region = "global".into();
/// req.allocation.id = "alloc-1".into();
/// req.allocation.namespace = "default".into();
/// req.allocation.job_id = "web".into();
/// req.allocation.task_group = "g".into();
/// req.task = "server".into();
/// req.identity = WorkloadIdentity {
///     name: "default".into(),
///     audience: vec!["vault.io".into()],
///     ttl: std::time::Duration::from_secs(600).into(),
///     ..WorkloadIdentity::default()
/// };
/// let db = Arc::new(MemoryIdentityDb::default());
/// let manager = IdentityManager::builder(
///     vec![req],
///     Arc::new(Issuer::new(keyring.clone())),
///     db.clone(),
///     keyring,
/// )
/// .build()?;
/// manager.start(now_ms)?;
/// let key = IdentityKey::new("server", "default");
/// let token = manager.current(&key, now_ms).expect("signed at start");
/// // Renewal is due half-way through the token's life (plus jitter).
/// let due = manager.next_due_ms().unwrap();
/// assert!(due >= now_ms + 300_000 && due <= now_ms + 330_000);
/// manager.tick(due); // renews
/// assert_ne!(manager.current(&key, due).unwrap().jwt_id, token.jwt_id);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct IdentityManager {
    inner: Arc<Inner>,
}

struct Inner {
    alloc_id: String,
    keys: Vec<IdentityKey>,
    parts: IdentityManagerBuilder,
    state: Mutex<State>,
}

impl fmt::Debug for IdentityManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityManager")
            .field("alloc_id", &self.inner.alloc_id)
            .field("identities", &self.inner.keys)
            .finish()
    }
}

/// Builds an [`IdentityManager`].
pub struct IdentityManagerBuilder {
    requests: Vec<IssueRequest>,
    signer: Arc<dyn Signer>,
    db: Arc<dyn IdentityDb>,
    keyring: Keyring,
    exchanges: Vec<Arc<dyn TokenExchange>>,
    policy: RenewalPolicy,
    jitter: Arc<dyn Jitter>,
}

impl IdentityManagerBuilder {
    /// Adds a token-exchange hook.
    pub fn exchange(mut self, hook: Arc<dyn TokenExchange>) -> Self {
        self.exchanges.push(hook);
        self
    }
    /// Sets the renewal policy.
    pub fn policy(mut self, policy: RenewalPolicy) -> Self {
        self.policy = policy;
        self
    }
    /// Sets the jitter source (tests use a fixed one).
    pub fn jitter(mut self, jitter: Arc<dyn Jitter>) -> Self {
        self.jitter = jitter;
        self
    }
    /// The manager. Every request must be valid and for the same allocation,
    /// with distinct (workload, identity) pairs; every exchange must consume one
    /// of them.
    pub fn build(self) -> Result<IdentityManager> {
        let bad = |why: String| Error::invalid("IdentityManager", "requests", why);
        let first = self
            .requests
            .first()
            .ok_or_else(|| bad("no identities requested".into()))?;
        let alloc_id = first.allocation.id.clone();
        let mut keys = Vec::new();
        for r in &self.requests {
            r.validate()?;
            if r.allocation.id != alloc_id {
                return Err(bad(format!(
                    "all requests must be for one allocation: {alloc_id} and {}",
                    r.allocation.id
                )));
            }
            let key = IdentityKey::of(r);
            if keys.contains(&key) {
                return Err(bad(format!("identity {key} is requested twice")));
            }
            keys.push(key);
        }
        for x in &self.exchanges {
            if !keys.contains(x.identity()) {
                return Err(bad(format!(
                    "exchange {:?} consumes identity {}, which is not requested",
                    x.name(),
                    x.identity()
                )));
            }
        }
        Ok(IdentityManager {
            inner: Arc::new(Inner {
                alloc_id,
                keys,
                parts: self,
                state: Mutex::new(State {
                    tokens: BTreeMap::new(),
                    secrets: BTreeMap::new(),
                    next_ms: None,
                    pending: EventKind::Initial,
                    failures: 0,
                    watchers: BTreeMap::new(),
                    last_kind: EventKind::Initial,
                }),
            }),
        })
    }
}

impl IdentityManager {
    /// Starts building a manager for the identities `requests` ask for (one
    /// allocation), signed by `signer`, persisted in `db`; `keyring` is used on
    /// restore to check that saved tokens still verify.
    pub fn builder(
        requests: Vec<IssueRequest>,
        signer: Arc<dyn Signer>,
        db: Arc<dyn IdentityDb>,
        keyring: Keyring,
    ) -> IdentityManagerBuilder {
        IdentityManagerBuilder {
            requests,
            signer,
            db,
            keyring,
            exchanges: Vec::new(),
            policy: RenewalPolicy::default(),
            jitter: Arc::new(OsJitter),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The allocation.
    pub fn alloc_id(&self) -> &str {
        &self.inner.alloc_id
    }

    /// A new watcher of `key`. It receives the current token at once if there is
    /// one, then every change, coalesced to the newest.
    pub fn watch(&self, key: &IdentityKey) -> Result<Watcher> {
        if !self.inner.keys.contains(key) {
            return Err(Error::invalid(
                "IdentityManager",
                "key",
                format!("identity {key} is not managed here"),
            ));
        }
        let slot = Arc::new(watch::Slot::default());
        let mut st = self.lock();
        if let Some(t) = st.tokens.get(key) {
            slot.publish(IdentityUpdate {
                token: t.clone(),
                kind: st.last_kind,
            });
        }
        st.watchers
            .entry(key.clone())
            .or_default()
            .push(slot.clone());
        Ok(Watcher { slot })
    }

    /// The token of `key` if it is still valid at `now_ms` (never an expired one).
    pub fn current(&self, key: &IdentityKey, now_ms: i64) -> Option<IdentityToken> {
        self.lock()
            .tokens
            .get(key)
            .filter(|t| t.valid_at(now_ms))
            .cloned()
    }

    /// The secret exchange `name` derived, if any.
    pub fn secret(&self, exchange: &str) -> Option<DerivedSecret> {
        self.lock().secrets.get(exchange).cloned()
    }

    /// When the next signing is due (Unix ms); `None` when nothing expires.
    pub fn next_due_ms(&self) -> Option<i64> {
        self.lock().next_ms
    }

    /// Starts a new allocation: signs every identity at once (announced as
    /// `Initial`) and derives the exchange secrets.
    pub fn start(&self, now_ms: i64) -> Result<()> {
        {
            let mut st = self.lock();
            st.pending = EventKind::Initial;
            st.next_ms = Some(now_ms);
        }
        self.sign_all(now_ms)
    }

    /// Restores after a restart (see the decision table in the module docs).
    /// On error (the signer or an exchange failing) the manager keeps retrying
    /// from [`IdentityManager::tick`].
    pub fn restore(&self, now_ms: i64) -> Result<RestoreReport> {
        let saved = match self.inner.parts.db.load(&self.inner.alloc_id) {
            Ok(Some(saved)) => Ok(saved),
            Ok(None) => Err("no saved state".to_string()),
            Err(e) => Err(format!("saved state unreadable: {e}")),
        };
        let verdict = saved.and_then(|s| self.reusable(s, now_ms));
        match verdict {
            Ok(saved) => {
                let rederived = {
                    let mut st = self.lock();
                    for t in saved.identities {
                        st.tokens.insert(t.key.clone(), t);
                    }
                    for s in saved.secrets {
                        st.secrets.insert(s.exchange.clone(), s);
                    }
                    st.failures = 0;
                    st.last_kind = EventKind::Restored;
                    st.next_ms = self.schedule(&st, now_ms);
                    self.announce(&st, EventKind::Restored);
                    self.stale_exchanges(&st)
                };
                log::debug!(
                    "restored allocation {}: saved identities reused",
                    self.inner.alloc_id
                );
                self.run_exchanges(&rederived, EventKind::Restored, now_ms)?;
                Ok(RestoreReport {
                    reused: true,
                    reason: String::new(),
                    rederived: rederived.iter().map(|x| x.name().to_string()).collect(),
                })
            }
            Err(reason) => {
                log::info!(
                    "restoring allocation {}: re-signing ({reason})",
                    self.inner.alloc_id
                );
                {
                    let mut st = self.lock();
                    st.pending = EventKind::Restored;
                    st.next_ms = Some(now_ms);
                }
                self.sign_all(now_ms)?;
                Ok(RestoreReport {
                    reused: false,
                    reason,
                    rederived: self
                        .inner
                        .parts
                        .exchanges
                        .iter()
                        .map(|x| x.name().to_string())
                        .collect(),
                })
            }
        }
    }

    /// Saved state is reusable only when it holds exactly the requested
    /// identities, each still verifying against the keyring, carrying the claims
    /// signing its request would give (allocation, task or service, `sub`,
    /// audience: a state file copied from another allocation is never reused),
    /// matching its saved record (`jti`, `iat`, `exp`), and outside its renewal
    /// window.
    fn reusable(
        &self,
        saved: PersistedState,
        now_ms: i64,
    ) -> std::result::Result<PersistedState, String> {
        let mut have: Vec<&IdentityKey> = saved.identities.iter().map(|t| &t.key).collect();
        have.sort();
        let mut want: Vec<&IdentityKey> = self.inner.keys.iter().collect();
        want.sort();
        if have != want {
            return Err("saved identities differ from the requested ones".into());
        }
        for t in &saved.identities {
            let claims = check_signature(&self.inner.parts.keyring, &t.token)
                .map_err(|e| format!("identity {} no longer verifies: {e}", t.key))?;
            let req = self
                .request_of(&t.key)
                .ok_or_else(|| format!("identity {} is not requested", t.key))?;
            if let Some(why) = claims.mismatch(req) {
                return Err(format!(
                    "the saved token of identity {} is not this identity's: {why}",
                    t.key
                ));
            }
            if claims.jwt_id != t.jwt_id
                || claims.expires_at != t.expires_at
                || claims.issued_at != Some(t.issued_at)
            {
                return Err(format!(
                    "identity {} does not match its saved record (jti, iat or exp differ from the token's)",
                    t.key
                ));
            }
            if let Some(start) = t.renewal_window_start() {
                if now_ms >= start.saturating_mul(1000) {
                    return Err(format!("identity {} is expired or due for renewal", t.key));
                }
            }
        }
        Ok(saved)
    }

    /// The request of identity `key`.
    fn request_of(&self, key: &IdentityKey) -> Option<&IssueRequest> {
        self.inner
            .keys
            .iter()
            .position(|k| k == key)
            .and_then(|i| self.inner.parts.requests.get(i))
    }

    /// Exchanges whose saved secret cannot be reused: missing, empty, or
    /// derived from another token than the one in use.
    fn stale_exchanges(&self, st: &State) -> Vec<Arc<dyn TokenExchange>> {
        self.inner
            .parts
            .exchanges
            .iter()
            .filter(|x| {
                let token = st.tokens.get(x.identity());
                match (st.secrets.get(x.name()), token) {
                    (Some(s), Some(t)) => s.secret.is_empty() || s.derived_from != t.jwt_id,
                    _ => true,
                }
            })
            .cloned()
            .collect()
    }

    /// Does whatever is due at `now_ms` (a renewal, or a retry after errors) and
    /// returns when to call again (Unix ms); `None` when nothing will expire.
    pub fn tick(&self, now_ms: i64) -> Option<i64> {
        let due = self.lock().next_ms.is_some_and(|t| now_ms >= t);
        if due {
            if let Err(e) = self.sign_all(now_ms) {
                log::warn!("identities of allocation {}: {e}", self.inner.alloc_id);
            }
        }
        self.lock().next_ms
    }

    fn schedule(&self, st: &State, now_ms: i64) -> Option<i64> {
        let j = (
            self.inner.parts.jitter.draw(),
            self.inner.parts.jitter.draw(),
        );
        self.inner
            .parts
            .policy
            .renew_at_ms(st.tokens.values().map(|t| t.expires_at), now_ms, j)
    }

    fn announce(&self, st: &State, kind: EventKind) {
        for (key, slots) in &st.watchers {
            if let Some(t) = st.tokens.get(key) {
                for s in slots {
                    s.publish(IdentityUpdate {
                        token: t.clone(),
                        kind,
                    });
                }
            }
        }
    }

    /// Signs every identity; on success stores, persists, announces and runs the
    /// exchanges that need it; on failure backs off and keeps the current tokens.
    fn sign_all(&self, now_ms: i64) -> Result<()> {
        let now = now_ms.div_euclid(1000);
        let signed = self
            .inner
            .parts
            .signer
            .sign(&self.inner.parts.requests, now)
            .and_then(|v| self.check_set(v));
        let signed = match signed {
            Ok(v) => v,
            Err(e) => {
                let mut st = self.lock();
                st.failures = st.failures.saturating_add(1);
                let delay = self.inner.parts.policy.backoff(st.failures);
                st.next_ms = Some(
                    now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
                );
                return Err(e);
            }
        };
        let (kind, stale) = {
            let mut st = self.lock();
            // Start and restore set what the next signing announces; every later
            // one is a renewal.
            let kind = st.pending;
            for t in signed {
                st.tokens.insert(t.key.clone(), t);
            }
            st.failures = 0;
            st.pending = EventKind::Renewed;
            st.last_kind = kind;
            st.next_ms = self.schedule(&st, now_ms);
            self.announce(&st, kind);
            // On start and restore every exchange runs; on renewal none needs to
            // (their secrets live on their own), but any with a missing or empty
            // secret is repaired.
            let stale = if kind == EventKind::Renewed {
                self.inner
                    .parts
                    .exchanges
                    .iter()
                    .filter(|x| st.secrets.get(x.name()).is_none_or(|s| s.secret.is_empty()))
                    .cloned()
                    .collect()
            } else {
                self.inner.parts.exchanges.clone()
            };
            (kind, stale)
        };
        // The tokens are in use either way; a failed save is reported (after
        // the exchanges ran), so `start` and `restore` do not claim success
        // for state that would not survive a restart.
        let persisted = self.persist();
        let exchanged = self.run_exchanges(&stale, kind, now_ms);
        persisted.and(exchanged)
    }

    /// Checks a signer's answer is the whole requested set, in order.
    fn check_set(&self, signed: Vec<SignedIdentity>) -> Result<Vec<IdentityToken>> {
        if signed.len() != self.inner.parts.requests.len() {
            return Err(Error::invalid(
                "Signer",
                "identities",
                format!(
                    "the signer returned {} identities for {} requests: a partial set is refused",
                    signed.len(),
                    self.inner.parts.requests.len()
                ),
            ));
        }
        signed
            .into_iter()
            .zip(self.inner.keys.iter().zip(&self.inner.parts.requests))
            .map(|(s, (key, req))| {
                let not_it = |why: String| {
                    Error::invalid(
                        "Signer",
                        "identities",
                        format!(
                            "the signer returned a token that is not identity {key} of {}: {why}",
                            self.inner.alloc_id
                        ),
                    )
                };
                // The token's own payload is what consumers see: it must be what
                // the signer reports, and what the request asks for.
                let payload = decode_unverified(&s.token)
                    .map_err(|e| not_it(format!("its token cannot be read: {e}")))?;
                if payload != s.claims {
                    return Err(not_it(
                        "the claims it reports differ from its token's".into(),
                    ));
                }
                if let Some(why) = payload.mismatch(req) {
                    return Err(not_it(why));
                }
                Ok(IdentityToken::from_signed(key.clone(), s))
            })
            .collect()
    }

    fn run_exchanges(
        &self,
        hooks: &[Arc<dyn TokenExchange>],
        kind: EventKind,
        now_ms: i64,
    ) -> Result<()> {
        let mut failed = None;
        for x in hooks {
            let token = match self.current(x.identity(), now_ms) {
                Some(t) => t,
                None => continue,
            };
            match x.exchange(&token) {
                Ok(secret) if !secret.is_empty() => {
                    self.lock().secrets.insert(
                        x.name().to_string(),
                        DerivedSecret {
                            exchange: x.name().to_string(),
                            identity: x.identity().clone(),
                            secret,
                            derived_from: token.jwt_id.clone(),
                        },
                    );
                }
                Ok(_) => {
                    failed.get_or_insert((
                        x.name().to_string(),
                        "it returned an empty secret".into(),
                    ));
                }
                Err(e) => {
                    failed.get_or_insert((x.name().to_string(), e.to_string()));
                }
            }
        }
        let persisted = if hooks.is_empty() {
            Ok(())
        } else {
            self.persist()
        };
        // Every consumer is told, whether its secret was reused or derived now.
        let secrets = self.lock().secrets.clone();
        for x in &self.inner.parts.exchanges {
            if let Some(s) = secrets.get(x.name()).filter(|s| !s.secret.is_empty()) {
                x.deliver(&s.secret, kind);
            }
        }
        match failed {
            None => persisted,
            Some((exchange, why)) => {
                let mut st = self.lock();
                st.failures = st.failures.saturating_add(1);
                let retry = now_ms.saturating_add(
                    i64::try_from(self.inner.parts.policy.backoff(st.failures).as_millis())
                        .unwrap_or(i64::MAX),
                );
                st.next_ms = Some(st.next_ms.map_or(retry, |n| n.min(retry)));
                Err(Error::TokenExchange {
                    exchange,
                    alloc_id: self.inner.alloc_id.clone(),
                    reason: why,
                })
            }
        }
    }

    /// Saves the current state; a failure is logged and returned.
    fn persist(&self) -> Result<()> {
        let state = {
            let st = self.lock();
            PersistedState {
                identities: st.tokens.values().cloned().collect(),
                secrets: st.secrets.values().cloned().collect(),
            }
        };
        let saved = self.inner.parts.db.store(&self.inner.alloc_id, &state);
        if let Err(e) = &saved {
            log::warn!(
                "saving identities of allocation {}: {e}",
                self.inner.alloc_id
            );
        }
        saved
    }
}
