//! What a newcomer tripped over (issue 12), each kept from coming back.

mod common;

use std::sync::Arc;

use workload_identity::manager::{FileIdentityDb, IdentityDb, IdentityManager};
use workload_identity::model::{GoDuration, IssueRequest};
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, ResultCode, Verifier};

use common::identity::{AUD, NOW, world};

#[test]
fn a_ttl_meant_as_seconds_is_refused_not_issued_without_exp() {
    let w = world();
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_nanos(3600);
    let e = w.issuer.issue(&req, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("Go nanoseconds"), "{e}");
    req.identity.ttl = std::time::Duration::from_secs(3600).into();
    let ok = w.issuer.issue(&req, NOW).unwrap();
    assert_eq!(ok.claims.expires_at, Some(NOW + 3600));
    // TTL 0: no exp, refused only by a verifier that requires one.
    req.identity.ttl = GoDuration::from_nanos(0);
    let no_exp = w.issuer.issue(&req, NOW).unwrap();
    assert_eq!(no_exp.claims.expires_at, None);
    w.verifier.verify(&no_exp.token, NOW).unwrap();
    let strict = Verifier::builder(
        w.keyring.clone(),
        w.store.clone(),
        Audience::new(AUD).unwrap(),
    )
    .require_exp(true)
    .build();
    assert_eq!(
        strict.verify(&no_exp.token, NOW).unwrap_err().code(),
        ResultCode::MalformedToken
    );
}

#[test]
fn an_unknown_client_status_is_named_and_still_fails_closed() {
    let w = world();
    let token = w.token();
    for status in ["Completed", ""] {
        let mut alloc = common::allocation();
        alloc.client_status = status.into();
        w.store.upsert(&alloc);
        let e = w.verifier.verify(&token, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::AllocationTerminal, "{e}");
        assert!(e.to_string().contains("unknown client status"), "{e}");
        assert!(e.to_string().contains(&format!("{status:?}")), "{e}");
    }
    // A known terminal status says nothing about unknown ones.
    let mut alloc = common::allocation();
    alloc.client_status = "complete".into();
    w.store.upsert(&alloc);
    let e = w.verifier.verify(&token, NOW).unwrap_err();
    assert!(!e.to_string().contains("unknown"), "{e}");
}

#[test]
fn malformed_base64_is_described_in_our_words() {
    let w = world();
    let token = w.token();
    let (head, rest) = token.split_once('.').unwrap();
    for (bad, want) in [
        (format!("{head}=.{rest}"), "padding"),
        (format!("{head}!.{rest}"), "not in the base64url alphabet"),
        (
            // One character past a whole quantum: no byte string encodes so.
            format!("{head}{}.{rest}", "A".repeat((5 - head.len() % 4) % 4)),
            "not a possible base64url length",
        ),
    ] {
        let e = w.verifier.verify(&bad, NOW).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(want), "{text}");
        // The base64 crate's own phrases ("Invalid symbol", "Invalid input
        // length", ...) are its internals, never ours.
        assert!(!text.contains("Invalid"), "{text}");
    }
}

#[test]
fn saving_a_keyring_to_a_directory_is_a_clear_error() {
    let w = world();
    let dir = tempfile::tempdir().unwrap();
    let e = w.keyring.save(dir.path()).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("is a directory"), "{e}");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

fn manager_with(db: Arc<dyn IdentityDb>) -> IdentityManager {
    let keyring = Keyring::new();
    keyring.rotate(NOW).unwrap();
    let req: IssueRequest = common::issue_request_task();
    IdentityManager::builder(
        vec![req],
        Arc::new(Issuer::new(keyring.clone())),
        db,
        keyring,
    )
    .build()
    .unwrap()
}

#[cfg(unix)]
#[test]
fn the_identity_db_makes_its_directory_or_start_says_why_not() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state/allocs");
    let db = Arc::new(FileIdentityDb::new(&dir));
    manager_with(db.clone()).start(NOW * 1000).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(db.load(common::ALLOC_ID).unwrap().is_some());

    // A directory that cannot be made (a file is in the way): start fails.
    let blocked = root.path().join("file");
    std::fs::write(&blocked, b"x").unwrap();
    let db = Arc::new(FileIdentityDb::new(blocked.join("sub")));
    let e = manager_with(db).start(NOW * 1000).unwrap_err();
    assert_eq!(e.code(), ResultCode::IoError, "{e}");
    assert!(e.to_string().contains("identity state directory"), "{e}");
}

#[test]
fn names_are_one_way() {
    let kr = Keyring::new();
    let kid = kr.rotate(NOW).unwrap();
    // KeyInfo says kid like everything else, and a KeyId is a &str key ID.
    assert_eq!(kr.keys()[0].kid, kid);
    let next = kr.prepublish(NOW, NOW + 10).unwrap();
    kr.promote(&next, NOW + 10).unwrap();
    kr.deprecate(&kid, NOW + 20).unwrap();
    // Issuer::issuer and VerifierBuilder::issuer, both with "" meaning none.
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let token = Issuer::new(kr.clone())
        .issuer("")
        .issue(&common::issue_request_task(), NOW)
        .unwrap()
        .token;
    let v = Verifier::builder(kr, store, Audience::new(AUD).unwrap())
        .issuer("")
        .build();
    v.verify(&token, NOW).unwrap();
}

/// docs/rust.md's logging promise: the `log` facade only, rejections and key
/// waits at debug, an unknown client status at warn, never a token.
#[test]
fn logging_goes_through_the_facade_at_the_documented_levels() {
    use std::sync::Mutex;
    struct Capture(Mutex<Vec<(log::Level, String)>>);
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, r: &log::Record) {
            if r.target().starts_with("workload_identity") {
                self.0
                    .lock()
                    .unwrap()
                    .push((r.level(), r.args().to_string()));
            }
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    let w = world();
    let token = w.token();
    let _ = w.verifier.verify(&format!("{token}x"), NOW); // rejected
    let mut alloc = common::allocation();
    alloc.client_status = "Completed".into();
    w.store.upsert(&alloc);
    let records = CAPTURE.0.lock().unwrap().clone();
    assert!(
        records
            .iter()
            .any(|(l, m)| *l == log::Level::Debug && m.contains("rejected")),
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .any(|(l, m)| *l == log::Level::Warn && m.contains("unknown client status")),
        "{records:?}"
    );
    assert!(
        records.iter().all(|(l, _)| *l != log::Level::Error),
        "{records:?}"
    );
    let signature = token.rsplit('.').next().unwrap();
    assert!(
        records.iter().all(|(_, m)| !m.contains(signature)),
        "a token reached the log: {records:?}"
    );
}
