//! The state machine: signing everything, renewing when due, running the
//! token exchanges, persisting, and backing off after failures.

use std::borrow::Cow;
use std::sync::Arc;

use super::{DerivedSecret, IdentityUpdate};
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

/// One signing's workload keys, per identity (`None` for a bearer one).
type WorkloadKeys = Vec<Option<Arc<WorkloadKey>>>;

impl IdentityManager {
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
                if let Some(why) = payload.mismatch(req) {
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

    pub(super) fn run_exchanges(
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
                let retry = self.back_off(&mut st, now_ms);
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

    /// Counts one more failure and returns when to retry (Unix ms): the
    /// policy's exponential backoff from `now_ms`, saturating.
    fn back_off(&self, st: &mut State, now_ms: i64) -> i64 {
        st.failures = st.failures.saturating_add(1);
        let delay = self.inner.parts.policy.backoff(st.failures);
        now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
    }
}
