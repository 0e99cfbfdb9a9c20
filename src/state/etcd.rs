//! An etcd-backed [`StateStore`] (cargo feature `etcd`).
//!
//! Allocations are msgpack records (codec names, see [`crate::codec`]) under
//! `<prefix>/allocations/<ID>`, read over etcd's v3 JSON gateway
//! (`/v3/kv/range`, `/v3/kv/put`, `/v3/kv/txn`; plain HTTP). The two
//! consistency levels map exactly onto etcd's reads:
//!
//! * `Stale` is a *serializable* range read answered by the local member alone
//!   (cheap; may lag behind the cluster — seed 000);
//! * `Consistent` is a *linearizable* range read, agreed through the leader,
//!   tried on each configured endpoint in turn until one answers.
//!
//! Everything that is not a clear answer fails closed: an unreachable member, a
//! timeout, an etcd error status, an undecodable record, or a record whose client
//! status Nomad does not define is a [`StoreError`] (so `StoreUnavailable`),
//! never "missing" and never "live".

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::{AllocState, Consistency, StateStore, StoreError};
use crate::codec;
use crate::model::Allocation;

/// Where the cluster is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// The local member's client URL (e.g. `http://127.0.0.1:2379`), used for
    /// `Stale` reads.
    pub local_endpoint: String,
    /// Every member's client URL, tried in order for `Consistent` reads and
    /// writes.
    pub endpoints: Vec<String>,
    /// The key prefix (e.g. `/nomad`); records live at `<prefix>/allocations/<ID>`.
    pub prefix: String,
    /// Per-request timeout (default 2 s).
    pub timeout: Duration,
}

impl EtcdConfig {
    /// A configuration with the default 2 s timeout.
    pub fn new(local_endpoint: &str, endpoints: &[&str], prefix: &str) -> EtcdConfig {
        EtcdConfig {
            local_endpoint: local_endpoint.trim_end_matches('/').to_string(),
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_string())
                .collect(),
            prefix: prefix.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(2),
        }
    }

    /// Sets the per-request timeout (at most a day: longer values, up to
    /// `Duration::MAX`, saturate there instead of overflowing the clock).
    pub fn timeout(mut self, timeout: Duration) -> EtcdConfig {
        self.timeout = timeout.min(Duration::from_secs(24 * 3600));
        self
    }
}

/// The etcd store. Cheap to share (`Arc`); safe to call from many threads.
///
/// ```no_run
/// # // no_run: it needs an etcd cluster (tests/etcd_cluster.rs starts one).
/// use std::sync::Arc;
/// use workload_identity::{EtcdConfig, EtcdStore};
/// use workload_identity::{Audience, Keyring, Verifier};
///
/// let store = Arc::new(EtcdStore::new(EtcdConfig::new(
///     "http://127.0.0.1:2379", // this host's member: stale reads
///     &["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"],
///     "/nomad",
/// )));
/// let keyring = Keyring::load("/var/lib/wid/keystore")?;
/// let verifier = Verifier::builder(keyring, store, Audience::new("vault.io")?).build();
/// let identity = verifier.verify_now("eyJ...")?;
/// # let _ = identity;
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Debug)]
pub struct EtcdStore {
    config: EtcdConfig,
    agent: ureq::Agent,
}

#[derive(Deserialize)]
struct RangeResponse {
    #[serde(default)]
    kvs: Vec<Kv>,
}

#[derive(Deserialize)]
struct Kv {
    #[serde(default)]
    value: String,
}

impl EtcdStore {
    /// A store for `config`.
    pub fn new(config: EtcdConfig) -> EtcdStore {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        EtcdStore { config, agent }
    }

    fn key(&self, alloc_id: &str) -> String {
        format!("{}/allocations/{alloc_id}", self.config.prefix)
    }

    /// POSTs a JSON body to one endpoint; the body of a 200 answer, else an
    /// error naming the endpoint and what happened.
    fn post(
        &self,
        endpoint: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<String, StoreError> {
        let url = format!("{endpoint}{path}");
        let fail = |what: String| StoreError::new(format!("etcd {url}: {what}"));
        let mut resp = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.to_string())
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| fail(format!("reading the answer: {e}")))?;
        if status != 200 {
            return Err(fail(format!(
                "HTTP {status}: {}",
                crate::error::truncate_for_message(&text)
            )));
        }
        Ok(text)
    }

    fn range(
        &self,
        endpoint: &str,
        alloc_id: &str,
        serializable: bool,
    ) -> Result<AllocState, StoreError> {
        let body = serde_json::json!({
            "key": STANDARD.encode(self.key(alloc_id)),
            "serializable": serializable,
        });
        let text = self.post(endpoint, "/v3/kv/range", &body)?;
        let resp: RangeResponse = serde_json::from_str(&text).map_err(|e| {
            StoreError::new(format!("etcd {endpoint}: malformed range answer: {e}"))
        })?;
        let Some(kv) = resp.kvs.first() else {
            return Ok(AllocState::Missing);
        };
        let bytes = STANDARD.decode(&kv.value).map_err(|e| {
            StoreError::new(format!(
                "record of allocation {alloc_id:?}: bad base64: {}",
                crate::jwt::b64_problem(e)
            ))
        })?;
        let alloc: Allocation = codec::decode(&bytes)
            .map_err(|e| StoreError::new(format!("record of allocation {alloc_id:?}: {e}")))?;
        if alloc.id != alloc_id {
            return Err(StoreError::new(format!(
                "record under allocation {alloc_id:?} is for {:?}",
                alloc.id
            )));
        }
        let status = alloc
            .client_status()
            .map_err(|e| StoreError::new(format!("record of allocation {alloc_id:?}: {e}")))?;
        Ok(if status.is_terminal() {
            AllocState::Terminal
        } else {
            AllocState::Live
        })
    }

    /// Writes (or replaces) an allocation's record through the first member
    /// that accepts it: a helper for hosts and tests.
    pub fn put_allocation(&self, alloc: &Allocation) -> Result<(), StoreError> {
        let value = codec::encode(alloc).map_err(|e| StoreError::new(e.to_string()))?;
        let body = serde_json::json!({
            "key": STANDARD.encode(self.key(&alloc.id)),
            "value": STANDARD.encode(value),
        });
        self.each_endpoint(|ep| self.post(ep, "/v3/kv/put", &body).map(drop))
    }

    /// Writes an allocation's record only if none exists yet (a `/v3/kv/txn`
    /// comparing the key's create revision with 0); `Ok(false)` when one did.
    pub fn create_allocation(&self, alloc: &Allocation) -> Result<bool, StoreError> {
        let value = codec::encode(alloc).map_err(|e| StoreError::new(e.to_string()))?;
        let key = STANDARD.encode(self.key(&alloc.id));
        let body = serde_json::json!({
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": STANDARD.encode(value)}}],
        });
        let mut succeeded = false;
        self.each_endpoint(|ep| {
            let text = self.post(ep, "/v3/kv/txn", &body)?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| StoreError::new(format!("etcd {ep}: malformed txn answer: {e}")))?;
            succeeded = v["succeeded"].as_bool().unwrap_or(false);
            Ok(())
        })?;
        Ok(succeeded)
    }

    /// Runs `f` on each endpoint in order until one succeeds; all the errors
    /// when none does.
    fn each_endpoint(
        &self,
        mut f: impl FnMut(&str) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut errors = Vec::new();
        for ep in &self.config.endpoints {
            match f(ep) {
                Ok(()) => return Ok(()),
                Err(e) => errors.push(e.message),
            }
        }
        if errors.is_empty() {
            errors.push("no endpoints configured".into());
        }
        Err(StoreError::new(format!(
            "no etcd member answered: {}",
            errors.join("; ")
        )))
    }
}

impl StateStore for EtcdStore {
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> Result<AllocState, StoreError> {
        match consistency {
            Consistency::Stale => self.range(&self.config.local_endpoint, alloc_id, true),
            Consistency::Consistent => {
                let mut answer = None;
                self.each_endpoint(|ep| {
                    answer = Some(self.range(ep, alloc_id, false)?);
                    Ok(())
                })?;
                answer.ok_or_else(|| StoreError::new("no etcd member answered"))
            }
        }
    }
}
