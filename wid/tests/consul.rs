//! Consul for (almost) real (seed 001 with Consul, issue 42 item 1):
//! [`ConsulLogin`] inside a real [`IdentityManager`] with a
//! [`FileIdentityDb`], against the Consul stand-in
//! (`tests/consul_standin/consul_standin.py`: Consul's documented ACL HTTP
//! API, its JWT auth method's checks, its status codes and texts; no real
//! Consul can be had here) whose auth method fetches our keys from a real
//! `wid serve`:
//!
//! * docs/consul.md's setup (the auth method and its binding rule) run as
//!   printed with curl, the keys fetched over https trusting `JWKSCACert`;
//!   every other test's auth method and rule are the page's too;
//! * a start logs in (Nomad's `Meta`), the token works at `token/self`;
//! * a restart confirms the saved token with `token/self` and does not log
//!   in again; a token deleted out of band is replaced at the restore and
//!   never handed out;
//! * the token is replaced before its `ExpirationTime`, and whenever the
//!   identity is re-signed, the old one logged out: one live token per
//!   identity;
//! * what was wrong, from Consul's answer: audience, issuer, signature,
//!   unknown auth method, no binding rule matched, ACLs disabled; an
//!   identity token within the leeway is refused with no request sent.
//!
//! Needs python3 with PyJWT: `pip install "PyJWT[crypto]" cryptography`.
//! `cargo test -p wid --test consul`
mod login_support;
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use login_support::{Client, KeystoreSigner, free_port};
use serde_json::{Value, json};
use serve_support::{Served, wid_ok};
use workload_identity::manager::{
    EventKind, IdentityDb, IdentityId, IdentityManager, MemoryIdentityDb,
};
use workload_identity::model::IssueRequest;
use workload_identity::{Clock, ConsulLogin, ConsulLoginBuilder, Keyring, SystemClock};

const ALLOC: &str = "7a1c2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const ROOT: &str = "5e1f7c3a-0b2d-4c6e-8f9a-1b3c5d7e9f00";
const METHOD: &str = "nomad-workloads";
const NODE: &str = "b2d9a4c6-1e3f-4a5b-9c8d-7e6f5a4b3c2d";

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// The stand-in, killed on drop.
struct Standin {
    child: Child,
    addr: String,
}

impl Standin {
    fn start(extra: &[&str]) -> Standin {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/consul_standin/consul_standin.py"
        );
        let check = Command::new("python3")
            .args(["-c", "import jwt, cryptography"])
            .output();
        match check {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "the Consul stand-in needs PyJWT and cryptography: pip install \"PyJWT[crypto]\" cryptography ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!(
                "the Consul stand-in needs python3 ({e}) with PyJWT: pip install \"PyJWT[crypto]\" cryptography"
            ),
        }
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--listen", "127.0.0.1:0", "--bootstrap-token", ROOT])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 starts the Consul stand-in");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("the stand-in said {line:?}"))
            .to_string();
        Standin { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One request; the status and the body.
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, String) {
        let mut s = TcpStream::connect(&self.addr).unwrap();
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
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, body.to_string())
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
            other => Err(other),
        }
    }

    /// The live tokens the auth method made.
    fn login_tokens(&self) -> Vec<Value> {
        self.ok("GET", &format!("/v1/acl/tokens?authmethod={METHOD}"), None)
            .as_array()
            .unwrap()
            .clone()
    }

    /// How many logins, logouts and token/self calls it has answered.
    fn requests(&self) -> Value {
        self.ok("GET", "/v1/standin/requests", None)
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wid serve` over a keystore, and the stand-in with a JWT auth method
/// that fetches the keys from it.
struct World {
    dir: tempfile::TempDir,
    keystore: String,
    issuer: String,
    _served: Served,
    consul: Standin,
}

impl World {
    fn new(max_token_ttl: &str, clock_skew_leeway: &str) -> World {
        let dir = tempfile::tempdir().unwrap();
        let keystore = dir.path().join("keystore").display().to_string();
        wid_ok(&["keyring", "init", "--keystore", &keystore, "--alg", "EdDSA"]);
        let (issuer, served) = login_support::serve(&keystore);
        let consul = Standin::start(&[]);
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
fn configure(consul: &Standin, jwks_url: &str, issuer: &str, ttl: &str, skew: &str) {
    let (mut method, rule) = setup_bodies();
    assert_eq!(method["Name"], METHOD);
    method["MaxTokenTTL"] = json!(ttl);
    let config = method["Config"].as_object_mut().unwrap();
    config.remove("JWKSCACert");
    config.insert("JWKSURL".into(), json!(jwks_url));
    config.insert("BoundIssuer".into(), json!(issuer));
    config.insert("ClockSkewLeeway".into(), json!(skew));
    consul.ok("PUT", "/v1/acl/auth-method", Some(&method));
    consul.ok("PUT", "/v1/acl/binding-rule", Some(&rule));
}

/// docs/consul.md's setup as printed (bash, curl), against the stand-in
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
    let consul = Standin::start(&[]);
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
    // The stand-in fetched the keys over https, trusting JWKSCACert.
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

/// A client whose manager logs in to the stand-in as the client process
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

/// A token's time `field`, in Unix milliseconds.
fn time_ms(token: &Value, field: &str) -> i64 {
    let t = token[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {token}"));
    // The stand-in writes Go's layout with microseconds: parse by hand.
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys,datetime as d;print(int(d.datetime.strptime(sys.argv[1],'%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=d.timezone.utc).timestamp()*1000))",
            t,
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn seed_001_with_consul_start_restart_deletion_expiry_and_resigning() {
    // Consul tokens live 30 s; the auth method accepts identity tokens dated
    // up to 2 h ahead of its (real) clock, so the manager's clock can be
    // moved to the identity's renewal without waiting for it.
    let w = World::new("30s", "2h");
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

    // The client restarts: token/self confirms the saved token; no login.
    let before = w.consul.requests();
    let m = client.manager(&w);
    let r = m.restore(now_ms()).unwrap();
    assert!(r.reused && r.rederived.is_empty(), "{r:?}");
    assert_eq!(client.last(), (first.clone(), EventKind::Restored));
    let after = w.consul.requests();
    assert_eq!(after["login"], before["login"], "not logged in again");
    assert_eq!(
        after["token_self"].as_u64().unwrap(),
        before["token_self"].as_u64().unwrap() + 1
    );
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
    assert_eq!(
        w.consul.token_self(&second).unwrap_err().1,
        "ACL not found",
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
    let w = World::new("5m", "0s");
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
    let before = w.consul.requests();
    let e = fails(
        w.login().leeway(Duration::from_secs(3600)),
        request("default", "consul.io", 600),
        w.signer(),
        w.keyring(),
    );
    assert!(e.contains("not sent") && e.contains("leeway"), "{e}");
    assert_eq!(
        w.consul.requests()["login"],
        before["login"],
        "no login was sent"
    );

    // ACLs disabled.
    let off = Standin::start(&["--acl-disabled"]);
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
