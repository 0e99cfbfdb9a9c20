//! The `kubernetes` key purpose from the command line: `wid keyring` makes
//! and publishes its keys apart, `wid serve` publishes the cluster issuer's
//! documents at the apiserver's paths and never a kubernetes key in the
//! JWKS, and `wid k8s-signer` refuses to start on what kube-apiserver could
//! not use. The signer's gRPC service itself is driven by kube-apiserver's
//! own client stubs in bindings/go/interop/k8ssigner.
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::path::Path;

use serde_json::Value;
use serve_support::{Served, wid, wid_ok};

fn keystore(dir: &Path, purpose: &str, alg: &str, longest: &str) -> (String, String) {
    let kek = dir.join("kek").display().to_string();
    let ks = dir.join(format!("{purpose}.json")).display().to_string();
    wid_ok(&["keyring", "generate-kek", "--kek-file", &kek]);
    wid_ok(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--purpose",
        purpose,
        "--alg",
        alg,
        "--longest-ttl",
        longest,
    ]);
    (ks, kek)
}

fn kids(json: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(json).unwrap();
    v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_string())
        .collect()
}

/// `wid WORDS` (split at spaces: the paths here have none).
fn wid_words(words: &str) -> std::process::Output {
    wid(&words.split(' ').collect::<Vec<_>>())
}

/// `wid WORDS`, which must succeed: the kids of the key set it prints.
#[track_caller]
fn kids_of(words: &str) -> Vec<String> {
    kids(&wid_ok(&words.split(' ').collect::<Vec<_>>()))
}

#[test]
fn kubernetes_keys_are_published_apart_and_never_in_the_jwks() {
    let dir = tempfile::tempdir().unwrap();
    let (ks, kek) = keystore(dir.path(), "kubernetes", "ES256", "1h");
    let store = format!("--keystore {ks} --kek-file {kek}");
    for rotate in ["--alg EdDSA", "--purpose wit --alg ES256"] {
        let o = wid_words(&format!("keyring rotate {store} {rotate}"));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let k8s = kids_of(&format!("keyring jwks {store} --purpose kubernetes"));
    assert_eq!(k8s.len(), 1);
    let bearer = kids_of(&format!("keyring jwks {store}"));
    let wit = kids_of(&format!("keyring jwks {store} --purpose wit"));
    assert_eq!((bearer.len(), wit.len()), (1, 1));
    assert!(!bearer.contains(&k8s[0]) && !wit.contains(&k8s[0]));
    // EdDSA is no algorithm of the purpose; a SPIFFE bundle has no kubernetes keys.
    let o = wid_words(&format!(
        "keyring rotate {store} --purpose kubernetes --alg EdDSA"
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ES256 or RS256"), "{err}");
    let o = wid_words(&format!(
        "keyring jwks {store} --purpose kubernetes --format spiffe"
    ));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no SPIFFE authority"));

    let issuer = "http://127.0.0.1/k8s";
    let serve = format!("{store} --listen 127.0.0.1:0 --issuer http://127.0.0.1");
    let served = Served::start(
        &format!("{serve} --kubernetes-issuer {issuer}")
            .split(' ')
            .collect::<Vec<_>>(),
    );
    assert_eq!(served.get("/kubernetes/jwks.json").kids(), k8s);
    assert_eq!(served.get("/k8s/openid/v1/jwks").kids(), k8s);
    assert_eq!(served.jwks().kids(), bearer);
    assert_eq!(served.get("/wit/jwks.json").kids(), wit);
    let doc = served.get("/k8s/.well-known/openid-configuration").json();
    assert_eq!(doc["issuer"], issuer);
    assert_eq!(doc["jwks_uri"], format!("{issuer}/openid/v1/jwks"));
    assert_eq!(
        doc["id_token_signing_alg_values_supported"],
        serde_json::json!(["ES256"])
    );
    let bearer_doc = served.get("/.well-known/openid-configuration").json();
    assert_eq!(bearer_doc["issuer"], "http://127.0.0.1");
    // The SPIFFE bundle holds no kubernetes key either.
    let bundle = served.get("/spiffe/bundle.json").json();
    assert!(!bundle.to_string().contains(&k8s[0]), "{bundle}");
    drop(served);

    // A cluster issuer without a path of its own would take --issuer's place.
    let o = wid_words(&format!(
        "serve {serve} --kubernetes-issuer http://127.0.0.1/"
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a path of its own"), "{err}");
}

#[test]
fn a_server_of_the_cluster_keys_alone_is_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let (ks, kek) = keystore(dir.path(), "kubernetes", "RS256", "1h");
    let served = Served::start(&[
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--listen",
        "127.0.0.1:0",
        "--kubernetes-issuer",
        "https://cluster.example",
    ]);
    let health = served.get("/health");
    assert_eq!(health.json()["status"], "ok", "{}", health.json());
    assert_eq!(served.get("/openid/v1/jwks").kids().len(), 1);
    assert_eq!(
        served.get("/.well-known/openid-configuration").json()["jwks_uri"],
        "https://cluster.example/openid/v1/jwks"
    );
}

#[track_caller]
fn refused(args: &[&str], code: i32, says: &str) {
    let mut all = vec!["k8s-signer"];
    all.extend_from_slice(args);
    let o = wid(&all);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{all:?}: {err}");
    assert!(err.contains(says), "{says:?} not in: {err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn the_signer_refuses_to_start_on_what_the_apiserver_could_not_use() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock").display().to_string();
    let issuer = "https://cluster.example";
    let flags = |ks: &str, kek: &str| -> Vec<String> {
        [
            "--keystore",
            ks,
            "--kek-file",
            kek,
            "--issuer",
            issuer,
            "--socket",
            &sock,
        ]
        .map(String::from)
        .to_vec()
    };
    // Only a bearer key: none signs for the cluster; a LongestTTL under the
    // apiserver's 600 s.
    for (purpose, longest, says) in [
        (
            "bearer",
            "1h",
            "wid keyring rotate --purpose kubernetes --alg ES256",
        ),
        ("kubernetes", "5m", "600 s"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let (ks, kek) = keystore(d.path(), purpose, "ES256", longest);
        let args = flags(&ks, &kek);
        refused(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            4,
            says,
        );
    }
    let (ks, kek) = keystore(dir.path(), "kubernetes", "ES256", "1h");
    let base = [
        "--keystore",
        ks.as_str(),
        "--kek-file",
        kek.as_str(),
        "--issuer",
        issuer,
    ];
    // No RS256 kubernetes key; EdDSA is none of the purpose's.
    refused(
        &[&base[..], &["--socket", &sock, "--alg", "RS256"]].concat(),
        4,
        "RS256",
    );
    refused(
        &[&base[..], &["--socket", &sock, "--alg", "EdDSA"]].concat(),
        2,
        "ES256 or RS256",
    );
    // A regular file where the socket goes is refused and left alone.
    std::fs::write(&sock, b"not a socket").unwrap();
    refused(
        &[&base[..], &["--socket", &sock]].concat(),
        2,
        "is not a socket",
    );
    assert_eq!(std::fs::read(&sock).unwrap(), b"not a socket");
    // An abstract socket has no mode to set.
    refused(
        &[
            &base[..],
            &["--socket", "@wid-test-mode", "--socket-mode", "660"],
        ]
        .concat(),
        2,
        "does not apply to an abstract socket",
    );
    refused(
        &[&base[..], &["--socket", &sock, "--socket-mode", "0060"]].concat(),
        2,
        "owner",
    );
    refused(
        &[
            "--keystore",
            &ks,
            "--kek-file",
            &kek,
            "--issuer",
            " ",
            "--socket",
            &sock,
        ],
        2,
        "--issuer",
    );
}

const PAGE: &str = include_str!("../../docs/kubernetes.md");

/// The ```sh block of docs/kubernetes.md marked
/// `<!-- run by wid/tests/cli_k8s.rs: NAME -->`, with the page's paths put
/// under `dir` and the listener on any free port.
fn doc_block(name: &str, dir: &Path) -> String {
    let marker = format!("<!-- run by wid/tests/cli_k8s.rs: {name} -->");
    let after = PAGE
        .split_once(&marker)
        .unwrap_or_else(|| panic!("docs/kubernetes.md has no {marker}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a ```sh block after the marker");
    let d = dir.display().to_string();
    block[..block.find("\n```").expect("the block ends")]
        .replace("/etc/wid/kek", &format!("{d}/kek"))
        .replace("/var/lib/wid/keystore.json", &format!("{d}/keystore.json"))
        .replace("/run/wid/k8s-signer.sock", &format!("{d}/k8s.sock"))
        .replace("127.0.0.1:8443", "127.0.0.1:0")
}

/// `bash -c script` with `wid` on PATH.
fn bash(script: &str) -> std::process::Command {
    let bin = std::path::Path::new(serve_support::WID).parent().unwrap();
    let mut c = std::process::Command::new("bash");
    c.args(["-eu", "-c", script]).env(
        "PATH",
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    );
    c
}

#[track_caller]
fn run_block(name: &str, dir: &Path) -> String {
    let script = doc_block(name, dir);
    let o = bash(&script).output().unwrap();
    assert!(
        o.status.success(),
        "docs/kubernetes.md's {name} block failed:\n{script}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Starts a server block in the background: its first stdout line, and the
/// running child.
fn start_block(name: &str, dir: &Path) -> (String, std::process::Child) {
    use std::io::BufRead;
    let script = doc_block(name, dir);
    let mut child = bash(&format!("exec {script}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (line.trim().to_string(), child)
}

fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap()
}

/// docs/kubernetes.md as printed: the keys, the signer on its socket (mode
/// 0660, removed at SIGTERM), a rotation it signs with at once, and `wid
/// serve` publishing the cluster issuer's documents.
#[test]
fn the_kubernetes_page_runs_as_printed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let listed = run_block("keys", dir.path());
    assert!(
        listed.contains("kubernetes") && listed.contains("ES256"),
        "{listed}"
    );
    let (first, mut signer) = start_block("signer", dir.path());
    let sock = dir.path().join("k8s.sock");
    assert_eq!(first, format!("listening on unix:{}", sock.display()));
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let before = kids(&run_jwks(dir.path()));
    run_block("rotate", dir.path());
    let after = kids(&run_jwks(dir.path()));
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.contains(&before[0]));
    assert!(terminate(&mut signer).success());
    assert!(!sock.exists(), "the socket outlived a SIGTERM");
    let (first, mut served) = start_block("serve", dir.path());
    let addr = first
        .strip_prefix("listening on http://")
        .unwrap()
        .to_string();
    let doc = serve_support::http(&addr, "GET", "/.well-known/openid-configuration").json();
    assert_eq!(doc["issuer"], "https://cluster.example.com");
    assert_eq!(
        doc["jwks_uri"],
        "https://cluster.example.com/openid/v1/jwks"
    );
    let set = serve_support::http(&addr, "GET", "/openid/v1/jwks").kids();
    assert_eq!(set.len(), 2);
    assert!(terminate(&mut served).success());
}

fn run_jwks(dir: &Path) -> String {
    let d = dir.display().to_string();
    wid_ok(&[
        "keyring",
        "jwks",
        "--keystore",
        &format!("{d}/keystore.json"),
        "--kek-file",
        &format!("{d}/kek"),
        "--purpose",
        "kubernetes",
    ])
}
