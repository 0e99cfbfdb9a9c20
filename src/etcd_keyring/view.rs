//! The process's copy of the prefix: listed once, fed by a watch, proven
//! current by periodic checks, and turned into the [`crate::Keyring`] after
//! every change.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::sync::Weak;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::{Counters, Shared};
use crate::codec::{self, Bin};
use crate::custody::{WrapItem, Wrapping};
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{Algorithm, KeyState, ReplicaKey, StoredKey, stored_aad};
use crate::state::StoreError;
use crate::state::etcd::record::{Header, Kv, b64, int64, prefix_end, unb64};
use crate::state::etcd::watch::{MAX_MESSAGE_BYTES, Message};

/// The suffix of the key records.
pub(crate) const KEYS: &str = "keys/";
/// The suffix of the wrapping record.
pub(crate) const WRAPPING: &str = "wrapping";
/// The suffix of the election key.
pub(crate) const ROTATOR: &str = "rotator";

/// Longest pause between attempts when nothing answers.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One record under the prefix.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) mod_revision: i64,
    pub(crate) value: Zeroizing<Vec<u8>>,
}

/// The copy.
#[derive(Default)]
pub(crate) struct View {
    /// The revision the copy reflects (0 before the first listing).
    pub(crate) revision: i64,
    /// Every record under the prefix, by suffix.
    pub(crate) entries: BTreeMap<String, Entry>,
    /// For each key the keyring holds: the digest of the record's key pair
    /// fields ([`key_digest`]); a record whose material changed is unwrapped
    /// again.
    unwrapped: HashMap<String, [u8; 32]>,
    pub(crate) proven_at: Option<Instant>,
    pub(crate) stood_down: Vec<Algorithm>,
    pub(crate) bad_records: usize,
    pub(crate) last_error: Option<String>,
    /// The cut-off has been logged (once per cut).
    warned_cut_off: bool,
}

impl View {
    /// The decoded key records, by key ID (undecodable ones left out).
    pub(crate) fn keys(&self) -> BTreeMap<String, (i64, StoredKey)> {
        self.entries
            .iter()
            .filter_map(|(suffix, e)| {
                let kid = suffix.strip_prefix(KEYS)?;
                let k: StoredKey = codec::decode(&e.value).ok()?;
                (k.id == kid).then(|| (kid.to_string(), (e.mod_revision, k)))
            })
            .collect()
    }

    pub(crate) fn mod_revision(&self, suffix: &str) -> i64 {
        self.entries.get(suffix).map_or(0, |e| e.mod_revision)
    }

    fn note(&mut self, what: String) {
        log::warn!("replicated keyring: {what}");
        self.last_error = Some(what);
    }
}

/// What makes a key pair: its algorithm, derivation, public key and (wrapped)
/// material. A record whose state or times change keeps its digest, so the
/// keyring keeps the key pair without unwrapping it again.
fn key_digest(k: &StoredKey) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        k.algorithm.as_bytes(),
        k.derivation.as_bytes(),
        k.public_key.as_slice(),
        k.material.as_slice(),
        k.wrapped.as_ref().map_or(&[][..], Bin::as_slice),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

#[derive(Deserialize)]
struct RangeAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    kvs: Vec<Kv>,
    #[serde(default)]
    more: bool,
}

/// Lists the whole prefix (linearizable, one revision, page by page).
fn list(shared: &Shared) -> std::result::Result<(i64, BTreeMap<String, Entry>), StoreError> {
    let prefix = shared.prefix.as_bytes();
    let end = b64(prefix_end(prefix));
    let client = &shared.client;
    let mut revision = 0i64;
    let mut from = prefix.to_vec();
    let mut entries = BTreeMap::new();
    loop {
        let mut body = serde_json::json!({"key": b64(&from), "range_end": end, "limit": 500});
        if revision != 0 {
            body["revision"] = revision.to_string().into();
        }
        let page: RangeAnswer = client.each_endpoint(|ep| {
            let text = client.post(ep, "/v3/kv/range", &body)?;
            serde_json::from_str(&text)
                .map_err(|e| StoreError::new(format!("etcd {ep}: malformed range answer: {e}")))
        })?;
        if revision == 0 {
            revision = page.header.revision;
        }
        let mut last = None;
        for kv in page.kvs {
            let key = unb64("a listed key", &kv.key).map_err(StoreError::new)?;
            let value =
                Zeroizing::new(unb64("a listed value", &kv.value).map_err(StoreError::new)?);
            if let Some(suffix) = key.strip_prefix(prefix) {
                let suffix = String::from_utf8_lossy(suffix).into_owned();
                entries.insert(
                    suffix,
                    Entry {
                        mod_revision: kv.mod_revision,
                        value,
                    },
                );
            }
            last = Some(key);
        }
        match (page.more, last) {
            (true, Some(mut key)) => {
                key.push(0);
                from = key;
            }
            _ => break,
        }
    }
    Ok((revision, entries))
}

/// The first listing: checks the KEK against the `wrapping` record (writing
/// it when a KEK is given and the prefix is empty) and builds the keyring.
pub(crate) fn open(shared: &Shared) -> Result<()> {
    let sent_at = Instant::now();
    let (revision, entries) = list(shared).map_err(|e| shared.unavailable(e.message))?;
    let has_keys = entries.keys().any(|k| k.starts_with(KEYS));
    let wrapping = entries.get(WRAPPING);
    match (&shared.wrapper, wrapping) {
        (Some(w), Some(e)) => {
            let map: Wrapping = codec::decode(&e.value).map_err(|e| Error::KeyCustody {
                custodian: format!("KEK {}", w.kek_id()),
                reason: format!("the keyring's wrapping record does not decode: {e}"),
            })?;
            map.check(w.as_ref(), "replicated keyring")?;
        }
        (Some(w), None) => {
            if has_keys {
                return Err(Error::KeyCustody {
                    custodian: format!("KEK {}", w.kek_id()),
                    reason: format!(
                        "the keyring at {} holds keys but no wrapping record: its keys are plaintext; a KEK was given (migrate the keys with `wid keyring migrate`)",
                        shared.prefix
                    ),
                });
            }
            super::change::create_wrapping(shared, w.as_ref())?;
        }
        (None, Some(e)) => {
            let named = codec::decode::<Wrapping>(&e.value)
                .map(|m| format!("{:?} KEK {:?}", m.kind, truncate_for_message(&m.kek_id)))
                .unwrap_or_else(|_| "a KEK".into());
            return Err(Error::KeyCustody {
                custodian: named.clone(),
                reason: format!(
                    "the keyring at {} is wrapped by {named} and no KEK was given (insecure_plaintext_keys() never reads wrapped keys): give its KEK",
                    shared.prefix
                ),
            });
        }
        (None, None) => {}
    }
    if shared.wrapper.is_some() && wrapping.is_none() {
        // The wrapping record was just written: list again so the copy's
        // revision covers it.
        return relist(shared);
    }
    let mut view = shared.lock_view();
    view.revision = revision;
    view.entries = entries;
    sync(shared, &mut view)?;
    view.proven_at = Some(sent_at);
    drop(view);
    Counters::bump(&shared.counters.relists);
    shared.advanced.notify_all();
    Ok(())
}

/// Lists the prefix again and replaces the copy (after compaction, after a
/// cut-off, or when asked).
pub(crate) fn relist(shared: &Shared) -> Result<()> {
    let sent_at = Instant::now();
    let (revision, entries) = list(shared).map_err(|e| shared.unavailable(e.message))?;
    let mut view = shared.lock_view();
    if revision < view.revision {
        // A member behind the one the copy came from; the copy is newer.
        return Ok(());
    }
    view.revision = revision;
    view.entries = entries;
    let synced = sync(shared, &mut view);
    if synced.is_ok() {
        view.proven_at = Some(sent_at);
        view.stood_down.clear();
        view.warned_cut_off = false;
    }
    drop(view);
    Counters::bump(&shared.counters.relists);
    shared.advanced.notify_all();
    synced
}

/// Makes the keyring match the copy's key records: new or changed records
/// are unwrapped (all in one batch), known ones keep their key pair. A record
/// that cannot be used is left out and reported; if the rest does not make a
/// keyring (two active keys of one algorithm, say) the keyring keeps its
/// previous keys.
pub(crate) fn sync(shared: &Shared, view: &mut View) -> Result<()> {
    let mut problems = Vec::new();
    let mut keys: Vec<(ReplicaKey, [u8; 32])> = Vec::new();
    let mut to_unwrap: Vec<(usize, Vec<u8>)> = Vec::new();
    for (suffix, entry) in &view.entries {
        let Some(kid) = suffix.strip_prefix(KEYS) else {
            continue;
        };
        let shown = truncate_for_message(kid);
        let mut k: StoredKey = match codec::decode(&entry.value) {
            Ok(k) => k,
            Err(e) => {
                problems.push(format!("record of key {shown:?} does not decode: {e}"));
                continue;
            }
        };
        if k.id != kid {
            problems.push(format!(
                "record under key {shown:?} is for {:?}",
                truncate_for_message(&k.id)
            ));
            continue;
        }
        let dig = key_digest(&k);
        let known = view.unwrapped.get(kid) == Some(&dig)
            && shared
                .keyring
                .holds_with_public(kid, k.public_key.as_slice());
        match (&shared.wrapper, known) {
            (_, true) => {
                k.material = Bin::default();
            }
            (Some(_), false) => {
                let wrapped = k.wrapped.take().filter(|w| !w.as_slice().is_empty());
                if !k.material.as_slice().is_empty() || wrapped.is_none() {
                    problems.push(format!(
                        "key {shown:?} is not wrapped: every key of a wrapped keyring carries Wrapped and no Material"
                    ));
                    continue;
                }
                let aad = match stored_aad(&k) {
                    Ok(a) => a,
                    Err(e) => {
                        problems.push(format!("key {shown:?}: {e}"));
                        continue;
                    }
                };
                to_unwrap.push((keys.len(), aad));
                k.material = wrapped.unwrap_or_default();
            }
            (None, false) => {
                if k.wrapped.is_some() {
                    problems.push(format!(
                        "key {shown:?} is wrapped, and this keyring was opened without a KEK"
                    ));
                    continue;
                }
            }
        }
        keys.push((ReplicaKey { stored: k, known }, dig));
    }
    if let Some(wrapper) = &shared.wrapper {
        let mut failed = Vec::new();
        {
            let items: Vec<WrapItem<'_>> = to_unwrap
                .iter()
                .map(|(i, aad)| {
                    let k = &keys[*i].0.stored;
                    WrapItem::new(&k.id, k.material.as_slice(), aad)
                })
                .collect();
            match wrapper.unwrap_many(&items) {
                Ok(plain) if plain.len() == items.len() => {
                    drop(items);
                    for ((i, _), p) in to_unwrap.iter().zip(plain) {
                        keys[*i].0.stored.material = Bin(p);
                    }
                }
                _ => {
                    // Find which: one at a time.
                    drop(items);
                    for (i, aad) in &to_unwrap {
                        let k = &keys[*i].0.stored;
                        match wrapper.unwrap(k.material.as_slice(), aad) {
                            Ok(p) if !p.is_empty() => keys[*i].0.stored.material = Bin(p),
                            Ok(_) => {
                                problems.push(format!(
                                    "key {:?} unwrapped to nothing",
                                    truncate_for_message(&k.id)
                                ));
                                failed.push(*i);
                            }
                            Err(e) => {
                                problems.push(format!(
                                    "key {:?} does not unwrap: {e}",
                                    truncate_for_message(&k.id)
                                ));
                                failed.push(*i);
                            }
                        }
                    }
                }
            }
        }
        for i in failed.into_iter().rev() {
            keys.remove(i);
        }
    }
    view.bad_records = problems.len();
    for p in &problems {
        view.note(p.clone());
    }
    let (replica, digests): (Vec<ReplicaKey>, Vec<[u8; 32]>) = keys.into_iter().unzip();
    match shared.keyring.replace_with_replica(&replica) {
        Ok(()) => {
            view.unwrapped = replica
                .iter()
                .zip(digests)
                .map(|(k, d)| (k.stored.id.clone(), d))
                .collect();
            Ok(())
        }
        Err(e) => {
            Counters::bump(&shared.counters.sync_failures);
            view.note(format!(
                "the records at revision {} do not make a keyring (the previous keys stay): {e}",
                view.revision
            ));
            Err(e)
        }
    }
}

/// Waits until the copy reflects `revision`.
pub(crate) fn wait_for_revision(shared: &Shared, revision: i64, timeout: Duration) -> bool {
    let deadline = crate::deadline::deadline_after(timeout);
    let mut view = shared.lock_view();
    while view.revision < revision {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        view = shared
            .advanced
            .wait_timeout(view, left)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    true
}

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
                shared.lock_view().note(format!("{why}; listing again"));
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
            let suffix = String::from_utf8_lossy(suffix).into_owned();
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
        if keys_changed {
            // A failure is noted in the view and counted; the watch goes on.
            let _ = sync(&shared, &mut view);
        }
        drop(view);
        shared
            .counters
            .events
            .fetch_add(applied, std::sync::atomic::Ordering::Relaxed);
        shared.advanced.notify_all();
    }
}

#[derive(Deserialize)]
struct TxnAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    responses: Vec<Op>,
}

#[derive(Deserialize)]
struct Op {
    #[serde(default)]
    response_range: Option<Counted>,
}

#[derive(Deserialize)]
struct Counted {
    #[serde(default, deserialize_with = "int64")]
    count: i64,
    #[serde(default)]
    kvs: Vec<serde::de::IgnoredAny>,
}

/// One linearizable read: the cluster's revision, how many records the
/// prefix holds, and whether any changed after `seen`.
fn check(shared: &Shared, seen: i64) -> std::result::Result<(i64, usize, bool), StoreError> {
    let prefix = shared.prefix.as_bytes();
    let (key, end) = (b64(prefix), b64(prefix_end(prefix)));
    let body = serde_json::json!({"success": [
        {"request_range": {"key": key, "range_end": end, "count_only": true}},
        {"request_range": {"key": key, "range_end": end, "keys_only": true, "limit": "1",
                           "min_mod_revision": (seen + 1).to_string()}},
    ]});
    let client = &shared.client;
    client.each_endpoint(|ep| {
        let text = client.post(ep, "/v3/kv/txn", &body)?;
        let malformed =
            |why: &str| StoreError::new(format!("etcd {ep}: malformed txn answer: {why}"));
        let resp: TxnAnswer = serde_json::from_str(&text).map_err(|e| malformed(&e.to_string()))?;
        let ranges: Vec<Option<&Counted>> = resp
            .responses
            .iter()
            .map(|op| op.response_range.as_ref())
            .collect();
        match (ranges.as_slice(), resp.header.revision) {
            ([Some(all), Some(changed)], revision) if all.count >= 0 && revision > 0 => Ok((
                revision,
                usize::try_from(all.count).unwrap_or(usize::MAX),
                !changed.kvs.is_empty(),
            )),
            _ => Err(malformed("expected two range answers and a revision")),
        }
    })
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
            Ok((_, count, changed)) => {
                Counters::bump(&shared.counters.checks);
                let mut view = shared.lock_view();
                // Current when nothing changed after `seen` and nothing was
                // deleted (a deletion leaves no key to find, but lowers the
                // count) — and the copy did not move meanwhile.
                let current = !changed && count == view.entries.len() && view.revision == seen;
                let restore = current && !view.stood_down.is_empty();
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
        i64::try_from(shared.settings.policy.rotation_threshold.as_secs()).unwrap_or(i64::MAX);
    for info in shared.keyring.keys() {
        if info.state != KeyState::Active || view.stood_down.contains(&info.algorithm) {
            continue;
        }
        let planned_end = info
            .create_time
            .max(info.publish_time)
            .saturating_add(threshold);
        if now >= planned_end && shared.keyring.stand_down(info.algorithm, now) {
            Counters::bump(&shared.counters.stand_downs);
            view.stood_down.push(info.algorithm);
            view.note(format!(
                "cut off from etcd past the planned end of {} key {} ({planned_end}): it no longer signs here until etcd answers",
                info.algorithm, info.kid
            ));
        }
    }
}
