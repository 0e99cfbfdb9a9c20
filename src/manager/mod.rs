//! The client side: one allocation's identities, kept signed, renewed, persisted
//! and restored, with watchers and token-exchange hooks.
//!
//! An [`IdentityManager`] is a state machine driven by [`IdentityManager::tick`]
//! with the current time; [`Runner`] drives it from a thread with the system
//! clock, and tests drive it with a fake one, never sleeping.
//!
//! Restoring after a restart follows the decision table on
//! [`IdentityManager::restore`] (code in `restore.rs`); signing, renewal,
//! exchanges and backoff are the state machine in `machine.rs`. Times are Unix
//! milliseconds.
//!
//! Proof-bound identities ([`IdentityManagerBuilder::proof_of_possession`]):
//! before every signing the manager makes a fresh workload key (Ed25519 or
//! P-256) and sends only its public half, so each WIT has its own key; the key
//! lives in the [`IdentityToken`] beside its WIT ([`IdentityToken::prove`] mints
//! the proofs), is replaced with it on renewal, and is saved with it in the
//! state file (mode 0600), which restore reuses only when the saved key is the
//! one the WIT's `cnf.jwk` names.

mod db;
mod exchange;
mod health;
mod machine;
mod node;
mod reentry;
mod release;
mod renewal;
mod restore;
mod runner;
mod types;
mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::keyring::{Algorithm, Keyring};
use crate::model::IssueRequest;

pub use db::{FileIdentityDb, IdentityDb, MemoryIdentityDb, PersistedState};
pub use exchange::{Derived, ExchangeError, RefreshReason, Refreshed, TokenExchange};
pub use health::{ExchangeHealth, IdentityHealth, IdentityManagerHealth};
pub use node::{NodeIdentityHealth, NodeIdentityManager, NodeIdentityStats, NodeSigner};
pub use renewal::{Jitter, OsJitter, RenewalPolicy};
pub use runner::Runner;
pub use types::{
    DerivedSecret, EventKind, IdentityId, IdentitySigner, IdentityToken, IdentityUpdate,
    RestoreReport,
};
pub use watch::Watcher;

/// Where an exchange's secret is kept: its name and the identity it
/// consumes. Names are unique among a manager's exchanges (checked at build);
/// the identity is part of the key too, so a secret saved for one identity
/// is never found by an exchange of that name that consumes another (the
/// configuration changed across a restart).
type Slot = (String, IdentityId);

/// The slot of exchange `x`.
fn slot_of(x: &dyn TokenExchange) -> Slot {
    (x.name().to_string(), x.identity().clone())
}

struct State {
    tokens: BTreeMap<IdentityId, IdentityToken>,
    secrets: BTreeMap<Slot, DerivedSecret>,
    /// Per exchange: when it wants its secret refreshed (Unix ms), or a
    /// failed exchange retried.
    refresh_at: BTreeMap<String, i64>,
    /// Per exchange: failures since its last success (its backoff).
    exchange_failures: BTreeMap<String, u32>,
    /// Secrets taken out of use (replaced, or not confirmed at a restore),
    /// saved, and revoked once their slot's successor is delivered
    /// (`release.rs`).
    releasing: Vec<release::Releasing>,
    /// [`IdentityManager::end_allocation`] was called: nothing is signed
    /// any more.
    ended: bool,
    /// Per exchange: the start or restore whose delivery is still owed.
    undelivered: BTreeMap<String, EventKind>,
    /// When to sign next (Unix ms); `None` when nothing expires.
    next_ms: Option<i64>,
    /// The kind the next signing is announced as.
    pending: EventKind,
    failures: u32,
    /// The last signing failure's message; `None` after a success.
    sign_error: Option<String>,
    /// Per exchange: its last failure's message, until it succeeds again.
    exchange_errors: BTreeMap<String, String>,
    watchers: BTreeMap<IdentityId, Vec<Arc<watch::Slot>>>,
    last_kind: EventKind,
}

/// Keeps one allocation's identities signed (restore, renewal, exchanges and
/// proof-bound identities: see [the `manager` module](crate::manager)). Its
/// times are Unix milliseconds.
///
/// ```
/// use std::sync::Arc;
/// use workload_identity::manager::{IdentityId, IdentityManager, MemoryIdentityDb};
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
/// let key = IdentityId::new("server", "default");
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
    keys: Vec<IdentityId>,
    /// Per identity (as `keys`): the workload key algorithm of a proof-bound
    /// one, `None` for a bearer one.
    proof_algs: Vec<Option<Algorithm>>,
    parts: IdentityManagerBuilder,
    state: Mutex<State>,
    /// Held across a whole start, restore or tick (deciding what is due,
    /// signing, the exchanges): two threads ticking at the due time renew
    /// once, and no secret is refreshed or released twice. `state` is
    /// locked only briefly inside it, never the other way round.
    renewing: Mutex<()>,
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
    signer: Arc<dyn IdentitySigner>,
    db: Arc<dyn IdentityDb>,
    keyring: Keyring,
    exchanges: Vec<Arc<dyn TokenExchange>>,
    policy: RenewalPolicy,
    jitter: Arc<dyn Jitter>,
    proof: Vec<(IdentityId, Algorithm)>,
}

impl IdentityManagerBuilder {
    /// Makes `identity` proof-bound: a WIMSE workload identity token (WIT)
    /// bound to a workload key of `alg` (`EdDsa` or `Es256`), a fresh one made
    /// here for every WIT. The signer must be able to sign WITs (an
    /// [`Issuer`](crate::Issuer) with a trust domain). Checked by
    /// [`build`](IdentityManagerBuilder::build): the identity must be
    /// requested, named once, and `alg` one of the two.
    pub fn proof_of_possession(mut self, identity: IdentityId, alg: Algorithm) -> Self {
        self.proof.push((identity, alg));
        self
    }
    /// Adds a token-exchange hook. Each needs a name of its own (checked by
    /// [`build`](IdentityManagerBuilder::build)): its secret is saved and
    /// found under it.
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
    /// with distinct (workload, identity) pairs and no `proof_key` (the manager
    /// makes workload keys itself); every exchange must consume one of them
    /// and have a name no other exchange has; every proof-bound identity
    /// must be one of them, named once, with an `EdDsa` or `Es256` key.
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
            let key = IdentityId::of(r);
            if keys.contains(&key) {
                return Err(bad(format!("identity {key} is requested twice")));
            }
            if r.proof_key.is_some() {
                // A key given here would be one the manager cannot prove with,
                // and the same for every WIT.
                return Err(bad(format!(
                    "the request for identity {key} carries a ProofKey: the manager makes a fresh workload key for every WIT itself; ask for one with IdentityManagerBuilder::proof_of_possession"
                )));
            }
            keys.push(key);
        }
        let mut proof_algs = vec![None; keys.len()];
        for (identity, alg) in &self.proof {
            let bad_pop =
                |why: String| Error::invalid("IdentityManager", "proof_of_possession", why);
            if !matches!(alg, Algorithm::EdDsa | Algorithm::Es256) {
                return Err(bad_pop(format!(
                    "identity {identity}: a workload key cannot be {}; expected EdDSA or ES256",
                    alg.name()
                )));
            }
            let Some(slot) = keys
                .iter()
                .zip(proof_algs.iter_mut())
                .find_map(|(k, slot)| (k == identity).then_some(slot))
            else {
                return Err(bad_pop(format!("identity {identity} is not requested")));
            };
            if slot.replace(*alg).is_some() {
                return Err(bad_pop(format!(
                    "identity {identity} is made proof-bound twice"
                )));
            }
        }
        for (i, x) in self.exchanges.iter().enumerate() {
            if !keys.contains(x.identity()) {
                return Err(bad(format!(
                    "exchange {:?} consumes identity {}, which is not requested",
                    x.name(),
                    x.identity()
                )));
            }
            // One name, one saved secret: two exchanges sharing a name
            // would take, refresh and revoke each other's secrets (two
            // tasks' Vault logins left at the default name `vault`).
            if let Some(first) = self.exchanges[..i].iter().find(|y| y.name() == x.name()) {
                return Err(Error::invalid(
                    "IdentityManager",
                    "exchanges",
                    format!(
                        "two exchanges are named {:?} (for identity {} and for identity {}): each exchange's secret is saved under its name, so each needs its own name; give each exchange its own name (a VaultLogin's with VaultLoginBuilder::name, e.g. \"vault-{}\")",
                        x.name(),
                        first.identity(),
                        x.identity(),
                        x.identity().workload
                    ),
                ));
            }
        }
        Ok(IdentityManager {
            inner: Arc::new(Inner {
                alloc_id,
                keys,
                proof_algs,
                parts: self,
                state: Mutex::new(State {
                    tokens: BTreeMap::new(),
                    secrets: BTreeMap::new(),
                    refresh_at: BTreeMap::new(),
                    exchange_failures: BTreeMap::new(),
                    releasing: Vec::new(),
                    ended: false,
                    undelivered: BTreeMap::new(),
                    next_ms: None,
                    pending: EventKind::Initial,
                    failures: 0,
                    sign_error: None,
                    exchange_errors: BTreeMap::new(),
                    watchers: BTreeMap::new(),
                    last_kind: EventKind::Initial,
                }),
                renewing: Mutex::new(()),
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
        signer: Arc<dyn IdentitySigner>,
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
            proof: Vec::new(),
        }
    }

    /// The renewal lock (see `Inner::renewing`); `None` when this thread
    /// holds it already: a call from inside one of the manager's callbacks.
    fn renewal(&self) -> Option<reentry::Renewal<'_>> {
        reentry::enter(&self.inner.renewing)
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
    pub fn watch(&self, key: &IdentityId) -> Result<Watcher> {
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
    pub fn current(&self, key: &IdentityId, now_ms: i64) -> Option<IdentityToken> {
        self.lock()
            .tokens
            .get(key)
            .filter(|t| t.valid_at(now_ms))
            .cloned()
    }

    /// The secret exchange `exchange` (its name) derived from the identity it
    /// consumes, if any.
    pub fn secret(&self, exchange: &str) -> Option<DerivedSecret> {
        let x = self
            .inner
            .parts
            .exchanges
            .iter()
            .find(|x| x.name() == exchange)?;
        self.lock().secrets.get(&slot_of(x.as_ref())).cloned()
    }

    /// When the next signing, or an exchange's refresh or retry, is due
    /// (Unix ms); `None` when nothing expires.
    pub fn next_due_ms(&self) -> Option<i64> {
        let st = self.lock();
        st.refresh_at.values().copied().chain(st.next_ms).min()
    }
}
