//! Node identities (issue 32): tokens for the client nodes themselves, with
//! Nomad 1.11's claims; verification bound to the node's liveness, only when
//! the verifier is configured to, never confused with allocation tokens;
//! renewal at two thirds of the life, backoff, loud warnings, and restore.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use workload_identity::manager::{
    IdentityDb, Jitter, MemoryIdentityDb, NodeIdentityManager, NodeSigner,
};
use workload_identity::model::{GoDuration, Node, NodeIdentityRequest};
use workload_identity::{
    AllocState, Audience, Consistency, Error, Issuer, KeyDerivation, KeyId, KeyMaterial, KeyState,
    Keyring, MemoryStore, NodeState, NodeTokens, ResultCode, RootKey, SignedIdentity, StateStore,
    StoreError, Verifier,
};

const NOW: i64 = 1_700_000_000;
const NODE: &str = "da86421c-7de9-85e4-2f50-3b2bf95102c1";
const MATERIAL: [u8; 32] = [7; 32];

fn keyring() -> Keyring {
    Keyring::from_keys([RootKey::new(
        KeyId::new("k1").unwrap(),
        KeyMaterial::from_slice(&MATERIAL).unwrap(),
        KeyDerivation::HkdfV1,
        KeyState::Active,
        NOW - 100,
    )])
    .unwrap()
}

fn request() -> NodeIdentityRequest {
    NodeIdentityRequest {
        region: "global".into(),
        node: Node {
            id: NODE.into(),
            name: "client-1".into(),
            datacenter: "dc1".into(),
            node_pool: "default".into(),
            node_class: String::new(),
            status: "ready".into(),
        },
        ..NodeIdentityRequest::default()
    }
}

fn verifier(store: Arc<MemoryStore>, accept: NodeTokens, aud: &str) -> Verifier {
    Verifier::builder(keyring(), store, Audience::new(aud).unwrap())
        .node_tokens(accept)
        .key_wait(Duration::ZERO)
        .cache(16)
        .build()
}

/// A token with exactly `payload`, signed by the test key (EdDSA, HKDF v1),
/// for claims the issuer would never write.
fn signed(payload: &str) -> String {
    let seed = KeyDerivation::HkdfV1.seed(
        &KeyMaterial::from_slice(&MATERIAL).unwrap(),
        &KeyId::new("k1").unwrap(),
    );
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA","kid":"k1","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(payload)
    );
    use ed25519_dalek::Signer;
    let sig = key.sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.to_bytes()))
}

#[test]
fn node_tokens_carry_nomads_claims() {
    let s = Issuer::new(keyring()).issue_node(&request(), NOW).unwrap();
    let c = &s.claims;
    let node = c.node.as_ref().unwrap();
    assert_eq!(
        (
            node.node_id.as_str(),
            node.node_pool.as_str(),
            node.datacenter.as_str()
        ),
        (NODE, "default", "dc1")
    );
    assert_eq!(c.subject, format!("node:global:default:{NODE}:default"));
    assert_eq!(c.audience, ["nomadproject.io"]);
    assert_eq!(
        (c.issued_at, c.not_before, c.expires_at),
        (Some(NOW), Some(NOW), Some(NOW + 86_400))
    );
    assert!(c.allocation_id.is_empty() && c.task.is_none());
    let json = c.to_json();
    assert!(
        json.starts_with(&format!(
            r#"{{"nomad_node_id":"{NODE}","nomad_node_pool":"default","nomad_node_datacenter":"dc1","sub":"#
        )),
        "{json}"
    );
    assert!(!json.contains("nomad_node_class") && !json.contains("nomad_allocation_id"));
    // A class, audiences and a TTL of its own.
    let mut r = request();
    r.node.node_class = "gpu".into();
    r.audience = vec!["consul.io".into()];
    r.ttl = GoDuration::from_secs(3600);
    let s = Issuer::new(keyring()).issue_node(&r, NOW).unwrap();
    assert!(s.claims.to_json().contains(r#""nomad_node_class":"gpu""#));
    assert_eq!(s.claims.expires_at, Some(NOW + 3600));
    assert_eq!(s.claims.audience, ["consul.io"]);
    // A request without what sub needs is refused, every field named.
    let e = Issuer::new(keyring())
        .issue_node(&NodeIdentityRequest::default(), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    for f in ["Region", "Node.ID", "Node.Datacenter", "Node.NodePool"] {
        assert!(e.to_string().contains(f), "{f}: {e}");
    }
}

#[test]
fn node_tokens_pass_only_when_accepted_and_the_node_is_live() {
    let store = Arc::new(MemoryStore::new());
    let token = Issuer::new(keyring())
        .issue_node(&request(), NOW)
        .unwrap()
        .token;
    // Refused by default, with its own code.
    let e = verifier(store.clone(), NodeTokens::Refuse, "nomadproject.io")
        .verify(&token, NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::TokenKindRefused, "{e}");
    assert!(e.to_string().contains("node_tokens"), "{e}");
    let v = verifier(store.clone(), NodeTokens::Accept, "nomadproject.io");
    // Unknown node, then live, then down (the cached entry is re-checked).
    assert_eq!(
        v.verify(&token, NOW).unwrap_err().code(),
        ResultCode::NodeNotFound
    );
    store.set_node_state(NODE, NodeState::Live);
    let ok = v.verify(&token, NOW).unwrap();
    assert_eq!(ok.claims.node.unwrap().node_id, NODE);
    assert!(v.verify(&token, NOW).is_ok());
    assert_eq!(v.stats().cache_hits, 1);
    store.set_node_state(NODE, NodeState::Down);
    assert_eq!(
        v.verify(&token, NOW).unwrap_err().code(),
        ResultCode::NodeDown
    );
    // Nomad's statuses: down and anything undefined are down.
    for (status, state) in [
        ("ready", NodeState::Live),
        ("initializing", NodeState::Live),
        ("disconnected", NodeState::Live),
        ("down", NodeState::Down),
        ("Ready", NodeState::Down),
        ("", NodeState::Down),
    ] {
        assert_eq!(NodeState::of_status(status), state, "{status:?}");
    }
    let mut n = request().node;
    n.status = "ready".into();
    store.upsert_node(&n);
    assert!(v.verify(&token, NOW).is_ok());
}

#[test]
fn node_lookups_read_stale_then_consistent_and_fail_closed() {
    let store = Arc::new(MemoryStore::new());
    let token = Issuer::new(keyring())
        .issue_node(&request(), NOW)
        .unwrap()
        .token;
    let v = verifier(store.clone(), NodeTokens::Only, "nomadproject.io");
    // A replica that has not seen the node yet: the consistent read finds it.
    store.set_lagging(true);
    store.set_node_state(NODE, NodeState::Live);
    assert_eq!(
        store.node_state(NODE, Consistency::Stale).unwrap(),
        NodeState::Missing
    );
    assert!(v.verify(&token, NOW).is_ok());
    assert_eq!(v.stats().consistent_fallbacks, 1);
    assert_eq!(store.reads(Consistency::Consistent), 1);
    store.set_lagging(false);
    // A store error fails closed.
    store.set_unavailable(Some("replica down"));
    let e = verifier(store.clone(), NodeTokens::Only, "nomadproject.io")
        .verify(&token, NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable);
    assert!(e.to_string().contains("checking node"), "{e}");
    // A store that knows allocations only fails closed for node tokens.
    struct AllocsOnly;
    impl StateStore for AllocsOnly {
        fn allocation_state(&self, _: &str, _: Consistency) -> Result<AllocState, StoreError> {
            Ok(AllocState::Live)
        }
    }
    let v = Verifier::builder(
        keyring(),
        Arc::new(AllocsOnly),
        Audience::new("nomadproject.io").unwrap(),
    )
    .node_tokens(NodeTokens::Accept)
    .build();
    let e = v.verify(&token, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable);
    assert!(e.to_string().contains("node lookups"), "{e}");
}

/// The claims decide a token's kind, both ways: an allocation token never
/// passes as a node token, a node token never as an allocation token, and a
/// token with both kinds of claims is neither.
#[test]
fn allocation_and_node_tokens_are_never_confused() {
    let store = Arc::new(MemoryStore::new());
    store.set_node_state(NODE, NodeState::Live);
    store.set_state(common::ALLOC_ID, AllocState::Live);
    // Same node and allocation live, same audience on both tokens.
    let mut alloc_req = common::issue_request_task();
    alloc_req.identity.audience = vec!["nomadproject.io".into()];
    let alloc = Issuer::new(keyring()).issue(&alloc_req, NOW).unwrap().token;
    let node = Issuer::new(keyring())
        .issue_node(&request(), NOW)
        .unwrap()
        .token;
    let only_nodes = verifier(store.clone(), NodeTokens::Only, "nomadproject.io");
    let only_allocs = verifier(store.clone(), NodeTokens::Refuse, "nomadproject.io");
    let both = verifier(store.clone(), NodeTokens::Accept, "nomadproject.io");
    assert_eq!(
        only_nodes.verify(&alloc, NOW).unwrap_err().code(),
        ResultCode::TokenKindRefused
    );
    assert_eq!(
        only_allocs.verify(&node, NOW).unwrap_err().code(),
        ResultCode::TokenKindRefused
    );
    assert!(only_nodes.verify(&node, NOW).is_ok());
    assert!(only_allocs.verify(&alloc, NOW).is_ok());
    assert!(both.verify(&node, NOW).unwrap().claims.node.is_some());
    assert!(both.verify(&alloc, NOW).unwrap().claims.node.is_none());
    // Both kinds of claims, or a node claim without the node ID: malformed.
    let common = format!(
        r#""sub":"x","aud":"nomadproject.io","iat":{NOW},"nbf":{NOW},"exp":{},"jti":"j""#,
        NOW + 60
    );
    for payload in [
        format!(
            r#"{{"nomad_allocation_id":"{}","nomad_node_id":"{NODE}",{common}}}"#,
            common::ALLOC_ID
        ),
        format!(r#"{{"nomad_node_id":"{NODE}","nomad_task":"server",{common}}}"#),
        format!(r#"{{"nomad_node_pool":"default",{common}}}"#),
        format!(r#"{{"nomad_node_id":"",{common}}}"#),
    ] {
        let token = signed(&payload);
        for v in [&only_nodes, &both, &only_allocs] {
            let e = v.verify(&token, NOW).unwrap_err();
            assert_eq!(e.code(), ResultCode::MalformedToken, "{payload}: {e}");
        }
    }
    // Every path decides the same: batch and explain, without a cache.
    let plain = Verifier::builder(
        keyring(),
        store.clone(),
        Audience::new("nomadproject.io").unwrap(),
    )
    .key_wait(Duration::ZERO)
    .build();
    let batch = plain.verify_batch(&[&node, &alloc], NOW);
    assert_eq!(
        batch[0].as_ref().unwrap_err().code(),
        ResultCode::TokenKindRefused
    );
    assert!(batch[1].is_ok());
    let x = plain.explain(&node, NOW);
    assert_eq!(x.result.unwrap_err().code(), ResultCode::TokenKindRefused);
    // A node token without exp is malformed.
    let no_exp = signed(&format!(
        r#"{{"nomad_node_id":"{NODE}","sub":"x","aud":"nomadproject.io","iat":{NOW},"jti":"j"}}"#
    ));
    assert_eq!(
        both.verify(&no_exp, NOW).unwrap_err().code(),
        ResultCode::MalformedToken
    );
    // The hand-signed path is sound: the node token's own claims pass.
    let good = signed(&format!(r#"{{"nomad_node_id":"{NODE}",{common}}}"#));
    assert!(only_nodes.verify(&good, NOW).is_ok());
    // explain says which it was.
    let x = both.explain(&good, NOW);
    assert!(x.result.is_ok());
    assert!(
        x.steps.iter().any(|s| format!("{s:?}").contains("node")),
        "{:?}",
        x.steps
    );
}

struct FixedJitter(f64);
impl Jitter for FixedJitter {
    fn draw(&self) -> f64 {
        self.0
    }
}

/// A signer that can be made to fail.
struct Flaky {
    issuer: Issuer,
    fail: AtomicBool,
}
impl NodeSigner for Flaky {
    fn sign_node(&self, r: &NodeIdentityRequest, now: i64) -> Result<SignedIdentity, Error> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::StoreUnavailable {
                alloc_id: String::new(),
                cause: "servers unreachable".into(),
            });
        }
        self.issuer.issue_node(r, now)
    }
}

/// Captures warn-level log lines.
struct Capture(Mutex<Vec<String>>);
impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}
static LOGS: Capture = Capture(Mutex::new(Vec::new()));

#[test]
fn the_manager_renews_at_two_thirds_backs_off_and_warns_before_the_token_lapses() {
    let _ = log::set_logger(&LOGS).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let flaky = Arc::new(Flaky {
        issuer: Issuer::new(keyring()),
        fail: AtomicBool::new(false),
    });
    let db: Arc<dyn IdentityDb> = Arc::new(MemoryIdentityDb::default());
    let m = NodeIdentityManager::new(request(), flaky.clone(), db.clone(), keyring())
        .with_jitter(Arc::new(FixedJitter(0.0)));
    let t0 = NOW * 1000;
    let first = m.start(t0).unwrap();
    let day = 86_400_000;
    // Exactly two thirds of 24 h with no jitter; nothing before.
    assert_eq!(m.next_due_ms(), Some(t0 + day * 2 / 3));
    m.tick(t0 + day * 2 / 3 - 1).unwrap();
    assert_eq!(m.stats().signed, 1);
    // Failing renewals keep the current token, back off 1, 2, 4 ... 60 s.
    flaky.fail.store(true, Ordering::SeqCst);
    let mut now = t0 + day * 2 / 3;
    let mut delays = Vec::new();
    for _ in 0..8 {
        assert!(m.tick(now).is_err());
        let next = m.next_due_ms().unwrap();
        delays.push((next - now) / 1000);
        assert_eq!(
            m.current(now).unwrap().jwt_id,
            first.jwt_id,
            "the current token is kept"
        );
        now = next;
    }
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
    let st = m.stats();
    assert_eq!((st.failures, st.consecutive_failures), (8, 8));
    assert!(!st.expires_before_next_attempt);
    assert!(
        st.last_error
            .as_deref()
            .unwrap()
            .contains("servers unreachable")
    );
    // Just before expiry: the next attempt would come too late, and it says so.
    let exp_ms = first.expires_at.unwrap() * 1000;
    assert!(m.tick(exp_ms - 30_000).is_err());
    assert!(m.stats().expires_before_next_attempt);
    let logs = LOGS.0.lock().unwrap().clone();
    assert!(
        logs.iter()
            .any(|l| l.contains("BEFORE the next attempt") && l.contains(NODE)),
        "{logs:?}"
    );
    // After expiry there is no current token, and the log says so.
    assert!(m.current(exp_ms).is_none());
    let retry = m.next_due_ms().unwrap();
    assert!(retry > exp_ms, "the retry was due after the expiry");
    assert!(m.tick(retry).is_err());
    assert!(
        LOGS.0
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("HAS EXPIRED"))
    );
    // Recovery: a success resets the risk.
    flaky.fail.store(false, Ordering::SeqCst);
    let next = m.next_due_ms().unwrap();
    m.tick(next).unwrap();
    let st = m.stats();
    assert_eq!((st.signed, st.consecutive_failures), (2, 0));
    assert!(!st.expires_before_next_attempt);
    assert!(m.current(next).is_some());
}

#[test]
fn a_restarted_manager_reuses_a_valid_saved_token_and_re_signs_otherwise() {
    let db: Arc<dyn IdentityDb> = Arc::new(MemoryIdentityDb::default());
    let issuer = Arc::new(Issuer::new(keyring()));
    let manager = |r: NodeIdentityRequest| {
        NodeIdentityManager::new(r, issuer.clone(), db.clone(), keyring())
            .with_jitter(Arc::new(FixedJitter(0.5)))
    };
    let t0 = NOW * 1000;
    let first = manager(request()).start(t0).unwrap();
    // Reused an hour later.
    let m = manager(request());
    assert!(m.restore(t0 + 3_600_000).unwrap());
    assert_eq!(m.current(t0 + 3_600_000).unwrap().jwt_id, first.jwt_id);
    assert_eq!(m.stats().signed, 0);
    // Due for renewal: taken back, and renewed at once.
    let m = manager(request());
    assert!(m.restore(t0 + 20 * 3_600_000).unwrap());
    assert_eq!(m.stats().signed, 1);
    let second = m.current(t0 + 20 * 3_600_000).unwrap();
    assert_ne!(second.jwt_id, first.jwt_id);
    // Expired: re-signed.
    let m = manager(request());
    assert!(
        m.restore(t0 + 21 * 3_600_000).unwrap(),
        "the renewed one is current"
    );
    let m2 = manager(request());
    assert!(!m2.restore(t0 + 60 * 3_600_000).unwrap());
    // The node moved to another pool: its saved token is not reused.
    let mut moved = request();
    moved.node.node_pool = "gpu".into();
    let m = manager(moved);
    assert!(!m.restore(t0 + 20 * 3_600_000 + 1_000).unwrap());
    // A key that is gone: the saved token (this node's, current) no longer
    // verifies, re-signed with the new one.
    let m = manager(request());
    let t1 = t0 + 21 * 3_600_000;
    m.start(t1).unwrap();
    assert!(
        manager(request()).restore(t1 + 1_000).unwrap(),
        "reusable as is"
    );
    let other = Keyring::new();
    other.rotate(NOW).unwrap();
    let m = NodeIdentityManager::new(
        request(),
        Arc::new(Issuer::new(other.clone())),
        db.clone(),
        other,
    );
    assert!(!m.restore(t1 + 2_000).unwrap());
}

/// A restart while the servers are unreachable keeps a saved token that is
/// due but still valid; a signer that hands back the current token (a
/// server that declined to renew) is a failure, not a renewal; a stalled
/// tick shows in health(); any node ID is a safe file name.
#[test]
fn the_manager_keeps_good_tokens_refuses_non_renewals_and_shows_stalls() {
    let dir = tempfile::tempdir().unwrap();
    let db: Arc<dyn IdentityDb> = Arc::new(workload_identity::manager::FileIdentityDb::new(
        dir.path().to_path_buf(),
    ));
    let flaky = Arc::new(Flaky {
        issuer: Issuer::new(keyring()),
        fail: AtomicBool::new(false),
    });
    let mut r = request();
    r.node.id = "../../weird id/ünïcode".into();
    let manager = || {
        NodeIdentityManager::new(r.clone(), flaky.clone(), db.clone(), keyring())
            .with_jitter(Arc::new(FixedJitter(0.0)))
    };
    let t0 = NOW * 1000;
    let first = manager().start(t0).unwrap();
    // Due (past two thirds), servers down: the saved token is kept.
    flaky.fail.store(true, Ordering::SeqCst);
    let late = t0 + 20 * 3_600_000;
    let m = manager();
    assert!(m.restore(late).unwrap());
    assert_eq!(m.current(late).unwrap().jwt_id, first.jwt_id);
    assert_eq!(m.stats().consecutive_failures, 1);
    let h = m.health(late);
    assert!(h.at_risk && h.expires_in_ms == Some(4 * 3_600_000), "{h:?}");
    // A signer that returns the same token every time (a server that
    // declined to renew): the first is taken, the repeat is a failure.
    struct Same(SignedIdentity);
    impl NodeSigner for Same {
        fn sign_node(&self, _: &NodeIdentityRequest, _: i64) -> Result<SignedIdentity, Error> {
            Ok(self.0.clone())
        }
    }
    let once = Issuer::new(keyring()).issue_node(&request(), NOW).unwrap();
    let same = NodeIdentityManager::new(
        request(),
        Arc::new(Same(once)),
        Arc::new(MemoryIdentityDb::default()),
        keyring(),
    )
    .with_jitter(Arc::new(FixedJitter(0.0)));
    same.start(t0).unwrap();
    let due = same.next_due_ms().unwrap();
    assert!(same.tick(due).is_err());
    let st = same.stats();
    assert_eq!((st.signed, st.consecutive_failures), (1, 1));
    assert!(
        st.last_error.unwrap().contains("already due"),
        "refused as no renewal"
    );
    // Nothing calls tick: health says the renewal is overdue.
    flaky.fail.store(false, Ordering::SeqCst);
    let m = manager();
    assert!(!m.restore(t0 + 23 * 3_600_000).unwrap() || m.stats().signed == 1);
    let due = m.next_due_ms().unwrap();
    let h = m.health(due + 10 * 60_000);
    assert_eq!(h.renewal_overdue_ms, 10 * 60_000);
    assert!(h.at_risk);
    assert!(!m.health(due - 1).at_risk);
}

/// Threads ticking at the due time together renew once.
#[test]
fn concurrent_ticks_renew_once() {
    let m = Arc::new(
        NodeIdentityManager::new(
            request(),
            Arc::new(Issuer::new(keyring())),
            Arc::new(MemoryIdentityDb::default()),
            keyring(),
        )
        .with_jitter(Arc::new(FixedJitter(0.0))),
    );
    m.start(NOW * 1000).unwrap();
    let due = m.next_due_ms().unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || m.tick(due))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let st = m.stats();
    assert_eq!((st.signed, st.failures), (2, 0));
}

/// Times at and next to both ends of `i64`: `health` and `tick` never
/// overflow (these tests run in debug builds, where an overflow panics), and
/// `health` saturates instead of wrapping.
#[test]
fn extreme_times_never_overflow_health_or_tick() {
    const EDGES: [i64; 6] = [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX];
    let make = || {
        NodeIdentityManager::new(
            request(),
            Arc::new(Issuer::new(keyring())),
            Arc::new(MemoryIdentityDb::default()),
            keyring(),
        )
        .with_jitter(Arc::new(FixedJitter(0.0)))
    };

    // A token of today, looked at from either end of time.
    let m = make();
    let first = m.start(NOW * 1000).unwrap();
    let exp_ms = first.expires_at.unwrap() * 1000;
    let h = m.health(i64::MIN);
    assert_eq!(h.expires_in_ms, Some(i64::MAX), "saturated, not wrapped");
    assert_eq!(h.renewal_overdue_ms, 0);
    let h = m.health(i64::MAX);
    assert_eq!(h.expires_in_ms, Some(exp_ms - i64::MAX));
    assert!(h.renewal_overdue_ms > 0 && h.at_risk);
    for now in EDGES {
        let _ = m.health(now);
        let _ = m.tick(now);
        let _ = m.health(now);
    }

    // A token signed at the start of time, looked at from its end: the
    // distances do not fit in an i64.
    let m = make();
    let early = m.start(i64::MIN).unwrap();
    let h = m.health(i64::MAX);
    assert_eq!(h.expires_in_ms, Some(i64::MIN), "saturated, not wrapped");
    assert_eq!(h.renewal_overdue_ms, i64::MAX);
    assert!(h.at_risk);
    assert!(
        m.tick(i64::MAX).is_err(),
        "a token at the end of time expires"
    );
    assert_eq!(m.current(i64::MIN + 1).unwrap().jwt_id, early.jwt_id);
    for now in EDGES {
        let _ = m.health(now);
        let _ = m.tick(now);
    }

    // A failed renewal far before the current token: the warning's
    // distance to its expiry does not fit either.
    let m = make();
    m.start(NOW * 1000).unwrap();
    assert!(
        m.start(i64::MIN).is_err(),
        "a token older than the current one"
    );
    assert_eq!(m.stats().consecutive_failures, 1);
}

/// A node signer that calls back into its own manager, recording answers.
struct CallsBackNode {
    issuer: Issuer,
    manager: std::sync::OnceLock<Arc<NodeIdentityManager>>,
    answers: Mutex<Vec<String>>,
}

impl NodeSigner for CallsBackNode {
    fn sign_node(
        &self,
        request: &NodeIdentityRequest,
        now: i64,
    ) -> Result<workload_identity::SignedIdentity, workload_identity::Error> {
        if let Some(m) = self.manager.get() {
            let name = |r: Result<(), workload_identity::Error>| match r {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("{:?}", e.code()),
            };
            let mut answers = self.answers.lock().unwrap();
            answers.push(format!("start {}", name(m.start(now * 1000).map(|_| ()))));
            answers.push(format!("tick {}", name(m.tick(now * 1000))));
            answers.push(format!("current {}", m.current(now * 1000).is_some()));
        }
        self.issuer.issue_node(request, now)
    }
}

/// Security round 4 (issue 51, item 7), for the node manager: a signer
/// calling back into it gets `InvalidArgument` from `start` and `tick`
/// (never a hang) and an answer from `current`. On a thread of its own, so
/// that a regression fails here instead of hanging the suite.
#[test]
fn a_node_signer_calling_back_into_its_manager_never_hangs() {
    let signer = Arc::new(CallsBackNode {
        issuer: Issuer::new(keyring()),
        manager: std::sync::OnceLock::new(),
        answers: Mutex::new(Vec::new()),
    });
    let db: Arc<dyn IdentityDb> = Arc::new(MemoryIdentityDb::default());
    let m = Arc::new(NodeIdentityManager::new(
        request(),
        signer.clone(),
        db,
        keyring(),
    ));
    signer.manager.set(m.clone()).ok().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let running = m.clone();
    std::thread::spawn(move || tx.send(running.start(NOW * 1000).map(|_| ())).unwrap());
    rx.recv_timeout(Duration::from_secs(120))
        .expect("a node signer calling back deadlocked")
        .unwrap();
    assert_eq!(
        *signer.answers.lock().unwrap(),
        [
            "start InvalidArgument",
            "tick InvalidArgument",
            "current false"
        ]
    );
    assert!(m.current(NOW * 1000).is_some());
}
