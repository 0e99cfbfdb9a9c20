//! The identity manager's proof-bound identities (issue 17): a fresh workload
//! key per WIT, the key handed out beside its WIT to mint proofs, replaced on
//! renewal, saved with its WIT (mode 0600, never in Debug or logs) and
//! restored only when it is the key the WIT is bound to.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use workload_identity::manager::*;
use workload_identity::model::IssueRequest;
use workload_identity::{
    Algorithm, Audience, Error, Issuer, KeyState, Keyring, MemoryStore, ProofOptions, ProofRequest,
    ResultCode, SignedIdentity, Verifier, WorkloadKey,
};

use common::identity::{decode_segment, root_key};

const T0: i64 = 1_700_000_000_000; // ms
const TD: &str = "nomad.example.com";
const TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";
const ALGS: [Algorithm; 2] = [Algorithm::EdDsa, Algorithm::Es256];

fn secs(ms: i64) -> i64 {
    ms / 1000
}

struct World {
    keyring: Keyring,
    signer: Arc<CountingSigner>,
    verifier: Verifier,
}

/// The issuer (with a trust domain, so it signs WITs), counting calls.
struct CountingSigner {
    issuer: Issuer,
    calls: AtomicUsize,
}

impl IdentitySigner for CountingSigner {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.issuer.sign(requests, now)
    }
}

fn world() -> World {
    // A bearer key and a WIT key: WITs are signed only by the latter.
    let keyring = Keyring::from_keys([
        root_key("key-1", 1, KeyState::Active),
        root_key("wit-1", 2, KeyState::Active).with_purpose(workload_identity::KeyPurpose::Wit),
    ])
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier =
        Verifier::builder(keyring.clone(), store, Audience::new("vault.io").unwrap()).build();
    World {
        signer: Arc::new(CountingSigner {
            issuer: Issuer::new(keyring.clone()).trust_domain(TD).unwrap(),
            calls: AtomicUsize::new(0),
        }),
        keyring,
        verifier,
    }
}

/// The task's identity (audience vault.io): proof-bound when asked.
fn task() -> IdentityId {
    IdentityId::new("server", "vault_default")
}

/// The service's identity: always a bearer token here.
fn svc() -> IdentityId {
    IdentityId::new("web-api", "consul-service_web-api")
}

struct FixedJitter;
impl Jitter for FixedJitter {
    fn draw(&self) -> f64 {
        0.5
    }
}

fn builder(w: &World, db: Arc<dyn IdentityDb>) -> IdentityManagerBuilder {
    IdentityManager::builder(
        vec![
            common::issue_request_task(),
            common::issue_request_service(),
        ],
        w.signer.clone(),
        db,
        w.keyring.clone(),
    )
    .jitter(Arc::new(FixedJitter))
}

/// A manager whose task identity is proof-bound with `alg` (bearer if `None`).
fn manager(w: &World, db: Arc<dyn IdentityDb>, alg: Option<Algorithm>) -> IdentityManager {
    let b = builder(w, db);
    match alg {
        Some(alg) => b.proof_of_possession(task(), alg),
        None => b,
    }
    .build()
    .unwrap()
}

fn key_of(t: &IdentityToken) -> &WorkloadKey {
    t.workload_key.as_deref().expect("a proof-bound token")
}

/// Makes a proof with `t` and has the verifier check it with `t`'s WIT.
fn prove_and_verify(w: &World, t: &IdentityToken, now: i64) -> Result<(), Error> {
    let wpt = t.prove(TARGET, now, &ProofOptions::new())?;
    w.verifier
        .verify_proof(&t.token, &wpt, &ProofRequest::new(TARGET), now)
        .map(|ok| {
            assert_eq!(
                ok.identity.claims.confirmation.as_ref(),
                Some(key_of(t).proof_key())
            );
        })
}

#[test]
fn the_manager_hands_out_a_wit_whose_own_key_proves() {
    for alg in ALGS {
        let w = world();
        let m = manager(&w, Arc::new(MemoryIdentityDb::default()), Some(alg));
        let watcher = m.watch(&task()).unwrap();
        m.start(T0).unwrap();
        let t = m.current(&task(), T0).unwrap();
        assert!(t.is_proof_bound());
        assert_eq!(key_of(&t).algorithm(), alg);

        // A WIT whose cnf.jwk is the public half of the key beside it.
        assert_eq!(decode_segment(&t.token, 0)["typ"], "wit+jwt");
        let claims = decode_segment(&t.token, 1);
        assert_eq!(
            claims["sub"],
            "wimse://nomad.example.com/global/default/web/frontend/server/vault_default"
        );
        let jwk = &claims["cnf"]["jwk"];
        let public = key_of(&t).proof_key();
        assert_eq!(jwk["alg"], alg.name());
        assert_eq!(jwk["x"], public.x.as_str());
        assert_eq!(t.expires_at, Some(secs(T0) + 3600));

        // Its proofs verify, bound to other tokens too.
        prove_and_verify(&w, &t, secs(T0) + 5).unwrap();
        let wpt = t
            .prove(
                &format!("{TARGET}?role=web"),
                secs(T0) + 6,
                &ProofOptions::new().access_token("vault-token"),
            )
            .unwrap();
        w.verifier
            .verify_proof(
                &t.token,
                &wpt,
                &ProofRequest::new(TARGET).access_token("vault-token"),
                secs(T0) + 6,
            )
            .unwrap();
        // ...and the WIT alone is never a bearer token.
        let e = w.verifier.verify(&t.token, secs(T0) + 6).unwrap_err();
        assert_eq!(e.code(), ResultCode::ProofRequired, "{e}");

        // A watcher gets the same WIT with the same key: the workload can prove.
        let u = watcher.try_recv().unwrap();
        assert_eq!((u.kind, &u.token), (EventKind::Initial, &t));
        prove_and_verify(&w, &u.token, secs(T0) + 7).unwrap();

        // The other identity stays a bearer token, and refuses to prove.
        let bearer = m.current(&svc(), T0).unwrap();
        assert!(!bearer.is_proof_bound());
        assert_eq!(decode_segment(&bearer.token, 0)["typ"], "JWT");
        let e = bearer
            .prove(TARGET, secs(T0), &ProofOptions::new())
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument);
        assert!(e.to_string().contains("not proof-bound"), "{e}");
    }
}

#[test]
fn renewal_brings_a_new_key_and_the_old_one_cannot_prove_for_the_new_wit() {
    for alg in ALGS {
        let w = world();
        let db = Arc::new(MemoryIdentityDb::default());
        let m = manager(&w, db.clone(), Some(alg));
        m.start(T0).unwrap();
        let watcher = m.watch(&task()).unwrap();
        let old = m.current(&task(), T0).unwrap();
        watcher.try_recv().unwrap();

        let due = m.next_due_ms().unwrap();
        m.tick(due);
        let new = m.current(&task(), due).unwrap();
        assert_ne!(new.jwt_id, old.jwt_id);
        assert_ne!(
            key_of(&new).proof_key(),
            key_of(&old).proof_key(),
            "a new key for every WIT"
        );
        assert_eq!(
            decode_segment(&new.token, 1)["cnf"]["jwk"]["x"],
            key_of(&new).proof_key().x.as_str()
        );
        let now = secs(due);
        prove_and_verify(&w, &new, now).unwrap();

        // The old key's proof for the new WIT is refused.
        let stolen = key_of(&old)
            .prove(&new.token, TARGET, now, &ProofOptions::new())
            .unwrap();
        let e = w
            .verifier
            .verify_proof(&new.token, &stolen, &ProofRequest::new(TARGET), now)
            .unwrap_err();
        assert_eq!(e.code(), ResultCode::ProofInvalid, "{e}");

        // Watchers are told, with the new key; the store holds the new key.
        let u = watcher.try_recv().unwrap();
        assert_eq!((u.kind, &u.token), (EventKind::Renewed, &new));
        let saved = db.load(m.alloc_id()).unwrap().unwrap();
        let saved_task = saved.identities.iter().find(|t| t.key == task()).unwrap();
        assert_eq!(saved_task, &new);

        // The old token still proves while its WIT lives, never once it expired.
        let exp = old.expires_at.unwrap();
        assert!(old.prove(TARGET, exp - 1, &ProofOptions::new()).is_ok());
        for late in [exp, exp + 3600] {
            let e = old.prove(TARGET, late, &ProofOptions::new()).unwrap_err();
            assert_eq!(e.code(), ResultCode::Expired, "{e}");
        }

        // Every renewal: another key.
        let mut seen: HashSet<String> = [&old, &new]
            .iter()
            .map(|t| key_of(t).proof_key().x.clone())
            .collect();
        for _ in 0..5 {
            let now_ms = m.next_due_ms().unwrap();
            m.tick(now_ms);
            let t = m.current(&task(), now_ms).unwrap();
            assert!(
                seen.insert(key_of(&t).proof_key().x.clone()),
                "a reused key"
            );
            prove_and_verify(&w, &t, secs(now_ms)).unwrap();
        }
    }
}

#[test]
fn a_restart_restores_the_wit_with_its_key_from_a_0600_file() {
    for alg in ALGS {
        let w = world();
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(FileIdentityDb::new(dir.path()));
        manager(&w, db.clone(), Some(alg)).start(T0).unwrap();
        let before = db.load(common::ALLOC_ID).unwrap().unwrap();
        let before = before.identities.iter().find(|t| t.key == task()).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let path = db.path(common::ALLOC_ID).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }

        let calls = w.signer.calls.load(Ordering::SeqCst);
        let m = manager(&w, db.clone(), Some(alg));
        let watcher = m.watch(&task()).unwrap();
        let r = m.restore(T0 + 60_000).unwrap();
        assert!(r.reused, "{r:?}");
        assert_eq!(
            w.signer.calls.load(Ordering::SeqCst),
            calls,
            "not re-signed"
        );
        let after = m.current(&task(), T0 + 60_000).unwrap();
        assert_eq!(&after, before);
        assert_eq!(
            *key_of(&after).secret(),
            *key_of(before).secret(),
            "the very key, not a new one"
        );
        assert_eq!(watcher.try_recv().unwrap().kind, EventKind::Restored);
        prove_and_verify(&w, &after, secs(T0) + 60).unwrap();

        // Renewal after the restart still replaces the key.
        let due = m.next_due_ms().unwrap();
        m.tick(due);
        let renewed = m.current(&task(), due).unwrap();
        assert_ne!(key_of(&renewed).proof_key(), key_of(&after).proof_key());
        prove_and_verify(&w, &renewed, secs(due)).unwrap();
    }
}

/// The secret forms a Debug or log line could show it in.
fn renderings(secret: &[u8]) -> Vec<String> {
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let decimal = format!("{:?}", &secret[..8]);
    vec![
        hex,
        URL_SAFE_NO_PAD.encode(secret),
        STANDARD.encode(secret),
        decimal.trim_end_matches(']').to_string(),
    ]
}

#[test]
fn workload_secrets_never_reach_debug_output_or_logs() {
    use std::sync::Mutex;
    struct Capture(Mutex<Vec<String>>);
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, r: &log::Record) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    for alg in ALGS {
        let w = world();
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(FileIdentityDb::new(dir.path()));
        let m = manager(&w, db.clone(), Some(alg));
        let watcher = m.watch(&task()).unwrap();
        m.start(T0).unwrap();
        let t = m.current(&task(), T0).unwrap();
        let secret = key_of(&t).secret();
        let shown = [
            format!("{t:?}"),
            format!("{t:#?}"),
            format!("{:?}", watcher.try_recv().unwrap()),
            format!("{:#?}", db.load(common::ALLOC_ID).unwrap()),
            format!("{m:?}"),
        ];
        assert!(
            shown[0].contains(&format!("workload_key: Some({alg:?})")),
            "{}",
            shown[0]
        );
        // The file holds the secret (that is how a restart can still prove),
        // readable by its owner only; nothing printed ever shows it.
        let file = std::fs::read(db.path(common::ALLOC_ID).unwrap()).unwrap();
        assert!(file.windows(secret.len()).any(|w| w == &secret[..]));
        for text in &shown {
            for form in renderings(&secret) {
                assert!(!text.contains(&form), "{alg:?}: secret shown in {text}");
            }
        }

        // A re-sign after a swapped key is logged with its reason: no secret.
        let mut saved = db.load(common::ALLOC_ID).unwrap().unwrap();
        let swapped = Arc::new(WorkloadKey::generate(alg).unwrap());
        let swapped_secret = swapped.secret();
        for s in saved.identities.iter_mut().filter(|s| s.key == task()) {
            s.workload_key = Some(swapped.clone());
        }
        db.store(common::ALLOC_ID, &saved).unwrap();
        let r = manager(&w, db.clone(), Some(alg))
            .restore(T0 + 1000)
            .unwrap();
        assert!(!r.reused);
        let logs = CAPTURE.0.lock().unwrap().clone();
        assert!(
            logs.iter()
                .any(|l| l.contains("re-signing") && l.contains("workload key")),
            "{logs:?}"
        );
        for line in logs.iter().chain([&r.reason]) {
            for form in renderings(&secret)
                .into_iter()
                .chain(renderings(&swapped_secret))
            {
                assert!(!line.contains(&form), "{alg:?}: secret logged in {line}");
            }
        }
    }
}

#[test]
fn a_state_file_whose_key_is_not_the_wits_is_not_reused() {
    for alg in ALGS {
        let w = world();
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(FileIdentityDb::new(dir.path()));
        manager(&w, db.clone(), Some(alg)).start(T0).unwrap();
        let saved = db.load(common::ALLOC_ID).unwrap().unwrap();
        let original = saved
            .identities
            .iter()
            .find(|t| t.key == task())
            .unwrap()
            .clone();

        // Another key of the same algorithm beside the saved WIT.
        let swapped = Arc::new(WorkloadKey::generate(alg).unwrap());
        let mut tampered = saved.clone();
        for t in tampered.identities.iter_mut().filter(|t| t.key == task()) {
            t.workload_key = Some(swapped.clone());
        }
        db.store(common::ALLOC_ID, &tampered).unwrap();
        let m = manager(&w, db.clone(), Some(alg));
        let r = m.restore(T0 + 1000).unwrap();
        assert!(!r.reused, "{r:?}");
        assert!(
            r.reason.contains("not bound to its saved workload key")
                && r.reason.contains("cnf.jwk"),
            "{r:?}"
        );
        // Signed again, with a key that is neither.
        let now = T0 + 1000;
        let t = m.current(&task(), now).unwrap();
        assert_ne!(t.jwt_id, original.jwt_id);
        for other in [key_of(&original), &*swapped] {
            assert_ne!(key_of(&t).proof_key(), other.proof_key());
        }
        prove_and_verify(&w, &t, secs(now)).unwrap();
        // The swapped-in key proves nothing for either WIT.
        for wit in [&t.token, &original.token] {
            let wpt = swapped
                .prove(wit, TARGET, secs(now), &ProofOptions::new())
                .unwrap();
            let e = w
                .verifier
                .verify_proof(wit, &wpt, &ProofRequest::new(TARGET), secs(now))
                .unwrap_err();
            assert_eq!(e.code(), ResultCode::ProofInvalid, "{e}");
        }
        // The file now holds the new pair, which a restart reuses.
        let r = manager(&w, db.clone(), Some(alg))
            .restore(T0 + 2000)
            .unwrap();
        assert!(r.reused, "{r:?}");

        // The key dropped from the file: signed again.
        let mut keyless = db.load(common::ALLOC_ID).unwrap().unwrap();
        for t in keyless.identities.iter_mut() {
            t.workload_key = None;
        }
        db.store(common::ALLOC_ID, &keyless).unwrap();
        let m = manager(&w, db.clone(), Some(alg));
        let r = m.restore(T0 + 3000).unwrap();
        assert!(
            !r.reused
                && r.reason
                    .contains("proof-bound, but its saved token has no workload key"),
            "{r:?}"
        );
        assert!(m.current(&task(), T0 + 3000).unwrap().is_proof_bound());
    }
}

#[test]
fn a_changed_configuration_re_signs() {
    let w = world();
    let db: Arc<dyn IdentityDb> = Arc::new(MemoryIdentityDb::default());
    // Bearer, then proof-bound: the saved bearer token is not reused.
    manager(&w, db.clone(), None).start(T0).unwrap();
    let m = manager(&w, db.clone(), Some(Algorithm::EdDsa));
    let r = m.restore(T0 + 1000).unwrap();
    assert!(!r.reused && r.reason.contains("no workload key"), "{r:?}");
    assert!(m.current(&task(), T0 + 1000).unwrap().is_proof_bound());
    // EdDSA, then ES256: signed again with a P-256 key.
    let m = manager(&w, db.clone(), Some(Algorithm::Es256));
    let r = m.restore(T0 + 2000).unwrap();
    assert!(
        !r.reused && r.reason.contains("is EdDSA, but ES256 is configured"),
        "{r:?}"
    );
    let t = m.current(&task(), T0 + 2000).unwrap();
    assert_eq!(key_of(&t).algorithm(), Algorithm::Es256);
    prove_and_verify(&w, &t, secs(T0) + 2).unwrap();
    // Proof-bound, then bearer: the WIT and its key are dropped.
    let m = manager(&w, db.clone(), None);
    let r = m.restore(T0 + 3000).unwrap();
    assert!(
        !r.reused
            && r.reason
                .contains("bearer identity, but its saved token carries a workload key"),
        "{r:?}"
    );
    let t = m.current(&task(), T0 + 3000).unwrap();
    assert!(!t.is_proof_bound());
    assert!(
        db.load(common::ALLOC_ID)
            .unwrap()
            .unwrap()
            .identities
            .iter()
            .all(|t| t.workload_key.is_none())
    );
    w.verifier.verify(&t.token, secs(T0) + 3).unwrap();
}

#[test]
fn the_builder_refuses_what_cannot_be_proof_bound() {
    let w = world();
    let db: Arc<dyn IdentityDb> = Arc::new(MemoryIdentityDb::default());
    let refused = |b: IdentityManagerBuilder, what: &str| {
        let e = b.build().unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    };
    refused(
        builder(&w, db.clone()).proof_of_possession(task(), Algorithm::Rs256),
        "cannot be RS256; expected EdDSA or ES256",
    );
    refused(
        builder(&w, db.clone())
            .proof_of_possession(IdentityId::new("server", "nope"), Algorithm::EdDsa),
        "server/nope is not requested",
    );
    refused(
        builder(&w, db.clone())
            .proof_of_possession(task(), Algorithm::EdDsa)
            .proof_of_possession(task(), Algorithm::Es256),
        "made proof-bound twice",
    );
    // A key the caller made would be one the manager cannot prove with.
    let mut req = common::issue_request_task();
    req.proof_key = Some(
        WorkloadKey::generate(Algorithm::EdDsa)
            .unwrap()
            .proof_key()
            .clone(),
    );
    refused(
        IdentityManager::builder(vec![req], w.signer.clone(), db.clone(), w.keyring.clone()),
        "carries a ProofKey",
    );
    // Both identities proof-bound, each with its own key.
    let m = builder(&w, db)
        .proof_of_possession(task(), Algorithm::EdDsa)
        .proof_of_possession(svc(), Algorithm::Es256)
        .build()
        .unwrap();
    m.start(T0).unwrap();
    let (a, b) = (
        m.current(&task(), T0).unwrap(),
        m.current(&svc(), T0).unwrap(),
    );
    assert_eq!(key_of(&a).algorithm(), Algorithm::EdDsa);
    assert_eq!(key_of(&b).algorithm(), Algorithm::Es256);
}

/// A signer that does not sign what the manager asked for.
struct Rogue {
    issuer: Issuer,
    /// Binds the WIT to a key of its own instead of the workload's.
    swap: bool,
}

impl IdentitySigner for Rogue {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        let requests: Vec<IssueRequest> = requests
            .iter()
            .cloned()
            .map(|mut r| {
                r.proof_key = match (&r.proof_key, self.swap) {
                    (Some(_), true) => Some(
                        WorkloadKey::generate(Algorithm::EdDsa)
                            .unwrap()
                            .proof_key()
                            .clone(),
                    ),
                    _ => None,
                };
                r
            })
            .collect();
        self.issuer.sign(&requests, now)
    }
}

#[test]
fn a_wit_not_bound_to_the_workloads_key_is_refused() {
    let w = world();
    for (swap, why) in [
        (true, "cnf.jwk is not the request's ProofKey"),
        (false, "wimse://<trust domain>"),
    ] {
        let m = IdentityManager::builder(
            vec![common::issue_request_task()],
            Arc::new(Rogue {
                issuer: Issuer::new(w.keyring.clone()).trust_domain(TD).unwrap(),
                swap,
            }),
            Arc::new(MemoryIdentityDb::default()),
            w.keyring.clone(),
        )
        .proof_of_possession(task(), Algorithm::EdDsa)
        .build()
        .unwrap();
        let e = m.start(T0).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
        assert!(m.current(&task(), T0).is_none());
        assert_eq!(m.next_due_ms(), Some(T0 + 1000), "retried after a backoff");
    }
    // An issuer without a trust domain cannot sign a WIT: an error, retried.
    let m = IdentityManager::builder(
        vec![common::issue_request_task()],
        Arc::new(Issuer::new(w.keyring.clone())),
        Arc::new(MemoryIdentityDb::default()),
        w.keyring.clone(),
    )
    .proof_of_possession(task(), Algorithm::Es256)
    .build()
    .unwrap();
    let e = m.start(T0).unwrap_err();
    assert!(e.to_string().contains("trust domain"), "{e}");
    assert!(m.current(&task(), T0).is_none());
}
