//! Who fetches when: the single flight (one fetch at a time), the
//! unknown-kid hook and its cooldown, the refresher's loop, and the
//! bookkeeping around each fetch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use super::{RefreshReport, Shared, Source, State};
use crate::error::Result;
use crate::keyring::KeyId;

/// Why a fetch runs (for the log).
#[derive(Clone, Copy)]
pub(super) enum Trigger {
    Asked,
    Due,
    UnknownKid,
}

impl Trigger {
    fn name(self) -> &'static str {
        match self {
            Trigger::Asked => "asked",
            Trigger::Due => "due",
            Trigger::UnknownKid => "unknown kid",
        }
    }
}

/// The right to fetch: made with `in_flight` set, clears it when dropped (a
/// fetch that panics included) and wakes the waiters.
pub(super) struct Flight {
    shared: Arc<Shared>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.shared.lock().in_flight = false;
        self.shared.finished.notify_all();
    }
}

impl Shared {
    /// Marks a fetch in flight; `state` must show none is.
    pub(super) fn take_flight(self: &Arc<Self>, mut state: MutexGuard<'_, State>) -> Flight {
        debug_assert!(!state.in_flight);
        state.in_flight = true;
        drop(state);
        Flight {
            shared: Arc::clone(self),
        }
    }

    /// The keyring's unknown-key hook: on the verifying thread, so it only
    /// decides, and fetches (if at all) on a new thread.
    pub(super) fn unknown_kid(self: &Arc<Self>, kid: &KeyId) {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let cooling = state.last_unknown_fetch_ms.is_some_and(|last| {
            // A clock that went backwards ends the cooldown rather than
            // stretching it.
            now >= last && now - last < millis(self.config.unknown_kid_cooldown)
        });
        if state.in_flight || cooling {
            state.unknown_kid_suppressed += 1;
            log::trace!(
                "remote JWKS: unknown kid {kid}: no fetch ({})",
                if state.in_flight {
                    "one is in flight"
                } else {
                    "cooldown"
                }
            );
            return;
        }
        state.last_unknown_fetch_ms = Some(now);
        state.unknown_kid_fetches += 1;
        let flight = self.take_flight(state);
        log::debug!("remote JWKS: unknown kid {kid}: fetching");
        let spawned = std::thread::Builder::new()
            .name("wid-jwks-fetch".into())
            .spawn(move || {
                let shared = Arc::clone(&flight.shared);
                // The result is in the stats and the log.
                let _ = shared.fetch(&flight, Trigger::UnknownKid);
            });
        if let Err(e) = spawned {
            // The closure, and the flight in it, are dropped: nothing in flight.
            log::debug!("remote JWKS: cannot start a fetch thread: {e}");
        }
    }

    pub(super) fn refresh_loop(self: &Arc<Self>, stop: &AtomicBool) {
        let mut state = self.lock();
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let now = self.clock.now_ms();
            if !state.in_flight && now >= state.next_refresh_ms {
                let flight = self.take_flight(state);
                // The result is in the stats and the log.
                let _ = self.fetch(&flight, Trigger::Due);
                drop(flight);
                state = self.lock();
                continue;
            }
            // Woken when any fetch finishes (the due time moves) or on stop;
            // a minute at most, in case the clock jumps.
            let wait = if state.in_flight {
                Duration::from_secs(60)
            } else {
                let ms = u64::try_from(state.next_refresh_ms.saturating_sub(now)).unwrap_or(1);
                Duration::from_millis(ms.clamp(1, 60_000))
            };
            state = self
                .finished
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// One fetch, by the holder of the flight: updates the keyring on success
    /// and the state either way.
    pub(super) fn fetch(&self, _flight: &Flight, trigger: Trigger) -> Result<RefreshReport> {
        let started = self.clock.now_ms();
        let jwks_uri = {
            let mut state = self.lock();
            state.fetches += 1;
            state.last_attempt_ms = Some(started);
            state.jwks_uri.clone()
        };
        let result = self.fetch_and_apply(jwks_uri);
        let now = self.clock.now_ms();
        let held = self.keyring.len();
        let mut state = self.lock();
        match &result {
            Ok((uri, report)) => {
                if let Source::SpiffeBundle(_) = self.config.source {
                    // Never lowered here: check_bundle refused a bundle that
                    // dropped or lowered the held sequence, and a reset that
                    // raced this fetch leaves the sequence just fetched.
                    state.sequence = report.sequence.max(state.sequence);
                }
                state.jwks_uri = Some(uri.clone());
                state.stale = false;
                state.last_success_ms = Some(now);
                state.next_refresh_ms = now.saturating_add(millis(report.next_refresh_in));
                log::debug!(
                    "{}: fetched {} ({}): {} keys, {} added, {} removed, {} skipped{}; next in {:?}",
                    self.config.source.label(),
                    report.jwks_uri,
                    trigger.name(),
                    report.keys.len(),
                    report.added.len(),
                    report.removed.len(),
                    report.skipped,
                    report
                        .sequence
                        .map_or(String::new(), |n| format!(", sequence {n}")),
                    report.next_refresh_in
                );
            }
            Err(e) => {
                state.failures += 1;
                state.stale = true;
                state.last_error = Some(e.to_string());
                state.next_refresh_ms = now.saturating_add(millis(self.config.min_refresh));
                if let Source::Issuer(_) = self.config.source {
                    state.jwks_uri = None;
                }
                log::debug!(
                    "{}: fetch ({}) failed, keeping {held} keys: {e}",
                    self.config.source.label(),
                    trigger.name(),
                );
            }
        }
        result.map(|(_, report)| report)
    }
}

/// Whole milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
