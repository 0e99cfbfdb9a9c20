//! etcd-backed [`StateStore`]s (cargo feature `etcd`).
//!
//! Allocations are msgpack records (codec names, see [`crate::codec`]) under
//! `<prefix>/allocations/<ID>`, client nodes (for node identity tokens) under
//! `<prefix>/nodes/<ID>` (a `Node` with its `Status`), read over etcd's v3 JSON gateway (`/v3/kv/range`,
//! `/v3/kv/put`, `/v3/kv/txn`, `/v3/watch`) over TLS, optionally with a client
//! certificate and etcd's username/password auth ([`EtcdConfig`]).
//!
//! Two stores:
//!
//! * [`EtcdStore`] asks the cluster on every read. `Stale` is a
//!   *serializable* range read answered by the local member alone (may lag —
//!   seed 000); `Consistent` is a *linearizable* read, agreed through the
//!   leader, tried on each configured endpoint in turn.
//! * [`EtcdMirror`] answers `Stale` reads from an in-memory copy of
//!   `<prefix>/allocations/`, kept current by a watch, and only while that copy
//!   is proven current within a bound; `Consistent` reads go to the cluster
//!   exactly as [`EtcdStore`]'s do. Node lookups are not mirrored (a node
//!   token is checked once per heartbeat, not per request): they go to the
//!   cluster as [`EtcdStore`]'s do.
//!
//! Everything that is not a clear answer fails closed: an unreachable member, a
//! timeout, a refused certificate or token, an etcd error status, an
//! undecodable record, or a record whose client status Nomad does not define is
//! a [`StoreError`] (so `StoreUnavailable`), never "missing" and never "live".

pub(crate) mod client;
mod config;
pub(crate) mod fence;
mod mirror;
pub(crate) mod record;
mod view;
pub(crate) mod watch;

use std::time::Duration;

pub use config::EtcdConfig;
pub use mirror::{EtcdMirror, EtcdMirrorBuilder, EtcdMirrorStats};

use self::client::Client;
use self::record::{RangeResponse, b64, decode_node_record, decode_record, unb64};
use super::{AllocState, Consistency, NodeState, StateStore, StoreError};
use crate::codec;
use crate::error::Result;
use crate::model::{Allocation, Node};

/// The etcd store: every read asks the cluster. Cheap to share (`Arc`); safe
/// to call from many threads.
///
/// ```no_run
/// # // no_run: it needs an etcd cluster (tests/etcd_cluster.rs starts one).
/// use std::sync::Arc;
/// use workload_identity::{EtcdConfig, EtcdStore};
/// use workload_identity::{Audience, Keyring, Verifier};
///
/// let ca = std::fs::read("/etc/etcd/ca.pem")?;
/// let cert = std::fs::read("/etc/wid/etcd-client.pem")?;
/// let key = std::fs::read("/etc/wid/etcd-client-key.pem")?;
/// let config = EtcdConfig::new(
///     "https://127.0.0.1:2379", // this host's member: stale reads
///     &["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"],
///     "/nomad",
/// )
/// .ca_bundle_pem(ca)
/// .client_certificate_pem(cert, key)
/// .credentials("wid", &std::env::var("ETCD_PASSWORD").unwrap_or_default());
/// let store = Arc::new(EtcdStore::new(config)?);
/// let keyring = Keyring::load("/var/lib/wid/keystore")?;
/// let verifier = Verifier::builder(keyring, store, Audience::new("vault.io")?).build();
/// let identity = verifier.verify_now("eyJ...")?;
/// # let _ = identity;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EtcdStore {
    client: Client,
}

impl EtcdStore {
    /// A store for `config`. Fails when an endpoint is not an `https://` URL
    /// (unless plain HTTP was allowed), or a CA bundle, certificate or key
    /// does not parse. Nothing is contacted yet.
    pub fn new(config: EtcdConfig) -> Result<EtcdStore> {
        Ok(EtcdStore {
            client: Client::new(config, Duration::from_secs(60))?,
        })
    }

    fn client(&self) -> &Client {
        &self.client
    }

    fn key(&self, alloc_id: &str) -> String {
        format!("{}/allocations/{alloc_id}", self.client.config.prefix)
    }

    fn range(
        &self,
        endpoint: &str,
        alloc_id: &str,
        serializable: bool,
    ) -> std::result::Result<AllocState, StoreError> {
        let body = serde_json::json!({
            "key": b64(self.key(alloc_id)),
            "serializable": serializable,
        });
        let text = self.client.post(endpoint, "/v3/kv/range", &body)?;
        let resp: RangeResponse = serde_json::from_str(&text).map_err(|e| {
            StoreError::new(format!("etcd {endpoint}: malformed range answer: {e}"))
        })?;
        let Some(kv) = resp.kvs.first() else {
            return Ok(AllocState::Missing);
        };
        let shown = crate::error::truncate_for_message(alloc_id);
        let bytes = unb64("the record", &kv.value)
            .map_err(|e| StoreError::new(format!("record of allocation {shown:?}: {e}")))?;
        decode_record(alloc_id, &bytes).map_err(StoreError::new)
    }

    fn node_key(&self, node_id: &str) -> String {
        format!("{}/nodes/{node_id}", self.client.config.prefix)
    }

    fn node_range(
        &self,
        endpoint: &str,
        node_id: &str,
        serializable: bool,
    ) -> std::result::Result<NodeState, StoreError> {
        let body = serde_json::json!({
            "key": b64(self.node_key(node_id)),
            "serializable": serializable,
        });
        let text = self.client.post(endpoint, "/v3/kv/range", &body)?;
        let resp: RangeResponse = serde_json::from_str(&text).map_err(|e| {
            StoreError::new(format!("etcd {endpoint}: malformed range answer: {e}"))
        })?;
        let Some(kv) = resp.kvs.first() else {
            return Ok(NodeState::Missing);
        };
        let shown = crate::error::truncate_for_message(node_id);
        let bytes = unb64("the record", &kv.value)
            .map_err(|e| StoreError::new(format!("record of node {shown:?}: {e}")))?;
        decode_node_record(node_id, &bytes).map_err(StoreError::new)
    }

    /// A node lookup: `Stale` a serializable read of the local member,
    /// `Consistent` a linearizable read through the first member that
    /// answers.
    pub(crate) fn node_lookup(
        &self,
        node_id: &str,
        consistency: Consistency,
    ) -> std::result::Result<NodeState, StoreError> {
        match consistency {
            Consistency::Stale => {
                self.node_range(&self.client.config.local_endpoint, node_id, true)
            }
            Consistency::Consistent => self
                .client
                .each_endpoint(|ep| self.node_range(ep, node_id, false)),
        }
    }

    /// Writes (or replaces) a node's record (`<prefix>/nodes/<ID>`, a
    /// msgpack `Node` with its `Status`) through the first member that
    /// accepts it: a helper for hosts and tests.
    pub fn put_node(&self, node: &Node) -> std::result::Result<(), StoreError> {
        let value = codec::encode(node).map_err(|e| StoreError::new(e.to_string()))?;
        let body = serde_json::json!({
            "key": b64(self.node_key(&node.id)),
            "value": b64(value),
        });
        self.client
            .each_endpoint(|ep| self.client.post(ep, "/v3/kv/put", &body).map(drop))
    }

    /// Removes a node's record through the first member that accepts it.
    pub fn delete_node(&self, node_id: &str) -> std::result::Result<(), StoreError> {
        let body = serde_json::json!({ "key": b64(self.node_key(node_id)) });
        self.client
            .each_endpoint(|ep| self.client.post(ep, "/v3/kv/deleterange", &body).map(drop))
    }

    /// A linearizable read through the first member that answers.
    fn consistent(&self, alloc_id: &str) -> std::result::Result<AllocState, StoreError> {
        self.client
            .each_endpoint(|ep| self.range(ep, alloc_id, false))
    }

    /// Writes (or replaces) an allocation's record through the first member
    /// that accepts it: a helper for hosts and tests.
    pub fn put_allocation(&self, alloc: &Allocation) -> std::result::Result<(), StoreError> {
        let value = codec::encode(alloc).map_err(|e| StoreError::new(e.to_string()))?;
        let body = serde_json::json!({
            "key": b64(self.key(&alloc.id)),
            "value": b64(value),
        });
        self.client
            .each_endpoint(|ep| self.client.post(ep, "/v3/kv/put", &body).map(drop))
    }

    /// Removes an allocation's record (as Nomad's garbage collection does)
    /// through the first member that accepts it.
    pub fn delete_allocation(&self, alloc_id: &str) -> std::result::Result<(), StoreError> {
        let body = serde_json::json!({ "key": b64(self.key(alloc_id)) });
        self.client
            .each_endpoint(|ep| self.client.post(ep, "/v3/kv/deleterange", &body).map(drop))
    }

    /// Writes an allocation's record only if none exists yet (a `/v3/kv/txn`
    /// comparing the key's create revision with 0); `Ok(false)` when one did.
    pub fn create_allocation(&self, alloc: &Allocation) -> std::result::Result<bool, StoreError> {
        let value = codec::encode(alloc).map_err(|e| StoreError::new(e.to_string()))?;
        let key = b64(self.key(&alloc.id));
        let body = serde_json::json!({
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": b64(value)}}],
        });
        self.client.each_endpoint(|ep| {
            let text = self.client.post(ep, "/v3/kv/txn", &body)?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| StoreError::new(format!("etcd {ep}: malformed txn answer: {e}")))?;
            Ok(v["succeeded"].as_bool().unwrap_or(false))
        })
    }
}

impl StateStore for EtcdStore {
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> std::result::Result<AllocState, StoreError> {
        match consistency {
            Consistency::Stale => self.range(&self.client.config.local_endpoint, alloc_id, true),
            Consistency::Consistent => self.consistent(alloc_id),
        }
    }

    fn node_state(
        &self,
        node_id: &str,
        consistency: Consistency,
    ) -> std::result::Result<NodeState, StoreError> {
        self.node_lookup(node_id, consistency)
    }
}
