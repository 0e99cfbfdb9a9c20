//! Regression tests for the defects an adversarial review found (issue 11), one
//! or more per defect, each written to fail on the code before its fix. The
//! zeroization check needs its own global allocator and lives in
//! `tests/zeroize_freed.rs`; the keystore's verify-only-active check is a unit
//! test beside the keystore decoder (it needs to write a crafted body).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use workload_identity::manager::*;
use workload_identity::model::IssueRequest;
use workload_identity::{
    Audience, Error, Issuer, KeyState, Keyring, MemoryStore, ResultCode, SignedIdentity, Verifier,
};

use common::identity::{AUD, KID, NOW, payload_with, root_key, sign_json_with, world};

fn header_with_kid(kid: &str) -> String {
    serde_json::json!({"alg": "EdDSA", "kid": kid, "typ": "JWT"}).to_string()
}

fn verifier_with_wait(keyring: &Keyring, wait: Duration) -> Verifier {
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    Verifier::builder(keyring.clone(), store, Audience::new(AUD).unwrap())
        .key_wait(wait)
        .build()
}

// 1. Batch verification shares one deadline and waits at most once per kid;
//    a kid that can never be a key ID is refused at once.

#[test]
fn a_batch_waits_once_per_distinct_unknown_kid_within_one_deadline() {
    let w = world();
    let wait = Duration::from_secs(1);
    let v = verifier_with_wait(&w.keyring, wait);
    let payload = payload_with(serde_json::json!({}));
    let a = sign_json_with(&w.keyring, &header_with_kid("not-yet-a"), &payload);
    let b = sign_json_with(&w.keyring, &header_with_kid("not-yet-b"), &payload);
    let tokens: Vec<&str> = (0..10)
        .map(|i| if i % 2 == 0 { &*a } else { &*b })
        .collect();
    let started = Instant::now();
    let results = v.verify_batch(&tokens, NOW);
    let took = started.elapsed();
    for r in &results {
        assert_eq!(r.as_ref().unwrap_err().code(), ResultCode::UnknownKey);
    }
    assert!(
        v.stats().key_waits <= 2,
        "one wait per distinct kid at most: {:?}",
        v.stats()
    );
    // The waits share one deadline: the whole call is bounded by one key_wait
    // (ten waits would take 10 s; the bound is generous for a loaded machine).
    assert!(took < Duration::from_secs(5), "the batch took {took:?}");
}

#[test]
fn a_kid_that_can_never_be_a_key_id_is_refused_without_waiting() {
    let w = world();
    // A wait long enough that any waiting would be plain.
    let v = verifier_with_wait(&w.keyring, Duration::from_secs(30));
    let payload = payload_with(serde_json::json!({}));
    let long = "k".repeat(129);
    let bad = ["", "bad kid", "a..b", "k\u{e9}", long.as_str(), "a/b"];
    let tokens: Vec<String> = bad
        .iter()
        .map(|kid| sign_json_with(&w.keyring, &header_with_kid(kid), &payload))
        .collect();
    let started = Instant::now();
    for (kid, t) in bad.iter().zip(&tokens) {
        let e = v.verify(t, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::UnknownKey, "kid {kid:?}: {e}");
    }
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    for r in v.verify_batch(&refs, NOW) {
        assert_eq!(r.unwrap_err().code(), ResultCode::UnknownKey);
    }
    assert_eq!(v.stats().key_waits, 0, "{:?}", v.stats());
    assert!(started.elapsed() < Duration::from_secs(10));
}

// 2. The cache is bound to the key, not to the kid string.

#[test]
fn a_cached_token_is_not_honoured_after_its_kid_is_replaced_with_other_material() {
    let w = world();
    let cached = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new(AUD).unwrap(),
    )
    .cache(16)
    .build();
    let token = w.token();
    cached.verify(&token, NOW).unwrap();
    cached.verify(&token, NOW).unwrap();
    assert_eq!(cached.stats().cache_hits, 1);

    // Replace key-1 with different material under the same ID.
    w.keyring.rotate(NOW).unwrap();
    w.keyring.remove(KID).unwrap();
    w.keyring
        .insert(root_key(KID, 2, KeyState::Inactive))
        .unwrap();

    let uncached = w.verifier.verify(&token, NOW).unwrap_err();
    assert_eq!(uncached.code(), ResultCode::BadSignature, "{uncached}");
    let e = cached.verify(&token, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::BadSignature, "{e}");
    // And it is not a hit any more.
    assert_eq!(cached.stats().cache_hits, 1);
}

// 3. Restore and signing check the token's own claims against the request.

const T0: i64 = NOW * 1000;

fn requests_for(alloc_id: &str) -> Vec<IssueRequest> {
    let mut task = common::issue_request_task();
    task.allocation.id = alloc_id.into();
    let mut svc = common::issue_request_service();
    svc.region = "global".into();
    svc.allocation.id = alloc_id.into();
    vec![task, svc]
}

/// Counts token-exchange calls and the tokens handed over.
#[derive(Default)]
struct Spy {
    seen: std::sync::Mutex<Vec<String>>,
}

struct SpyExchange(Arc<Spy>, IdentityId);

impl TokenExchange for SpyExchange {
    fn name(&self) -> &str {
        "spy"
    }
    fn identity(&self) -> &IdentityId {
        &self.1
    }
    fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError> {
        self.0.seen.lock().unwrap().push(token.token.clone());
        Ok(format!("secret-{}", token.jwt_id))
    }
    fn deliver(&self, _: &str, _: EventKind) {}
}

fn manager_for(
    keyring: &Keyring,
    db: Arc<dyn IdentityDb>,
    requests: Vec<IssueRequest>,
    spy: &Arc<Spy>,
) -> IdentityManager {
    IdentityManager::builder(
        requests,
        Arc::new(Issuer::new(keyring.clone())),
        db,
        keyring.clone(),
    )
    .exchange(Arc::new(SpyExchange(
        spy.clone(),
        IdentityId::new("server", "vault_default"),
    )))
    .build()
    .unwrap()
}

fn alloc_of(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    v["nomad_allocation_id"].as_str().unwrap().to_string()
}

#[test]
fn restore_never_reuses_the_tokens_of_another_allocation() {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let db = Arc::new(MemoryIdentityDb::default());
    let a = "aaaaaaaa-0000-4000-8000-000000000001";
    let b = "bbbbbbbb-0000-4000-8000-000000000002";
    let spy = Arc::new(Spy::default());
    manager_for(&keyring, db.clone(), requests_for(a), &spy)
        .start(T0)
        .unwrap();
    // A's state file copied to B.
    let saved = db.load(a).unwrap().unwrap();
    db.store(b, &saved).unwrap();

    let spy_b = Arc::new(Spy::default());
    let m = manager_for(&keyring, db.clone(), requests_for(b), &spy_b);
    let report = m.restore(T0 + 1000).unwrap();
    assert!(!report.reused, "{report:?}");
    assert!(report.reason.contains("allocation"), "{report:?}");
    let t = m
        .current(&IdentityId::new("server", "vault_default"), T0 + 1000)
        .unwrap();
    assert_eq!(alloc_of(&t.token), b);
    for handed in spy_b.seen.lock().unwrap().iter() {
        assert_eq!(alloc_of(handed), b, "an exchange was given A's token");
    }
}

#[test]
fn restore_never_reuses_a_token_saved_under_another_identity_or_audience() {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let alloc = common::ALLOC_ID;
    let spy = Arc::new(Spy::default());

    // The two identities' tokens swapped in the saved record.
    let db = Arc::new(MemoryIdentityDb::default());
    manager_for(&keyring, db.clone(), requests_for(alloc), &spy)
        .start(T0)
        .unwrap();
    let mut saved = db.load(alloc).unwrap().unwrap();
    let (first, second) = saved.identities.split_at_mut(1);
    std::mem::swap(&mut first[0].token, &mut second[0].token);
    std::mem::swap(&mut first[0].jwt_id, &mut second[0].jwt_id);
    std::mem::swap(&mut first[0].issued_at, &mut second[0].issued_at);
    std::mem::swap(&mut first[0].expires_at, &mut second[0].expires_at);
    std::mem::swap(&mut first[0].kid, &mut second[0].kid);
    db.store(alloc, &saved).unwrap();
    let m = manager_for(&keyring, db.clone(), requests_for(alloc), &spy);
    let r = m.restore(T0 + 1000).unwrap();
    assert!(!r.reused, "{r:?}");

    // The request's audience changed since the token was signed.
    let db = Arc::new(MemoryIdentityDb::default());
    manager_for(&keyring, db.clone(), requests_for(alloc), &spy)
        .start(T0)
        .unwrap();
    let mut changed = requests_for(alloc);
    changed[0].identity.audience = vec!["aws.example".into()];
    let m = manager_for(&keyring, db.clone(), changed, &spy);
    let r = m.restore(T0 + 1000).unwrap();
    assert!(!r.reused && r.reason.contains("aud"), "{r:?}");
}

/// A signer whose reported claims are right but whose token is another's.
struct LyingSigner {
    issuer: Issuer,
    other: Vec<IssueRequest>,
}

impl IdentitySigner for LyingSigner {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        let honest = self.issuer.sign(requests, now)?;
        let foreign = self.issuer.sign(&self.other, now)?;
        Ok(honest
            .into_iter()
            .zip(foreign)
            .map(|(mut h, f)| {
                h.token = f.token;
                h
            })
            .collect())
    }
}

#[test]
fn signing_checks_the_token_payload_not_only_the_reported_claims() {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let signer = LyingSigner {
        issuer: Issuer::new(keyring.clone()),
        other: requests_for("cccccccc-0000-4000-8000-000000000003"),
    };
    let m = IdentityManager::builder(
        requests_for(common::ALLOC_ID),
        Arc::new(signer),
        Arc::new(MemoryIdentityDb::default()),
        keyring,
    )
    .build()
    .unwrap();
    let e = m.start(T0).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(
        m.current(&IdentityId::new("server", "vault_default"), T0)
            .is_none()
    );
}

// 4 is a unit test in src/keyring/keystore.rs.

// 5. An over-long kid is never truncated into a real key ID.

#[test]
fn an_over_long_kid_is_not_truncated_into_a_key_id() {
    let id = "k".repeat(128);
    let keyring = Keyring::from_keys([root_key(&id, 7, KeyState::Active)]).unwrap();
    let v = verifier_with_wait(&keyring, Duration::from_millis(10));
    let payload = payload_with(serde_json::json!({}));
    // The honest token verifies...
    let good = sign_json_with(&keyring, &header_with_kid(&id), &payload);
    v.verify(&good, NOW).unwrap();
    // ...one whose kid only starts with the key ID does not, though the
    // signature (over its own header) is by that key.
    for kid in [format!("{id}\u{e9}"), format!("{id}k"), format!("{id}.x")] {
        let t = sign_json_with(&keyring, &header_with_kid(&kid), &payload);
        let e = v.verify(&t, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
        let e = v.verify_batch(&[&t], NOW).pop().unwrap().unwrap_err();
        assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
    }
}

// 6. Caller-given token caps are clamped.

#[test]
fn a_caller_given_token_cap_is_clamped_to_one_mebibyte() {
    let w = world();
    let v = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new(AUD).unwrap(),
    )
    .max_token_bytes(usize::MAX)
    .build();
    assert_eq!(v.max_token_bytes(), 1 << 20);
    let huge = "a".repeat((1 << 20) + 1);
    let e = v.verify(&huge, NOW).unwrap_err();
    assert!(e.to_string().contains("1048576-byte limit"), "{e}");
}

// 8. Saved times are checked against the token and never overflow.

#[test]
fn a_restored_record_whose_times_differ_from_its_token_is_not_trusted() {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let alloc = common::ALLOC_ID;
    let spy = Arc::new(Spy::default());
    for (iat, exp) in [
        (Some(i64::MIN), None),
        (Some(i64::MAX), None),
        (Some(i64::MIN), Some(Some(i64::MAX))),
        (Some(NOW + 1_000_000), None),
        (None, Some(Some(i64::MAX))),
        (None, Some(None)),
    ] {
        let db = Arc::new(MemoryIdentityDb::default());
        manager_for(&keyring, db.clone(), requests_for(alloc), &spy)
            .start(T0)
            .unwrap();
        let mut saved = db.load(alloc).unwrap().unwrap();
        for t in &mut saved.identities {
            if let Some(iat) = iat {
                t.issued_at = iat;
            }
            if let Some(exp) = exp {
                t.expires_at = exp;
            }
        }
        db.store(alloc, &saved).unwrap();
        let m = manager_for(&keyring, db.clone(), requests_for(alloc), &spy);
        let r = m.restore(T0 + 1000).unwrap();
        assert!(
            !r.reused && r.reason.contains("saved record"),
            "iat {iat:?} exp {exp:?}: {r:?}"
        );
    }
}

#[test]
fn renewal_arithmetic_saturates_at_the_extremes() {
    let token = |iat: i64, exp: Option<i64>| IdentityToken {
        key: IdentityId::new("server", "vault_default"),
        token: String::new(),
        kid: KID.into(),
        jwt_id: String::new(),
        issued_at: iat,
        expires_at: exp,
        workload_key: None,
    };
    // The midpoint of any two i64 values is an i64: computed without overflow.
    assert_eq!(
        token(i64::MIN, Some(i64::MAX)).renewal_window_start(),
        Some(-1)
    );
    assert_eq!(
        token(i64::MAX, Some(i64::MIN)).renewal_window_start(),
        Some(0)
    );
    assert_eq!(
        token(i64::MAX, Some(i64::MAX)).renewal_window_start(),
        Some(i64::MAX)
    );
    assert!(!token(i64::MAX, Some(i64::MIN)).valid_at(i64::MAX));
    let mut p = RenewalPolicy::default();
    p.jitter_fraction = f64::MAX;
    p.min_wait = Duration::MAX;
    p.min_wait_jitter = Duration::MAX;
    assert_eq!(
        p.renew_at_ms([Some(i64::MAX)], i64::MIN, (1.0, 1.0)),
        Some(i64::MIN + i64::MAX)
    );
    assert_eq!(
        p.renew_at_ms([Some(i64::MIN)], i64::MAX, (1.0, 1.0)),
        Some(i64::MAX)
    );
}

// 9. Debug never prints a bearer token.

#[test]
fn debug_output_never_contains_a_token() {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let issuer = Issuer::new(keyring.clone());
    let signed = issuer.issue(&common::issue_request_task(), NOW).unwrap();
    let signature = signed.token.rsplit('.').next().unwrap().to_string();
    let db = Arc::new(MemoryIdentityDb::default());
    let spy = Arc::new(Spy::default());
    let m = manager_for(&keyring, db.clone(), requests_for(common::ALLOC_ID), &spy);
    let watcher = m
        .watch(&IdentityId::new("server", "vault_default"))
        .unwrap();
    m.start(T0).unwrap();
    let update = watcher.try_recv().unwrap();
    let state = db.load(common::ALLOC_ID).unwrap().unwrap();
    let update_sig = update.token.token.rsplit('.').next().unwrap().to_string();
    for (what, text, sig) in [
        ("SignedIdentity", format!("{signed:?}"), &signature),
        ("IdentityToken", format!("{:?}", update.token), &update_sig),
        ("IdentityUpdate", format!("{update:?}"), &update_sig),
        ("PersistedState", format!("{state:?}"), &update_sig),
        ("MemoryIdentityDb", format!("{db:?}"), &update_sig),
    ] {
        assert!(
            !text.contains(sig.as_str()),
            "{what} prints the token: {text}"
        );
        assert!(text.contains("redacted"), "{what}: {text}");
    }
    // The secrets the exchange derived are redacted too.
    assert!(!format!("{state:?}").contains("secret-"));
}

// Also: keystore file modes, and durations that would overflow `Instant`.

#[cfg(unix)]
#[test]
fn a_keystore_readable_by_group_or_others_is_refused_unless_opted_out() {
    use std::os::unix::fs::PermissionsExt;
    use workload_identity::KeystoreLoadOptions;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    let kr = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    kr.save(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    Keyring::load(&path).unwrap();
    for bad in [0o640, 0o604, 0o644, 0o660] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bad)).unwrap();
        let e = Keyring::load(&path).unwrap_err();
        assert_eq!(e.code(), ResultCode::IoError, "{e}");
        assert!(e.to_string().contains(&format!("{bad:04o}")), "{e}");
        let opted = Keyring::load_with(
            &path,
            &KeystoreLoadOptions::default().allow_readable_by_others(true),
        )
        .unwrap();
        assert_eq!(opted.len(), 1);
    }
}

#[test]
fn durations_past_what_instant_can_hold_saturate() {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let later = keyring.clone();
    let inserter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        later
            .insert(root_key("late", 3, KeyState::Inactive))
            .unwrap();
    });
    assert!(keyring.wait_for_key("late", Duration::MAX).is_some());
    inserter.join().unwrap();

    // A verifier waiting "forever" for a key that arrives.
    let later = keyring.clone();
    let v = verifier_with_wait(&keyring, Duration::MAX);
    let payload = payload_with(serde_json::json!({}));
    let inserter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        later
            .insert(root_key("later", 4, KeyState::Inactive))
            .unwrap();
    });
    let t = sign_json_with(&keyring, &header_with_kid("later"), &payload);
    // Signed by key-1, so the key arrives and the signature fails: the point is
    // that the wait neither panics nor outlives the key's arrival.
    let e = v.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::BadSignature, "{e}");
    inserter.join().unwrap();
    // Now present: the batch path finds it without waiting.
    let e = v.verify_batch(&[&t], NOW).pop().unwrap().unwrap_err();
    assert_eq!(e.code(), ResultCode::BadSignature, "{e}");

    // Leeway at the maximum.
    let v = Verifier::builder(
        keyring.clone(),
        Arc::new(MemoryStore::new()),
        Audience::new(AUD).unwrap(),
    )
    .leeway(Duration::MAX)
    .build();
    let e = v.verify(
        &sign_json_with(&keyring, common::identity::HEADER, &payload),
        NOW,
    );
    assert_eq!(e.unwrap_err().code(), ResultCode::AllocationNotFound);
}
