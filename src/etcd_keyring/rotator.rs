//! The elected rotator: one process of many runs the rotation policy.
//!
//! Election is an etcd lease and the `rotator` key: a candidate grants a
//! lease and creates the key with it only if the key does not exist (one
//! transaction); the winner keeps the lease alive. Every change the rotator
//! writes carries a compare that the key is still held with its lease, so a
//! rotator whose lease ran out (partitioned, paused) cannot write, whatever
//! it believes; and it stops acting on its own once its last confirmed
//! keep-alive is a lease TTL old (less a margin), before etcd can let
//! another candidate win. A new rotator takes over at most a lease TTL plus
//! one campaign interval (and etcd's expiry sweep, half a second) after the
//! old one went silent: with the defaults (3 s, 500 ms), within 4 s. Only
//! the lease's TTL, as etcd counts it, and each process's own monotonic
//! clock decide; no two clocks are compared.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::view::ROTATOR;
use super::{EtcdKeyring, Shared};
use crate::error::{Error, Result};
use crate::keyring::{
    KeyState, KeyringPolicy, RootKey, RotationAction, RotationPolicy, plan_rotation,
};
use crate::state::StoreError;
use crate::state::etcd::record::{Header, b64, int64};

/// How the rotator runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RotatorOptions {
    /// The rotation policy, for a keyring that stores none (a stored policy,
    /// [`EtcdKeyring::set_policy`], always wins; one that contradicts a
    /// policy given with [`RotatorOptions::new`] keeps the rotator from
    /// starting).
    pub policy: RotationPolicy,
    /// The election lease's TTL (default [`RotatorOptions::DEFAULT_LEASE_TTL`], 3 s; whole
    /// seconds, etcd's unit, from 2 s, etcd's least for a cluster on its
    /// default timings, to 1 h): how long a rotator that stopped (killed,
    /// cut off) keeps the others from taking over. A shorter one fails over
    /// sooner; a longer one rides out longer stalls of this process or of
    /// etcd without handing over.
    pub lease_ttl: Duration,
    /// The keep-alive interval (default [`RotatorOptions::DEFAULT_INTERVAL`], 500 ms; from
    /// 10 ms to a third of the TTL): how often the elected rotator renews
    /// its lease and runs the policy, and how often the others campaign. An
    /// elected rotator whose keep-alives go unanswered for the TTL less one
    /// interval stops acting.
    pub interval: Duration,
    /// Who this candidate is, stored in the `rotator` key (default
    /// `<hostname or "host">:<pid>`).
    pub identity: String,
    /// The policy was given (not the stored one's stand-in).
    policy_given: bool,
}

impl RotatorOptions {
    /// The default [`lease_ttl`](RotatorOptions::lease_ttl).
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(3);
    /// The default [`interval`](RotatorOptions::interval).
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

    /// Defaults that follow the policy stored with the keyring (the
    /// defaults of [`RotationPolicy::new`]`(None)` while none is stored).
    pub fn stored_policy() -> RotatorOptions {
        let mut o = RotatorOptions::new(RotationPolicy::new(None));
        o.policy_given = false;
        o
    }

    /// Defaults for `policy`. If the keyring stores a policy with other
    /// thresholds, [`EtcdKeyring::start_rotator`] refuses these options.
    pub fn new(policy: RotationPolicy) -> RotatorOptions {
        RotatorOptions {
            policy,
            lease_ttl: Self::DEFAULT_LEASE_TTL,
            interval: Self::DEFAULT_INTERVAL,
            identity: crate::audit::process_identity(),
            policy_given: true,
        }
    }

    /// Sets the lease TTL (checked by [`EtcdKeyring::start_rotator`]).
    pub fn lease_ttl(mut self, ttl: Duration) -> RotatorOptions {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the keep-alive interval (checked by
    /// [`EtcdKeyring::start_rotator`]).
    pub fn interval(mut self, interval: Duration) -> RotatorOptions {
        self.interval = interval;
        self
    }

    /// Refuses a lease TTL or interval the election cannot keep its
    /// promises with (as [`EtcdKeyring::start_rotator`] does): the TTL in
    /// whole seconds (etcd's unit) from 2 s to 1 h, and room for three
    /// keep-alives in it.
    pub fn check_timing(&self) -> Result<()> {
        let o = self;
        let bad = |field: &str, why: String| Err(Error::invalid("RotatorOptions", field, why));
        let ttl = o.lease_ttl;
        if ttl.subsec_nanos() != 0 || !(2..=3600).contains(&ttl.as_secs()) {
            return bad(
                "lease_ttl",
                format!(
                    "is {ttl:?}; expected whole seconds (etcd's unit) from 2s (etcd's least on its default timings) to 1h"
                ),
            );
        }
        if o.interval < Duration::from_millis(10) || o.interval > ttl / 3 {
            return bad(
                "interval",
                format!(
                    "is {:?}; expected from 10ms to a third of the lease TTL ({:?}), so that a keep-alive or two may fail before the lease runs out",
                    o.interval,
                    ttl / 3
                ),
            );
        }
        Ok(())
    }

    /// Sets the identity.
    pub fn identity(mut self, identity: &str) -> RotatorOptions {
        self.identity = identity.to_string();
        self
    }
}

/// What a rotator has done.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotatorStats {
    /// This process holds the rotator lease now.
    pub elected: bool,
    /// Elections won.
    pub elections_won: u64,
    /// Times this rotator stopped acting because its lease could have run
    /// out (keep-alives unanswered for a TTL) or etcd said it had.
    pub leases_lost: u64,
    /// Policy actions committed.
    pub actions: u64,
    /// Policy actions that lost to another writer or failed (tried again on
    /// the next round).
    pub actions_failed: u64,
    /// The last problem seen (never a secret).
    pub last_error: Option<String>,
}

struct State {
    shared: Arc<Shared>,
    options: RotatorOptions,
    stop: super::stopper::Stopper,
    /// The lease held while elected (0: none).
    lease: AtomicI64,
    /// Nanoseconds after `base` until which the lease may be held (0: not).
    held_until: AtomicU64,
    base: Instant,
    elections_won: AtomicU64,
    /// When the current election was won (Unix seconds; 0: not elected).
    elected_since: Arc<AtomicI64>,
    leases_lost: AtomicU64,
    actions: AtomicU64,
    actions_failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A running rotator; dropping it (or [`Rotator::resign`]) stops it and
/// gives up the lease, so another candidate can take over at once.
pub struct Rotator {
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
    // Keeps the keyring's watch running while the rotator lives.
    _keyring: EtcdKeyring,
}

impl std::fmt::Debug for Rotator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotator")
            .field("identity", &self.state.options.identity)
            .field("stats", &self.stats())
            .finish()
    }
}

#[derive(Deserialize)]
struct TxnAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    succeeded: bool,
}

impl State {
    fn note(&self, what: String) {
        log::warn!("keyring rotator {}: {what}", self.options.identity);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(what);
    }

    fn sleep(&self, d: Duration) -> bool {
        self.stop.sleep(d) || self.shared.is_stopped()
    }

    fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> std::result::Result<String, StoreError> {
        let client = &self.shared.client;
        client.each_endpoint(|ep| client.post(ep, path, body))
    }

    /// A new lease: its ID and the TTL etcd granted (never more than asked).
    fn grant(&self) -> std::result::Result<(i64, Duration), StoreError> {
        let (id, ttl) = super::lease::grant(&self.shared.client, self.ttl().as_secs())?;
        Ok((id, self.clamp_ttl(ttl)))
    }

    /// The TTL asked for (whole seconds, at least 2: checked at the start).
    fn ttl(&self) -> Duration {
        self.options.lease_ttl
    }

    /// A TTL etcd reports, taken as no more than was asked for.
    fn clamp_ttl(&self, secs: i64) -> Duration {
        Duration::from_secs(u64::try_from(secs).unwrap_or(0)).min(self.ttl())
    }

    /// Until when this rotator may act (from the moment the request that
    /// set or renewed the lease was sent, less one interval).
    fn set_held_until(&self, until: Option<Instant>) {
        let nanos = until.map_or(0, |t| {
            u64::try_from(t.saturating_duration_since(self.base).as_nanos())
                .unwrap_or(u64::MAX)
                .max(1)
        });
        self.held_until.store(nanos, Ordering::Release);
    }

    /// Whether the lease may still be held: acting is allowed.
    fn holds(&self) -> bool {
        let until = self.held_until.load(Ordering::Acquire);
        until != 0
            && self.lease.load(Ordering::Acquire) != 0
            && u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX) < until
    }

    /// Whether the election key is still held with `lease` (a linearizable
    /// read); `None` when etcd does not answer.
    fn key_held_with(&self, lease: i64) -> Option<bool> {
        #[derive(Deserialize)]
        struct Range {
            #[serde(default)]
            kvs: Vec<LeasedKv>,
        }
        #[derive(Deserialize)]
        struct LeasedKv {
            #[serde(default, deserialize_with = "int64")]
            lease: i64,
        }
        let body = serde_json::json!({"key": b64(self.shared.key(ROTATOR))});
        let text = self.post("/v3/kv/range", &body).ok()?;
        let r: Range = serde_json::from_str(&text).ok()?;
        Some(r.kvs.first().is_some_and(|kv| kv.lease == lease))
    }

    /// One keep-alive; the TTL etcd says is left (0 or less: the lease is gone).
    fn keep_alive(&self, lease: i64) -> std::result::Result<i64, StoreError> {
        super::lease::keep_alive(&self.shared.client, lease)
    }

    fn revoke(&self, lease: i64) {
        super::lease::revoke(&self.shared.client, lease);
    }

    /// Creates the election key with `lease` if nobody holds it: the etcd
    /// revision that created it when this candidate won.
    fn campaign(&self, lease: i64) -> std::result::Result<Option<i64>, StoreError> {
        let key = b64(self.shared.key(ROTATOR));
        let body = serde_json::json!({
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": b64(&self.options.identity),
                                          "lease": lease.to_string()}}],
        });
        let text = self.post("/v3/kv/txn", &body)?;
        let a: TxnAnswer = serde_json::from_str(&text)
            .map_err(|e| StoreError::new(format!("malformed txn answer: {e}")))?;
        Ok(a.succeeded.then_some(a.header.revision))
    }

    /// Gives up the election key (if still ours) and the lease.
    fn resign(&self, lease: i64) {
        let key = b64(self.shared.key(ROTATOR));
        let body = serde_json::json!({
            "compare": [{"key": key, "target": "LEASE", "result": "EQUAL", "lease": lease.to_string()}],
            "success": [{"request_delete_range": {"key": key}}],
        });
        let _ = self.post("/v3/kv/txn", &body);
        self.revoke(lease);
    }

    fn run(&self) {
        let interval = self.options.interval;
        loop {
            let lease = self.lease.load(Ordering::Acquire);
            if lease != 0 {
                let sent = Instant::now();
                match self.keep_alive(lease) {
                    Ok(left) if left > 0 => {
                        // Acting stops one interval before etcd could let the
                        // lease go (the lease compare fences every write
                        // regardless; this keeps a rotator that cannot renew
                        // from even trying, and `is_elected` honest).
                        let held = self.clamp_ttl(left).saturating_sub(interval);
                        self.set_held_until(Some(sent + held));
                    }
                    Ok(_) => self.lost(lease, "etcd says the lease has expired"),
                    Err(e) => self.note(format!("keep-alive: {}", e.message)),
                }
                if self.lease.load(Ordering::Acquire) != 0 && !self.holds() {
                    self.lost(
                        lease,
                        "keep-alives unanswered for most of the lease TTL; stepping down before etcd can elect another",
                    );
                }
                if self.holds() {
                    self.act(lease);
                }
            } else {
                let sent = Instant::now();
                match self.grant() {
                    Ok((lease, granted)) => match self.campaign(lease) {
                        Ok(Some(revision)) => {
                            self.set_held_until(Some(sent + granted.saturating_sub(interval)));
                            self.lease.store(lease, Ordering::Release);
                            self.elections_won.fetch_add(1, Ordering::Relaxed);
                            self.elected_since
                                .store(crate::clock::unix_now(), Ordering::Release);
                            crate::audit::election(
                                &self.shared.prefix,
                                &self.options.identity,
                                "elected",
                                "won the rotator key; runs the rotation policy",
                                Some(revision),
                            );
                            self.act(lease);
                        }
                        Ok(None) => self.revoke(lease),
                        Err(e) => {
                            self.revoke(lease);
                            self.note(format!("campaign: {}", e.message));
                        }
                    },
                    Err(e) => self.note(format!("lease grant: {}", e.message)),
                }
            }
            if self.sleep(interval) {
                let lease = self.lease.swap(0, Ordering::AcqRel);
                self.elected_since.store(0, Ordering::Release);
                self.set_held_until(None);
                if lease != 0 {
                    self.resign(lease);
                    crate::audit::election(
                        &self.shared.prefix,
                        &self.options.identity,
                        "resigned",
                        "stopped; another candidate can win at once",
                        None,
                    );
                }
                return;
            }
        }
    }

    fn lost(&self, lease: i64, why: &str) {
        self.set_held_until(None);
        self.elected_since.store(0, Ordering::Release);
        if self.lease.swap(0, Ordering::AcqRel) == lease {
            self.leases_lost.fetch_add(1, Ordering::Relaxed);
            let (prefix, identity) = (&self.shared.prefix, &self.options.identity);
            crate::audit::election(prefix, identity, "lost", why, None);
            self.note(format!("lost the rotator lease: {why}"));
            // Best effort: if etcd still knows it, another can win at once.
            self.revoke(lease);
        }
    }

    /// Runs the policy once, each action fenced by the lease.
    fn act(&self, lease: i64) {
        let s = &self.shared;
        let now = crate::clock::unix_now();
        {
            // Plan only on a whole, current copy: a record that did not
            // unwrap (the KMS away) would look like a missing key, and a
            // missing active key like a reason to rotate at once.
            let v = s.lock_view();
            let proven = v
                .proven_at
                .is_some_and(|t| t.elapsed() <= s.settings.max_lag);
            if !proven
                || !v.stood_down.is_empty()
                || v.bad_records > 0
                || v.wrapping_mismatch.is_some()
            {
                return;
            }
        }
        let keys = s.keyring.keys();
        let policy = match s.stored_policy() {
            Some(p) => p.rotation_policy(),
            None => self.options.policy,
        };
        for action in plan_rotation(&keys, now, &policy) {
            if !self.holds() {
                return;
            }
            let plan = s.plan();
            let done = match &action {
                RotationAction::Rotate { algorithm, purpose } => {
                    let (alg, purpose) = (*algorithm, *purpose);
                    if plan.active(purpose, alg).is_some() {
                        // The records hold an active key the keyring does
                        // not (yet): nothing to do.
                        continue;
                    }
                    s.rotate_now_planned(
                        &plan,
                        move |state, now| RootKey::generate_for(alg, state, now),
                        (purpose, alg),
                        now,
                        Some(lease),
                        false,
                    )
                    .map(drop)
                }
                RotationAction::Prepublish {
                    algorithm,
                    purpose,
                    publish_at,
                } => {
                    let (alg, purpose) = (*algorithm, *purpose);
                    let earliest = now.saturating_add(s.lead_secs());
                    s.prepublish_planned(
                        &plan,
                        move |state, now| {
                            Ok(RootKey::generate_for(alg, state, now)?.with_purpose(purpose))
                        },
                        now,
                        (*publish_at).max(earliest),
                        Some(lease),
                    )
                    .map(drop)
                }
                RotationAction::Promote { kid } => {
                    let seen_long_enough = s
                        .lock_view()
                        .first_seen
                        .get(kid.as_str())
                        .is_some_and(|t| t.elapsed() >= s.lead_time());
                    let ready = seen_long_enough
                        && keys.iter().any(|k| {
                            k.kid == *kid
                                && k.state == KeyState::Prepublished
                                && k.create_time.saturating_add(s.lead_secs()) <= now
                        });
                    if !ready {
                        continue;
                    }
                    s.promote_planned(&plan, kid.as_str(), now, Some(lease))
                }
                RotationAction::Deprecate { kid } => {
                    s.deprecate_planned(&plan, kid.as_str(), now, Some(lease))
                }
            };
            match done {
                Ok(()) => {
                    self.actions.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.actions_failed.fetch_add(1, Ordering::Relaxed);
                    self.note(format!("{action:?}: {e}"));
                    if e.code() == crate::error::ResultCode::KeyringConflict
                        && self.key_held_with(lease) == Some(false)
                    {
                        // The election key is gone or someone else's while
                        // the lease lives (deleted by hand, say).
                        self.lost(lease, "the rotator key is no longer held with this lease");
                    }
                    // The plan is stale: the next round plans again.
                    return;
                }
            }
        }
        self.remove_retained(lease, now);
    }

    /// Removes deprecated keys the stored policy no longer keeps: every
    /// token they signed expired (their retired time + `LongestTTL` + the
    /// leeway) and this process has seen them deprecated for `Retention`.
    /// Nothing without a stored policy, a known longest TTL or a known
    /// retired time.
    fn remove_retained(&self, lease: i64, now: i64) {
        let s = &self.shared;
        let Some(policy) = s.stored_policy() else {
            return;
        };
        let due: Vec<String> = {
            let v = s.lock_view();
            s.keyring
                .keys()
                .into_iter()
                .filter(|k| k.state == KeyState::Deprecated)
                .filter(|k| {
                    policy
                        .deprecate_after(k.retired_time)
                        .is_some_and(|t| t <= now)
                })
                .filter(|k| {
                    v.deprecated_seen
                        .get(k.kid.as_str())
                        .is_some_and(|t| t.elapsed() >= policy.retention)
                })
                .map(|k| k.kid.as_str().to_string())
                .collect()
        };
        for kid in due {
            if !self.holds() {
                return;
            }
            let plan = s.plan();
            match s.remove_planned(&plan, &kid, Some(lease)) {
                Ok(()) => {
                    self.actions.fetch_add(1, Ordering::Relaxed);
                    log::info!(
                        "keyring rotator {}: removed deprecated key {kid}: kept for the policy's retention ({}) after every token it signed expired",
                        self.options.identity,
                        crate::clock::span(policy.retention)
                    );
                }
                Err(e) => {
                    self.actions_failed.fetch_add(1, Ordering::Relaxed);
                    self.note(format!("removing {kid}: {e}"));
                    return;
                }
            }
        }
    }
}

impl EtcdKeyring {
    /// Starts a rotation candidate in this process: it campaigns for the
    /// `rotator` key, and while elected runs the stored policy every
    /// interval (promotions wait for the lead time; deprecated keys are
    /// removed after the stored policy's retention). A keyring that stores
    /// no policy yet first gets this candidate's (`options.policy`, with this
    /// keyring's lead time; [`EtcdKeyring::store_policy_if_none`]). Refused
    /// (`InvalidArgument`, naming the values) when the options give a policy
    /// that contradicts the stored one: use
    /// [`RotatorOptions::stored_policy`] to follow whatever is stored. Run one in every server
    /// that may rotate; exactly one acts at a time.
    pub fn start_rotator(&self, options: RotatorOptions) -> Result<Rotator> {
        // A keyring always has a stored policy: one made without it gets
        // this candidate's, and every later candidate with other values is
        // refused below.
        let first = KeyringPolicy::new(options.policy.longest_token_ttl)
            .rotation_threshold(options.policy.rotation_threshold)
            .lead_time(self.shared().settings.lead_time);
        self.store_policy_if_none(&first)?;
        if options.policy_given {
            self.check_policy(
                &crate::keyring::PolicyOverrides::of_rotation(&options.policy),
                |field| format!("RotatorOptions policy {field}"),
            )?;
        }
        options.check_timing()?;
        if options.identity.is_empty() {
            return Err(Error::invalid(
                "RotatorOptions",
                "identity",
                "is empty; expected a name for this candidate (host:pid)",
            ));
        }
        let state = Arc::new(State {
            shared: Arc::clone(self.shared()),
            options,
            stop: super::stopper::Stopper::default(),
            lease: AtomicI64::new(0),
            held_until: AtomicU64::new(0),
            base: Instant::now(),
            elections_won: AtomicU64::new(0),
            elected_since: Arc::new(AtomicI64::new(0)),
            leases_lost: AtomicU64::new(0),
            actions: AtomicU64::new(0),
            actions_failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        });
        let s = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("wid-keyring-rotator".into())
            .spawn(move || s.run())
            .map_err(|source| Error::Io {
                context: "starting the keyring rotator thread".into(),
                error: source,
            })?;
        Ok(Rotator {
            state,
            thread: Some(thread),
            _keyring: self.clone(),
        })
    }
}

impl Rotator {
    /// Whether this candidate is the elected rotator now.
    pub fn is_elected(&self) -> bool {
        self.state.holds()
    }

    /// Since when (Unix seconds) this candidate has been the elected
    /// rotator; `None` when it is not.
    pub fn elected_since(&self) -> Option<i64> {
        let since = self.state.elected_since.load(Ordering::Acquire);
        (since != 0 && self.is_elected()).then_some(since)
    }

    /// The cell [`Rotator::elected_since`] reads (0: not elected), for a
    /// server's record.
    pub(crate) fn elected_cell(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.state.elected_since)
    }

    /// This candidate's identity (its `rotator` key value while elected).
    pub fn identity(&self) -> &str {
        &self.state.options.identity
    }

    /// What it has done.
    pub fn stats(&self) -> RotatorStats {
        let s = &self.state;
        RotatorStats {
            elected: self.is_elected(),
            elections_won: s.elections_won.load(Ordering::Relaxed),
            leases_lost: s.leases_lost.load(Ordering::Relaxed),
            actions: s.actions.load(Ordering::Relaxed),
            actions_failed: s.actions_failed.load(Ordering::Relaxed),
            last_error: s
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    /// Stops the rotator and gives up the election (another candidate can
    /// win at once).
    pub fn resign(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.state.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Rotator {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TTL in whole seconds from 2 s to 1 h, the interval from 10 ms to
    /// a third of it; each refusal says what was given and what is expected.
    #[test]
    fn lease_ttl_and_interval_are_checked() {
        let o = |ttl_ms: u64, interval_ms: u64| {
            RotatorOptions::stored_policy()
                .lease_ttl(Duration::from_millis(ttl_ms))
                .interval(Duration::from_millis(interval_ms))
        };
        RotatorOptions::stored_policy().check_timing().unwrap();
        for (ttl, interval) in [(2000, 10), (2000, 666), (3000, 1000), (3_600_000, 1000)] {
            o(ttl, interval).check_timing().unwrap();
        }
        for (ttl, interval, field, said) in [
            (1000, 100, "lease_ttl", "is 1s; expected whole seconds"),
            (2500, 100, "lease_ttl", "is 2.5s; expected whole seconds"),
            (3_601_000, 100, "lease_ttl", "to 1h"),
            (
                3000,
                1001,
                "interval",
                "is 1.001s; expected from 10ms to a third of the lease TTL (1s)",
            ),
            (3000, 9, "interval", "is 9ms"),
        ] {
            let e = o(ttl, interval).check_timing().unwrap_err().to_string();
            assert!(
                e.contains(field) && e.contains(said),
                "{ttl}/{interval}: {e}"
            );
        }
    }
}
