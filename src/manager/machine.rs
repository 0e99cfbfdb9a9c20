//! The state machine: signing everything, renewing when due, running the
//! token exchanges, persisting, and backing off after failures.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use zeroize::Zeroizing;

use super::slot_of;
use super::{DerivedSecret, IdentityUpdate, RefreshReason, Refreshed};
use super::{EventKind, IdentityManager, IdentityToken, PersistedState, State, TokenExchange};
use crate::claims::Claims;
use crate::error::{Error, Result};
use crate::issue::SignedIdentity;
use crate::model::IssueRequest;
use crate::pop::WorkloadKey;
use crate::verify::decode_unverified;

/// Why `claims` cannot be the WIT bound to `key`, if they cannot: its
/// `cnf.jwk` must be the key's public half, and it must expire (a workload key
/// is never used after its WIT, so a WIT without `exp` is refused).
pub(super) fn binding_problem(claims: &Claims, key: &WorkloadKey) -> Option<String> {
    if claims.confirmation.as_ref() != Some(key.proof_key()) {
        return Some(format!(
            "its cnf.jwk is not the public half of its {} workload key",
            key.algorithm().name()
        ));
    }
    if claims.expires_at.is_none() {
        return Some("it is a WIT without exp".into());
    }
    None
}

/// What [`IdentityManager::run_exchanges`] asks of one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Derive a new secret (replacing any it has).
    Derive,
    /// Refresh the secret it has (derive one when it has none).
    Refresh(RefreshReason),
}

/// The soonest a failed exchange is retried.
const MIN_EXCHANGE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest a failed exchange waits for its retry (a leased secret must
/// be renewed within its TTL once the server answers again).
const MAX_EXCHANGE_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// The soonest an exchange is refreshed again after a refresh (an exchange
/// that asks for a time already past must not make the runner spin).
const MIN_REFRESH_GAP_MS: i64 = 1000;

/// Records when exchange `name` wants its next refresh (never sooner than
/// [`MIN_REFRESH_GAP_MS`] after `now_ms`).
fn set_refresh(at: &mut BTreeMap<String, i64>, name: &str, when: Option<i64>, now_ms: i64) {
    match when {
        Some(t) => at.insert(
            name.to_string(),
            t.max(now_ms.saturating_add(MIN_REFRESH_GAP_MS)),
        ),
        None => at.remove(name),
    };
}

/// One signing's workload keys, per identity (`None` for a bearer one).
type WorkloadKeys = Vec<Option<Arc<WorkloadKey>>>;

impl IdentityManager {
    /// Starts a new allocation: signs every identity at once (announced as
    /// `Initial`) and derives the exchange secrets. Called from inside one of
    /// this manager's own callbacks (its signer, an exchange), on the thread
    /// running them, it fails with `InvalidArgument` and does nothing.
    pub fn start(&self, now_ms: i64) -> Result<()> {
        let Some(_one) = self.renewal() else {
            return Err(super::reentry::refused("IdentityManager", "start"));
        };
        self.refuse_if_ended("start")?;
        {
            let mut st = self.lock();
            st.pending = EventKind::Initial;
            st.next_ms = Some(now_ms);
        }
        self.sign_all(now_ms)
    }

    /// Does whatever is due at `now_ms` (a renewal, a retry after errors, or
    /// an exchange's refresh) and returns when to call again (Unix ms);
    /// `None` when nothing will expire.
    ///
    /// One at a time: a tick called while another (or a start or restore)
    /// is running waits for it, then does only what is still due. A tick
    /// from inside one of this manager's own callbacks (its signer, an
    /// exchange, a watcher of the C ABI), on the thread running them, does
    /// nothing and returns when the next tick is due: the call running the
    /// callback does what is due. (`start` and `restore` from there fail
    /// with `InvalidArgument`; `current`, `secret`, `next_due_ms`, `watch`
    /// and `health` are safe anywhere.)
    pub fn tick(&self, now_ms: i64) -> Option<i64> {
        // Decided and done under the renewal lock: deciding under the state
        // lock alone let two threads both find the renewal due, both sign
        // and both refresh (and release) the same old secret.
        let Some(_one) = self.renewal() else {
            log::debug!(
                "identity manager {}: a tick from inside its own callback does nothing (the running call does what is due)",
                self.inner.alloc_id
            );
            return self.next_due_ms();
        };
        let (sign_due, refresh_due) = {
            let st = self.lock();
            if st.ended {
                return None;
            }
            let sign_due = st.next_ms.is_some_and(|t| now_ms >= t);
            let refresh_due: Vec<_> = self
                .inner
                .parts
                .exchanges
                .iter()
                .filter(|x| st.refresh_at.get(x.name()).is_some_and(|t| now_ms >= *t))
                .map(|x| (x.clone(), Step::Refresh(RefreshReason::Due)))
                .collect();
            (sign_due, refresh_due)
        };
        // A signing refreshes every exchange anyway (as re-signed).
        let done = if sign_due {
            self.sign_all(now_ms)
        } else if !refresh_due.is_empty() {
            self.run_exchanges(&refresh_due, EventKind::Renewed, false, now_ms)
        } else {
            Ok(())
        };
        if let Err(e) = done {
            log::warn!("identities of allocation {}: {e}", self.inner.alloc_id);
        }
        self.next_due_ms()
    }

    pub(super) fn schedule(&self, st: &State, now_ms: i64) -> Option<i64> {
        let j = (
            self.inner.parts.jitter.draw(),
            self.inner.parts.jitter.draw(),
        );
        self.inner
            .parts
            .policy
            .renew_at_ms(st.tokens.values().map(|t| t.expires_at), now_ms, j)
    }

    pub(super) fn announce(&self, st: &State, kind: EventKind) {
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
    pub(super) fn sign_all(&self, now_ms: i64) -> Result<()> {
        let now = now_ms.div_euclid(1000);
        // Keys that did not make it into a stored token (the signer failed,
        // or returned something else) are dropped here, zeroized.
        let signed = self.requests_to_sign().and_then(|(requests, keys)| {
            let signed = self.inner.parts.signer.sign(&requests, now)?;
            self.check_set(signed, &requests, keys)
        });
        let signed = match signed {
            Ok(v) => v,
            Err(e) => {
                let mut st = self.lock();
                st.next_ms = Some(self.back_off(&mut st, now_ms));
                st.sign_error = Some(e.to_string());
                return Err(e);
            }
        };
        let (kind, plan) = {
            let mut st = self.lock();
            // Start and restore set what the next signing announces; every later
            // one is a renewal.
            let kind = st.pending;
            for t in signed {
                st.tokens.insert(t.key.clone(), t);
            }
            st.failures = 0;
            st.sign_error = None;
            st.pending = EventKind::Renewed;
            st.last_kind = kind;
            st.next_ms = self.schedule(&st, now_ms);
            self.announce(&st, kind);
            // On start and restore every exchange derives its secret anew; on
            // renewal each refreshes the one it has (a Vault token is renewed
            // or replaced), and any with a missing or empty secret is repaired.
            let plan: Vec<_> = self
                .inner
                .parts
                .exchanges
                .iter()
                .map(|x| {
                    let has = st
                        .secrets
                        .get(&slot_of(x.as_ref()))
                        .is_some_and(|s| !s.secret.is_empty());
                    let step = if kind == EventKind::Renewed && has {
                        Step::Refresh(RefreshReason::Resigned)
                    } else {
                        Step::Derive
                    };
                    (x.clone(), step)
                })
                .collect();
            (kind, plan)
        };
        // The tokens are in use either way; a failed save is reported (after
        // the exchanges ran), so `start` and `restore` do not claim success
        // for state that would not survive a restart.
        let persisted = self.persist();
        let exchanged = self.run_exchanges(&plan, kind, true, now_ms);
        persisted.and(exchanged)
    }

    /// The requests for one signing and the workload keys they carry: each
    /// proof-bound identity's request gets the public half of a key made now
    /// (a new key for every WIT; the private half never leaves this process);
    /// the others go as configured.
    fn requests_to_sign(&self) -> Result<(Cow<'_, [IssueRequest]>, WorkloadKeys)> {
        let parts = &self.inner.parts;
        let keys = self
            .inner
            .proof_algs
            .iter()
            .map(|alg| {
                alg.map(|alg| WorkloadKey::generate(alg).map(Arc::new))
                    .transpose()
            })
            .collect::<Result<WorkloadKeys>>()?;
        if keys.iter().all(Option::is_none) {
            return Ok((Cow::Borrowed(&parts.requests), keys));
        }
        let requests = parts
            .requests
            .iter()
            .zip(&keys)
            .map(|(r, k)| {
                let mut r = r.clone();
                r.proof_key = k.as_ref().map(|k| k.proof_key().clone());
                r
            })
            .collect();
        Ok((Cow::Owned(requests), keys))
    }

    /// Checks a signer's answer is the whole requested set, in order, each
    /// token what its request (`requests`, as sent) asks for; attaches each
    /// proof-bound identity's workload key to its WIT.
    fn check_set(
        &self,
        signed: Vec<SignedIdentity>,
        requests: &[IssueRequest],
        workload_keys: WorkloadKeys,
    ) -> Result<Vec<IdentityToken>> {
        if signed.len() != requests.len() {
            return Err(Error::invalid(
                "Signer",
                "identities",
                format!(
                    "the signer returned {} identities for {} requests: a partial set is refused",
                    signed.len(),
                    requests.len()
                ),
            ));
        }
        signed
            .into_iter()
            .zip(self.inner.keys.iter().zip(requests))
            .zip(workload_keys)
            .map(|((s, (key, req)), workload_key)| {
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
                let expected = match self.inner.parts.signer.expected_claims(req) {
                    None => None,
                    Some(Ok(e)) => Some(e),
                    Some(Err(e)) => {
                        return Err(not_it(format!("its request cannot be signed: {e}")));
                    }
                };
                if let Some(why) = payload.mismatch(req, expected.as_ref()) {
                    return Err(not_it(why));
                }
                if let Some(why) = workload_key
                    .as_deref()
                    .and_then(|k| binding_problem(&payload, k))
                {
                    return Err(not_it(why));
                }
                Ok(IdentityToken::from_signed(key.clone(), s, workload_key))
            })
            .collect()
    }

    /// Runs each exchange's step of `plan`, then saves, delivers and
    /// releases: every secret announced as `kind` when `tell_all` (start,
    /// restore, a re-signing), else only the secrets that were replaced
    /// (announced as the start or restore that could not deliver them, if one
    /// could not). Replaced secrets are revoked last, once their successors
    /// are saved and delivered. A failed exchange is retried on its own
    /// after a backoff (the identities are not re-signed for it); the first
    /// failure is returned.
    pub(super) fn run_exchanges(
        &self,
        plan: &[(Arc<dyn TokenExchange>, Step)],
        kind: EventKind,
        tell_all: bool,
        now_ms: i64,
    ) -> Result<()> {
        let mut failed = None;
        let mut replaced = Vec::new();
        for (x, step) in plan {
            let name = x.name();
            let slot = slot_of(x.as_ref());
            let (token, old) = {
                let st = self.lock();
                let old = st
                    .secrets
                    .get(&slot)
                    .filter(|s| !s.secret.is_empty())
                    .map(|s| Zeroizing::new(s.secret.clone()));
                let newest = st.tokens.get(x.identity());
                // A refresh needs only the secret (a renewal), so it goes on
                // with the newest token even when signing has been failing;
                // deriving needs a valid one.
                let token = match (step, &old) {
                    (Step::Refresh(_), Some(_)) => newest.cloned(),
                    _ => newest.filter(|t| t.valid_at(now_ms)).cloned(),
                };
                (token, old)
            };
            let Some(token) = token else {
                // No valid identity to exchange: the next signing derives it.
                self.lock().refresh_at.remove(name);
                continue;
            };
            let outcome = match (step, &old) {
                (Step::Refresh(reason), Some(old)) => x.refresh(old, &token, *reason, now_ms),
                _ => x.derive(&token, now_ms).map(Refreshed::Replaced),
            };
            let mut st = self.lock();
            let why = match outcome {
                Ok(Refreshed::Kept { refresh_at_ms }) => {
                    st.exchange_failures.remove(name);
                    st.exchange_errors.remove(name);
                    set_refresh(&mut st.refresh_at, name, refresh_at_ms, now_ms);
                    continue;
                }
                Ok(Refreshed::Renewed { refresh_at_ms }) => {
                    st.exchange_failures.remove(name);
                    st.exchange_errors.remove(name);
                    set_refresh(&mut st.refresh_at, name, refresh_at_ms, now_ms);
                    if let Some(s) = st.secrets.get_mut(&slot) {
                        s.derived_from.clone_from(&token.jwt_id);
                    }
                    continue;
                }
                Ok(Refreshed::Replaced(mut new)) if !new.secret.is_empty() => {
                    st.exchange_failures.remove(name);
                    st.exchange_errors.remove(name);
                    set_refresh(&mut st.refresh_at, name, new.refresh_at_ms, now_ms);
                    let fresh = DerivedSecret {
                        exchange: name.to_string(),
                        identity: x.identity().clone(),
                        secret: std::mem::take(&mut new.secret),
                        derived_from: token.jwt_id.clone(),
                        origin: x.origin(),
                    };
                    // The one it replaces is revoked once this one is saved
                    // (in the same write) and delivered. An exchange that
                    // hands back the secret it had has replaced nothing.
                    let same = old.as_deref().is_some_and(|o| *o == fresh.secret);
                    if let Some(prev) = st.secrets.insert(slot, fresh) {
                        if !same {
                            st.retire(prev);
                        }
                    }
                    replaced.push(name.to_string());
                    continue;
                }
                Ok(_) => "it returned an empty secret".to_string(),
                Err(e) => e.to_string(),
            };
            // A secret that was to be derived anew or confirmed (start,
            // restore) and was not is never handed out; it is held back, not
            // revoked: it may still be in use, and is revoked once a new
            // one has been delivered.
            let hold_back = matches!(step, Step::Derive | Step::Refresh(RefreshReason::Restored));
            if let (true, Some(_)) = (hold_back, old) {
                if let Some(prev) = st.secrets.remove(&slot) {
                    st.retire(prev);
                }
            }
            if kind != EventKind::Renewed {
                // Its first delivery is still this start's or restore's.
                st.undelivered.insert(name.to_string(), kind);
            }
            st.exchange_errors.insert(name.to_string(), why.clone());
            let failures = st.exchange_failures.entry(name.to_string()).or_default();
            *failures = failures.saturating_add(1);
            let delay = self
                .inner
                .parts
                .policy
                .backoff(*failures)
                .clamp(MIN_EXCHANGE_RETRY, MAX_EXCHANGE_RETRY);
            let retry = now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
            st.refresh_at.insert(name.to_string(), retry);
            log::warn!(
                "exchange {name:?} of allocation {}: {why}; retrying in {} s",
                self.inner.alloc_id,
                delay.as_secs()
            );
            failed.get_or_insert((name.to_string(), why));
        }
        let persisted = if plan.is_empty() {
            Ok(())
        } else {
            self.persist()
        };
        // Every consumer is told, whether its secret was reused or derived now.
        let deliveries: Vec<_> = {
            let mut st = self.lock();
            let mut out = Vec::new();
            for x in &self.inner.parts.exchanges {
                let name = x.name();
                if !tell_all && !replaced.iter().any(|r| r == name) {
                    continue;
                }
                let Some(secret) = st
                    .secrets
                    .get(&slot_of(x.as_ref()))
                    .filter(|s| !s.secret.is_empty())
                    .map(|s| Zeroizing::new(s.secret.clone()))
                else {
                    continue;
                };
                let pending = st.undelivered.remove(name);
                let k = if tell_all {
                    kind
                } else {
                    pending.unwrap_or(kind)
                };
                out.push((x.clone(), secret, k));
            }
            out
        };
        for (x, secret, k) in &deliveries {
            x.deliver(secret, *k);
        }
        // Then what they replaced is revoked (saved until it is).
        {
            let mut st = self.lock();
            for (x, secret, _) in &deliveries {
                st.delivered(&slot_of(x.as_ref()), secret);
            }
        }
        self.revoke_due();
        match failed {
            None => persisted,
            Some((exchange, reason)) => Err(Error::TokenExchange {
                exchange,
                alloc_id: self.inner.alloc_id.clone(),
                reason,
            }),
        }
    }

    /// Saves the current state; a failure is logged and returned.
    pub(super) fn persist(&self) -> Result<()> {
        let state = {
            let st = self.lock();
            PersistedState {
                identities: st.tokens.values().cloned().collect(),
                secrets: st.secrets.values().cloned().collect(),
                releasing: st.releasing_saved(),
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

    /// Counts one more failure and returns when to retry (Unix ms): the
    /// policy's exponential backoff from `now_ms`, saturating.
    fn back_off(&self, st: &mut State, now_ms: i64) -> i64 {
        st.failures = st.failures.saturating_add(1);
        let delay = self.inner.parts.policy.backoff(st.failures);
        now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
    }
}
