//! The mirror's state, shared by its handle ([`super::mirror`]) and its two
//! threads ([`super::watch`], [`super::fence`]): the view of the records
//! under `<prefix>/allocations/`, the revision it is complete up to and when
//! it was last proven current, the settings and the counters. The threads
//! reach this module, never the handle's, so the modules form no circle.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::EtcdStore;
use super::record::decode_record;
use crate::state::{AllocState, StoreError};

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
    pub(super) key_bytes: usize,
    pub(super) bad: usize,
    /// Every change up to this revision is applied (0: never listed).
    pub(super) revision: i64,
    pub(super) listed: bool,
    /// When the view was last proven equal to the cluster's prefix.
    pub(super) fresh_at: Option<Instant>,
    /// Fence reads that saw a revision the view had not reached yet: once it
    /// has, it was current when that read was sent.
    pub(super) pending: VecDeque<(i64, Instant)>,
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
        if cluster < seen {
            // A linearizable read sent after the view reached `seen` cannot
            // answer an older revision unless the cluster went back (restored
            // from an older snapshot without --bump-revision): the view is
            // ahead of etcd, not current. It answers nothing from memory
            // until the watch lists the prefix again.
            self.fresh_at = None;
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
    pub(super) fn answer(
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
    pub(super) fn approx_bytes(&self) -> usize {
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
    pub(super) stopped: Mutex<bool>,
    pub(super) wake: Condvar,
    pub(super) last_error: Mutex<Option<String>>,
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
    fn a_cluster_behind_the_view_proves_nothing_and_stops_memory_answers() {
        // The view reached 40; etcd, restored from an older snapshot, answers
        // 12: the view is ahead of etcd, not current, even though nothing
        // changed after 40 and the count matches.
        let t0 = Instant::now();
        let mut v = listed(&["a", "b"], 40, t0);
        assert!(!v.fence(40, 12, 2, 0, t0));
        assert_eq!(v.answer("a", t0, LAG), None);
        assert_eq!(v.revision, 40);
        // Listed again (the watch does it): current again.
        let t1 = t0 + Duration::from_secs(1);
        let mut again = listed(&["a"], 12, t1);
        assert!(again.fence(12, 12, 1, 0, t1));
        assert_eq!(again.answer("b", t1, LAG), Some(Ok(AllocState::Missing)));
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
