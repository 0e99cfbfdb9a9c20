//! The etcd stores against real 3-member clusters on loopback: seed 000's
//! lagging member (one member cut off from its peers while it keeps serving
//! clients), TLS with client certificates and etcd's user auth, and the
//! watch-fed mirror through cut streams, compaction, a frozen watch, killed and
//! restarted members.
//!
//! Needs the `etcd` feature, Debian's `etcd-server` (`/usr/bin/etcd`),
//! `openssl` and root (members run under their own uids so `iptables` can cut
//! exactly one member's peer traffic). `.ci/run` installs what is missing and
//! runs `cargo test --features etcd --test etcd_cluster`. Clusters and
//! firewall chains are always torn down, also when a test fails.
#![cfg(feature = "etcd")]

mod common;
mod etcd_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_support::{Cluster, Options, PREFIX, Proxy, Security, eventually};
use workload_identity::model::Allocation;
use workload_identity::{
    AllocState, Audience, Consistency, EtcdConfig, EtcdMirror, EtcdStore, Issuer, Keyring,
    MemoryStore, ResultCode, StateStore, Verifier,
};

fn alloc(id: &str, status: &str) -> Allocation {
    Allocation {
        id: id.into(),
        client_status: status.into(),
        ..common::allocation()
    }
}

fn token_for(issuer: &Issuer, alloc_id: &str, now: i64) -> String {
    let mut req = common::issue_request_task();
    req.allocation.id = alloc_id.into();
    issuer.issue(&req, now).unwrap().token
}

/// Cuts every proxied connection and refuses new ones (`true`), or lets
/// new ones through again (`false`).
fn cut_off(proxies: &[Proxy], refused: bool) {
    for p in proxies {
        p.block(refused);
        if refused {
            p.cut();
        }
    }
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn stale(store: &dyn StateStore, id: &str) -> Result<AllocState, String> {
    store
        .allocation_state(id, Consistency::Stale)
        .map_err(|e| e.message)
}

#[test]
fn a_lagging_member_falls_back_to_a_linearizable_read() {
    let mut cluster = Cluster::start(Options::new(Security::Plain));
    let now = workload_identity::unix_now();
    let keyring = Keyring::new();
    keyring.rotate(now).unwrap();
    let issuer = Issuer::new(keyring.clone());
    let x = cluster.follower();
    let healthy: Vec<usize> = (0..3).filter(|&i| i != x).collect();
    let writer = EtcdStore::new(cluster.config(healthy[0], &healthy)).unwrap();
    // The verifier's local member is x; consistent reads try x first, then the others.
    let local = Arc::new(EtcdStore::new(cluster.config(x, &[x, healthy[0], healthy[1]])).unwrap());
    let verifier = Verifier::builder(
        keyring.clone(),
        local.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .build();
    // A mirror whose local member is x too.
    let mirror = Arc::new(
        EtcdMirror::builder(cluster.config(x, &[x, healthy[0], healthy[1]]))
            .max_lag(Duration::from_millis(1500))
            .start()
            .unwrap(),
    );

    // Before the partition: a stale read on x already knows the allocation.
    writer
        .put_allocation(&alloc("a-before", "running"))
        .unwrap();
    eventually("x replicates a-before", Duration::from_secs(10), || {
        stale(&*local, "a-before") == Ok(AllocState::Live)
    });
    verifier
        .verify(&token_for(&issuer, "a-before", now), now)
        .unwrap();
    assert_eq!(verifier.stats().consistent_fallbacks, 0);
    assert!(
        mirror.wait_ready(Duration::from_secs(10)),
        "{:?}",
        mirror.stats()
    );
    eventually("the mirror sees a-before", Duration::from_secs(5), || {
        stale(&*mirror, "a-before") == Ok(AllocState::Live)
    });

    // Cut x off; write through the healthy members.
    cluster.isolate(x);
    let cut_at = Instant::now();
    assert!(
        writer
            .create_allocation(&alloc("a-new", "running"))
            .unwrap(),
        "txn create"
    );
    assert!(
        !writer
            .create_allocation(&alloc("a-new", "running"))
            .unwrap(),
        "the txn refuses a second create"
    );
    writer.put_allocation(&alloc("a-dead", "complete")).unwrap();
    writer.put_allocation(&alloc("a-before", "failed")).unwrap();

    // (a) x's serializable read says missing: it lags.
    assert_eq!(stale(&*local, "a-new"), Ok(AllocState::Missing));
    // (b) verification through x still accepts the fresh allocation's token.
    let started = Instant::now();
    let v = verifier
        .verify(&token_for(&issuer, "a-new", now), now)
        .unwrap();
    let fallback_ms = started.elapsed().as_millis();
    assert_eq!(v.claims.allocation_id, "a-new");
    assert_eq!(verifier.stats().consistent_fallbacks, 1);
    // (c) a terminal allocation is rejected the same way.
    let e = verifier
        .verify(&token_for(&issuer, "a-dead", now), now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::AllocationTerminal, "{e}");
    // Missing everywhere: not found (after the consistent read).
    let e = verifier
        .verify(&token_for(&issuer, "a-none", now), now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::AllocationNotFound, "{e}");

    // (d) The mirror on x: x lost its leader, so its watch is cancelled and the
    // mirror follows another member; it serves from memory again, with the
    // writes x never saw. x notices within two election timeouts (2-4 s), etcd
    // cancels its watches after three more (6 s), and a read tried on x first
    // costs one client timeout (3 s): generous, for a loaded host.
    eventually(
        "the mirror follows a healthy member",
        Duration::from_secs(30),
        || {
            stale(&*mirror, "a-before") == Ok(AllocState::Terminal)
                && mirror.stats().serving_from_memory
        },
    );
    let moved = cut_at.elapsed();
    assert_eq!(stale(&*mirror, "a-new"), Ok(AllocState::Live));
    let s = mirror.stats();
    assert!(s.watch_restarts >= 1, "{s:?}");
    println!(
        "mirror on the partitioned member: current from another member {} ms after the cut; {s:?}",
        moved.as_millis()
    );

    // Restore x: it catches up.
    cluster.heal();
    let caught_up = eventually(
        "x catches up after the partition healed",
        Duration::from_secs(30),
        || stale(&*local, "a-new") == Ok(AllocState::Live),
    );
    println!(
        "x caught up {} ms after the partition healed",
        caught_up.as_millis()
    );

    // Malformed records and unknown statuses fail closed.
    cluster.put_raw("a-garbage", b"\xc1not msgpack");
    let odd = workload_identity::codec::encode(&alloc("a-odd", "hibernating")).unwrap();
    cluster.put_raw("a-odd", &odd);
    let healthy_store = Arc::new(EtcdStore::new(cluster.config(healthy[0], &healthy)).unwrap());
    let v2 = Verifier::builder(
        keyring.clone(),
        healthy_store.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .build();
    for (id, why) in [
        ("a-garbage", "record of allocation"),
        ("a-odd", "unknown client status"),
    ] {
        let e = v2.verify(&token_for(&issuer, id, now), now).unwrap_err();
        assert_eq!(e.code(), ResultCode::StoreUnavailable, "{id}: {e}");
        assert!(e.to_string().contains(why), "{id}: {e}");
    }

    // Measure: stale hits on a healthy member vs the memory store, and the
    // latency a consistent fallback adds.
    let token = token_for(&issuer, "a-new", now);
    let n = 300;
    let t = Instant::now();
    for _ in 0..n {
        v2.verify(&token, now).unwrap();
    }
    let etcd_per_s = n as f64 / t.elapsed().as_secs_f64();
    let mem = Arc::new(MemoryStore::new());
    mem.upsert(&alloc("a-new", "running"));
    let vm = Verifier::builder(keyring.clone(), mem, Audience::new("vault.io").unwrap()).build();
    let t = Instant::now();
    for _ in 0..n {
        vm.verify(&token, now).unwrap();
    }
    let mem_per_s = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..50 {
        healthy_store
            .allocation_state("a-new", Consistency::Stale)
            .unwrap();
    }
    let stale_ms = t.elapsed().as_secs_f64() * 1000.0 / 50.0;
    let t = Instant::now();
    for _ in 0..50 {
        healthy_store
            .allocation_state("a-new", Consistency::Consistent)
            .unwrap();
    }
    let consistent_ms = t.elapsed().as_secs_f64() * 1000.0 / 50.0;
    println!(
        "measured: verify with etcd (stale hit) {etcd_per_s:.0}/s, with the memory store {mem_per_s:.0}/s; \
         serializable read {stale_ms:.2} ms, linearizable read {consistent_ms:.2} ms; \
         verify through the partitioned member with fallback {fallback_ms} ms (includes its read timeout)"
    );

    // (e) Every member down: verification fails closed, through the mirror too
    // once its proof of freshness is older than its bound.
    cluster.stop_all();
    let e = v2.verify(&token, now).unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable, "{e}");
    let e = verifier.verify(&token, now).unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable, "{e}");
    assert!(e.to_string().contains("etcd"), "{e}");
    eventually(
        "the mirror stops answering from memory",
        Duration::from_secs(5),
        || stale(&*mirror, "a-new").is_err(),
    );
}

/// A client configuration like `cluster.config`, changed by `f`.
fn tls_config(cluster: &Cluster, f: impl FnOnce(EtcdConfig) -> EtcdConfig) -> EtcdConfig {
    f(cluster.config(1, &[1]))
}

#[test]
fn tls_client_certificates_and_auth() {
    let opts = Options {
        bad_certificate: Some(0),
        auth_token_ttl: Some(2),
        ..Options::new(Security::MutualTls)
    };
    let cluster = Cluster::start(opts);
    cluster.enable_auth();
    let creds = |c: EtcdConfig| c.credentials("wid", "wid-pw");
    // Member 0 serves a certificate from another CA: skipped for consistent
    // reads and writes, which the next member answers.
    let store = EtcdStore::new(creds(cluster.config(1, &[0, 1, 2]))).unwrap();
    store.put_allocation(&alloc("a1", "running")).unwrap();
    assert_eq!(
        store.allocation_state("a1", Consistency::Consistent),
        Ok(AllocState::Live)
    );
    assert_eq!(stale(&store, "a1"), Ok(AllocState::Live));
    let only_bad = EtcdStore::new(creds(cluster.config(0, &[0]))).unwrap();
    let e = only_bad
        .allocation_state("a1", Consistency::Consistent)
        .unwrap_err();
    assert!(e.message.contains("UnknownIssuer"), "{e}");

    // Refusals, each failing closed with a reason.
    let refused = |what: &str, config: EtcdConfig, expect: &[&str]| {
        let s = EtcdStore::new(config).unwrap();
        let e = s
            .allocation_state("a1", Consistency::Consistent)
            .expect_err(what);
        assert!(
            expect
                .iter()
                .any(|x| e.message.to_lowercase().contains(&x.to_lowercase())),
            "{what}: expected one of {expect:?} in {e}"
        );
        assert!(
            !e.message.contains("wid-pw") && !e.message.contains("nope-pw"),
            "{e}"
        );
        println!("{what}: {e}");
    };
    refused(
        "the members' CA is not trusted",
        creds(tls_config(&cluster, |c| {
            c.ca_bundle_pem(cluster.pki.read("other-ca.crt"))
        })),
        &["UnknownIssuer"],
    );
    refused(
        "no client certificate",
        creds(
            EtcdConfig::new(&cluster.url(1), &[&cluster.url(1)], PREFIX)
                .ca_bundle_pem(cluster.pki.read("ca.crt")),
        ),
        &[
            "certificate",
            "handshake",
            "Connection reset",
            "broken pipe",
            "closed",
        ],
    );
    refused(
        "a client certificate from another CA",
        creds(tls_config(&cluster, |c| {
            c.client_certificate_pem(
                cluster.pki.read("stranger.crt"),
                cluster.pki.read("stranger.key"),
            )
        })),
        &[
            "certificate",
            "handshake",
            "Connection reset",
            "broken pipe",
            "closed",
        ],
    );
    refused(
        "a wrong password",
        cluster.config(1, &[1]).credentials("wid", "nope-pw"),
        &["authentication failed"],
    );
    refused(
        "no credentials while auth is on",
        cluster.config(1, &[1]),
        &[
            "user name is empty",
            "permission denied",
            "invalid auth token",
        ],
    );
    let other_prefix = {
        let mut c = creds(cluster.config(1, &[1]));
        c.prefix = "/elsewhere".into();
        c
    };
    refused(
        "a prefix the role does not cover",
        other_prefix,
        &["permission denied"],
    );
    // Plain http is refused unless asked for.
    let e = EtcdStore::new(EtcdConfig::new(
        "http://127.0.0.1:1",
        &["http://127.0.0.1:1"],
        PREFIX,
    ))
    .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("plain http"), "{e}");

    // Secrets never reach Debug.
    let config = creds(cluster.config(1, &[0, 1, 2]));
    let key_pem = String::from_utf8(cluster.pki.read("wid.key")).unwrap();
    let key_line = key_pem.lines().nth(1).unwrap();
    for shown in [format!("{config:?}"), format!("{store:?}")] {
        assert!(!shown.contains("wid-pw"), "{shown}");
        assert!(!shown.contains(key_line), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }

    // An expired token is renewed: a token left unused past the TTL is
    // refused, and the store, whose token idled as long, still reads.
    //
    // etcd drops a simple token at its once-a-second sweep after the TTL (2 s)
    // without use, and every use starts the TTL again: the idle token is
    // tried once, after probes minted after it (so dropped no earlier) show
    // the sweep has run. A probe found alive was renewed by the look and is
    // not looked at again; the next ones are looked at later and later, up to
    // 40 s after minting (a limit only to catch a member that never drops
    // tokens).
    let authenticate = || {
        let r = cluster.admin(
            1,
            "/v3/auth/authenticate",
            &serde_json::json!({"name": "wid", "password": "wid-pw"}),
        );
        r.unwrap()["token"].as_str().unwrap().to_string()
    };
    let agent = cluster.admin_agent();
    // Whether member 1 takes `token`.
    let accepted = |token: &str| {
        let mut r = agent
            .post(&format!("{}/v3/kv/range", cluster.url(1)))
            .header("authorization", token)
            .send(serde_json::json!({"key": "L3dpZC10ZXN0"}).to_string())
            .unwrap();
        let body = r.body_mut().read_to_string().unwrap();
        if body.contains("invalid auth token") {
            false
        } else {
            assert!(
                body.contains("\"header\""),
                "neither an answer nor a refusal: {body}"
            );
            true
        }
    };
    let idle = authenticate();
    let probes: Vec<String> = (0..8).map(|_| authenticate()).collect();
    let minted = Instant::now();
    let mut look_at = Duration::from_millis(2500);
    let expired = probes.iter().any(|probe| {
        std::thread::sleep(look_at.saturating_sub(minted.elapsed()));
        look_at = look_at * 3 / 2;
        !accepted(probe)
    });
    assert!(
        expired,
        "no probe token expired within {:?} (TTL 2 s)",
        minted.elapsed()
    );
    assert!(!accepted(&idle), "an idle token still works");
    assert_eq!(
        store.allocation_state("a1", Consistency::Consistent),
        Ok(AllocState::Live),
        "the store did not renew its token"
    );
    assert_eq!(stale(&store, "a1"), Ok(AllocState::Live));

    // The mirror over mutual TLS and auth, its local member the mis-certified one.
    let mirror = EtcdMirror::builder(creds(cluster.config(0, &[0, 1, 2])))
        .max_lag(Duration::from_secs(1))
        .start()
        .unwrap();
    assert!(
        mirror.wait_ready(Duration::from_secs(10)),
        "{:?}",
        mirror.stats()
    );
    assert_eq!(stale(&mirror, "a1"), Ok(AllocState::Live));
    store.put_allocation(&alloc("a1", "complete")).unwrap();
    eventually(
        "the mirror sees a1 terminal",
        Duration::from_secs(5),
        || stale(&mirror, "a1") == Ok(AllocState::Terminal),
    );
    let s = mirror.stats();
    assert!(s.stale_from_memory >= 2 && s.serving_from_memory, "{s:?}");
}

#[test]
fn the_mirror_survives_cuts_compaction_freezes_kills_and_restarts() {
    let mut cluster = Cluster::start(Options::new(Security::Tls));
    let now = workload_identity::unix_now();
    let keyring = Keyring::new();
    keyring.rotate(now).unwrap();
    let issuer = Issuer::new(keyring.clone());
    let writer = EtcdStore::new(cluster.config(1, &[1, 2, 0])).unwrap();
    for i in 0..50 {
        writer
            .put_allocation(&alloc(&format!("a{i}"), "running"))
            .unwrap();
    }
    // The mirror reaches the members through proxies the test can cut.
    let proxies: Vec<Proxy> = cluster
        .members
        .iter()
        .map(|m| Proxy::start(m.client))
        .collect();
    let urls: Vec<String> = proxies.iter().map(|p| p.url("https")).collect();
    let eps: Vec<&str> = urls.iter().map(String::as_str).collect();
    let max_lag = Duration::from_millis(800);
    let mirror = Arc::new(
        EtcdMirror::builder(cluster.config_for(eps[0], &eps))
            .max_lag(max_lag)
            .check_interval(Duration::from_millis(100))
            .watch_idle_timeout(Duration::from_secs(2))
            .start()
            .unwrap(),
    );
    assert!(
        mirror.wait_ready(Duration::from_secs(10)),
        "{:?}",
        mirror.stats()
    );
    let verifier = Verifier::builder(
        keyring.clone(),
        mirror.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .build();
    verifier
        .verify(&token_for(&issuer, "a1", now), now)
        .unwrap();
    let s = mirror.stats();
    assert_eq!((s.allocations, s.relists), (50, 1), "{s:?}");
    assert!(s.stale_from_memory >= 1, "{s:?}");

    // Writes elsewhere in etcd move the cluster's revision without touching
    // the prefix: the freshness check still proves the mirror current.
    let before = mirror.stats().revision;
    for i in 0..20 {
        cluster.admin_any(
            "/v3/kv/put",
            &serde_json::json!({"key": b64(&format!("/elsewhere/k{i}")), "value": b64("x")}),
        );
    }
    eventually(
        "the mirror proven current past writes outside its prefix",
        Duration::from_secs(5),
        || {
            let s = mirror.stats();
            s.revision >= before + 20 && s.lag.is_some_and(|l| l < max_lag)
        },
    );

    // A terminal allocation is rejected from memory, within milliseconds.
    writer.put_allocation(&alloc("a1", "complete")).unwrap();
    let took = eventually("a1 terminal in the mirror", Duration::from_secs(5), || {
        stale(&*mirror, "a1") == Ok(AllocState::Terminal)
    });
    let e = verifier
        .verify(&token_for(&issuer, "a1", now), now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::AllocationTerminal);
    println!(
        "a1 terminal in the mirror {} us after the put",
        took.as_micros()
    );

    // A bad record fails closed for its allocation only.
    cluster.put_raw("a-garbage", b"\xc1");
    eventually("the bad record arrives", Duration::from_secs(5), || {
        mirror.stats().bad_records == 1
    });
    assert!(
        stale(&*mirror, "a-garbage")
            .unwrap_err()
            .contains("record of allocation")
    );
    assert_eq!(stale(&*mirror, "a2"), Ok(AllocState::Live));

    // (1) The watch stream cut, reconnects refused for a while: changes made
    // meanwhile arrive when it resumes from its last revision (no relist).
    let restarts = mirror.stats().watch_restarts;
    cut_off(&proxies, true);
    writer.put_allocation(&alloc("a2", "lost")).unwrap();
    writer.delete_allocation("a3").unwrap();
    writer.put_allocation(&alloc("b1", "running")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    cut_off(&proxies, false);
    eventually(
        "the mirror resumes after the cut",
        Duration::from_secs(10),
        || {
            stale(&*mirror, "a2") == Ok(AllocState::Terminal)
                && stale(&*mirror, "a3") == Ok(AllocState::Missing)
                && stale(&*mirror, "b1") == Ok(AllocState::Live)
                && mirror.stats().serving_from_memory
        },
    );
    let s = mirror.stats();
    assert!(s.watch_restarts > restarts, "{s:?}");
    assert_eq!(
        s.relists, 1,
        "a cut stream resumes, it does not list again: {s:?}"
    );

    // (2) Compaction past the revision the watch would resume from: it lists again.
    cut_off(&proxies, true);
    writer.put_allocation(&alloc("a4", "failed")).unwrap();
    writer.delete_allocation("a5").unwrap();
    writer.put_allocation(&alloc("b2", "pending")).unwrap();
    let compacted = cluster.compact();
    cut_off(&proxies, false);
    eventually(
        "the mirror lists again after compaction",
        Duration::from_secs(10),
        || {
            mirror.stats().relists == 2
                && stale(&*mirror, "a4") == Ok(AllocState::Terminal)
                && stale(&*mirror, "a5") == Ok(AllocState::Missing)
                && stale(&*mirror, "b2") == Ok(AllocState::Live)
        },
    );
    let s = mirror.stats();
    assert!(s.revision >= compacted, "{s:?}");
    assert_eq!(s.allocations, 50 - 2 + 2 + 1, "{s:?}"); // a3, a5 gone; b1, b2, a-garbage new

    // (3) A frozen watch (connection open, nothing flows): the mirror stops
    // answering from memory within its bound, so a terminal allocation is
    // never called live for longer than max_lag.
    proxies[0].freeze();
    proxies[1].freeze();
    proxies[2].freeze();
    std::thread::sleep(Duration::from_millis(50));
    let flipped = Instant::now();
    writer.put_allocation(&alloc("a6", "complete")).unwrap();
    let acked = flipped.elapsed();
    let mut last_live = None;
    let deadline = Instant::now() + max_lag * 3;
    while Instant::now() < deadline {
        // Stamped before the read: the answer is decided after this moment,
        // so a slow call (a read on the cluster, a busy host) cannot stretch
        // it past the bound.
        let asked = flipped.elapsed();
        if stale(&*mirror, "a6") == Ok(AllocState::Live) {
            last_live = Some(asked);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let s = mirror.stats();
    println!(
        "frozen watch: a6 last answered live {last_live:?} after the put was sent (acked after {acked:?}); max lag {max_lag:?}; {s:?}"
    );
    assert!(
        last_live.is_none_or(|t| t <= max_lag + acked + Duration::from_millis(50)),
        "a6 was called live past the bound"
    );
    assert_eq!(stale(&*mirror, "a6"), Ok(AllocState::Terminal));
    // It answered from the cluster meanwhile (the watch's idle timeout then
    // reopens the stream through a new connection, and it recovers).
    assert!(s.stale_from_cluster > 0, "{s:?}");
    for p in &proxies {
        p.thaw();
        p.cut();
    }
    eventually(
        "the mirror recovers after the freeze",
        Duration::from_secs(10),
        || mirror.stats().serving_from_memory,
    );

    // (4) The member the watch is on killed: the mirror follows another;
    // the member restarted: it serves again.
    cluster.kill(0);
    // If member 0 led, the put fails or times out until the others elect a
    // new leader (2-4 s): retried.
    let mut failed_puts = Vec::new();
    let written = eventually(
        "a7 written after member 0 was killed",
        Duration::from_secs(10),
        || match writer.put_allocation(&alloc("a7", "complete")) {
            Ok(()) => true,
            Err(e) => {
                failed_puts.push(e.message);
                false
            }
        },
    );
    println!(
        "a7 written {} ms after the kill, {} failed tries (last: {:?})",
        written.as_millis(),
        failed_puts.len(),
        failed_puts.last()
    );
    eventually(
        "the mirror follows another member",
        Duration::from_secs(10),
        || stale(&*mirror, "a7") == Ok(AllocState::Terminal) && mirror.stats().serving_from_memory,
    );
    cluster.restart(0);
    // The whole cluster stopped and started again.
    cluster.restart_all();
    let writer = EtcdStore::new(cluster.config(0, &[0, 1, 2])).unwrap();
    writer.put_allocation(&alloc("a8", "complete")).unwrap();
    eventually(
        "the mirror after every member restarted",
        Duration::from_secs(15),
        || stale(&*mirror, "a8") == Ok(AllocState::Terminal) && mirror.stats().serving_from_memory,
    );

    // Time from an allocation turning terminal in etcd to the mirror
    // rejecting it, over 1,000 updates.
    for i in 0..1000 {
        writer
            .put_allocation(&alloc(&format!("c{i}"), "running"))
            .unwrap();
    }
    eventually("c999 arrives", Duration::from_secs(10), || {
        stale(&*mirror, "c999") == Ok(AllocState::Live)
    });
    let mut lat = Vec::with_capacity(1000);
    for i in 0..1000 {
        let id = format!("c{i}");
        let t = Instant::now();
        writer.put_allocation(&alloc(&id, "complete")).unwrap();
        loop {
            if stale(&*mirror, &id) == Ok(AllocState::Terminal) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{id} never turned terminal"
            );
            std::thread::yield_now();
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    let s = mirror.stats();
    println!(
        "terminal in etcd -> rejected by the mirror, 1,000 updates (put sent to reject): median {:?}, p99 {:?}, worst {:?}; \
         {} allocations, {} bytes by the mirror's accounting ({} per allocation); {s:?}",
        lat[500],
        lat[990],
        lat[999],
        s.allocations,
        s.approx_bytes,
        s.approx_bytes / s.allocations.max(1)
    );

    // A mirror that may hold fewer records than the prefix has: off, every
    // read from the cluster, answers still right.
    let small = EtcdMirror::builder(cluster.config(0, &[0, 1, 2]))
        .max_allocations(10)
        .start()
        .unwrap();
    eventually(
        "the small mirror overflows",
        Duration::from_secs(10),
        || small.stats().overflowed,
    );
    assert_eq!(stale(&small, "a2"), Ok(AllocState::Terminal));
    assert_eq!(stale(&small, "a9"), Ok(AllocState::Live));
    let s = small.stats();
    assert!(
        s.stale_from_cluster >= 2 && s.stale_from_memory == 0 && s.allocations == 0,
        "{s:?}"
    );
}

/// Node identity tokens against etcd (issue 32): `<prefix>/nodes/<ID>`
/// records give the node's liveness, through the store and the mirror (which
/// asks the cluster for nodes); down, missing, undecodable and unknown-status
/// records are refused or fail closed.
#[test]
fn node_tokens_are_bound_to_node_records_in_etcd() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let now = workload_identity::unix_now();
    let keyring = Keyring::new();
    keyring.rotate(now).unwrap();
    let mut node = workload_identity::model::Node {
        id: "9d1e6a44-1111-2222-3333-444444444444".into(),
        datacenter: "dc1".into(),
        node_pool: "default".into(),
        status: "ready".into(),
        ..Default::default()
    };
    let req = workload_identity::model::NodeIdentityRequest {
        region: "global".into(),
        node: node.clone(),
        ..Default::default()
    };
    let token = Issuer::new(keyring.clone())
        .issue_node(&req, now)
        .unwrap()
        .token;
    let store = Arc::new(EtcdStore::new(cluster.config(0, &[0, 1, 2])).unwrap());
    let mirror = Arc::new(
        EtcdMirror::builder(cluster.config(1, &[1, 2, 0]))
            .start()
            .unwrap(),
    );
    let verifiers: Vec<Verifier> = [
        store.clone() as Arc<dyn StateStore>,
        mirror.clone() as Arc<dyn StateStore>,
    ]
    .into_iter()
    .map(|s| {
        Verifier::builder(
            keyring.clone(),
            s,
            Audience::new("nomadproject.io").unwrap(),
        )
        .node_tokens(workload_identity::NodeTokens::Only)
        .build()
    })
    .collect();
    let codes = || -> Vec<Result<(), ResultCode>> {
        verifiers
            .iter()
            .map(|v| v.verify(&token, now).map(drop).map_err(|e| e.code()))
            .collect()
    };
    // The mirror's stale reads go to another member than the writes: each
    // answer is awaited, never assumed at once.
    let settle = |what: &str, want: [Result<(), ResultCode>; 2]| {
        eventually(what, Duration::from_secs(10), || codes() == want);
    };
    settle("no record: not found", [Err(ResultCode::NodeNotFound); 2]);
    store.put_node(&node).unwrap();
    settle("ready: accepted", [Ok(()); 2]);
    node.status = "down".into();
    store.put_node(&node).unwrap();
    settle("down: refused", [Err(ResultCode::NodeDown); 2]);
    node.status = "hibernating".into();
    store.put_node(&node).unwrap();
    settle(
        "unknown status: fails closed",
        [Err(ResultCode::StoreUnavailable); 2],
    );
    store.delete_node(&node.id).unwrap();
    settle("deleted: not found", [Err(ResultCode::NodeNotFound); 2]);
    // Both consistencies answer.
    node.status = "ready".into();
    store.put_node(&node).unwrap();
    for c in [Consistency::Stale, Consistency::Consistent] {
        eventually(
            "both consistencies answer live",
            Duration::from_secs(10),
            || mirror.node_state(&node.id, c) == Ok(workload_identity::NodeState::Live),
        );
    }
}
