//! What one server holds: where its keys come from, the keys as last
//! loaded, their documents encoded once per version, and its counters.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use hyper::header::HeaderValue;
use workload_identity::{
    EtcdKeyring, KeyState, Keyring, KeystoreLoadOptions, OidcDiscovery, RotationPolicy,
};

use super::metrics::{Gauges, Metrics};
use super::replicated;
use super::respond::etag_of;
use crate::CliError;
use crate::stamp::{Stamp, stamp};

/// The keys as last loaded, and what their source looked like then.
pub(super) struct Loaded {
    pub(super) keyring: Keyring,
    pub(super) stamp: Option<Stamp>,
    pub(super) loaded_at: i64,
    /// The last reload failure, while the file still looks as it did then;
    /// with --etcd, why the copy is not known to be current.
    pub(super) error: Option<String>,
    /// With --etcd: the revision last reported.
    pub(super) revision: i64,
    /// Counts every keyring loaded from the file (with the keyring's own
    /// generation, the documents' cache key).
    pub(super) generation: u64,
    /// With --etcd: the replicated keyring's generation last reported.
    pub(super) keyring_generation: u64,
    /// A reload that failed on I/O (not on the file's content) is tried
    /// again from this time on, even if the file did not change: a
    /// descriptor shortage must not make a rotation be skipped.
    pub(super) retry_at: Option<Instant>,
}

/// The documents of one version of the keys, encoded once.
pub(super) struct Docs {
    /// The source's generation and the keyring's, read before building.
    pub(super) generation: (u64, u64),
    pub(super) jwks: Bytes,
    pub(super) jwks_etag: HeaderValue,
    /// The WIT key set (`/wit/jwks.json`).
    pub(super) wit_jwks: Bytes,
    pub(super) wit_jwks_etag: HeaderValue,
    /// The SPIFFE bundle (`/spiffe/bundle.json`), with its `spiffe_sequence`.
    pub(super) spiffe_bundle: Bytes,
    pub(super) spiffe_bundle_etag: HeaderValue,
    /// `None` without --issuer; `Err` when the document cannot be made.
    pub(super) discovery: Option<Result<(Bytes, HeaderValue), String>>,
    /// The cluster issuer's key set (`/kubernetes/jwks.json`, and
    /// `<path>/openid/v1/jwks` with --kubernetes-issuer).
    pub(super) kubernetes_jwks: Bytes,
    pub(super) kubernetes_jwks_etag: HeaderValue,
    /// `None` without --kubernetes-issuer.
    pub(super) kubernetes_discovery: Option<Result<(Bytes, HeaderValue), String>>,
    pub(super) keys_served: usize,
    /// The second `timing` was computed for.
    pub(super) at: i64,
    /// `max-age` and the next planned key switch at `at`.
    pub(super) timing: (u64, Option<i64>),
}

/// Where the served keys come from.
pub(super) enum Source {
    /// A keystore file, re-read when it changes.
    File {
        path: PathBuf,
        /// The KEK of a wrapped keystore, read once at start.
        load_options: KeystoreLoadOptions,
    },
    /// The replicated keyring, kept current by its watch (or, until etcd
    /// answers, its local snapshot).
    Etcd(replicated::Replicated),
}

/// A cluster issuer whose discovery document and key set this server
/// serves (`--kubernetes-issuer`), at the paths kube-apiserver serves them:
/// `<path>/.well-known/openid-configuration` and `<path>/openid/v1/jwks`.
pub(super) struct KubernetesIssuer {
    pub(super) issuer: String,
    pub(super) discovery_path: String,
    pub(super) jwks_path: String,
}

impl KubernetesIssuer {
    /// The paths of `issuer`'s documents (its URL's path, no trailing `/`).
    pub(super) fn new(issuer: &str) -> KubernetesIssuer {
        let after_scheme = issuer.split_once("://").map_or(issuer, |(_, r)| r);
        let path = after_scheme
            .find('/')
            .map_or("", |i| &after_scheme[i..])
            .trim_end_matches('/');
        KubernetesIssuer {
            issuer: issuer.to_string(),
            discovery_path: format!("{path}/.well-known/openid-configuration"),
            jwks_path: format!("{path}/openid/v1/jwks"),
        }
    }
}

/// How soon a reload that failed on I/O is tried again.
const RELOAD_RETRY: Duration = Duration::from_secs(1);

pub(super) struct Server {
    pub(super) source: Source,
    pub(super) issuer: Option<String>,
    /// `--kubernetes-issuer`: the cluster's issuer and the path its
    /// documents are served under.
    pub(super) kubernetes: Option<KubernetesIssuer>,
    /// The SPIFFE bundle's `spiffe_refresh_hint` (`--spiffe-refresh-hint`).
    pub(super) spiffe_refresh_hint: Duration,
    pub(super) policy: RotationPolicy,
    pub(super) loaded: Mutex<Loaded>,
    pub(super) fixed_now: Option<i64>,
    pub(super) docs: Mutex<Option<Arc<Docs>>>,
    pub(super) metrics: Metrics,
    /// `--log-requests`.
    pub(super) log_requests: bool,
}

impl Server {
    pub(super) fn now(&self) -> i64 {
        self.fixed_now.unwrap_or_else(workload_identity::unix_now)
    }

    /// How long a new key is published before it signs, when known: the
    /// replicated keyring's lead time, or the stored policy's.
    fn lead_time(&self, keyring: &Keyring) -> Option<Duration> {
        match &self.source {
            Source::Etcd(r) => r.lead_time(keyring),
            Source::File { .. } => keyring.policy().map(|p| p.lead_time),
        }
    }

    /// The current keyring, whether it is not current (why), and its
    /// generation: re-read first when the file changed.
    pub(super) fn current(&self) -> (Keyring, Option<String>, u64) {
        let (path, load_options) = match &self.source {
            Source::File { path, load_options } => (path, load_options),
            Source::Etcd(r) => {
                return match (r.live(), r.stale()) {
                    (Some(live), _) => self.current_replicated(live),
                    (None, Some((keyring, why))) => (keyring, Some(why), 0),
                    (None, None) => (Keyring::new(), Some("etcd has not answered".into()), 0),
                };
            }
        };
        let mut l = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let now_stamp = stamp(path);
        let retry = l.retry_at.is_some_and(|t| Instant::now() >= t);
        if now_stamp != l.stamp || retry {
            match Keyring::load_with(path, load_options) {
                Ok(k) => {
                    serve_log!(Info, "reloaded {} ({} keys)", path.display(), k.len());
                    l.keyring = k;
                    l.loaded_at = self.now();
                    l.error = None;
                    l.retry_at = None;
                    l.generation += 1;
                    self.metrics
                        .keystore_reloads
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    let error = format!("{}: {e}", e.code().name());
                    if !retry || l.error.as_deref() != Some(error.as_str()) {
                        self.metrics
                            .keystore_reload_failures
                            .fetch_add(1, Ordering::Relaxed);
                        serve_log!(Info, "reload failed, serving the last good keys: {error}");
                    }
                    // A file that cannot be read (out of descriptors, a
                    // transient I/O error) is tried again each second; one
                    // whose content is bad waits until the file changes.
                    l.retry_at = (e.code() == workload_identity::ResultCode::IoError)
                        .then(|| Instant::now() + RELOAD_RETRY);
                    l.error = Some(error);
                }
            }
            l.stamp = now_stamp;
        }
        (l.keyring.clone(), l.error.clone(), l.generation)
    }

    /// The replicated keyring (always the watched copy), and whether it is
    /// cut off; changes are noted on stderr as requests see them.
    fn current_replicated(&self, replicated: &EtcdKeyring) -> (Keyring, Option<String>, u64) {
        let stats = replicated.stats();
        let keyring = replicated.keyring();
        let mut l = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        l.revision = stats.revision;
        // The keys changed (not merely the revision: the election key moves
        // it too).
        let generation = keyring.generation();
        if generation != l.keyring_generation {
            serve_log!(
                Info,
                "keyring at {} now at etcd revision {} ({} keys)",
                replicated.prefix(),
                stats.revision,
                stats.keys
            );
            l.keyring_generation = generation;
            l.loaded_at = self.now();
            self.metrics
                .keystore_reloads
                .fetch_add(1, Ordering::Relaxed);
        }
        let error = stats.cut_off.then(|| {
            format!(
                "cut off from etcd (not proven current for {}): serving the keys last seen{}",
                stats
                    .since_proven
                    .map_or("ever".to_string(), |d| format!("{} ms", d.as_millis())),
                stats
                    .last_error
                    .as_deref()
                    .map_or(String::new(), |e| format!("; last error: {e}"))
            )
        });
        if error.is_some() != l.error.is_some() {
            match &error {
                Some(e) => serve_log!(Info, "{e}"),
                None => serve_log!(Info, "etcd answers again; the keyring is current"),
            }
        }
        l.error.clone_from(&error);
        (keyring, error, l.generation)
    }

    /// The documents of the current keys (encoded once per version) and
    /// their timing at `now` (computed once per second), with whether the
    /// keys are not current.
    pub(super) fn docs(&self, now: i64) -> (Arc<Docs>, Option<String>) {
        let (keyring, error, source_generation) = self.current();
        // Read before the keys are: see Keyring::generation.
        let generation = (source_generation, keyring.generation());
        let mut cached = self.docs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = cached.as_ref()
            && d.generation == generation
            && d.at == now
        {
            return (Arc::clone(d), error);
        }
        // The policy stored with the keys, as it is now (it may be changed
        // while this server runs), else the flags'.
        let policy = keyring
            .policy()
            .map_or(self.policy, |p| p.rotation_policy());
        let timing = (
            match self.lead_time(&keyring) {
                Some(lead) => keyring.jwks_max_age_with_lead(now, &policy, lead),
                None => keyring.jwks_max_age(now, &policy),
            }
            .as_secs(),
            keyring.next_key_switch(now, &policy),
        );
        let docs = match cached.as_ref() {
            // The keys are the same: only the timing moved on.
            Some(d) if d.generation == generation => Docs {
                generation,
                jwks: d.jwks.clone(),
                jwks_etag: d.jwks_etag.clone(),
                wit_jwks: d.wit_jwks.clone(),
                wit_jwks_etag: d.wit_jwks_etag.clone(),
                spiffe_bundle: d.spiffe_bundle.clone(),
                spiffe_bundle_etag: d.spiffe_bundle_etag.clone(),
                discovery: d.discovery.clone(),
                kubernetes_jwks: d.kubernetes_jwks.clone(),
                kubernetes_jwks_etag: d.kubernetes_jwks_etag.clone(),
                kubernetes_discovery: d.kubernetes_discovery.clone(),
                keys_served: d.keys_served,
                at: now,
                timing,
            },
            _ => {
                let jwks = keyring.jwks();
                let jwks_body = Bytes::from(jwks.to_json());
                let wit_body = Bytes::from(
                    keyring
                        .jwks_for(workload_identity::KeyPurpose::Wit)
                        .to_json(),
                );
                let bundle_body =
                    Bytes::from(keyring.spiffe_endpoint_bundle_json(self.spiffe_refresh_hint));
                let discovery = self.discovery(&keyring).map(|doc| {
                    doc.map(|doc| {
                        let body = Bytes::from(doc.to_json());
                        let tag = etag_of(&body);
                        (body, tag)
                    })
                });
                let kubernetes_body =
                    Bytes::from(workload_identity::service_account_jwks(&keyring).to_json());
                let kubernetes_discovery = self.kubernetes.as_ref().map(|k| {
                    workload_identity::service_account_discovery(&keyring, &k.issuer)
                        .map(|doc| {
                            let body = Bytes::from(doc.to_json());
                            let tag = etag_of(&body);
                            (body, tag)
                        })
                        .map_err(|e| e.to_string())
                });
                Docs {
                    generation,
                    kubernetes_jwks_etag: etag_of(&kubernetes_body),
                    kubernetes_jwks: kubernetes_body,
                    kubernetes_discovery,
                    jwks_etag: etag_of(&jwks_body),
                    jwks: jwks_body,
                    wit_jwks_etag: etag_of(&wit_body),
                    wit_jwks: wit_body,
                    spiffe_bundle_etag: etag_of(&bundle_body),
                    spiffe_bundle: bundle_body,
                    discovery,
                    keys_served: jwks.keys.len(),
                    at: now,
                    timing,
                }
            }
        };
        let docs = Arc::new(docs);
        *cached = Some(Arc::clone(&docs));
        (docs, error)
    }

    /// Whether this server's rotation candidate is elected (`None`: it runs none).
    pub(super) fn rotator_elected(&self) -> Option<bool> {
        match &self.source {
            Source::Etcd(r) => r.rotator_elected(),
            Source::File { .. } => None,
        }
    }

    fn discovery(&self, keyring: &Keyring) -> Option<Result<OidcDiscovery, String>> {
        let issuer = self.issuer.as_deref()?;
        Some(discovery_for(keyring, issuer).map_err(|e| e.message))
    }
}

/// The discovery document (the library takes an http issuer only to a
/// loopback host, which `run` has checked against the listener too).
pub(super) fn discovery_for(keyring: &Keyring, issuer: &str) -> Result<OidcDiscovery, CliError> {
    Ok(keyring.oidc_discovery(issuer)?)
}

/// The gauges of `server` at `now` (`docs` and `current` as the request
/// found them; `connections` open now).
pub(super) fn gauges(
    server: &Server,
    (docs, current): (&Docs, bool),
    connections: usize,
    now: i64,
) -> Gauges {
    let (keyring, _, _) = server.current();
    let keys = keyring.keys();
    // The policy stored with the keys, else the flags'.
    let policy = keyring
        .policy()
        .map_or(server.policy, |p| p.rotation_policy());
    let next_change = if workload_identity::plan_rotation(&keys, now, &policy).is_empty() {
        workload_identity::next_planned_change(&keys, now, &policy).map(|(t, _)| t)
    } else {
        Some(now)
    };
    let keys_by_state = [
        KeyState::Active,
        KeyState::Prepublished,
        KeyState::Inactive,
        KeyState::Deprecated,
    ]
    .iter()
    .map(|s| (s.name(), keys.iter().filter(|k| k.state == *s).count()))
    .collect();
    let (cut_off, rotator_elected) = match &server.source {
        Source::Etcd(r) => (
            Some(r.live().is_none_or(|live| live.stats().cut_off)),
            server.rotator_elected(),
        ),
        Source::File { .. } => (None, None),
    };
    Gauges {
        keys_served: docs.keys_served,
        next_rotation_secs: docs.timing.1.map(|t| t.saturating_sub(now)),
        current,
        connections,
        keys_by_state,
        next_change_secs: next_change.map(|t| t.saturating_sub(now).max(0)),
        last_change: server
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .loaded_at,
        cut_off,
        rotator_elected,
    }
}
