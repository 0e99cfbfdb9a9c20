//! Restoring after a restart.
//!
//! The decision table is on [`IdentityManager::restore`].

use std::borrow::Cow;
use std::sync::Arc;

use super::EventKind;
use super::machine::binding_problem;
use super::{IdentityId, IdentityManager, PersistedState, RestoreReport, State, TokenExchange};
use crate::error::Result;
use crate::keyring::Algorithm;
use crate::model::IssueRequest;
use crate::verify::check_signature;

impl IdentityManager {
    /// Restores after a restart: saved tokens are reused only when every one
    /// still verifies, is the very identity its request asks for, matches its
    /// saved record and is outside its renewal window; otherwise everything is
    /// re-signed.
    ///
    /// # Decision table
    ///
    /// | saved state | decision | watchers told | exchange secrets |
    /// |---|---|---|---|
    /// | missing | re-sign all | `Restored` | derived anew, delivered |
    /// | unreadable (corrupt, truncated, foreign) | re-sign all (reason logged) | `Restored` | derived anew, delivered |
    /// | identities differ from the requested set | re-sign all | `Restored` | derived anew, delivered |
    /// | any token no longer verifies (key removed or deprecated, bad signature) | re-sign all | `Restored` | derived anew, delivered |
    /// | any token's own claims are not what its request signs (another allocation, task or service, identity, `sub` or audience: a copied state file) | re-sign all | `Restored` | derived anew, delivered |
    /// | any saved record's `jti`, `iat` or `exp` differ from its token's | re-sign all | `Restored` | derived anew, delivered |
    /// | a proof-bound identity's saved workload key missing, of another algorithm than configured, or not the key its WIT's `cnf.jwk` names (a swapped key); a bearer identity's token saved with a key | re-sign all (fresh keys) | `Restored` | derived anew, delivered |
    /// | any token expired or inside its renewal window | re-sign all | `Restored` | derived anew, delivered |
    /// | every token verifies and is outside its renewal window | reuse all | `Restored` | reused if non-empty and derived from the token in use, else derived anew; delivered either way |
    ///
    /// A token's renewal window starts half-way through its lifetime
    /// (`iat + (exp - iat) / 2`); tokens without `exp` are never renewed.
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
    /// audience: a state file copied from another allocation is never reused;
    /// for a proof-bound identity a WIT whose `cnf.jwk` is its saved workload
    /// key, of the configured algorithm), matching its saved record (`jti`,
    /// `iat`, `exp`), and outside its renewal window.
    fn reusable(
        &self,
        saved: PersistedState,
        now_ms: i64,
    ) -> std::result::Result<PersistedState, String> {
        let mut have: Vec<&IdentityId> = saved.identities.iter().map(|t| &t.key).collect();
        have.sort();
        let mut want: Vec<&IdentityId> = self.inner.keys.iter().collect();
        want.sort();
        if have != want {
            return Err("saved identities differ from the requested ones".into());
        }
        for t in &saved.identities {
            let claims = check_signature(&self.inner.parts.keyring, &t.token)
                .map_err(|e| format!("identity {} no longer verifies: {e}", t.key))?;
            let (req, alg) = self
                .request_of(&t.key)
                .ok_or_else(|| format!("identity {} is not requested", t.key))?;
            // What the request was when this token was signed: with the
            // public half of its workload key, for a proof-bound identity.
            let req = match (alg, t.workload_key.as_deref()) {
                (None, None) => Cow::Borrowed(req),
                (None, Some(_)) => {
                    return Err(format!(
                        "identity {} is a bearer identity, but its saved token carries a workload key",
                        t.key
                    ));
                }
                (Some(_), None) => {
                    return Err(format!(
                        "identity {} is proof-bound, but its saved token has no workload key",
                        t.key
                    ));
                }
                (Some(alg), Some(k)) => {
                    if k.algorithm() != alg {
                        return Err(format!(
                            "the saved workload key of identity {} is {}, but {} is configured",
                            t.key,
                            k.algorithm().name(),
                            alg.name()
                        ));
                    }
                    if let Some(why) = binding_problem(&claims, k) {
                        return Err(format!(
                            "the saved WIT of identity {} is not bound to its saved workload key: {why}",
                            t.key
                        ));
                    }
                    let mut req = req.clone();
                    req.proof_key = Some(k.proof_key().clone());
                    Cow::Owned(req)
                }
            };
            if let Some(why) = claims.mismatch(&req) {
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

    /// The request of identity `key`, and its workload key algorithm if it is
    /// proof-bound.
    fn request_of(&self, key: &IdentityId) -> Option<(&IssueRequest, Option<Algorithm>)> {
        let i = self.inner.keys.iter().position(|k| k == key)?;
        let req = self.inner.parts.requests.get(i)?;
        Some((req, self.inner.proof_algs.get(i).copied().flatten()))
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
}
