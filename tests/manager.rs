//! The identity manager: renewal math (properties), the restore matrix, watcher
//! fan-out and coalescing, token-exchange hooks (the seed 001 reproduction), and
//! a long simulated run with signer failures in which no identity is ever
//! served past its `exp`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use workload_identity::KeyState;
use workload_identity::SignedIdentity;
use workload_identity::manager::*;
use workload_identity::model::{GoDuration, IssueRequest, WorkloadIdentity};
use workload_identity::{Clock, Error, Issuer, Keyring, ResultCode, SystemClock};

use common::identity::root_key;

const T0: i64 = 1_700_000_000_000; // ms

/// Two identities of one allocation: a task's (1 h) and a service's (90 min).
fn requests(ttl_secs: i64) -> Vec<IssueRequest> {
    let mut task = common::issue_request_task();
    task.identity.ttl = GoDuration::from_secs(ttl_secs);
    let mut svc = common::issue_request_service();
    svc.region = "global".into();
    svc.identity = WorkloadIdentity {
        name: "consul-service_web-api".into(),
        audience: vec!["consul.io".into()],
        ttl: GoDuration::from_secs(ttl_secs * 3 / 2),
        ..WorkloadIdentity::default()
    };
    vec![task, svc]
}

fn task_key() -> IdentityId {
    IdentityId::new("server", "vault_default")
}

struct FixedJitter(f64);
impl Jitter for FixedJitter {
    fn draw(&self) -> f64 {
        self.0
    }
}

/// An issuer that can be made to fail, counting calls.
struct FlakySigner {
    issuer: Issuer,
    fail: AtomicBool,
    calls: AtomicUsize,
    partial: AtomicBool,
}

impl IdentitySigner for FlakySigner {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::StoreUnavailable {
                alloc_id: "x".into(),
                cause: "signer RPC down".into(),
            });
        }
        let mut all = self.issuer.sign(requests, now)?;
        if self.partial.load(Ordering::SeqCst) {
            all.pop();
        }
        Ok(all)
    }
}

/// A Consul-like exchange: the secret is derived from the token's jti.
struct ConsulLogin {
    key: IdentityId,
    exchanges: AtomicUsize,
    delivered: Mutex<Vec<(String, EventKind)>>,
    fail: AtomicBool,
}

impl TokenExchange for ConsulLogin {
    fn name(&self) -> &str {
        "consul"
    }
    fn identity(&self) -> &IdentityId {
        &self.key
    }
    fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(ExchangeError("consul login refused".into()));
        }
        self.exchanges.fetch_add(1, Ordering::SeqCst);
        Ok(format!("consul-acl-{}", &token.jwt_id[..8]))
    }
    fn deliver(&self, secret: &str, kind: EventKind) {
        self.delivered
            .lock()
            .unwrap()
            .push((secret.to_string(), kind));
    }
}

struct Setup {
    keyring: Keyring,
    signer: Arc<FlakySigner>,
    consul: Arc<ConsulLogin>,
    db: Arc<dyn IdentityDb>,
}

fn setup(db: Arc<dyn IdentityDb>) -> Setup {
    let keyring = Keyring::from_keys([root_key("key-1", 1, KeyState::Active)]).unwrap();
    Setup {
        signer: Arc::new(FlakySigner {
            issuer: Issuer::new(keyring.clone()),
            fail: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            partial: AtomicBool::new(false),
        }),
        consul: Arc::new(ConsulLogin {
            key: IdentityId::new("web-api", "consul-service_web-api"),
            exchanges: AtomicUsize::new(0),
            delivered: Mutex::new(Vec::new()),
            fail: AtomicBool::new(false),
        }),
        keyring,
        db,
    }
}

fn manager(s: &Setup, ttl: i64) -> IdentityManager {
    IdentityManager::builder(
        requests(ttl),
        s.signer.clone(),
        s.db.clone(),
        s.keyring.clone(),
    )
    .exchange(s.consul.clone())
    .jitter(Arc::new(FixedJitter(0.5)))
    .build()
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn renewal_window_jitter_and_minimum_wait(
        now in 0i64..4_000_000_000_000,
        remaining_s in 0i64..1_000_000,
        extra in proptest::collection::vec(0i64..2_000_000, 0..4),
        j0 in 0.0f64..1.0, j1 in 0.0f64..1.0,
    ) {
        let p = RenewalPolicy::default();
        let soonest = now / 1000 + 1 + remaining_s;
        let mut exps: Vec<Option<i64>> = vec![Some(soonest), None];
        exps.extend(extra.iter().map(|e| Some(soonest + e)));
        let at = p.renew_at_ms(exps, now, (j0, j1)).unwrap();
        let wait = at - now;
        let half = (soonest * 1000 - now) / 2;
        let floor_lo = 10_000;
        let floor_hi = 11_000;
        // Never sooner than the minimum wait (10 s + up to 1 s).
        prop_assert!(wait >= floor_lo);
        if half > floor_hi {
            // Half the soonest remaining lifetime, plus at most 10 % of it.
            prop_assert!(wait >= half && wait <= half + half / 10 + 1, "{wait} vs {half}");
            // So always before expiry.
            prop_assert!(at < soonest * 1000);
        } else {
            prop_assert!(wait <= floor_hi.max(half + half / 10 + 1));
        }
    }

    #[test]
    fn nothing_to_renew_without_exp(now in any::<i64>()) {
        prop_assert_eq!(RenewalPolicy::default().renew_at_ms([None, None], now, (0.3, 0.3)), None);
    }

    #[test]
    fn backoff_doubles_up_to_an_hour(failures in 1u32..200) {
        let p = RenewalPolicy::default();
        let b = p.backoff(failures);
        prop_assert!(b <= Duration::from_secs(3600));
        prop_assert!(b >= Duration::from_secs(1));
        prop_assert!(p.backoff(failures + 1) >= b);
        if failures <= 12 {
            prop_assert_eq!(b, Duration::from_secs(1 << (failures - 1)));
        }
    }
}

#[test]
fn start_signs_everything_persists_and_tells_watchers_and_consumers() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let m = manager(&s, 3600);
    let w1 = m.watch(&task_key()).unwrap();
    let w2 = m.watch(&task_key()).unwrap();
    m.start(T0).unwrap();
    let (u1, u2) = (w1.try_recv().unwrap(), w2.try_recv().unwrap());
    assert_eq!(u1, u2, "a second watcher does not replace the first");
    assert_eq!(u1.kind, EventKind::Initial);
    assert_eq!(u1.token.expires_at, Some(T0 / 1000 + 3600));
    let saved = s.db.load(m.alloc_id()).unwrap().unwrap();
    assert_eq!(saved.identities.len(), 2);
    assert_eq!(saved.secrets.len(), 1);
    assert_eq!(s.consul.delivered.lock().unwrap()[0].1, EventKind::Initial);
    // Renewal due at half the soonest lifetime (1 h) + 5 % (jitter 0.5 of 10 %).
    assert_eq!(m.next_due_ms(), Some(T0 + 1_800_000 + 90_000));
    // A late watcher gets the current token at once.
    assert_eq!(
        m.watch(&task_key()).unwrap().try_recv().unwrap().token,
        u1.token
    );
    assert!(m.watch(&IdentityId::new("nope", "x")).is_err());
}

#[test]
fn renewal_rewrites_the_db_and_coalesces_slow_watchers() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let m = manager(&s, 3600);
    let slow = m.watch(&task_key()).unwrap();
    m.start(T0).unwrap();
    let first = m.current(&task_key(), T0).unwrap();
    let mut now = T0;
    for _ in 0..5 {
        now = m.tick(now).unwrap();
        m.tick(now);
    }
    let saved = s.db.load(m.alloc_id()).unwrap().unwrap();
    let latest = m.current(&task_key(), now).unwrap();
    assert_ne!(latest.jwt_id, first.jwt_id);
    assert!(
        saved.identities.iter().any(|t| t.jwt_id == latest.jwt_id),
        "renewed tokens are written back"
    );
    // The slow watcher sees only the newest token, once.
    let u = slow.try_recv().unwrap();
    assert_eq!(u.token.jwt_id, latest.jwt_id);
    assert_eq!(u.kind, EventKind::Renewed);
    assert!(slow.try_recv().is_none(), "no backlog");
    assert_eq!(
        s.consul.exchanges.load(Ordering::SeqCst),
        1,
        "renewal does not re-login"
    );
}

#[test]
fn partial_sets_from_the_signer_are_refused() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    s.signer.partial.store(true, Ordering::SeqCst);
    let m = manager(&s, 3600);
    let e = m.start(T0).unwrap_err();
    assert!(e.to_string().contains("partial set is refused"), "{e}");
    assert!(m.current(&task_key(), T0).is_none());
    assert_eq!(m.next_due_ms(), Some(T0 + 1000), "retried after a backoff");
}

fn restart(s: &Setup, ttl: i64, now: i64) -> (IdentityManager, Watcher, RestoreReport) {
    let m = manager(s, ttl);
    let w = m.watch(&task_key()).unwrap();
    let r = m.restore(now).unwrap();
    (m, w, r)
}

#[test]
fn restore_reuses_valid_identities_and_tells_everyone() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let m = manager(&s, 3600);
    m.start(T0).unwrap();
    let before = m.current(&task_key(), T0).unwrap();
    drop(m);
    let calls = s.signer.calls.load(Ordering::SeqCst);
    let (m, w, report) = restart(&s, 3600, T0 + 60_000);
    assert!(report.reused, "{report:?}");
    assert!(report.rederived.is_empty());
    assert_eq!(
        s.signer.calls.load(Ordering::SeqCst),
        calls,
        "nothing re-signed"
    );
    let u = w.try_recv().unwrap();
    assert_eq!(
        (u.token.jwt_id.as_str(), u.kind),
        (before.jwt_id.as_str(), EventKind::Restored)
    );
    let delivered = s.consul.delivered.lock().unwrap().clone();
    assert_eq!(
        delivered.last().unwrap().1,
        EventKind::Restored,
        "the consumer is told on restore too"
    );
    assert_eq!(
        s.consul.exchanges.load(Ordering::SeqCst),
        1,
        "the saved secret was reused"
    );
    let due = m.next_due_ms().unwrap();
    assert!(due > T0 + 60_000);
    // The first signing after a restore renews what was restored (it was
    // announced as Initial, the kind a manager starts with).
    m.tick(due);
    let u = w.try_recv().unwrap();
    assert_ne!(u.token.jwt_id, before.jwt_id);
    assert_eq!(u.kind, EventKind::Renewed);
}

#[test]
fn restore_matrix_re_signs_when_anything_is_off() {
    // One identity expired (or in its renewal window): all re-signed.
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    manager(&s, 3600).start(T0).unwrap();
    let (_, w, r) = restart(&s, 3600, T0 + 1_900_000);
    assert!(!r.reused && r.reason.contains("due for renewal"), "{r:?}");
    assert_eq!(w.try_recv().unwrap().kind, EventKind::Restored);
    assert_eq!(r.rederived, ["consul"]);

    // The signing key was deprecated: re-signed.
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    manager(&s, 3600).start(T0).unwrap();
    s.keyring.rotate(T0 / 1000).unwrap();
    s.keyring.deprecate("key-1", T0 / 1000).unwrap();
    let (m, _, r) = restart(&s, 3600, T0 + 1000);
    assert!(
        !r.reused && r.reason.contains("no longer verifies") && r.reason.contains("deprecated"),
        "{r:?}"
    );
    assert_ne!(m.current(&task_key(), T0 + 1000).unwrap().kid, "key-1");

    // Missing state: re-signed.
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let (_, _, r) = restart(&s, 3600, T0);
    assert!(!r.reused && r.reason == "no saved state", "{r:?}");

    // Corrupt state file: re-signed, the reason given, no crash.
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(FileIdentityDb::new(dir.path()));
    let s = setup(db.clone());
    manager(&s, 3600).start(T0).unwrap();
    let path = db.path(common::ALLOC_ID).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let (m, w, r) = restart(&s, 3600, T0 + 1000);
    assert!(
        !r.reused && r.reason.contains("saved state unreadable"),
        "{r:?}"
    );
    assert_eq!(w.try_recv().unwrap().kind, EventKind::Restored);
    assert!(m.current(&task_key(), T0 + 1000).is_some());
    // ...and the file is whole again.
    assert!(db.load(common::ALLOC_ID).unwrap().is_some());
    std::fs::write(&path, b"not a state file").unwrap();
    let (_, _, r) = restart(&s, 3600, T0 + 2000);
    assert!(
        !r.reused && r.reason.contains("not a workload-identity identity state"),
        "{r:?}"
    );
}

/// Seed 001: a restored workload must never run with an empty secret.
#[test]
fn an_empty_persisted_secret_is_rederived_on_restore() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(FileIdentityDb::new(dir.path()));
    let s = setup(db.clone());
    manager(&s, 3600).start(T0).unwrap();
    // The host restarts with the derived token lost (empty), identities intact.
    let mut saved = db.load(common::ALLOC_ID).unwrap().unwrap();
    saved.secrets[0].secret.clear();
    db.store(common::ALLOC_ID, &saved).unwrap();
    s.consul.delivered.lock().unwrap().clear();
    let (m, _, r) = restart(&s, 3600, T0 + 60_000);
    assert!(r.reused, "the identities themselves are fine");
    assert_eq!(r.rederived, ["consul"], "the empty secret is derived again");
    assert_eq!(s.consul.exchanges.load(Ordering::SeqCst), 2);
    let delivered = s.consul.delivered.lock().unwrap().clone();
    assert_eq!(delivered.len(), 1);
    assert!(
        !delivered[0].0.is_empty(),
        "never an empty (anonymous) secret"
    );
    assert_eq!(delivered[0].1, EventKind::Restored);
    assert!(!m.secret("consul").unwrap().secret.is_empty());
    assert!(
        !db.load(common::ALLOC_ID).unwrap().unwrap().secrets[0]
            .secret
            .is_empty(),
        "and saved"
    );
    // A secret derived from a token that was since re-signed is also re-derived.
    let mut saved = db.load(common::ALLOC_ID).unwrap().unwrap();
    saved.secrets[0].derived_from = "an-older-token".into();
    db.store(common::ALLOC_ID, &saved).unwrap();
    let (_, _, r) = restart(&s, 3600, T0 + 61_000);
    assert_eq!(r.rederived, ["consul"]);
    // An exchange that fails is an error, not a silent anonymous secret.
    let mut saved = db.load(common::ALLOC_ID).unwrap().unwrap();
    saved.secrets.clear();
    db.store(common::ALLOC_ID, &saved).unwrap();
    s.consul.fail.store(true, Ordering::SeqCst);
    let m = manager(&s, 3600);
    let e = m.restore(T0 + 62_000).unwrap_err();
    assert_eq!(e.code(), ResultCode::TokenExchangeFailed);
    assert!(
        matches!(&e, Error::TokenExchange { exchange, .. } if exchange == "consul"),
        "{e:?}"
    );
    assert!(e.to_string().contains("consul login refused"), "{e}");
    s.consul.fail.store(false, Ordering::SeqCst);
    let retry = m.next_due_ms().unwrap();
    m.tick(retry);
    assert!(
        m.secret("consul").is_some_and(|x| !x.secret.is_empty()),
        "repaired on retry"
    );
}

#[test]
fn a_long_simulated_run_never_serves_an_expired_identity() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let ttl = 120; // seconds: renewals every ~60 s, so thousands of cycles
    let m = IdentityManager::builder(
        requests(ttl),
        s.signer.clone(),
        s.db.clone(),
        s.keyring.clone(),
    )
    .exchange(s.consul.clone())
    .build()
    .unwrap();
    let w = m.watch(&task_key()).unwrap();
    m.start(T0).unwrap();
    let mut now = T0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let renewals = AtomicU64::new(0);
    let mut served = 0u64;
    let mut gaps = 0u64;
    let mut last_jti = String::new();
    for _ in 0..20_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // About a quarter of signing attempts fail; sometimes a long outage.
        s.signer
            .fail
            .store(rng % 4 == 0 || (rng >> 20) % 97 == 0, Ordering::SeqCst);
        let next = m.tick(now).unwrap();
        assert!(next > now, "the schedule moves forward");
        // Jump to somewhere before the next action, then to it.
        let step = (rng >> 32) as i64 % (next - now).max(1);
        for t in [now + step, next] {
            if let Some(tok) = m.current(&task_key(), t) {
                assert!(tok.valid_at(t), "served past exp");
                assert!(tok.expires_at.unwrap() * 1000 > t);
                served += 1;
            } else {
                gaps += 1;
            }
            if let Some(u) = w.try_recv() {
                if u.token.jwt_id != last_jti {
                    renewals.fetch_add(1, Ordering::Relaxed);
                    last_jti = u.token.jwt_id.clone();
                }
            }
        }
        now = next;
    }
    let renewed = renewals.load(Ordering::Relaxed);
    assert!(renewed > 2000, "only {renewed} renewals");
    assert!(served > 10 * gaps, "served {served}, gaps {gaps}");
    println!(
        "simulated {} s: {renewed} renewals, {served} checks served, {gaps} without a valid token",
        (now - T0) / 1000
    );
}

#[test]
fn the_runner_renews_in_real_time_and_stops_cleanly() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let mut policy = RenewalPolicy::default();
    policy.min_wait = Duration::from_millis(50);
    policy.min_wait_jitter = Duration::from_millis(10);
    let m = IdentityManager::builder(
        requests(1),
        s.signer.clone(),
        s.db.clone(),
        s.keyring.clone(),
    )
    .policy(policy)
    .build()
    .unwrap();
    let w = m.watch(&task_key()).unwrap();
    let clock = Arc::new(SystemClock);
    m.start(clock.now_ms()).unwrap();
    assert_eq!(w.try_recv().unwrap().kind, EventKind::Initial);
    let runner = Runner::spawn(m, clock.clone()).unwrap();
    // The running manager is reachable through its runner.
    assert!(
        runner
            .manager()
            .current(&task_key(), clock.now_ms())
            .is_some()
    );
    let u = w
        .recv_timeout(Duration::from_secs(10))
        .expect("renewed by the runner");
    assert_eq!(u.kind, EventKind::Renewed);
    runner.stop();
    let calls = s.signer.calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        s.signer.calls.load(Ordering::SeqCst),
        calls,
        "stopped means stopped"
    );
}

/// `now_ms` anywhere in `i64`: start, tick, restore and current never
/// overflow (debug builds panic on overflow), whatever the tokens' times.
#[test]
fn extreme_times_never_overflow() {
    const EDGES: [i64; 6] = [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX];
    for start in [T0, i64::MIN, i64::MIN + 1, -1, 0] {
        let s = setup(Arc::new(MemoryIdentityDb::default()));
        let m = manager(&s, 3600);
        let _ = m.start(start);
        for now in EDGES {
            let _ = m.tick(now);
            let _ = m.current(&task_key(), now);
            let _ = m.next_due_ms();
            let _ = manager(&s, 3600).restore(now);
        }
    }
}

/// An exchange that calls back into its own manager from inside its
/// callback, recording what each call answered.
struct CallsBack {
    key: IdentityId,
    manager: std::sync::OnceLock<IdentityManager>,
    answers: Mutex<Vec<String>>,
}

impl TokenExchange for CallsBack {
    fn name(&self) -> &str {
        "calls-back"
    }
    fn identity(&self) -> &IdentityId {
        &self.key
    }
    fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError> {
        let m = self.manager.get().expect("set before start");
        let mut answers = self.answers.lock().unwrap();
        let err = |r: Result<(), Error>| match r {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{:?}: {e}", e.code()),
        };
        answers.push(format!("start {}", err(m.start(T0))));
        answers.push(format!("restore {}", err(m.restore(T0).map(|_| ()))));
        answers.push(format!("tick {:?}", m.tick(T0 + 10_000_000)));
        answers.push(format!(
            "current {}",
            m.current(&self.key, T0).map(|t| t.jwt_id) == Some(token.jwt_id.clone())
        ));
        answers.push(format!("next_due {}", m.next_due_ms().is_some()));
        answers.push(format!("health {}", m.health(T0).identities.len()));
        Ok(format!("secret-{}", &token.jwt_id[..8]))
    }
    fn deliver(&self, _secret: &str, _kind: EventKind) {}
}

/// Security round 4 (issue 51, item 7): an exchange that calls back into the
/// same manager from inside its callback used to hang forever on the
/// manager's renewal lock. Now `start` and `restore` from there fail with a
/// clear `InvalidArgument`, `tick` does nothing (the running call does what
/// is due: the signer is not called again), and the reads answer; the
/// outer start completes. The calls run on a thread of their own, so that a
/// regression fails here instead of hanging the suite.
#[test]
fn a_callback_calling_back_into_its_manager_never_hangs() {
    let s = setup(Arc::new(MemoryIdentityDb::default()));
    let back = Arc::new(CallsBack {
        key: task_key(),
        manager: std::sync::OnceLock::new(),
        answers: Mutex::new(Vec::new()),
    });
    let m = IdentityManager::builder(
        requests(3600),
        s.signer.clone(),
        s.db.clone(),
        s.keyring.clone(),
    )
    .exchange(back.clone())
    .jitter(Arc::new(FixedJitter(0.5)))
    .build()
    .unwrap();
    back.manager.set(m.clone()).ok().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let running = m.clone();
    std::thread::spawn(move || tx.send(running.start(T0)).unwrap());
    let started = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("start from inside a callback deadlocked");
    started.unwrap();
    assert_eq!(s.signer.calls.load(Ordering::SeqCst), 1, "signed once");
    let answers = back.answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 6, "{answers:?}");
    for (i, call) in ["start", "restore"].iter().enumerate() {
        assert!(
            answers[i].starts_with(&format!("{call} InvalidArgument"))
                && answers[i].contains("from inside one of this manager's own callbacks"),
            "{answers:?}"
        );
    }
    // A tick at a time when everything is due signed nothing (one call).
    assert!(answers[2].starts_with("tick Some("), "{answers:?}");
    assert_eq!(answers[3], "current true", "{answers:?}");
    assert_eq!(answers[4], "next_due true", "{answers:?}");
    assert_eq!(answers[5], "health 2", "{answers:?}");
    assert!(m.secret("calls-back").is_some());
    // Outside any callback, the calls work as always (on any thread).
    assert!(m.tick(T0).is_some());
}
