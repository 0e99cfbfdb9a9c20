//! The watch thread: follows the prefix from the copy's revision on, and
//! lists it again when that revision was compacted away.

use std::io::{BufReader, Read};
use std::sync::Weak;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::listing::relist;
use super::sync::sync;
use super::view::{Entry, KEYS, POLICY, SEQUENCE, WRAPPING};
use super::{Counters, Shared};
use crate::error::truncate_for_message;
use crate::state::etcd::record::{b64, prefix_end, unb64};
use crate::state::etcd::watch::{Ended, next_events};

/// Longest pause between attempts when nothing answers.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The watch thread: follows the prefix from the copy's revision on,
/// listing again when that revision was compacted away. It holds the keyring
/// only weakly while it waits on the stream, so dropping the last handle
/// frees the keys at once; the thread ends when its read returns.
pub(crate) fn watch_loop(weak: &Weak<Shared>) {
    let mut backoff = Duration::from_millis(50);
    let mut need_list = false;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        if shared.is_stopped() {
            return;
        }
        if need_list {
            match relist(&shared) {
                Ok(()) => need_list = false,
                Err(e) => {
                    shared.lock_view().note(format!("listing the prefix: {e}"));
                    if shared.sleep(backoff) {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let started = Instant::now();
        let ended = match open_watch(&shared) {
            Ok((stream, ep, start)) => {
                drop(shared);
                follow(weak, stream, &ep, start)
            }
            Err(ended) => {
                drop(shared);
                ended
            }
        };
        let Some(shared) = weak.upgrade() else {
            return;
        };
        match ended {
            Ended::Relist(why) => {
                log::info!(
                    "replicated keyring at {}: {why}; listing again",
                    shared.prefix
                );
                Counters::bump(&shared.counters.compactions);
                need_list = true;
            }
            Ended::WentBack(why) => {
                // Counted (and logged) by the listing, which sees the
                // revision go back.
                log::info!(
                    "replicated keyring at {}: {why}; listing again",
                    shared.prefix
                );
                need_list = true;
            }
            Ended::Cut(why) => {
                if !shared.is_stopped() {
                    log::debug!("replicated keyring: watch ended: {why}");
                }
            }
        }
        Counters::bump(&shared.counters.watch_restarts);
        if started.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_millis(50);
        }
        if shared.sleep(backoff) {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

fn open_watch(shared: &Shared) -> std::result::Result<(impl Read + use<>, String, i64), Ended> {
    let prefix = shared.prefix.as_bytes();
    let start = shared.lock_view().revision + 1;
    let body = serde_json::json!({"create_request": {
        "key": b64(prefix),
        "range_end": b64(prefix_end(prefix)),
        "start_revision": start.to_string(),
    }});
    let client = &shared.client;
    let mut errors = Vec::new();
    for ep in client.endpoints_local_first() {
        if shared.is_stopped() {
            return Err(Ended::Cut("the keyring was dropped".into()));
        }
        match client.open_stream(ep, "/v3/watch", &body) {
            Ok(stream) => return Ok((stream, ep.to_string(), start)),
            Err(e) => errors.push(e.message),
        }
    }
    Err(Ended::Cut(format!(
        "no member accepted the watch: {}",
        errors.join("; ")
    )))
}

fn follow(weak: &Weak<Shared>, stream: impl Read, endpoint: &str, start: i64) -> Ended {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        let events = match next_events(&mut reader, &mut line, endpoint, start) {
            Err(ended) => return ended,
            Ok(None) => continue,
            Ok(Some(events)) => events,
        };
        let Some(shared) = weak.upgrade() else {
            return Ended::Cut("the keyring was dropped".into());
        };
        if shared.is_stopped() {
            return Ended::Cut("the keyring was dropped".into());
        }
        let prefix = shared.prefix.as_bytes();
        let mut changes = Vec::with_capacity(events.len());
        for event in events {
            let key = match unb64("a watched key", &event.kv.key) {
                Ok(k) => k,
                Err(e) => return Ended::Cut(e),
            };
            let Some(suffix) = key.strip_prefix(prefix) else {
                continue;
            };
            let suffix = match String::from_utf8(suffix.to_vec()) {
                Ok(s) => s,
                Err(e) => {
                    // Never ours; counted so the freshness check's count holds.
                    let raw = e.into_bytes();
                    let mut view = shared.lock_view();
                    if event.kind == "DELETE" {
                        view.foreign.remove(&raw);
                    } else {
                        view.foreign.insert(raw);
                    }
                    continue;
                }
            };
            let change = match event.kind.as_str() {
                "" | "PUT" => match unb64("a watched value", &event.kv.value) {
                    Ok(v) => Some(Zeroizing::new(v)),
                    Err(e) => return Ended::Cut(e),
                },
                "DELETE" => None,
                other => {
                    return Ended::Cut(format!(
                        "unknown event type {:?}",
                        truncate_for_message(other)
                    ));
                }
            };
            changes.push((event.kv.mod_revision, suffix, change));
        }
        let mut view = shared.lock_view();
        let mut newest = view.revision;
        let mut keys_changed = false;
        let mut applied = 0u64;
        for (revision, suffix, change) in changes {
            if revision <= view.revision {
                continue;
            }
            keys_changed |= suffix.starts_with(KEYS)
                || suffix == WRAPPING
                || suffix == POLICY
                || suffix == SEQUENCE;
            match change {
                Some(value) => {
                    view.entries.insert(
                        suffix,
                        Entry {
                            mod_revision: revision,
                            value,
                        },
                    );
                }
                None => {
                    view.entries.remove(&suffix);
                }
            }
            newest = newest.max(revision);
            applied += 1;
        }
        view.revision = newest;
        if !keys_changed {
            // Only the election key (or a server record) moved: the keyring
            // already reflects it.
            view.synced = view.synced.max(newest);
        }
        drop(view);
        if keys_changed {
            // Problems are noted in the view and counted; the watch goes on.
            sync(&shared);
        }
        shared
            .counters
            .events
            .fetch_add(applied, std::sync::atomic::Ordering::Relaxed);
        shared.advanced.notify_all();
    }
}
