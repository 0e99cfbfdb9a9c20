//! The watcher of a `wid_identity_manager`: told of every new identity
//! token, then of every secret an exchange delivers, in that order, one
//! event at a time.
//!
//! A watcher may call back into its manager (`_start`, `_restore`,
//! `_tick`, `_current`, ...) from inside its callback. The events such a
//! call makes are not told from inside it (the callback is never called
//! again before it returns): they are queued and told, in order, by the
//! call that is telling, once the callback has returned.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use zeroize::Zeroizing;

use super::{ManagedEvent, ManagedValue, Userdata, WatchFn};
use workload_identity::manager::{EventKind, IdentityId, Watcher};

thread_local! {
    /// The watchers this thread is telling (their addresses).
    static TELLING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A secret delivered while the watcher was being told something else.
struct Queued {
    identity: IdentityId,
    exchange: String,
    secret: Zeroizing<String>,
    kind: EventKind,
}

/// The watcher and the identity watchers behind it, shared by a manager and
/// the exchanges that deliver through it.
#[derive(Default)]
pub(crate) struct Events {
    callback: Mutex<Option<(WatchFn, Userdata)>>,
    /// One per identity, set when the manager is built.
    watchers: OnceLock<Vec<(IdentityId, Watcher)>>,
    /// Held while telling, so tokens and secrets are told in order.
    telling: Mutex<()>,
    /// Secrets to tell once the callback running now returns.
    queued: Mutex<VecDeque<Queued>>,
}

/// The telling lock held by this thread.
struct Telling<'a> {
    _lock: MutexGuard<'a, ()>,
    key: usize,
}

impl Drop for Telling<'_> {
    fn drop(&mut self) {
        TELLING.with(|t| {
            let mut t = t.borrow_mut();
            if let Some(i) = t.iter().rposition(|k| *k == self.key) {
                t.remove(i);
            }
        });
    }
}

impl Events {
    pub(crate) fn set_callback(&self, f: WatchFn, userdata: Userdata) {
        *self.callback.lock().unwrap_or_else(PoisonError::into_inner) = Some((f, userdata));
    }

    pub(crate) fn set_watchers(&self, watchers: Vec<(IdentityId, Watcher)>) {
        let _ = self.watchers.set(watchers);
    }

    /// Takes the telling lock; `None` when this thread is telling already
    /// (a call made from inside the watcher's callback).
    fn telling(&self) -> Option<Telling<'_>> {
        let key = std::ptr::from_ref(self) as usize;
        if TELLING.with(|t| t.borrow().contains(&key)) {
            return None;
        }
        let lock = self.telling.lock().unwrap_or_else(PoisonError::into_inner);
        TELLING.with(|t| t.borrow_mut().push(key));
        Some(Telling { _lock: lock, key })
    }

    fn tell(&self, what: ManagedValue, workload: &str, name: &str, value: &str, kind: EventKind) {
        let Some((f, userdata)) = *self.callback.lock().unwrap_or_else(PoisonError::into_inner)
        else {
            return;
        };
        // SAFETY: the watcher's contract; the strings outlive the call.
        unsafe {
            f(
                userdata.0,
                what as u32,
                workload.as_ptr().cast(),
                workload.len(),
                name.as_ptr().cast(),
                name.len(),
                value.as_ptr().cast(),
                value.len(),
                ManagedEvent::from(kind) as u32,
            );
        }
    }

    /// Tells the watcher of every identity token not told yet (and of the
    /// secrets queued behind them). From inside the watcher's callback it
    /// does nothing: the call telling then tells them when it returns.
    pub(crate) fn flush(&self) {
        if let Some(_one) = self.telling() {
            self.drain();
        }
    }

    /// Tells the watcher of a secret, after any identity token not told yet.
    pub(crate) fn deliver(
        &self,
        identity: &IdentityId,
        exchange: &str,
        secret: &str,
        kind: EventKind,
    ) {
        self.queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Queued {
                identity: identity.clone(),
                exchange: exchange.to_string(),
                secret: Zeroizing::new(secret.to_string()),
                kind,
            });
        self.flush();
    }

    /// Under the telling lock: tokens first, then the queued secrets one by
    /// one, until a callback that called back into the manager left
    /// nothing more.
    fn drain(&self) {
        loop {
            let told_tokens = self.tell_tokens();
            let next = self
                .queued
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front();
            match next {
                Some(q) => self.tell(
                    ManagedValue::Secret,
                    &q.identity.workload,
                    &q.exchange,
                    &q.secret,
                    q.kind,
                ),
                None if told_tokens => {}
                None => return,
            }
        }
    }

    /// Tells every identity token not told yet; whether there was one.
    fn tell_tokens(&self) -> bool {
        let Some(watchers) = self.watchers.get() else {
            return false;
        };
        let mut told = false;
        for (key, w) in watchers {
            if let Some(u) = w.try_recv() {
                let token = Zeroizing::new(u.token.token.clone());
                self.tell(
                    ManagedValue::Identity,
                    &key.workload,
                    &key.name,
                    &token,
                    u.kind,
                );
                told = true;
            }
        }
        told
    }
}
