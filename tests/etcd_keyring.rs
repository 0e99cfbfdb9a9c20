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

use etcd_support::{Cluster, Options, Proxy, Security, eventually};
use workload_identity::{
    Algorithm, Audience, EtcdConfig, EtcdKeyring, Issuer, KekFile, KeyPurpose, KeyState,
    KeyWrapper, Keyring, MemoryStore, ResultCode, RotationPolicy, Rotator, RotatorOptions,
    Verifier, unix_now,
};

fn kek() -> Arc<dyn KeyWrapper> {
    Arc::new(KekFile::from_bytes(&[7u8; 32]).unwrap())
}

/// The test KEK, counting the keys it unwraps; while `down`, it fails every
/// unwrap as a KMS that does not answer would.
#[derive(Debug)]
struct CountingKek {
    inner: KekFile,
    unwrapped: std::sync::atomic::AtomicUsize,
    down: std::sync::atomic::AtomicBool,
}

impl CountingKek {
    fn new() -> Arc<CountingKek> {
        Arc::new(CountingKek {
            inner: KekFile::from_bytes(&[7u8; 32]).unwrap(),
            unwrapped: Default::default(),
            down: Default::default(),
        })
    }
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
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(workload_identity::Error::KeyCustody {
                custodian: "test KMS".into(),
                reason: "the KMS does not answer".into(),
            });
        }
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

/// A rotator with the default policy (720 h: nothing to do once a key is
/// active), a 3 s lease and a 100 ms interval.
fn idle_rotator(kr: &EtcdKeyring) -> Rotator {
    kr.start_rotator(
        RotatorOptions::new(RotationPolicy::new(None))
            .lease_ttl(Duration::from_secs(3))
            .interval(Duration::from_millis(100)),
    )
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
    let counting = CountingKek::new();
    let b = EtcdKeyring::builder(cluster.config(1, &[1, 2, 0]).credentials("wid", "wid-pw"))
        .prefix(prefix)
        .wrapper(counting.clone())
        .max_lag(Duration::from_millis(400))
        .lead_time(Duration::from_secs(1))
        .open()
        .unwrap();
    // Key material unwrapped (the record key, unwrapped once at open, is
    // not counted).
    let unwraps = || counting.unwrapped.load(std::sync::atomic::Ordering::SeqCst) - 1;
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
    // The lead time counts on b's own clock from when b first saw the key.
    std::thread::sleep(b.lead_time());
    assert_eq!(b.promote_due(later).unwrap(), vec![next.clone()]);
    assert_eq!(unwraps(), 2, "a promotion unwrapped keys again");
    eventually("a sees the promotion", Duration::from_secs(30), || {
        a.keyring().active_id() == Some(next.clone())
    });
    assert_eq!(
        a.keyring().key_info(first.as_str()).unwrap().state,
        KeyState::Inactive
    );

    // Both write: a's and b's changes land one after the other.
    a.rotate_now(Algorithm::EdDsa, later).unwrap();
    b.refresh().unwrap();
    b.rotate_now(Algorithm::EdDsa, later).unwrap();
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
    let rotator = idle_rotator(&a);
    eventually(
        "a rotator is elected under auth",
        Duration::from_secs(60),
        || rotator.is_elected(),
    );
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
    // Each process watches through a proxy of its own, which is frozen for
    // the race, and writes and lists straight to the members; its freshness
    // check waits a minute. So every process plans on the listing it made
    // just before the race, whatever the scheduler does: the race is real
    // on a loaded host too.
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let proxies: Vec<Proxy> = (0..4)
        .map(|i| Proxy::start(cluster.members[i % 3].client))
        .collect();
    let procs: Vec<EtcdKeyring> = proxies
        .iter()
        .map(|p| {
            EtcdKeyring::builder(
                cluster
                    .config_for(&p.url("http"), &urls)
                    .timeout(Duration::from_secs(1)),
            )
            .prefix(prefix)
            .wrapper(kek())
            .max_lag(Duration::from_secs(120))
            .check_interval(Duration::from_secs(60))
            .lead_time(Duration::from_secs(1))
            .open()
            .unwrap()
        })
        .collect();
    let writer = open(cluster.config(0, &[0, 1, 2]), prefix);
    let now = unix_now();
    let first = writer.rotate(Algorithm::EdDsa, now).unwrap();
    // Every watch is connected (it delivered the first key): freeze them.
    eventually(
        "every process sees the first key",
        Duration::from_secs(60),
        || {
            procs
                .iter()
                .all(|p| p.keyring().active_id() == Some(first.clone()))
        },
    );
    for p in &proxies {
        p.freeze();
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
        // All planned on one revision: exactly one wins.
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        winners_total += winners.len();
        conflicts_total += results.len() - winners.len();
        for p in &procs {
            p.refresh().unwrap();
        }
        let active = procs[0].keyring().active_id().unwrap().to_string();
        assert_eq!(winners, [&active]);
        for p in &procs {
            assert_eq!(
                actives(&p.keyring(), Algorithm::EdDsa),
                std::slice::from_ref(&active)
            );
        }
    }
    assert_eq!(conflicts_total, 5 * (procs.len() - 1));
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

    // Partition the leader from etcd, silently: its open connections hang
    // (nothing answers, nothing is refused), new ones are refused.
    proxies[leader].block(true);
    proxies[leader].freeze();
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
    proxies[leader].cut();
    proxies[leader].thaw();
    proxies[leader].block(false);
    eventually(
        "the healed server catches up",
        Duration::from_secs(60),
        || {
            procs[leader].keyring().active_id() == procs[new_leader].keyring().active_id()
                && !procs[leader].stats().cut_off
        },
    );
    // (Who believes it is elected is no safety property: the lease compare
    // on every write is, and the history below checks what was written.)
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
    // The lease the election key is held with.
    let held = cluster.admin_any(
        "/v3/kv/range",
        &serde_json::json!({"key": b64(&format!("{prefix}rotator"))}),
    );
    let ids: Vec<i64> = vec![held["kvs"][0]["lease"].as_str().unwrap().parse().unwrap()];
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
    // Listed again: by the watch, whose start revision was compacted away,
    // or by the freshness check, whichever noticed first.
    assert!(st.relists >= 2, "{st:?}");
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
    // Still signing with the key it knows, until the planned end.
    match issuer.issue(&common::issue_request_task(), unix_now()) {
        Ok(t) => {
            verifier.verify(&t.token, unix_now()).unwrap();
        }
        Err(e) => {
            assert_eq!(e.code(), ResultCode::NoActiveKey, "{e}");
            assert!(
                unix_now() >= created + 4,
                "stood down before the planned end"
            );
        }
    }
    eventually(
        "the key stops signing at its planned end",
        Duration::from_secs(60),
        || issuer_kr.stats().stood_down == [(KeyPurpose::Bearer, Algorithm::EdDsa)],
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

/// A change planned on a copy that has not seen the latest change loses,
/// whoever is faster: b's watch is frozen (its copy stays behind) while its
/// writes go straight to the members.
#[test]
fn a_change_planned_on_a_stale_copy_loses() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-stale/";
    let a = open(cluster.config(0, &[0, 1, 2]), prefix);
    // b watches through the proxy (its local endpoint) and writes to the
    // members; its freshness check waits a minute, so only the watch could
    // have told it.
    let proxy = Proxy::start(cluster.members[1].client);
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let b = EtcdKeyring::builder(cluster.config_for(&proxy.url("http"), &urls))
        .prefix(prefix)
        .wrapper(kek())
        .max_lag(Duration::from_secs(120))
        .check_interval(Duration::from_secs(60))
        .lead_time(Duration::from_secs(1))
        .open()
        .unwrap();
    let now = unix_now();
    let first = a.rotate(Algorithm::EdDsa, now).unwrap();
    eventually("b sees the first key", Duration::from_secs(30), || {
        b.keyring().active_id() == Some(first.clone())
    });
    proxy.freeze();
    let second = a.rotate_now(Algorithm::EdDsa, now + 1).unwrap();
    let e = b.rotate_now(Algorithm::EdDsa, now + 1).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyringConflict, "{e}");
    assert!(e.to_string().contains("nothing was written"), "{e}");
    assert_eq!(b.stats().conflicts, 1);
    // Planning again on a current copy wins.
    b.refresh().unwrap();
    assert_eq!(b.keyring().active_id(), Some(second.clone()));
    let third = b.rotate_now(Algorithm::EdDsa, now + 2).unwrap();
    proxy.thaw();
    a.refresh().unwrap();
    assert_eq!(a.keyring().active_id(), Some(third));
    assert_eq!(
        a.keyring().key_info(second.as_str()).unwrap().state,
        KeyState::Inactive
    );
}

/// Someone who can write etcd but has no KEK: records that do not decode,
/// do not unwrap or name an unknown state are left out and reported, the
/// other keys keep working, new servers still open, and later changes
/// still arrive. Two servers racing to open an empty prefix with different
/// KEKs: exactly one wins.
#[test]
fn tampered_records_and_a_second_kek_are_refused_one_by_one() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-tamper/";
    let a = open(cluster.config(0, &[0]), prefix);
    let now = unix_now();
    let ed = a.rotate(Algorithm::EdDsa, now).unwrap();
    let es = a.rotate(Algorithm::Es256, now).unwrap();
    let put = |suffix: &str, value: Vec<u8>| {
        cluster.admin_any(
            "/v3/kv/put",
            &serde_json::json!({"key": b64(&format!("{prefix}{suffix}")), "value": base64_encode(&value)}),
        );
    };
    let get = |suffix: &str| -> Vec<u8> {
        let r = cluster.admin_any(
            "/v3/kv/range",
            &serde_json::json!({"key": b64(&format!("{prefix}{suffix}"))}),
        );
        base64_decode(r["kvs"][0]["value"].as_str().unwrap())
    };
    // The ES256 key's state set to nonsense; its record is otherwise intact.
    let raw = get(&format!("keys/{es}"));
    let state_at = raw
        .windows(b"active".len())
        .position(|w| w == b"active")
        .unwrap();
    let mut junk = raw.clone();
    junk[state_at..state_at + 6].copy_from_slice(b"bogus!");
    put(&format!("keys/{es}"), junk);
    // A key record of garbage, and one whose wrapped material is forged.
    put("keys/forged-1", b"\x93\x01\x02\x03".to_vec());
    let mut forged = get(&format!("keys/{ed}"));
    let id_at = forged
        .windows(ed.as_str().len())
        .position(|w| w == ed.as_str().as_bytes())
        .unwrap();
    let other = "f".repeat(ed.as_str().len());
    forged[id_at..id_at + other.len()].copy_from_slice(other.as_bytes());
    put(&format!("keys/{other}"), forged);
    eventually("a reports the bad records", Duration::from_secs(30), || {
        a.stats().bad_records == 3
    });
    assert_eq!(a.keyring().active_id(), Some(ed.clone()));
    // The running copy keeps the ES256 key as the manifest lists it (the
    // record written over is refused, not followed).
    assert!(a.keyring().key_info(es.as_str()).is_some());
    assert!(a.keyring().key_info(&other).is_none());
    // A new server opens all the same, with the good keys (the tampered
    // ES256 record left out: it never saw the version the manifest lists).
    let b = open(cluster.config(0, &[0]), prefix);
    assert_eq!(b.keyring().active_id(), Some(ed.clone()));
    assert!(b.keyring().key_info(es.as_str()).is_none());
    assert_eq!(b.stats().bad_records, 3, "{:?}", b.stats());
    // And changes still arrive.
    let next = a.rotate_now(Algorithm::EdDsa, now + 1).unwrap();
    eventually("b follows", Duration::from_secs(30), || {
        b.keyring().active_id() == Some(next.clone())
    });
    let stats = format!("{:?}", b.stats());
    assert!(!stats.contains("Material"), "{stats}");

    // Two servers, two KEKs, one empty prefix: one wins, the other is told.
    let prefix2 = "/wid-test/keyring-kek-race/";
    let barrier = Barrier::new(2);
    let results: Vec<Result<EtcdKeyring, ResultCode>> = std::thread::scope(|s| {
        let handles: Vec<_> = [7u8, 8u8]
            .into_iter()
            .map(|byte| {
                let (barrier, config) = (&barrier, cluster.config(0, &[0]));
                s.spawn(move || {
                    barrier.wait();
                    EtcdKeyring::builder(config)
                        .prefix(prefix2)
                        .wrapper(Arc::new(KekFile::from_bytes(&[byte; 32]).unwrap()))
                        .open()
                        .map_err(|e| e.code())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(ResultCode::KeyCustodyFailed))),
        "{results:?}"
    );
}

/// The KMS that unwraps keys is away: a server does not start with no keys
/// (open fails), a running one keeps the keys it holds and picks up a new
/// key once the KMS answers again; its rotator does not act on the gap.
#[test]
fn a_kms_outage_never_empties_a_running_copy() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-kms/";
    let a = open(cluster.config(0, &[0]), prefix);
    let now = unix_now();
    let first = a.rotate(Algorithm::EdDsa, now).unwrap();
    let kms = CountingKek::new();
    let build = || {
        EtcdKeyring::builder(cluster.config(0, &[0]))
            .prefix(prefix)
            .wrapper(kms.clone())
            .max_lag(Duration::from_millis(400))
            .lead_time(Duration::from_secs(1))
            .open()
    };
    kms.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let e = build().unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    // The record key is the first thing unwrapped.
    assert!(e.to_string().contains("could not be unwrapped"), "{e}");
    kms.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let b = build().unwrap();
    assert_eq!(b.keyring().active_id(), Some(first.clone()));
    let rotator = idle_rotator(&b);
    eventually("b's rotator is elected", Duration::from_secs(60), || {
        rotator.is_elected()
    });

    // The KMS goes away; a new key arrives that b cannot unwrap.
    kms.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let second = a.rotate_now(Algorithm::EdDsa, now + 1).unwrap();
    eventually(
        "b reports the key it cannot unwrap",
        Duration::from_secs(30),
        || b.stats().bad_records >= 1,
    );
    // It keeps the key it holds (now inactive: it still verifies) and signs
    // with nothing it cannot see; nor does its rotator "repair" the gap.
    assert!(b.keyring().verifying_key(first.as_str()).is_some());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rotator.stats().actions, 0, "{:?}", rotator.stats());
    // The KMS is back: the key arrives without any further change.
    kms.down.store(false, std::sync::atomic::Ordering::SeqCst);
    eventually("b unwraps the new key", Duration::from_secs(30), || {
        b.keyring().active_id() == Some(second.clone())
    });
    assert_eq!(b.stats().bad_records, 0);
    assert_eq!(rotator.stats().actions, 0, "{:?}", rotator.stats());
}

/// The `Keyring` a replicated keyring hands out refuses local changes, and
/// once the replicated keyring is dropped it stops signing (nothing would
/// tell it about rotations any more) while it still verifies.
#[test]
fn the_handed_out_keyring_is_a_copy() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-copy/";
    let a = open(cluster.config(0, &[0]), prefix);
    let now = unix_now();
    let kid = a.rotate(Algorithm::EdDsa, now).unwrap();
    let kr = a.keyring();
    let e = kr.rotate(now).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("EtcdKeyring"), "{e}");
    assert!(kr.deprecate(kid.as_str(), now).is_err());
    assert!(kr.promote_due(now + 100).is_empty());
    let issuer = Issuer::new(kr.clone());
    let t = token(&issuer, now);
    drop(a);
    let e = issuer
        .issue(&common::issue_request_task(), now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::NoActiveKey, "{e}");
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    Verifier::builder(kr, store, Audience::new("vault.io").unwrap())
        .build()
        .verify(&t, now)
        .unwrap();
}

/// Security round 3 (issue 40, item 7): an etcd cluster restored from an
/// older snapshot without `--bump-revision` (etcd 3.4's `etcdctl snapshot
/// restore` has no such flag) goes back in revision. The copy must not keep
/// its newer keys as current (nor prove them current), and must follow the
/// restored cluster, whose changes reuse revisions the copy has seen: a watch
/// started past them would never deliver them.
#[test]
fn a_cluster_restored_from_an_older_snapshot_is_followed_never_served_as_current() {
    const LIMIT: Duration = Duration::from_secs(30);
    let mut cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-restored/";
    let url = cluster.url(0);
    let kr = open(cluster.config_for(&url, &[&url]), prefix);
    let a = kr.rotate_now(Algorithm::EdDsa, unix_now()).unwrap();
    let snapshot = cluster.snapshot("before-rotation.db");
    let at_snapshot = cluster.revision();
    // After the snapshot: two rotations, so the copy is well ahead of it.
    kr.rotate_now(Algorithm::EdDsa, unix_now()).unwrap();
    let c = kr.rotate_now(Algorithm::EdDsa, unix_now()).unwrap();
    eventually("the copy holds the last rotation", LIMIT, || {
        actives(&kr.keyring(), Algorithm::EdDsa) == [c.to_string()]
    });
    let ahead = kr.stats().revision;
    assert!(ahead > at_snapshot, "{ahead} vs {at_snapshot}");

    cluster.restore(&snapshot);
    let restored = cluster.revision();
    assert!(
        restored < ahead,
        "the restore did not go back: {restored} vs {ahead}"
    );
    // The copy notices, lists etcd as it now is, and says so.
    eventually("the copy follows the restored cluster", LIMIT, || {
        let s = kr.stats();
        s.revision_resets >= 1 && s.revision == restored
    });
    eventually("the restored keys replace the newer ones", LIMIT, || {
        actives(&kr.keyring(), Algorithm::EdDsa) == [a.to_string()]
    });
    assert!(
        kr.keyring().key_info(c.as_str()).is_none(),
        "a key the restored cluster does not hold is still served"
    );
    // A change made on the restored cluster reuses a revision the copy had
    // seen before the restore; it still reaches the copy.
    let other = open(cluster.config_for(&url, &[&url]), prefix);
    let d = other.rotate_now(Algorithm::EdDsa, unix_now()).unwrap();
    assert!(
        cluster.revision() <= ahead,
        "the change should reuse an old revision: {} vs {ahead}",
        cluster.revision()
    );
    eventually(
        "the copy sees the change made after the restore",
        LIMIT,
        || actives(&kr.keyring(), Algorithm::EdDsa) == [d.to_string()],
    );
}

/// `rotate_now` (a compromised key replaced at once) cancels the successor
/// prepublished for the replaced key (issue 41, item 5): left pending, it
/// would take over from the new key when its time came (an operator saw the
/// rotator promote the older pending key over the immediate one).
/// Kubernetes keys on the replicated keyring: an EdDSA one is refused
/// before anything is written; an ES256 one replicates with its purpose to
/// another process, which signs service-account tokens with it and never
/// publishes it in the JWKS.
#[test]
fn kubernetes_keys_replicate_with_their_purpose() {
    const LIMIT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let url = cluster.url(0);
    let prefix = "/wid-test/kubernetes/";
    let a = open(cluster.config_for(&url, &[&url]), prefix);
    let b = open(cluster.config_for(&url, &[&url]), prefix);
    let now = unix_now();
    let e = a
        .rotate_now_purpose(KeyPurpose::Kubernetes, Algorithm::EdDsa, now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("ES256 or RS256"), "{e}");
    assert!(a.keyring().keys().is_empty());
    a.set_policy(&workload_identity::KeyringPolicy::new(Some(
        Duration::from_secs(3600),
    )))
    .unwrap();
    let kid = a
        .rotate_now_purpose(KeyPurpose::Kubernetes, Algorithm::Es256, now)
        .unwrap();
    eventually("the other copy holds the kubernetes key", LIMIT, || {
        b.keyring()
            .active_id_for_purpose(KeyPurpose::Kubernetes, Algorithm::Es256)
            .as_ref()
            == Some(&kid)
    });
    assert!(b.keyring().jwks().keys.is_empty());
    let signer = workload_identity::ServiceAccountSigner::new(
        &b.keyring(),
        "https://cluster.example",
        Algorithm::Es256,
    )
    .unwrap();
    eventually("the other copy holds the policy", LIMIT, || {
        signer.check_ready().is_ok()
    });
    let claims = {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
            r#"{{"iss":"https://cluster.example","sub":"system:serviceaccount:a:b","exp":{}}}"#,
            now + 600
        ))
    };
    assert_eq!(signer.sign(&claims, now).unwrap().kid, kid);
    assert_eq!(signer.keys().len(), 1);
    assert_eq!(
        signer.data_timestamp(),
        a.keyring().key_info(kid.as_str()).unwrap().create_time
    );
}

#[test]
fn an_immediate_rotation_cancels_the_pending_successor() {
    const LIMIT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let url = cluster.url(0);
    let kr = open(cluster.config_for(&url, &[&url]), "/wid-test/immediate/");
    let now = unix_now();
    let first = kr.rotate_now(Algorithm::Es256, now).unwrap();
    let pending = kr.prepublish(Algorithm::Es256, now, now + 2).unwrap();
    // A WIT key's pending successor is another pair's: left alone.
    kr.rotate_now_purpose(KeyPurpose::Wit, Algorithm::Es256, now)
        .unwrap();
    let wit_pending = kr
        .prepublish_purpose(KeyPurpose::Wit, Algorithm::Es256, now, now + 2)
        .unwrap();
    let replacement = kr.rotate_now(Algorithm::Es256, now).unwrap();
    eventually("the copy holds the immediate rotation", LIMIT, || {
        actives(&kr.keyring(), Algorithm::Es256).contains(&replacement.to_string())
    });
    let info = |kid: &workload_identity::KeyId| kr.keyring().key_info(kid.as_str()).unwrap();
    assert_eq!(
        info(&pending).state,
        KeyState::Deprecated,
        "the successor was not cancelled"
    );
    assert_eq!(info(&first).state, KeyState::Inactive);
    assert_eq!(info(&wit_pending).state, KeyState::Prepublished);
    // When the cancelled key's time comes, nothing replaces the new key.
    let promoted = kr.promote_due(now + 3).unwrap_or_default();
    assert!(!promoted.contains(&pending), "{promoted:?}");
    assert_eq!(
        kr.keyring().active_id_for(Algorithm::Es256),
        Some(replacement)
    );
}

/// The policy stored at `<prefix>policy` rules every process of the keyring:
/// it reaches every copy, issuers keep its longest TTL, a rotator given
/// another policy refuses to start (one following the stored policy runs
/// it), and a deprecated key is removed only after every token it signed
/// expired and the retention passed.
#[test]
fn the_stored_policy_rules_every_process() {
    const LIMIT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/policy/";
    // Two processes' copies, each through its own member.
    let kr1 = open(cluster.config(0, &[0, 1, 2]), prefix);
    let kr2 = open(cluster.config(1, &[1, 2, 0]), prefix);
    assert_eq!(kr1.policy(), None);
    let now = unix_now();
    // A key that stopped signing two hours ago, and its successor.
    let old = kr1.rotate_now(Algorithm::Es256, now - 10_000).unwrap();
    let current = kr1.rotate_now(Algorithm::Es256, now - 7_200).unwrap();
    let policy = workload_identity::KeyringPolicy::new(Some(Duration::from_secs(3600)))
        .rotation_threshold(Duration::from_secs(24 * 3600))
        .lead_time(Duration::from_secs(1))
        .retention(Duration::from_secs(1));
    kr1.set_policy(&policy).unwrap();
    eventually("the policy reaches the other copy", LIMIT, || {
        kr2.policy() == Some(policy)
    });
    assert_eq!(
        kr2.keyring().longest_token_ttl(),
        Some(Duration::from_secs(3600))
    );

    // Issuers of the keyring keep the promise.
    let issuer = Issuer::new(kr2.keyring()).algorithm(Algorithm::Es256);
    let mut req = common::issue_request_task();
    req.identity.ttl = workload_identity::model::GoDuration::from_secs(7200);
    let e = issuer.issue(&req, now).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("LongestTTL (1h)"), "{e}");

    // A candidate given other thresholds (the operator's fourth server with
    // a one-minute policy) is refused, naming what differs.
    let refused = kr2
        .start_rotator(RotatorOptions::new(
            RotationPolicy::new(Some(Duration::from_secs(60)))
                .rotation_threshold(Duration::from_secs(60)),
        ))
        .unwrap_err();
    assert_eq!(refused.code(), ResultCode::InvalidArgument);
    let msg = refused.to_string();
    assert!(
        msg.contains("RotationThreshold: 24h") && msg.contains("LongestTTL: 1h"),
        "{msg}"
    );

    // One that follows the stored policy deprecates the old key (its tokens
    // expired an hour ago) and, after the retention, removes it; the
    // current key is untouched.
    let rotator = kr2
        .start_rotator(
            RotatorOptions::stored_policy()
                .lease_ttl(Duration::from_secs(3))
                .interval(Duration::from_millis(100)),
        )
        .unwrap();
    eventually("the old key is removed after the retention", LIMIT, || {
        kr1.keyring().key_info(old.as_str()).is_none()
    });
    assert_eq!(
        kr1.keyring().active_id_for(Algorithm::Es256),
        Some(current.clone())
    );
    // The deprecation and the removal, each counted once its own copy has
    // it (which may be after the other copy saw it).
    eventually("the rotator counts both actions", LIMIT, || {
        rotator.stats().actions >= 2
    });

    // A change of the policy while a rotator runs is followed at once.
    let longer = policy.retention(Duration::from_secs(3600));
    kr1.set_policy(&longer).unwrap();
    eventually("the copy takes the new policy", LIMIT, || {
        kr2.policy() == Some(longer)
    });
    drop(rotator);
}

/// `EtcdKeyring::revoke`: the active key is replaced and deprecated in one
/// transaction, and a verifier fed by another copy's watch (with an
/// `EtcdMirror` as its allocation store) refuses its tokens; the new key's
/// tokens verify; an inactive key is revoked without a replacement.
#[test]
fn a_revoked_key_is_refused_by_every_watcher() {
    const LIMIT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let url = cluster.url(0);
    let config = cluster.config_for(&url, &[&url]);
    let prefix = "/wid-test/revoke/";
    let kr1 = open(config.clone(), prefix);
    let kr2 = open(config.clone(), prefix);
    let now = unix_now();
    let first = kr1.rotate_now(Algorithm::EdDsa, now - 100).unwrap();
    let compromised = kr1.rotate_now(Algorithm::EdDsa, now).unwrap();
    workload_identity::EtcdStore::new(config.clone())
        .unwrap()
        .put_allocation(&common::allocation())
        .unwrap();
    let mirror = Arc::new(
        workload_identity::EtcdMirror::builder(config)
            .start()
            .unwrap(),
    );
    assert!(mirror.wait_ready(LIMIT), "{:?}", mirror.stats());
    eventually("the copy holds the key", LIMIT, || {
        kr2.keyring().active_id_for(Algorithm::EdDsa) == Some(compromised.clone())
    });
    let verifier = Verifier::builder(
        kr2.keyring(),
        mirror,
        workload_identity::Audience::new("vault.io").unwrap(),
    )
    .build();
    let issuer = Issuer::new(kr1.keyring());
    let stolen = token(&issuer, now);
    verifier.verify(&stolen, now).unwrap();

    let replacement = kr1.revoke(compromised.as_str(), now).unwrap().unwrap();
    eventually("the watcher refuses the revoked key's token", LIMIT, || {
        verifier
            .verify(&stolen, now)
            .is_err_and(|e| e.code() == ResultCode::UnknownKey)
    });
    assert!(
        !kr2.keyring()
            .jwks()
            .to_json()
            .contains(compromised.as_str()),
        "the revoked key is still published"
    );
    let kr = kr2.keyring();
    assert_eq!(
        kr.key_info(compromised.as_str()).unwrap().state,
        KeyState::Deprecated
    );
    eventually("the replacement signs", LIMIT, || {
        kr1.keyring().active_id_for(Algorithm::EdDsa) == Some(replacement.clone())
    });
    verifier.verify(&token(&issuer, now), now).unwrap();
    // An inactive key is only deprecated; revoking it again changes nothing.
    assert_eq!(kr1.revoke(first.as_str(), now).unwrap(), None);
    eventually("the inactive key is deprecated", LIMIT, || {
        kr1.keyring().key_info(first.as_str()).unwrap().state == KeyState::Deprecated
    });
    assert_eq!(kr1.revoke(first.as_str(), now).unwrap(), None);
    assert_eq!(
        kr1.keyring().active_id_for(Algorithm::EdDsa),
        Some(replacement)
    );
}

/// A prefix emptied by hand (`etcdctl del --prefix`, say, before a restore)
/// loses its wrapping record with the keys: the first change written after
/// it (here the elected rotator's first key) writes the record again in the
/// same transaction, so a process given the KEK opens the keyring after it.
#[test]
fn an_emptied_prefix_gets_its_wrapping_record_back_with_the_first_key() {
    const LIMIT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let url = cluster.url(0);
    let config = cluster.config_for(&url, &[&url]);
    let prefix = "/wid-test/emptied/";
    let kr = open(config.clone(), prefix);
    kr.rotate_now(Algorithm::EdDsa, unix_now()).unwrap();
    // Everything under the prefix, gone.
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    cluster.admin_any(
        "/v3/kv/deleterange",
        &serde_json::json!({"key": b64(prefix), "range_end": base64_encode(&end)}),
    );
    eventually("the copy sees the prefix empty", LIMIT, || {
        kr.keyring().is_empty()
    });
    let rotator = kr
        .start_rotator(
            RotatorOptions::stored_policy()
                .lease_ttl(Duration::from_secs(3))
                .interval(Duration::from_millis(100)),
        )
        .unwrap();
    eventually("the rotator makes a first key", LIMIT, || {
        kr.keyring().active_id_for(Algorithm::EdDsa).is_some()
    });
    drop(rotator);
    // Another process, given the KEK, opens it (it would be refused as a
    // keyring of plaintext keys without the record).
    let other = open(config, prefix);
    assert_eq!(
        other.keyring().active_id_for(Algorithm::EdDsa),
        kr.keyring().active_id_for(Algorithm::EdDsa)
    );
}

/// Security round 4 (issue 51, item 3b): the SPIFFE bundle sequence is a
/// stored counter raised in the transaction of every change, so it changes
/// with every change of the published keys (a hand deprecation and a
/// removal included, which move no recorded moment), never falls, and is
/// the same on every copy of the prefix and after a restart.
#[test]
fn the_bundle_sequence_rises_with_every_change_on_every_copy() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-sequence/";
    let writer = open(cluster.config(0, &[0, 1, 2]), prefix);
    let reader = open(cluster.config(1, &[1, 2, 0]), prefix);
    let now = 1_700_000_000;
    let same_on_both = |what: &str| -> u64 {
        let want = writer.keyring().spiffe_sequence();
        eventually(what, Duration::from_secs(30), || {
            reader.keyring().spiffe_sequence() == want
        });
        want
    };
    let first = writer.rotate_now(Algorithm::Es256, now).unwrap();
    let s1 = same_on_both("the first key's sequence");
    assert!(s1 >= now as u64, "{s1}");
    writer.rotate_now(Algorithm::Es256, now + 10).unwrap();
    let s2 = same_on_both("after a rotation");
    assert!(s2 > s1, "{s2} after {s1}");
    // A deprecation by hand: the bundle loses a key, no moment moves.
    let before = writer.keyring().spiffe_bundle_json(Duration::from_secs(1));
    writer.deprecate(first.as_str(), now + 20).unwrap();
    assert_ne!(
        writer.keyring().spiffe_bundle_json(Duration::from_secs(1)),
        before
    );
    let s3 = same_on_both("after a hand deprecation");
    assert_eq!(s3, s2 + 1);
    writer.remove(first.as_str()).unwrap();
    let s4 = same_on_both("after a removal");
    assert_eq!(s4, s3 + 1);
    // The reader makes a change: the writer's copy follows it.
    reader.rotate(Algorithm::Rs256, now + 30).unwrap();
    let s5 = reader.keyring().spiffe_sequence();
    eventually(
        "the writer follows the reader",
        Duration::from_secs(30),
        || writer.keyring().spiffe_sequence() == s5,
    );
    assert!(s5 > s4);
    // A restart (a new copy) serves the same sequence and bundle.
    let bundle = writer
        .keyring()
        .spiffe_endpoint_bundle_json(Duration::from_secs(60));
    drop(writer);
    let restarted = open(cluster.config(2, &[2, 0, 1]), prefix);
    assert_eq!(restarted.keyring().spiffe_sequence(), s5);
    assert_eq!(
        restarted
            .keyring()
            .spiffe_endpoint_bundle_json(Duration::from_secs(60)),
        bundle
    );
    // A copy exported to a keystore keeps it.
    assert_eq!(restarted.export().unwrap().spiffe_sequence(), s5);
}

fn rotator_with(
    kr: &EtcdKeyring,
    options: RotatorOptions,
) -> Result<Rotator, workload_identity::Error> {
    kr.start_rotator(
        options
            .lease_ttl(Duration::from_secs(3))
            .interval(Duration::from_millis(100)),
    )
}

/// Security round 4 (issue 51, item 2): a keyring made without a stored
/// policy (as `wid keyring init` made them before it stored one) gets its
/// first rotator's, by a compare-and-set; a second candidate with a
/// shorter LongestTTL then refuses to start instead of taking over and
/// deprecating a key whose live token it would reject.
#[test]
fn the_first_rotator_stores_its_policy_and_another_one_is_refused() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-first-policy/";
    let a = open(cluster.config(0, &[0, 1, 2]), prefix);
    let b = open(cluster.config(1, &[1, 2, 0]), prefix);
    let now = unix_now();
    a.rotate_now(Algorithm::Es256, now).unwrap();
    assert!(a.policy().is_none(), "made without a policy");

    let hour = RotationPolicy::new(Some(Duration::from_secs(3600)))
        .rotation_threshold(Duration::from_secs(7200));
    let first = rotator_with(&a, RotatorOptions::new(hour)).unwrap();
    let stored = a.policy().expect("stored by the first rotator");
    assert_eq!(stored.longest_token_ttl, Some(Duration::from_secs(3600)));
    assert_eq!(stored.rotation_threshold, Duration::from_secs(7200));
    assert_eq!(stored.lead_time, Duration::from_secs(1), "a's lead time");
    eventually("b's copy has the policy", Duration::from_secs(30), || {
        b.policy() == Some(stored)
    });

    // The operator's second candidate, with a shorter promise: refused,
    // naming the value and the stored one.
    let short = RotationPolicy::new(Some(Duration::from_secs(60)))
        .rotation_threshold(Duration::from_secs(7200));
    let e = rotator_with(&b, RotatorOptions::new(short)).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("stored LongestTTL: 1h"), "{msg}");
    // Its issuers keep the stored promise too.
    let issuer = Issuer::new(b.keyring());
    let mut long = common::issue_request_task();
    long.identity.ttl = workload_identity::model::GoDuration::from_secs(7200);
    let e = issuer.issue_with(Algorithm::Es256, &long, now).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    // A candidate that follows the stored policy starts under it.
    let follower = rotator_with(&b, RotatorOptions::stored_policy()).unwrap();
    assert_eq!(b.policy(), Some(stored));
    drop(follower);
    drop(first);
}

/// Candidates racing to be the first to store a policy: exactly one policy
/// is stored, its candidate starts, and every candidate with other values
/// is refused, whatever the order.
#[test]
fn racing_first_rotators_store_exactly_one_policy() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let prefix = "/wid-test/keyring-racing-policy/";
    let copies: Vec<EtcdKeyring> = (0..3)
        .map(|i| open(cluster.config(i, &[i, (i + 1) % 3, (i + 2) % 3]), prefix))
        .collect();
    copies[0].rotate_now(Algorithm::EdDsa, unix_now()).unwrap();
    let barrier = Arc::new(Barrier::new(3));
    let results: Vec<(u64, Result<Rotator, workload_identity::Error>)> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = copies
                .iter()
                .enumerate()
                .map(|(i, kr)| {
                    let barrier = Arc::clone(&barrier);
                    scope.spawn(move || {
                        let ttl = 600 * (i as u64 + 1);
                        let policy = RotationPolicy::new(Some(Duration::from_secs(ttl)));
                        barrier.wait();
                        (ttl, rotator_with(kr, RotatorOptions::new(policy)))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
    let started: Vec<u64> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(ttl, _)| *ttl)
        .collect();
    assert_eq!(
        started.len(),
        1,
        "{:?}",
        results
            .iter()
            .map(|(t, r)| (t, r.as_ref().err().map(ToString::to_string)))
            .collect::<Vec<_>>()
    );
    for (_, r) in &results {
        if let Err(e) = r {
            assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
        }
    }
    let stored = copies[0].policy().unwrap();
    assert_eq!(
        stored.longest_token_ttl,
        Some(Duration::from_secs(started[0]))
    );
    for kr in &copies {
        eventually(
            "every copy has the one policy",
            Duration::from_secs(30),
            || kr.policy() == Some(stored),
        );
    }
}

/// Candidates storing their policy on a keyring that has none (at once, or
/// one after another as rotators started in turn) all come back with the
/// one that won, whichever moment the winner's record reaches each copy:
/// a record that arrives mid-attempt is the stored policy, not an unusable
/// one.
#[test]
fn racing_policy_stores_all_answer_with_the_winner() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    for round in 0..20 {
        let prefix = format!("/wid-test/keyring-policy-race-{round}/");
        let copies: Vec<EtcdKeyring> = (0..3)
            .map(|i| open(cluster.config(i, &[i, (i + 1) % 3, (i + 2) % 3]), &prefix))
            .collect();
        // Keys to unwrap make each copy's sync of the winner's record take
        // a while after its watch saw it.
        for alg in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
            copies[0].rotate_now(alg, unix_now()).unwrap();
        }
        let policy_of = |i: usize| {
            workload_identity::KeyringPolicy::new(Some(Duration::from_secs(600 * (i as u64 + 1))))
        };
        let answers: Vec<Result<workload_identity::KeyringPolicy, workload_identity::Error>> =
            if round % 2 == 1 {
                // One after another, as rotators started in turn: the next
                // asks while the first one's record is on its way to it.
                copies
                    .iter()
                    .enumerate()
                    .map(|(i, kr)| kr.store_policy_if_none(&policy_of(i)))
                    .collect()
            } else {
                let barrier = Arc::new(Barrier::new(3));
                std::thread::scope(|scope| {
                    let handles: Vec<_> = copies
                        .iter()
                        .enumerate()
                        .map(|(i, kr)| {
                            let barrier = Arc::clone(&barrier);
                            scope.spawn(move || {
                                barrier.wait();
                                kr.store_policy_if_none(&policy_of(i))
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                })
            };
        let answers: Vec<workload_identity::KeyringPolicy> = answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|e| panic!("round {round}: {e}")))
            .collect();
        assert!(
            answers.iter().all(|a| *a == answers[0]),
            "round {round}: {answers:?}"
        );
        for kr in &copies {
            eventually(
                "every copy holds the winner",
                Duration::from_secs(30),
                || kr.policy() == Some(answers[0]),
            );
        }
    }
}

/// Raw access to one prefix of the cluster, as someone who can write etcd
/// but holds no KEK.
struct EtcdWriter<'a> {
    cluster: &'a Cluster,
    prefix: &'a str,
}

impl EtcdWriter<'_> {
    fn put(&self, suffix: &str, value: &[u8]) {
        self.cluster.admin_any(
            "/v3/kv/put",
            &serde_json::json!({"key": b64(&format!("{}{suffix}", self.prefix)), "value": base64_encode(value)}),
        );
    }
    fn get(&self, suffix: &str) -> Vec<u8> {
        let r = self.cluster.admin_any(
            "/v3/kv/range",
            &serde_json::json!({"key": b64(&format!("{}{suffix}", self.prefix))}),
        );
        base64_decode(r["kvs"][0]["value"].as_str().unwrap())
    }
    fn delete(&self, suffix: &str) {
        self.cluster.admin_any(
            "/v3/kv/deleterange",
            &serde_json::json!({"key": b64(&format!("{}{suffix}", self.prefix))}),
        );
    }
}

/// `record` with the string value of `field` replaced by `value` (a
/// msgpack map: its entries are not length-prefixed, so the value may grow).
fn with_string(record: &[u8], field: &str, old: &str, value: &str) -> Vec<u8> {
    let mut key = vec![0xa0 | field.len() as u8];
    key.extend_from_slice(field.as_bytes());
    let mut was = vec![0xa0 | old.len() as u8];
    was.extend_from_slice(old.as_bytes());
    let at = record
        .windows(key.len())
        .position(|w| w == key.as_slice())
        .expect("the field")
        + key.len();
    assert_eq!(&record[at..at + was.len()], was.as_slice(), "the old value");
    let mut out = record[..at].to_vec();
    out.push(0xa0 | value.len() as u8);
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(&record[at + was.len()..]);
    out
}

/// Security round 4 (issue 51, item 1): records in etcd are followed only
/// as the keyring's authenticated manifest lists them. Someone who can write
/// etcd but holds no KEK replays a revoked key's earlier record, makes a WIT
/// key a bearer key and lowers the LongestTTL: the running copy and every
/// process opened afterwards refuse each record (counted), and follow
/// nothing of it; a forged manifest is refused whole; stripping the record
/// key makes new processes refuse to open rather than follow unauthenticated
/// records.
#[test]
fn records_written_without_the_kek_are_never_followed() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-sealed/";
    let etcd = EtcdWriter {
        cluster: &cluster,
        prefix,
    };
    let a = open(cluster.config(0, &[0]), prefix);
    assert!(a.records_authenticated());
    let now = unix_now();
    let first = a.rotate_now(Algorithm::Es256, now).unwrap();
    let wit = a
        .rotate_now_purpose(KeyPurpose::Wit, Algorithm::Es256, now)
        .unwrap();
    a.set_policy(&workload_identity::KeyringPolicy::new(Some(
        Duration::from_secs(3600),
    )))
    .unwrap();
    let token = Issuer::new(a.keyring())
        .issue_with(Algorithm::Es256, &common::issue_request_task(), now)
        .unwrap()
        .token;
    let verifies = |kr: Keyring| {
        let store = Arc::new(MemoryStore::new());
        store.upsert(&common::allocation());
        Verifier::builder(kr, store, Audience::new("vault.io").unwrap())
            .key_wait(Duration::ZERO)
            .build()
            .verify(&token, now)
            .is_ok()
    };
    assert!(verifies(a.keyring()));
    // The first key's record while it was good, then its revocation.
    let before_revoke = etcd.get(&format!("keys/{first}"));
    a.revoke(first.as_str(), now + 10).unwrap();
    assert!(!verifies(a.keyring()));
    let revision = a.stats().revision;

    // The attacks, as plain etcd writes.
    etcd.put(&format!("keys/{first}"), &before_revoke);
    let wit_record = etcd.get(&format!("keys/{wit}"));
    etcd.put(
        &format!("keys/{wit}"),
        &with_string(&wit_record, "Purpose", "wit", "bearer"),
    );
    let policy = etcd.get("policy");
    // LongestTTL 1 h (3.6e12 ns, an int64) made 1 s: the same encoding.
    let hour = 3_600_000_000_000i64.to_be_bytes();
    let at = policy.windows(8).position(|w| w == hour).unwrap();
    let mut lowered = policy.clone();
    lowered[at..at + 8].copy_from_slice(&1_000_000_000i64.to_be_bytes());
    etcd.put("policy", &lowered);

    eventually(
        "a refuses the three records",
        Duration::from_secs(30),
        || a.stats().refused_records >= 3,
    );
    assert!(a.stats().revision > revision);
    let b = open(cluster.config(0, &[0]), prefix);
    for (who, kr) in [("a", &a), ("b", &b)] {
        let keys = kr.keyring();
        assert!(
            !verifies(keys.clone()),
            "{who}: the revoked key verifies again"
        );
        assert!(
            keys.jwks().keys.iter().all(|k| k.kid != wit.as_str()),
            "{who}: the WIT key is in the bearer JWKS"
        );
        assert_ne!(
            kr.policy().and_then(|p| p.longest_token_ttl),
            Some(Duration::from_secs(1)),
            "{who}: the lowered LongestTTL is followed"
        );
        assert!(kr.stats().refused_records >= 3, "{who}: {:?}", kr.stats());
        assert!(kr.stats().bad_records >= 3, "{who}: {:?}", kr.stats());
    }
    // a still holds what it held: the policy, the WIT key as a WIT key.
    assert_eq!(
        a.policy().unwrap().longest_token_ttl,
        Some(Duration::from_secs(3600))
    );
    assert_eq!(
        a.keyring().key_info(wit.as_str()).unwrap().purpose,
        KeyPurpose::Wit
    );

    // A manifest rewritten by hand (its MAC cannot be made): refused whole.
    let manifest = etcd.get("sequence");
    let mut forged = manifest.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1; // the sequence number's last byte
    etcd.put("sequence", &forged);
    eventually("a refuses the manifest", Duration::from_secs(30), || {
        a.stats()
            .last_error
            .is_some_and(|e| e.contains("not authenticated by the record key"))
    });
    assert!(
        a.keyring().key_info(wit.as_str()).is_some(),
        "a keeps the keys it held"
    );
    // A change by a holder of the KEK is planned on the manifest last
    // followed and writes an authenticated one again: every copy follows it,
    // and the records written by hand stay refused.
    let next = a.rotate_now(Algorithm::Es256, now + 20).unwrap();
    eventually("b follows the change", Duration::from_secs(30), || {
        b.keyring().active_id_for(Algorithm::Es256) == Some(next.clone())
    });
    for kr in [&a, &b] {
        assert!(!verifies(kr.keyring()));
        assert!(
            kr.keyring()
                .jwks()
                .keys
                .iter()
                .all(|k| k.kid != wit.as_str())
        );
    }

    // The record key stripped from the wrapping record: a new process
    // refuses to open, naming the migration.
    let wrapping = etcd.get("wrapping");
    let stripped = etcd_support::without_record_key(&wrapping);
    etcd.put("wrapping", &stripped);
    let e = EtcdKeyring::builder(cluster.config(0, &[0]))
        .prefix(prefix)
        .wrapper(kek())
        .open()
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(
        e.to_string()
            .contains("wid keyring migrate --authenticate-records"),
        "{e}"
    );
}

/// A keyring of the format before (no record key, no manifest): refused by
/// default, opened with `allow_unauthenticated_records`, sealed once by
/// `authenticate_records` (which lists the records as they are), and from
/// then on authenticated for every process.
#[test]
fn a_keyring_of_the_format_before_is_sealed_once() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let prefix = "/wid-test/keyring-legacy/";
    let etcd = EtcdWriter {
        cluster: &cluster,
        prefix,
    };
    let now = unix_now();
    let kid = {
        let a = open(cluster.config(0, &[0]), prefix);
        a.rotate_now(Algorithm::EdDsa, now).unwrap()
    };
    // Made old: the wrapping record without its record key, no manifest.
    let wrapping = etcd.get("wrapping");
    let old = etcd_support::without_record_key(&wrapping);
    etcd.put("wrapping", &old);
    etcd.delete("sequence");

    let builder = || {
        EtcdKeyring::builder(cluster.config(0, &[0]))
            .prefix(prefix)
            .wrapper(kek())
            .max_lag(Duration::from_millis(400))
            .lead_time(Duration::from_secs(1))
    };
    let e = builder().open().unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("not authenticated"), "{e}");
    let legacy = builder()
        .allow_unauthenticated_records(true)
        .open()
        .unwrap();
    assert!(!legacy.records_authenticated());
    assert_eq!(legacy.keyring().active_id(), Some(kid.clone()));
    assert_eq!(legacy.authenticate_records().unwrap(), Some(1));
    assert!(legacy.records_authenticated());
    assert_eq!(legacy.authenticate_records().unwrap(), None, "once");
    // Every process now opens it authenticated, and a change is followed.
    let sealed = builder().open().unwrap();
    assert!(sealed.records_authenticated());
    assert_eq!(sealed.keyring().active_id(), Some(kid.clone()));
    let next = legacy.rotate_now(Algorithm::EdDsa, now + 1).unwrap();
    eventually("the sealed copy follows", Duration::from_secs(30), || {
        sealed.keyring().active_id() == Some(next.clone())
    });
    assert_eq!(sealed.stats().refused_records, 0, "{:?}", sealed.stats());
    // A record written by hand now is refused.
    let record = etcd.get(&format!("keys/{kid}"));
    etcd.put(
        &format!("keys/{kid}"),
        &with_string(&record, "State", "inactive", "active"),
    );
    eventually(
        "the hand-written record is refused",
        Duration::from_secs(30),
        || sealed.stats().refused_records >= 1,
    );
    assert_eq!(sealed.keyring().active_id(), Some(next));
}
