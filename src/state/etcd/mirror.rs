//! [`EtcdMirror`]: `Stale` reads from memory, kept current by a watch, and
//! trusted only while proven current within a bound.
//!
//! Three parts, one thread each side of the lock:
//!
//! * the **view** ([`super::view`]): the records under `<prefix>/allocations/`, the
//!   revision they are complete up to, and the last moment they were *proven*
//!   current;
//! * the **watch** ([`super::watch`]): lists the prefix, then applies every
//!   change from the next revision on; on a cut stream it resumes from the last
//!   revision it applied (another member if need be), on a compacted revision
//!   it lists again;
//! * the **fence** ([`super::fence`]): every check interval a linearizable
//!   read learns the cluster's revision R and how the prefix looks at R; when
//!   the view provably equals the prefix at R, the view was current when the
//!   read was sent.
//!
//! A `Stale` read is answered from memory only when that proof is younger than
//! the configured maximum lag; otherwise it is a linearizable read on the
//! cluster. A stuck watch, a partitioned member or a wedged thread can
//! therefore keep a terminal allocation "live" for at most the maximum lag.
//! Progress notifications are not trusted as proof (etcd before 3.4.25 and
//! 3.5.8 could send them ahead of pending events).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::view::{Counters, Settings, Shared, View};
use super::{EtcdConfig, EtcdStore};
use crate::error::{Error, Result};
use crate::state::{AllocState, Consistency, NodeState, StateStore, StoreError};

/// A [`StateStore`] that answers `Stale` reads from an in-memory mirror of
/// `<prefix>/allocations/`, fed by an etcd watch, at memory speed.
///
/// * `Stale` reads come from memory while the mirror was proven current
///   within [`max_lag`](EtcdMirrorBuilder::max_lag); past it, they are
///   linearizable reads on the cluster (counted in
///   [`EtcdMirrorStats::stale_from_cluster`]).
/// * `Consistent` reads are linearizable reads on the cluster, exactly as
///   [`EtcdStore`]'s.
/// * A record that does not decode fails closed for its allocation only.
///
/// Two threads run per mirror (the watch and the freshness check); they stop
/// when the last handle is dropped (the watch after its current read, which
/// the idle timeout bounds).
///
/// ```no_run
/// # // no_run: it needs an etcd cluster (tests/etcd_cluster.rs starts one).
/// use std::sync::Arc;
/// use std::time::Duration;
/// use workload_identity::{EtcdConfig, EtcdMirror};
/// use workload_identity::{Audience, Keyring, Verifier};
///
/// let config = EtcdConfig::new("https://127.0.0.1:2379", &["https://10.0.0.1:2379"], "/nomad")
///     .ca_bundle_pem(std::fs::read("/etc/etcd/ca.pem")?);
/// let mirror = Arc::new(EtcdMirror::builder(config).max_lag(Duration::from_secs(2)).start()?);
/// mirror.wait_ready(Duration::from_secs(10));
/// let verifier = Verifier::builder(Keyring::load("/var/lib/wid/keystore")?, mirror.clone(),
///     Audience::new("vault.io")?).build();
/// # let _ = verifier;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EtcdMirror {
    shared: Arc<Shared>,
}

impl fmt::Debug for EtcdMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdMirror")
            .field("store", &self.shared.store)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

/// Builds an [`EtcdMirror`].
#[derive(Debug)]
pub struct EtcdMirrorBuilder {
    config: EtcdConfig,
    settings: Settings,
    check_interval_set: bool,
}

/// Longest duration setting accepted; longer ones saturate here.
const LONGEST: Duration = Duration::from_secs(24 * 3600);

impl EtcdMirrorBuilder {
    /// The longest a `Stale` answer may come from memory after the mirror was
    /// last proven current (default 2 s; at least 10 ms). This bounds how long
    /// a stuck mirror can call a terminal allocation live.
    pub fn max_lag(mut self, max_lag: Duration) -> EtcdMirrorBuilder {
        self.settings.max_lag = max_lag.clamp(Duration::from_millis(10), LONGEST);
        self
    }

    /// How often the freshness check runs (default a quarter of the maximum
    /// lag; at least 5 ms). Each check is one linearizable read on the cluster.
    pub fn check_interval(mut self, interval: Duration) -> EtcdMirrorBuilder {
        self.settings.check_interval = interval.clamp(Duration::from_millis(5), LONGEST);
        self.check_interval_set = true;
        self
    }

    /// The most records the mirror keeps (default 1,000,000). A prefix that
    /// holds more turns the mirror off (every read goes to the cluster and
    /// [`EtcdMirrorStats::overflowed`] says so) until a listing fits again.
    pub fn max_allocations(mut self, n: usize) -> EtcdMirrorBuilder {
        self.settings.max_allocations = n;
        self
    }

    /// How long the watch may be silent before its connection is dropped and
    /// reopened from the last revision (default 30 s). A silent watch is not
    /// a problem by itself: freshness is proven by the check, not by traffic.
    pub fn watch_idle_timeout(mut self, idle: Duration) -> EtcdMirrorBuilder {
        self.settings.watch_idle = idle.clamp(Duration::from_millis(100), LONGEST);
        self
    }

    /// Starts the watch and the freshness check. Returns at once; until the
    /// first listing lands, `Stale` reads go to the cluster (see
    /// [`EtcdMirror::wait_ready`]). Fails as [`EtcdStore::new`] does.
    pub fn start(mut self) -> Result<EtcdMirror> {
        if !self.check_interval_set {
            self.settings.check_interval =
                (self.settings.max_lag / 4).max(Duration::from_millis(5));
        }
        if self.settings.check_interval >= self.settings.max_lag {
            return Err(Error::invalid(
                "EtcdMirror",
                "check_interval",
                format!(
                    "{:?} is not shorter than the maximum lag {:?}: the mirror could never be proven current in time",
                    self.settings.check_interval, self.settings.max_lag
                ),
            ));
        }
        let allocations_prefix = format!("{}/allocations/", self.config.prefix).into_bytes();
        let store = EtcdStore {
            client: super::Client::new(self.config, self.settings.watch_idle)?,
        };
        let shared = Arc::new(Shared {
            store,
            view: RwLock::new(View::default()),
            settings: self.settings,
            counters: Counters::default(),
            allocations_prefix,
            stopped: Mutex::new(false),
            wake: Condvar::new(),
            last_error: Mutex::new(None),
        });
        let watch = shared.clone();
        std::thread::Builder::new()
            .name("wid-etcd-watch".into())
            .spawn(move || super::watch::run(&watch))
            .map_err(|source| Error::Io {
                context: "starting the etcd watch thread".into(),
                error: source,
            })?;
        let fence = shared.clone();
        std::thread::Builder::new()
            .name("wid-etcd-fence".into())
            .spawn(move || super::fence::run(&fence))
            .map_err(|source| Error::Io {
                context: "starting the etcd freshness thread".into(),
                error: source,
            })?;
        Ok(EtcdMirror { shared })
    }
}

/// What the mirror is doing: a cheap snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdMirrorStats {
    /// Every change up to this etcd revision is applied (0: not listed yet).
    pub revision: i64,
    /// Records held.
    pub allocations: usize,
    /// Of those, records that do not decode (their reads fail closed).
    pub bad_records: usize,
    /// Heap bytes the mirror's table holds, by its own accounting.
    pub approx_bytes: usize,
    /// Time since the mirror was last proven current (`None`: never).
    pub lag: Option<Duration>,
    /// Time since the watch last delivered a change (`None`: never).
    pub last_event_age: Option<Duration>,
    /// Whether `Stale` reads are answered from memory right now.
    pub serving_from_memory: bool,
    /// `Stale` reads answered from memory.
    pub stale_from_memory: u64,
    /// `Stale` reads sent to the cluster because the mirror was not proven
    /// current within the maximum lag (or not listed, or overflowed).
    pub stale_from_cluster: u64,
    /// Watch streams that ended and were reopened.
    pub watch_restarts: u64,
    /// Full listings (the first, and one after each compaction or overflow).
    pub relists: u64,
    /// Changes applied from the watch.
    pub events: u64,
    /// Freshness checks answered by the cluster.
    pub checks: u64,
    /// Of those, checks that found the mirror behind the cluster.
    pub checks_behind: u64,
    /// Freshness checks no member answered.
    pub check_failures: u64,
    /// The prefix holds more records than `max_allocations`.
    pub overflowed: bool,
    /// The last thing that went wrong (a cut stream, a failed check), if any.
    pub last_error: Option<String>,
}

impl EtcdMirror {
    /// A builder for a mirror of the cluster `config` names.
    pub fn builder(config: EtcdConfig) -> EtcdMirrorBuilder {
        EtcdMirrorBuilder {
            config,
            settings: Settings {
                max_lag: Duration::from_secs(2),
                check_interval: Duration::from_millis(500),
                max_allocations: 1_000_000,
                page_size: 1000,
                watch_idle: Duration::from_secs(30),
            },
            check_interval_set: false,
        }
    }

    /// Waits up to `timeout` until `Stale` reads are served from memory; true
    /// when they are.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stats().serving_from_memory {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The store the mirror reads the cluster through (for writes in tests
    /// and tools).
    pub fn store(&self) -> &EtcdStore {
        &self.shared.store
    }

    /// What the mirror is doing.
    pub fn stats(&self) -> EtcdMirrorStats {
        let now = Instant::now();
        let s = &self.shared;
        let c = &s.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let v = s.read_view();
        let lag = v.fresh_at.map(|t| now.saturating_duration_since(t));
        EtcdMirrorStats {
            revision: v.revision,
            allocations: v.entries.len(),
            bad_records: v.bad,
            approx_bytes: v.approx_bytes(),
            lag,
            last_event_age: v.last_event_at.map(|t| now.saturating_duration_since(t)),
            serving_from_memory: !v.overflowed && lag.is_some_and(|l| l <= s.settings.max_lag),
            stale_from_memory: load(&c.from_memory),
            stale_from_cluster: load(&c.from_cluster),
            watch_restarts: load(&c.watch_restarts),
            relists: load(&c.relists),
            events: load(&c.events),
            checks: load(&c.checks),
            checks_behind: load(&c.checks_behind),
            check_failures: load(&c.check_failures),
            overflowed: v.overflowed,
            last_error: s
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

impl Drop for EtcdMirror {
    fn drop(&mut self) {
        *self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
    }
}

impl StateStore for EtcdMirror {
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> std::result::Result<AllocState, StoreError> {
        let s = &self.shared;
        if consistency == Consistency::Stale {
            let answer = s
                .read_view()
                .answer(alloc_id, Instant::now(), s.settings.max_lag);
            if let Some(answer) = answer {
                Shared::count(&s.counters.from_memory);
                return answer;
            }
            Shared::count(&s.counters.from_cluster);
        }
        s.store.consistent(alloc_id)
    }

    /// Not mirrored: asked of the cluster as [`EtcdStore`] asks it.
    fn node_state(
        &self,
        node_id: &str,
        consistency: Consistency,
    ) -> std::result::Result<NodeState, StoreError> {
        self.shared.store.node_lookup(node_id, consistency)
    }
}
