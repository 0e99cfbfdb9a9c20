//! Real etcd clusters for the etcd tests and the mirror benchmark: members on
//! loopback (each under its own uid, so `iptables` can cut one member's peer
//! traffic), TLS and client-certificate auth with certificates made here by
//! `openssl`, etcd's user auth, and a TCP proxy that cuts or freezes a
//! client's connections. Everything is torn down on drop, also on failure.
#![allow(dead_code)] // each user of this module uses part of it

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use workload_identity::EtcdConfig;

pub const ETCD: &str = "/usr/bin/etcd";
pub const PREFIX: &str = "/wid-test";
const UID_BASE: u32 = 61000;
static CLUSTERS: AtomicU64 = AtomicU64::new(0);
/// Held from picking a cluster's ports until its members listen on them, so
/// two clusters starting at once in one test process never pick the same one.
static STARTING: Mutex<()> = Mutex::new(());

pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free loopback ports, outside the kernel's ephemeral range.
/// A member restarted on its old ports must find them free, and a port of
/// the ephemeral range may meanwhile be any outgoing connection's source
/// port (a CI run saw `bind: address already in use` on a restart). Every
/// listener is held until all are bound, so no port is handed out twice (a
/// cluster once got `m1` and `m3` on one peer port and etcd refused to
/// start).
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    let (lo, hi) = listening_range();
    let random = std::collections::hash_map::RandomState::new();
    let mut held: Vec<TcpListener> = Vec::new();
    let mut tries = 0u64;
    while held.len() < n {
        tries += 1;
        assert!(tries < 100_000, "no free loopback port in {lo}..={hi}");
        let mut h = random.build_hasher();
        h.write_u64(tries);
        let port = lo + (h.finish() % u64::from(hi - lo + 1)) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Ports to listen on: below the ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`; Linux's default is 32768 to
/// 60999), or above it when it starts too low.
fn listening_range() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        });
    match ephemeral {
        Some((lo, _)) if lo > 12_000 => (10_000, lo - 1),
        Some((_, hi)) if hi < 63_000 => (hi + 1, 65_535),
        _ => (20_000, 32_767),
    }
}

pub fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is needed to make the test certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Certificates made for one test run: a CA, a server certificate for
/// 127.0.0.1 (also used for peers), client certificates `root` and `wid`, and
/// a second CA ("other") with a server certificate of its own.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn generate(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let ca = |name: &str| {
            let subj = format!("/CN={name}");
            let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
            openssl(dir, &args);
        };
        ca("ca");
        ca("other-ca");
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        let leaf = |name: &str, subj: &str, ca: &str, ext: &str| {
            let (key, csr, crt) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
            );
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", subj]);
            openssl(dir, &args);
            let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    &ca_crt,
                    "-CAkey",
                    &ca_key,
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    "2",
                    "-extfile",
                    ext,
                ],
            );
        };
        leaf("server", "/CN=etcd", "ca", "server.ext");
        leaf("bad-server", "/CN=etcd", "other-ca", "server.ext");
        // Client certificates carry no CommonName: with auth on, etcd's gateway
        // refuses one that does (HTTP 400, "CommonName of client sending a
        // request against gateway will be ignored"); users come from tokens.
        leaf("root", "/O=wid-test/OU=admin", "ca", "client.ext");
        leaf("wid", "/O=wid-test/OU=verifier", "ca", "client.ext");
        leaf(
            "stranger",
            "/O=wid-test/OU=verifier",
            "other-ca",
            "client.ext",
        );
        // The mis-certified member's gateway presents its own (other-CA)
        // certificate to its own gRPC port: that member trusts both CAs.
        let both = [
            std::fs::read(dir.join("ca.crt")).unwrap(),
            std::fs::read(dir.join("other-ca.crt")).unwrap(),
        ]
        .concat();
        std::fs::write(dir.join("both-cas.crt"), both).unwrap();
        // etcd runs under other uids: let them read the certificates and keys.
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap()
    }
}

/// How the cluster's client port is secured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    Plain,
    Tls,
    /// TLS, and members require a client certificate from the CA.
    MutualTls,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub security: Security,
    /// Serve member `i`'s client port with a certificate from the other CA.
    pub bad_certificate: Option<usize>,
    /// `--auth-token-ttl` (simple tokens), seconds.
    pub auth_token_ttl: Option<u32>,
}

impl Options {
    pub fn new(security: Security) -> Options {
        Options {
            security,
            bad_certificate: None,
            auth_token_ttl: None,
        }
    }
}

pub struct Member {
    pub name: String,
    pub uid: u32,
    pub client: u16,
    pub peer: u16,
}

/// A 3-member cluster and its firewall chain; both torn down on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub pki: Pki,
    pub members: Vec<Member>,
    procs: Vec<Option<Child>>,
    pub chain: String,
    pub opts: Options,
    initial: String,
    root_token: Mutex<Option<String>>,
    firewall: bool,
}

impl Cluster {
    pub fn start(opts: Options) -> Cluster {
        Cluster::start_sized(opts, 3)
    }

    pub fn start_sized(opts: Options, size: usize) -> Cluster {
        assert!(
            Path::new(ETCD).exists(),
            "{ETCD} is missing: install Debian's etcd-server (.ci/run does)"
        );
        let euid = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(1);
        assert_eq!(
            euid, 0,
            "the etcd cluster tests run members as separate uids and use iptables: run them as root"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let pki = Pki::generate(&dir.path().join("pki"));
        let scheme = if opts.security == Security::Plain {
            "http"
        } else {
            "https"
        };
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let starting = STARTING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ports = free_ports(2 * size);
        let members: Vec<Member> = (1..=size as u32)
            .map(|i| Member {
                name: format!("m{i}"),
                uid: UID_BASE + (n as u32 % 100) * 10 + i,
                client: ports[2 * (i as usize - 1)],
                peer: ports[2 * (i as usize - 1) + 1],
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}={scheme}://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let chain = format!("WID_ETCD_{}_{n}", std::process::id());
        let mut cluster = Cluster {
            dir,
            pki,
            members,
            procs: Vec::new(),
            chain,
            opts,
            initial,
            root_token: Mutex::new(None),
            firewall: false,
        };
        for i in 0..size {
            let child = cluster.spawn(i, "new");
            cluster.procs.push(Some(child));
        }
        for i in 0..size {
            cluster.wait_healthy(i);
        }
        drop(starting);
        cluster
    }

    fn scheme(&self) -> &'static str {
        if self.opts.security == Security::Plain {
            "http"
        } else {
            "https"
        }
    }

    pub fn url(&self, i: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.members[i].client)
    }

    pub fn urls(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.url(i)).collect()
    }

    fn spawn(&self, i: usize, state: &str) -> Child {
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        std::fs::create_dir_all(&data).unwrap();
        std::os::unix::fs::chown(&data, Some(m.uid), Some(m.uid)).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", m.name)))
            .unwrap();
        let scheme = self.scheme();
        let client_url = self.url(i);
        let peer_url = format!("{scheme}://127.0.0.1:{}", m.peer);
        let mut args: Vec<String> = [
            "--name",
            &m.name,
            "--data-dir",
            data.to_str().unwrap(),
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &self.initial,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            &self.chain,
            "--pre-vote=true",
            // etcd's defaults are 100 ms / 1 s; slower still so a loaded host's
            // scheduling stalls never cost the leader its term.
            "--heartbeat-interval",
            "200",
            "--election-timeout",
            "2000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.opts.security != Security::Plain {
            let server = if self.opts.bad_certificate == Some(i) {
                "bad-server"
            } else {
                "server"
            };
            let p = |f: &str| self.pki.path(f);
            args.extend([
                "--cert-file".into(),
                p(&format!("{server}.crt")),
                "--key-file".into(),
                p(&format!("{server}.key")),
                "--peer-cert-file".into(),
                p("server.crt"),
                "--peer-key-file".into(),
                p("server.key"),
                "--peer-trusted-ca-file".into(),
                p("ca.crt"),
                "--peer-client-cert-auth".into(),
            ]);
            if self.opts.security == Security::MutualTls {
                let trusted = if self.opts.bad_certificate == Some(i) {
                    "both-cas.crt"
                } else {
                    "ca.crt"
                };
                args.extend([
                    "--trusted-ca-file".into(),
                    p(trusted),
                    "--client-cert-auth".into(),
                ]);
            }
        }
        if let Some(ttl) = self.opts.auth_token_ttl {
            args.push(format!("--auth-token-ttl={ttl}"));
        }
        Command::new(ETCD)
            .args(&args)
            .uid(m.uid)
            .gid(m.uid)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// An HTTP client that trusts the cluster's CA and presents `root`'s certificate.
    pub fn admin_agent(&self) -> ureq::Agent {
        let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
        if self.opts.security != Security::Plain {
            let ca = ureq::tls::Certificate::from_pem(&self.pki.read("ca.crt")).unwrap();
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&[ca]));
            if self.opts.bad_certificate.is_some() {
                // The admin talks to every member, the mis-certified one too.
                tls = tls.disable_verification(true);
            }
            let cert = ureq::tls::Certificate::from_pem(&self.pki.read("root.crt")).unwrap();
            let key = ureq::tls::PrivateKey::from_pem(&self.pki.read("root.key")).unwrap();
            tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&[cert], key)));
        }
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(3)))
            .http_status_as_error(false)
            .tls_config(tls.build())
            .build()
            .into()
    }

    /// POSTs to member `i` as the administrator (root's token once auth is on);
    /// the JSON answer of a 200, `Err` with status and body otherwise.
    pub fn admin(
        &self,
        i: usize,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let mut req = self.admin_agent().post(&format!("{}{path}", self.url(i)));
        if let Some(t) = self.root_token.lock().unwrap().as_ref() {
            req = req.header("authorization", t);
        }
        let mut r = req.send(body.to_string()).map_err(|e| e.to_string())?;
        let status = r.status();
        let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("HTTP {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    /// The first member that answers `admin`.
    pub fn admin_any(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        let mut errors = Vec::new();
        for i in 0..self.members.len() {
            if self.opts.bad_certificate == Some(i) {
                continue;
            }
            match self.admin(i, path, body) {
                Ok(v) => return v,
                Err(e) => errors.push(e),
            }
        }
        panic!("no member answered {path}: {errors:?}");
    }

    pub fn wait_healthy(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.admin(i, "/v3/maintenance/status", &serde_json::json!({})) {
                Ok(s) if s["leader"].as_str().is_some_and(|l| l != "0") => return,
                Ok(s) => last = format!("no leader yet: {s}"),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(
            self.dir
                .path()
                .join(format!("{}.log", self.members[i].name)),
        )
        .unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        panic!(
            "etcd member {} did not become healthy within 30 s: {last}; its log ends:\n{}",
            self.members[i].name,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }

    /// The index of a member that is not the leader.
    pub fn follower(&self) -> usize {
        let s = self
            .admin(0, "/v3/maintenance/status", &serde_json::json!({}))
            .unwrap();
        let leader = s["leader"].as_str().unwrap().to_string();
        (0..self.members.len())
            .find(|&i| {
                let st = self
                    .admin(i, "/v3/maintenance/status", &serde_json::json!({}))
                    .unwrap();
                st["header"]["member_id"].as_str() != Some(leader.as_str())
            })
            .unwrap()
    }

    /// Turns on etcd's auth: `root` (password `root-pw`) and `wid` (password
    /// `wid-pw`, role `wid-reader`: read and write under the test prefix only).
    pub fn enable_auth(&self) {
        let b = |s: &str| STANDARD.encode(s);
        self.admin_any(
            "/v3/auth/user/add",
            &serde_json::json!({"name": "root", "password": "root-pw"}),
        );
        self.admin_any(
            "/v3/auth/user/grant",
            &serde_json::json!({"user": "root", "role": "root"}),
        );
        self.admin_any(
            "/v3/auth/role/add",
            &serde_json::json!({"name": "wid-reader"}),
        );
        self.admin_any(
            "/v3/auth/role/grant",
            &serde_json::json!({"name": "wid-reader", "perm": {"permType": "READWRITE",
                 "key": b(&format!("{PREFIX}/")), "range_end": b(&format!("{PREFIX}0"))}}),
        );
        self.admin_any(
            "/v3/auth/user/add",
            &serde_json::json!({"name": "wid", "password": "wid-pw"}),
        );
        self.admin_any(
            "/v3/auth/user/grant",
            &serde_json::json!({"user": "wid", "role": "wid-reader"}),
        );
        self.admin_any("/v3/auth/enable", &serde_json::json!({}));
        let t = self.admin_any(
            "/v3/auth/authenticate",
            &serde_json::json!({"name": "root", "password": "root-pw"}),
        );
        *self.root_token.lock().unwrap() = Some(t["token"].as_str().unwrap().to_string());
    }

    /// A client configuration for members `local` and `endpoints`: the CA,
    /// `wid`'s certificate under mutual TLS, plain HTTP allowed only for a
    /// plain cluster.
    pub fn config(&self, local: usize, endpoints: &[usize]) -> EtcdConfig {
        let eps: Vec<String> = endpoints.iter().map(|&i| self.url(i)).collect();
        let eps: Vec<&str> = eps.iter().map(String::as_str).collect();
        self.config_for(&self.url(local), &eps)
    }

    /// As [`Cluster::config`], for URLs (proxies, say).
    pub fn config_for(&self, local: &str, endpoints: &[&str]) -> EtcdConfig {
        let c = EtcdConfig::new(local, endpoints, PREFIX).timeout(Duration::from_secs(3));
        match self.opts.security {
            Security::Plain => c.allow_plain_http(),
            Security::Tls => c.ca_bundle_pem(self.pki.read("ca.crt")),
            Security::MutualTls => c
                .ca_bundle_pem(self.pki.read("ca.crt"))
                .client_certificate_pem(self.pki.read("wid.crt"), self.pki.read("wid.key")),
        }
    }

    pub fn put_raw(&self, id: &str, value: &[u8]) {
        self.admin_any(
            "/v3/kv/put",
            &serde_json::json!({
                "key": STANDARD.encode(format!("{PREFIX}/allocations/{id}")),
                "value": STANDARD.encode(value),
            }),
        );
    }

    /// The cluster's current revision.
    pub fn revision(&self) -> i64 {
        let r = self.admin_any(
            "/v3/kv/range",
            &serde_json::json!({"key": STANDARD.encode("/"), "count_only": true}),
        );
        r["header"]["revision"].as_str().unwrap().parse().unwrap()
    }

    /// Compacts the history up to the current revision.
    pub fn compact(&self) -> i64 {
        let rev = self.revision();
        self.admin_any(
            "/v3/kv/compaction",
            &serde_json::json!({"revision": rev.to_string(), "physical": true}),
        );
        rev
    }

    /// Kills member `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }

    /// Starts member `i` again on its data directory and waits for it.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let child = self.spawn(i, "existing");
        self.procs[i] = Some(child);
        self.wait_healthy(i);
    }

    /// Stops every member, then starts them all again on their data
    /// directories (etcd restarted) and waits for a leader.
    pub fn restart_all(&mut self) {
        self.stop_all();
        for i in 0..self.members.len() {
            let child = self.spawn(i, "existing");
            self.procs[i] = Some(child);
        }
        for i in 0..self.members.len() {
            self.wait_healthy(i);
        }
    }

    fn ensure_firewall(&mut self) {
        if !self.firewall {
            assert!(run("iptables", &["-N", &self.chain]), "iptables -N failed");
            assert!(
                run("iptables", &["-I", "OUTPUT", "1", "-j", &self.chain]),
                "iptables -I failed"
            );
            self.firewall = true;
        }
    }

    /// Cuts member `i` off from its peers (both directions, established
    /// connections included); its client port keeps serving.
    pub fn isolate(&mut self, i: usize) {
        self.ensure_firewall();
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

    pub fn heal(&self) {
        if self.firewall {
            assert!(run("iptables", &["-F", &self.chain]));
        }
    }

    pub fn stop_all(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }

    /// `etcdctl snapshot save` from member 0 (a plain-http cluster): the
    /// snapshot's path.
    pub fn snapshot(&self, name: &str) -> std::path::PathBuf {
        assert_eq!(
            self.opts.security,
            Security::Plain,
            "snapshots of plain clusters only"
        );
        let path = self.dir.path().join(name);
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.url(0), "snapshot", "save"])
            .arg(&path)
            .output()
            .expect("etcdctl (Debian's etcd-client) saves a snapshot");
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        path
    }

    /// Stops every member and restores each from `snapshot` with `etcdctl
    /// snapshot restore` (etcd 3.4's; 3.5 moved it to etcdutl), as an
    /// operator recovering from a disaster does: without --bump-revision (3.4
    /// has none), so the cluster's revision goes back to the snapshot's.
    /// Then starts them and waits for a leader.
    pub fn restore(&mut self, snapshot: &Path) {
        self.stop_all();
        let scheme = self.scheme();
        for i in 0..self.members.len() {
            let m = &self.members[i];
            let data = self.dir.path().join(&m.name);
            std::fs::remove_dir_all(&data).unwrap();
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(snapshot)
                .args([
                    "--name",
                    &m.name,
                    "--data-dir",
                    data.to_str().unwrap(),
                    "--initial-cluster",
                    &self.initial,
                    "--initial-cluster-token",
                    &self.chain,
                    "--initial-advertise-peer-urls",
                    &format!("{scheme}://127.0.0.1:{}", m.peer),
                ])
                .output()
                .expect("etcdctl restores a snapshot");
            assert!(
                out.status.success(),
                "etcdctl snapshot restore: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            chown_tree(&data, m.uid);
        }
        for i in 0..self.members.len() {
            let child = self.spawn(i, "existing");
            self.procs[i] = Some(child);
        }
        for i in 0..self.members.len() {
            self.wait_healthy(i);
        }
    }
}

/// Gives `dir` and everything under it to `uid` (a member's data directory).
fn chown_tree(dir: &Path, uid: u32) {
    std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
    if dir.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
        if self.firewall {
            run("iptables", &["-D", "OUTPUT", "-j", &self.chain]);
            run("iptables", &["-F", &self.chain]);
            run("iptables", &["-X", &self.chain]);
        }
    }
}

/// A loopback TCP proxy in front of one member, to cut or freeze a client's
/// connections without touching the member.
pub struct Proxy {
    pub port: u16,
    shared: Arc<ProxyShared>,
}

struct ProxyShared {
    target: u16,
    /// New connections are closed at once.
    blocked: AtomicBool,
    /// Connections with an id below this hold their data (frozen).
    frozen_below: AtomicU64,
    next_id: AtomicU64,
    open: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    stopped: AtomicBool,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(ProxyShared {
            target,
            blocked: AtomicBool::new(false),
            frozen_below: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            open: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if s.blocked.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", s.target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let id = s.next_id.fetch_add(1, Ordering::SeqCst);
                s.open.lock().unwrap().push((
                    id,
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                ));
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let s = s.clone();
                    std::thread::spawn(move || pump(&s, id, from, to));
                }
            }
        });
        Proxy { port, shared }
    }

    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Closes every open connection (both ways).
    pub fn cut(&self) {
        for (_, a, b) in self.shared.open.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Refuses (true) or accepts (false) new connections.
    pub fn block(&self, blocked: bool) {
        self.shared.blocked.store(blocked, Ordering::SeqCst);
    }

    /// Holds the data of every connection open now (they stay open, silent);
    /// new connections pass.
    pub fn freeze(&self) {
        let next = self.shared.next_id.load(Ordering::SeqCst);
        self.shared.frozen_below.store(next, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.shared.frozen_below.store(0, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pump(s: &ProxyShared, id: u64, mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while id < s.frozen_below.load(Ordering::SeqCst) && !s.stopped.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Polls `f` every 5 ms until it is true; the time it took, or a panic naming
/// `what` after `limit` (a bound for a stuck test, never a speed check).
pub fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    t.elapsed()
}

/// A `wrapping` record (`{KekID, Kind, RecordKey}`, a msgpack map) as the
/// format before records were authenticated wrote it: `{KekID, Kind}`, the
/// map cut before its `RecordKey` entry.
pub fn without_record_key(wrapping: &[u8]) -> Vec<u8> {
    let at = wrapping
        .windows(b"RecordKey".len())
        .position(|w| w == b"RecordKey")
        .expect("a wrapping record with a RecordKey");
    let mut out = wrapping[..at - 1].to_vec();
    out[0] = 0x82;
    out
}
