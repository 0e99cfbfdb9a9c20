//! Driving a manager from a thread, with the system clock, stoppable.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::IdentityManager;
use crate::clock::Clock;

/// Longest sleep between ticks, so a clock jump is noticed within a minute.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// A thread that keeps a manager's identities renewed until stopped.
pub struct Runner {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// The manager it drives (a clone: they share their state).
    manager: IdentityManager,
}

impl Runner {
    /// Starts ticking `manager` (already started or restored) with `clock`.
    pub fn spawn(manager: IdentityManager, clock: Arc<dyn Clock>) -> std::io::Result<Runner> {
        let kept = manager.clone();
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("wid-identities-{}", manager.alloc_id()))
            .spawn(move || {
                let (lock, cv) = &*flag;
                let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                while !*stopped {
                    drop(stopped);
                    let now = clock.now_ms();
                    let next = manager.tick(now);
                    let sleep = next.map_or(MAX_SLEEP, |t| {
                        Duration::from_millis(u64::try_from(t.saturating_sub(now)).unwrap_or(0))
                            .min(MAX_SLEEP)
                    });
                    stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    if !*stopped {
                        stopped = cv
                            .wait_timeout(stopped, sleep.max(Duration::from_millis(1)))
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                }
            })?;
        Ok(Runner {
            stop,
            thread: Some(thread),
            manager: kept,
        })
    }

    /// The manager it drives, to ask while it runs (its current tokens,
    /// secrets, health): the same manager, not a copy of its state.
    pub fn manager(&self) -> &IdentityManager {
        &self.manager
    }

    /// Stops the thread and waits for it to finish its current tick.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
