//! Secrets taken out of use, and their revocation.
//!
//! A secret an exchange no longer uses (a Vault token a new login replaced,
//! a saved one a restore could not confirm) stays in the state, saved in the
//! same write as what replaced it, and is revoked
//! ([`TokenExchange::revoke`]) once its slot's new secret has been
//! delivered. A process killed between the two leaves the revocation saved
//! for the next start to finish; a revocation that fails (the server
//! unreachable) stays saved and is tried again after the next delivery, on
//! the next start and by [`IdentityManager::end_allocation`], which revokes
//! everything an allocation holds and forgets its saved state.

use std::sync::Arc;

use super::{DerivedSecret, IdentityManager, PersistedState, Slot, State, TokenExchange};
use crate::error::{Error, Result};

/// A secret taken out of use, not yet revoked.
pub(super) struct Releasing {
    pub(super) secret: DerivedSecret,
    /// Its slot's successor was delivered in this process: revoke it now.
    pub(super) due: bool,
}

/// Whether `s` is kept in `slot`.
fn in_slot(s: &DerivedSecret, slot: &Slot) -> bool {
    s.exchange == slot.0 && s.identity == slot.1
}

/// Whether `a` and `b` are one secret of one exchange.
fn same(a: &DerivedSecret, b: &DerivedSecret) -> bool {
    a.exchange == b.exchange && a.identity == b.identity && a.secret == b.secret
}

impl State {
    /// Takes `secret` out of use: revoked once its slot's successor is
    /// delivered. Empty secrets and ones already waiting are ignored.
    pub(super) fn retire(&mut self, secret: DerivedSecret) {
        if secret.secret.is_empty() || self.releasing.iter().any(|r| same(&r.secret, &secret)) {
            return;
        }
        self.releasing.push(Releasing { secret, due: false });
    }

    /// `slot`'s secret `delivered` reached its consumer: every other secret
    /// of that slot waiting here is due; `delivered` itself, if it was
    /// waiting (an exchange that handed back a secret it had), is in use
    /// again.
    pub(super) fn delivered(&mut self, slot: &Slot, delivered: &str) {
        self.releasing
            .retain(|r| !(in_slot(&r.secret, slot) && r.secret.secret == delivered));
        for r in self.releasing.iter_mut() {
            if in_slot(&r.secret, slot) {
                r.due = true;
            }
        }
    }

    /// Whether a secret of `slot` waits for its successor's delivery.
    pub(super) fn holds_back(&self, slot: &Slot) -> bool {
        self.releasing
            .iter()
            .any(|r| !r.due && in_slot(&r.secret, slot))
    }

    /// The secrets waiting, as saved.
    pub(super) fn releasing_saved(&self) -> Vec<DerivedSecret> {
        self.releasing.iter().map(|r| r.secret.clone()).collect()
    }
}

impl IdentityManager {
    /// Whether this process may revoke `s`, a secret an earlier one saved:
    /// only through the exchange that derived it (its name and identity),
    /// and only if it was minted with that exchange's origin or at the
    /// server it talks to now. Any other is dropped and named in the log,
    /// never sent to a server it did not come from.
    pub(super) fn may_revoke_saved(&self, s: &DerivedSecret, doing: &str) -> bool {
        if s.secret.is_empty() {
            return false;
        }
        let Some(x) = self.exchange_of(&(s.exchange.clone(), s.identity.clone())) else {
            log::info!(
                "{doing} allocation {}: a saved secret of exchange {:?} for identity {} is not revoked: no exchange of that name consumes that identity now",
                self.inner.alloc_id,
                s.exchange,
                s.identity
            );
            return false;
        };
        if x.origin() == s.origin || x.same_server(&s.origin) {
            return true;
        }
        log::info!(
            "{doing} allocation {}: a saved secret of exchange {:?} was minted at {:?}, not at the server of {:?} as configured now: not revoked (it would have to be sent to another server; it lives until its TTL ends)",
            self.inner.alloc_id,
            s.exchange,
            s.origin,
            x.origin()
        );
        false
    }

    /// Revokes `s` through the exchange that derived it.
    fn revoke_one(&self, s: &DerivedSecret) -> std::result::Result<(), String> {
        match self.exchange_of(&(s.exchange.clone(), s.identity.clone())) {
            Some(x) => x.revoke(&s.secret).map_err(|e| e.to_string()),
            // Never admitted (see `may_revoke_saved`): nothing to send.
            None => Ok(()),
        }
    }

    /// Revokes every due secret, outside the state lock: those revoked are
    /// dropped and the state saved again; those whose revocation failed
    /// stay, saved, and are tried again later.
    pub(super) fn revoke_due(&self) {
        let due: Vec<DerivedSecret> = self
            .lock()
            .releasing
            .iter()
            .filter(|r| r.due)
            .map(|r| r.secret.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let mut revoked = Vec::new();
        for s in due {
            match self.revoke_one(&s) {
                Ok(()) => revoked.push(s),
                Err(e) => log::warn!(
                    "allocation {}: {e}; tried again after the next delivery, on the next start or when the allocation ends",
                    self.inner.alloc_id
                ),
            }
        }
        if revoked.is_empty() {
            return;
        }
        self.lock()
            .releasing
            .retain(|r| !revoked.iter().any(|s| same(&r.secret, s)));
        // A failure is logged by `persist`; the saved state then still
        // names the revoked secrets, and a later start revokes them again
        // (a server answers that as "already invalid").
        let _ = self.persist();
    }

    /// Ends the allocation: revokes every secret its exchanges hold (in
    /// use, replaced, or saved by an earlier process and not yet revoked),
    /// then forgets its saved state ([`IdentityDb::remove`](super::IdentityDb::remove)).
    ///
    /// It works on a manager that was never started, as a host that
    /// restarted after the allocation stopped has: the saved state is read.
    /// A saved secret minted elsewhere (another server than its exchange
    /// talks to now) is not sent anywhere; the log names it.
    ///
    /// Afterwards the manager signs nothing more: [`tick`](IdentityManager::tick)
    /// does nothing, [`start`](IdentityManager::start) and
    /// [`restore`](IdentityManager::restore) fail with `InvalidArgument`,
    /// and [`current`](IdentityManager::current) and
    /// [`secret`](IdentityManager::secret) find nothing. The identity
    /// tokens already handed out stay valid until they expire (a JWT cannot
    /// be called back; revoke its key to end them sooner).
    ///
    /// If a revocation fails (its server unreachable), the saved state keeps
    /// exactly the secrets not revoked, and a `TokenExchange` error names
    /// each: call again to retry. From inside one of this manager's own
    /// callbacks: `InvalidArgument`, as [`IdentityManager::start`].
    pub fn end_allocation(&self) -> Result<()> {
        let Some(_one) = self.renewal() else {
            return Err(super::reentry::refused("IdentityManager", "end_allocation"));
        };
        let alloc_id = &self.inner.alloc_id;
        let saved = match self.inner.parts.db.load(alloc_id) {
            Ok(saved) => saved.unwrap_or_default(),
            Err(e) => {
                log::warn!(
                    "ending allocation {alloc_id}: its saved state is unreadable ({e}): only the secrets this process holds are revoked"
                );
                PersistedState::default()
            }
        };
        let mut all: Vec<DerivedSecret> = {
            let mut st = self.lock();
            st.ended = true;
            st.next_ms = None;
            st.refresh_at.clear();
            st.tokens.clear();
            let mut all: Vec<_> = std::mem::take(&mut st.secrets).into_values().collect();
            all.extend(
                std::mem::take(&mut st.releasing)
                    .into_iter()
                    .map(|r| r.secret),
            );
            all
        };
        for s in saved.secrets.into_iter().chain(saved.releasing) {
            if !all.iter().any(|a| same(a, &s)) && self.may_revoke_saved(&s, "ending") {
                all.push(s);
            }
        }
        all.retain(|s| !s.secret.is_empty());
        let mut left = Vec::new();
        let mut why = Vec::new();
        for s in all {
            if let Err(e) = self.revoke_one(&s) {
                why.push(e);
                left.push(s);
            }
        }
        let Some(first) = left.first() else {
            log::info!(
                "allocation {alloc_id} ended: its secrets are revoked and its saved state removed"
            );
            return self.inner.parts.db.remove(alloc_id);
        };
        let exchange = first.exchange.clone();
        let kept = PersistedState {
            identities: Vec::new(),
            secrets: Vec::new(),
            releasing: left.clone(),
        };
        self.lock().releasing = left
            .into_iter()
            .map(|secret| Releasing { secret, due: true })
            .collect();
        let stored = self.inner.parts.db.store(alloc_id, &kept);
        let failure = Error::TokenExchange {
            exchange,
            alloc_id: alloc_id.clone(),
            reason: format!(
                "ending the allocation: {} (kept in its saved state; call end_allocation again to retry)",
                why.join("; ")
            ),
        };
        stored.and(Err(failure))
    }

    /// `InvalidArgument` once the allocation was ended: `what` (start,
    /// restore) would sign again for a dead workload.
    pub(super) fn refuse_if_ended(&self, what: &str) -> Result<()> {
        if !self.lock().ended {
            return Ok(());
        }
        Err(Error::invalid(
            "IdentityManager",
            what,
            format!(
                "allocation {} was ended (end_allocation): its identities are not signed again; build a new manager for a new allocation",
                self.inner.alloc_id
            ),
        ))
    }

    /// The exchange whose secret is kept in `slot` (its name and identity).
    pub(super) fn exchange_of(&self, slot: &Slot) -> Option<&Arc<dyn TokenExchange>> {
        self.inner
            .parts
            .exchanges
            .iter()
            .find(|x| x.name() == slot.0 && *x.identity() == slot.1)
    }
}
