//! A remote JWKS source (cargo feature `remote-jwks`): a verify-only
//! [`Keyring`] kept in step with an issuer's published keys, for services that
//! verify tokens they did not issue.
//!
//! [`RemoteJwks`] fetches a JWKS over HTTPS (rustls; Mozilla's roots, or only
//! the CA bundle given), either from its URL or from the `jwks_uri` of the
//! issuer's `/.well-known/openid-configuration`, and imports it into a keyring
//! it owns. A verifier built over [`RemoteJwks::keyring`] needs nothing else:
//!
//! * **Rotation without a restart.** When the verifier meets a `kid` the
//!   keyring does not hold, it waits for it (its `key_wait`, default 1 s); this
//!   source is told at once ([`Keyring::on_unknown_key`]) and starts a fetch on
//!   its own thread, so a key published since the last fetch arrives during the
//!   wait. At most one such fetch starts per *cooldown*, and only when no fetch
//!   is in flight: a flood of made-up kids costs the issuer one request per
//!   cooldown, not one per token.
//! * **Caching.** After a successful fetch the next is due after the response's
//!   `Cache-Control: max-age` (less its `Age`; `no-cache`/`no-store` count as
//!   0; without one, the configured default), clamped to the configured
//!   bounds: a 7-day `max-age` cannot hide a rotation for a week, and
//!   `max-age=0` cannot turn every verification into a request.
//!   [`RemoteJwks::refresh_if_due`] fetches when due (the caller drives it), or
//!   [`RemoteJwks::spawn_refresher`] runs a thread that does.
//! * **Failures keep the last good set.** A fetch that fails in any way — the
//!   issuer down or slow past the timeout, a status other than 200, a body
//!   over the size limit, more keys than the key limit, not a JWKS, a private
//!   key, a weak or malformed key — changes nothing in the keyring; the
//!   failure is counted and kept in [`RemoteJwks::stats`], and the next attempt
//!   is due after the minimum refresh interval.
//! * **Strict import, then removal.** A set is checked as a whole first
//!   ([`Keyring::from_jwks`]: all or nothing), then imported
//!   ([`Keyring::import_jwks`]); keys that left the remote set are removed, so
//!   they stop verifying after the next successful fetch, and a `kid` whose key
//!   changed verifies with the new key only.
//!
//! Plain `http` is refused unless [`RemoteJwksBuilder::allow_http_loopback`]
//! is set, and even then only to a loopback host (tests, a sidecar on the same
//! machine). Fetches are logged through the `log` facade at debug level, URLs
//! without their query; nothing is printed.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Deserialize;

use crate::clock::{Clock, SystemClock};
use crate::error::{DecodeError, Error, Result, truncate_for_message};
use crate::keyring::{KeyId, Keyring};

/// The largest body [`RemoteJwksBuilder::max_body_bytes`] accepts: 16 MiB.
pub const MAX_JWKS_BODY_LIMIT: usize = 16 << 20;

/// Longest timeout or refresh interval accepted; longer ones saturate here.
const LONGEST: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// A JWKS URL.
    Jwks(String),
    /// An issuer whose discovery document names the JWKS.
    Issuer(String),
}

/// Builds a [`RemoteJwks`]; the URL (or the issuer) is the one required input.
pub struct RemoteJwksBuilder {
    source: Source,
    allow_http_loopback: bool,
    ca_bundle_pem: Option<Vec<u8>>,
    timeout: Duration,
    min_refresh: Duration,
    max_refresh: Duration,
    default_refresh: Duration,
    unknown_kid_cooldown: Duration,
    max_body_bytes: usize,
    max_keys: usize,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for RemoteJwksBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteJwksBuilder")
            .field("source", &self.source)
            .field("allow_http_loopback", &self.allow_http_loopback)
            .field("ca_bundle", &self.ca_bundle_pem.is_some())
            .field("timeout", &self.timeout)
            .field("min_refresh", &self.min_refresh)
            .field("max_refresh", &self.max_refresh)
            .finish_non_exhaustive()
    }
}

impl RemoteJwksBuilder {
    fn new(source: Source) -> RemoteJwksBuilder {
        RemoteJwksBuilder {
            source,
            allow_http_loopback: false,
            ca_bundle_pem: None,
            timeout: Duration::from_secs(5),
            min_refresh: Duration::from_secs(60),
            max_refresh: Duration::from_secs(24 * 3600),
            default_refresh: Duration::from_secs(3600),
            unknown_kid_cooldown: Duration::from_secs(15),
            max_body_bytes: 512 << 10,
            max_keys: 100,
            clock: Arc::new(SystemClock),
        }
    }

    /// Trusts only the certificates of this PEM bundle (one or more
    /// `CERTIFICATE` blocks) instead of Mozilla's root set: for an issuer
    /// behind a private CA.
    pub fn ca_bundle_pem(mut self, pem: &[u8]) -> RemoteJwksBuilder {
        self.ca_bundle_pem = Some(pem.to_vec());
        self
    }

    /// Allows plain `http` URLs whose host is a loopback address (`127.0.0.0/8`,
    /// `::1`, `localhost`); default off. Other `http` URLs are always refused,
    /// and with this set no redirect is followed.
    pub fn allow_http_loopback(mut self, allow: bool) -> RemoteJwksBuilder {
        self.allow_http_loopback = allow;
        self
    }

    /// The whole time one request may take, connection to last byte (default
    /// 5 s; at least 1 ms, at most a week).
    pub fn timeout(mut self, timeout: Duration) -> RemoteJwksBuilder {
        self.timeout = timeout.clamp(Duration::from_millis(1), LONGEST);
        self
    }

    /// The bounds on the time between successful fetches, whatever the
    /// server's `max-age` says (default 1 minute to 1 day; at most a week). The
    /// minimum is also the wait before retrying after a failure.
    /// [`RemoteJwksBuilder::build`] refuses `min > max`.
    pub fn refresh_bounds(mut self, min: Duration, max: Duration) -> RemoteJwksBuilder {
        self.min_refresh = min.min(LONGEST);
        self.max_refresh = max.min(LONGEST);
        self
    }

    /// The time between fetches when the response has no `max-age` (default
    /// 1 hour; clamped to the refresh bounds).
    pub fn default_refresh(mut self, interval: Duration) -> RemoteJwksBuilder {
        self.default_refresh = interval.min(LONGEST);
        self
    }

    /// The least time between two fetches started by unknown kids (default
    /// 15 s; zero: no limit but the single flight).
    pub fn unknown_kid_cooldown(mut self, cooldown: Duration) -> RemoteJwksBuilder {
        self.unknown_kid_cooldown = cooldown.min(LONGEST);
        self
    }

    /// The largest response body read, in bytes (default 512 KiB; clamped to
    /// 1 byte .. [`MAX_JWKS_BODY_LIMIT`]). A larger body fails the fetch.
    pub fn max_body_bytes(mut self, max: usize) -> RemoteJwksBuilder {
        self.max_body_bytes = max.clamp(1, MAX_JWKS_BODY_LIMIT);
        self
    }

    /// The most entries a JWKS may list, skipped ones included (default 100).
    /// A larger set fails the fetch.
    pub fn max_keys(mut self, max: usize) -> RemoteJwksBuilder {
        self.max_keys = max;
        self
    }

    /// The clock that schedules refreshes and cooldowns (default the system
    /// clock), so tests need not sleep.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> RemoteJwksBuilder {
        self.clock = clock;
        self
    }

    /// The source, with an empty keyring and the first fetch due at once.
    /// Nothing is fetched yet: call [`RemoteJwks::refresh`] at startup (or let
    /// the first unknown kid, or the refresher, fetch).
    ///
    /// Fails with `InvalidArgument` for a URL that is not `https` (or allowed
    /// loopback `http`), has user info, a fragment, no host or whitespace; an
    /// issuer with a query; a CA bundle without a certificate; or refresh
    /// bounds with `min > max`.
    pub fn build(self) -> Result<RemoteJwks> {
        let source = match &self.source {
            Source::Jwks(url) => {
                Source::Jwks(check_url(url, self.allow_http_loopback, "jwks_url")?.to_string())
            }
            Source::Issuer(issuer) => {
                check_url(issuer, self.allow_http_loopback, "issuer")?;
                if issuer.contains('?') {
                    return Err(invalid("issuer", "must not have a query", issuer));
                }
                Source::Issuer(issuer.clone())
            }
        };
        if self.min_refresh > self.max_refresh {
            return Err(Error::invalid(
                "RemoteJwks",
                "refresh_bounds",
                format!(
                    "the minimum ({:?}) must not exceed the maximum ({:?})",
                    self.min_refresh, self.max_refresh
                ),
            ));
        }
        let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
        if let Some(pem) = &self.ca_bundle_pem {
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&ca_certificates(pem)?));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .https_only(!self.allow_http_loopback)
            // A redirect could leave loopback for plain http elsewhere; an https
            // one is followed (a few hops), every hop checked as https.
            .max_redirects(if self.allow_http_loopback { 0 } else { 5 })
            .max_redirects_will_error(false)
            .user_agent(concat!("workload-identity/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build()
            .into();
        let jwks_uri = match &source {
            Source::Jwks(url) => Some(url.clone()),
            Source::Issuer(_) => None,
        };
        let shared = Arc::new(Shared {
            config: Config {
                source,
                allow_http_loopback: self.allow_http_loopback,
                min_refresh: self.min_refresh,
                max_refresh: self.max_refresh,
                default_refresh: self.default_refresh,
                unknown_kid_cooldown: self.unknown_kid_cooldown,
                max_body_bytes: self.max_body_bytes,
                max_keys: self.max_keys,
            },
            clock: self.clock,
            agent,
            keyring: Keyring::new(),
            state: Mutex::new(State {
                jwks_uri,
                ..State::default()
            }),
            finished: Condvar::new(),
        });
        // Weak: the keyring holds the hook, and this source holds the keyring.
        let weak = Arc::downgrade(&shared);
        shared
            .keyring
            .on_unknown_key(move |kid| match weak.upgrade() {
                Some(shared) => Shared::unknown_kid(&shared, kid),
                None => log::debug!("remote JWKS: source dropped, unknown kid {kid} not fetched"),
            });
        Ok(RemoteJwks { shared })
    }
}

/// A verify-only keyring that follows a remote JWKS (see the module docs).
/// Cheap to clone; clones share the keyring and the fetch state. Keep one
/// alive as long as the keyring is in use: once every clone is dropped, an
/// unknown kid no longer starts a fetch.
///
/// ```no_run
/// # // no_run: it needs an issuer (tests/remote_jwks.rs starts one on loopback).
/// use std::sync::Arc;
/// use workload_identity::{Audience, MemoryStore, RemoteJwks, Verifier};
///
/// let jwks = RemoteJwks::discover("https://nomad.example.com").build()?;
/// jwks.refresh()?; // the first set; a failure here leaves the keyring empty
/// let _refresher = jwks.spawn_refresher()?; // refetches when max-age runs out
/// let store = Arc::new(MemoryStore::new());
/// let verifier = Verifier::builder(jwks.keyring().clone(), store, Audience::new("vault.io")?)
///     .build();
/// // A token from a key rotated in after the last fetch: the unknown kid
/// // starts a fetch, and the verifier's key wait picks the key up.
/// let result = verifier.verify_now("eyJ...");
/// # let _ = result;
/// println!("{:?}", jwks.stats());
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct RemoteJwks {
    shared: Arc<Shared>,
}

impl fmt::Debug for RemoteJwks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteJwks")
            .field("source", &self.shared.config.source)
            .field("keys", &self.shared.keyring.len())
            .finish_non_exhaustive()
    }
}

/// What one successful fetch did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefreshReport {
    /// The JWKS URL fetched (without its query).
    pub jwks_uri: String,
    /// The keys of the remote set, now in the keyring (in document order).
    pub keys: Vec<KeyId>,
    /// Keys new in this fetch (a `kid` whose key changed counts here too).
    pub added: Vec<KeyId>,
    /// Keys removed: gone from the remote set, or replaced under their `kid`.
    pub removed: Vec<KeyId>,
    /// Entries skipped as not signing keys (`use` other than `sig`, unknown `kty`).
    pub skipped: usize,
    /// The freshness the response declared (`max-age` less `Age`; zero for
    /// `no-cache` or `no-store`), if it declared one.
    pub max_age: Option<Duration>,
    /// When the next fetch is due, after clamping to the refresh bounds.
    pub next_refresh_in: Duration,
}

/// A snapshot of what a [`RemoteJwks`] has done.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RemoteJwksStats {
    /// Fetches attempted (a discovery and its JWKS request count once).
    pub fetches: u64,
    /// Fetches that failed; the keyring kept its keys each time.
    pub failures: u64,
    /// Fetches started by an unknown kid.
    pub unknown_kid_fetches: u64,
    /// Unknown kids that started no fetch: one was in flight, or the cooldown
    /// since the last unknown-kid fetch had not passed.
    pub unknown_kid_suppressed: u64,
    /// Whether the last fetch failed: the keys (if any) are from an earlier
    /// fetch. False before the first fetch.
    pub stale: bool,
    /// The last failure, if any (kept after later successes; see `stale`).
    pub last_error: Option<String>,
    /// When the last fetch started (clock milliseconds).
    pub last_attempt_ms: Option<i64>,
    /// When the last successful fetch finished (clock milliseconds).
    pub last_success_ms: Option<i64>,
    /// When the next fetch is due (clock milliseconds; 0 before the first).
    pub next_refresh_ms: i64,
    /// The JWKS URL in use (without its query); `None` before discovery.
    pub jwks_uri: Option<String>,
    /// Keys in the keyring now.
    pub keys: usize,
}

/// The settings, fixed at build.
struct Config {
    source: Source,
    allow_http_loopback: bool,
    min_refresh: Duration,
    max_refresh: Duration,
    default_refresh: Duration,
    unknown_kid_cooldown: Duration,
    max_body_bytes: usize,
    max_keys: usize,
}

#[derive(Default)]
struct State {
    /// One fetch at a time: set while one runs.
    in_flight: bool,
    /// The JWKS URL: given, or discovered (forgotten after a failure, so the
    /// next attempt discovers again).
    jwks_uri: Option<String>,
    next_refresh_ms: i64,
    last_unknown_fetch_ms: Option<i64>,
    fetches: u64,
    failures: u64,
    unknown_kid_fetches: u64,
    unknown_kid_suppressed: u64,
    stale: bool,
    last_error: Option<String>,
    last_attempt_ms: Option<i64>,
    last_success_ms: Option<i64>,
}

struct Shared {
    config: Config,
    clock: Arc<dyn Clock>,
    agent: ureq::Agent,
    keyring: Keyring,
    state: Mutex<State>,
    /// Signalled when a fetch finishes (and when a refresher is stopped).
    finished: Condvar,
}

/// Why a fetch runs (for the log).
#[derive(Clone, Copy)]
enum Trigger {
    Asked,
    Due,
    UnknownKid,
}

impl Trigger {
    fn name(self) -> &'static str {
        match self {
            Trigger::Asked => "asked",
            Trigger::Due => "due",
            Trigger::UnknownKid => "unknown kid",
        }
    }
}

/// The right to fetch: made with `in_flight` set, clears it when dropped (a
/// fetch that panics included) and wakes the waiters.
struct Flight {
    shared: Arc<Shared>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.shared.lock().in_flight = false;
        self.shared.finished.notify_all();
    }
}

impl RemoteJwks {
    /// A source fetching the JWKS at `jwks_url` (`https://…`).
    pub fn builder(jwks_url: &str) -> RemoteJwksBuilder {
        RemoteJwksBuilder::new(Source::Jwks(jwks_url.to_string()))
    }

    /// A source that reads `<issuer>/.well-known/openid-configuration` and
    /// fetches its `jwks_uri`. The document's `issuer` must equal `issuer`
    /// exactly (OpenID Connect Discovery 1.0, section 4.3), and its `jwks_uri`
    /// must pass the same URL rules as a configured one.
    pub fn discover(issuer: &str) -> RemoteJwksBuilder {
        RemoteJwksBuilder::new(Source::Issuer(issuer.to_string()))
    }

    /// The keyring this source fills: give it (a clone) to a verifier.
    /// Its keys belong to the source: a key that is not in the remote set is
    /// removed at the next successful fetch.
    pub fn keyring(&self) -> &Keyring {
        &self.shared.keyring
    }

    /// Fetches now, on this thread. If another fetch is in flight, waits for
    /// it to finish first (one request at a time). On error the keyring is
    /// unchanged; network and HTTP failures are `IoError`, a body that is not
    /// an acceptable JWKS (too large, too many keys, not JSON) is
    /// `DecodeError`, and a set that [`Keyring::import_jwks`] refuses fails
    /// with its error.
    pub fn refresh(&self) -> Result<RefreshReport> {
        let mut state = self.shared.lock();
        while state.in_flight {
            state = self
                .shared
                .finished
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let flight = self.shared.take_flight(state);
        self.shared.fetch(&flight, Trigger::Asked)
    }

    /// Fetches on this thread if a fetch is due at `now_ms` (clock
    /// milliseconds, see [`RemoteJwksBuilder::clock`]) and none is in flight;
    /// `Ok(None)` otherwise. The first fetch is due at once.
    pub fn refresh_if_due(&self, now_ms: i64) -> Result<Option<RefreshReport>> {
        let state = self.shared.lock();
        if state.in_flight || now_ms < state.next_refresh_ms {
            return Ok(None);
        }
        let flight = self.shared.take_flight(state);
        self.shared.fetch(&flight, Trigger::Due).map(Some)
    }

    /// When the next fetch is due (clock milliseconds).
    pub fn next_refresh_ms(&self) -> i64 {
        self.shared.lock().next_refresh_ms
    }

    /// What this source has done so far.
    pub fn stats(&self) -> RemoteJwksStats {
        // The keyring's lock is never taken under the state's.
        let keys = self.shared.keyring.len();
        let state = self.shared.lock();
        RemoteJwksStats {
            fetches: state.fetches,
            failures: state.failures,
            unknown_kid_fetches: state.unknown_kid_fetches,
            unknown_kid_suppressed: state.unknown_kid_suppressed,
            stale: state.stale,
            last_error: state.last_error.clone(),
            last_attempt_ms: state.last_attempt_ms,
            last_success_ms: state.last_success_ms,
            next_refresh_ms: state.next_refresh_ms,
            jwks_uri: state.jwks_uri.as_deref().map(without_query),
            keys,
        }
    }

    /// Starts a thread that fetches whenever a fetch is due (by the clock),
    /// until the returned handle is dropped or stopped. Errors only if the
    /// thread cannot be started (`IoError`).
    pub fn spawn_refresher(&self) -> Result<Refresher> {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::clone(&self.shared);
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("wid-jwks-refresh".into())
            .spawn(move || Shared::refresh_loop(&shared, &flag))
            .map_err(|source| Error::Io {
                context: "starting the JWKS refresher thread".into(),
                source,
            })?;
        Ok(Refresher {
            shared: Arc::clone(&self.shared),
            stop,
            thread: Some(thread),
        })
    }
}

/// A running refresher thread ([`RemoteJwks::spawn_refresher`]); dropping it
/// stops the thread (after a fetch in progress, which the timeout bounds).
pub struct Refresher {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Refresher {
    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        {
            // Under the lock, so the thread is either before its check of the
            // flag or already waiting, and the notification reaches it.
            let _state = self.shared.lock();
            self.shared.finished.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                log::debug!("remote JWKS: the refresher thread panicked");
            }
        }
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.halt();
    }
}

impl fmt::Debug for Refresher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refresher")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of the state is a few assignments with no call that
        // can panic between them; a poisoned lock still holds consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a fetch in flight; `state` must show none is.
    fn take_flight(self: &Arc<Self>, mut state: MutexGuard<'_, State>) -> Flight {
        debug_assert!(!state.in_flight);
        state.in_flight = true;
        drop(state);
        Flight {
            shared: Arc::clone(self),
        }
    }

    /// The keyring's unknown-key hook: on the verifying thread, so it only
    /// decides, and fetches (if at all) on a new thread.
    fn unknown_kid(self: &Arc<Self>, kid: &KeyId) {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let cooling = state.last_unknown_fetch_ms.is_some_and(|last| {
            // A clock that went backwards ends the cooldown rather than
            // stretching it.
            now >= last && now - last < millis(self.config.unknown_kid_cooldown)
        });
        if state.in_flight || cooling {
            state.unknown_kid_suppressed += 1;
            log::trace!(
                "remote JWKS: unknown kid {kid}: no fetch ({})",
                if state.in_flight {
                    "one is in flight"
                } else {
                    "cooldown"
                }
            );
            return;
        }
        state.last_unknown_fetch_ms = Some(now);
        state.unknown_kid_fetches += 1;
        let flight = self.take_flight(state);
        log::debug!("remote JWKS: unknown kid {kid}: fetching");
        let spawned = std::thread::Builder::new()
            .name("wid-jwks-fetch".into())
            .spawn(move || {
                let shared = Arc::clone(&flight.shared);
                // The result is in the stats and the log.
                let _ = shared.fetch(&flight, Trigger::UnknownKid);
            });
        if let Err(e) = spawned {
            // The closure, and the flight in it, are dropped: nothing in flight.
            log::debug!("remote JWKS: cannot start a fetch thread: {e}");
        }
    }

    fn refresh_loop(self: &Arc<Self>, stop: &AtomicBool) {
        let mut state = self.lock();
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let now = self.clock.now_ms();
            if !state.in_flight && now >= state.next_refresh_ms {
                let flight = self.take_flight(state);
                // The result is in the stats and the log.
                let _ = self.fetch(&flight, Trigger::Due);
                drop(flight);
                state = self.lock();
                continue;
            }
            // Woken when any fetch finishes (the due time moves) or on stop;
            // a minute at most, in case the clock jumps.
            let wait = if state.in_flight {
                Duration::from_secs(60)
            } else {
                let ms = u64::try_from(state.next_refresh_ms.saturating_sub(now)).unwrap_or(1);
                Duration::from_millis(ms.clamp(1, 60_000))
            };
            state = self
                .finished
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// One fetch, by the holder of the flight: updates the keyring on success
    /// and the state either way.
    fn fetch(&self, _flight: &Flight, trigger: Trigger) -> Result<RefreshReport> {
        let started = self.clock.now_ms();
        let jwks_uri = {
            let mut state = self.lock();
            state.fetches += 1;
            state.last_attempt_ms = Some(started);
            state.jwks_uri.clone()
        };
        let result = self.fetch_and_apply(jwks_uri);
        let now = self.clock.now_ms();
        let held = self.keyring.len();
        let mut state = self.lock();
        match &result {
            Ok((uri, report)) => {
                state.jwks_uri = Some(uri.clone());
                state.stale = false;
                state.last_success_ms = Some(now);
                state.next_refresh_ms = now.saturating_add(millis(report.next_refresh_in));
                log::debug!(
                    "remote JWKS: fetched {} ({}): {} keys, {} added, {} removed, {} skipped; next in {:?}",
                    report.jwks_uri,
                    trigger.name(),
                    report.keys.len(),
                    report.added.len(),
                    report.removed.len(),
                    report.skipped,
                    report.next_refresh_in
                );
            }
            Err(e) => {
                state.failures += 1;
                state.stale = true;
                state.last_error = Some(e.to_string());
                state.next_refresh_ms = now.saturating_add(millis(self.config.min_refresh));
                if let Source::Issuer(_) = self.config.source {
                    state.jwks_uri = None;
                }
                log::debug!(
                    "remote JWKS: fetch ({}) failed, keeping {held} keys: {e}",
                    trigger.name(),
                );
            }
        }
        result.map(|(_, report)| report)
    }

    /// Discovers (if needed), fetches and applies a JWKS; the URL used and
    /// the report.
    fn fetch_and_apply(&self, jwks_uri: Option<String>) -> Result<(String, RefreshReport)> {
        let uri = match (jwks_uri, &self.config.source) {
            (Some(uri), _) => uri,
            (None, Source::Jwks(url)) => url.clone(),
            (None, Source::Issuer(issuer)) => self.discover(issuer)?,
        };
        let (body, max_age) = self.get(&uri, "JWKS")?;
        let body = String::from_utf8(body)
            .map_err(|_| decode_error("JWKS", &uri, "the body is not UTF-8"))?;
        let entries = count_keys(&body);
        if entries > self.config.max_keys {
            return Err(decode_error(
                "JWKS",
                &uri,
                format!(
                    "the set lists {entries} keys, more than the limit of {}",
                    self.config.max_keys
                ),
            ));
        }
        let report = self.apply(&body).map_err(|e| from_url(e, &uri))?;
        let next_refresh_in = max_age
            .unwrap_or(self.config.default_refresh)
            .clamp(self.config.min_refresh, self.config.max_refresh);
        Ok((
            uri.clone(),
            RefreshReport {
                jwks_uri: without_query(&uri),
                max_age,
                next_refresh_in,
                ..report
            },
        ))
    }

    /// Reads the issuer's discovery document; its `jwks_uri`.
    fn discover(&self, issuer: &str) -> Result<String> {
        #[derive(Deserialize)]
        struct Discovery {
            issuer: String,
            jwks_uri: String,
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let (body, _) = self.get(&url, "OpenIdConfiguration")?;
        let doc: Discovery = serde_json::from_slice(&body).map_err(|e| {
            decode_error(
                "OpenIdConfiguration",
                &url,
                format!("{e}; expected {{\"issuer\":…,\"jwks_uri\":…}}"),
            )
        })?;
        if doc.issuer != issuer {
            return Err(decode_error(
                "OpenIdConfiguration",
                &url,
                format!(
                    "issuer is {:?}, expected exactly {:?}",
                    truncate_for_message(&doc.issuer),
                    truncate_for_message(issuer)
                ),
            ));
        }
        check_url(&doc.jwks_uri, self.config.allow_http_loopback, "jwks_uri").map_err(|e| {
            decode_error(
                "OpenIdConfiguration",
                &url,
                format!("unusable jwks_uri: {e}"),
            )
        })?;
        Ok(doc.jwks_uri)
    }

    /// GETs `url`, which should hold a `type_name` document: the body of a
    /// 200 answer (at most the body limit) and the freshness it declared.
    fn get(&self, url: &str, type_name: &'static str) -> Result<(Vec<u8>, Option<Duration>)> {
        let shown = without_query(url);
        let io_error = |source: io::Error| Error::Io {
            context: format!("fetching the {type_name} document from {shown}"),
            source,
        };
        let mut resp = self
            .agent
            .get(url)
            .header("accept", "application/jwk-set+json, application/json")
            .call()
            .map_err(|e| io_error(e.into_io()))?;
        let status = resp.status();
        if status != 200 {
            return Err(io_error(io::Error::other(format!(
                "HTTP status {status}, expected 200"
            ))));
        }
        let limit = self.config.max_body_bytes;
        let too_large = || {
            decode_error(
                type_name,
                url,
                format!("the body is larger than the limit of {limit} bytes"),
            )
        };
        if resp
            .body()
            .content_length()
            .is_some_and(|n| n > limit as u64)
        {
            return Err(too_large());
        }
        let max_age = freshness(resp.headers());
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit as u64)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => too_large(),
                e => io_error(e.into_io()),
            })?;
        Ok((body, max_age))
    }

    /// Checks the whole set, then brings the keyring in step with it.
    fn apply(&self, body: &str) -> Result<RefreshReport> {
        // All or nothing, away from the keyring in use: a refused set changes
        // nothing there.
        let (staged, _) = Keyring::from_jwks(body)?;
        let remote = staged.keys();
        let mut removed = Vec::new();
        // A kid whose key changed: the remote replaced it. Out first, or the
        // import would see a duplicate.
        for key in &remote {
            if let Some(held) = self.keyring.key_info(&key.kid) {
                if held.public_key != key.public_key {
                    self.remove(&key.kid, &mut removed);
                }
            }
        }
        let import = self.keyring.import_jwks(body)?;
        for held in self.keyring.keys() {
            if !remote.iter().any(|k| k.kid == held.kid) {
                self.remove(&held.kid, &mut removed);
            }
        }
        let mut keys = import.imported.clone();
        keys.extend(import.unchanged.iter().cloned());
        Ok(RefreshReport {
            jwks_uri: String::new(),
            keys,
            added: import.imported,
            removed,
            skipped: import.skipped.len(),
            max_age: None,
            next_refresh_in: Duration::ZERO,
        })
    }

    fn remove(&self, kid: &KeyId, removed: &mut Vec<KeyId>) {
        match self.keyring.remove(kid) {
            Ok(()) => removed.push(kid.clone()),
            // Only an active key resists, and only a caller inserting its own
            // signing key into this keyring could make one.
            Err(e) => log::debug!("remote JWKS: cannot remove {kid}: {e}"),
        }
    }
}

/// The number of entries in a JWKS's `keys` (0 when it is not a JWKS: the
/// strict import says why).
fn count_keys(body: &str) -> usize {
    #[derive(Deserialize)]
    struct Count {
        keys: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Count>(body).map_or(0, |c| c.keys.len())
}

/// The freshness a response declares (RFC 9111 5.2.2): `max-age` less `Age`;
/// zero with `no-cache` or `no-store`; `None` without either. Repeated
/// `max-age` directives count as the smallest.
fn freshness(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let mut max_age: Option<u64> = None;
    let mut no_cache = false;
    for value in headers.get_all("cache-control") {
        let Ok(value) = value.to_str() else { continue };
        for directive in value.split(',') {
            let (name, arg) = match directive.split_once('=') {
                Some((name, arg)) => (name.trim(), Some(arg.trim().trim_matches('"'))),
                None => (directive.trim(), None),
            };
            if name.eq_ignore_ascii_case("no-cache") || name.eq_ignore_ascii_case("no-store") {
                no_cache = true;
            } else if name.eq_ignore_ascii_case("max-age") {
                if let Some(secs) = arg.and_then(delta_seconds) {
                    max_age = Some(max_age.map_or(secs, |m| m.min(secs)));
                }
            }
        }
    }
    if no_cache {
        return Some(Duration::ZERO);
    }
    let age = headers
        .get("age")
        .and_then(|v| v.to_str().ok())
        .and_then(delta_seconds)
        .unwrap_or(0);
    max_age.map(|m| Duration::from_secs(m.saturating_sub(age)))
}

/// A delta-seconds value: digits only; too large for u64 saturates.
fn delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

/// Whole milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A URL for messages and logs: without its query, which may carry a secret.
fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or_default().to_string()
}

fn invalid(field: &str, why: &str, value: &str) -> Error {
    Error::invalid(
        "RemoteJwks",
        field,
        format!(
            "{why} (got {:?})",
            truncate_for_message(&without_query(value))
        ),
    )
}

fn decode_error(type_name: &'static str, url: &str, reason: impl fmt::Display) -> Error {
    Error::Decode(DecodeError {
        type_name,
        path: String::new(),
        reason: format!("{reason} (from {})", without_query(url)),
    })
}

/// Names where a refused document came from (the keyring's own import errors
/// name the member at fault but not the URL).
fn from_url(e: Error, url: &str) -> Error {
    match e {
        Error::Decode(mut d) => {
            d.reason = format!("{} (from {})", d.reason, without_query(url));
            Error::Decode(d)
        }
        e => e,
    }
}

/// Checks a URL against the source's rules: `https` with a host, or `http` to
/// a loopback host when allowed; no user info, fragment or whitespace.
fn check_url<'a>(url: &'a str, allow_http_loopback: bool, field: &str) -> Result<&'a str> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            field,
            "must not contain whitespace or control characters",
            url,
        ));
    }
    if url.contains('#') {
        return Err(invalid(field, "must not have a fragment", url));
    }
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|_| invalid(field, "is not a URL", url))?;
    let Some(authority) = uri.authority() else {
        return Err(invalid(field, "must have a host", url));
    };
    if authority.as_str().contains('@') {
        return Err(invalid(field, "must not contain user info", url));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(invalid(field, "must have a host", url));
    }
    match uri.scheme_str() {
        Some("https") => Ok(url),
        Some("http") if allow_http_loopback && is_loopback(host) => Ok(url),
        Some("http") if allow_http_loopback => Err(invalid(
            field,
            "plain http is allowed to a loopback host only (127.0.0.0/8, ::1, localhost)",
            url,
        )),
        _ => Err(invalid(
            field,
            "must be an https URL (plain http only to loopback, when allowed)",
            url,
        )),
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The certificates of a PEM bundle (other PEM items are ignored); at least one.
fn ca_certificates(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::invalid(
                    "RemoteJwks",
                    "ca_bundle_pem",
                    format!("not a PEM bundle: {e}"),
                ));
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::invalid(
            "RemoteJwks",
            "ca_bundle_pem",
            "holds no CERTIFICATE block; expected one or more PEM certificates",
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> ureq::http::HeaderMap {
        let mut map = ureq::http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                ureq::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                ureq::http::HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn freshness_reads_max_age_age_and_no_cache() {
        let secs = |pairs: &[(&str, &str)]| freshness(&headers(pairs)).map(|d| d.as_secs());
        assert_eq!(secs(&[]), None);
        assert_eq!(secs(&[("cache-control", "public, max-age=300")]), Some(300));
        assert_eq!(secs(&[("cache-control", "Max-Age=\"60\"")]), Some(60));
        assert_eq!(
            secs(&[("cache-control", "max-age=300"), ("age", "100")]),
            Some(200)
        );
        assert_eq!(
            secs(&[("cache-control", "max-age=300"), ("age", "900")]),
            Some(0)
        );
        assert_eq!(
            secs(&[
                ("cache-control", "max-age=300"),
                ("cache-control", "max-age=30")
            ]),
            Some(30)
        );
        assert_eq!(secs(&[("cache-control", "max-age=300, no-cache")]), Some(0));
        assert_eq!(secs(&[("cache-control", "no-store")]), Some(0));
        assert_eq!(secs(&[("cache-control", "max-age=-5")]), None);
        assert_eq!(secs(&[("cache-control", "max-age=1e3")]), None);
        assert_eq!(
            secs(&[("cache-control", "max-age=99999999999999999999999")]),
            Some(u64::MAX)
        );
        assert_eq!(secs(&[("cache-control", "s-maxage=5")]), None);
    }

    #[test]
    fn urls_are_https_or_allowed_loopback_http() {
        let ok = |u: &str, allow: bool| check_url(u, allow, "url").is_ok();
        assert!(ok(
            "https://issuer.example.com/.well-known/jwks.json",
            false
        ));
        assert!(ok("https://10.0.0.1:8443/keys?x=1", false));
        assert!(!ok("http://127.0.0.1:8080/jwks", false));
        assert!(ok("http://127.0.0.1:8080/jwks", true));
        assert!(ok("http://127.1.2.3/jwks", true));
        assert!(ok("http://[::1]:80/jwks", true));
        assert!(ok("http://localhost/jwks", true));
        assert!(!ok("http://10.0.0.1/jwks", true));
        assert!(!ok("http://example.com/jwks", true));
        assert!(!ok("ftp://example.com/jwks", true));
        assert!(!ok("https://user:pw@example.com/jwks", false));
        assert!(!ok("https://example.com/jwks#frag", false));
        assert!(!ok("https://example.com/j wks", false));
        assert!(!ok("/jwks", false));
        assert!(!ok("", false));
        let e = check_url("http://example.com/a?secret=1", true, "jwks_url").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn builder_refuses_bad_inputs() {
        let code = |b: RemoteJwksBuilder| b.build().unwrap_err().code();
        use crate::ResultCode::InvalidArgument;
        assert_eq!(
            code(RemoteJwks::builder("http://example.com/")),
            InvalidArgument
        );
        assert_eq!(
            code(RemoteJwks::discover("https://issuer.example.com?x=1")),
            InvalidArgument
        );
        assert_eq!(
            code(
                RemoteJwks::builder("https://example.com/jwks")
                    .refresh_bounds(Duration::from_secs(10), Duration::from_secs(5))
            ),
            InvalidArgument
        );
        assert_eq!(
            code(RemoteJwks::builder("https://example.com/jwks").ca_bundle_pem(b"not pem")),
            InvalidArgument
        );
        assert!(
            RemoteJwks::builder("https://example.com/jwks")
                .build()
                .is_ok()
        );
    }

    #[test]
    fn counts_entries_of_a_set() {
        assert_eq!(count_keys(r#"{"keys":[{},{"kty":"x"},1]}"#), 3);
        assert_eq!(count_keys("garbage"), 0);
    }
}
