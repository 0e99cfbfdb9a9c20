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

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
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

/// The test KEK, counting the keys it unwraps.
#[derive(Debug)]
struct CountingKek {
    inner: KekFile,
    unwrapped: std::sync::atomic::AtomicUsize,
}

impl KeyWrapper for CountingKek {
    fn kind(&self) -> &str {
        self.inner.kind()
    }
    fn kek_id(&self) -> &str {
        KeyWrapper::kek_id(&self.inner)
    }
    fn wrap(&self, material: &[u8], aad: &[u8]) -> Result<Vec<u8>, workload_identity::Error> {
        self.inner.wrap(material, aad)
    }
    fn unwrap(
        &self,
        wrapped: &[u8],
        aad: &[u8],
    ) -> Result<zeroize::Zeroizing<Vec<u8>>, workload_identity::Error> {
        self.unwrapped
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.unwrap(wrapped, aad)
    }
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
    // Over mutual TLS with etcd's user auth, as production runs it.
    let cluster = Cluster::start(Options::new(Security::MutualTls));
    cluster.enable_auth();
    let prefix = "/wid-test/keyring-a/";
    let a = open(
        cluster.config(0, &[0, 1, 2]).credentials("wid", "wid-pw"),
        prefix,
    );
    let counting = Arc::new(CountingKek {
        inner: KekFile::from_bytes(&[7u8; 32]).unwrap(),
        unwrapped: Default::default(),
    });
    let b = EtcdKeyring::builder(cluster.config(1, &[1, 2, 0]).credentials("wid", "wid-pw"))
        .prefix(prefix)
        .wrapper(counting.clone())
        .max_lag(Duration::from_millis(400))
        .lead_time(Duration::from_secs(1))
        .open()
        .unwrap();
    let unwraps = || counting.unwrapped.load(std::sync::atomic::Ordering::SeqCst);
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
    eventually("b sees the successor", Duration::from_secs(30), || {
        b.keyring().key_info(next.as_str()).is_some()
    });
    // Each key was unwrapped once; state changes reuse the key pair.
    assert_eq!(unwraps(), 2);
    assert_eq!(b.promote_due(later).unwrap(), vec![next.clone()]);
    assert_eq!(unwraps(), 2, "a promotion unwrapped keys again");
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

    // Elections work under auth too (leases, the fenced election key).
    let rotator = a
        .start_rotator(
            RotatorOptions::new(RotationPolicy::new(None))
                .lease_ttl(Duration::from_secs(3))
                .interval(Duration::from_millis(100)),
        )
        .unwrap();
    eventually(
        "a rotator is elected under auth",
        Duration::from_secs(60),
        || rotator.is_elected(),
    );
    assert_eq!(rotator.stats().last_error, None);
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

/// The key records under `prefix` at `revision`: (ID, algorithm, state).
fn keys_at(cluster: &Cluster, prefix: &str, revision: i64) -> Vec<(String, String, String)> {
    #[derive(serde::Deserialize)]
    struct Rec {
        #[serde(rename = "ID")]
        id: String,
        #[serde(rename = "Algorithm")]
        algorithm: String,
        #[serde(rename = "State")]
        state: String,
    }
    let keys = format!("{prefix}keys/");
    let mut end = keys.clone().into_bytes();
    *end.last_mut().unwrap() += 1;
    let r = cluster.admin_any(
        "/v3/kv/range",
        &serde_json::json!({
            "key": b64(&keys),
            "range_end": base64_encode(&end),
            "revision": revision.to_string(),
        }),
    );
    r["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| {
                    let rec: Rec =
                        rmp_serde::from_slice(&base64_decode(kv["value"].as_str().unwrap()))
                            .unwrap();
                    (rec.id, rec.algorithm, rec.state)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the prefix at every revision from `from` to now (etcd keeps the
/// history until compaction) and checks that at none of them two keys of
/// one algorithm are active. Returns the number of revisions checked and
/// how many distinct keys were ever active.
fn never_two_actives(cluster: &Cluster, prefix: &str, from: i64) -> (i64, usize) {
    let to = cluster.revision();
    let mut ever_active = std::collections::BTreeSet::new();
    for rev in from..=to {
        let mut active: HashMap<String, Vec<String>> = HashMap::new();
        for (id, alg, state) in keys_at(cluster, prefix, rev) {
            if state == "active" {
                ever_active.insert(id.clone());
                active.entry(alg).or_default().push(id);
            }
        }
        for (alg, ids) in &active {
            assert!(
                ids.len() <= 1,
                "revision {rev}: two active {alg} keys {ids:?}"
            );
        }
    }
    (to - from + 1, ever_active.len())
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// N processes (one keyring each, each on its own member) race `rotate_now`
/// on one prefix: those that planned on the same revision leave one winner,
/// the others learn they lost; at no revision are two keys active.
#[test]
fn racing_rotations_leave_one_active_key() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-race/";
    let start = cluster.revision();
    let procs: Vec<EtcdKeyring> = (0..4)
        .map(|i| {
            open(
                cluster.config(i % 3, &[i % 3, (i + 1) % 3, (i + 2) % 3]),
                prefix,
            )
        })
        .collect();
    let now = unix_now();
    procs[0].rotate(Algorithm::EdDsa, now).unwrap();
    for p in &procs {
        p.refresh().unwrap();
    }
    let mut winners_total = 0;
    let mut conflicts_total = 0;
    for round in 0..5 {
        // Every process holds the same revision before the race.
        for p in &procs {
            p.refresh().unwrap();
        }
        let barrier = Barrier::new(procs.len());
        let results: Vec<Result<String, ResultCode>> = std::thread::scope(|s| {
            let handles: Vec<_> = procs
                .iter()
                .map(|p| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        p.rotate_now(Algorithm::EdDsa, now + round)
                            .map(|k| k.to_string())
                            .map_err(|e| e.code())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        for r in &results {
            if let Err(code) = r {
                assert_eq!(*code, ResultCode::KeyringConflict, "{results:?}");
            }
        }
        // Each winner planned on a revision no other winner had changed.
        assert!(!winners.is_empty(), "round {round}: {results:?}");
        winners_total += winners.len();
        conflicts_total += results.len() - winners.len();
        for p in &procs {
            p.refresh().unwrap();
        }
        let active = procs[0].keyring().active_id().unwrap().to_string();
        assert!(winners.contains(&&active), "{active} not among {winners:?}");
        for p in &procs {
            assert_eq!(
                actives(&p.keyring(), Algorithm::EdDsa),
                std::slice::from_ref(&active)
            );
        }
    }
    assert!(
        conflicts_total > 0,
        "no race was ever lost: the test raced nothing"
    );
    let (revisions, ever) = never_two_actives(&cluster, prefix, start);
    assert_eq!(ever, 1 + winners_total);
    println!(
        "racing rotations: {winners_total} won, {conflicts_total} lost over 5 rounds of 4; {revisions} revisions checked"
    );
}

/// Three servers run rotator candidates; exactly one is elected and runs
/// the policy. Cut off from etcd, it steps down and another takes over
/// after the lease TTL; a rotator whose lease is gone cannot write.
#[test]
fn one_rotator_elected_and_replaced_when_partitioned() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-rotator/";
    let start = cluster.revision();
    // Keys sign for 6 s: a successor is prepublished after 3 s, with a 1 s lead.
    let policy = RotationPolicy::new(Some(Duration::from_secs(2)))
        .rotation_threshold(Duration::from_secs(6))
        .clock_skew(Duration::from_secs(1));
    let proxies: Vec<Proxy> = (0..3)
        .map(|i| Proxy::start(cluster.members[i].client))
        .collect();
    let procs: Vec<EtcdKeyring> = proxies
        .iter()
        .map(|p| {
            let url = p.url("http");
            EtcdKeyring::builder(cluster.config_for(&url, &[&url]))
                .prefix(prefix)
                .wrapper(kek())
                .max_lag(Duration::from_millis(400))
                .lead_time(Duration::from_secs(1))
                .rotation_policy(policy)
                .open()
                .unwrap()
        })
        .collect();
    let rotators: Vec<_> = procs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.start_rotator(
                RotatorOptions::new(policy)
                    .lease_ttl(Duration::from_secs(3))
                    .interval(Duration::from_millis(200))
                    .identity(&format!("server-{i}")),
            )
            .unwrap()
        })
        .collect();
    let elected = || -> Vec<usize> {
        rotators
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_elected())
            .map(|(i, _)| i)
            .collect()
    };
    eventually("a rotator is elected", Duration::from_secs(60), || {
        elected().len() == 1
    });
    let leader = elected()[0];
    // The policy runs: a first key at once, then rotations every 6 s.
    eventually("the rotator made a key", Duration::from_secs(60), || {
        procs.iter().all(|p| p.keyring().active_id().is_some())
    });
    let first = procs[0].keyring().active_id().unwrap();
    eventually("the rotator rotated", Duration::from_secs(60), || {
        procs[0].keyring().active_id().is_some_and(|k| k != first)
    });

    // Partition the leader from etcd.
    proxies[leader].block(true);
    proxies[leader].cut();
    let took_over = eventually(
        "another rotator takes over",
        Duration::from_secs(60),
        || {
            let e = elected();
            e.len() == 1 && e[0] != leader
        },
    );
    eventually(
        "the cut-off rotator knows it lost",
        Duration::from_secs(60),
        || rotators[leader].stats().leases_lost >= 1 && !rotators[leader].is_elected(),
    );
    assert!(procs[leader].stats().cut_off);
    let new_leader = elected()[0];
    // The new rotator goes on rotating.
    let before = procs[new_leader].keyring().active_id().unwrap();
    eventually("the new rotator rotates", Duration::from_secs(60), || {
        procs[new_leader]
            .keyring()
            .active_id()
            .is_some_and(|k| k != before)
    });
    proxies[leader].block(false);
    eventually(
        "the healed server catches up",
        Duration::from_secs(60),
        || {
            procs[leader].keyring().active_id() == procs[new_leader].keyring().active_id()
                && !procs[leader].stats().cut_off
        },
    );
    // The healed server campaigns again but cannot win while the lease of
    // the new rotator holds (a rotator's own belief is no safety property:
    // the lease compare on every write is, and the history below checks it).
    assert!(!rotators[leader].stats().elected || rotators[leader].stats().elections_won >= 2);
    drop(rotators);
    let (revisions, ever) = never_two_actives(&cluster, prefix, start);
    assert!(ever >= 3, "{ever}");
    println!(
        "rotator: server-{leader} cut off; server-{new_leader} elected {} ms later; {ever} keys over {revisions} revisions, never two active",
        took_over.as_millis()
    );
}

/// A rotator whose lease was revoked behind its back (as etcd expires it
/// for a paused process) cannot write: the lease compare fails the change.
#[test]
fn a_rotator_without_its_lease_cannot_write() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-fence/";
    let kr = open(cluster.config(0, &[0]), prefix);
    // Nothing to do for a long while once a key exists.
    let policy = RotationPolicy::new(None).rotation_threshold(Duration::from_secs(3600));
    let rotator = kr
        .start_rotator(
            RotatorOptions::new(policy)
                .lease_ttl(Duration::from_secs(30))
                .interval(Duration::from_millis(100)),
        )
        .unwrap();
    eventually("elected with a key", Duration::from_secs(60), || {
        rotator.is_elected() && kr.keyring().active_id().is_some()
    });
    let leases = cluster.admin_any("/v3/lease/leases", &serde_json::json!({}));
    let ids: Vec<i64> = leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ID"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{leases}");
    // While the lease holds the rotator key, a change fenced by it commits.
    kr.rotate_now_fenced(Algorithm::Es256, unix_now(), ids[0])
        .unwrap();
    cluster.admin_any(
        "/v3/lease/revoke",
        &serde_json::json!({"ID": ids[0].to_string()}),
    );
    eventually(
        "the rotator learns its lease is gone",
        Duration::from_secs(60),
        || rotator.stats().leases_lost >= 1,
    );
    // A fenced change with a lease that no longer exists is refused.
    let e = kr
        .rotate_now_fenced(Algorithm::EdDsa, unix_now(), ids[0])
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyringConflict, "{e}");
    assert!(e.to_string().contains("lease"), "{e}");
}

/// Members killed and restarted mid-rotation, a watcher cut off while keys
/// change and the history is compacted: every copy converges on the
/// cluster's keys.
#[test]
fn copies_converge_through_kills_cuts_and_compaction() {
    let mut cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-kill/";
    let start = cluster.revision();
    let a = open(cluster.config(0, &[0, 1, 2]), prefix);
    let proxy = Proxy::start(cluster.members[2].client);
    let url = proxy.url("http");
    let watcher = open(cluster.config_for(&url, &[&url]), prefix);
    let now = unix_now();
    a.rotate(Algorithm::EdDsa, now).unwrap();

    // Member 0 (a's own) dies while a rotates: a goes on through the others.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..6 {
                tx.send(
                    a.rotate_now(Algorithm::Es256, now + i)
                        .map(|k| k.to_string()),
                )
                .unwrap();
            }
        });
        cluster.kill(0);
    });
    drop(tx);
    let done: Vec<_> = rx.iter().collect();
    // A rotation cut short by the kill may fail; none may be half done.
    assert!(done.iter().any(Result::is_ok), "{done:?}");
    cluster.restart(0);
    a.refresh().unwrap();
    let es = a.keyring().active_id_for(Algorithm::Es256).unwrap();

    // The watcher is cut off while keys change, and the history it would
    // resume from is compacted away.
    proxy.block(true);
    proxy.cut();
    let later = a.rotate_now(Algorithm::EdDsa, now + 10).unwrap();
    a.rotate_now(Algorithm::Es256, now + 10).unwrap();
    // The whole history so far, kills included, before it is compacted.
    let (before, _) = never_two_actives(&cluster, prefix, start);
    let compacted = cluster.compact();
    eventually(
        "the watcher notices it is cut off",
        Duration::from_secs(60),
        || watcher.stats().cut_off,
    );
    assert_ne!(watcher.keyring().active_id(), Some(later.clone()));
    proxy.block(false);
    eventually("the watcher catches up", Duration::from_secs(60), || {
        watcher.keyring().active_id() == Some(later.clone())
            && watcher.keyring().active_id_for(Algorithm::Es256)
                == a.keyring().active_id_for(Algorithm::Es256)
    });
    assert_ne!(watcher.keyring().active_id_for(Algorithm::Es256), Some(es));
    let st = watcher.stats();
    assert!(
        st.relists >= 2,
        "the watcher listed again after compaction: {st:?}"
    );
    assert_eq!(watcher.keyring().keys(), a.keyring().keys());
    let (after, _) = never_two_actives(&cluster, prefix, compacted);
    println!(
        "kills, cuts, compaction: {} revisions checked",
        before + after
    );
}

/// An issuer cut off from etcd signs with its last active key until that
/// key's planned end, says so, then stops; it verifies known keys
/// throughout and resumes when etcd answers again.
#[test]
fn a_cut_off_issuer_signs_until_the_planned_end() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-cut/";
    let writer = open(cluster.config(0, &[0]), prefix);
    let proxy = Proxy::start(cluster.members[0].client);
    let url = proxy.url("http");
    let policy = RotationPolicy::new(None).rotation_threshold(Duration::from_secs(4));
    let issuer_kr = EtcdKeyring::builder(cluster.config_for(&url, &[&url]))
        .prefix(prefix)
        .wrapper(kek())
        .max_lag(Duration::from_millis(400))
        .lead_time(Duration::from_secs(1))
        .rotation_policy(policy)
        .open()
        .unwrap();
    let now = unix_now();
    let kid = writer.rotate(Algorithm::EdDsa, now).unwrap();
    issuer_kr.refresh().unwrap();
    let created = issuer_kr
        .keyring()
        .key_info(kid.as_str())
        .unwrap()
        .create_time;
    let issuer = Issuer::new(issuer_kr.keyring());
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier = Verifier::builder(
        issuer_kr.keyring(),
        store,
        Audience::new("vault.io").unwrap(),
    )
    .build();
    let early = token(&issuer, unix_now());

    proxy.block(true);
    proxy.cut();
    eventually(
        "the issuer says it is cut off",
        Duration::from_secs(60),
        || issuer_kr.stats().cut_off,
    );
    // Still signing with the key it knows, before the planned end.
    if unix_now() < created + 4 {
        let t = token(&issuer, unix_now());
        verifier.verify(&t, unix_now()).unwrap();
    }
    eventually(
        "the key stops signing at its planned end",
        Duration::from_secs(60),
        || issuer_kr.stats().stood_down == [Algorithm::EdDsa],
    );
    assert!(unix_now() >= created + 4);
    let e = issuer
        .issue(&common::issue_request_task(), unix_now())
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::NoActiveKey, "{e}");
    // Known keys still verify.
    verifier.verify(&early, unix_now()).unwrap();

    proxy.block(false);
    eventually(
        "signing resumes once etcd answers",
        Duration::from_secs(60),
        || {
            issuer_kr.stats().stood_down.is_empty()
                && issuer_kr.keyring().active_id() == Some(kid.clone())
        },
    );
    let t = token(&issuer, unix_now());
    verifier.verify(&t, unix_now()).unwrap();
}

/// How long a new key takes to reach every watcher (one on each member):
/// measured, printed, and recorded in BENCHMARKS.md; the test asserts only
/// that every watcher gets every key.
#[test]
fn propagation_to_every_watcher() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-propagation/";
    let writer = open(cluster.config(0, &[0, 1, 2]), prefix);
    let watchers: Vec<EtcdKeyring> = (0..3)
        .map(|i| open(cluster.config(i, &[i, (i + 1) % 3, (i + 2) % 3]), prefix))
        .collect();
    let now = unix_now();
    let mut samples = Vec::new();
    for i in 0..60 {
        let committed = Instant::now();
        let kid = writer.rotate_now(Algorithm::EdDsa, now + i).unwrap();
        let handles: Vec<_> = watchers
            .iter()
            .map(|w| {
                let kr = w.keyring();
                let kid = kid.clone();
                std::thread::spawn(move || {
                    kr.wait_for_key(kid.as_str(), Duration::from_secs(60))
                        .map(|_| committed.elapsed())
                })
            })
            .collect();
        for h in handles {
            samples.push(h.join().unwrap().expect("a watcher never got the key"));
        }
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "propagation over {} (key, watcher) pairs: p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        pct(0.5),
        pct(0.99),
        samples.last().unwrap()
    );
}
