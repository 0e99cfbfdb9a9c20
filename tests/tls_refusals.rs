//! A refused TLS handshake says which check failed and what to do, for
//! every HTTPS client of the library (etcd, `RemoteJwks`, Transit,
//! `VaultLogin`; issue 41, item 7). Certificates are made here with
//! `openssl`: docs/etcd.md's recipe, run as the page prints it, and the ones
//! operators get wrong (a self-signed `req -x509` certificate, a leaf of
//! another CA, a leaf for another name, one expired, one not yet valid).
//! Each is served by `openssl s_server` on loopback; the recipe's are also
//! used by a real etcd member with client-certificate auth.
//!
//! Needs `openssl` and Debian's `etcd-server` (`/usr/bin/etcd`):
//! `cargo test --features etcd,remote-jwks,transit,vault --test tls_refusals`.
#![cfg(all(
    feature = "etcd",
    feature = "remote-jwks",
    feature = "transit",
    feature = "vault"
))]

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use workload_identity::manager::{IdentityId, IdentityToken, TokenExchange};
use workload_identity::model::Allocation;
use workload_identity::{
    AllocState, Consistency, EtcdConfig, EtcdStore, Keyring, RemoteJwks, StateStore, Transit,
    TransitClient, VaultLogin,
};

const ETCD: &str = "/usr/bin/etcd";
const DOC: &str = include_str!("../docs/etcd.md");
const MARKER: &str = "<!-- run by tests/tls_refusals.rs: openssl recipe -->";
/// The Transit token of the tests: it must never show in a message.
const TOKEN: &str = "hvs.s3cr3t-transit-token";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (the openssl package) is needed to make the test certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The shell block after the marker in docs/etcd.md.
fn recipe() -> String {
    let after = DOC
        .split_once(MARKER)
        .unwrap_or_else(|| panic!("docs/etcd.md has no {MARKER}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("the marker is followed by a ```sh block");
    block[..block.find("\n```").expect("the block ends")].to_string() + "\n"
}

/// docs/etcd.md's recipe run in `dir` exactly as printed (bash, stopping at
/// the first failing command), then the certificates operators get wrong.
fn certificates(dir: &Path) {
    std::fs::write(dir.join("recipe.sh"), recipe()).unwrap();
    let out = Command::new("bash")
        .args(["-eu", "recipe.sh"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/etcd.md's openssl recipe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let run = |args: &[&str]| openssl(dir, args);
    // What the user of issue 41 made: a self-signed certificate for the
    // address, which OpenSSL's default configuration makes a CA.
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "self-signed.key",
            "-out",
            "self-signed.pem",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
    ]
    .concat());
    let constraints = run(&[
        "x509",
        "-in",
        "self-signed.pem",
        "-noout",
        "-ext",
        "basicConstraints",
    ]);
    assert!(constraints.contains("CA:TRUE"), "{constraints}");
    // Another CA, and a leaf of it that is right in every other way.
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "other-ca.key",
            "-out",
            "other-ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=another CA",
        ],
    ]
    .concat());
    let leaf = |name: &str, ca: &str, ext: &str| {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        run(&[
            &["req", "-new"][..],
            &ec,
            &[
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        ]
        .concat());
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext,
            "-out",
            &pem,
        ]);
    };
    leaf("foreign", "other-ca", "member1.ext");
    std::fs::write(
        dir.join("wrong-name.ext"),
        "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n\
         subjectAltName=DNS:etcd.example.com,IP:10.9.9.9\n",
    )
    .unwrap();
    leaf("wrong-name", "ca", "wrong-name.ext");
    // Dates in the past and the future need `openssl ca` (OpenSSL 3.0's
    // `x509` has no start date).
    std::fs::create_dir_all(dir.join("issued")).unwrap();
    std::fs::write(dir.join("issued/index.txt"), "").unwrap();
    std::fs::write(dir.join("issued/serial"), "1000\n").unwrap();
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = test\n[test]\ndatabase = issued/index.txt\n\
         new_certs_dir = issued\nserial = issued/serial\ndefault_md = sha256\n\
         policy = any\nunique_subject = no\ncopy_extensions = none\n\
         [any]\ncommonName = supplied\n[leaf]\nbasicConstraints = critical,CA:FALSE\n\
         extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1\n",
    )
    .unwrap();
    for (name, start, end) in [
        ("expired", "20000101000000Z", "20010101000000Z"),
        ("not-yet-valid", "20900101000000Z", "20910101000000Z"),
    ] {
        run(&[
            &["req", "-new"][..],
            &ec,
            &[
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        ]
        .concat());
        run(&[
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-cert",
            "ca.pem",
            "-keyfile",
            "ca.key",
            "-in",
            &format!("{name}.csr"),
            "-out",
            &format!("{name}.pem"),
            "-startdate",
            start,
            "-enddate",
            end,
            "-extensions",
            "leaf",
            "-notext",
        ]);
    }
}

/// Waits (bounded) until `done`; panics naming `what` if it never is.
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} not ready after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed (by its handle) on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `openssl s_server -WWW` on 127.0.0.1 with the certificate `name`.pem,
/// serving `dir/www` (a JWKS at `/jwks.json`).
struct TlsServer {
    _child: Killed,
    port: u16,
}

impl TlsServer {
    fn start(dir: &Path, name: &str) -> TlsServer {
        let www = dir.join("www");
        std::fs::create_dir_all(&www).unwrap();
        let port = free_port();
        let child = Command::new("openssl")
            .args(["s_server", "-quiet", "-WWW", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(dir.join(format!("{name}.pem")))
            .arg("-key")
            .arg(dir.join(format!("{name}.key")))
            .current_dir(&www)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl (the openssl package) is needed for the TLS server");
        let child = Killed(child);
        wait_until("openssl s_server", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        TlsServer {
            _child: child,
            port,
        }
    }

    fn origin(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

/// What each client says when its handshake with `server` fails, trusting
/// `ca` (else the Mozilla roots): (client, the setting that names the CA
/// bundle, message).
fn refusals(server: &TlsServer, ca: Option<&[u8]>) -> Vec<(&'static str, &'static str, String)> {
    let origin = server.origin();
    let timeout = Duration::from_secs(5);

    let mut jwks =
        RemoteJwks::builder(&format!("{origin}/jwks.json?access=s3cr3t")).timeout(timeout);
    if let Some(ca) = ca {
        jwks = jwks.ca_bundle_pem(ca);
    }
    let jwks = jwks.build().unwrap().refresh().unwrap_err().to_string();

    let mut etcd = EtcdConfig::new(&origin, &[&origin], "/wid-test").timeout(timeout);
    if let Some(ca) = ca {
        etcd = etcd.ca_bundle_pem(ca);
    }
    let etcd = EtcdStore::new(etcd)
        .unwrap()
        .allocation_state("a1", Consistency::Consistent)
        .unwrap_err()
        .message;

    let mut transit = TransitClient::builder(&origin)
        .token(TOKEN)
        .timeout(timeout);
    if let Some(ca) = ca {
        transit = transit.ca_bundle_pem(ca);
    }
    let transit = Transit::new(transit.build().unwrap(), "kek")
        .unwrap_err()
        .to_string();

    let mut vault =
        VaultLogin::builder(&origin, IdentityId::new("server", "vault"), "nomad").timeout(timeout);
    if let Some(ca) = ca {
        vault = vault.ca_bundle_pem(ca);
    }
    let identity = IdentityToken {
        key: IdentityId::new("server", "vault"),
        token: "e30.e30.c2lnbmF0dXJl".into(),
        kid: "k".into(),
        jwt_id: "j".into(),
        issued_at: 0,
        expires_at: None,
        workload_key: None,
    };
    let vault = vault.build().unwrap().exchange(&identity).unwrap_err().0;

    vec![
        (
            "RemoteJwks",
            "RemoteJwksBuilder::ca_bundle_pem (wid: --ca-bundle)",
            jwks,
        ),
        (
            "etcd",
            "EtcdConfig::ca_bundle_pem (wid: --etcd-ca-bundle)",
            etcd,
        ),
        (
            "Transit",
            "TransitClientBuilder::ca_bundle_pem (wid: --transit-ca-bundle)",
            transit,
        ),
        (
            "VaultLogin",
            "VaultLoginBuilder::ca_bundle_pem or ca_bundle_file",
            vault,
        ),
    ]
}

/// The base64 lines of every certificate and key in `dir`: none may show in
/// a message.
fn pem_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("pem" | "key")
        ) {
            let text = std::fs::read_to_string(&path).unwrap();
            lines.extend(
                text.lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                    .map(|l| l[..16].to_string()),
            );
        }
    }
    lines
}

/// A certificate served and what every client must say of it.
struct Case<'a> {
    /// The certificate (and key) `openssl s_server` presents.
    cert: &'a str,
    /// The CA bundle the clients are given (else the Mozilla roots).
    bundle: Option<&'a [u8]>,
    /// rustls's or webpki's name for the refusal.
    tag: &'a str,
    /// Texts every message holds; `{bundle}` is the client's CA setting.
    says: Vec<&'a str>,
}

/// Each wrong certificate, served by `openssl s_server`: every client's
/// message names the server, says which check failed and what to do, names
/// its own CA bundle setting where that is the fix, and shows no certificate
/// or key bytes, no URL path or query, no token.
#[test]
fn each_refused_certificate_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
    let self_signed = std::fs::read(dir.path().join("self-signed.pem")).unwrap();
    let secrets = pem_lines(dir.path());

    let cases = vec![
        // Trusted as its own CA, as curl --cacert would take it: still a CA
        // certificate presented as a server's.
        Case {
            cert: "self-signed",
            bundle: Some(&self_signed),
            tag: "CaUsedAsEndEntity",
            says: vec![
                "presented a CA certificate (basicConstraints CA:TRUE) as its own",
                "self-signed `openssl req -x509` certificate",
                "Issue the server a leaf certificate (basicConstraints CA:FALSE",
                "signed by that CA",
                "docs/etcd.md's \"Certificates with openssl\"",
                "{bundle}",
            ],
        },
        Case {
            cert: "foreign",
            bundle: Some(&ca),
            tag: "UnknownIssuer",
            says: vec![
                "does not lead to any CA of the bundle given with {bundle}: put in that bundle \
                 the CA certificate that signed the server's certificate",
            ],
        },
        Case {
            cert: "member1",
            bundle: None,
            tag: "UnknownIssuer",
            says: vec![
                "no CA bundle was given, so only the Mozilla root CAs",
                "for a private CA, give its certificate with {bundle}",
            ],
        },
        Case {
            cert: "wrong-name",
            bundle: Some(&ca),
            tag: "NotValidForName",
            says: vec![
                "is not valid for \"127.0.0.1\", the host this client asked for",
                "its subjectAltName lists only DNS:etcd.example.com, IP:10.9.9.9",
                "Reissue the certificate with subjectAltName=IP:127.0.0.1",
            ],
        },
        Case {
            cert: "expired",
            bundle: Some(&ca),
            tag: "Expired",
            says: vec![
                "the server's certificate expired at 2001-01-01T00:00:00Z (it is ",
                "renew it",
            ],
        },
        Case {
            cert: "not-yet-valid",
            bundle: Some(&ca),
            tag: "NotValidYet",
            says: vec![
                "the server's certificate is not valid before 2090-01-01T00:00:00Z (it is ",
                "check the clocks",
            ],
        },
    ];
    for Case {
        cert,
        bundle,
        tag,
        says,
    } in cases
    {
        let server = TlsServer::start(dir.path(), cert);
        let refused = format!("TLS with {} refused ({tag}): ", server.origin());
        for (client, setting, message) in refusals(&server, bundle) {
            eprintln!("{cert}, {client}: {message}");
            let context = format!("{cert}, {client}: {message}");
            assert!(message.contains(&refused), "{context}");
            for needle in &says {
                let needle = needle.replace("{bundle}", setting);
                assert!(
                    message.contains(&needle),
                    "expected {needle:?} in {context}"
                );
            }
            for secret in secrets
                .iter()
                .map(String::as_str)
                .chain(["s3cr3t", TOKEN, "BEGIN"])
            {
                assert!(!message.contains(secret), "{secret:?} shown in {context}");
            }
        }
    }
}

/// docs/etcd.md's recipe makes certificates that a real etcd member with
/// client-certificate auth serves and accepts, and that our clients accept:
/// a write and a read through `EtcdStore` with the recipe's CA and client
/// certificate, a JWKS fetched over the recipe's member certificate. Without
/// the client certificate, the member closes the connection and the message
/// says that a client certificate is the likely cause.
#[test]
fn the_recipe_makes_certificates_etcd_and_our_clients_accept() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let d = |name: &str| dir.path().join(name).display().to_string();
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();

    // One member, started with the flags docs/etcd.md gives member 1.
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("https://127.0.0.1:{client}");
    let peer_url = format!("https://127.0.0.1:{peer}");
    let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
    let etcd = Command::new(ETCD)
        .args(["--name", "m1", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("m1={peer_url}")])
        .args([
            "--cert-file",
            &d("member1.pem"),
            "--key-file",
            &d("member1.key"),
        ])
        .args(["--trusted-ca-file", &d("ca.pem"), "--client-cert-auth"])
        .args(["--peer-cert-file", &d("member1.pem")])
        .args(["--peer-key-file", &d("member1.key")])
        .args([
            "--peer-trusted-ca-file",
            &d("ca.pem"),
            "--peer-client-cert-auth",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("etcd (Debian's etcd-server) is needed at /usr/bin/etcd");
    let _etcd = Killed(etcd);

    let config = EtcdConfig::new(&client_url, &[&client_url], "/wid-test")
        .timeout(Duration::from_secs(5))
        .ca_bundle_pem(read("ca.pem"));
    let store = EtcdStore::new(
        config
            .clone()
            .client_certificate_pem(read("wid-etcd.pem"), read("wid-etcd.key")),
    )
    .unwrap();
    let alloc = Allocation {
        id: "a-recipe".into(),
        client_status: "running".into(),
        ..common::allocation()
    };
    wait_until(
        "etcd with the recipe's certificates",
        Duration::from_secs(30),
        || store.put_allocation(&alloc).is_ok(),
    );
    assert_eq!(
        store
            .allocation_state("a-recipe", Consistency::Consistent)
            .unwrap(),
        AllocState::Live
    );

    let without_client_certificate = EtcdStore::new(config)
        .unwrap()
        .allocation_state("a-recipe", Consistency::Consistent)
        .unwrap_err()
        .message;
    eprintln!("without a client certificate: {without_client_certificate}");
    assert!(
        without_client_certificate.contains("client certificate"),
        "{without_client_certificate}"
    );

    let issuer = Keyring::new();
    issuer.rotate(1_700_000_000).unwrap();
    let server = TlsServer::start(dir.path(), "member1");
    std::fs::write(dir.path().join("www/jwks.json"), issuer.jwks().to_json()).unwrap();
    let jwks = RemoteJwks::builder(&format!("{}/jwks.json", server.origin()))
        .ca_bundle_pem(&read("ca.pem"))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert_eq!(jwks.refresh().unwrap().keys.len(), 1);
}

/// A server that requires a client certificate and is sent none (`openssl
/// s_server -Verify`, which answers with a TLS alert, as a TLS 1.3 server
/// does): the etcd client, the one client that can present a certificate,
/// says so and names its client certificate setting.
#[test]
fn a_missing_client_certificate_is_named() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let port = free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet", "-WWW", "-Verify", "1", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-cert")
        .arg(dir.path().join("member1.pem"))
        .arg("-key")
        .arg(dir.path().join("member1.key"))
        .arg("-CAfile")
        .arg(dir.path().join("ca.pem"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl (the openssl package) is needed for the TLS server");
    let _server = Killed(child);
    wait_until("openssl s_server", Duration::from_secs(10), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let url = format!("https://127.0.0.1:{port}");
    let config = EtcdConfig::new(&url, &[&url], "/wid-test")
        .timeout(Duration::from_secs(5))
        .ca_bundle_pem(std::fs::read(dir.path().join("ca.pem")).unwrap());
    let message = EtcdStore::new(config)
        .unwrap()
        .allocation_state("a1", Consistency::Consistent)
        .unwrap_err()
        .message;
    eprintln!("{message}");
    for needle in [
        &format!(
            "TLS with {url} refused (alert CertificateRequired): the server refused this \
             client's certificate, or its lack of one"
        )[..],
        "EtcdConfig::client_certificate_pem (wid: --etcd-cert with --etcd-key)",
    ] {
        assert!(message.contains(needle), "expected {needle:?} in {message}");
    }
}
