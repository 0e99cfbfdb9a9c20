//! The mirror's freshness check: one linearizable read per interval that
//! either proves the view current or shows it behind (see
//! [`super::view::View::fence`] for why the proof holds).

use std::time::Instant;

use serde::Deserialize;

use super::client::Client;
use super::record::{Header, b64, int64, prefix_end};
use super::view::Shared;
use crate::state::StoreError;

#[derive(Deserialize)]
struct TxnResponse {
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

/// The thread body: runs until the mirror is dropped.
pub(super) fn run(shared: &Shared) {
    while !shared.sleep(shared.settings.check_interval) {
        let (seen, listed) = {
            let v = shared.read_view();
            (v.revision, v.listed)
        };
        if !listed {
            continue;
        }
        let sent_at = Instant::now();
        match check(shared, seen) {
            Ok((cluster, count, modified)) => {
                Shared::count(&shared.counters.checks);
                let current = shared
                    .write_view()
                    .fence(seen, cluster, count, modified, sent_at);
                if !current {
                    Shared::count(&shared.counters.checks_behind);
                }
                if cluster < seen {
                    shared.note_error(format!(
                        "etcd's revision went back from {seen} to {cluster} (a cluster restored from an older snapshot without --bump-revision?): answering from etcd, not memory, until the prefix is listed again"
                    ));
                }
            }
            Err(e) => {
                Shared::count(&shared.counters.check_failures);
                shared.note_error(format!("freshness check: {e}"));
            }
        }
    }
}

/// One read-only transaction (linearizable, one revision): the cluster's
/// revision, how many keys the prefix holds, and whether any of them changed
/// after `seen` (0 or 1).
///
/// etcd's `count` is taken before the `min_mod_revision` filter, so the second
/// read asks for at most one such key (etcd filters first, then applies the
/// limit) and looks at what came back.
fn check(shared: &Shared, seen: i64) -> Result<(i64, usize, usize), StoreError> {
    prefix_changes(shared.store.client(), &shared.allocations_prefix, seen)
}

/// The read behind a freshness check of any copy of `prefix` (the mirror's,
/// the replicated keyring's): the cluster's revision, how many keys the
/// prefix holds, and how many (0 or 1) changed after `seen`.
pub(crate) fn prefix_changes(
    client: &Client,
    prefix: &[u8],
    seen: i64,
) -> Result<(i64, usize, usize), StoreError> {
    let (key, end) = (b64(prefix), b64(prefix_end(prefix)));
    let body = serde_json::json!({"success": [
        {"request_range": {"key": key, "range_end": end, "count_only": true}},
        {"request_range": {"key": key, "range_end": end, "keys_only": true, "limit": "1",
                           "min_mod_revision": (seen + 1).to_string()}},
    ]});
    client.each_endpoint(|ep| {
        let text = client.post(ep, "/v3/kv/txn", &body)?;
        let malformed =
            |why: &str| StoreError::new(format!("etcd {ep}: malformed txn answer: {why}"));
        let resp: TxnResponse =
            serde_json::from_str(&text).map_err(|e| malformed(&e.to_string()))?;
        let ranges: Vec<Option<&Counted>> = resp
            .responses
            .iter()
            .map(|op| op.response_range.as_ref())
            .collect();
        match (ranges.as_slice(), resp.header.revision) {
            ([Some(all), Some(changed)], revision) if all.count >= 0 && revision > 0 => Ok((
                revision,
                usize::try_from(all.count).unwrap_or(usize::MAX),
                changed.kvs.len(),
            )),
            _ => Err(malformed("expected two range answers and a revision")),
        }
    })
}
