//! Each live server's record, `<prefix>servers/<id>` (DESIGN.md "Cluster
//! policy on etcd"): held with an etcd lease, so it vanishes when its
//! process stops or is cut off, and rewritten when what it says changes (the
//! keyring revision it applied, whether its rotator is elected).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::view::View;
use super::{EtcdKeyring, Shared};
use crate::codec::{self, wire_struct};
use crate::error::{Error, Result};
use crate::state::etcd::record::b64;

/// The suffix under which server records live.
pub(crate) const SERVERS: &str = "servers/";

wire_struct! {
    /// A server's record as stored (msgpack, codec names).
    pub(crate) struct ServerWire {
        /// The server's ID (the record's name after `servers/`).
        pub(crate) id: String => "ID",
        /// Where it listens.
        pub(crate) address: String => "Address",
        /// The issuer it serves (empty: none).
        pub(crate) issuer: String => "Issuer",
        /// When it started (Unix seconds).
        pub(crate) start_time: i64 => "StartTime",
        /// The keyring revision its copy has applied.
        pub(crate) revision: i64 => "Revision",
        /// Since when its rotator is elected (Unix seconds; 0: not).
        pub(crate) elected_since: i64 => "ElectedSince",
    }
}

/// A live server, as its record says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerRecord {
    /// Its ID (`<host>:<pid>` by default).
    pub id: String,
    /// Where it listens (`host:port`).
    pub address: String,
    /// The issuer it serves, if any.
    pub issuer: Option<String>,
    /// When it started (Unix seconds).
    pub start_time: i64,
    /// The keyring revision its copy has applied (the newest change to a
    /// key, the wrapping or the policy it holds).
    pub revision: i64,
    /// Since when its rotation candidate has been the elected rotator.
    pub elected_since: Option<i64>,
}

impl ServerRecord {
    /// A record for a server listening at `address`, started at
    /// `start_time`; the revision and election are filled in while it runs.
    pub fn new(id: &str, address: &str, issuer: Option<&str>, start_time: i64) -> ServerRecord {
        ServerRecord {
            id: id.to_string(),
            address: address.to_string(),
            issuer: issuer.map(str::to_string),
            start_time,
            revision: 0,
            elected_since: None,
        }
    }

    fn wire(&self) -> ServerWire {
        ServerWire {
            id: self.id.clone(),
            address: self.address.clone(),
            issuer: self.issuer.clone().unwrap_or_default(),
            start_time: self.start_time,
            revision: self.revision,
            elected_since: self.elected_since.unwrap_or(0),
        }
    }

    pub(crate) fn from_wire(w: ServerWire) -> ServerRecord {
        ServerRecord {
            id: w.id,
            address: w.address,
            issuer: (!w.issuer.is_empty()).then_some(w.issuer),
            start_time: w.start_time,
            revision: w.revision,
            elected_since: (w.elected_since != 0).then_some(w.elected_since),
        }
    }
}

/// The server records of a listing (undecodable ones left out).
pub(crate) fn records_of<'a>(
    entries: impl Iterator<Item = (&'a String, &'a [u8])>,
) -> Vec<ServerRecord> {
    entries
        .filter(|(suffix, _)| suffix.starts_with(SERVERS))
        .filter_map(|(_, value)| codec::decode::<ServerWire>(value).ok())
        .map(ServerRecord::from_wire)
        .collect()
}

impl View {
    /// The keyring revision the copy holds: the newest change to a key, the
    /// wrapping or the policy (server records and the election key do not
    /// count, so writing a server record never moves it).
    pub(crate) fn keyring_revision(&self) -> i64 {
        self.entries
            .iter()
            .filter(|(s, _)| {
                s.starts_with(super::view::KEYS)
                    || s.as_str() == super::view::WRAPPING
                    || s.as_str() == super::view::POLICY
            })
            .map(|(_, e)| e.mod_revision)
            .max()
            .unwrap_or(0)
    }
}

/// A server's leased record, kept alive and current by a thread until it is
/// dropped (then the lease is revoked and the record is gone at once).
pub struct ServerPresence {
    state: Arc<PresenceState>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ServerPresence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPresence")
            .field("id", &self.state.record.id)
            .finish_non_exhaustive()
    }
}

struct PresenceState {
    shared: Arc<Shared>,
    record: ServerRecord,
    elected: Option<Arc<AtomicI64>>,
    ttl: Duration,
    stop: super::stopper::Stopper,
    written: AtomicBool,
}

impl PresenceState {
    fn current(&self) -> ServerRecord {
        let mut r = self.record.clone();
        r.revision = self.shared.lock_view().keyring_revision();
        r.elected_since = self
            .elected
            .as_ref()
            .map(|c| c.load(Ordering::Acquire))
            .filter(|s| *s != 0);
        r
    }

    fn put(&self, record: &ServerRecord, lease: i64) -> Result<()> {
        let key = self.shared.key(&format!("{SERVERS}{}", record.id));
        let value = codec::encode(&record.wire())?;
        let body = serde_json::json!({
            "key": b64(&key), "value": b64(&value), "lease": lease.to_string(),
        });
        let client = &self.shared.client;
        client
            .each_endpoint(|ep| client.post(ep, "/v3/kv/put", &body))
            .map(drop)
            .map_err(|e| self.shared.unavailable(e.message))
    }

    fn sleep(&self, d: Duration) -> bool {
        self.stop.sleep(d) || self.shared.is_stopped()
    }

    fn run(&self) {
        let tick = (self.ttl / 4).max(Duration::from_millis(100));
        let mut lease = 0i64;
        let mut last: Option<ServerRecord> = None;
        let mut renewed = Instant::now();
        loop {
            let client = &self.shared.client;
            if lease == 0 {
                match super::lease::grant(client, self.ttl.as_secs().max(2)) {
                    Ok((id, _)) => {
                        lease = id;
                        last = None;
                        renewed = Instant::now();
                    }
                    Err(e) => log::debug!("server record: lease grant: {}", e.message),
                }
            } else if renewed.elapsed() >= tick {
                match super::lease::keep_alive(client, lease) {
                    Ok(left) if left > 0 => renewed = Instant::now(),
                    Ok(_) => lease = 0,
                    Err(e) => log::debug!("server record: keep-alive: {}", e.message),
                }
            }
            if lease != 0 {
                let now = self.current();
                if last.as_ref() != Some(&now) {
                    match self.put(&now, lease) {
                        Ok(()) => {
                            last = Some(now);
                            self.written.store(true, Ordering::Release);
                        }
                        Err(e) => log::debug!("server record: {e}"),
                    }
                }
            }
            if self.sleep(Duration::from_millis(200)) {
                if lease != 0 {
                    super::lease::revoke(client, lease);
                }
                return;
            }
        }
    }
}

impl ServerPresence {
    /// Whether the record has been written at least once.
    pub fn is_announced(&self) -> bool {
        self.state.written.load(Ordering::Acquire)
    }
}

impl Drop for ServerPresence {
    fn drop(&mut self) {
        self.state.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl EtcdKeyring {
    /// Keeps `record` at `<prefix>servers/<id>` with a lease of `ttl` (at
    /// least 2 s) while the returned handle lives: rewritten whenever the
    /// keyring revision this copy applied changes, or whether `rotator` is
    /// elected; gone at once when the handle is dropped, and a lease TTL
    /// after this process stops or is cut off. `wid keyring status` lists
    /// the records.
    pub fn announce_server(
        &self,
        record: ServerRecord,
        rotator: Option<&super::Rotator>,
        ttl: Duration,
    ) -> Result<ServerPresence> {
        if record.id.is_empty() || record.id.contains('/') {
            return Err(Error::invalid(
                "ServerRecord",
                "id",
                format!(
                    "{:?} is not a record name: expected a non-empty ID without '/' (host:pid)",
                    crate::error::truncate_for_message(&record.id)
                ),
            ));
        }
        let state = Arc::new(PresenceState {
            shared: Arc::clone(self.shared()),
            record,
            elected: rotator.map(super::Rotator::elected_cell),
            ttl: ttl.max(Duration::from_secs(2)),
            stop: super::stopper::Stopper::default(),
            written: AtomicBool::new(false),
        });
        let s = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("wid-server-record".into())
            .spawn(move || s.run())
            .map_err(|source| Error::Io {
                context: "starting the server record thread".into(),
                error: source,
            })?;
        Ok(ServerPresence {
            state,
            thread: Some(thread),
        })
    }

    /// The live servers, as this copy's records say.
    pub fn servers(&self) -> Vec<ServerRecord> {
        let v = self.shared().lock_view();
        records_of(v.entries.iter().map(|(k, e)| (k, e.value.as_slice())))
    }

    /// The keyring revision this copy has applied (see
    /// [`ServerRecord::revision`]).
    pub fn keyring_revision(&self) -> i64 {
        self.shared().lock_view().keyring_revision()
    }
}
