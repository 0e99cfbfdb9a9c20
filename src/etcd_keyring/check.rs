//! The check thread: proves the copy current (one linearizable read per
//! interval), lists it again when it stays behind, retries records that did
//! not unwrap, and stands keys down past their planned end while cut off.

use std::time::Instant;

use super::listing::relist;
use super::sync::sync;
use super::{Counters, Shared};
use crate::keyring::KeyState;
use crate::state::StoreError;
use crate::state::etcd::fence::prefix_changes;

/// One linearizable read: the cluster's revision, how many records the
/// prefix holds, and whether any changed after `seen`.
fn check(shared: &Shared, seen: i64) -> std::result::Result<(i64, usize, bool), StoreError> {
    prefix_changes(&shared.client, shared.prefix.as_bytes(), seen)
        .map(|(revision, count, changed)| (revision, count, changed > 0))
}

/// The check thread: proves the copy current every check interval, relists
/// when it stays behind, and past an active key's planned end while cut off
/// stops signing with it here.
pub(crate) fn check_loop(shared: &Shared) {
    let mut behind_since: Option<Instant> = None;
    while !shared.sleep(shared.settings.check_interval) {
        let seen = shared.lock_view().revision;
        let sent_at = Instant::now();
        match check(shared, seen) {
            Ok((revision, _, _)) if revision < seen => {
                // The cluster went back: the copy is ahead of etcd, not
                // current. List again at once (relist says what happened).
                Counters::bump(&shared.counters.checks_behind);
                if let Err(e) = relist(shared) {
                    shared.lock_view().note(format!("listing again: {e}"));
                }
            }
            Ok((_, count, changed)) => {
                Counters::bump(&shared.counters.checks);
                let mut view = shared.lock_view();
                // Current when nothing changed after `seen` and nothing was
                // deleted (a deletion leaves no key to find, but lowers the
                // count) — and the copy did not move meanwhile.
                let current = !changed
                    && count == view.entries.len() + view.foreign.len()
                    && view.revision == seen;
                let restore = current && !view.stood_down.is_empty();
                let retry = view.pending_retry;
                if current {
                    view.proven_at = Some(sent_at);
                    if view.warned_cut_off {
                        log::info!("replicated keyring: in touch with etcd again");
                        view.warned_cut_off = false;
                    }
                    behind_since = None;
                } else if view.revision == seen {
                    Counters::bump(&shared.counters.checks_behind);
                    behind_since.get_or_insert(sent_at);
                }
                drop(view);
                let stuck =
                    behind_since.is_some_and(|t| t.elapsed() >= shared.settings.max_lag / 2);
                if restore || stuck {
                    // The watch missed something (or keys stood down while
                    // cut off): read everything again.
                    if let Err(e) = relist(shared) {
                        shared.lock_view().note(format!("listing again: {e}"));
                    } else {
                        behind_since = None;
                    }
                } else if retry {
                    // A record did not unwrap (the KMS was away): again.
                    sync(shared);
                }
            }
            Err(e) => {
                Counters::bump(&shared.counters.check_failures);
                shared
                    .lock_view()
                    .note(format!("freshness check: {}", e.message));
            }
        }
        enforce_planned_end(shared);
    }
}

/// While the copy is cut off, each active key signs until its planned end
/// (signing start + the policy's rotation threshold); then it stops here.
fn enforce_planned_end(shared: &Shared) {
    let mut view = shared.lock_view();
    let lag = view.proven_at.map(|t| t.elapsed());
    if lag.is_some_and(|d| d <= shared.settings.max_lag) {
        return;
    }
    if !view.warned_cut_off {
        view.warned_cut_off = true;
        log::warn!(
            "replicated keyring at {}: not proven current for over {:?}; signing with the active keys known here until their planned end",
            shared.prefix,
            shared.settings.max_lag
        );
    }
    let now = crate::clock::unix_now();
    let threshold =
        i64::try_from(shared.rotation_policy().rotation_threshold.as_secs()).unwrap_or(i64::MAX);
    for info in shared.keyring.keys() {
        // Only a key of a signing algorithm is ever active.
        let Some(alg) = info.algorithm.signing() else {
            continue;
        };
        let pair = (info.purpose, alg);
        if info.state != KeyState::Active || view.stood_down.contains(&pair) {
            continue;
        }
        let planned_end = info
            .create_time
            .max(info.publish_time)
            .saturating_add(threshold);
        if now >= planned_end && shared.keyring.stand_down(info.purpose, alg, now) {
            view.stood_down.push(pair);
            view.note(format!(
                "cut off from etcd past the planned end of {} {} key {} ({}): it no longer signs here until etcd answers",
                info.algorithm, info.purpose, info.kid, crate::clock::rfc3339(planned_end)
            ));
        }
    }
}
