//! A background thread's stop flag, with a sleep that a stop cuts short
//! (the rotator's and the server record's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// Set once to stop; sleepers wake at once.
#[derive(Default)]
pub(crate) struct Stopper {
    stopped: AtomicBool,
    wake: (Mutex<()>, Condvar),
}

impl Stopper {
    /// Whether a stop was asked for.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Asks the thread to stop and wakes it.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _g = self.wake.0.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.1.notify_all();
    }

    /// Sleeps `d` or until stopped; `true` when stopped.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let guard = self.wake.0.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .wake
            .1
            .wait_timeout_while(guard, d, |_| !self.is_stopped())
            .unwrap_or_else(PoisonError::into_inner);
        self.is_stopped()
    }
}
