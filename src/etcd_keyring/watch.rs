//! The watch thread: follows the prefix from the copy's revision on, and
//! lists it again when that revision was compacted away.

use std::io::{BufRead, BufReader, Read};
use std::sync::Weak;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::view::{Entry, KEYS, WRAPPING, relist, sync};
use super::{Counters, Shared};
use crate::error::truncate_for_message;
use crate::state::etcd::record::{b64, prefix_end, unb64};
use crate::state::etcd::watch::{MAX_MESSAGE_BYTES, Message};

/// Longest pause between attempts when nothing answers.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How a stream ended.
enum Ended {
    Relist(String),
    Cut(String),
}

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
            Ok((stream, ep)) => {
                drop(shared);
                follow(weak, stream, &ep)
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

fn open_watch(shared: &Shared) -> std::result::Result<(impl Read + use<>, String), Ended> {
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
            Ok(stream) => return Ok((stream, ep.to_string())),
            Err(e) => errors.push(e.message),
        }
    }
    Err(Ended::Cut(format!(
        "no member accepted the watch: {}",
        errors.join("; ")
    )))
}

fn follow(weak: &Weak<Shared>, stream: impl Read, endpoint: &str) -> Ended {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_MESSAGE_BYTES + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => return Ended::Cut(format!("{endpoint} closed the stream")),
            Ok(_) if line.len() as u64 > MAX_MESSAGE_BYTES => {
                return Ended::Cut(format!("{endpoint} sent an oversized message"));
            }
            Ok(_) => {}
            Err(e) => return Ended::Cut(format!("reading from {endpoint}: {e}")),
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message: Message = match serde_json::from_slice(&line) {
            Ok(m) => m,
            Err(e) => return Ended::Cut(format!("{endpoint} sent a malformed message: {e}")),
        };
        if let Some(error) = message.error {
            return Ended::Cut(format!(
                "{endpoint}: {}",
                truncate_for_message(&error.to_string())
            ));
        }
        let Some(resp) = message.result else {
            continue;
        };
        let Some(shared) = weak.upgrade() else {
            return Ended::Cut("the keyring was dropped".into());
        };
        if shared.is_stopped() {
            return Ended::Cut("the keyring was dropped".into());
        }
        if resp.compact_revision > 0 {
            return Ended::Relist(format!(
                "the watch's start revision was compacted (compaction at {})",
                resp.compact_revision
            ));
        }
        if resp.canceled {
            return Ended::Cut(format!(
                "{endpoint} canceled the watch: {}",
                truncate_for_message(&resp.cancel_reason)
            ));
        }
        if resp.created || resp.events.is_empty() {
            continue;
        }
        let prefix = shared.prefix.as_bytes();
        let mut changes = Vec::with_capacity(resp.events.len());
        for event in resp.events {
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
            keys_changed |= suffix.starts_with(KEYS) || suffix == WRAPPING;
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
            // Only the election key moved: the keyring already reflects it.
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
