//! Restoring after a restart.
//!
//! The decision table is on [`IdentityManager::restore`].

use std::borrow::Cow;
use std::sync::Arc;

use super::machine::{Step, binding_problem};
use super::{DerivedSecret, EventKind, RefreshReason, slot_of};
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
    /// | every token verifies and is outside its renewal window | reuse all | `Restored` | reused if non-empty, derived from the token in use and confirmed by its exchange ([`RefreshReason::Restored`]: a Vault login's `lookup-self`), else derived anew; delivered either way, never one its exchange could not confirm |
    ///
    /// Saved secrets that are not reused are revoked
    /// ([`TokenExchange::revoke`]: a Vault login's `revoke-self`) once
    /// their successors are delivered, and kept in the saved state until
    /// that is done; so are revocations an earlier process saved and did
    /// not finish (killed first). A secret minted at another server than
    /// its exchange talks to now is dropped, never sent there.
    ///
    /// A token's renewal window starts half-way through its lifetime
    /// (`iat + (exp - iat) / 2`); tokens without `exp` are never renewed.
    /// On error (the signer or an exchange failing) the manager keeps retrying
    /// from [`IdentityManager::tick`]. From inside one of this manager's own
    /// callbacks: `InvalidArgument`, as [`IdentityManager::start`].
    pub fn restore(&self, now_ms: i64) -> Result<RestoreReport> {
        let Some(_one) = self.renewal() else {
            return Err(super::reentry::refused("IdentityManager", "restore"));
        };
        self.refuse_if_ended("restore")?;
        let saved = match self.inner.parts.db.load(&self.inner.alloc_id) {
            Ok(Some(saved)) => Ok(saved),
            Ok(None) => Err("no saved state".to_string()),
            Err(e) => Err(format!("saved state unreadable: {e}")),
        };
        // Secrets saved beside identities that are not reused are released
        // once new ones replace them (a Vault token from before the restart
        // is revoked, not left to live out its TTL).
        let saved_secrets: Vec<DerivedSecret> = saved
            .as_ref()
            .map(|s| s.secrets.iter().chain(&s.releasing).cloned().collect())
            .unwrap_or_default();
        let verdict = saved.and_then(|s| self.reusable(s, now_ms));
        match verdict {
            Ok(saved) => {
                let plan = {
                    let mut st = self.lock();
                    for t in saved.identities {
                        st.tokens.insert(t.key.clone(), t);
                    }
                    for s in saved.secrets {
                        let slot = (s.exchange.clone(), s.identity.clone());
                        let origin = self.exchange_of(&slot).map(|x| x.origin());
                        if origin.as_ref() == Some(&s.origin) {
                            st.secrets.insert(slot, s);
                        } else if let Some(origin) = origin {
                            // Minted elsewhere (another server, mount,
                            // role or auth method; or saved before origins
                            // were): never sent to the server configured
                            // now. Revoked after its successor is delivered
                            // only if it came from that very server.
                            let x = self.exchange_of(&slot).cloned();
                            let revoke = x.is_some_and(|x| x.same_server(&s.origin));
                            log::info!(
                                "restoring allocation {}: the saved secret of exchange {:?} was minted at {:?}, not at {:?} as configured now: dropped{}, and derived anew",
                                self.inner.alloc_id,
                                s.exchange,
                                s.origin,
                                origin,
                                if revoke {
                                    " (revoked on that server once the new one is delivered)"
                                } else {
                                    " (not revoked: it would have to be sent to another server; it lives until its TTL ends)"
                                }
                            );
                            if revoke {
                                st.retire(s);
                            }
                        } else {
                            // Only the exchange that derived a secret, from
                            // its own identity, may confirm, use or revoke it.
                            log::info!(
                                "restoring allocation {}: the saved secret of exchange {:?} for identity {} is dropped: no exchange of that name consumes that identity now",
                                self.inner.alloc_id,
                                s.exchange,
                                s.identity
                            );
                        }
                    }
                    // Revocations an earlier process saved and did not
                    // finish (killed first): done once each slot's secret
                    // is delivered below.
                    for r in saved.releasing {
                        if self.may_revoke_saved(&r, "restoring") {
                            st.retire(r);
                        }
                    }
                    st.failures = 0;
                    st.last_kind = EventKind::Restored;
                    // The next signing renews what was restored.
                    st.pending = EventKind::Renewed;
                    st.next_ms = self.schedule(&st, now_ms);
                    self.announce(&st, EventKind::Restored);
                    self.restore_plan(&st)
                };
                log::debug!(
                    "restored allocation {}: saved identities reused",
                    self.inner.alloc_id
                );
                let before = self.lock().secrets.clone();
                let outcome = self.run_exchanges(&plan, EventKind::Restored, true, now_ms);
                let after = self.lock().secrets.clone();
                outcome?;
                // Derived anew: those planned so, and those whose saved secret
                // its exchange replaced (a Vault token that lookup-self refused).
                let rederived = plan
                    .iter()
                    .filter(|(x, step)| {
                        let slot = slot_of(x.as_ref());
                        let old = before.get(&slot).map(|s| &s.secret);
                        let new = after.get(&slot).map(|s| &s.secret);
                        old != new || *step == Step::Derive
                    })
                    .map(|(x, _)| x.name().to_string())
                    .collect();
                Ok(RestoreReport {
                    reused: true,
                    reason: String::new(),
                    rederived,
                })
            }
            Err(reason) => {
                log::info!(
                    "restoring allocation {}: re-signing ({reason})",
                    self.inner.alloc_id
                );
                {
                    let mut st = self.lock();
                    // Every saved secret is replaced: each is revoked once
                    // its slot's new one is delivered (kept, and saved,
                    // until then).
                    for s in saved_secrets {
                        if self.may_revoke_saved(&s, "restoring") {
                            st.retire(s);
                        }
                    }
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
            let expected = match self.inner.parts.signer.expected_claims(&req) {
                None => None,
                Some(Ok(e)) => Some(e),
                Some(Err(e)) => {
                    return Err(format!(
                        "identity {} cannot be signed as configured: {e}",
                        t.key
                    ));
                }
            };
            if let Some(why) = claims.mismatch(&req, expected.as_ref()) {
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

    /// What each exchange does on a restore that reuses the saved
    /// identities: a missing or empty saved secret, or one derived from
    /// another token than the one in use, is derived anew; any other is
    /// handed to the exchange to confirm ([`RefreshReason::Restored`]: a
    /// Vault login checks it with `lookup-self`).
    fn restore_plan(&self, st: &State) -> Vec<(Arc<dyn TokenExchange>, Step)> {
        self.inner
            .parts
            .exchanges
            .iter()
            .map(|x| {
                let token = st.tokens.get(x.identity());
                let stale = match (st.secrets.get(&slot_of(x.as_ref())), token) {
                    (Some(s), Some(t)) => s.secret.is_empty() || s.derived_from != t.jwt_id,
                    _ => true,
                };
                let step = if stale {
                    Step::Derive
                } else {
                    Step::Refresh(RefreshReason::Restored)
                };
                (x.clone(), step)
            })
            .collect()
    }
}
