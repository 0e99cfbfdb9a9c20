//! The renewal lock of a manager, taken so that a call made from inside
//! one of that manager's own callbacks (its signer, an exchange, a
//! watcher) on the thread that runs them is told apart: it would otherwise
//! wait forever for the call that is running it.

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::Error;

thread_local! {
    /// The renewal locks this thread holds (their addresses).
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A renewal lock held by this thread; released (and forgotten) on drop,
/// a panic's unwinding included.
pub(super) struct Renewal<'a> {
    _lock: MutexGuard<'a, ()>,
    key: usize,
}

impl Drop for Renewal<'_> {
    fn drop(&mut self) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|k| *k == self.key) {
                held.remove(i);
            }
        });
    }
}

/// Takes `lock`, waiting for another thread that holds it; `None` when this
/// thread already holds it (a call from inside one of the manager's own
/// callbacks), which must not wait.
pub(super) fn enter(lock: &Mutex<()>) -> Option<Renewal<'_>> {
    let key = std::ptr::from_ref(lock) as usize;
    if HELD.with(|held| held.borrow().contains(&key)) {
        return None;
    }
    let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
    HELD.with(|held| held.borrow_mut().push(key));
    Some(Renewal { _lock: guard, key })
}

/// The error of a call (`start`, `restore`, a node's `tick`) made from
/// inside one of the manager's own callbacks.
pub(super) fn refused(subject: &'static str, call: &str) -> Error {
    Error::invalid(
        subject,
        call,
        format!(
            "called from inside one of this manager's own callbacks (its signer, an exchange or a watcher), on the thread running them: it would wait forever for the call that is running the callback; call {call} once the callback has returned (another thread, or the next tick)"
        ),
    )
}
