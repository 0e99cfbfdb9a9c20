//! `wid serve`: the JWKS and OIDC discovery documents over HTTP or HTTPS.
//!
//! hyper's HTTP/1.1 server on tokio (`net.rs`), TLS with rustls
//! (`tls.rs`: reloaded when the certificate files change; client
//! certificates required on every route but the key sets and discovery document when
//! `--tls-client-ca` is given), the answers and their HTTP rules
//! (`respond.rs`: GET/HEAD, `ETag` and `If-None-Match`, `Cache-Control`),
//! and `/metrics` (`metrics.rs`). Requests are bounded (head size, a
//! deadline for the whole head, keep-alive connections cut after a
//! lifetime) and so are connections (`--max-connections`; more wait in the
//! kernel's backlog): slow clients cannot hold the server shut. The
//! keystore is re-read when its file changes (checked on every request: one
//! `stat`), and a failed reload keeps serving the last good keys while
//! `/health` reports it. The documents are encoded once per version of the
//! keys. With `--etcd` the keys are the replicated keyring's, kept current
//! by its watch (a change made anywhere is served without a restart), and
//! `--rotator` runs an elected rotation candidate in this process. SIGTERM
//! and SIGINT stop accepting, let requests in flight finish (5 s at most),
//! and exit 0; a second signal exits at once with status 1.

mod metrics;
mod net;
mod replicated;
mod respond;
mod routes;
mod server;
mod tls;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use serde_json::json;
use workload_identity::ResultCode;

use crate::etcd_args::{self, Opened, StoreArgs};
use crate::keyring_cmd::PolicyArgs;
use crate::output::{Ctx, utc};
use crate::sources::bad_flag;
use crate::stamp::stamp;
use crate::{CliError, Exit};
use metrics::Metrics;
use server::{Loaded, Server, Source, discovery_for};

pub(crate) const AFTER_HELP: &str = "\
Routes (GET or HEAD):
  /.well-known/jwks.json               the bearer keys that verify (what
                                       relying parties trust)
  /wit/jwks.json                       the WIT key set: the keys that verify
                                       workload identity tokens, for their
                                       receivers only (never a bearer JWKS)
  /spiffe/bundle.json                  the SPIFFE trust bundle (federation
                                       bundle endpoint, https_web profile):
                                       the ES/RS bearer keys as jwt-svid and
                                       the WIT keys as wit-svid authorities,
                                       spiffe_sequence (the keys' latest
                                       recorded change, Unix seconds) and
                                       spiffe_refresh_hint
  /.well-known/openid-configuration    the discovery document (needs --issuer)
  /kubernetes/jwks.json                the kubernetes keys (a cluster's
                                       service-account tokens, signed by
                                       `wid k8s-signer`); with
                                       --kubernetes-issuer also at
                                       <path>/openid/v1/jwks, beside
                                       <path>/.well-known/openid-configuration
  /health                              200 when the keystore is loaded and
                                       current, 503 when a reload failed, no
                                       key is published (--etcd: when cut off
                                       from etcd, or serving --etcd-snapshot)
  /metrics                             Prometheus text: requests by route and
                                       status, reloads, keys served and by
                                       state, seconds to the next planned
                                       change, the election, the cut-off
The JWKS, the WIT key set, the SPIFFE bundle and the discovery document
carry Cache-Control: max-age from the rotation policy (half the time to the
next planned key switch, at least 15 minutes; with --etcd or a stored
policy never more than the time to the next planned change less the lead
time; the bundle's never more than its refresh hint) and an ETag
(If-None-Match: 304 Not Modified). HTTP/1.1 with keep-alive; HTTPS with
--tls-cert and --tls-key (PEM; reloaded when the files change, so
certificates rotate without a restart). --tls-client-ca requires a client
certificate signed by that CA on /health and /metrics; the JWKS, the WIT
key set, the SPIFFE bundle and the discovery document stay open to relying
parties without one.
The issuer must be https, except that an http issuer on a loopback host is
allowed when the listener is loopback too (for testing OIDC clients on one
machine). The first line on stdout names the address (useful with --listen
127.0.0.1:0). SIGTERM or SIGINT: clean stop, exit 0; a second signal while
stopping: exit 1 at once.

With --etcd the keys are the replicated keyring's, kept current by an etcd
watch: a change made by any process (`wid keyring rotate --etcd ...`,
another server's rotator) is served without a restart, so every server on
one prefix serves the same JWKS. /health answers 503 while this server is
cut off from etcd (it keeps serving the keys it last saw). --rotator makes
this server a rotation candidate: of all candidates on the prefix, one is
elected with an etcd lease and runs the rotation policy stored with the keys
(`wid keyring policy set`; without one, --rotation-threshold and --longest-ttl,
defaults 720h and unset: no key is ever deprecated), promoting prepublished
keys after the lead time. Flags that contradict a stored policy are refused.
Every event is logged to stderr as it happens, stamped with its time
(--log-format json: one JSON object per line).";

#[derive(Debug, Args)]
#[command(mut_arg("keystore", |a| a.help(
    "The keystore to publish (re-read when the file changes), or --etcd for the replicated keyring"
)))]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// With --etcd: run a rotation candidate in this server. One candidate
    /// of all on the prefix is elected (an etcd lease) and runs the rotation
    /// policy (--rotation-threshold, --longest-ttl); if it stops or is cut
    /// off, another takes over after the lease's TTL (--rotator-lease-ttl).
    #[arg(long, requires = "etcd", help_heading = etcd_args::HEADING)]
    rotator: bool,
    /// With --rotator: the election lease's TTL, whole seconds from 2s to
    /// 1h: how long a rotator that stopped or was cut off keeps the others
    /// from taking over (a takeover comes within it plus one keep-alive
    /// interval and half a second).
    #[arg(long, value_name = "DURATION", default_value = "3s",
          value_parser = crate::output::parse_duration, requires = "rotator",
          help_heading = etcd_args::HEADING)]
    rotator_lease_ttl: Duration,
    /// With --rotator: how often the elected rotator renews its lease and
    /// runs the policy, and the others campaign (10ms to a third of the
    /// lease TTL).
    #[arg(long, value_name = "DURATION", default_value = "500ms",
          value_parser = crate::output::parse_duration, requires = "rotator",
          help_heading = etcd_args::HEADING)]
    rotator_keep_alive: Duration,
    /// With --etcd: keep a local snapshot of the last keyring applied in
    /// FILE (wrapped by the KEK, mode 0600, rewritten after every change),
    /// and serve it when etcd cannot be reached at start (stale: /health
    /// answers 503 and /metrics says cut off) until etcd answers, instead
    /// of exiting.
    #[arg(long, value_name = "FILE", requires = "etcd", help_heading = etcd_args::HEADING)]
    etcd_snapshot: Option<PathBuf>,
    /// Where to listen, e.g. 127.0.0.1:8080 (port 0: any free port).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// The issuer URL, for the discovery document.
    #[arg(long, value_name = "URL")]
    issuer: Option<String>,
    /// A Kubernetes cluster's issuer (kube-apiserver's
    /// --service-account-issuer, whose tokens `wid k8s-signer` signs):
    /// serve its discovery document at <path>/.well-known/openid-configuration
    /// and its key set (the kubernetes keys) at <path>/openid/v1/jwks, the
    /// paths the apiserver serves them at, <path> being the URL's path.
    #[arg(long, value_name = "URL")]
    kubernetes_issuer: Option<String>,
    /// The SPIFFE bundle's spiffe_refresh_hint (/spiffe/bundle.json): how
    /// often a federated trust domain should fetch it again, e.g. 5m.
    #[arg(long, value_name = "DURATION", default_value = "5m",
          value_parser = crate::output::parse_duration)]
    spiffe_refresh_hint: std::time::Duration,
    /// Serve HTTPS with this certificate (PEM, the server's first, then its
    /// chain); reloaded when the file changes. Needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1; mode
    /// 0600: a file group or others can read is refused); reloaded when the
    /// file changes.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require a client certificate signed by a CA of this PEM bundle on
    /// /health and /metrics. The JWKS and discovery document stay open
    /// without one (relying parties such as Vault and Consul cannot present
    /// one). Needs --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Connections served at once; more wait in the kernel's backlog until
    /// one closes.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_connections: u32,
    /// How long a client may take to send a whole request head (also the
    /// wait for the next request on a kept-alive connection) and to finish
    /// a TLS handshake; the connection is closed after.
    #[arg(long, value_name = "DURATION", default_value = "5s",
          value_parser = crate::output::parse_duration)]
    request_timeout: std::time::Duration,
    /// Log every request to stderr: method, path, status (off by default:
    /// relying parties fetch often).
    #[arg(long)]
    log_requests: bool,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// The port an `http://` issuer names (80 when it names none); `None` for
/// any other issuer (an https one is commonly served through a proxy on
/// another port than the listener's).
fn http_issuer_port(issuer: &str) -> Option<u16> {
    let rest = issuer.strip_prefix("http://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let port = if let Some(v6) = authority.strip_prefix('[') {
        v6.split_once("]:").map(|(_, p)| p)
    } else {
        authority.split_once(':').map(|(_, p)| p)
    };
    match port {
        Some(p) => p.parse().ok(),
        None => Some(80),
    }
}

/// The host of an `http://` URL, if it is a loopback name or address.
fn loopback_host(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

pub(crate) fn run(a: &ServeArgs, ctx: &Ctx) -> Result<(), CliError> {
    if a.request_timeout.is_zero() {
        return Err(bad_flag(
            "--request-timeout",
            "must be more than zero: no request could ever arrive in time",
        ));
    }
    if a.rotator && !a.store.etcd.given() {
        return Err(bad_flag(
            "--rotator",
            "applies with --etcd only: it rotates the replicated keyring",
        ));
    }
    if a.rotator {
        let timing = workload_identity::RotatorOptions::stored_policy()
            .lease_ttl(a.rotator_lease_ttl)
            .interval(a.rotator_keep_alive);
        if let Err(workload_identity::Error::InvalidArgument(e)) = timing.check_timing() {
            let p = &e.problems[0];
            let flag = match p.field.as_str() {
                "lease_ttl" => "--rotator-lease-ttl",
                _ => "--rotator-keep-alive",
            };
            return Err(bad_flag(flag, &p.problem));
        }
    }
    let snapshot = match &a.etcd_snapshot {
        Some(path) => Some(replicated::Snapshot::new(
            path.clone(),
            a.store.custody.wrapper()?,
        )),
        None => None,
    };
    // With --etcd-snapshot, etcd not answering at start is no reason to
    // stop: the snapshot of the last keyring applied is served, stale.
    let (opened, snapshot) = match a.store.open_with_policy(Some(a.policy.both()), ctx) {
        Ok(o) => (Some(o), snapshot),
        Err(e) if e.code == ResultCode::KeyringUnavailable && snapshot.is_some() => {
            let snap = snapshot.map(|s| s.load(e.message.clone())).transpose()?;
            (None, snap)
        }
        Err(e) => return Err(e),
    };
    let keyring = match (&opened, &snapshot) {
        (Some(o), _) => o.keyring(),
        (None, Some(snap)) => {
            let (kr, _, _) = snap.serving.as_ref().expect("loaded above");
            // The snapshot's policy binds the flags as etcd's would.
            let mut given = a.policy.overrides();
            given.lead_time = a.store.etcd.etcd_lead_time;
            Opened::File {
                path: snap.path.clone(),
                keyring: kr.clone(),
            }
            .refuse_other_policy(&given)?;
            kr.clone()
        }
        (None, None) => unreachable!("an error was returned above"),
    };
    // A policy stored with the keys wins (flags that contradict it were
    // refused); the flags' applies to a keyring that stores none.
    let policy = a.policy.policy();
    let follows_stored = keyring.policy().is_some();
    if let Some(issuer) = &a.issuer {
        if issuer.starts_with("http://") {
            if !a.listen.ip().is_loopback() {
                return Err(bad_flag(
                    "--issuer",
                    format!(
                        "an http issuer is allowed only on a loopback listener, not {}",
                        a.listen
                    ),
                )
                .hint("production issuers are https (behind a TLS-terminating proxy)"));
            }
            if !loopback_host(issuer) {
                return Err(bad_flag(
                    "--issuer",
                    format!(
                        "an http issuer must name a loopback host (127.0.0.1, [::1], localhost), not {issuer:?}"
                    ),
                ));
            }
        }
        discovery_for(&keyring, issuer)?;
    }
    let kubernetes = match &a.kubernetes_issuer {
        Some(url) => {
            workload_identity::service_account_discovery(&keyring, url)
                .map_err(|e| bad_flag("--kubernetes-issuer", e.to_string()))?;
            let k = server::KubernetesIssuer::new(url);
            if a.issuer.is_some() && k.discovery_path == "/.well-known/openid-configuration" {
                return Err(bad_flag(
                    "--kubernetes-issuer",
                    format!(
                        "{url} would serve its discovery document where --issuer's is; give the cluster's issuer a path of its own (e.g. {}/k8s)",
                        url.trim_end_matches('/')
                    ),
                ));
            }
            Some(k)
        }
        None => None,
    };
    // TLS first: a certificate that cannot be used stops the start, before
    // the address is announced.
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(tls::Tls::new(tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: a.tls_client_ca.clone(),
        })?)),
        _ => None,
    };
    let listener = TcpListener::bind(a.listen)
        .map_err(|e| CliError::io(format!("listening on {}", a.listen), &e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::io("reading the listening address", &e))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        // The first signal sets the flag (a clean stop); a second one, while
        // draining, exits at once with status 1 (handlers run in this order).
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&stop)))
            .map_err(|e| CliError::io("installing the signal handler", &e))?;
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| CliError::io("configuring the listener", &e))?;

    let mut described = match &opened {
        Some(o) => o.json_fields(),
        None => {
            let mut m = serde_json::Map::new();
            m.insert("etcd_prefix".into(), json!(a.store.etcd.prefix()));
            m
        }
    };
    let candidate = replicated::Candidate {
        rotator: a.rotator,
        lease_ttl: a.rotator_lease_ttl,
        keep_alive: a.rotator_keep_alive,
        follows_stored,
        policy,
        address: addr.to_string(),
        issuer: a.issuer.clone(),
        started: ctx.now(),
    };
    let (source, file_stamp, revision) = match opened {
        Some(Opened::File { path, .. }) => {
            let file_stamp = stamp(&path);
            (
                Source::File {
                    path,
                    load_options: a.store.custody.load_options()?,
                },
                file_stamp,
                0,
            )
        }
        Some(Opened::Etcd(live)) => {
            let revision = live.stats().revision;
            let r = replicated::Replicated::live_from_start(live, snapshot);
            r.start(&candidate)?;
            (Source::Etcd(r), None, revision)
        }
        None => {
            let snap = snapshot.expect("loaded above");
            let (_, saved_at, why) = snap.serving.as_ref().expect("loaded above");
            serve_log!(
                Warn,
                "etcd did not answer ({why}): serving the snapshot {} saved {} until it does",
                snap.path.display(),
                utc(*saved_at)
            );
            described.insert("snapshot".into(), json!(snap.path.display().to_string()));
            (
                Source::Etcd(replicated::Replicated::from_snapshot(
                    snap,
                    a.store.etcd.prefix(),
                )),
                None,
                0,
            )
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    described.insert("listening".into(), json!(addr.to_string()));
    described.insert("url".into(), json!(format!("{scheme}://{addr}")));
    described.insert("issuer".into(), json!(a.issuer));
    described.insert("tls".into(), json!(tls.is_some()));
    described.insert(
        "client_certificates".into(),
        json!(tls.as_ref().is_some_and(|t| t.client_auth)),
    );
    if let Source::Etcd(_) = &source {
        described.insert("rotator".into(), json!(a.rotator));
    }
    let keyring_generation = keyring.generation();
    let server = Arc::new(Server {
        source,
        issuer: a.issuer.clone(),
        kubernetes,
        spiffe_refresh_hint: a.spiffe_refresh_hint,
        policy,
        loaded: Mutex::new(Loaded {
            keyring,
            stamp: file_stamp,
            loaded_at: ctx.now(),
            error: None,
            revision,
            generation: 0,
            keyring_generation,
            retry_at: None,
        }),
        fixed_now: ctx.fixed_now(),
        docs: Mutex::new(None),
        metrics: Metrics::default(),
        log_requests: a.log_requests,
    });
    ctx.emit(
        &format!("listening on {scheme}://{addr}"),
        &serde_json::Value::Object(described),
    );
    // The test harness and supervisors read the address from this line.
    let _ = std::io::stdout().flush();
    if let Some(port) = a.issuer.as_deref().and_then(http_issuer_port)
        && port != addr.port()
    {
        ctx.note(&format!(
                "the issuer {} names port {port}, but this server listens on {}: relying parties following the discovery document will fetch the JWKS from port {port}",
                a.issuer.as_deref().unwrap_or_default(),
                addr.port()
            ));
    }
    if let Source::Etcd(r) = &server.source {
        if let Some(live) = r.live() {
            ctx.note(&format!(
                "serving the replicated keyring at {} (etcd revision {revision}, {} keys){}",
                live.prefix(),
                live.keyring().len(),
                if a.rotator {
                    "; running a rotation candidate"
                } else {
                    ""
                }
            ));
        } else {
            let mut given = a.policy.overrides();
            given.lead_time = a.store.etcd.etcd_lead_time;
            connect_later(
                Arc::clone(&server),
                replicated::Retry {
                    etcd: a.store.etcd.clone(),
                    wrapper: a.store.custody.wrapper()?,
                    rotation: policy,
                    given,
                    candidate,
                    ctx: *ctx,
                },
                &stop,
            )?;
        }
    }

    let resign = {
        let server = Arc::clone(&server);
        move || {
            if let Source::Etcd(r) = &server.source {
                r.stop();
            }
        }
    };
    // Changes are logged as they happen, not when the next request comes:
    // a keystore re-read, a new etcd revision, a cut-off and its end.
    let watcher = {
        let server = Arc::clone(&server);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("wid-serve-watch".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let _ = server.current();
                    if let Source::Etcd(r) = &server.source {
                        r.save_snapshot();
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            })
            .map_err(|e| CliError::new(ResultCode::IoError, format!("starting a thread: {e}")))?
    };
    let left = net::serve(
        Arc::clone(&server),
        listener,
        tls,
        &stop,
        net::Limits {
            max_connections: a.max_connections as usize,
            request_timeout: a.request_timeout,
        },
        resign,
    )?;
    stop.store(true, Ordering::Release);
    let _ = watcher.join();
    ctx.note(&format!(
        "stopped by signal{}",
        if left > 0 {
            format!(" ({left} connection(s) still open were cut)")
        } else {
            String::new()
        }
    ));
    if left > 0 {
        return Err(CliError::new(
            ResultCode::IoError,
            format!(
                "{left} connection(s) did not finish within {}s",
                net::DRAIN.as_secs()
            ),
        )
        .exit(Exit::Io));
    }
    Ok(())
}

/// Tries etcd every 2 s until it answers (then serves the replicated keyring
/// from then on) or the server stops. A policy stored there that the flags
/// contradict stops the process, as it would have at the start.
fn connect_later(
    server: Arc<Server>,
    retry: replicated::Retry,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), CliError> {
    let stop = Arc::clone(stop);
    std::thread::Builder::new()
        .name("wid-serve-etcd-retry".into())
        .spawn(move || {
            let mut last: Option<String> = None;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                match retry
                    .etcd
                    .open_with(retry.wrapper.clone(), Some(retry.rotation), &retry.ctx)
                {
                    Ok(live) => {
                        let opened = crate::etcd_args::Opened::Etcd(live);
                        if let Err(e) = opened.refuse_other_policy(&retry.given) {
                            serve_log!(Error, "{}; stopping", e.message);
                            std::process::exit(crate::Exit::Usage as i32);
                        }
                        let crate::etcd_args::Opened::Etcd(live) = opened else {
                            return;
                        };
                        if let Source::Etcd(r) = &server.source {
                            r.connected(live, &retry.candidate);
                        }
                        return;
                    }
                    Err(e) => {
                        if last.as_deref() != Some(e.message.as_str()) {
                            serve_log!(Warn, "etcd still does not answer: {}", e.message);
                            last = Some(e.message);
                        }
                    }
                }
                for _ in 0..20 {
                    if stop.load(std::sync::atomic::Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
        .map(drop)
        .map_err(|e| CliError::io("starting the etcd retry thread", &e))
}

#[cfg(test)]
mod tests {
    use super::loopback_host;

    #[test]
    fn http_issuer_ports() {
        use super::http_issuer_port;
        assert_eq!(http_issuer_port("http://127.0.0.1:8080"), Some(8080));
        assert_eq!(http_issuer_port("http://localhost/x"), Some(80));
        assert_eq!(http_issuer_port("http://[::1]:9000/"), Some(9000));
        assert_eq!(http_issuer_port("https://issuer.example.com"), None);
    }

    #[test]
    fn loopback_issuers() {
        assert!(loopback_host("http://127.0.0.1:8080"));
        assert!(loopback_host("http://localhost/x"));
        assert!(loopback_host("http://[::1]:80"));
        assert!(!loopback_host("http://10.0.0.1"));
        assert!(!loopback_host("http://example.com"));
        assert!(!loopback_host("https://127.0.0.1"));
    }
}
