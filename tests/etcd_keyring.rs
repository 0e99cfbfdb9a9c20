//! The replicated keyring (`EtcdKeyring`) against a real 3-member etcd
//! cluster on loopback: several processes' worth of keyrings on one prefix,
//! racing writers, the elected rotator through partitions, killed members and
//! compaction, and an issuer cut off from etcd.
//!
//! Needs the `etcd` feature, Debian's `etcd-server`, and root (as
//! `tests/etcd_cluster.rs`). `.ci/run` runs
//! `cargo test --features etcd --test etcd_keyring -- --test-threads=1`.
#![cfg(feature = "etcd")]

mod common;
mod etcd_support;

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use etcd_support::{Cluster, Options, Proxy, Security};
use workload_identity::{
    Algorithm, Audience, EtcdConfig, EtcdKeyring, Issuer, KekFile, KeyState, KeyWrapper, Keyring,
    MemoryStore, ResultCode, RotationPolicy, RotatorOptions, Verifier, unix_now,
};

/// Polls `f` every 5 ms until it is true; the time it took, or a panic naming
/// `what` after `limit`.
fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    t.elapsed()
}

fn kek() -> Arc<dyn KeyWrapper> {
    Arc::new(KekFile::from_bytes(&[7u8; 32]).unwrap())
}

fn open(config: EtcdConfig, prefix: &str) -> EtcdKeyring {
    EtcdKeyring::builder(config)
        .prefix(prefix)
        .wrapper(kek())
        .max_lag(Duration::from_millis(400))
        .lead_time(Duration::from_secs(1))
        .open()
        .unwrap()
}

fn actives(kr: &Keyring, alg: Algorithm) -> Vec<String> {
    kr.keys()
        .into_iter()
        .filter(|k| k.algorithm == alg && k.state == KeyState::Active)
        .map(|k| k.kid.to_string())
        .collect()
}

fn token(issuer: &Issuer, now: i64) -> String {
    issuer
        .issue(&common::issue_request_task(), now)
        .unwrap()
        .token
}

#[test]
fn keys_replicate_wrapped_and_changes_are_linearizable() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-a/";
    let a = open(cluster.config(0, &[0, 1, 2]), prefix);
    let b = open(cluster.config(1, &[1, 2, 0]), prefix);
    let now = unix_now();

    // The first key is active at once; the other process has it.
    let first = a.rotate(Algorithm::EdDsa, now).unwrap();
    assert_eq!(actives(&a.keyring(), Algorithm::EdDsa), [first.to_string()]);
    eventually("b sees the first key", Duration::from_secs(30), || {
        b.keyring().active_id() == Some(first.clone())
    });

    // Issued by a, verified by b.
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let issuer = Issuer::new(a.keyring());
    let verifier =
        Verifier::builder(b.keyring(), store, Audience::new("vault.io").unwrap()).build();
    verifier.verify(&token(&issuer, now), now).unwrap();

    // etcd holds only wrapped material.
    let raw = cluster.admin_any(
        "/v3/kv/range",
        &serde_json::json!({"key": b64(&format!("{prefix}keys/{first}"))}),
    );
    let value = raw["kvs"][0]["value"].as_str().unwrap();
    let bytes = base64_decode(value);
    let material = a.keyring().root_key(first.as_str()).unwrap();
    assert!(
        !contains(&bytes, material.material().expose_secret()),
        "the material is in etcd in plaintext"
    );

    // A rotation with an active key prepublishes: it signs only after the lead.
    let next = a.rotate(Algorithm::EdDsa, now).unwrap();
    assert_eq!(
        a.keyring().key_info(next.as_str()).unwrap().state,
        KeyState::Prepublished
    );
    let early = a.promote(next.as_str(), now).unwrap_err();
    assert_eq!(early.code(), ResultCode::InvalidArgument, "{early}");
    // Rotating again returns the pending successor.
    assert_eq!(a.rotate(Algorithm::EdDsa, now).unwrap(), next);
    let later = now + 2;
    assert_eq!(b.promote_due(later).unwrap(), vec![next.clone()]);
    eventually("a sees the promotion", Duration::from_secs(30), || {
        a.keyring().active_id() == Some(next.clone())
    });
    assert_eq!(
        a.keyring().key_info(first.as_str()).unwrap().state,
        KeyState::Inactive
    );

    // A change planned on a stale copy loses.
    let (tx, rx) = std::sync::mpsc::channel();
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        for kr in [&a, &b] {
            let (tx, barrier) = (tx.clone(), &barrier);
            s.spawn(move || {
                barrier.wait();
                tx.send(kr.rotate_now(Algorithm::EdDsa, later).map_err(|e| e.code()))
                    .unwrap();
            });
        }
    });
    drop(tx);
    let results: Vec<_> = rx.iter().collect();
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert!(won >= 1, "{results:?}");
    for r in &results {
        if let Err(code) = r {
            assert_eq!(*code, ResultCode::KeyringConflict, "{results:?}");
        }
    }
    a.refresh().unwrap();
    b.refresh().unwrap();
    assert_eq!(actives(&a.keyring(), Algorithm::EdDsa).len(), 1);
    assert_eq!(
        a.keyring().active_id(),
        b.keyring().active_id(),
        "{:?}",
        b.stats()
    );
    assert!(a.stats().since_proven.is_some());
}

#[test]
fn a_wrong_kek_or_plaintext_is_refused() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-b/";
    let a = open(cluster.config(0, &[0]), prefix);
    a.rotate(Algorithm::Es256, unix_now()).unwrap();
    let other: Arc<dyn KeyWrapper> = Arc::new(KekFile::from_bytes(&[9u8; 32]).unwrap());
    let e = EtcdKeyring::builder(cluster.config(0, &[0]))
        .prefix(prefix)
        .wrapper(other)
        .open()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    let e = EtcdKeyring::builder(cluster.config(0, &[0]))
        .prefix(prefix)
        .insecure_plaintext_keys()
        .open()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    let e = EtcdKeyring::builder(cluster.config(0, &[0]))
        .prefix(prefix)
        .open()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    let _ = Proxy::start(cluster.members[0].client);
    let _ = RotationPolicy::new(None);
    let _ = RotatorOptions::new(RotationPolicy::new(None));
    let _ = Mutex::new(0);
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
