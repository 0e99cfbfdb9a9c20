//! etcd leases, for the records that must vanish with their process: the
//! rotator's election key and each server's `servers/<id>` record.

use serde::Deserialize;

use crate::state::StoreError;
use crate::state::etcd::client::Client;
use crate::state::etcd::record::int64;

#[derive(Deserialize)]
struct Granted {
    #[serde(default, rename = "ID", deserialize_with = "int64")]
    id: i64,
    #[serde(default, rename = "TTL", deserialize_with = "int64")]
    ttl: i64,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct KeptAlive {
    #[serde(default)]
    result: Option<Granted>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

fn post(
    client: &Client,
    path: &str,
    body: &serde_json::Value,
) -> std::result::Result<String, StoreError> {
    client.each_endpoint(|ep| client.post(ep, path, body))
}

/// A new lease of `ttl_secs`: its ID and the TTL etcd granted.
pub(crate) fn grant(client: &Client, ttl_secs: u64) -> std::result::Result<(i64, i64), StoreError> {
    let text = post(
        client,
        "/v3/lease/grant",
        &serde_json::json!({"TTL": ttl_secs.to_string()}),
    )?;
    let g: Granted = serde_json::from_str(&text)
        .map_err(|e| StoreError::new(format!("malformed lease grant answer: {e}")))?;
    match (g.error, g.id) {
        (Some(e), _) => Err(StoreError::new(format!("lease grant refused: {e}"))),
        (None, id) if id != 0 => Ok((id, g.ttl)),
        _ => Err(StoreError::new("the lease grant answer holds no lease ID")),
    }
}

/// One keep-alive; the TTL etcd says is left (0 or less: the lease is gone).
pub(crate) fn keep_alive(client: &Client, lease: i64) -> std::result::Result<i64, StoreError> {
    let text = post(
        client,
        "/v3/lease/keepalive",
        &serde_json::json!({"ID": lease.to_string()}),
    )?;
    // The gateway streams: one JSON message per line; the first answers.
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let k: KeptAlive = serde_json::from_str(line)
        .map_err(|e| StoreError::new(format!("malformed keep-alive answer: {e}")))?;
    if let Some(e) = k.error {
        return Err(StoreError::new(format!(
            "keep-alive refused: {}",
            crate::error::truncate_for_message(&e.to_string())
        )));
    }
    Ok(k.result.map_or(0, |g| g.ttl))
}

/// Gives the lease up (best effort): its keys are deleted.
pub(crate) fn revoke(client: &Client, lease: i64) {
    let _ = post(
        client,
        "/v3/lease/revoke",
        &serde_json::json!({"ID": lease.to_string()}),
    );
}
