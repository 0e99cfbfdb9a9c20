//! Consul for real (seed 001 with Consul, issue 42 item 1; issue 52 item 5):
//! [`ConsulLogin`] inside a real [`IdentityManager`] with a
//! [`FileIdentityDb`], against a real Consul v1.16.3 (`consul agent -dev`,
//! built by `scripts/consul.sh build` from tests/consul/go.mod) whose JWT
//! auth method fetches our keys from a real `wid serve`:
//!
//! * docs/consul.md's setup (the auth method and its binding rule) run as
//!   printed with curl, Consul fetching the keys over https trusting
//!   `JWKSCACert`; every other test's auth method and rule are the page's
//!   too;
//! * a start logs in (Nomad's `Meta`), the token works at `token/self`;
//! * a restart confirms the saved token with `token/self` and does not log
//!   in again; a token deleted out of band is replaced at the restore and
//!   never handed out;
//! * the token is replaced before its `ExpirationTime`, and whenever the
//!   identity is re-signed, the old one logged out: one live token per
//!   identity;
//! * what was wrong, from Consul's answer: audience, issuer, signature,
//!   unknown auth method, no binding rule matched, ACLs disabled (an agent
//!   without ACLs); an identity token within the leeway is refused with no
//!   request sent.
//!
//! `scripts/consul.sh build && cargo test -p wid --test consul`
mod login_support;
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use login_support::{Client, KeystoreSigner, free_port};
use serde_json::{Value, json};
use serve_support::{Served, wid_ok};
use workload_identity::manager::{
    EventKind, IdentityDb, IdentityId, IdentityManager, IdentitySigner, MemoryIdentityDb,
};
use workload_identity::model::IssueRequest;
use workload_identity::{
    Algorithm, Clock, ConsulLogin, ConsulLoginBuilder, Issuer, Keyring, SignedIdentity, SystemClock,
};

const ALLOC: &str = "7a1c2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const ROOT: &str = "5e1f7c3a-0b2d-4c6e-8f9a-1b3c5d7e9f00";
const METHOD: &str = "nomad-workloads";
const NODE: &str = "b2d9a4c6-1e3f-4a5b-9c8d-7e6f5a4b3c2d";

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// A real Consul agent (`consul agent -dev`: one server, state in memory)
/// on loopback ports of its own, ACLs on with [`ROOT`] as the management
/// token (or off), killed on drop. The binary is `scripts/consul.sh
/// build`'s (Consul v1.16.3), or `WID_CONSUL_BIN`.
struct Consul {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

/// Where the consul binary is: `WID_CONSUL_BIN`, else where `scripts/consul.sh
/// build` puts it (`<target dir>/consul/bin/consul`).
fn consul_bin() -> std::path::PathBuf {
    if let Some(bin) = std::env::var_os("WID_CONSUL_BIN") {
        return bin.into();
    }
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_path_buf();
    target.join("consul/bin/consul")
}

impl Consul {
    fn start(acl: bool) -> Consul {
        let bin = consul_bin();
        assert!(
            bin.is_file(),
            "no consul at {}: build it with `scripts/consul.sh build` (Consul v1.16.3 from tests/consul/go.mod), or name one in WID_CONSUL_BIN",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("consul.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let http = free_port();
        let mut args: Vec<String> = [
            "agent",
            "-dev",
            "-bind",
            "127.0.0.1",
            "-client",
            "127.0.0.1",
            "-dns-port",
            "-1",
            "-grpc-port",
            "-1",
            "-grpc-tls-port",
            "-1",
        ]
        .map(String::from)
        .to_vec();
        for (flag, port) in [
            ("-http-port", http),
            ("-serf-lan-port", free_port()),
            ("-serf-wan-port", free_port()),
            ("-server-port", free_port()),
        ] {
            args.extend([flag.to_string(), port.to_string()]);
        }
        if acl {
            args.extend([
                "-hcl".to_string(),
                format!(
                    "acl {{\n  enabled = true\n  default_policy = \"deny\"\n  tokens {{\n    initial_management = \"{ROOT}\"\n  }}\n}}\n"
                ),
            ]);
        }
        let child = Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", bin.display()));
        let consul = Consul {
            child,
            addr: format!("127.0.0.1:{http}"),
            _dir: dir,
        };
        // Up: a leader elected, and (with ACLs) the management token known.
        let ready = || {
            let leader = consul.call("GET", "/v1/status/leader", None, None);
            leader.0 == 200
                && leader.1.trim() != "\"\""
                && (!acl || consul.call("GET", "/v1/acl/token/self", Some(ROOT), None).0 == 200)
        };
        let since = std::time::Instant::now();
        while !ready() {
            assert!(
                since.elapsed() < Duration::from_secs(120),
                "consul was not up within 120 s: {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        consul
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One request; the status and the body (status 0: not answered).
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return (0, String::new());
        };
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        let token = token
            .map(|t| format!("X-Consul-Token: {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{token}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        if s.read_to_string(&mut raw).is_err() {
            return (0, String::new());
        }
        let Some((head, body)) = raw.split_once("\r\n\r\n") else {
            return (0, String::new());
        };
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        // Consul answers with chunks when it does not know the length.
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        };
        (status, body)
    }

    #[track_caller]
    fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, text) = self.call(method, path, Some(ROOT), body);
        assert_eq!(status, 200, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// `token/self` with `secret`: the token, or Consul's refusal.
    fn token_self(&self, secret: &str) -> Result<Value, (u16, String)> {
        match self.call("GET", "/v1/acl/token/self", Some(secret), None) {
            (200, body) => Ok(serde_json::from_str(&body).unwrap()),
            (status, body) => Err((status, body.trim().to_string())),
        }
    }

    /// The AccessorIDs of the live tokens the auth method made: a login
    /// makes one, so an unchanged set means no login was made.
    fn login_tokens(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .ok("GET", &format!("/v1/acl/tokens?authmethod={METHOD}"), None)
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["AccessorID"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    }
}

/// An HTTP/1.1 chunked body, joined.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

impl Drop for Consul {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wid serve` over a keystore, and a Consul with a JWT auth method
/// that fetches the keys from it.
struct World {
    dir: tempfile::TempDir,
    keystore: String,
    issuer: String,
    _served: Served,
    consul: Consul,
}

impl World {
    fn new(max_token_ttl: &str, clock_skew_leeway: Duration) -> World {
        let dir = tempfile::tempdir().unwrap();
        let keystore = dir.path().join("keystore").display().to_string();
        wid_ok(&["keyring", "init", "--keystore", &keystore, "--alg", "EdDSA"]);
        let (issuer, served) = login_support::serve(&keystore);
        let consul = Consul::start(true);
        configure(
            &consul,
            &served.jwks_url(),
            &issuer,
            max_token_ttl,
            clock_skew_leeway,
        );
        World {
            dir,
            keystore,
            issuer,
            _served: served,
            consul,
        }
    }

    fn keyring(&self) -> Keyring {
        Keyring::load(&self.keystore).unwrap()
    }

    fn signer(&self) -> Arc<KeystoreSigner> {
        Arc::new(KeystoreSigner {
            keystore: self.keystore.clone(),
            issuer: self.issuer.clone(),
        })
    }

    fn login(&self) -> ConsulLoginBuilder {
        ConsulLogin::builder(&self.consul.url(), task_identity(), METHOD)
            .allow_http_loopback(true)
            .node_id(NODE)
    }
}

/// docs/consul.md's setup block (the auth method and its binding rule).
fn setup_block() -> String {
    let page = include_str!("../../docs/consul.md");
    let marker = "<!-- run by wid/tests/consul.rs: setup -->";
    let after = page
        .split_once(marker)
        .unwrap_or_else(|| panic!("docs/consul.md has no {marker}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a ```sh block after the marker");
    block[..block.find("\n```").expect("the block ends")].to_string() + "\n"
}

/// The JSON bodies the setup block sends (its `<<'JSON'` documents): the
/// auth method's, then the binding rule's.
fn setup_bodies() -> (Value, Value) {
    let block = setup_block();
    let bodies: Vec<Value> = block
        .split("<<'JSON'\n")
        .skip(1)
        .map(|rest| {
            let body = &rest[..rest.find("\nJSON\n").expect("the document ends")];
            serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
        })
        .collect();
    assert_eq!(bodies.len(), 2, "{block}");
    (bodies[0].clone(), bodies[1].clone())
}

/// docs/consul.md's auth method and binding rule, for keys served over
/// plain http at `jwks_url` (so no `JWKSCACert`), with the tests' own
/// `MaxTokenTTL` and `ClockSkewLeeway`.
fn configure(consul: &Consul, jwks_url: &str, issuer: &str, ttl: &str, skew: Duration) {
    let (mut method, rule) = setup_bodies();
    assert_eq!(method["Name"], METHOD);
    method["MaxTokenTTL"] = json!(ttl);
    let config = method["Config"].as_object_mut().unwrap();
    config.remove("JWKSCACert");
    config.insert("JWKSURL".into(), json!(jwks_url));
    config.insert("BoundIssuer".into(), json!(issuer));
    // Consul 1.16.3 reads this as a Go time.Duration from a JSON number,
    // that is nanoseconds (a string such as "2h" is refused: "cannot parse
    // 'ClockSkewLeeway' as int"); 0 is its default, 60 s.
    config.insert("ClockSkewLeeway".into(), json!(skew.as_nanos() as u64));
    consul.ok("PUT", "/v1/acl/auth-method", Some(&method));
    consul.ok("PUT", "/v1/acl/binding-rule", Some(&rule));
}

/// docs/consul.md's setup as printed (bash, curl), against a real Consul
/// and a `wid serve` over https with a private CA (docs/etcd.md's
/// certificates): only the hosts, the management token and the CA the
/// page leaves as `...` are filled in. A task of namespace default logs in
/// with the service identity of its job, for `MaxTokenTTL`; one of another
/// namespace is refused, as no rule binds it.
#[test]
fn the_setup_of_the_page_runs_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    login_support::recipe_certificates(dir.path());
    let keystore = path("keystore");
    wid_ok(&["keyring", "init", "--keystore", &keystore, "--alg", "EdDSA"]);
    let port = free_port();
    let issuer = format!("https://127.0.0.1:{port}");
    let _served = Served::start(&[
        "--keystore",
        &keystore,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--issuer",
        &issuer,
        "--tls-cert",
        &path("member1.pem"),
        "--tls-key",
        &path("member1.key"),
    ]);
    let consul = Consul::start(true);
    let ca = std::fs::read_to_string(path("ca.pem")).unwrap();
    let mut script = setup_block();
    for (from, to) in [
        ("CONSUL_HTTP_TOKEN=...", format!("CONSUL_HTTP_TOKEN={ROOT}")),
        ("https://consul.example.com:8501", consul.url()),
        ("https://issuer.example.com", issuer.clone()),
        (
            r#""-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n""#,
            json!(ca).to_string(),
        ),
    ] {
        assert!(script.contains(from), "the setup block has no {from}");
        script = script.replace(from, &to);
    }
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/consul.md's setup failed:\n{script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let method = consul.ok("GET", &format!("/v1/acl/auth-method/{METHOD}"), None);
    assert_eq!(method["Config"]["JWKSCACert"], ca.as_str(), "{method}");

    let login = |namespace: &str| {
        let req = json!({
            "Region": "global",
            "Allocation": {"ID": ALLOC, "Namespace": namespace, "JobID": "web",
                "TaskGroup": "frontend", "ClientStatus": "running"},
            "Task": "server",
            "Identity": {"Name": "consul_default", "Audience": ["consul.io"], "TTL": "1h"},
        });
        std::fs::write(path("request.json"), req.to_string()).unwrap();
        let jwt = wid_ok(&[
            "issue",
            "--keystore",
            &keystore,
            "--request",
            &path("request.json"),
            "--issuer",
            &issuer,
        ]);
        consul.call(
            "POST",
            "/v1/acl/login",
            None,
            Some(&json!({"AuthMethod": METHOD, "BearerToken": jwt.trim()})),
        )
    };
    // Consul fetched the keys over https, trusting JWKSCACert.
    let (status, body) = login("default");
    assert_eq!(status, 200, "{body}");
    let token: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        token["ServiceIdentities"][0]["ServiceName"], "web",
        "{token}"
    );
    // (Microseconds both, taken to milliseconds: 1 ms of rounding.)
    let lifetime = expiration_ms(&token) - created_ms(&token);
    assert!(
        (lifetime - 3_600_000).abs() <= 1,
        "MaxTokenTTL 1h: {lifetime} ms: {token}"
    );
    assert!(
        consul
            .token_self(token["SecretID"].as_str().unwrap())
            .is_ok()
    );
    let (status, body) = login("prod");
    assert_eq!((status, body.trim()), (403, "Permission denied"));
}

fn task_identity() -> IdentityId {
    IdentityId::new("server", "consul_default")
}

fn request(namespace: &str, aud: &str, ttl_secs: i64) -> IssueRequest {
    login_support::request(ALLOC, "consul_default", "web", namespace, aud, ttl_secs)
}

/// A client whose manager logs in to Consul as the client process
/// builds it at every start.
trait ConsulClient {
    fn manager(&self, w: &World) -> IdentityManager;
}

impl ConsulClient for Client {
    fn manager(&self, w: &World) -> IdentityManager {
        self.manager_with(
            request("default", "consul.io", 3600),
            w.signer(),
            w.keyring(),
            w.login(),
        )
    }
}

fn expiration_ms(token: &Value) -> i64 {
    time_ms(token, "ExpirationTime")
}

fn created_ms(token: &Value) -> i64 {
    time_ms(token, "CreateTime")
}

/// A token's time `field`, in Unix milliseconds: Go's RFC 3339 with
/// nanoseconds (`2026-12-07T12:00:00.123456789Z`, or an offset for `Z`).
fn time_ms(token: &Value, field: &str) -> i64 {
    let t = token[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {token}"));
    let bad = || panic!("{field} {t:?} is not RFC 3339");
    let num = |r: std::ops::Range<usize>| -> i64 {
        t.get(r).and_then(|d| d.parse().ok()).unwrap_or_else(bad)
    };
    let (y, mo, d) = (num(0..4), num(5..7), num(8..10));
    let (h, mi, sec) = (num(11..13), num(14..16), num(17..19));
    let rest = &t[19..];
    let (frac, zone) = match rest.strip_prefix('.') {
        Some(r) => {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            (&r[..end], &r[end..])
        }
        None => ("", rest),
    };
    let ms: i64 = format!("{frac:0<3}")[..3].parse().unwrap();
    let offset_s = match zone {
        "Z" => 0,
        z if z.len() == 6 => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            sign * (z[1..3].parse::<i64>().unwrap() * 3600 + z[4..6].parse::<i64>().unwrap() * 60)
        }
        _ => bad(),
    };
    // Days since 1970-01-01 of a proleptic Gregorian date.
    let (yy, mm) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 86_400 + h * 3600 + mi * 60 + sec - offset_s) * 1000) + ms
}

#[test]
fn seed_001_with_consul_start_restart_deletion_expiry_and_resigning() {
    // Consul tokens live 1 min (the least MaxTokenTTL Consul takes); the auth method accepts identity tokens dated
    // up to 2 h ahead of its (real) clock, so the manager's clock can be
    // moved to the identity's renewal without waiting for it.
    let w = World::new("1m", Duration::from_secs(7200));
    let client = Client::new(w.dir.path());

    // Start: signed, logged in with Nomad's Meta, the token works.
    let m = client.manager(&w);
    let t0 = now_ms();
    m.start(t0).unwrap();
    let (first, kind) = client.last();
    assert_eq!(kind, EventKind::Initial);
    assert_eq!(m.secret("consul").unwrap().secret, first);
    let me = w.consul.token_self(&first).unwrap();
    assert_eq!(me["AuthMethod"], METHOD);
    assert_eq!(me["ServiceIdentities"][0]["ServiceName"], "web");
    let desc = me["Description"].as_str().unwrap();
    assert!(
        desc.contains(r#""requested_by":"nomad_task_server""#) && desc.contains(NODE),
        "{desc}"
    );
    assert_eq!(w.consul.login_tokens().len(), 1);
    drop(m);

    // The client restarts: token/self confirms the saved token (that it
    // asks, rather than trusting the file, the deletion below shows); no
    // login: Consul holds the same one token.
    let before = w.consul.login_tokens();
    let m = client.manager(&w);
    let r = m.restore(now_ms()).unwrap();
    assert!(r.reused && r.rederived.is_empty(), "{r:?}");
    assert_eq!(client.last(), (first.clone(), EventKind::Restored));
    assert_eq!(w.consul.login_tokens(), before, "not logged in again");
    drop(m);

    // The token is deleted out of band while the client is down
    // (hashicorp/nomad#20185): the restore logs in again and never hands
    // out the dead token.
    let accessor = me["AccessorID"].as_str().unwrap();
    w.consul
        .ok("DELETE", &format!("/v1/acl/token/{accessor}"), None);
    let delivered_before = client.all().len();
    let m = client.manager(&w);
    let r = m.restore(now_ms()).unwrap();
    assert!(r.reused, "the identity itself is fine: {r:?}");
    assert_eq!(r.rederived, ["consul"]);
    let (second, kind) = client.last();
    assert_eq!(kind, EventKind::Restored);
    assert_ne!(second, first);
    assert!(
        !client.all()[delivered_before..].contains(&first),
        "the dead token was never delivered again"
    );
    assert!(w.consul.token_self(&second).is_ok());
    assert_eq!(
        client.db.load(ALLOC).unwrap().unwrap().secrets[0].secret,
        second,
        "and saved"
    );
    assert_eq!(w.consul.login_tokens().len(), 1);

    // Its time comes before its ExpirationTime: a new login replaces it and
    // the old one is logged out.
    let expires = expiration_ms(&w.consul.token_self(&second).unwrap());
    let due = m.next_due_ms().unwrap();
    assert!(
        due < expires,
        "refreshed {} ms before it expires",
        expires - due
    );
    m.tick(due);
    let (third, kind) = client.last();
    assert_eq!(kind, EventKind::Renewed);
    assert_ne!(third, second);
    let (status, said) = w.consul.token_self(&second).unwrap_err();
    assert_eq!(
        (status, said.as_str()),
        (403, "token does not exist: ACL not found"),
        "the replaced token was logged out"
    );
    assert!(w.consul.token_self(&third).is_ok());
    let live = w.consul.login_tokens();
    assert_eq!(live.len(), 1, "one live token per identity: {live:?}");

    // The identity is re-signed (past half its hour and any jitter): a new login, the old
    // token logged out.
    let identity = m.current(&task_identity(), due).unwrap();
    let resign_at = (identity.issued_at + 3000) * 1000;
    m.tick(resign_at);
    let renewed = m.current(&task_identity(), resign_at).unwrap();
    assert_ne!(
        renewed.jwt_id, identity.jwt_id,
        "the identity was re-signed"
    );
    let (fourth, kind) = client.last();
    // The first re-signing after a restore is a renewal.
    assert_eq!(kind, EventKind::Renewed);
    assert_ne!(fourth, third);
    assert!(w.consul.token_self(&third).is_err(), "logged out");
    assert!(w.consul.token_self(&fourth).is_ok());
    assert_eq!(w.consul.login_tokens().len(), 1);
    assert!(client.all().iter().all(|t| !t.is_empty()), "never none");
}

#[test]
fn consul_login_says_what_was_wrong_in_consuls_words() {
    let w = World::new("5m", Duration::ZERO);
    let fails = |login: ConsulLoginBuilder,
                 req: IssueRequest,
                 signer: Arc<KeystoreSigner>,
                 keyring: Keyring|
     -> String {
        let db = Arc::new(MemoryIdentityDb::default());
        let m = IdentityManager::builder(vec![req], signer, db, keyring)
            .exchange(Arc::new(login.build().unwrap()))
            .build()
            .unwrap();
        let e = m.start(now_ms()).unwrap_err();
        assert!(m.secret("consul").is_none(), "no token on failure");
        e.to_string()
    };
    let ok_req = || request("default", "consul.io", 3600);

    let e = fails(
        w.login(),
        request("default", "vault.io", 3600),
        w.signer(),
        w.keyring(),
    );
    assert!(
        e.contains("the audience is wrong")
            && e.contains("aud claim does not match any bound audience"),
        "{e}"
    );
    let other_issuer = Arc::new(KeystoreSigner {
        keystore: w.keystore.clone(),
        issuer: "https://issuer.example".into(),
    });
    let e = fails(w.login(), ok_req(), other_issuer, w.keyring());
    assert!(
        e.contains("the issuer is wrong") && e.contains("(iss)"),
        "{e}"
    );
    let e = fails(
        ConsulLogin::builder(&w.consul.url(), task_identity(), "nosuch").allow_http_loopback(true),
        ok_req(),
        w.signer(),
        w.keyring(),
    );
    assert!(
        e.contains("the auth method is wrong") && e.contains(r#"auth method "nosuch" not found"#),
        "{e}"
    );
    let e = fails(
        w.login(),
        request("prod", "consul.io", 3600),
        w.signer(),
        w.keyring(),
    );
    assert!(
        e.contains("no binding rule matched") && e.contains("HTTP 403: Permission denied"),
        "{e}"
    );
    // Keys Consul has never seen (another keystore, not served).
    let stranger = w.dir.path().join("stranger").display().to_string();
    wid_ok(&["keyring", "init", "--keystore", &stranger, "--alg", "EdDSA"]);
    let e = fails(
        w.login(),
        ok_req(),
        Arc::new(KeystoreSigner {
            keystore: stranger.clone(),
            issuer: w.issuer.clone(),
        }),
        Keyring::load(&stranger).unwrap(),
    );
    assert!(
        e.contains("the signature is wrong") && e.contains("failed to verify id token signature"),
        "{e}"
    );

    // An identity token that expires within the leeway: refused here, no
    // request sent.
    let before = w.consul.login_tokens();
    let e = fails(
        w.login().leeway(Duration::from_secs(3600)),
        request("default", "consul.io", 600),
        w.signer(),
        w.keyring(),
    );
    assert!(e.contains("not sent") && e.contains("leeway"), "{e}");
    // Consul would have taken it (600 s left, beyond its 60 s leeway) and made a
    // token: none was made, so no login was sent.
    assert_eq!(w.consul.login_tokens(), before, "no login was sent");

    // ACLs disabled.
    let off = Consul::start(false);
    let e = fails(
        ConsulLogin::builder(&off.url(), task_identity(), METHOD).allow_http_loopback(true),
        ok_req(),
        w.signer(),
        w.keyring(),
    );
    assert!(
        e.contains("ACLs are disabled") && e.contains("HTTP 401: ACL support disabled"),
        "{e}"
    );

    // The network: nothing listens there.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let e = fails(
        ConsulLogin::builder(&closed, task_identity(), METHOD).allow_http_loopback(true),
        ok_req(),
        w.signer(),
        w.keyring(),
    );
    assert!(e.contains("cannot reach Consul"), "{e}");
}

/// Consul's auth method with `OIDCDiscoveryURL` (keys found through
/// `wid serve`'s discovery document) checks the algorithm, and Consul
/// 1.16.3 takes only RS*, ES* and PS* in `JWTSupportedAlgs` (RS256 when it
/// is empty): an EdDSA identity is refused there, saying so, while an ES256
/// one logs in. (With `JWKSURL`, the other tests' way, EdDSA works.)
#[test]
fn through_oidc_discovery_eddsa_is_refused_and_es256_logs_in() {
    let consul = Consul::start(true);
    let (_, rule) = setup_bodies();
    let dir = tempfile::tempdir().unwrap();
    for (alg, algorithm, supported) in [
        ("EdDSA", Algorithm::EdDsa, json!(null)),
        ("ES256", Algorithm::Es256, json!(["ES256"])),
    ] {
        let keystore = dir.path().join(alg).display().to_string();
        wid_ok(&["keyring", "init", "--keystore", &keystore, "--alg", alg]);
        let (issuer, _served) = login_support::serve(&keystore);
        let method = format!("discovery-{}", alg.to_ascii_lowercase());
        let mut config = json!({
            "OIDCDiscoveryURL": issuer,
            "BoundAudiences": ["consul.io"],
            "ClaimMappings": {"nomad_namespace": "nomad_namespace",
                "nomad_job_id": "nomad_job_id", "nomad_task": "nomad_task"},
        });
        if supported.is_array() {
            config["JWTSupportedAlgs"] = supported;
        }
        consul.ok(
            "PUT",
            "/v1/acl/auth-method",
            Some(&json!({"Name": method, "Type": "jwt", "MaxTokenTTL": "5m", "Config": config})),
        );
        let mut rule = rule.clone();
        rule["AuthMethod"] = json!(method);
        consul.ok("PUT", "/v1/acl/binding-rule", Some(&rule));
        let db = Arc::new(MemoryIdentityDb::default());
        let signer = Arc::new(SignsWith {
            keystore: keystore.clone(),
            issuer: issuer.clone(),
            algorithm,
        });
        let login =
            ConsulLogin::builder(&consul.url(), task_identity(), &method).allow_http_loopback(true);
        let m = IdentityManager::builder(
            vec![request("default", "consul.io", 3600)],
            signer,
            db,
            Keyring::load(&keystore).unwrap(),
        )
        .exchange(Arc::new(login.build().unwrap()))
        .build()
        .unwrap();
        let started = m.start(now_ms());
        if alg == "EdDSA" {
            let e = started.unwrap_err().to_string();
            assert!(
                e.contains("the algorithm is wrong")
                    && e.contains(r#"expected ["RS256"] got "EdDSA""#),
                "{e}"
            );
            // And Consul refuses to be told otherwise.
            let (status, said) = consul.call(
                "PUT",
                "/v1/acl/auth-method",
                Some(ROOT),
                Some(&json!({"Name": method, "Type": "jwt", "Config": {
                    "OIDCDiscoveryURL": issuer, "BoundAudiences": ["consul.io"],
                    "JWTSupportedAlgs": ["EdDSA"]}})),
            );
            assert_eq!(
                (status, said.trim()),
                (
                    500,
                    "Invalid Auth Method: Invalid supported algorithm: EdDSA"
                )
            );
        } else {
            started.unwrap();
            let secret = m.secret("consul").unwrap().secret.clone();
            let me = consul.token_self(&secret).unwrap();
            assert_eq!(me["AuthMethod"], method.as_str(), "{me}");
        }
    }
}

/// Signs with the keystore's key of one algorithm.
struct SignsWith {
    keystore: String,
    issuer: String,
    algorithm: Algorithm,
}

impl IdentitySigner for SignsWith {
    fn sign(
        &self,
        requests: &[IssueRequest],
        now: i64,
    ) -> Result<Vec<SignedIdentity>, workload_identity::Error> {
        let issuer = Issuer::new(Keyring::load(&self.keystore)?)
            .issuer(&self.issuer)
            .algorithm(self.algorithm);
        requests.iter().map(|r| issuer.issue(r, now)).collect()
    }
}

/// What Consul refuses when an auth method is written (docs/consul.md,
/// "What a real Consul answered"): a `ClockSkewLeeway` with a unit, a
/// `MaxTokenTTL` under a minute, and a `JWKSURL` it cannot fetch.
#[test]
fn consul_checks_an_auth_method_when_it_is_written() {
    let consul = Consul::start(true);
    let dir = tempfile::tempdir().unwrap();
    let keystore = dir.path().join("keystore").display().to_string();
    wid_ok(&["keyring", "init", "--keystore", &keystore, "--alg", "EdDSA"]);
    let (_issuer, served) = login_support::serve(&keystore);
    let put = |ttl: &str, config: Value| {
        let (status, said) = consul.call(
            "PUT",
            "/v1/acl/auth-method",
            Some(ROOT),
            Some(&json!({"Name": METHOD, "Type": "jwt", "MaxTokenTTL": ttl, "Config": config})),
        );
        (status, said.trim().to_string())
    };
    let jwks = served.jwks_url();
    let (status, said) = put(
        "1h",
        json!({"JWKSURL": jwks, "BoundAudiences": ["consul.io"], "ClockSkewLeeway": "2h"}),
    );
    assert_eq!(status, 500, "{said}");
    assert!(
        said.contains("cannot parse 'ClockSkewLeeway' as int"),
        "{said}"
    );
    let (status, said) = put(
        "30s",
        json!({"JWKSURL": jwks, "BoundAudiences": ["consul.io"]}),
    );
    assert_eq!(
        (status, said.as_str()),
        (500, "MaxTokenTTL 30s cannot be less than 1m0s")
    );
    let closed = format!("http://127.0.0.1:{}/.well-known/jwks.json", free_port());
    let (status, said) = put(
        "1h",
        json!({"JWKSURL": closed, "BoundAudiences": ["consul.io"]}),
    );
    assert_eq!(status, 500, "{said}");
    assert!(
        said.contains("error checking JWKSURL") && said.contains("connection refused"),
        "{said}"
    );
    // None of them was stored; the same method with its keys served is.
    assert_eq!(
        consul
            .call(
                "GET",
                &format!("/v1/acl/auth-method/{METHOD}"),
                Some(ROOT),
                None
            )
            .0,
        404
    );
    let (status, said) = put(
        "1h",
        json!({"JWKSURL": jwks, "BoundAudiences": ["consul.io"], "ClockSkewLeeway": 7_200_000_000_000u64}),
    );
    assert_eq!(status, 200, "{said}");
    let stored = consul.ok("GET", &format!("/v1/acl/auth-method/{METHOD}"), None);
    assert_eq!(
        stored["Config"]["ClockSkewLeeway"], 7_200_000_000_000u64,
        "{stored}"
    );
}
