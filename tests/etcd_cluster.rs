//! The seed 000 scenario against real replication: a 3-member etcd cluster on
//! loopback, one member cut off from its peers while it keeps serving clients.
//!
//! Needs the `etcd` feature, Debian's `etcd-server` (`/usr/bin/etcd`) and root
//! (members run under their own uids so `iptables` can cut exactly one member's
//! peer traffic). `.ci/run` installs etcd and iptables when missing and runs
//! `cargo test --features etcd --test etcd_cluster`. The cluster and the
//! firewall chain are always torn down, also when the test fails.
#![cfg(feature = "etcd")]

mod common;

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use workload_identity::model::Allocation;
use workload_identity::{
    AllocState, Audience, Consistency, Issuer, Keyring, MemoryStore, ResultCode, StateStore,
    Verifier,
};
use workload_identity::{EtcdConfig, EtcdStore};

const ETCD: &str = "/usr/bin/etcd";
const PREFIX: &str = "/wid-test";
const UID_BASE: u32 = 61000;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Member {
    name: String,
    uid: u32,
    client: u16,
    peer: u16,
}

impl Member {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }
}

fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A 3-member cluster and its firewall chain; both torn down on drop.
struct Cluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    procs: Vec<Option<Child>>,
    chain: String,
}

impl Cluster {
    fn start() -> Cluster {
        assert!(
            std::path::Path::new(ETCD).exists(),
            "{ETCD} is missing: install Debian's etcd-server (.ci/run does)"
        );
        let euid = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(1);
        assert_eq!(
            euid, 0,
            "the etcd cluster test runs members as separate uids and uses iptables: run it as root"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let members: Vec<Member> = (1..=3)
            .map(|i| Member {
                name: format!("m{i}"),
                uid: UID_BASE + i,
                client: free_port(),
                peer: free_port(),
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let chain = format!("WID_ETCD_{}", std::process::id());
        let mut cluster = Cluster {
            dir,
            members,
            procs: Vec::new(),
            chain,
        };
        for i in 0..3 {
            let child = cluster.spawn(i, &initial);
            cluster.procs.push(Some(child));
        }
        assert!(
            run("iptables", &["-N", &cluster.chain]),
            "iptables -N failed"
        );
        assert!(
            run("iptables", &["-I", "OUTPUT", "1", "-j", &cluster.chain]),
            "iptables -I failed"
        );
        for m in &cluster.members {
            cluster.wait_healthy(m);
        }
        cluster
    }

    fn spawn(&self, i: usize, initial: &str) -> Child {
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        std::fs::create_dir_all(&data).unwrap();
        std::os::unix::fs::chown(&data, Some(m.uid), Some(m.uid)).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).unwrap();
        Command::new(ETCD)
            .args([
                "--name",
                &m.name,
                "--data-dir",
                data.to_str().unwrap(),
                "--listen-client-urls",
                &m.url(),
                "--advertise-client-urls",
                &m.url(),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer),
                "--initial-cluster",
                initial,
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &self.chain,
                "--pre-vote=true",
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
            ])
            .uid(m.uid)
            .gid(m.uid)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    fn post(&self, m: &Member, path: &str, body: &serde_json::Value) -> Option<serde_json::Value> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let mut r = agent
            .post(&format!("{}{path}", m.url()))
            .send(body.to_string())
            .ok()?;
        serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()
    }

    fn wait_healthy(&self, m: &Member) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let status = self.post(m, "/v3/maintenance/status", &serde_json::json!({}));
            if status.is_some_and(|s| s["leader"].as_str().is_some_and(|l| l != "0")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "etcd member {} did not become healthy within 30 s (log in {})",
            m.name,
            self.dir.path().display()
        );
    }

    /// The index of a member that is not the leader.
    fn follower(&self) -> usize {
        let s = self
            .post(
                &self.members[0],
                "/v3/maintenance/status",
                &serde_json::json!({}),
            )
            .unwrap();
        let leader = s["leader"].as_str().unwrap().to_string();
        (0..3)
            .find(|&i| {
                let st = self
                    .post(
                        &self.members[i],
                        "/v3/maintenance/status",
                        &serde_json::json!({}),
                    )
                    .unwrap();
                st["header"]["member_id"].as_str() != Some(leader.as_str())
            })
            .unwrap()
    }

    /// Cuts member `i` off from its peers (both directions, established
    /// connections included); its client port keeps serving.
    fn isolate(&self, i: usize) {
        let m = &self.members[i];
        let others = self
            .members
            .iter()
            .filter(|o| o.name != m.name)
            .map(|o| o.peer.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let (peer, uid) = (m.peer.to_string(), m.uid.to_string());
        let c = self.chain.as_str();
        // Packets of x's own connections to the others' peer ports.
        let from_x = [
            "-m",
            "owner",
            "--uid-owner",
            &uid,
            "-p",
            "tcp",
            "-m",
            "multiport",
            "--dports",
            &others,
        ];
        let rules: Vec<Vec<&str>> = vec![
            vec!["-A", c, "-p", "tcp", "--dport", &peer, "-j", "DROP"],
            vec!["-A", c, "-p", "tcp", "--sport", &peer, "-j", "DROP"],
            // Mark them (the mark covers the replies too), then drop both ways.
            [
                &["-A", c][..],
                &from_x,
                &["-j", "CONNMARK", "--set-mark", "0x77"],
            ]
            .concat(),
            [&["-A", c][..], &from_x, &["-j", "DROP"]].concat(),
            vec![
                "-A", c, "-p", "tcp", "-m", "connmark", "--mark", "0x77", "-j", "DROP",
            ],
        ];
        for r in &rules {
            assert!(run("iptables", r), "iptables {r:?} failed");
        }
    }

    fn heal(&self) {
        assert!(run("iptables", &["-F", &self.chain]));
    }

    fn store(&self, local: usize, endpoints: &[usize]) -> EtcdStore {
        let eps: Vec<String> = endpoints.iter().map(|&i| self.members[i].url()).collect();
        let eps: Vec<&str> = eps.iter().map(String::as_str).collect();
        EtcdStore::new(
            EtcdConfig::new(&self.members[local].url(), &eps, PREFIX)
                .timeout(Duration::from_millis(800)),
        )
    }

    fn stop_all(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
        run("iptables", &["-D", "OUTPUT", "-j", &self.chain]);
        run("iptables", &["-F", &self.chain]);
        run("iptables", &["-X", &self.chain]);
    }
}

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

#[test]
fn a_lagging_member_falls_back_to_a_linearizable_read() {
    let mut cluster = Cluster::start();
    let now = workload_identity::unix_now();
    let keyring = Keyring::new();
    keyring.rotate(now).unwrap();
    let issuer = Issuer::new(keyring.clone());
    let x = cluster.follower();
    let healthy: Vec<usize> = (0..3).filter(|&i| i != x).collect();
    let writer = cluster.store(healthy[0], &healthy);
    // The verifier's local member is x; consistent reads try x first, then the others.
    let local = Arc::new(cluster.store(x, &[x, healthy[0], healthy[1]]));
    let verifier = Verifier::builder(
        keyring.clone(),
        local.clone(),
        Audience::new("vault.io").unwrap(),
    )
    .build();

    // Before the partition: a stale read on x already knows the allocation.
    writer
        .put_allocation(&alloc("a-before", "running"))
        .unwrap();
    let t = Instant::now();
    while local
        .allocation_state("a-before", Consistency::Stale)
        .unwrap()
        != AllocState::Live
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "x never replicated a-before"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    verifier
        .verify(&token_for(&issuer, "a-before", now), now)
        .unwrap();
    assert_eq!(verifier.stats().consistent_fallbacks, 0);

    // Cut x off; write through the healthy members.
    cluster.isolate(x);
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

    // (a) x's serializable read says missing: it lags.
    assert_eq!(
        local.allocation_state("a-new", Consistency::Stale).unwrap(),
        AllocState::Missing
    );
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

    // Restore x: it catches up.
    cluster.heal();
    let t = Instant::now();
    while local.allocation_state("a-new", Consistency::Stale).ok() != Some(AllocState::Live) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "x did not catch up after the partition healed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "x caught up {} ms after the partition healed",
        t.elapsed().as_millis()
    );

    // Malformed records and unknown statuses fail closed.
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let put_raw = |id: &str, value: &[u8]| {
        let body = serde_json::json!({
            "key": STANDARD.encode(format!("{PREFIX}/allocations/{id}")),
            "value": STANDARD.encode(value),
        });
        agent
            .post(&format!("{}/v3/kv/put", cluster.members[healthy[0]].url()))
            .send(body.to_string())
            .unwrap();
    };
    put_raw("a-garbage", b"\xc1not msgpack");
    let odd = workload_identity::codec::encode(&alloc("a-odd", "hibernating")).unwrap();
    put_raw("a-odd", &odd);
    let healthy_store = Arc::new(cluster.store(healthy[0], &healthy));
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

    // (d) Every member down: verification fails closed.
    cluster.stop_all();
    let e = v2.verify(&token, now).unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable, "{e}");
    let e = verifier.verify(&token, now).unwrap_err();
    assert_eq!(e.code(), ResultCode::StoreUnavailable, "{e}");
    assert!(e.to_string().contains("etcd"), "{e}");
}
