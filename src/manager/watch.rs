//! Watchers: any number per identity, each coalesced to the newest update.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::IdentityUpdate;

#[derive(Default)]
pub(crate) struct Slot {
    latest: Mutex<Option<IdentityUpdate>>,
    ready: Condvar,
}

impl Slot {
    /// Replaces whatever the watcher has not read yet: a slow watcher sees the
    /// newest token, never a backlog.
    pub(crate) fn publish(&self, update: IdentityUpdate) {
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(update);
        self.ready.notify_all();
    }
}

/// Receives the newest token of one identity.
pub struct Watcher {
    pub(crate) slot: Arc<Slot>,
}

impl Watcher {
    /// The newest update not yet taken, if any.
    pub fn try_recv(&self) -> Option<IdentityUpdate> {
        self.slot
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Waits up to `timeout` for an update.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<IdentityUpdate> {
        let deadline = crate::deadline::deadline_after(timeout);
        let mut latest = self
            .slot
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(u) = latest.take() {
                return Some(u);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            latest = self
                .slot
                .ready
                .wait_timeout(latest, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
