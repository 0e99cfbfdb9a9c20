//! Token exchanges whose secrets have a life of their own (a Vault token's
//! TTL): refreshed on their own schedule without re-signing identities,
//! refreshed when the identity is re-signed, replaced secrets released, a
//! saved secret confirmed by its exchange after a restore (and never handed
//! out when it cannot be), and failed exchanges retried on their own.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use workload_identity::manager::*;
use workload_identity::model::{GoDuration, IssueRequest};
use workload_identity::{Error, Issuer, KeyState, Keyring, ResultCode, SignedIdentity};

use common::identity::root_key;

const T0: i64 = 1_700_000_000_000; // ms
const LEASE_MS: i64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Keep,
    Replace,
    Fail,
    /// Kept, asking for a refresh time already past.
    KeepPast,
    /// "Replaced" by the very secret it had.
    Same,
}

/// A login whose secrets want a refresh every [`LEASE_MS`], scripted per
/// call: keep, replace or fail.
struct Lease {
    name: &'static str,
    /// Its secrets are `<prefix>-1`, `<prefix>-2`, ...
    prefix: &'static str,
    key: IdentityId,
    mode: Mutex<Mode>,
    derived: AtomicUsize,
    refreshes: Mutex<Vec<(String, RefreshReason, String)>>,
    released: Mutex<Vec<String>>,
    delivered: Mutex<Vec<(String, EventKind)>>,
    /// Where its secrets are minted (`<server>; <as>`).
    origin: Mutex<String>,
    /// Its server cannot be reached to revoke.
    revoke_fails: AtomicBool,
    /// Once set (by a delivery, when `kill_at_delivery`), the process is
    /// "killed": no revocation reaches the server and `db` is frozen.
    kill_at_delivery: AtomicBool,
    dead: AtomicBool,
    freeze: Mutex<Option<Arc<FreezableDb>>>,
}

impl Lease {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
    fn new_secret(&self, now_ms: i64) -> Derived {
        let n = self.derived.fetch_add(1, Ordering::SeqCst) + 1;
        Derived::new(format!("{}-{n}", self.prefix), Some(now_ms + LEASE_MS))
    }
}

impl TokenExchange for Lease {
    fn name(&self) -> &str {
        self.name
    }
    fn identity(&self) -> &IdentityId {
        &self.key
    }
    fn exchange(&self, _: &IdentityToken) -> Result<String, ExchangeError> {
        unreachable!("derive is overridden")
    }
    fn deliver(&self, secret: &str, kind: EventKind) {
        if self.kill_at_delivery.swap(false, Ordering::SeqCst) {
            self.dead.store(true, Ordering::SeqCst);
            if let Some(db) = &*self.freeze.lock().unwrap() {
                db.frozen.store(true, Ordering::SeqCst);
            }
        }
        self.delivered
            .lock()
            .unwrap()
            .push((secret.to_string(), kind));
    }
    fn derive(&self, _: &IdentityToken, now_ms: i64) -> Result<Derived, ExchangeError> {
        if *self.mode.lock().unwrap() == Mode::Fail {
            return Err(ExchangeError("the login was refused".into()));
        }
        Ok(self.new_secret(now_ms))
    }
    fn refresh(
        &self,
        secret: &str,
        token: &IdentityToken,
        reason: RefreshReason,
        now_ms: i64,
    ) -> Result<Refreshed, ExchangeError> {
        self.refreshes
            .lock()
            .unwrap()
            .push((secret.to_string(), reason, token.jwt_id.clone()));
        match *self.mode.lock().unwrap() {
            Mode::Keep if reason == RefreshReason::Restored => Ok(Refreshed::Kept {
                refresh_at_ms: Some(now_ms + LEASE_MS),
            }),
            Mode::Keep => Ok(Refreshed::Renewed {
                refresh_at_ms: Some(now_ms + LEASE_MS),
            }),
            Mode::Replace => Ok(Refreshed::Replaced(self.new_secret(now_ms))),
            Mode::Fail => Err(ExchangeError("the server is down".into())),
            Mode::KeepPast => Ok(Refreshed::Kept {
                refresh_at_ms: Some(now_ms - 5_000),
            }),
            Mode::Same => Ok(Refreshed::Replaced(Derived::new(secret.to_string(), None))),
        }
    }
    fn revoke(&self, secret: &str) -> Result<(), ExchangeError> {
        if self.dead.load(Ordering::SeqCst) {
            return Ok(()); // never reaches the server; nothing is saved after
        }
        if self.revoke_fails.load(Ordering::SeqCst) {
            return Err(ExchangeError("the server is unreachable".into()));
        }
        self.released.lock().unwrap().push(secret.to_string());
        Ok(())
    }
    fn origin(&self) -> String {
        self.origin.lock().unwrap().clone()
    }
}

/// A login named `name` for identity `key`, its secrets `<prefix>-<n>`.
fn lease(name: &'static str, key: IdentityId, prefix: &'static str) -> Arc<Lease> {
    Arc::new(Lease {
        name,
        prefix,
        key,
        mode: Mutex::new(Mode::Keep),
        derived: AtomicUsize::new(0),
        refreshes: Mutex::new(Vec::new()),
        released: Mutex::new(Vec::new()),
        delivered: Mutex::new(Vec::new()),
        origin: Mutex::new("vault https://a.example; mount jwt role web".into()),
        revoke_fails: AtomicBool::new(false),
        kill_at_delivery: AtomicBool::new(false),
        dead: AtomicBool::new(false),
        freeze: Mutex::new(None),
    })
}

/// A database that stops saving once frozen: what it holds is what a
/// process killed at that moment left behind.
#[derive(Default)]
struct FreezableDb {
    inner: MemoryIdentityDb,
    frozen: AtomicBool,
}

impl IdentityDb for FreezableDb {
    fn load(&self, alloc_id: &str) -> Result<Option<PersistedState>, Error> {
        self.inner.load(alloc_id)
    }
    fn store(&self, alloc_id: &str, state: &PersistedState) -> Result<(), Error> {
        if self.frozen.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.store(alloc_id, state)
    }
    fn remove(&self, alloc_id: &str) -> Result<(), Error> {
        self.inner.remove(alloc_id)
    }
}

struct Counting {
    issuer: Issuer,
    calls: AtomicUsize,
}

impl IdentitySigner for Counting {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.issuer.sign(requests, now)
    }
}

struct Fixed;
impl Jitter for Fixed {
    fn draw(&self) -> f64 {
        0.0
    }
}

struct Setup {
    keyring: Keyring,
    signer: Arc<Counting>,
    lease: Arc<Lease>,
    db: Arc<MemoryIdentityDb>,
}

fn setup() -> Setup {
    let keyring = Keyring::from_keys([root_key("key-1", 1, KeyState::Active)]).unwrap();
    Setup {
        signer: Arc::new(Counting {
            issuer: Issuer::new(keyring.clone()),
            calls: AtomicUsize::new(0),
        }),
        lease: lease("vault", IdentityId::new("server", "vault_default"), "lease"),
        keyring,
        db: Arc::new(MemoryIdentityDb::default()),
    }
}

fn manager(s: &Setup) -> IdentityManager {
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_secs(3600);
    IdentityManager::builder(vec![req], s.signer.clone(), s.db.clone(), s.keyring.clone())
        .exchange(s.lease.clone())
        .jitter(Arc::new(Fixed))
        .build()
        .unwrap()
}

fn secret(m: &IdentityManager) -> Option<String> {
    m.secret("vault").map(|s| s.secret.clone())
}

fn saved_secret(s: &Setup) -> String {
    s.db.load(common::ALLOC_ID).unwrap().unwrap().secrets[0]
        .secret
        .clone()
}

#[test]
fn a_leased_secret_is_refreshed_on_its_own_schedule_without_re_signing() {
    let s = setup();
    let m = manager(&s);
    m.start(T0).unwrap();
    assert_eq!(secret(&m).as_deref(), Some("lease-1"));
    assert_eq!(
        m.next_due_ms(),
        Some(T0 + LEASE_MS),
        "the lease comes first"
    );
    let signed = s.signer.calls.load(Ordering::SeqCst);
    let delivered = s.lease.delivered.lock().unwrap().len();

    // Due, kept (renewed): no re-signing, nothing delivered again.
    assert_eq!(m.tick(T0 + LEASE_MS), Some(T0 + 2 * LEASE_MS));
    let r = s.lease.refreshes.lock().unwrap().clone();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0.as_str(), r[0].1), ("lease-1", RefreshReason::Due));
    assert_eq!(s.signer.calls.load(Ordering::SeqCst), signed);
    assert_eq!(s.lease.delivered.lock().unwrap().len(), delivered);

    // Due, replaced (a new login): saved, delivered, the old one released.
    s.lease.set(Mode::Replace);
    m.tick(T0 + 2 * LEASE_MS);
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert_eq!(saved_secret(&s), "lease-2");
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1"]);
    assert_eq!(
        s.lease.delivered.lock().unwrap().last().unwrap(),
        &("lease-2".to_string(), EventKind::Renewed)
    );
    assert_eq!(s.signer.calls.load(Ordering::SeqCst), signed);

    // Due, failed: the secret stays in use and is retried on its own after
    // the backoff (1 s), still without re-signing.
    s.lease.set(Mode::Fail);
    let now = T0 + 3 * LEASE_MS;
    assert_eq!(m.tick(now), Some(now + 1000));
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert_eq!(m.tick(now + 1000), Some(now + 3000), "the backoff doubles");
    assert_eq!(s.signer.calls.load(Ordering::SeqCst), signed);
    s.lease.set(Mode::Keep);
    assert_eq!(m.tick(now + 3000), Some(now + 3000 + LEASE_MS));
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
}

#[test]
fn a_re_signed_identity_refreshes_the_secret_with_the_new_token() {
    let s = setup();
    let m = manager(&s);
    m.start(T0).unwrap();
    let first = m.current(&s.lease.key, T0).unwrap();
    // The lease wants a refresh every 10 s: keep it, until the identity's
    // renewal (half of its hour) comes.
    let (now, renewed) = loop {
        let now = m.next_due_ms().unwrap();
        m.tick(now);
        let t = m.current(&s.lease.key, now).unwrap();
        if t.jwt_id != first.jwt_id {
            break (now, t);
        }
    };
    assert!(now >= T0 + 1_800_000, "renewed half-way, not before");
    let r = s.lease.refreshes.lock().unwrap().clone();
    let last = r.last().unwrap();
    assert_eq!(last.1, RefreshReason::Resigned);
    assert_eq!(last.2, renewed.jwt_id, "refreshed with the new token");
    assert!(r[..r.len() - 1].iter().all(|x| x.1 == RefreshReason::Due));
    assert_eq!(
        s.lease.derived.load(Ordering::SeqCst),
        1,
        "never logged in again"
    );
}

#[test]
fn restore_confirms_the_saved_secret_or_replaces_it_and_never_hands_out_one_it_could_not_confirm() {
    let s = setup();
    manager(&s).start(T0).unwrap();
    s.lease.delivered.lock().unwrap().clear();

    // Confirmed: reused and delivered as restored.
    let m = manager(&s);
    let r = m.restore(T0 + 60_000).unwrap();
    assert!(r.reused && r.rederived.is_empty(), "{r:?}");
    let last = s.lease.refreshes.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        (last.0.as_str(), last.1),
        ("lease-1", RefreshReason::Restored)
    );
    assert_eq!(
        *s.lease.delivered.lock().unwrap(),
        [("lease-1".to_string(), EventKind::Restored)]
    );
    assert_eq!(m.next_due_ms(), Some(T0 + 60_000 + LEASE_MS));

    // Refused and replaced (its token was dead): the new one is delivered and
    // saved, the old one released, and the report says it was derived anew.
    s.lease.set(Mode::Replace);
    let m = manager(&s);
    let r = m.restore(T0 + 61_000).unwrap();
    assert!(r.reused, "the identities themselves are fine");
    assert_eq!(r.rederived, ["vault"]);
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert_eq!(saved_secret(&s), "lease-2");
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1"]);

    // It could not be confirmed and no new one could be had: the saved
    // secret is taken out of use (never delivered), but not released (it
    // may still work for whoever holds it); an error; retried. Once a new
    // one is delivered, as the restore's, the old one is released.
    s.lease.set(Mode::Fail);
    s.lease.delivered.lock().unwrap().clear();
    let m = manager(&s);
    let e = m.restore(T0 + 62_000).unwrap_err();
    assert_eq!(e.code(), ResultCode::TokenExchangeFailed);
    assert!(e.to_string().contains("the server is down"), "{e}");
    assert!(secret(&m).is_none());
    assert!(
        s.lease.delivered.lock().unwrap().is_empty(),
        "nothing handed out"
    );
    assert_eq!(
        *s.lease.released.lock().unwrap(),
        ["lease-1"],
        "lease-2 held back"
    );
    s.lease.set(Mode::Keep);
    let retry = m.next_due_ms().unwrap();
    assert_eq!(retry, T0 + 63_000);
    m.tick(retry);
    assert_eq!(
        secret(&m).as_deref(),
        Some("lease-3"),
        "derived anew on retry"
    );
    assert_eq!(
        *s.lease.delivered.lock().unwrap(),
        [("lease-3".to_string(), EventKind::Restored)],
        "announced as the restore it completes"
    );
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1", "lease-2"]);
}

#[test]
fn a_restore_that_re_signs_releases_the_saved_secret() {
    let s = setup();
    manager(&s).start(T0).unwrap();
    // Long after: the saved identity is past its renewal window.
    let m = manager(&s);
    let r = m.restore(T0 + 2_000_000).unwrap();
    assert!(!r.reused);
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1"]);
}

#[test]
fn a_refresh_time_in_the_past_cannot_make_the_manager_spin_and_a_secret_still_in_use_is_not_released()
 {
    let s = setup();
    let m = manager(&s);
    m.start(T0).unwrap();
    s.lease.set(Mode::KeepPast);
    let now = T0 + LEASE_MS;
    assert_eq!(m.tick(now), Some(now + 1000), "at least a second later");
    s.lease.set(Mode::Same);
    m.tick(now + 1000);
    assert_eq!(secret(&m).as_deref(), Some("lease-1"));
    assert!(
        s.lease.released.lock().unwrap().is_empty(),
        "the secret in use was never released"
    );
}

#[test]
fn a_renewed_secret_counts_as_derived_from_the_re_signed_identity() {
    let s = setup();
    let m = manager(&s);
    m.start(T0).unwrap();
    let first = m.current(&s.lease.key, T0).unwrap();
    // Run past the identity's renewal: the lease is renewed with the new
    // token each time.
    let now = loop {
        let now = m.next_due_ms().unwrap();
        m.tick(now);
        if m.current(&s.lease.key, now).unwrap().jwt_id != first.jwt_id {
            break now;
        }
    };
    let saved = s.db.load(common::ALLOC_ID).unwrap().unwrap();
    assert_eq!(saved.secrets[0].derived_from, saved.identities[0].jwt_id);
    // So a restart confirms it (restored), rather than deriving a new one.
    let m = manager(&s);
    let r = m.restore(now + 1000).unwrap();
    assert!(r.reused && r.rederived.is_empty(), "{r:?}");
    let last = s.lease.refreshes.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.1, RefreshReason::Restored);
    assert_eq!(s.lease.derived.load(Ordering::SeqCst), 1);
}

#[test]
fn a_failed_re_signing_restore_holds_the_saved_secret_back_without_releasing_it() {
    let s = setup();
    manager(&s).start(T0).unwrap();
    // Long after (the identity is due), with the exchange's server down.
    s.lease.set(Mode::Fail);
    let m = manager(&s);
    assert!(m.restore(T0 + 2_000_000).is_err());
    assert!(secret(&m).is_none(), "not handed out unconfirmed");
    assert!(s.lease.released.lock().unwrap().is_empty(), "nor released");
    s.lease.set(Mode::Keep);
    m.tick(m.next_due_ms().unwrap());
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1"]);
}

#[test]
fn exchange_retries_back_off_at_most_a_minute() {
    let s = setup();
    let m = manager(&s);
    m.start(T0).unwrap();
    s.lease.set(Mode::Fail);
    let mut now = T0 + LEASE_MS;
    let mut gaps = Vec::new();
    for _ in 0..10 {
        let next = m.tick(now).unwrap();
        gaps.push(next - now);
        now = next;
    }
    assert_eq!(
        gaps,
        [
            1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000
        ]
    );
    assert_eq!(
        secret(&m).as_deref(),
        Some("lease-1"),
        "kept in use meanwhile"
    );
}

/// A task's and a service's identity of one allocation (1 h each).
fn two_requests() -> Vec<IssueRequest> {
    let mut task = common::issue_request_task();
    task.identity.ttl = GoDuration::from_secs(3600);
    let mut svc = common::issue_request_service();
    svc.region = "global".into();
    svc.identity = workload_identity::model::WorkloadIdentity {
        name: "consul-service_web-api".into(),
        audience: vec!["consul.io".into()],
        ttl: GoDuration::from_secs(3600),
        ..Default::default()
    };
    vec![task, svc]
}

fn task_id() -> IdentityId {
    IdentityId::new("server", "vault_default")
}

fn service_id() -> IdentityId {
    IdentityId::new("web-api", "consul-service_web-api")
}

fn two_identities(s: &Setup, db: Arc<dyn IdentityDb>) -> IdentityManagerBuilder {
    IdentityManager::builder(two_requests(), s.signer.clone(), db, s.keyring.clone())
        .jitter(Arc::new(Fixed))
}

/// Two tasks of one allocation, each with a Vault login left at its default
/// name: one secret slot would hand one task's Vault token to the other.
/// Refused at build, naming the name and the fix.
#[test]
fn two_exchanges_with_one_name_are_refused_at_build() {
    let s = setup();
    let e = two_identities(&s, s.db.clone())
        .exchange(lease("vault", task_id(), "a"))
        .exchange(lease("vault", service_id(), "b"))
        .build()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    let msg = e.to_string();
    for says in [
        "\"vault\"",
        "server/vault_default",
        "web-api/consul-service_web-api",
        "its own name",
        "VaultLoginBuilder::name",
    ] {
        assert!(msg.contains(says), "{says:?} not in: {msg}");
    }
    // With their own names they live side by side.
    let m = two_identities(&s, s.db.clone())
        .exchange(lease("vault-a", task_id(), "a"))
        .exchange(lease("vault-b", service_id(), "b"))
        .build()
        .unwrap();
    m.start(T0).unwrap();
    let a = m.secret("vault-a").unwrap();
    let b = m.secret("vault-b").unwrap();
    assert_eq!((a.secret.as_str(), &a.identity), ("a-1", &task_id()));
    assert_eq!((b.secret.as_str(), &b.identity), ("b-1", &service_id()));
}

/// A secret saved for one identity is never handed to an exchange of the
/// same name that now consumes another (the configuration changed across
/// the restart): not to confirm, not to release, not to deliver. That
/// exchange derives its own; the other's is neither used nor revoked by it.
#[test]
fn a_saved_secret_goes_only_to_the_exchange_of_its_identity() {
    let s = setup();
    let first = lease("vault", task_id(), "a");
    let m = two_identities(&s, s.db.clone())
        .exchange(first.clone())
        .build()
        .unwrap();
    m.start(T0).unwrap();
    assert_eq!(m.secret("vault").unwrap().secret, "a-1");

    let other = lease("vault", service_id(), "b");
    let m = two_identities(&s, s.db.clone())
        .exchange(other.clone())
        .build()
        .unwrap();
    let r = m.restore(T0 + 60_000).unwrap();
    assert!(r.reused, "{r:?}");
    assert_eq!(r.rederived, ["vault"]);
    let got = m.secret("vault").unwrap();
    assert_eq!((got.secret.as_str(), &got.identity), ("b-1", &service_id()));
    assert!(
        other.refreshes.lock().unwrap().is_empty(),
        "never asked to confirm another identity's secret"
    );
    assert!(
        other.released.lock().unwrap().is_empty(),
        "never revokes another identity's secret"
    );
    assert_eq!(
        *other.delivered.lock().unwrap(),
        [("b-1".to_string(), EventKind::Restored)]
    );
    let saved = s.db.load(common::ALLOC_ID).unwrap().unwrap().secrets;
    assert!(
        saved.iter().all(|x| x.secret != "a-1"),
        "the orphan is not kept: {saved:?}"
    );
}

/// A state file written by the previous version (its secrets keyed by
/// exchange name alone; `tests/vectors/identities-v1.bin`: tokens of
/// `key-1` signed at T0, the `vault` exchange's secret `task-token` derived
/// from the task's identity) restores: the secret is found under its
/// exchange and identity, and confirmed, not derived again.
#[test]
fn a_state_file_of_the_previous_version_restores_its_secrets() {
    let s = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{}.identities", common::ALLOC_ID));
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/identities-v1.bin"
        ),
        &path,
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let db: Arc<dyn IdentityDb> = Arc::new(FileIdentityDb::new(dir.path()));
    let vault = lease("vault", task_id(), "new");
    // An exchange whose secrets are bound to no server (origin ""): the file
    // predates origins, and a server-bound exchange drops its secret
    // instead (a_saved_secret_goes_back_only_to_where_it_was_minted).
    *vault.origin.lock().unwrap() = String::new();
    let m = two_identities(&s, db)
        .exchange(vault.clone())
        .build()
        .unwrap();
    let r = m.restore(T0 + 60_000).unwrap();
    assert!(r.reused && r.rederived.is_empty(), "{r:?}");
    let refreshes = vault.refreshes.lock().unwrap().clone();
    assert_eq!(refreshes.len(), 1, "{refreshes:?}");
    assert_eq!(
        (refreshes[0].0.as_str(), refreshes[0].1),
        ("task-token", RefreshReason::Restored)
    );
    assert_eq!(m.secret("vault").unwrap().secret, "task-token");
    assert_eq!(vault.derived.load(Ordering::SeqCst), 0);
}

/// A signer that, once armed, tells the test each time it is entered and
/// then waits for the test's go-ahead: a signing held open for as long as
/// the test needs, with no sleeping.
struct Gated {
    issuer: Issuer,
    calls: AtomicUsize,
    armed: std::sync::atomic::AtomicBool,
    entered: Mutex<std::sync::mpsc::Sender<()>>,
    go: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl IdentitySigner for Gated {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.armed.load(Ordering::SeqCst) {
            let _ = self.entered.lock().unwrap().send(());
            let _ = self.go.lock().unwrap().recv();
        }
        self.issuer.sign(requests, now)
    }
}

/// Two threads tick at the due time while the first is still signing. The
/// second must wait for the first to finish and then find nothing due: one
/// signing, one refresh of the old secret, one release of it, and the new
/// secret kept (never a second login whose token is neither kept nor
/// revoked). No timing decides the outcome: the wait for a second signing
/// only lets the test see the defect sooner when it is there; with the
/// renewal lock there is no second signing however long it waits.
#[test]
fn two_threads_ticking_at_the_due_time_renew_once() {
    use std::sync::mpsc;
    let s = setup();
    let (entered_tx, entered) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let signer = Arc::new(Gated {
        issuer: Issuer::new(s.keyring.clone()),
        calls: AtomicUsize::new(0),
        armed: std::sync::atomic::AtomicBool::new(false),
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
    });
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_secs(3600);
    let m = IdentityManager::builder(vec![req], signer.clone(), s.db.clone(), s.keyring.clone())
        .exchange(s.lease.clone())
        .jitter(Arc::new(Fixed))
        .build()
        .unwrap();
    m.start(T0).unwrap();
    assert_eq!(secret(&m).as_deref(), Some("lease-1"));
    // Half the identity's hour, no jitter: signing (and the lease) due.
    let due = T0 + 1_800_000;
    s.lease.set(Mode::Replace);
    signer.armed.store(true, Ordering::SeqCst);

    let first = {
        let m = m.clone();
        std::thread::spawn(move || m.tick(due))
    };
    entered.recv().unwrap();
    let second = {
        let m = m.clone();
        std::thread::spawn(move || m.tick(due))
    };
    let second_signing = entered
        .recv_timeout(std::time::Duration::from_secs(2))
        .is_ok();
    // Enough go-aheads for both, whatever happened.
    go.send(()).unwrap();
    go.send(()).unwrap();
    first.join().unwrap();
    second.join().unwrap();

    assert!(
        !second_signing,
        "the second tick signed while the first was signing"
    );
    assert_eq!(
        signer.calls.load(Ordering::SeqCst),
        2,
        "start, then one renewal"
    );
    let resigned: Vec<_> = s
        .lease
        .refreshes
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.1 == RefreshReason::Resigned)
        .map(|r| r.0.clone())
        .collect();
    assert_eq!(resigned, ["lease-1"], "the old secret refreshed once");
    assert_eq!(
        *s.lease.released.lock().unwrap(),
        ["lease-1"],
        "released once"
    );
    assert_eq!(s.lease.derived.load(Ordering::SeqCst), 2, "one new secret");
    assert_eq!(secret(&m).as_deref(), Some("lease-2"), "and it is kept");
    assert_eq!(saved_secret(&s), "lease-2");
}

/// Security round 4 (issue 51, item 4): a saved secret records where it was
/// minted, and a restore sends it only back there. Configured for another
/// server: the saved secret is neither confirmed there nor revoked there
/// (never sent anywhere), a new one is derived. The same server with
/// another role: not kept either, and revoked on that server once its
/// successor is delivered. A secret saved before origins were (origin ""):
/// dropped, not sent. A restore that re-signs revokes only a secret of this
/// server.
#[test]
fn a_saved_secret_goes_back_only_to_where_it_was_minted() {
    let s = setup();
    let set_origin = |o: &str| *s.lease.origin.lock().unwrap() = o.to_string();
    let m = manager(&s);
    m.start(T0).unwrap();
    assert_eq!(secret(&m).as_deref(), Some("lease-1"));
    let saved = s.db.load(common::ALLOC_ID).unwrap().unwrap();
    assert_eq!(
        saved.secrets[0].origin,
        "vault https://a.example; mount jwt role web"
    );
    let never_sent = |secret: &str| {
        s.lease
            .refreshes
            .lock()
            .unwrap()
            .iter()
            .all(|(x, _, _)| x != secret)
            && s.lease.released.lock().unwrap().iter().all(|x| x != secret)
    };

    // Another server configured: lease-1 is never sent to it.
    set_origin("vault https://b.example; mount jwt role web");
    let m = manager(&s);
    let report = m.restore(T0 + 1000).unwrap();
    assert!(report.reused, "{report:?}");
    assert_eq!(report.rederived, ["vault"]);
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert!(
        never_sent("lease-1"),
        "{:?} {:?}",
        s.lease.refreshes,
        s.lease.released
    );
    assert_eq!(
        s.db.load(common::ALLOC_ID).unwrap().unwrap().secrets[0].origin,
        "vault https://b.example; mount jwt role web"
    );

    // The same server, another role: lease-2 is not kept; it is revoked
    // there once lease-3 is delivered.
    set_origin("vault https://b.example; mount jwt role api");
    let m = manager(&s);
    m.restore(T0 + 2000).unwrap();
    assert_eq!(secret(&m).as_deref(), Some("lease-3"));
    assert!(
        s.lease
            .refreshes
            .lock()
            .unwrap()
            .iter()
            .all(|(x, _, _)| x != "lease-2"),
        "never confirmed as if it were this role's"
    );
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-2"]);

    // The same origin: confirmed and reused, as always.
    let m = manager(&s);
    let report = m.restore(T0 + 3000).unwrap();
    assert!(report.rederived.is_empty(), "{report:?}");
    assert_eq!(secret(&m).as_deref(), Some("lease-3"));

    // A state saved before origins were: dropped, sent nowhere.
    let mut old = s.db.load(common::ALLOC_ID).unwrap().unwrap();
    old.secrets[0].origin = String::new();
    s.db.store(common::ALLOC_ID, &old).unwrap();
    let refreshes = s.lease.refreshes.lock().unwrap().len();
    let m = manager(&s);
    m.restore(T0 + 4000).unwrap();
    assert_eq!(secret(&m).as_deref(), Some("lease-4"));
    assert_eq!(s.lease.refreshes.lock().unwrap().len(), refreshes);
    assert!(
        s.lease
            .released
            .lock()
            .unwrap()
            .iter()
            .all(|x| x != "lease-3")
    );

    // A restore that re-signs (the saved token unusable) releases the saved
    // secret only when it came from this server.
    let mut other = s.db.load(common::ALLOC_ID).unwrap().unwrap();
    other.identities[0].token = "not.a.token".into();
    other.secrets[0].origin = "vault https://c.example; mount jwt role api".into();
    s.db.store(common::ALLOC_ID, &other).unwrap();
    let m = manager(&s);
    let report = m.restore(T0 + 5000).unwrap();
    assert!(!report.reused, "{report:?}");
    assert!(
        s.lease
            .released
            .lock()
            .unwrap()
            .iter()
            .all(|x| x != "lease-4")
    );
}

fn manager_on(s: &Setup, db: Arc<dyn IdentityDb>) -> IdentityManager {
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_secs(3600);
    IdentityManager::builder(vec![req], s.signer.clone(), db, s.keyring.clone())
        .exchange(s.lease.clone())
        .jitter(Arc::new(Fixed))
        .build()
        .unwrap()
}

fn secrets_of(saved: &[DerivedSecret]) -> Vec<&str> {
    saved.iter().map(|s| s.secret.as_str()).collect()
}

#[test]
fn a_kill_before_a_replaced_secret_is_revoked_leaves_the_revocation_to_the_next_start() {
    let s = setup();
    let db = Arc::new(FreezableDb::default());
    *s.lease.freeze.lock().unwrap() = Some(db.clone());
    manager_on(&s, db.clone()).start(T0).unwrap();
    // A restore long after re-signs and logs in again (lease-2); the
    // process is killed when lease-2 is delivered, before lease-1's
    // revocation reaches the server.
    s.lease.kill_at_delivery.store(true, Ordering::SeqCst);
    let later = T0 + 2_000_000;
    let r = manager_on(&s, db.clone()).restore(later).unwrap();
    assert!(!r.reused);
    assert!(s.lease.released.lock().unwrap().is_empty(), "killed first");
    // The one write it made holds the new secret and the pending revocation.
    let left = db.load(common::ALLOC_ID).unwrap().unwrap();
    assert_eq!(secrets_of(&left.secrets), ["lease-2"]);
    assert_eq!(secrets_of(&left.releasing), ["lease-1"]);

    // The next process restores: lease-2 is confirmed, delivered, and
    // lease-1 revoked, once; nothing is left pending.
    s.lease.dead.store(false, Ordering::SeqCst);
    db.frozen.store(false, Ordering::SeqCst);
    let m = manager_on(&s, db.clone());
    let r = m.restore(later + 1_000).unwrap();
    assert!(r.reused, "{r:?}");
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1"]);
    let left = db.load(common::ALLOC_ID).unwrap().unwrap();
    assert!(left.releasing.is_empty());
    assert_eq!(secrets_of(&left.secrets), ["lease-2"]);
}

#[test]
fn a_pending_revocation_waits_until_a_successor_is_delivered() {
    let s = setup();
    let db = Arc::new(FreezableDb::default());
    *s.lease.freeze.lock().unwrap() = Some(db.clone());
    manager_on(&s, db.clone()).start(T0).unwrap();
    s.lease.kill_at_delivery.store(true, Ordering::SeqCst);
    let later = T0 + 2_000_000;
    manager_on(&s, db.clone()).restore(later).unwrap();
    s.lease.dead.store(false, Ordering::SeqCst);
    db.frozen.store(false, Ordering::SeqCst);
    // The next process cannot confirm lease-2 (its server down): nothing
    // is delivered, so nothing is revoked (lease-1 may still be what the
    // workload uses); both wait, saved.
    s.lease.set(Mode::Fail);
    let m = manager_on(&s, db.clone());
    assert!(m.restore(later + 1_000).is_err());
    assert!(s.lease.released.lock().unwrap().is_empty());
    let left = db.load(common::ALLOC_ID).unwrap().unwrap();
    assert!(
        left.secrets.is_empty(),
        "lease-2 is not handed out unconfirmed"
    );
    let mut pending = secrets_of(&left.releasing);
    pending.sort();
    assert_eq!(pending, ["lease-1", "lease-2"]);
    assert!(m.health(later + 1_000).exchanges[0].held_back);
    // The server back, the retry derives lease-3, delivers it, and only
    // then revokes both.
    s.lease.set(Mode::Keep);
    m.tick(m.next_due_ms().unwrap());
    assert_eq!(secret(&m).as_deref(), Some("lease-3"));
    let mut revoked = s.lease.released.lock().unwrap().clone();
    revoked.sort();
    assert_eq!(revoked, ["lease-1", "lease-2"]);
    assert!(
        db.load(common::ALLOC_ID)
            .unwrap()
            .unwrap()
            .releasing
            .is_empty()
    );
}

#[test]
fn a_revocation_that_fails_stays_saved_and_is_tried_again() {
    let s = setup();
    let m = manager(&s);
    m.start(T0).unwrap();
    s.lease.revoke_fails.store(true, Ordering::SeqCst);
    s.lease.set(Mode::Replace);
    m.tick(T0 + LEASE_MS);
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));
    let left = s.db.load(common::ALLOC_ID).unwrap().unwrap();
    assert_eq!(secrets_of(&left.releasing), ["lease-1"]);
    let h = m.health(T0 + LEASE_MS);
    assert!(!h.exchanges[0].held_back, "its successor was delivered");
    // The server answers again: the next delivery's revocations take it too.
    s.lease.revoke_fails.store(false, Ordering::SeqCst);
    m.tick(T0 + 2 * LEASE_MS);
    assert_eq!(secret(&m).as_deref(), Some("lease-3"));
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1", "lease-2"]);
    let left = s.db.load(common::ALLOC_ID).unwrap().unwrap();
    assert!(left.releasing.is_empty());
}

#[test]
fn ending_an_allocation_revokes_its_secrets_and_forgets_its_state() {
    let s = setup();
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(FileIdentityDb::new(dir.path()));
    let file = db.path(common::ALLOC_ID).unwrap();
    let m = manager_on(&s, db.clone());
    m.start(T0).unwrap();
    // One replaced secret whose revocation failed, and the one in use.
    s.lease.revoke_fails.store(true, Ordering::SeqCst);
    s.lease.set(Mode::Replace);
    m.tick(T0 + LEASE_MS);
    assert_eq!(secret(&m).as_deref(), Some("lease-2"));

    // Its server still unreachable: nothing is lost, the error names the
    // exchange, and the saved state keeps exactly what was not revoked.
    let e = m.end_allocation().unwrap_err();
    assert_eq!(e.code(), ResultCode::TokenExchangeFailed, "{e}");
    assert!(e.to_string().contains("\"vault\""), "{e}");
    assert!(e.to_string().contains("end_allocation again"), "{e}");
    assert!(
        !e.to_string().contains("lease-"),
        "no secret in errors: {e}"
    );
    let left = db.load(common::ALLOC_ID).unwrap().unwrap();
    assert!(left.identities.is_empty() && left.secrets.is_empty());
    let mut pending = secrets_of(&left.releasing);
    pending.sort();
    assert_eq!(pending, ["lease-1", "lease-2"]);
    // Ended: nothing is signed or handed out any more.
    assert!(secret(&m).is_none());
    assert!(
        m.current(&IdentityId::new("server", "vault_default"), T0 + LEASE_MS)
            .is_none()
    );
    assert_eq!(m.tick(T0 + 10 * LEASE_MS), None);
    for e in [
        m.start(T0 + 11 * LEASE_MS).unwrap_err(),
        m.restore(T0 + 11 * LEASE_MS).unwrap_err(),
    ] {
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
        assert!(e.to_string().contains("was ended"), "{e}");
    }
    let calls = s.signer.calls.load(Ordering::SeqCst);

    // Retried with the server back: both revoked, the file gone.
    s.lease.revoke_fails.store(false, Ordering::SeqCst);
    m.end_allocation().unwrap();
    let mut revoked = s.lease.released.lock().unwrap().clone();
    revoked.sort();
    assert_eq!(revoked, ["lease-1", "lease-2"]);
    assert!(!file.exists());
    assert!(db.load(common::ALLOC_ID).unwrap().is_none());
    // Again: nothing left to do.
    m.end_allocation().unwrap();
    assert_eq!(s.lease.released.lock().unwrap().len(), 2);
    assert_eq!(
        s.signer.calls.load(Ordering::SeqCst),
        calls,
        "never signed again"
    );
}

#[test]
fn a_host_that_restarted_ends_an_allocation_from_its_saved_state() {
    let s = setup();
    manager(&s).start(T0).unwrap();
    // A restarted host learns the allocation stopped: a manager that was
    // never started ends it from what the earlier process saved.
    let m = manager(&s);
    m.end_allocation().unwrap();
    assert_eq!(*s.lease.released.lock().unwrap(), ["lease-1"]);
    assert!(s.db.load(common::ALLOC_ID).unwrap().is_none());
    assert_eq!(
        s.signer.calls.load(Ordering::SeqCst),
        1,
        "only the start signed"
    );

    // A secret saved from another server is not sent to this one.
    let s = setup();
    manager(&s).start(T0).unwrap();
    *s.lease.origin.lock().unwrap() = "vault https://b.example; mount jwt role web".into();
    manager(&s).end_allocation().unwrap();
    assert!(s.lease.released.lock().unwrap().is_empty());
    assert!(s.db.load(common::ALLOC_ID).unwrap().is_none());
}
