//! The mirror's watch thread: list the prefix, then apply every change from
//! the next revision on; resume a cut stream from the last applied revision
//! (on another member if need be); list again when that revision was
//! compacted away.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::client::Listed;
use super::record::{Header, Kv, b64, int64, prefix_end, unb64};
use super::view::{Entry, Shared};
use crate::state::StoreError;

/// Largest single watch message read (a batch of changes); a longer line ends
/// the stream, which is then reopened.
pub(crate) const MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;
/// Longest pause between attempts when nothing answers.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Pause before listing again after the prefix was too big to keep.
const OVERFLOW_RETRY: Duration = Duration::from_secs(30);

/// One line of a watch stream.
#[derive(Deserialize)]
pub(crate) struct Message {
    #[serde(default)]
    pub(crate) result: Option<WatchResponse>,
    #[serde(default)]
    pub(crate) error: Option<serde_json::Value>,
}

/// A watch stream's result.
#[derive(Deserialize)]
pub(crate) struct WatchResponse {
    /// The store's revision when the message was made (on the creation
    /// message: the cluster's revision as the watch starts).
    #[serde(default)]
    pub(crate) header: Header,
    #[serde(default)]
    pub(crate) created: bool,
    #[serde(default)]
    pub(crate) canceled: bool,
    #[serde(default, deserialize_with = "int64")]
    pub(crate) compact_revision: i64,
    #[serde(default)]
    pub(crate) cancel_reason: String,
    #[serde(default)]
    pub(crate) events: Vec<Event>,
}

/// One change a watch delivers.
#[derive(Deserialize)]
pub(crate) struct Event {
    /// `"DELETE"`, or absent for a put (protobuf JSON leaves out the zero value).
    #[serde(default, rename = "type")]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) kv: Kv,
}

/// How a stream ended.
pub(crate) enum Ended {
    /// The start revision was compacted, or the prefix outgrew the mirror:
    /// list again.
    Relist(String),
    /// The cluster's revision is behind what the copy has seen (restored
    /// from an older snapshot): list again.
    WentBack(String),
    /// Cut, refused, timed out or closed: resume from the last revision.
    Cut(String),
}

/// The thread body: runs until the mirror is dropped.
pub(super) fn run(shared: &Shared) {
    let mut need_list = true;
    let mut backoff = Duration::from_millis(50);
    while !shared.is_stopped() {
        if need_list {
            match relist(shared) {
                Ok(true) => {
                    need_list = false;
                    backoff = Duration::from_millis(50);
                }
                Ok(false) => {
                    if shared.sleep(OVERFLOW_RETRY) {
                        return;
                    }
                    continue;
                }
                Err(e) => {
                    shared.note_error(format!("listing the prefix: {e}"));
                    if shared.sleep(backoff) {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let started = Instant::now();
        match watch_once(shared) {
            Ended::Relist(why) | Ended::WentBack(why) => {
                shared.note_error(format!("{why}; listing again"));
                need_list = true;
            }
            Ended::Cut(why) => shared.note_error(format!("watch ended: {why}")),
        }
        Shared::count(&shared.counters.watch_restarts);
        if started.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_millis(50);
        }
        if shared.sleep(backoff) {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Lists the prefix page by page at one revision and replaces the view;
/// `Ok(false)` when it holds more records than the mirror may keep.
fn relist(shared: &Shared) -> Result<bool, StoreError> {
    let max = shared.settings.max_allocations;
    let sent_at = Instant::now();
    let mut records: Vec<(Box<[u8]>, Entry)> = Vec::new();
    let listed = shared.store.client().list_prefix(
        &shared.allocations_prefix,
        shared.settings.page_size,
        |item| {
            Ok(match item {
                Listed::Count(count) => {
                    if count > 0 && count as u64 > max as u64 {
                        shared.note_error(format!(
                            "the prefix holds {count} records, more than the {max} the mirror may keep: reads go to the cluster"
                        ));
                        false
                    } else {
                        records.reserve(usize::try_from(count).unwrap_or(0));
                        true
                    }
                }
                Listed::Pair { suffix, value, .. } => {
                    records.push((suffix.into(), Entry::of_record(suffix, &value)));
                    records.len() <= max
                }
            })
        },
    )?;
    Shared::count(&shared.counters.relists);
    match listed {
        Some(revision) => {
            shared.write_view().replace(records, revision, sent_at);
            Ok(true)
        }
        None => {
            shared.write_view().overflow();
            Ok(false)
        }
    }
}

/// Opens a watch from the revision after the view's (local member first)
/// and applies what it delivers until it ends.
fn watch_once(shared: &Shared) -> Ended {
    let prefix = &shared.allocations_prefix;
    let start = shared.read_view().revision + 1;
    let body = serde_json::json!({"create_request": {
        "key": b64(prefix),
        "range_end": b64(prefix_end(prefix)),
        "start_revision": start.to_string(),
    }});
    let client = shared.store.client();
    let mut errors = Vec::new();
    for ep in client.endpoints_local_first() {
        if shared.is_stopped() {
            return Ended::Cut("the mirror was dropped".into());
        }
        match client.open_stream(ep, "/v3/watch", &body) {
            Ok(stream) => return follow(shared, stream, ep, start),
            Err(e) => errors.push(e.message),
        }
    }
    Ended::Cut(format!(
        "no member accepted the watch: {}",
        errors.join("; ")
    ))
}

/// Applies the messages of one watch stream.
fn follow(shared: &Shared, stream: impl Read, endpoint: &str, start: i64) -> Ended {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        match next_events(&mut reader, &mut line, endpoint, start) {
            Err(ended) => return ended,
            Ok(None) => {}
            Ok(Some(events)) => {
                if let Err(ended) = apply(shared, events) {
                    return ended;
                }
            }
        }
    }
}

/// Reads the next message of a watch stream (any copy of a prefix: the
/// mirror's, the replicated keyring's) that started at `start`: its
/// changes, `Ok(None)` for a message that carries none, or how the stream
/// ended (closed, oversized, malformed, an error, canceled; compacted, or
/// the cluster's revision behind `start - 1`, the revision the copy has
/// seen: list again).
///
/// A cluster whose revision went back (restored from an older snapshot
/// without `--bump-revision`) would otherwise never deliver its changes to a
/// watch that starts past its revision: they reuse revisions the copy
/// has already seen.
pub(crate) fn next_events(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    endpoint: &str,
    start: i64,
) -> Result<Option<Vec<Event>>, Ended> {
    line.clear();
    match reader.take(MAX_MESSAGE_BYTES + 1).read_until(b'\n', line) {
        Ok(0) => return Err(Ended::Cut(format!("{endpoint} closed the stream"))),
        Ok(_) if line.len() as u64 > MAX_MESSAGE_BYTES => {
            return Err(Ended::Cut(format!(
                "{endpoint} sent a message over {MAX_MESSAGE_BYTES} bytes"
            )));
        }
        Ok(_) => {}
        Err(e) => return Err(Ended::Cut(format!("reading from {endpoint}: {e}"))),
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let message: Message = serde_json::from_slice(line)
        .map_err(|e| Ended::Cut(format!("{endpoint} sent a malformed message: {e}")))?;
    if let Some(error) = message.error {
        return Err(Ended::Cut(format!(
            "{endpoint}: {}",
            crate::error::truncate_for_message(&error.to_string())
        )));
    }
    let Some(resp) = message.result else {
        return Ok(None);
    };
    if resp.compact_revision > 0 {
        return Err(Ended::Relist(format!(
            "the watch's start revision was compacted (compaction at {})",
            resp.compact_revision
        )));
    }
    if resp.canceled {
        return Err(Ended::Cut(format!(
            "{endpoint} canceled the watch: {}",
            crate::error::truncate_for_message(&resp.cancel_reason)
        )));
    }
    let seen = start.saturating_sub(1);
    if resp.created && resp.header.revision > 0 && resp.header.revision < seen {
        return Err(Ended::WentBack(format!(
            "{endpoint}'s revision is {}, behind revision {seen} this copy has seen: the cluster went back (restored from an older snapshot without --bump-revision?)",
            resp.header.revision
        )));
    }
    if resp.created || resp.events.is_empty() {
        // Creation and progress messages prove nothing (see the mirror's
        // notes on progress notifications).
        return Ok(None);
    }
    Ok(Some(resp.events))
}

/// Applies one message's changes under one write lock.
fn apply(shared: &Shared, events: Vec<Event>) -> Result<(), Ended> {
    let prefix = shared.allocations_prefix.as_slice();
    // Decode outside the lock: readers wait only for the map updates.
    let mut changes = Vec::with_capacity(events.len());
    for event in events {
        let key = unb64("a watched key", &event.kv.key).map_err(Ended::Cut)?;
        let Some(suffix) = key.strip_prefix(prefix) else {
            continue;
        };
        let change = match event.kind.as_str() {
            "" | "PUT" => {
                let value = unb64("a watched value", &event.kv.value).map_err(Ended::Cut)?;
                Some(Entry::of_record(suffix, &value))
            }
            "DELETE" => None,
            other => {
                return Err(Ended::Cut(format!(
                    "unknown event type {:?}",
                    crate::error::truncate_for_message(other)
                )));
            }
        };
        changes.push((event.kv.mod_revision, Box::<[u8]>::from(suffix), change));
    }
    let mut view = shared.write_view();
    let mut newest = view.revision;
    let mut applied = 0u64;
    let over = {
        for (revision, key, change) in changes {
            if revision <= view.revision {
                continue; // already in the listing this stream started from
            }
            match change {
                Some(entry) => view.put(key, entry),
                None => view.delete(&key),
            }
            newest = newest.max(revision);
            applied += 1;
        }
        view.entries.len() > shared.settings.max_allocations
    };
    if over {
        view.overflow();
        return Err(Ended::Relist(format!(
            "the prefix grew past the {} records the mirror may keep: reads go to the cluster",
            shared.settings.max_allocations
        )));
    }
    view.advance(newest);
    view.last_event_at = Some(Instant::now());
    drop(view);
    shared
        .counters
        .events
        .fetch_add(applied, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(message: &str, start: i64) -> Result<Option<Vec<Event>>, Ended> {
        let mut reader = std::io::Cursor::new(format!("{message}\n").into_bytes());
        next_events(&mut reader, &mut Vec::new(), "m1", start)
    }

    #[test]
    fn a_watch_created_behind_the_copy_lists_again() {
        // The cluster is at 7 while the copy has seen 40 (start 41): it went
        // back (a restore without --bump-revision). Protobuf JSON writes
        // int64 as strings.
        let created = r#"{"result":{"header":{"revision":"7"},"created":true}}"#;
        match first(created, 41) {
            Err(Ended::WentBack(why)) => {
                assert!(why.contains("behind revision 40"), "{why}");
                assert!(why.contains("--bump-revision"), "{why}");
            }
            Err(Ended::Cut(why) | Ended::Relist(why)) => panic!("not a reset: {why}"),
            Ok(_) => panic!("a watch behind the copy was taken as current"),
        }
        // At or past what the copy has seen: an ordinary start.
        for start in [8, 5, 1] {
            assert!(matches!(first(created, start), Ok(None)), "start {start}");
        }
        // No header (or revision 0): nothing to compare, nothing concluded.
        let bare = r#"{"result":{"created":true}}"#;
        assert!(matches!(first(bare, 41), Ok(None)));
        // Only the creation message is compared: a progress message's header
        // is the revision at which it was sent, also current.
        let progress = r#"{"result":{"header":{"revision":"7"}}}"#;
        assert!(matches!(first(progress, 41), Ok(None)));
    }
}
