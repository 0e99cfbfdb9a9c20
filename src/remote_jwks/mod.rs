//! [`RemoteJwks`] (feature `remote-jwks`): its behaviour is documented on the type.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::keyring::{KeyId, KeyPurpose, Keyring};

mod builder;
mod fetch;
mod flight;
mod freshness;
mod spiffe;

pub use builder::{MAX_JWKS_BODY_LIMIT, RemoteJwksBuilder};
pub use spiffe::{SpiffeBundleSource, SpiffeBundleSourceBuilder};

use flight::Trigger;

/// Where the keys come from.
#[derive(Clone, PartialEq, Eq)]
enum Source {
    /// A JWKS URL.
    Jwks(String),
    /// An issuer whose discovery document names the JWKS.
    Issuer(String),
    /// A SPIFFE bundle endpoint's URL ([`SpiffeBundleSource`]).
    SpiffeBundle(String),
}

impl Source {
    /// What the log calls this source.
    fn label(&self) -> &'static str {
        match self {
            Source::Jwks(_) | Source::Issuer(_) => "remote JWKS",
            Source::SpiffeBundle(_) => "SPIFFE bundle",
        }
    }
}

/// The URL without its query and fragment, as in every message: a query may
/// carry a secret (a signed URL's signature, an access token).
impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Jwks(url) => f.debug_tuple("Jwks").field(&without_query(url)).finish(),
            Source::Issuer(url) => f.debug_tuple("Issuer").field(&without_query(url)).finish(),
            Source::SpiffeBundle(url) => f
                .debug_tuple("SpiffeBundle")
                .field(&without_query(url))
                .finish(),
        }
    }
}

/// A verify-only keyring that follows a remote JWKS.
///
/// A remote JWKS source (cargo feature `remote-jwks`): a verify-only
/// [`Keyring`] kept in step with an issuer's published keys, for services that
/// verify tokens they did not issue.
///
/// [`RemoteJwks`] fetches a JWKS over HTTPS (rustls; Mozilla's roots, or only
/// the CA bundle given), either from its URL or from the `jwks_uri` of the
/// issuer's `/.well-known/openid-configuration`, and imports it into a keyring
/// it owns. A verifier built over [`RemoteJwks::keyring`] needs nothing else:
///
/// * **Rotation without a restart.** When the verifier meets a `kid` the
///   keyring does not hold, it waits for it (its `key_wait`, default 1 s); this
///   source is told at once ([`Keyring::on_unknown_key`]) and starts a fetch on
///   its own thread, so a key published since the last fetch arrives during the
///   wait. At most one such fetch starts per *cooldown*, and only when no fetch
///   is in flight: a flood of made-up kids costs the issuer one request per
///   cooldown, not one per token.
/// * **Caching.** After a successful fetch the next is due after the response's
///   `Cache-Control: max-age` (less its `Age`; `no-cache`/`no-store` count as
///   0; without one, the configured default), clamped to the configured
///   bounds: a 7-day `max-age` cannot hide a rotation for a week, and
///   `max-age=0` cannot turn every verification into a request.
///   [`RemoteJwks::refresh_if_due`] fetches when due (the caller drives it), or
///   [`RemoteJwks::spawn_refresher`] runs a thread that does.
/// * **Failures keep the last good set.** A fetch that fails in any way — the
///   issuer down or slow past the timeout, a status other than 200, a body
///   over the size limit, more keys than the key limit, not a JWKS, a private
///   key, a weak or malformed key — changes nothing in the keyring; the
///   failure is counted and kept in [`RemoteJwks::stats`], and the next attempt
///   is due after the minimum refresh interval.
/// * **Strict import, then removal.** A set is checked as a whole first
///   ([`Keyring::from_jwks`]: all or nothing), then imported
///   ([`Keyring::import_jwks`]); keys that left the remote set are removed, so
///   they stop verifying after the next successful fetch, and a `kid` whose key
///   changed verifies with the new key only.
///
/// Plain `http` is refused unless [`RemoteJwksBuilder::allow_http_loopback`]
/// is set, and even then only to a loopback host (tests, a sidecar on the same
/// machine). Fetches are logged through the `log` facade at debug level, URLs
/// without their query; nothing is printed.
///
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
    /// A SPIFFE bundle's `spiffe_sequence`, if it carried one.
    pub sequence: Option<u64>,
    /// A SPIFFE bundle's `spiffe_refresh_hint`, if it carried one (it
    /// decides the next fetch, before `max-age`).
    pub refresh_hint: Option<Duration>,
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
    /// A SPIFFE bundle source: the `spiffe_sequence` of the bundle in the
    /// keyring (`None` before the first, or when it carried none).
    pub sequence: Option<u64>,
    /// A SPIFFE bundle source: bundles refused because their
    /// `spiffe_sequence` was lower than the one held (each also counts as a
    /// failure; the held bundle stays).
    pub sequence_refusals: u64,
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
    /// The purpose of the set's keys; `None`: learned from the source (a
    /// WIT key set's URL, `.../wit/jwks.json`, holds WIT keys; anything
    /// else bearer keys; a SPIFFE bundle's entries say theirs).
    purpose: Option<KeyPurpose>,
    /// Whether a CA bundle was given (for what a refused certificate means).
    ca_bundle_given: bool,
}

impl Config {
    /// The purpose of the fetched set's plain (`use` `sig`) keys.
    fn purpose(&self) -> KeyPurpose {
        match (self.purpose, &self.source) {
            (Some(p), _) => p,
            (None, Source::Jwks(url)) if is_wit_key_set_url(url) => KeyPurpose::Wit,
            _ => KeyPurpose::Bearer,
        }
    }
}

/// Whether `url`'s path is a WIT key set's (`/wit/jwks.json`, as `wid serve`
/// publishes it).
fn is_wit_key_set_url(url: &str) -> bool {
    without_query(url).ends_with("/wit/jwks.json")
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
    /// The `spiffe_sequence` of the bundle held.
    sequence: Option<u64>,
    sequence_refusals: u64,
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

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of the state is a few assignments with no call that
        // can panic between them; a poisoned lock still holds consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// Forgets the held SPIFFE bundle sequence (see
    /// [`SpiffeBundleSource::reset_sequence`]).
    pub(crate) fn reset_sequence(&self) -> Option<u64> {
        self.shared.lock().sequence.take()
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
            sequence: state.sequence,
            sequence_refusals: state.sequence_refusals,
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
                error: source,
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

/// A URL for messages and logs: without its query, which may carry a secret.
fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or_default().to_string()
}
