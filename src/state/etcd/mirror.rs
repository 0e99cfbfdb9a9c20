//! [`EtcdMirror`]: `Stale` reads from memory, kept current by a watch, and
//! trusted only while proven current within a bound.
//!
//! Three parts, one thread each side of the lock:
//!
//! * the **view** (this file): the records under `<prefix>/allocations/`, the
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

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::record::decode_record;
use super::{EtcdConfig, EtcdStore};
use crate::error::{Error, Result};
use crate::state::{AllocState, Consistency, StateStore, StoreError};

/// What the mirror holds for one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    Live,
    Terminal,
    /// A record that does not decode: reads of this allocation fail closed.
    Bad(Box<str>),
}

impl Entry {
    /// The entry for the record stored under `key` (the part after
    /// `<prefix>/allocations/`).
    pub(super) fn of_record(key: &[u8], value: &[u8]) -> Entry {
        let Ok(alloc_id) = std::str::from_utf8(key) else {
            return Entry::Bad("the record's key is not UTF-8".into());
        };
        match decode_record(alloc_id, value) {
            Ok(AllocState::Terminal) => Entry::Terminal,
            Ok(_) => Entry::Live,
            Err(why) => Entry::Bad(why.into_boxed_str()),
        }
    }
}

/// Pending proofs kept at most (older ones are dropped: a newer one proves more).
const MAX_PENDING: usize = 16;

/// The mirrored records and what is known of their freshness.
#[derive(Debug, Default)]
pub(super) struct View {
    pub(super) entries: HashMap<Box<[u8]>, Entry>,
    key_bytes: usize,
    bad: usize,
    /// Every change up to this revision is applied (0: never listed).
    pub(super) revision: i64,
    pub(super) listed: bool,
    /// When the view was last proven equal to the cluster's prefix.
    pub(super) fresh_at: Option<Instant>,
    /// Fence reads that saw a revision the view had not reached yet: once it
    /// has, it was current when that read was sent.
    pending: VecDeque<(i64, Instant)>,
    pub(super) last_event_at: Option<Instant>,
    /// The prefix holds more records than the mirror may keep.
    pub(super) overflowed: bool,
}

impl View {
    /// Replaces everything with a listing made at `revision`, whose read was
    /// sent at `sent_at`.
    pub(super) fn replace(
        &mut self,
        records: Vec<(Box<[u8]>, Entry)>,
        revision: i64,
        sent_at: Instant,
    ) {
        let mut fresh = View {
            revision,
            listed: true,
            fresh_at: Some(sent_at),
            last_event_at: self.last_event_at,
            ..View::default()
        };
        fresh.entries.reserve(records.len());
        for (key, entry) in records {
            fresh.put(key, entry);
        }
        *self = fresh;
    }

    /// Marks the view as too big to keep: it answers nothing until a listing fits.
    pub(super) fn overflow(&mut self) {
        *self = View {
            overflowed: true,
            last_event_at: self.last_event_at,
            ..View::default()
        };
    }

    pub(super) fn put(&mut self, key: Box<[u8]>, entry: Entry) {
        let (len, bad) = (key.len(), matches!(entry, Entry::Bad(_)));
        if let Some(old) = self.entries.insert(key, entry) {
            self.forget(len, &old);
        }
        self.key_bytes += len;
        self.bad += usize::from(bad);
    }

    pub(super) fn delete(&mut self, key: &[u8]) {
        if let Some(old) = self.entries.remove(key) {
            self.forget(key.len(), &old);
        }
    }

    fn forget(&mut self, key_len: usize, old: &Entry) {
        self.key_bytes -= key_len;
        self.bad -= usize::from(matches!(old, Entry::Bad(_)));
    }

    /// Every change up to `revision` is applied.
    pub(super) fn advance(&mut self, revision: i64) {
        self.revision = self.revision.max(revision);
        while let Some(&(r, sent_at)) = self.pending.front() {
            if r > self.revision {
                break;
            }
            self.pending.pop_front();
            self.proven(sent_at);
        }
    }

    fn proven(&mut self, sent_at: Instant) {
        if self.fresh_at.is_none_or(|t| t < sent_at) {
            self.fresh_at = Some(sent_at);
        }
    }

    /// Takes a fence read sent at `sent_at` when the view was at revision
    /// `seen`: at the cluster's revision `cluster`, the prefix held `count`
    /// keys, `modified` of them changed after `seen`.
    ///
    /// Why the count check proves equality: the keys at `cluster` are those
    /// that existed at `seen` and were not deleted since, plus those written
    /// since. With none written since, the prefix at `cluster` is a subset of
    /// the prefix at `seen`, which the view holds; equal sizes make it equal.
    pub(super) fn fence(
        &mut self,
        seen: i64,
        cluster: i64,
        count: usize,
        modified: usize,
        sent_at: Instant,
    ) -> bool {
        if !self.listed {
            return false;
        }
        if self.revision >= cluster {
            self.proven(sent_at);
            return true;
        }
        if self.revision == seen && modified == 0 && count == self.entries.len() {
            self.advance(cluster);
            self.proven(sent_at);
            return true;
        }
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back((cluster, sent_at));
        false
    }

    /// The answer from memory, if the view was proven current within `max_lag`.
    fn answer(
        &self,
        alloc_id: &str,
        now: Instant,
        max_lag: Duration,
    ) -> Option<Result<AllocState, StoreError>> {
        let fresh = self
            .fresh_at
            .is_some_and(|t| now.saturating_duration_since(t) <= max_lag);
        if !fresh || self.overflowed {
            return None;
        }
        Some(match self.entries.get(alloc_id.as_bytes()) {
            None => Ok(AllocState::Missing),
            Some(Entry::Live) => Ok(AllocState::Live),
            Some(Entry::Terminal) => Ok(AllocState::Terminal),
            Some(Entry::Bad(why)) => Err(StoreError::new(why.to_string())),
        })
    }

    /// Heap bytes the view holds, by its own accounting (table slots, keys
    /// and the messages of undecodable records).
    fn approx_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Box<[u8]>, Entry)>() + 1;
        let messages: usize = if self.bad == 0 {
            0
        } else {
            self.entries
                .values()
                .map(|e| match e {
                    Entry::Bad(m) => m.len(),
                    _ => 0,
                })
                .sum()
        };
        self.entries.capacity() * slot + self.key_bytes + messages
    }
}

/// How the mirror behaves; see [`EtcdMirrorBuilder`].
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) max_lag: Duration,
    pub(super) check_interval: Duration,
    pub(super) max_allocations: usize,
    pub(super) page_size: usize,
    pub(super) watch_idle: Duration,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) from_memory: AtomicU64,
    pub(super) from_cluster: AtomicU64,
    pub(super) watch_restarts: AtomicU64,
    pub(super) relists: AtomicU64,
    pub(super) events: AtomicU64,
    pub(super) checks: AtomicU64,
    pub(super) checks_behind: AtomicU64,
    pub(super) check_failures: AtomicU64,
}

/// State shared by the handle and its two threads.
pub(super) struct Shared {
    pub(super) store: EtcdStore,
    pub(super) view: RwLock<View>,
    pub(super) settings: Settings,
    pub(super) counters: Counters,
    pub(super) allocations_prefix: Vec<u8>,
    stopped: Mutex<bool>,
    wake: Condvar,
    last_error: Mutex<Option<String>>,
}

impl Shared {
    pub(super) fn read_view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn write_view(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn is_stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps `d` or until the mirror is dropped; true when it was.
    pub(super) fn sleep(&self, d: Duration) -> bool {
        let guard = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .wake
            .wait_timeout_while(guard, d, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }

    pub(super) fn note_error(&self, what: String) {
        log::debug!("etcd mirror: {what}");
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(what);
    }

    pub(super) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(keys: &[&str], revision: i64, at: Instant) -> View {
        let mut v = View::default();
        let records = keys
            .iter()
            .map(|k| (k.as_bytes().into(), Entry::Live))
            .collect();
        v.replace(records, revision, at);
        v
    }

    const LAG: Duration = Duration::from_secs(2);

    #[test]
    fn a_view_answers_only_while_proven_current() {
        let t0 = Instant::now();
        let v = listed(&["a"], 10, t0);
        assert_eq!(v.answer("a", t0, LAG), Some(Ok(AllocState::Live)));
        assert_eq!(v.answer("b", t0, LAG), Some(Ok(AllocState::Missing)));
        assert_eq!(v.answer("a", t0 + LAG, LAG), Some(Ok(AllocState::Live)));
        assert_eq!(
            v.answer("a", t0 + LAG + Duration::from_millis(1), LAG),
            None
        );
        assert_eq!(View::default().answer("a", t0, LAG), None);
    }

    #[test]
    fn a_fence_with_nothing_changed_proves_the_view_current() {
        let t0 = Instant::now();
        let mut v = listed(&["a", "b"], 10, t0);
        let t1 = t0 + Duration::from_secs(5);
        // Other keys of the cluster moved the revision; the prefix did not change.
        assert!(v.fence(10, 25, 2, 0, t1));
        assert_eq!(v.revision, 25);
        assert_eq!(v.fresh_at, Some(t1));
    }

    #[test]
    fn a_fence_that_sees_changes_proves_nothing_until_the_watch_catches_up() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(5);
        // A write the watch has not delivered.
        let mut v = listed(&["a", "b"], 10, t0);
        assert!(!v.fence(10, 12, 2, 1, t1));
        assert_eq!(v.fresh_at, Some(t0));
        // A deletion the watch has not delivered: the count differs.
        let mut d = listed(&["a", "b"], 10, t0);
        assert!(!d.fence(10, 12, 1, 0, t1));
        // The watch applies revision 11: not yet 12.
        v.put("c".as_bytes().into(), Entry::Live);
        v.advance(11);
        assert_eq!(v.fresh_at, Some(t0));
        // Revision 12 applied: current as of the fence's send time.
        v.advance(12);
        assert_eq!(v.fresh_at, Some(t1));
        // A fence sent before the view moved on compares nothing stale.
        let mut w = listed(&["a"], 10, t0);
        w.put("b".as_bytes().into(), Entry::Live);
        w.advance(11);
        assert!(
            !w.fence(10, 13, 2, 0, t1),
            "the view moved since the fence was sent"
        );
    }

    #[test]
    fn bad_records_fail_closed_for_their_allocation_only() {
        let t0 = Instant::now();
        let mut v = listed(&["a"], 10, t0);
        v.put(
            "x".as_bytes().into(),
            Entry::Bad("record of allocation \"x\": bad".into()),
        );
        assert_eq!(v.bad, 1);
        assert!(matches!(v.answer("x", t0, LAG), Some(Err(_))));
        assert_eq!(v.answer("a", t0, LAG), Some(Ok(AllocState::Live)));
        v.put("x".as_bytes().into(), Entry::Terminal);
        assert_eq!(v.bad, 0);
        assert_eq!(v.answer("x", t0, LAG), Some(Ok(AllocState::Terminal)));
        v.delete(b"x");
        assert_eq!(v.answer("x", t0, LAG), Some(Ok(AllocState::Missing)));
        assert_eq!(v.key_bytes, 1);
        assert!(Entry::of_record(b"\xff", b"") != Entry::Live);
    }

    #[test]
    fn an_overflowed_view_answers_nothing() {
        let t0 = Instant::now();
        let mut v = listed(&["a"], 10, t0);
        v.overflow();
        assert_eq!(v.answer("a", t0, LAG), None);
        assert!(!v.fence(0, 10, 0, 0, t0));
    }
}
