//! The replicated keyring: [`EtcdKeyring`] (see its docs for the layout
//! and the guarantees).

mod change;
mod check;
mod commit;
mod lease;
mod listing;
mod policy;
mod rotator;
mod seal;
mod sequence;
mod servers;
mod status;
mod stopper;
mod sync;
mod view;
mod watch;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::custody::KeyWrapper;
use crate::error::{Error, Result};
use crate::keyring::{Algorithm, Keyring, RotationPolicy};
use crate::state::etcd::EtcdConfig;
use crate::state::etcd::client::Client;

pub use rotator::{Rotator, RotatorOptions, RotatorStats};
pub use servers::{ServerPresence, ServerRecord};
pub use status::KeyringStatus;

/// The default prefix of a replicated keyring.
pub const DEFAULT_PREFIX: &str = "/workload-identity/keyring/";

/// `prefix` with a trailing `/`.
pub(crate) fn normalized_prefix(prefix: &str) -> String {
    let mut p = prefix.to_string();
    if !p.ends_with('/') {
        p.push('/');
    }
    p
}

/// Longest setting accepted; longer ones saturate here.
const LONGEST: Duration = Duration::from_secs(24 * 3600);

/// A keyring replicated through etcd (cargo feature `etcd`): every issuer and
/// verifier of a cluster of servers holds the same keys, changes are
/// linearizable etcd transactions, and one elected rotator runs the rotation
/// policy.
///
/// # Layout (a fixed contract, DESIGN.md "Replicated keyring on etcd")
///
/// Under the prefix (default [`DEFAULT_PREFIX`]):
///
/// * `keys/<key id>`: one key, as the keystore body's per-key map (msgpack,
///   codec names: `ID`, `Algorithm`, `State`, `CreateTime`, `PublishTime`,
///   `RetiredTime`, `PublicKey`, `Derivation`, `Material`, `Wrapped`), its
///   material always in `Wrapped` (wrapped by the [`KeyWrapper`], with
///   [`crate::associated_data`]) unless the plaintext opt-in was named;
/// * `wrapping`: the body's `Wrapping` map (`Kind`, `KekID`) naming the KEK;
/// * `rotator`: the election key, held with an etcd lease by the elected
///   rotator ([`Rotator`]);
/// * `policy`: the policy every process follows ([`EtcdKeyring::set_policy`],
///   [`crate::KeyringPolicy`]);
/// * `sequence`: the SPIFFE bundle sequence (a msgpack map, `Sequence`
///   uint64), raised in the transaction of every change
///   ([`crate::Keyring::spiffe_sequence`]);
/// * `servers/<id>`: each live server's leased record
///   ([`EtcdKeyring::announce_server`]).
///
/// # How it behaves
///
/// [`EtcdKeyringBuilder::open`] lists the prefix with one linearizable read, unwraps
/// every key, and from then on a watch feeds every change into an ordinary
/// [`Keyring`] ([`EtcdKeyring::keyring`]): the issuer, verifier, cache and C
/// ABI use it as they use any keyring, and signing and verifying never wait on
/// etcd. A second thread proves the copy current (one linearizable read per
/// check interval: nothing under the prefix changed after the copy's
/// revision), so [`EtcdKeyringStats`] can say how far behind it may be.
///
/// Every change ([`EtcdKeyring::rotate`], [`EtcdKeyring::prepublish`],
/// [`EtcdKeyring::promote`], [`EtcdKeyring::deprecate`],
/// [`EtcdKeyring::remove`], ...) is planned on the local copy at its revision
/// and written as one transaction whose compare says nothing under `keys/`
/// changed after that revision (and that every key it rewrites is still the
/// one it read): two processes racing leave one winner, and the loser gets
/// `KeyringConflict` and may plan again. A key signs only after every
/// watcher can have seen it: [`EtcdKeyring::rotate`] prepublishes the
/// successor for at least the lead time ([`EtcdKeyringBuilder::lead_time`],
/// never less than the watchers' lag bound) and only then is it promoted.
///
/// Cut off from etcd, the copy keeps signing with the active key it knows
/// until that key's planned end (its signing start plus the rotation
/// threshold of [`EtcdKeyringBuilder::rotation_policy`]); past it the key
/// stops signing here (`NoActiveKey`) until etcd answers again. Verifying
/// with known keys never stops. Both are counted and logged.
///
/// The local [`Keyring`] handle must not be changed directly (its `rotate`,
/// `insert` and so on change only this process's copy, and the next change
/// from etcd replaces them): change keys through this type.
///
/// Cheap to clone; the watch stops when the last clone is dropped.
#[derive(Clone)]
pub struct EtcdKeyring {
    inner: Arc<Owner>,
}

/// Stops the background threads when the last handle goes: the check
/// thread is joined (it may be in the middle of a request: up to the
/// configured timeout per endpoint); the watch thread holds the keys only
/// weakly (they are freed at once) and ends when its stream read returns.
struct Owner {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // A `Keyring` handle may outlive this: without the watch and the
        // checks nothing would stop it signing with a key etcd replaced, so
        // it stops signing now (it still verifies the keys it holds).
        let now = crate::clock::unix_now();
        for purpose in crate::keyring::KeyPurpose::ALL {
            for alg in Algorithm::ALL {
                self.shared.keyring.stand_down(*purpose, *alg, now);
            }
        }
        self.shared.stop();
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl fmt::Debug for EtcdKeyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.inner.shared;
        f.debug_struct("EtcdKeyring")
            .field("prefix", &s.prefix)
            .field("config", &s.client.config)
            .field("wrapper", &s.wrapper)
            .field("keys", &s.keyring.len())
            .finish_non_exhaustive()
    }
}

/// Settings fixed when the keyring is opened.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) max_lag: Duration,
    pub(crate) check_interval: Duration,
    pub(crate) lead_time: Duration,
    pub(crate) watch_idle: Duration,
    pub(crate) policy: RotationPolicy,
    /// Open a keyring whose records are not authenticated (`seal.rs`).
    pub(crate) allow_unauthenticated: bool,
}

/// What everything shares: the client, the copy, the counters.
pub(crate) struct Shared {
    pub(crate) client: Client,
    /// Ends with `/`.
    pub(crate) prefix: String,
    pub(crate) wrapper: Option<Arc<dyn KeyWrapper>>,
    pub(crate) settings: Settings,
    pub(crate) keyring: Keyring,
    pub(crate) view: Mutex<view::View>,
    /// The record key, unwrapped at open (`None`: the records are not
    /// authenticated; `seal.rs`).
    pub(crate) record_key: Mutex<Option<Arc<crate::custody::RecordKey>>>,
    /// Signalled whenever the copy's revision advances.
    pub(crate) advanced: Condvar,
    stopped: Mutex<bool>,
    stop_cv: Condvar,
    pub(crate) counters: Counters,
}

/// Event counters (see [`EtcdKeyringStats`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) relists: AtomicU64,
    pub(crate) events: AtomicU64,
    pub(crate) watch_restarts: AtomicU64,
    pub(crate) checks: AtomicU64,
    pub(crate) checks_behind: AtomicU64,
    pub(crate) check_failures: AtomicU64,
    pub(crate) sync_failures: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) revision_resets: AtomicU64,
    pub(crate) refused_records: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl Shared {
    pub(crate) fn is_stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.stop_cv.notify_all();
    }

    /// Sleeps `d` or until stopped; `true` when stopped.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let guard = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .stop_cv
            .wait_timeout_while(guard, d, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }

    pub(crate) fn lock_view(&self) -> std::sync::MutexGuard<'_, view::View> {
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The etcd key of `suffix` under the prefix.
    pub(crate) fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    pub(crate) fn unavailable(&self, cause: impl Into<String>) -> Error {
        Error::KeyringUnavailable {
            source_name: self.prefix.clone(),
            cause: cause.into(),
        }
    }

    pub(crate) fn conflict(&self, reason: impl Into<String>) -> Error {
        Counters::bump(&self.counters.conflicts);
        Error::KeyringConflict {
            source_name: self.prefix.clone(),
            reason: reason.into(),
        }
    }
}

/// Builds an [`EtcdKeyring`]; see [`EtcdKeyring::builder`].
pub struct EtcdKeyringBuilder {
    config: EtcdConfig,
    prefix: String,
    wrapper: Option<Arc<dyn KeyWrapper>>,
    plaintext: bool,
    settings: Settings,
    check_interval_set: bool,
    lead_time_set: bool,
}

impl fmt::Debug for EtcdKeyringBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdKeyringBuilder")
            .field("config", &self.config)
            .field("prefix", &self.prefix)
            .field("wrapper", &self.wrapper)
            .field("plaintext", &self.plaintext)
            .field("settings", &self.settings)
            .finish()
    }
}

impl EtcdKeyringBuilder {
    /// The prefix the keyring lives under (default [`DEFAULT_PREFIX`]); a
    /// trailing `/` is added when missing. The config's own prefix (where
    /// allocations live) is not used.
    pub fn prefix(mut self, prefix: &str) -> EtcdKeyringBuilder {
        self.prefix = normalized_prefix(prefix);
        self
    }

    /// The KEK every key is wrapped with in etcd (required unless
    /// [`EtcdKeyringBuilder::insecure_plaintext_keys`] is named).
    pub fn wrapper(mut self, wrapper: Arc<dyn KeyWrapper>) -> EtcdKeyringBuilder {
        self.wrapper = Some(wrapper);
        self
    }

    /// Keeps the keys' material in etcd in plaintext: anyone who can read the
    /// prefix (or a backup or snapshot of etcd) holds every private key. Only
    /// for tests and throwaway clusters; a keyring wrapped by a KEK refuses to
    /// open this way, and one opened this way refuses wrapped keys.
    pub fn insecure_plaintext_keys(mut self) -> EtcdKeyringBuilder {
        self.plaintext = true;
        self
    }

    /// How far behind the cluster this process's copy may be before it says so
    /// (stats, log): the bound that every watcher proves with its checks
    /// (default 2 s). The lead time is never shorter.
    pub fn max_lag(mut self, max_lag: Duration) -> EtcdKeyringBuilder {
        self.settings.max_lag = max_lag.clamp(Duration::from_millis(50), LONGEST);
        self
    }

    /// How often the copy is proven current (default a quarter of `max_lag`).
    pub fn check_interval(mut self, interval: Duration) -> EtcdKeyringBuilder {
        self.settings.check_interval = interval.clamp(Duration::from_millis(5), LONGEST);
        self.check_interval_set = true;
        self
    }

    /// How long a new key is published before it may sign (default 30 s,
    /// never under `max_lag`): every watcher that is within its lag bound has
    /// it before the first token signed with it exists.
    pub fn lead_time(mut self, lead: Duration) -> EtcdKeyringBuilder {
        self.settings.lead_time = lead.min(LONGEST);
        self.lead_time_set = true;
        self
    }

    /// The rotation policy whose threshold is each key's planned signing
    /// time: a copy cut off from etcd signs with its active key until then
    /// (default [`RotationPolicy::new`]`(None)`, 720 h). A [`Rotator`] takes
    /// its own policy; give both the same.
    pub fn rotation_policy(mut self, policy: RotationPolicy) -> EtcdKeyringBuilder {
        self.settings.policy = policy;
        self
    }

    /// How long the watch may stay silent before it is reopened (default 60 s).
    pub fn watch_idle(mut self, idle: Duration) -> EtcdKeyringBuilder {
        self.settings.watch_idle = idle.clamp(Duration::from_millis(100), LONGEST);
        self
    }

    /// Opens the keyring: one linearizable listing of the prefix (every key
    /// unwrapped and checked), then the watch and the freshness checks start.
    /// Fails when etcd does not answer (`KeyringUnavailable`), when no KEK
    /// was given and the plaintext opt-in was not named, or the prefix is
    /// `/` (`InvalidArgument`), when the prefix is wrapped by another KEK, or
    /// holds plaintext keys while a KEK was given, or none of its keys could
    /// be unwrapped (the KMS did not answer) (`KeyCustodyFailed`). A single
    /// record that cannot be used (it does not decode, does not unwrap, names
    /// an unknown state, or is wrapped while the plaintext opt-in was named)
    /// is left out and reported (`stats().bad_records`, the log); two active
    /// keys of one algorithm leave the copy without keys until etcd holds
    /// one. With a KEK and an empty prefix, the `wrapping` record is written.
    pub fn open(mut self) -> Result<EtcdKeyring> {
        if self.wrapper.is_some() == self.plaintext {
            return Err(Error::invalid(
                "EtcdKeyringBuilder",
                "wrapper",
                if self.plaintext {
                    "both a KEK and insecure_plaintext_keys() were given; choose one"
                } else {
                    "no KEK was given: keys in etcd are always wrapped (give wrapper(), e.g. a KekFile or Transit), unless insecure_plaintext_keys() is named for a test"
                },
            ));
        }
        if !self.check_interval_set {
            self.settings.check_interval =
                (self.settings.max_lag / 4).max(Duration::from_millis(5));
        }
        if self.settings.check_interval >= self.settings.max_lag {
            return Err(Error::invalid(
                "EtcdKeyringBuilder",
                "check_interval",
                format!(
                    "{:?} is not shorter than max_lag {:?}: the copy could never be proven current within its bound",
                    self.settings.check_interval, self.settings.max_lag
                ),
            ));
        }
        if !self.lead_time_set {
            self.settings.lead_time = Duration::from_secs(30);
        }
        self.settings.lead_time = self.settings.lead_time.max(self.settings.max_lag);
        if self.prefix.trim_matches('/').is_empty() {
            return Err(Error::invalid(
                "EtcdKeyringBuilder",
                "prefix",
                format!(
                    "{:?} would be the whole keyspace; expected a prefix of its own, such as {DEFAULT_PREFIX:?}",
                    self.prefix
                ),
            ));
        }
        let keyring = Keyring::new();
        keyring.mark_replica_of(&self.prefix);
        if let Some(w) = &self.wrapper {
            keyring.mark_wrapped_by(w.kind(), w.kek_id());
        }
        let shared = Arc::new(Shared {
            client: Client::new(self.config, self.settings.watch_idle)?,
            prefix: self.prefix,
            wrapper: self.wrapper,
            settings: self.settings,
            keyring,
            view: Mutex::new(view::View::default()),
            record_key: Mutex::new(None),
            advanced: Condvar::new(),
            stopped: Mutex::new(false),
            stop_cv: Condvar::new(),
            counters: Counters::default(),
        });
        // The wrapping record is written by a transaction (change.rs), which
        // the listing (view.rs) is handed rather than calling up to it.
        listing::open(&shared, commit::create_wrapping)?;
        {
            let weak = Arc::downgrade(&shared);
            std::thread::Builder::new()
                .name("wid-keyring-watch".into())
                .spawn(move || watch::watch_loop(&weak))
                .map_err(|source| Error::Io {
                    context: "starting the keyring watch thread".into(),
                    error: source,
                })?;
        }
        let fence = {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("wid-keyring-check".into())
                .spawn(move || check::check_loop(&s))
                .map_err(|source| Error::Io {
                    context: "starting the keyring check thread".into(),
                    error: source,
                })?
        };
        Ok(EtcdKeyring {
            inner: Arc::new(Owner {
                shared,
                threads: Mutex::new(vec![fence]),
            }),
        })
    }
}

/// What a replicated keyring has seen and done, for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdKeyringStats {
    /// The etcd revision the copy reflects.
    pub revision: i64,
    /// Keys in the copy.
    pub keys: usize,
    /// Time since the copy was last proven current (`None`: never).
    pub since_proven: Option<Duration>,
    /// The copy is not proven current within `max_lag`: this process signs
    /// with the active keys it knows (until their planned end) and may miss
    /// changes.
    pub cut_off: bool,
    /// The (purpose, algorithm) pairs whose active key stopped signing here
    /// because the copy was cut off past the key's planned end.
    pub stood_down: Vec<(crate::keyring::KeyPurpose, Algorithm)>,
    /// Records under `keys/` that could not be used (undecodable, under
    /// another ID, not unwrapping): left out of the copy.
    pub bad_records: usize,
    /// Full listings of the prefix (the first, after compaction, after a
    /// cut-off, when asked).
    pub relists: u64,
    /// Watches that found their start revision compacted away (each is
    /// followed by a listing).
    pub compactions: u64,
    /// Times etcd's revision was found behind the copy's (a cluster restored
    /// from an older snapshot without `--bump-revision`): each time the keys
    /// were listed again from etcd as it now is, never kept as current.
    pub revision_resets: u64,
    /// Changes applied from the watch.
    pub events: u64,
    /// Watch streams reopened.
    pub watch_restarts: u64,
    /// Freshness checks answered.
    pub checks: u64,
    /// Checks that found the copy behind.
    pub checks_behind: u64,
    /// Checks etcd did not answer.
    pub check_failures: u64,
    /// Times the records could not be made into a keyring (the copy kept its
    /// previous keys), a manifest refused whole included.
    pub sync_failures: u64,
    /// Records refused because the keyring's authenticated manifest does not
    /// list them as they are (written without the KEK): never followed.
    pub refused_records: u64,
    /// Changes this process committed.
    pub commits: u64,
    /// Changes this process lost to another writer.
    pub conflicts: u64,
    /// The last problem seen, if any (never a secret).
    pub last_error: Option<String>,
}

impl EtcdKeyring {
    /// A builder for the keyring under [`DEFAULT_PREFIX`] on the cluster of
    /// `config` (its endpoints, TLS and auth; its `prefix` is for
    /// allocations and is not used here).
    pub fn builder(config: EtcdConfig) -> EtcdKeyringBuilder {
        EtcdKeyringBuilder {
            config,
            prefix: DEFAULT_PREFIX.into(),
            wrapper: None,
            plaintext: false,
            settings: Settings {
                max_lag: Duration::from_secs(2),
                check_interval: Duration::from_millis(500),
                lead_time: Duration::from_secs(30),
                watch_idle: Duration::from_secs(60),
                policy: RotationPolicy::new(None),
                allow_unauthenticated: false,
            },
            check_interval_set: false,
            lead_time_set: false,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The keyring this process signs and verifies with, kept in step with
    /// etcd. Clones share the keys.
    pub fn keyring(&self) -> Keyring {
        self.inner.shared.keyring.clone()
    }

    /// The prefix the keyring lives under (ends with `/`).
    pub fn prefix(&self) -> &str {
        &self.inner.shared.prefix
    }

    /// The lead time a new key is published before it signs.
    pub fn lead_time(&self) -> Duration {
        self.inner.shared.lead_time()
    }

    /// Reads the prefix again (linearizable) and makes the copy match it,
    /// whatever the watch delivered: after it returns, the copy holds every
    /// change committed before the call.
    pub fn refresh(&self) -> Result<()> {
        listing::relist(&self.inner.shared)
    }

    /// Counters and the copy's freshness.
    pub fn stats(&self) -> EtcdKeyringStats {
        let s = &self.inner.shared;
        let c = &s.counters;
        let v = s.lock_view();
        let since_proven = v.proven_at.map(|t| t.elapsed());
        EtcdKeyringStats {
            revision: v.revision,
            keys: s.keyring.len(),
            since_proven,
            cut_off: since_proven.is_none_or(|d| d > s.settings.max_lag),
            stood_down: v.stood_down.clone(),
            bad_records: v.bad_records,
            relists: c.relists.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            revision_resets: c.revision_resets.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            watch_restarts: c.watch_restarts.load(Ordering::Relaxed),
            checks: c.checks.load(Ordering::Relaxed),
            checks_behind: c.checks_behind.load(Ordering::Relaxed),
            check_failures: c.check_failures.load(Ordering::Relaxed),
            sync_failures: c.sync_failures.load(Ordering::Relaxed),
            refused_records: c.refused_records.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            last_error: v.last_error.clone(),
        }
    }

    /// Waits until the copy reflects at least `revision` (a revision a
    /// change returned, say); `false` after `timeout`.
    pub fn wait_for_revision(&self, revision: i64, timeout: Duration) -> bool {
        view::wait_for_revision(&self.inner.shared, revision, timeout)
    }
}
