//! `RemoteJwks` against real servers on loopback (feature `remote-jwks`):
//! an HTTP/1.1 server in this process whose answers the tests change mid-run
//! (down, slow, 500, garbage, oversize, rotation, a private key, a key
//! removed) and which counts every request it receives; and, for HTTPS,
//! `openssl s_server` with the committed test CA (tests/vectors/tls/).
#![cfg(feature = "remote-jwks")]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use workload_identity::{
    Algorithm, Audience, Clock, Issuer, Keyring, MemoryStore, RemoteJwks, RemoteJwksBuilder,
    ResultCode, SpiffeBundleSource, Verifier,
};

const NOW: i64 = 1_700_000_000;
const AUD: &str = "vault.io";

// ---------------------------------------------------------------------------
// The test server.

/// One canned answer.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Sleep this long before answering.
    delay: Duration,
    /// Leave out Content-Length and end the body by closing the connection.
    close_delimited: bool,
    /// Hold the answer back until this gate opens.
    hold: Option<Arc<Gate>>,
}

/// Holds answers back until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }
}

impl Reply {
    fn json(body: impl Into<String>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into().into_bytes(),
            delay: Duration::ZERO,
            close_delimited: false,
            hold: None,
        }
    }

    fn status(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::json("{\"error\":\"nope\"}")
        }
    }

    fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    fn close_delimited(mut self) -> Reply {
        self.close_delimited = true;
        self
    }

    fn held(mut self, gate: &Arc<Gate>) -> Reply {
        self.hold = Some(gate.clone());
        self
    }
}

#[derive(Default)]
struct ServerState {
    /// By path: the query is left out.
    routes: Mutex<HashMap<String, Reply>>,
    /// By path, as the routes.
    hits: Mutex<HashMap<String, usize>>,
    /// Every request target, query included, in order of arrival.
    targets: Mutex<Vec<String>>,
    /// Requests being answered now, and the most ever at once.
    concurrent: AtomicUsize,
    max_concurrent: AtomicUsize,
    stopped: AtomicBool,
}

/// An HTTP/1.1 server on 127.0.0.1: one thread per connection, one request
/// per connection (`Connection: close`).
struct Server {
    addr: SocketAddr,
    state: Arc<ServerState>,
    accept: Option<thread::JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(ServerState::default());
        let st = state.clone();
        let accept = thread::spawn(move || {
            for conn in listener.incoming() {
                if st.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                thread::spawn(move || serve(conn, &st));
            }
            // The listener is dropped here: the port refuses connections.
        });
        Server {
            addr,
            state,
            accept: Some(accept),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn set(&self, path: &str, reply: Reply) {
        self.state.routes.lock().unwrap().insert(path.into(), reply);
    }

    fn hits(&self, path: &str) -> usize {
        self.state
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    fn max_concurrent(&self) -> usize {
        self.state.max_concurrent.load(Ordering::SeqCst)
    }

    fn targets(&self) -> Vec<String> {
        self.state.targets.lock().unwrap().clone()
    }

    /// Stops listening: from now on connections are refused.
    fn stop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        if let Some(t) = self.accept.take() {
            t.join().unwrap();
        }
        assert!(
            TcpStream::connect(self.addr).is_err(),
            "the port still accepts"
        );
    }
}

fn serve(mut conn: TcpStream, st: &ServerState) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 64 << 10 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let target = head.split_whitespace().nth(1).unwrap_or_default();
    // Routed and counted by path: a query (a signed URL's signature) is sent
    // along, as a real issuer would expect it.
    let path = target.split('?').next().unwrap_or_default().to_string();
    st.targets.lock().unwrap().push(target.to_string());
    *st.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    let now = st.concurrent.fetch_add(1, Ordering::SeqCst) + 1;
    st.max_concurrent.fetch_max(now, Ordering::SeqCst);
    let reply = st
        .routes
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .unwrap_or_else(|| Reply::status(404));
    thread::sleep(reply.delay);
    if let Some(gate) = &reply.hold {
        gate.wait();
    }
    // Out of the count before the answer is written: the client cannot start
    // its next request before it has this answer, so two requests counted at
    // once really overlapped (counting after the write let a busy host's
    // scheduler make sequential requests look concurrent).
    st.concurrent.fetch_sub(1, Ordering::SeqCst);
    let mut out = format!("HTTP/1.1 {} Canned\r\nConnection: close\r\n", reply.status);
    if !reply.close_delimited {
        out.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
    }
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&reply.body);
    let _ = conn.write_all(&bytes);
    let _ = conn.flush();
}

// ---------------------------------------------------------------------------
// Helpers.

/// A clock the test moves by hand (Unix milliseconds).
struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn token(keyring: &Keyring) -> String {
    Issuer::new(keyring.clone())
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token
}

fn token_alg(keyring: &Keyring, alg: Algorithm) -> String {
    Issuer::new(keyring.clone())
        .issue_with(alg, &common::issue_request_task(), NOW)
        .unwrap()
        .token
}

fn verifier(remote: &RemoteJwks, key_wait: Duration) -> Verifier {
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    Verifier::builder(remote.keyring().clone(), store, Audience::new(AUD).unwrap())
        .key_wait(key_wait)
        .build()
}

fn source(server: &Server) -> RemoteJwksBuilder {
    RemoteJwks::builder(&server.url("/jwks"))
        .allow_http_loopback(true)
        .timeout(Duration::from_secs(3))
}

/// An issuer with one active EdDSA key, published at /jwks.
fn issuer_and_server() -> (Keyring, Server) {
    let issuer = Keyring::new();
    issuer.rotate(NOW).unwrap();
    let server = Server::start();
    server.set("/jwks", Reply::json(issuer.jwks().to_json()));
    (issuer, server)
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------
// Tests.

/// The issuer rotates (a new EdDSA key, then a new ES256 key) while a verifier
/// runs: each token from a key the verifier has never seen is accepted
/// without a restart, because its unknown kid starts a fetch that the
/// verifier's key wait picks up. One request per rotation, none otherwise.
#[test]
fn a_rotation_mid_run_is_picked_up_by_the_unknown_kid_fetch() {
    let (issuer, server) = issuer_and_server();
    let remote = source(&server).build().unwrap();
    let first = remote.refresh().unwrap();
    assert_eq!(first.keys.len(), 1);
    assert_eq!(server.hits("/jwks"), 1);
    let v = verifier(&remote, Duration::from_secs(10));
    v.verify(&token(&issuer), NOW).unwrap();
    assert_eq!(server.hits("/jwks"), 1, "a known kid fetches nothing");

    issuer.rotate(NOW + 10).unwrap();
    issuer.rotate_alg(Algorithm::Es256, NOW + 10).unwrap();
    server.set("/jwks", Reply::json(issuer.jwks().to_json()));
    for (n, token) in [token(&issuer), token_alg(&issuer, Algorithm::Es256)]
        .iter()
        .enumerate()
    {
        let started = Instant::now();
        let id = v.verify(token, NOW).unwrap();
        let took = started.elapsed();
        eprintln!("rotated kid {} accepted after {took:?}", id.kid);
        // Well inside the 10 s key wait: the fetch, not the wait's end,
        // brought the key.
        assert!(took < Duration::from_secs(8), "took {took:?}");
        // The first new token's fetch brought both new keys.
        assert_eq!(server.hits("/jwks"), 2, "token {n}");
    }
    let stats = remote.stats();
    assert_eq!(stats.fetches, 2);
    assert_eq!(stats.unknown_kid_fetches, 1);
    assert_eq!(stats.failures, 0);
    assert!(!stats.stale);
    assert_eq!(stats.keys, 3);
}

/// 16 threads each verify 15 tokens with made-up (well-formed, never
/// published) kids, each lookup waiting out the 100 ms key wait: 240 unknown
/// kids over 1.5 s at least. With a 500 ms cooldown the issuer sees at most
/// one request per cooldown, never two at once, and every other lookup is
/// counted as suppressed. Nothing here depends on how fast the host is: the
/// bound on requests follows the time the flood really took.
#[test]
fn a_flood_of_unknown_kids_makes_at_most_one_fetch_per_cooldown() {
    let (issuer, server) = issuer_and_server();
    server.set(
        "/jwks",
        Reply::json(issuer.jwks().to_json()).delay(Duration::from_millis(50)),
    );
    let cooldown = Duration::from_millis(500);
    let remote = source(&server)
        .unknown_kid_cooldown(cooldown)
        .build()
        .unwrap();
    remote.refresh().unwrap();
    let v = verifier(&remote, Duration::from_millis(100));
    // Tokens from keys the issuer never published.
    let strangers: Vec<String> = (0..64)
        .map(|_| {
            let k = Keyring::new();
            k.rotate(NOW).unwrap();
            token(&k)
        })
        .collect();
    let strangers = Arc::new(strangers);
    let before = server.hits("/jwks");
    const THREADS: usize = 16;
    const EACH: usize = 15;
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (v, strangers) = (v.clone(), strangers.clone());
            thread::spawn(move || {
                for n in 0..EACH {
                    let i = t + n * THREADS;
                    let e = v.verify(&strangers[i % strangers.len()], NOW).unwrap_err();
                    assert_eq!(e.code(), ResultCode::UnknownKey);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    // A fetch is counted when decided, before its thread reaches the server:
    // one decided at the very end may still be arriving.
    wait_until(
        "every decided fetch to reach the server",
        Duration::from_secs(30),
        || server.hits("/jwks") - before == remote.stats().unknown_kid_fetches as usize,
    );
    let fetches = server.hits("/jwks") - before;
    // Fetches decided at least a cooldown apart, all within `elapsed`. The
    // cooldown is checked on whole clock milliseconds, so two fetches may be
    // 499.x ms apart: divide by 499 ms.
    let allowed = (elapsed.as_millis() / (cooldown.as_millis() - 1)) as usize + 1;
    let lookups = (THREADS * EACH) as u64;
    let stats = remote.stats();
    eprintln!(
        "flood: {lookups} verifications of unknown kids in {elapsed:?} -> {fetches} requests \
         (allowed {allowed}), {} suppressed, at most {} at once",
        stats.unknown_kid_suppressed,
        server.max_concurrent()
    );
    // Each lookup waited out its key wait, one after another on its thread.
    assert!(
        elapsed >= Duration::from_millis(100) * EACH as u32,
        "{elapsed:?}"
    );
    assert!(fetches >= 1, "the flood never fetched");
    assert!(
        fetches <= allowed,
        "{fetches} requests in {elapsed:?}, cooldown {cooldown:?}"
    );
    assert_eq!(stats.unknown_kid_fetches as usize, fetches);
    // Every lookup told the source once: it fetched or was suppressed.
    assert_eq!(
        stats.unknown_kid_suppressed,
        lookups - fetches as u64,
        "{stats:?}"
    );
    assert_eq!(server.max_concurrent(), 1, "single flight");
}

/// Without a cooldown the single flight alone bounds the requests: a slow
/// server (200 ms) flooded for 1 s answers one request at a time.
#[test]
fn without_a_cooldown_one_fetch_is_in_flight_at_a_time() {
    let (issuer, server) = issuer_and_server();
    server.set(
        "/jwks",
        Reply::json(issuer.jwks().to_json()).delay(Duration::from_millis(200)),
    );
    let remote = source(&server)
        .unknown_kid_cooldown(Duration::ZERO)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let v = verifier(&remote, Duration::from_millis(50));
    let stranger = {
        let k = Keyring::new();
        k.rotate(NOW).unwrap();
        token(&k)
    };
    let started = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (v, t) = (v.clone(), stranger.clone());
            thread::spawn(move || {
                while started.elapsed() < Duration::from_secs(1) {
                    assert!(v.verify(&t, NOW).is_err());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let elapsed = started.elapsed();
    wait_until("the last fetch", Duration::from_secs(3), || {
        server.state.concurrent.load(Ordering::SeqCst) == 0
    });
    let fetches = server.hits("/jwks");
    eprintln!("no cooldown: {fetches} requests in {elapsed:?} against a 200 ms server");
    assert_eq!(server.max_concurrent(), 1);
    assert!(fetches >= 2 && fetches <= (elapsed.as_millis() / 200) as usize + 1);
}

/// Every kind of failure leaves the last good set in place (tokens keep
/// verifying), is counted, and says what happened; the next good answer
/// clears `stale`.
#[test]
fn failures_keep_the_last_good_set() {
    let (issuer, mut server) = issuer_and_server();
    let remote = source(&server)
        .max_body_bytes(4096)
        .max_keys(3)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    remote.refresh().unwrap();
    let v = verifier(&remote, Duration::ZERO);
    let good = token(&issuer);
    v.verify(&good, NOW).unwrap();
    let good_jwks = issuer.jwks().to_json();

    let mut with_private: serde_json::Value = serde_json::from_str(&good_jwks).unwrap();
    with_private["keys"][0]["d"] = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A".into();
    let other = Keyring::new();
    for _ in 0..4 {
        other.rotate(NOW).unwrap();
    }
    let huge = format!("{{\"keys\":[],\"pad\":\"{}\"}}", "x".repeat(8192));
    let cases: Vec<(&str, Reply, ResultCode, &str)> = vec![
        (
            "500",
            Reply::status(500),
            ResultCode::IoError,
            "HTTP status 500",
        ),
        (
            "404",
            Reply::status(404),
            ResultCode::IoError,
            "HTTP status 404",
        ),
        (
            "garbage",
            Reply::json("<html>oops</html>"),
            ResultCode::DecodeError,
            "JWKS",
        ),
        (
            "not a JWKS",
            Reply::json("{\"kees\":[]}"),
            ResultCode::DecodeError,
            "keys",
        ),
        (
            "oversize, declared",
            Reply::json(huge.clone()),
            ResultCode::DecodeError,
            "larger than the limit of 4096 bytes",
        ),
        (
            "oversize, close-delimited",
            Reply::json(huge).close_delimited(),
            ResultCode::DecodeError,
            "larger than the limit of 4096 bytes",
        ),
        (
            "too many keys",
            Reply::json(other.jwks().to_json()),
            ResultCode::DecodeError,
            "lists 4 keys, more than the limit of 3",
        ),
        (
            "a private key",
            Reply::json(with_private.to_string()),
            ResultCode::DecodeError,
            "private key material",
        ),
        (
            "slow past the timeout",
            Reply::json(good_jwks.clone()).delay(Duration::from_secs(8)),
            ResultCode::IoError,
            "imeout",
        ),
    ];
    let mut failures = 0;
    for (name, reply, code, says) in cases {
        server.set("/jwks", reply);
        let started = Instant::now();
        let e = remote.refresh().unwrap_err();
        let took = started.elapsed();
        failures += 1;
        eprintln!("{name}: {:?} after {took:?}: {e}", e.code());
        assert_eq!(e.code(), code, "{name}: {e}");
        assert!(e.to_string().contains(says), "{name}: {e}");
        // The 2 s timeout ends the slow case well before its 8 s answer.
        assert!(took < Duration::from_secs(5), "{name} took {took:?}");
        let stats = remote.stats();
        assert!(stats.stale, "{name}");
        assert_eq!(stats.failures, failures, "{name}");
        assert_eq!(stats.last_error.as_deref(), Some(e.to_string().as_str()));
        assert_eq!(stats.keys, 1, "{name}: the old set is kept");
        v.verify(&good, NOW)
            .unwrap_or_else(|e| panic!("{name}: the old key stopped verifying: {e}"));
    }
    // Back to good, then down for good.
    server.set("/jwks", Reply::json(good_jwks));
    remote.refresh().unwrap();
    assert!(!remote.stats().stale);
    server.stop();
    let e = remote.refresh().unwrap_err();
    eprintln!("down: {e}");
    assert_eq!(e.code(), ResultCode::IoError);
    let stats = remote.stats();
    assert!(stats.stale);
    assert_eq!(stats.keys, 1);
    assert!(stats.last_success_ms.is_some());
    v.verify(&good, NOW).unwrap();
}

/// A key the issuer deprecates leaves its JWKS; it keeps verifying until the
/// next successful fetch, and not after.
#[test]
fn a_key_removed_remotely_stops_verifying_after_the_next_fetch() {
    let (issuer, server) = issuer_and_server();
    let old = issuer.active_id().unwrap();
    let old_token = token(&issuer);
    let new = issuer.rotate(NOW + 100).unwrap();
    let new_token = token(&issuer);
    server.set("/jwks", Reply::json(issuer.jwks().to_json()));
    let remote = source(&server).build().unwrap();
    assert_eq!(remote.refresh().unwrap().keys.len(), 2);
    let v = verifier(&remote, Duration::ZERO);
    v.verify(&old_token, NOW).unwrap();

    issuer.deprecate(&old, NOW + 200).unwrap();
    server.set("/jwks", Reply::json(issuer.jwks().to_json()));
    v.verify(&old_token, NOW)
        .expect("still in the last fetched set");
    let report = remote.refresh().unwrap();
    assert_eq!(report.removed, std::slice::from_ref(&old));
    assert_eq!(report.keys, [new]);
    let e = v.verify(&old_token, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey);
    v.verify(&new_token, NOW).unwrap();
    assert!(remote.keyring().key_info(&old).is_none());
}

/// A kid the issuer reuses for a different key: the new key replaces the old
/// (the old signature no longer verifies), as the remote set says.
#[test]
fn a_kid_whose_key_changed_is_replaced() {
    let a = Keyring::from_keys([common::identity::root_key(
        "k1",
        1,
        workload_identity::KeyState::Active,
    )])
    .unwrap();
    let b = Keyring::from_keys([common::identity::root_key(
        "k1",
        2,
        workload_identity::KeyState::Active,
    )])
    .unwrap();
    let server = Server::start();
    server.set("/jwks", Reply::json(a.jwks().to_json()));
    let remote = source(&server).build().unwrap();
    remote.refresh().unwrap();
    let v = verifier(&remote, Duration::ZERO);
    v.verify(&token(&a), NOW).unwrap();
    server.set("/jwks", Reply::json(b.jwks().to_json()));
    let report = remote.refresh().unwrap();
    assert_eq!(report.removed.len(), 1);
    assert_eq!(report.added.len(), 1);
    assert_eq!(
        v.verify(&token(&a), NOW).unwrap_err().code(),
        ResultCode::BadSignature
    );
    v.verify(&token(&b), NOW).unwrap();
}

/// `max-age` sets the next fetch, within the bounds [60 s, 1 h]; no
/// `max-age` means the default (15 min); `no-store` the minimum. Driven by a
/// hand-moved clock: nothing sleeps.
#[test]
fn max_age_is_honoured_within_bounds() {
    let (issuer, server) = issuer_and_server();
    let jwks = issuer.jwks().to_json();
    let t0 = 1_000_000_000;
    let clock = Arc::new(ManualClock(AtomicI64::new(t0)));
    let remote = source(&server)
        .clock(clock.clone())
        .refresh_bounds(Duration::from_secs(60), Duration::from_secs(3600))
        .default_refresh(Duration::from_secs(900))
        .build()
        .unwrap();
    let hits = || server.hits("/jwks");
    let cases = [
        (Some("public, max-age=300"), Some(300), 300),
        (Some("max-age=604800"), Some(604_800), 3600), // Vault's 7 days, clamped
        (Some("max-age=5"), Some(5), 60),
        (Some("no-store"), Some(0), 60),
        (None, None, 900),
    ];
    // The first fetch is due at once.
    server.set(
        "/jwks",
        Reply::json(jwks.clone()).header("Cache-Control", "max-age=300"),
    );
    assert!(remote.refresh_if_due(t0).unwrap().is_some());
    let mut due = t0 + 300_000;
    let mut expected_hits = 1;
    for (cache_control, declared, next) in cases {
        let mut reply = Reply::json(jwks.clone());
        if let Some(cc) = cache_control {
            reply = reply.header("Cache-Control", cc);
        }
        server.set("/jwks", reply);
        assert_eq!(remote.next_refresh_ms(), due);
        assert!(
            remote.refresh_if_due(due - 1).unwrap().is_none(),
            "not due yet"
        );
        assert_eq!(hits(), expected_hits);
        clock.0.store(due, Ordering::SeqCst);
        let report = remote.refresh_if_due(due).unwrap().expect("due");
        expected_hits += 1;
        assert_eq!(hits(), expected_hits);
        assert_eq!(
            report.max_age,
            declared.map(Duration::from_secs),
            "{cache_control:?}"
        );
        assert_eq!(
            report.next_refresh_in,
            Duration::from_secs(next),
            "{cache_control:?}"
        );
        due += next as i64 * 1000;
    }
    // An Age header counts against max-age.
    server.set(
        "/jwks",
        Reply::json(jwks.clone())
            .header("Cache-Control", "max-age=600")
            .header("Age", "500"),
    );
    clock.0.store(due, Ordering::SeqCst);
    let report = remote.refresh_if_due(due).unwrap().unwrap();
    assert_eq!(report.max_age, Some(Duration::from_secs(100)));
    assert_eq!(report.next_refresh_in, Duration::from_secs(100));
    // A failure retries after the minimum.
    server.set("/jwks", Reply::status(503));
    let due = due + 100_000;
    clock.0.store(due, Ordering::SeqCst);
    assert!(remote.refresh_if_due(due).is_err());
    assert_eq!(remote.next_refresh_ms(), due + 60_000);
}

/// The background refresher fetches whenever `max-age` runs out (here the
/// minimum, 200 ms), and stops when dropped.
#[test]
fn the_refresher_thread_fetches_when_due_and_stops_when_dropped() {
    let (issuer, server) = issuer_and_server();
    server.set(
        "/jwks",
        Reply::json(issuer.jwks().to_json()).header("Cache-Control", "max-age=0"),
    );
    let remote = source(&server)
        .refresh_bounds(Duration::from_millis(200), Duration::from_millis(200))
        .build()
        .unwrap();
    let started = Instant::now();
    let refresher = remote.spawn_refresher().unwrap();
    wait_until("three refreshes", Duration::from_secs(10), || {
        server.hits("/jwks") >= 3
    });
    drop(refresher);
    let elapsed = started.elapsed();
    let fetched = server.hits("/jwks");
    eprintln!("refresher: {fetched} fetches in {elapsed:?} at a 200 ms interval");
    // One at once, then one per 200 ms at most (and one finishing as the
    // drop lands): never more than elapsed / 200 ms + 2.
    let most = (elapsed.as_millis() / 200) as usize + 2;
    assert!((3..=most).contains(&fetched), "{fetched} (at most {most})");
    assert_eq!(remote.stats().keys, 1);
    thread::sleep(Duration::from_millis(500));
    assert_eq!(server.hits("/jwks"), fetched, "stopped");
}

/// A slow issuer never holds up verification beyond the verifier's own key
/// wait: the hook only starts the fetch. The issuer holds its answer until
/// the verification has returned, and the fetch may take a minute: a
/// verification that waited for the fetch would take that minute.
#[test]
fn a_slow_issuer_does_not_block_the_verifying_thread() {
    let (issuer, server) = issuer_and_server();
    let remote = source(&server)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    remote.refresh().unwrap();
    issuer.rotate(NOW + 1).unwrap();
    let gate = Arc::new(Gate::default());
    server.set("/jwks", Reply::json(issuer.jwks().to_json()).held(&gate));
    let v = verifier(&remote, Duration::from_millis(200));
    let rotated = token(&issuer);
    let started = Instant::now();
    let e = v.verify(&rotated, NOW).unwrap_err();
    let took = started.elapsed();
    eprintln!("slow issuer: UnknownKey after {took:?} (key wait 200 ms)");
    assert_eq!(e.code(), ResultCode::UnknownKey);
    // The 200 ms key wait, with room for a loaded host; blocking on the
    // fetch would take its whole 60 s timeout.
    assert!(took < Duration::from_secs(10), "{took:?}");
    // The verification did start the fetch, which the issuer still holds.
    let stats = remote.stats();
    assert_eq!(stats.unknown_kid_fetches, 1, "{stats:?}");
    assert_eq!(stats.keys, 1, "{stats:?}");
    // The fetch goes on, and the key arrives once the issuer answers.
    gate.open();
    wait_until("the slow fetch", Duration::from_secs(30), || {
        remote.stats().fetches == 2 && remote.stats().keys == 2
    });
    v.verify(&rotated, NOW).unwrap();
}

/// The OIDC discovery document names the JWKS; its `issuer` must match
/// exactly; a failure forgets the URL, so the next fetch discovers again.
#[test]
fn discovery_finds_the_jwks_uri_and_checks_the_issuer() {
    let (issuer_keys, server) = issuer_and_server();
    let issuer = server.url("");
    let doc = |iss: &str, jwks_uri: &str| {
        serde_json::json!({
            "issuer": iss,
            "jwks_uri": jwks_uri,
            "id_token_signing_alg_values_supported": ["EdDSA"],
        })
        .to_string()
    };
    server.set(
        "/.well-known/openid-configuration",
        Reply::json(doc(&issuer, &server.url("/keys/v2"))),
    );
    server.set("/keys/v2", Reply::json(issuer_keys.jwks().to_json()));
    let remote = RemoteJwks::discover(&issuer)
        .allow_http_loopback(true)
        .build()
        .unwrap();
    assert_eq!(remote.stats().jwks_uri, None);
    let report = remote.refresh().unwrap();
    assert_eq!(report.jwks_uri, server.url("/keys/v2"));
    assert_eq!(server.hits("/.well-known/openid-configuration"), 1);
    remote.refresh().unwrap();
    assert_eq!(
        server.hits("/.well-known/openid-configuration"),
        1,
        "the jwks_uri is kept"
    );
    assert_eq!(server.hits("/keys/v2"), 2);
    verifier(&remote, Duration::ZERO)
        .verify(&token(&issuer_keys), NOW)
        .unwrap();

    // The JWKS moves: the old URL fails, the next attempt discovers again.
    server.set("/keys/v2", Reply::status(404));
    server.set(
        "/.well-known/openid-configuration",
        Reply::json(doc(&issuer, &server.url("/keys/v3"))),
    );
    server.set("/keys/v3", Reply::json(issuer_keys.jwks().to_json()));
    assert_eq!(remote.refresh().unwrap_err().code(), ResultCode::IoError);
    assert_eq!(remote.refresh().unwrap().jwks_uri, server.url("/keys/v3"));
    assert_eq!(server.hits("/.well-known/openid-configuration"), 2);

    // Another issuer's document, or a jwks_uri off loopback over http: refused.
    for (bad, says) in [
        (
            doc("https://evil.example.com", &server.url("/keys/v3")),
            "issuer is",
        ),
        (doc(&issuer, "http://10.0.0.1/keys"), "unusable jwks_uri"),
    ] {
        server.set("/.well-known/openid-configuration", Reply::json(bad));
        server.set("/keys/v3", Reply::status(500)); // forces a new discovery
        remote.refresh().unwrap_err();
        let e = remote.refresh().unwrap_err();
        assert_eq!(e.code(), ResultCode::DecodeError, "{e}");
        assert!(e.to_string().contains(says), "{e}");
        assert_eq!(remote.stats().keys, 1);
    }
}

/// `refresh` from many threads at once: one request at a time.
#[test]
fn concurrent_refreshes_run_one_at_a_time() {
    let (issuer, server) = issuer_and_server();
    server.set(
        "/jwks",
        Reply::json(issuer.jwks().to_json()).delay(Duration::from_millis(50)),
    );
    let remote = source(&server).build().unwrap();
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let r = remote.clone();
            thread::spawn(move || r.refresh().unwrap())
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.hits("/jwks"), 6);
    assert_eq!(server.max_concurrent(), 1);
}

// ---------------------------------------------------------------------------
// HTTPS, with `openssl s_server` and the committed test CA.

/// `openssl s_server -WWW` serving a directory over TLS on 127.0.0.1, killed
/// on drop.
struct TlsServer {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl TlsServer {
    fn start() -> TlsServer {
        let vectors = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/tls");
        let dir = tempfile::tempdir().unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-WWW", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-certform", "DER", "-cert"])
            .arg(format!("{vectors}/server.der"))
            .args(["-keyform", "DER", "-key"])
            .arg(format!("{vectors}/server.key.der"))
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl (the openssl package) is needed for the HTTPS test");
        wait_until("openssl s_server", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        TlsServer { child, port, dir }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn https_with_the_configured_ca_and_refused_without_it() {
    let issuer = Keyring::new();
    issuer.rotate(NOW).unwrap();
    let server = TlsServer::start();
    std::fs::write(server.dir.path().join("jwks.json"), issuer.jwks().to_json()).unwrap();
    let url = format!("https://127.0.0.1:{}/jwks.json", server.port);
    let ca = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/tls/ca.pem"
    ))
    .unwrap();

    let trusting = RemoteJwks::builder(&url)
        .ca_bundle_pem(&ca)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let report = trusting.refresh().unwrap();
    eprintln!("https fetch with the test CA: {:?}", started.elapsed());
    assert_eq!(report.keys.len(), 1);
    verifier(&trusting, Duration::ZERO)
        .verify(&token(&issuer), NOW)
        .unwrap();

    // Mozilla's roots do not include the test CA.
    let default_roots = RemoteJwks::builder(&url)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let e = default_roots.refresh().unwrap_err();
    eprintln!("https fetch without the test CA: {e}");
    assert_eq!(e.code(), ResultCode::IoError);
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    assert_eq!(default_roots.stats().keys, 0);

    // Plain http to the same server is refused before any request.
    let e = RemoteJwks::builder(&format!("http://127.0.0.1:{}/jwks.json", server.port))
        .build()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
}

/// `Debug` of every public type of the module leaves out the URL's query (a
/// signed URL or an access token may sit there), as every message does. Two
/// sources fetch through a URL whose query holds a secret, one configured,
/// one discovered; the requests carry it (so it was there to leak), and
/// neither the builder, the source, its report, its stats, its refresher nor
/// its errors show it. URLs refused at build are left out of the error too.
#[test]
fn debug_never_shows_the_query_of_a_url() {
    const SECRET: &str = "s3cret";
    let (issuer, server) = issuer_and_server();
    let jwks = issuer.jwks().to_json();
    server.set("/keys", Reply::json(jwks.clone()));
    server.set(
        "/.well-known/openid-configuration",
        Reply::json(
            serde_json::json!({
                "issuer": server.url(""),
                "jwks_uri": server.url("/keys?token=s3cret-discovered"),
                "id_token_signing_alg_values_supported": ["EdDSA"],
            })
            .to_string(),
        ),
    );
    for (name, builder, path) in [
        (
            "configured",
            RemoteJwks::builder(&server.url("/jwks?sig=s3cret-query&x=1")),
            "/jwks",
        ),
        ("discovered", RemoteJwks::discover(&server.url("")), "/keys"),
    ] {
        let builder = builder
            .allow_http_loopback(true)
            .timeout(Duration::from_secs(5));
        let shown = format!("{builder:?}");
        assert!(!shown.contains(SECRET), "{name} builder: {shown}");
        assert!(shown.contains(&server.addr.to_string()), "{name}: {shown}");
        let remote = builder.build().unwrap();
        let report = remote.refresh().unwrap();
        assert_eq!(report.keys.len(), 1, "{name}: {report:?}");
        assert_eq!(report.jwks_uri, server.url(path), "{name}");
        let sent: Vec<String> = server
            .targets()
            .into_iter()
            .filter(|t| t.starts_with(&format!("{path}?")))
            .collect();
        assert!(
            !sent.is_empty() && sent.iter().all(|t| t.contains(SECRET)),
            "{name}: the requests did not carry the query: {:?}",
            server.targets()
        );
        let refresher = remote.spawn_refresher().unwrap();
        let stats = remote.stats();
        assert_eq!(stats.jwks_uri, Some(server.url(path)), "{name}");
        for (what, text) in [
            ("RemoteJwks", format!("{remote:?}")),
            ("RefreshReport", format!("{report:?}")),
            ("RemoteJwksStats", format!("{stats:?}")),
            ("Refresher", format!("{refresher:?}")),
        ] {
            assert!(!text.contains(SECRET), "{name} {what}: {text}");
        }
        // What is shown still says where the keys come from.
        assert!(
            format!("{remote:?}").contains(&server.addr.to_string()),
            "{name}: {remote:?}"
        );
        assert!(format!("{report:?}").contains(path), "{name}: {report:?}");
        refresher.stop();
        // A failure names the URL, without its query, in the error and in
        // the stats: an HTTP status (an I/O error) and a body that is no JWKS
        // (a decode error).
        for (failures, (reply, code)) in [
            (Reply::status(500), ResultCode::IoError),
            (Reply::json("<html>oops</html>"), ResultCode::DecodeError),
        ]
        .into_iter()
        .enumerate()
        {
            server.set(path, reply);
            let e = remote.refresh().unwrap_err();
            assert_eq!(e.code(), code, "{name}: {e}");
            assert!(e.to_string().contains(&server.url(path)), "{name}: {e}");
            let stats = remote.stats();
            assert_eq!(stats.failures, failures as u64 + 1, "{name}: {stats:?}");
            assert!(stats.last_error.is_some(), "{name}: {stats:?}");
            for (what, text) in [
                ("error", format!("{e:?} {e}")),
                ("RemoteJwksStats", format!("{stats:?}")),
                ("RemoteJwks", format!("{remote:?}")),
            ] {
                assert!(!text.contains(SECRET), "{name} {what}: {text}");
            }
        }
    }
    // Refused at build (a fragment; an issuer with a query): the error leaves
    // the secret out too.
    for (name, builder) in [
        (
            "a fragment",
            RemoteJwks::builder(&server.url("/jwks?sig=s3cret-query#frag-s3cret")),
        ),
        (
            "an issuer with a query",
            RemoteJwks::discover(&format!("http://{}?token=s3cret-query", server.addr)),
        ),
    ] {
        let builder = builder.allow_http_loopback(true);
        let shown = format!("{builder:?}");
        assert!(!shown.contains(SECRET), "{name} builder: {shown}");
        let e = builder.build().unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{name}: {e}");
        assert!(!format!("{e:?} {e}").contains(SECRET), "{name}: {e:?}");
    }
}

/// A refresh whose set cannot be applied whole changes nothing: before, the
/// keys whose kid changed were removed first and lost when the import then
/// failed.
#[test]
fn a_set_that_cannot_be_applied_whole_changes_nothing() {
    let server = Server::start();
    let first = Keyring::from_keys([
        common::identity::root_key("k1", 1, workload_identity::KeyState::Active),
        common::identity::root_key("k2", 2, workload_identity::KeyState::Inactive),
    ])
    .unwrap();
    server.set("/jwks", Reply::json(first.jwks().to_json()));
    let remote = source(&server).build().unwrap();
    remote.refresh().unwrap();
    // The caller signs with its own active key "mine" in the same keyring.
    remote
        .keyring()
        .insert(common::identity::root_key(
            "mine",
            9,
            workload_identity::KeyState::Active,
        ))
        .unwrap();
    let before = remote.keyring().keys();
    // The remote set now changes k1's key and names "mine" with another key:
    // "mine" cannot be replaced (it is active), so the whole set is refused.
    let second = Keyring::from_keys([
        common::identity::root_key("k1", 3, workload_identity::KeyState::Active),
        common::identity::root_key("k2", 2, workload_identity::KeyState::Inactive),
        common::identity::root_key("mine", 4, workload_identity::KeyState::Inactive),
    ])
    .unwrap();
    server.set("/jwks", Reply::json(second.jwks().to_json()));
    let e = remote.refresh().unwrap_err();
    assert_eq!(e.code(), ResultCode::DuplicateKey, "{e}");
    assert_eq!(remote.keyring().keys(), before, "nothing changed");
    let v = verifier(&remote, Duration::ZERO);
    v.verify(&token(&first), NOW)
        .expect("k1's old key still verifies");
    assert!(remote.stats().stale);
    // A set that leaves "mine" out applies; "mine" stays (active keys are
    // never removed), k1 is replaced.
    let third = Keyring::from_keys([common::identity::root_key(
        "k1",
        3,
        workload_identity::KeyState::Active,
    )])
    .unwrap();
    server.set("/jwks", Reply::json(third.jwks().to_json()));
    let report = remote.refresh().unwrap();
    assert_eq!(report.keys.len(), 1);
    assert_eq!(report.added.len(), 1);
    assert_eq!(report.removed.len(), 2, "{report:?}");
    assert!(remote.keyring().key_info("mine").is_some());
    assert!(remote.keyring().key_info("k2").is_none());
    v.verify(&token(&third), NOW).unwrap();
}

// ---------------------------------------------------------------------------
// SpiffeBundleSource: a peer trust domain's bundle endpoint, served by the
// same test server.

/// A peer with ES256 and RS256 bearer keys and an ES256 WIT key.
fn spiffe_peer() -> Keyring {
    let peer = Keyring::new();
    peer.rotate_alg(Algorithm::Es256, NOW).unwrap();
    peer.rotate_alg(Algorithm::Rs256, NOW).unwrap();
    peer.rotate_purpose(workload_identity::KeyPurpose::Wit, Algorithm::Es256, NOW)
        .unwrap();
    peer
}

fn bundle_source(server: &Server, clock: Arc<ManualClock>) -> SpiffeBundleSource {
    SpiffeBundleSource::builder("peer.example.org", &server.url("/bundle"))
        .allow_http_loopback(true)
        .timeout(Duration::from_secs(3))
        .clock(clock)
        .refresh_bounds(Duration::from_secs(30), Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// The bundle's `jwt-svid` keys verify the peer's tokens as bearer keys,
/// its `wit-svid` key is a WIT key, `x509-svid` entries are skipped; the
/// refresh hint schedules the next fetch within the bounds; a sequence
/// that goes backwards is refused and the held bundle kept; a failure
/// keeps it too.
#[test]
fn spiffe_bundle_source_follows_the_peer_by_hint_and_sequence() {
    let peer = spiffe_peer();
    let server = Server::start();
    let mut bundle: serde_json::Value =
        serde_json::from_str(&peer.spiffe_endpoint_bundle_json(Duration::from_secs(300))).unwrap();
    assert_eq!(bundle["spiffe_sequence"], NOW);
    // An X.509 authority, as SPIRE's bundles carry: skipped.
    let x509 = serde_json::json!({
        "kty": "EC", "crv": "P-256", "use": "x509-svid",
        "x": bundle["keys"][0]["x"], "y": bundle["keys"][0]["y"],
        "x5c": ["MIIB"]
    });
    bundle["keys"].as_array_mut().unwrap().push(x509);
    server.set("/bundle", Reply::json(bundle.to_string()));
    let t0 = 1_000_000_000;
    let clock = Arc::new(ManualClock(AtomicI64::new(t0)));
    let source = bundle_source(&server, clock.clone());
    assert_eq!(source.trust_domain(), "peer.example.org");

    let report = source.refresh_if_due(t0).unwrap().expect("due at once");
    assert_eq!(report.keys.len(), 3);
    assert_eq!(report.skipped, 1);
    assert_eq!(report.sequence, Some(NOW as u64));
    assert_eq!(report.refresh_hint, Some(Duration::from_secs(300)));
    assert_eq!(report.next_refresh_in, Duration::from_secs(300));
    assert_eq!(source.next_refresh_ms(), t0 + 300_000);
    let wit_keys = source
        .keyring()
        .keys()
        .iter()
        .filter(|k| k.purpose == workload_identity::KeyPurpose::Wit)
        .count();
    assert_eq!(wit_keys, 1);
    let v = Verifier::builder(
        source.keyring().clone(),
        {
            let store = Arc::new(MemoryStore::new());
            store.upsert(&common::allocation());
            store
        },
        Audience::new(AUD).unwrap(),
    )
    .key_wait(Duration::ZERO)
    .build();
    v.verify(&token_alg(&peer, Algorithm::Es256), NOW).unwrap();
    v.verify(&token_alg(&peer, Algorithm::Rs256), NOW).unwrap();
    assert!(source.refresh_if_due(t0 + 299_999).unwrap().is_none());

    // The peer rotates: a higher sequence, a hint under the minimum
    // (clamped up to 30 s), the new key in.
    peer.rotate_alg(Algorithm::Es256, NOW + 100).unwrap();
    server.set(
        "/bundle",
        Reply::json(peer.spiffe_endpoint_bundle_json(Duration::from_secs(1))),
    );
    clock.0.store(t0 + 300_000, Ordering::SeqCst);
    let report = source.refresh_if_due(t0 + 300_000).unwrap().expect("due");
    assert_eq!(report.sequence, Some(NOW as u64 + 100));
    assert_eq!(report.added.len(), 1);
    assert_eq!(report.next_refresh_in, Duration::from_secs(30));
    let new_token = token_alg(&peer, Algorithm::Es256);
    v.verify(&new_token, NOW + 100).unwrap();

    // A hint over the maximum: clamped down to an hour.
    server.set(
        "/bundle",
        Reply::json(peer.spiffe_endpoint_bundle_json(Duration::from_secs(86_400 * 30))),
    );
    let report = source.refresh().unwrap();
    assert_eq!(report.next_refresh_in, Duration::from_secs(3600));

    // A rolled-back bundle (the sequence before the rotation): refused,
    // the held bundle kept, the refusal counted and explained.
    server.set("/bundle", Reply::json(bundle.to_string()));
    let e = source.refresh().unwrap_err();
    assert_eq!(e.code(), ResultCode::DecodeError);
    let msg = e.to_string();
    assert!(msg.contains("spiffe_sequence went backwards"), "{msg}");
    assert!(
        msg.contains(&format!("expected at least {}", NOW + 100)),
        "{msg}"
    );
    let stats = source.stats();
    assert_eq!(stats.sequence, Some(NOW as u64 + 100));
    assert_eq!(stats.sequence_refusals, 1);
    assert!(stats.stale);
    assert_eq!(stats.failures, 1);
    v.verify(&new_token, NOW + 100).unwrap();

    // Down, then garbage: the held bundle stays.
    server.set("/bundle", Reply::status(503));
    assert_eq!(source.refresh().unwrap_err().code(), ResultCode::IoError);
    server.set(
        "/bundle",
        Reply::json(r#"{"keys":[],"spiffe_sequence":-1}"#),
    );
    let e = source.refresh().unwrap_err();
    assert!(e.to_string().contains("non-negative integers"), "{e}");
    v.verify(&new_token, NOW + 100).unwrap();
    assert_eq!(source.stats().keys, 4);

    // The same sequence with other keys is taken (a publisher may change
    // keys without raising it).
    let mut same = bundle.clone();
    same["spiffe_sequence"] = serde_json::json!(NOW + 100);
    server.set("/bundle", Reply::json(same.to_string()));
    let report = source.refresh().unwrap();
    assert_eq!(report.removed.len(), 1);
    assert!(!source.stats().stale);
}

/// Once a sequence was served, a bundle without one is a rollback: an
/// older key set with `spiffe_sequence` dropped would otherwise bring a
/// removed key back. Refused and counted, the held bundle kept, until the
/// operator resets the source.
#[test]
fn spiffe_bundle_source_refuses_a_bundle_that_drops_its_sequence() {
    let peer = Keyring::new();
    let old_kid = peer.rotate_alg(Algorithm::Es256, NOW).unwrap();
    let old_token = token_alg(&peer, Algorithm::Es256);
    let old_bundle: serde_json::Value =
        serde_json::from_str(&peer.spiffe_endpoint_bundle_json(Duration::from_secs(300))).unwrap();
    assert_eq!(old_bundle["spiffe_sequence"], NOW);
    peer.rotate_alg(Algorithm::Es256, NOW + 100).unwrap();
    peer.deprecate(&old_kid, NOW + 200).unwrap();
    peer.remove(&old_kid).unwrap();
    let new_bundle = peer.spiffe_endpoint_bundle_json(Duration::from_secs(300));
    let new_token = token_alg(&peer, Algorithm::Es256);

    let server = Server::start();
    server.set("/bundle", Reply::json(new_bundle));
    let source = bundle_source(&server, Arc::new(ManualClock(AtomicI64::new(0))));
    let held = source.refresh().unwrap().sequence.expect("a sequence");
    let v = Verifier::builder(
        source.keyring().clone(),
        {
            let store = Arc::new(MemoryStore::new());
            store.upsert(&common::allocation());
            store
        },
        Audience::new(AUD).unwrap(),
    )
    .key_wait(Duration::ZERO)
    .build();
    v.verify(&new_token, NOW + 100).unwrap();
    // Looked up in the keyring, not verified: an unknown kid would start a
    // fetch of its own.
    let holds_old = || source.keyring().keys().iter().any(|k| k.kid == old_kid);
    assert!(!holds_old());

    // The old key set with its sequence left out: refused as a rollback.
    let mut dropped = old_bundle.clone();
    dropped.as_object_mut().unwrap().remove("spiffe_sequence");
    server.set("/bundle", Reply::json(dropped.to_string()));
    let e = source.refresh().unwrap_err();
    assert_eq!(e.code(), ResultCode::DecodeError);
    let msg = e.to_string();
    assert!(msg.contains("carries no spiffe_sequence"), "{msg}");
    assert!(msg.contains(&format!("expected at least {held}")), "{msg}");
    assert!(msg.contains("reset_sequence"), "{msg}");
    let stats = source.stats();
    assert_eq!(stats.sequence, Some(held));
    assert_eq!(stats.sequence_refusals, 1);
    assert!(stats.stale);
    assert!(!holds_old(), "the removed key stays out");
    v.verify(&new_token, NOW + 100).unwrap();

    // Again, and with a sequence lower than held: both still refused.
    assert!(source.refresh().is_err());
    server.set("/bundle", Reply::json(old_bundle.to_string()));
    assert!(
        source
            .refresh()
            .unwrap_err()
            .to_string()
            .contains("went backwards")
    );
    assert_eq!(source.stats().sequence_refusals, 3);

    // The operator resets the source: the next bundle is taken as it is.
    server.set("/bundle", Reply::json(dropped.to_string()));
    assert_eq!(source.reset_sequence(), Some(held));
    let report = source.refresh().unwrap();
    assert_eq!(report.sequence, None);
    assert_eq!(source.stats().sequence, None);
    v.verify(&old_token, NOW + 100).unwrap();
    // With none held, a bundle with a sequence is taken and held again.
    server.set("/bundle", Reply::json(old_bundle.to_string()));
    assert_eq!(source.refresh().unwrap().sequence, Some(NOW as u64));
    assert_eq!(source.stats().sequence, Some(NOW as u64));
    assert_eq!(source.reset_sequence(), Some(NOW as u64));
    assert_eq!(source.reset_sequence(), None);
}

/// No redirect is followed (the peer named is the peer trusted), and a
/// bundle without a sequence or hint is still a bundle (the default refresh).
#[test]
fn spiffe_bundle_source_refuses_redirects() {
    let peer = spiffe_peer();
    let server = Server::start();
    server.set(
        "/moved",
        Reply::json(peer.spiffe_endpoint_bundle_json(Duration::from_secs(60))),
    );
    server.set(
        "/bundle",
        Reply::status(302).header("Location", &server.url("/moved")),
    );
    let clock = Arc::new(ManualClock(AtomicI64::new(0)));
    let source = bundle_source(&server, clock);
    let e = source.refresh().unwrap_err();
    assert_eq!(e.code(), ResultCode::IoError);
    assert!(e.to_string().contains("not followed"), "{e}");
    assert_eq!(server.hits("/moved"), 0);

    server.set("/bundle", Reply::json(peer.jwks().to_json()));
    let report = source.refresh().unwrap();
    assert_eq!(report.sequence, None);
    assert_eq!(report.next_refresh_in, Duration::from_secs(3600));
}

/// Over HTTPS with the peer's CA (the https_web profile with a private CA).
#[test]
fn spiffe_bundle_source_over_https_with_the_configured_ca() {
    let peer = spiffe_peer();
    let server = TlsServer::start();
    std::fs::write(
        server.dir.path().join("bundle.json"),
        peer.spiffe_endpoint_bundle_json(Duration::from_secs(60)),
    )
    .unwrap();
    let url = format!("https://127.0.0.1:{}/bundle.json", server.port);
    let ca = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/tls/ca.pem"
    ))
    .unwrap();
    let source = SpiffeBundleSource::builder("peer.example.org", &url)
        .ca_bundle_pem(&ca)
        .build()
        .unwrap();
    let report = source.refresh().unwrap();
    assert_eq!(report.keys.len(), 3);
    assert_eq!(report.sequence, Some(NOW as u64));
}

/// A verifier over a SPIFFE bundle source's keys, for the audience the
/// bundle's writer (py-spiffe, go-spiffe) signed its tokens for.
fn bundle_verifier(source: &SpiffeBundleSource, meta: &serde_json::Value) -> Verifier {
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    Verifier::builder(
        source.keyring().clone(),
        store,
        Audience::new(meta["audience"].as_str().unwrap()).unwrap(),
    )
    .key_wait(Duration::ZERO)
    .build()
}

/// A bundle that py-spiffe wrote (tests/python/spiffe_bundle_interop.py
/// `write`: keys given to spiffe.JwtBundle, dumped with use jwt-svid, a
/// sequence and a refresh hint) is read by the source, and the JWT-SVIDs
/// PyJWT signed with those keys (ES256, ES384, RS256) verify. The committed
/// copy is tests/vectors/spiffe_bundle/; scripts/spiffe-bundle-interop.sh
/// writes a fresh one and points `WID_PY_SPIFFE_BUNDLE` at it.
#[test]
fn spiffe_bundle_written_by_py_spiffe() {
    let dir = std::env::var("WID_PY_SPIFFE_BUNDLE").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/spiffe_bundle").into()
    });
    let read = |name: &str| {
        let path = format!("{dir}/{name}");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let meta: serde_json::Value = serde_json::from_str(&read("tokens.json")).unwrap();
    let server = Server::start();
    server.set("/bundle", Reply::json(read("bundle.json")));
    let source = SpiffeBundleSource::builder(
        meta["trust_domain"].as_str().unwrap(),
        &server.url("/bundle"),
    )
    .allow_http_loopback(true)
    .build()
    .unwrap();
    let report = source.refresh().unwrap();
    assert_eq!(report.keys.len(), 3);
    assert_eq!(report.sequence, meta["sequence"].as_u64());
    assert_eq!(
        report.refresh_hint,
        meta["refresh_hint"].as_u64().map(Duration::from_secs)
    );
    let v = bundle_verifier(&source, &meta);
    let now = meta["now"].as_i64().unwrap();
    let tokens = meta["tokens"].as_object().unwrap();
    assert_eq!(tokens.len(), 3);
    for (alg, token) in tokens {
        let id = v
            .verify(token.as_str().unwrap(), now)
            .unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert!(id.claims.subject.starts_with("spiffe://"), "{alg}");
    }
}

/// A bundle that go-spiffe wrote (bindings/go/interop TestWriteGoSpiffeBundle:
/// fresh keys given to spiffebundle.New with AddJWTAuthority, a sequence and
/// a refresh hint, written by Bundle.Marshal) is read by the source, and the
/// JWT-SVIDs go-jose v4 signed with those keys (ES256, ES384, ES512, RS256)
/// verify. There is no committed copy: scripts/spiffe-bundle-interop.sh
/// writes a fresh one and points `WID_GO_SPIFFE_BUNDLE` at it; without the
/// variable there is nothing to read and the test returns. Set, every file
/// must be there.
#[test]
fn spiffe_bundle_written_by_go_spiffe() {
    let Some(dir) = std::env::var_os("WID_GO_SPIFFE_BUNDLE") else {
        eprintln!(
            "WID_GO_SPIFFE_BUNDLE is not set: scripts/spiffe-bundle-interop.sh runs this test"
        );
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let meta: serde_json::Value = serde_json::from_str(&read("tokens.json")).unwrap();
    let server = Server::start();
    server.set("/bundle", Reply::json(read("bundle.json")));
    let source = SpiffeBundleSource::builder(
        meta["trust_domain"].as_str().unwrap(),
        &server.url("/bundle"),
    )
    .allow_http_loopback(true)
    .build()
    .unwrap();
    let report = source.refresh().unwrap();
    assert_eq!(report.keys.len(), 4, "{report:?}");
    assert_eq!(report.sequence, meta["sequence"].as_u64());
    assert_eq!(
        report.refresh_hint,
        meta["refresh_hint"].as_u64().map(Duration::from_secs)
    );
    let v = bundle_verifier(&source, &meta);
    let now = meta["now"].as_i64().unwrap();
    let tokens = meta["tokens"].as_object().unwrap();
    let mut algs: Vec<&str> = tokens.keys().map(String::as_str).collect();
    algs.sort_unstable();
    assert_eq!(algs, ["ES256", "ES384", "ES512", "RS256"]);
    for (alg, token) in tokens {
        let id = v
            .verify(token.as_str().unwrap(), now)
            .unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert!(id.claims.subject.starts_with("spiffe://"), "{alg}");
    }
}
