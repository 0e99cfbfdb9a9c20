//! `wid serve` as relying parties and operators meet it: HTTPS with a
//! certificate swapped under the running server, client certificates
//! required everywhere but the JWKS and discovery document, keep-alive,
//! HEAD, `ETag`/`If-None-Match`, `/metrics`, and the static exports
//! (`wid keyring export`, `wid keyring jwks --format pem`) matching what is
//! served byte for byte. TLS clients are `curl` (as operators use it);
//! certificates are made with `openssl`; the PEM keys are read back by
//! Python's `cryptography` (CI installs it).
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use serve_support::{Served, eventually, http, http_with, wid, wid_ok};

#[track_caller]
fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd} ({e}): CI installs it"))
}

/// A CA and the certificates it signs, made with `openssl`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A self-signed CA `name`: `name.pem`, `name.key`.
    fn ca(&self, name: &str) {
        let o = run(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &self.path(&format!("{name}.key")),
                "-out",
                &self.path(&format!("{name}.pem")),
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    /// A certificate `name` signed by CA `ca`, for a server (127.0.0.1) or
    /// a client; its key is mode 0600.
    fn leaf(&self, ca: &str, name: &str, server: bool) {
        let key = self.path(&format!("{name}.key"));
        let csr = self.path(&format!("{name}.csr"));
        let ext = self.path(&format!("{name}.ext"));
        std::fs::write(
            &ext,
            if server {
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
            } else {
                "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n"
            },
        )
        .unwrap();
        let o = run(
            "openssl",
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = run(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &self.path(&format!("{ca}.pem")),
                "-CAkey",
                &self.path(&format!("{ca}.key")),
                "-CAcreateserial",
                "-out",
                &self.path(&format!("{name}.pem")),
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// `curl` over HTTPS trusting `ca`, with a client certificate when given:
/// the status (0 when no TLS connection could be made) and the body.
fn curl(url: &str, ca: &str, client: Option<(&str, &str)>) -> (u16, String) {
    let mut args = vec![
        "-s",
        "--max-time",
        "20",
        "--cacert",
        ca,
        "-w",
        "\n%{http_code}",
        url,
    ];
    if let Some((cert, key)) = client {
        args.extend(["--cert", cert, "--key", key]);
    }
    let o = run("curl", &args);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A metric's value in a /metrics answer.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

fn keystore(dir: &Path) -> String {
    let ks = dir.join("keystore").display().to_string();
    wid_ok(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--alg",
        "EdDSA",
        "--alg",
        "ES256",
        "--alg",
        "RS256",
    ]);
    ks
}

#[test]
fn https_with_a_certificate_swapped_under_the_running_server_and_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    pki.ca("ca1");
    pki.ca("ca2");
    pki.ca("clients");
    pki.leaf("ca1", "server1", true);
    pki.leaf("ca2", "server2", true);
    pki.leaf("clients", "client", false);
    pki.ca("stranger");
    pki.leaf("stranger", "intruder", false);
    let ks = keystore(dir.path());
    // The served files, replaced by rename as certificate tools do.
    let cert = pki.path("tls.pem");
    let key = pki.path("tls.key");
    std::fs::copy(pki.path("server1.pem"), &cert).unwrap();
    std::fs::copy(pki.path("server1.key"), &key).unwrap();

    // A key file others can read is refused at start, naming it.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = wid(&[
        "serve",
        "--keystore",
        &ks,
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--tls-key") && err.contains("mode 0644"),
        "{err}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    let served = Served::start(&[
        "--keystore",
        &ks,
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &pki.path("clients.pem"),
    ]);
    assert!(served.first_line().starts_with("listening on https://"));
    let base = format!("https://{}", served.addr);
    let jwks_url = format!("{base}/.well-known/jwks.json");
    let health = format!("{base}/health");
    let metrics_url = format!("{base}/metrics");
    let ca1 = pki.path("ca1.pem");
    let ca2 = pki.path("ca2.pem");
    let client = (pki.path("client.pem"), pki.path("client.key"));
    let client = Some((client.0.as_str(), client.1.as_str()));

    // The JWKS needs no client certificate (Vault and Consul have none);
    // /health and /metrics do.
    let (status, body) = curl(&jwks_url, &ca1, None);
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["keys"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // So does the SPIFFE bundle endpoint (https_web: a federated trust
    // domain has no client certificate of ours), which the library's
    // SpiffeBundleSource reads with the server's CA.
    let bundle_url = format!("{base}/spiffe/bundle.json");
    let (status, body) = curl(&bundle_url, &ca1, None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"spiffe_sequence\""), "{body}");
    let peer = workload_identity::SpiffeBundleSource::builder("prod.example.org", &bundle_url)
        .ca_bundle_pem(&std::fs::read(&ca1).unwrap())
        .build()
        .unwrap();
    assert_eq!(peer.refresh().unwrap().keys.len(), 2, "ES256 and RS256");
    let (status, body) = curl(&health, &ca1, None);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("client certificate is required"), "{body}");
    assert_eq!(curl(&health, &ca1, client).0, 200);
    // A certificate from another CA fails the handshake itself.
    let intruder = (pki.path("intruder.pem"), pki.path("intruder.key"));
    assert_eq!(curl(&health, &ca1, Some((&intruder.0, &intruder.1))).0, 0);
    // Plain HTTP to the TLS port gets no answer.
    let mut plain = TcpStream::connect(&served.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(plain, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("200 OK"));

    // The certificate rotates: new files renamed over the old ones. The
    // running server serves the new one (trusted by ca2 only) without a
    // restart.
    let swap = |from: &str, to: &str| {
        let tmp = format!("{to}.new");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    };
    swap(&pki.path("server2.pem"), &cert);
    swap(&pki.path("server2.key"), &key);
    eventually("the new certificate served", || {
        curl(&jwks_url, &ca2, None).0 == 200
    });
    assert_eq!(curl(&jwks_url, &ca1, None).0, 0, "the old one is gone");
    // A broken certificate keeps the last good one served, and says so.
    // (A swap seen half-done, new certificate and old key, may have failed
    // once already: count from here.)
    let failures = |text: &str| metric(text, "wid_serve_tls_reload_failures_total");
    let before = failures(&curl(&metrics_url, &ca2, client).1);
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    eventually("the failed reload counted", || {
        let (status, text) = curl(&metrics_url, &ca2, client);
        status == 200 && failures(&text) > before
    });
    assert_eq!(curl(&jwks_url, &ca2, None).0, 200);
    let (_, text) = curl(&metrics_url, &ca2, client);
    assert!(
        metric(&text, "wid_serve_tls_reloads_total") >= 1.0,
        "{text}"
    );
    let (status, err) = served.terminate();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("TLS reload failed, serving the last good certificate"),
        "{err}"
    );
    assert!(!err.contains("PRIVATE KEY"), "{err}");
}

#[test]
fn keep_alive_head_conditional_get_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let ks = keystore(dir.path());
    // The issuer need not name the listener's port (a proxy may be in
    // front); a fixed loopback one keeps the port free to choose.
    let issuer = "http://127.0.0.1:8080".to_string();
    let served = Served::start(&[
        "--keystore",
        &ks,
        "--listen",
        "127.0.0.1:0",
        "--issuer",
        &issuer,
        "--log-requests",
    ]);

    // Two requests on one connection (keep-alive), the second a HEAD.
    let mut conn = TcpStream::connect(&served.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        conn,
        "GET /.well-known/jwks.json HTTP/1.1\r\nHost: x\r\n\r\nHEAD /.well-known/jwks.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    assert_eq!(raw.matches("HTTP/1.1 200 OK").count(), 2, "{raw}");
    let jwks = served.jwks();
    assert_eq!(raw.matches(&jwks.body).count(), 1, "the HEAD has no body");

    // ETag and If-None-Match: 304 without a body, the same validators.
    let tag = jwks.header("ETag").expect("an ETag").to_string();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "{tag}");
    let again = http_with(
        &served.addr,
        "GET",
        "/.well-known/jwks.json",
        &[("If-None-Match", &tag)],
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert_eq!(again.header("ETag"), Some(tag.as_str()));
    // The same cache lifetime (it counts down with the clock: a second may
    // have passed between the two answers).
    assert!(
        jwks.max_age().abs_diff(again.max_age()) <= 2,
        "{:?} then {:?}",
        jwks.header("Cache-Control"),
        again.header("Cache-Control")
    );
    let other = http_with(
        &served.addr,
        "GET",
        "/.well-known/jwks.json",
        &[("If-None-Match", "\"x\"")],
    );
    assert_eq!(other.status, 200);
    // The discovery document has its own.
    let doc = served.get("/.well-known/openid-configuration");
    assert_eq!(doc.status, 200);
    assert_ne!(doc.header("ETag"), Some(tag.as_str()));

    // A rotation changes the JWKS and so its ETag.
    wid_ok(&["keyring", "rotate", "--keystore", &ks]);
    let rotated = served.jwks();
    assert_ne!(rotated.header("ETag"), Some(tag.as_str()));
    assert_eq!(
        http_with(
            &served.addr,
            "GET",
            "/.well-known/jwks.json",
            &[("If-None-Match", &tag)]
        )
        .status,
        200
    );

    // Only GET and HEAD.
    let post = http(&served.addr, "POST", "/.well-known/jwks.json");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow"), Some("GET, HEAD"));
    assert_eq!(served.get("/nope").status, 404);

    // /metrics counts all of it.
    let m = served.get("/metrics");
    assert_eq!(m.status, 200);
    assert!(
        m.header("Content-Type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = m.body;
    for (line, at_least) in [
        (
            "wid_serve_requests_total{route=\"jwks\",status=\"200\"}",
            5.0,
        ),
        (
            "wid_serve_requests_total{route=\"jwks\",status=\"304\"}",
            1.0,
        ),
        (
            "wid_serve_requests_total{route=\"jwks\",status=\"405\"}",
            1.0,
        ),
        (
            "wid_serve_requests_total{route=\"other\",status=\"404\"}",
            1.0,
        ),
        (
            "wid_serve_requests_total{route=\"discovery\",status=\"200\"}",
            1.0,
        ),
        ("wid_serve_keystore_reloads_total", 1.0),
    ] {
        assert!(metric(&text, line) >= at_least, "{line} in\n{text}");
    }
    assert_eq!(metric(&text, "wid_serve_keys_served"), 4.0);
    assert_eq!(metric(&text, "wid_serve_keys_current"), 1.0);
    // The next planned switch: the new EdDSA key's successor, 720 h after
    // it started signing (a few seconds ago).
    let next = metric(&text, "wid_serve_next_rotation_seconds");
    assert!(next > 719.0 * 3600.0 && next <= 720.0 * 3600.0, "{next}");
    // /health as before, without internal detail.
    let health = served.get("/health");
    assert_eq!(health.status, 200);
    assert!(!health.body.contains(&ks), "{}", health.body);
    // --log-requests: one line per request; and the issuer naming another
    // port than the listener's was pointed out at start.
    let (status, out) = served.terminate();
    assert_eq!(status.code(), Some(0), "{out}");
    for line in [
        "wid serve: GET /.well-known/jwks.json 304",
        "wid serve: HEAD /.well-known/jwks.json 200",
        "wid serve: POST /.well-known/jwks.json 405",
        "the issuer http://127.0.0.1:8080 names port 8080, but this server listens on",
    ] {
        assert!(out.contains(line), "{line} in\n{out}");
    }
}

#[test]
fn static_exports_are_the_served_documents_and_pem_keys_are_the_jwks_keys() {
    let dir = tempfile::tempdir().unwrap();
    let ks = keystore(dir.path());
    let issuer = "http://127.0.0.1:8080".to_string();
    let site = dir.path().join("site");
    let out = wid_ok(&[
        "keyring",
        "export",
        "--keystore",
        &ks,
        "--dir",
        &site.display().to_string(),
        "--issuer",
        &issuer,
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["keys"], 3);
    let served = Served::start(&[
        "--keystore",
        &ks,
        "--listen",
        "127.0.0.1:0",
        "--issuer",
        &issuer,
    ]);
    let jwks_file = std::fs::read_to_string(site.join(".well-known/jwks.json")).unwrap();
    let doc_file = std::fs::read_to_string(site.join(".well-known/openid-configuration")).unwrap();
    assert_eq!(jwks_file, served.jwks().body, "byte for byte");
    assert_eq!(
        doc_file,
        served.get("/.well-known/openid-configuration").body
    );
    let mode = std::fs::metadata(site.join(".well-known/jwks.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "public documents");
    // An issuer that cannot be one writes nothing.
    let bad = dir.path().join("bad");
    let o = wid(&[
        "keyring",
        "export",
        "--keystore",
        &ks,
        "--dir",
        &bad.display().to_string(),
        "--issuer",
        "http://issuer.example.com",
    ]);
    assert!(!o.status.success());
    assert!(!bad.join(".well-known/jwks.json").exists());

    // PEM: one SubjectPublicKeyInfo per published key, each the very key of
    // the JWKS entry with that kid (read back by Python's cryptography).
    let pem = wid_ok(&["keyring", "jwks", "--keystore", &ks, "--format", "pem"]);
    assert_eq!(
        pem.matches("-----BEGIN PUBLIC KEY-----").count(),
        3,
        "{pem}"
    );
    let check = r#"
import sys, json, jwt
from cryptography.hazmat.primitives import serialization as s
pem, jwks = sys.argv[1], json.loads(sys.argv[2])
blocks = pem.split("kid: ")[1:]
assert len(blocks) == len(jwks["keys"]) == 3, blocks
for block in blocks:
    head, body = block.split("\n", 1)
    kid = head.split(" ")[0]
    ours = s.load_pem_public_key(body.encode())
    want = [k for k in jwks["keys"] if k["kid"] == kid][0]
    theirs = jwt.PyJWK(want).key
    der = lambda k: k.public_bytes(s.Encoding.DER, s.PublicFormat.SubjectPublicKeyInfo)
    assert der(ours) == der(theirs), kid
print("ok")
"#;
    let o = run("python3", &["-c", check, &pem, &jwks_file]);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "ok",
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let as_json: Value = serde_json::from_str(&wid_ok(&[
        "keyring",
        "jwks",
        "--keystore",
        &ks,
        "--format",
        "pem",
        "--json",
    ]))
    .unwrap();
    assert_eq!(as_json["keys"].as_array().unwrap().len(), 3);
    assert!(
        as_json["keys"][0]["pem"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN PUBLIC KEY-----\n")
    );
}
