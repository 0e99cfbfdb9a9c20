//! Where allocations (and client nodes) live: the `StateStore` trait and the
//! in-memory store.
//!
//! Verification asks the store whether the allocation a token names exists and
//! is not terminal. Stores answer at two consistency levels, because replicas lag
//! (seed 000): a `Stale` read is answered locally and may miss a fresh
//! allocation; a `Consistent` read is agreed with the leader. The verifier reads
//! `Stale` first and only on *missing* reads again `Consistent`; a store error
//! always fails closed.

#[cfg(feature = "etcd")]
pub(crate) mod etcd;

use std::collections::HashMap;
use std::fmt;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::counter::Counter;
use crate::model::Allocation;

/// How fresh a read must be.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Consistency {
    /// Answered by the local replica; may lag behind (`WID_CONSISTENCY_STALE`).
    Stale = 0,
    /// Agreed with the leader; never behind (`WID_CONSISTENCY_CONSISTENT`).
    Consistent = 1,
}

/// What a store knows about an allocation.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllocState {
    /// No such allocation (`WID_ALLOC_MISSING`).
    Missing = 0,
    /// Exists and is not terminal (`WID_ALLOC_LIVE`).
    Live = 1,
    /// Exists and is client-terminal (`WID_ALLOC_TERMINAL`).
    Terminal = 2,
}

impl AllocState {
    /// The state of `alloc` by Nomad's client-terminal rule (an unrecognised
    /// client status counts as terminal).
    pub fn of(alloc: &Allocation) -> AllocState {
        if alloc.is_client_terminal() {
            AllocState::Terminal
        } else {
            AllocState::Live
        }
    }
}

/// What a store knows about a client node (for node identity tokens).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeState {
    /// No such node (`WID_NODE_MISSING`).
    Missing = 0,
    /// Registered and not down: `ready`, `initializing`, or `disconnected`
    /// (a node Nomad expects back, which needs its identity to reconnect)
    /// (`WID_NODE_LIVE`).
    Live = 1,
    /// `down`, or a status Nomad does not define (`WID_NODE_DOWN`).
    Down = 2,
}

impl NodeState {
    /// The state of a node whose Nomad status is `status`: `ready`,
    /// `initializing` and `disconnected` are live, `down` is down, and so is
    /// any status Nomad does not define (fail closed).
    pub fn of_status(status: &str) -> NodeState {
        match status {
            "ready" | "initializing" | "disconnected" => NodeState::Live,
            _ => NodeState::Down,
        }
    }

    /// The state of `node` by its `Status`.
    pub fn of(node: &crate::model::Node) -> NodeState {
        NodeState::of_status(&node.status)
    }
}

/// A store could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    /// What went wrong.
    pub message: String,
}

impl StoreError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> StoreError {
        StoreError {
            message: message.into(),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}

/// A source of allocation states. Called from any thread that verifies.
///
/// Implement it over your scheduler's state. A `Stale` read may lag (a local
/// replica); a `Consistent` read must not. Return an error rather than guess:
/// the verifier then fails closed.
///
/// ```
/// use std::collections::HashMap;
/// use workload_identity::StoreError;
/// use workload_identity::{AllocState, Consistency, StateStore};
///
/// /// A replica that answers stale reads and asks the leader for consistent ones.
/// struct Replica {
///     local: HashMap<String, AllocState>,
///     leader: HashMap<String, AllocState>,
/// }
///
/// impl StateStore for Replica {
///     fn allocation_state(&self, id: &str, c: Consistency) -> Result<AllocState, StoreError> {
///         let view = match c {
///             Consistency::Stale => &self.local,
///             _ => &self.leader, // Consistent (and any future level): the leader
///         };
///         Ok(view.get(id).copied().unwrap_or(AllocState::Missing))
///     }
/// }
///
/// let r = Replica {
///     local: HashMap::new(),
///     leader: HashMap::from([("a1".to_string(), AllocState::Live)]),
/// };
/// assert_eq!(r.allocation_state("a1", Consistency::Stale), Ok(AllocState::Missing));
/// assert_eq!(r.allocation_state("a1", Consistency::Consistent), Ok(AllocState::Live));
/// ```
pub trait StateStore: Send + Sync {
    /// The state of allocation `alloc_id` at the requested consistency.
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> Result<AllocState, StoreError>;

    /// Why `alloc_id` counts as terminal, when the store knows more than its
    /// state (an unknown client status, say): asked only after it answered
    /// `Terminal`, for the error message. The default knows nothing more.
    fn terminal_detail(&self, alloc_id: &str) -> Option<String> {
        let _ = alloc_id;
        None
    }

    /// The state of client node `node_id` at the requested consistency, for
    /// node identity tokens (read as allocations are: `Stale` first, then
    /// `Consistent` on missing). The default answers with an error, so a
    /// store that does not know nodes fails closed (`StoreUnavailable`).
    fn node_state(&self, node_id: &str, consistency: Consistency) -> Result<NodeState, StoreError> {
        let _ = (node_id, consistency);
        Err(StoreError::new(
            "this state store does not answer node lookups (StateStore::node_state), so node identity tokens cannot be verified against it",
        ))
    }
}

#[derive(Default)]
struct Views {
    /// The leader's view.
    consistent: HashMap<String, AllocState>,
    /// The local replica's view.
    stale: HashMap<String, AllocState>,
    lagging: bool,
    unavailable: Option<String>,
    /// Client statuses Nomad does not define, by allocation: they count as
    /// terminal, and the error says why.
    unknown_status: HashMap<String, String>,
    /// Nodes, in the leader's view and the local replica's.
    nodes: HashMap<String, NodeState>,
    nodes_stale: HashMap<String, NodeState>,
}

/// One shard of the allocations, alone on its cache lines. `lagging` and
/// `unavailable` are the same in every shard (set with all shards locked).
#[derive(Default)]
#[repr(align(128))]
struct Shard(RwLock<Views>);

/// Shards: allocations spread by a hash of their ID, so that verifications of
/// different allocations on different threads take different locks.
const SHARDS: usize = 32;

/// The embedded in-memory store. It can also model a replica whose stale view
/// lags its consistent view (for tests and examples): while lagging, writes reach
/// only the consistent view until [`MemoryStore::catch_up`].
///
/// Reads of different allocations scale with threads: the allocations are
/// spread over 32 locks, and the read counters are striped.
pub struct MemoryStore {
    shards: Box<[Shard]>,
    stale_reads: Counter,
    consistent_reads: Counter,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            stale_reads: Counter::default(),
            consistent_reads: Counter::default(),
        }
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let allocations: usize = self.shards.iter().map(|s| read(s).consistent.len()).sum();
        f.debug_struct("MemoryStore")
            .field("allocations", &allocations)
            .field("lagging", &read(&self.shards[0]).lagging)
            .finish()
    }
}

fn read(shard: &Shard) -> RwLockReadGuard<'_, Views> {
    shard.0.read().unwrap_or_else(PoisonError::into_inner)
}

fn write(shard: &Shard) -> RwLockWriteGuard<'_, Views> {
    shard.0.write().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The shard holding `alloc_id` (FNV-1a of its bytes).
    fn shard(&self, alloc_id: &str) -> &Shard {
        let hash = alloc_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        &self.shards[(hash % SHARDS as u64) as usize]
    }

    /// Every shard, locked for writing in order: for the store-wide settings.
    fn write_all(&self) -> Vec<RwLockWriteGuard<'_, Views>> {
        self.shards.iter().map(write).collect()
    }

    /// Records `alloc` (its state by Nomad's client-terminal rule). A client
    /// status Nomad does not define (`"Completed"`, `""`) counts as terminal, so
    /// verification fails closed with a message naming the status.
    pub fn upsert(&self, alloc: &Allocation) {
        match alloc.client_status() {
            Ok(status) if status.is_terminal() => self.set_state(&alloc.id, AllocState::Terminal),
            Ok(_) => self.set_state(&alloc.id, AllocState::Live),
            Err(e) => {
                log::warn!("allocation {:?} counts as terminal: {e}", alloc.id);
                let mut v = write(self.shard(&alloc.id));
                set_state(&mut v, &alloc.id, AllocState::Terminal);
                v.unknown_status
                    .insert(alloc.id.clone(), alloc.client_status.clone());
            }
        }
    }

    /// Records a state directly (`Missing` removes the allocation).
    pub fn set_state(&self, alloc_id: &str, state: AllocState) {
        set_state(&mut write(self.shard(alloc_id)), alloc_id, state);
    }

    /// Records a node by its `Status` (see [`NodeState::of`]).
    pub fn upsert_node(&self, node: &crate::model::Node) {
        self.set_node_state(&node.id, NodeState::of(node));
    }

    /// Records a node's state directly (`Missing` removes the node); like
    /// allocations, while lagging only the consistent view sees it.
    pub fn set_node_state(&self, node_id: &str, state: NodeState) {
        let mut v = write(self.shard(node_id));
        let lagging = v.lagging;
        let Views {
            nodes, nodes_stale, ..
        } = &mut *v;
        let views = if lagging {
            vec![nodes]
        } else {
            vec![nodes, nodes_stale]
        };
        for view in views {
            if state == NodeState::Missing {
                view.remove(node_id);
            } else {
                view.insert(node_id.to_string(), state);
            }
        }
    }

    /// Starts (true) or stops (false, catching up) modelling a lagging replica.
    pub fn set_lagging(&self, lagging: bool) {
        for mut v in self.write_all() {
            v.lagging = lagging;
            if !lagging {
                v.stale = v.consistent.clone();
                v.nodes_stale = v.nodes.clone();
            }
        }
    }

    /// Brings the stale view up to date (replication caught up).
    pub fn catch_up(&self) {
        for mut v in self.write_all() {
            v.stale = v.consistent.clone();
            v.nodes_stale = v.nodes.clone();
        }
    }

    /// Makes every read fail with `message` (`None` restores service).
    pub fn set_unavailable(&self, message: Option<&str>) {
        for mut v in self.write_all() {
            v.unavailable = message.map(str::to_string);
        }
    }

    /// How many reads at `consistency` this store has answered or failed.
    pub fn reads(&self, consistency: Consistency) -> u64 {
        match consistency {
            Consistency::Stale => self.stale_reads.get(),
            Consistency::Consistent => self.consistent_reads.get(),
        }
    }
}

/// Records `state` for `alloc_id` in one shard's views.
fn set_state(v: &mut Views, alloc_id: &str, state: AllocState) {
    v.unknown_status.remove(alloc_id);
    let views = if v.lagging {
        vec![&mut v.consistent]
    } else {
        vec![&mut v.consistent, &mut v.stale]
    };
    for view in views {
        if state == AllocState::Missing {
            view.remove(alloc_id);
        } else {
            view.insert(alloc_id.to_string(), state);
        }
    }
}

impl StateStore for MemoryStore {
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> Result<AllocState, StoreError> {
        let counter = match consistency {
            Consistency::Stale => &self.stale_reads,
            Consistency::Consistent => &self.consistent_reads,
        };
        counter.bump();
        let v = read(self.shard(alloc_id));
        if let Some(msg) = &v.unavailable {
            return Err(StoreError::new(msg.clone()));
        }
        let view = match consistency {
            Consistency::Stale => &v.stale,
            Consistency::Consistent => &v.consistent,
        };
        Ok(view.get(alloc_id).copied().unwrap_or(AllocState::Missing))
    }

    fn node_state(&self, node_id: &str, consistency: Consistency) -> Result<NodeState, StoreError> {
        let counter = match consistency {
            Consistency::Stale => &self.stale_reads,
            Consistency::Consistent => &self.consistent_reads,
        };
        counter.bump();
        let v = read(self.shard(node_id));
        if let Some(msg) = &v.unavailable {
            return Err(StoreError::new(msg.clone()));
        }
        let view = match consistency {
            Consistency::Stale => &v.nodes_stale,
            Consistency::Consistent => &v.nodes,
        };
        Ok(view.get(node_id).copied().unwrap_or(NodeState::Missing))
    }

    fn terminal_detail(&self, alloc_id: &str) -> Option<String> {
        let v = read(self.shard(alloc_id));
        v.unknown_status.get(alloc_id).map(|status| {
            format!(
                "unknown client status {:?} (expected one of pending, running, complete, failed, lost, unknown); a status Nomad does not define counts as terminal",
                crate::error::truncate_for_message(status)
            )
        })
    }
}

impl<T: StateStore + ?Sized> StateStore for std::sync::Arc<T> {
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> Result<AllocState, StoreError> {
        (**self).allocation_state(alloc_id, consistency)
    }

    fn terminal_detail(&self, alloc_id: &str) -> Option<String> {
        (**self).terminal_detail(alloc_id)
    }

    fn node_state(&self, node_id: &str, consistency: Consistency) -> Result<NodeState, StoreError> {
        (**self).node_state(node_id, consistency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lagging_replica_misses_fresh_writes_until_it_catches_up() {
        let s = MemoryStore::new();
        s.set_state("a", AllocState::Live);
        s.set_lagging(true);
        s.set_state("b", AllocState::Live);
        s.set_state("a", AllocState::Terminal);
        assert_eq!(
            s.allocation_state("b", Consistency::Stale),
            Ok(AllocState::Missing)
        );
        assert_eq!(
            s.allocation_state("b", Consistency::Consistent),
            Ok(AllocState::Live)
        );
        assert_eq!(
            s.allocation_state("a", Consistency::Stale),
            Ok(AllocState::Live)
        );
        assert_eq!(
            s.allocation_state("a", Consistency::Consistent),
            Ok(AllocState::Terminal)
        );
        s.catch_up();
        assert_eq!(
            s.allocation_state("b", Consistency::Stale),
            Ok(AllocState::Live)
        );
        assert_eq!(s.reads(Consistency::Stale), 3);
        assert_eq!(s.reads(Consistency::Consistent), 2);
        s.set_unavailable(Some("replica down"));
        assert_eq!(
            s.allocation_state("b", Consistency::Stale),
            Err(StoreError::new("replica down"))
        );
    }
}
