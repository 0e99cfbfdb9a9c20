//! The `wid` tool on the replicated keyring (`--etcd`), end to end: the
//! built binary against a real etcd cluster on loopback. Two `wid serve` on
//! one prefix serve one JWKS and follow a rotation made by a third `wid`;
//! tokens from `wid issue --etcd` verify against either server; `wid keyring
//! migrate` copies a keystore into etcd (wrapped) and back without losing a
//! key; docs/etcd.md's policy, remove and revoke, backup and restore
//! blocks and docs/wid.md's move to etcd, run as printed; the refusals (no
//! KEK, a wrong KEK, plain http) and the secrets that must never be
//! printed.
//!
//! Needs Debian's `etcd-server` and root (as the library's
//! `tests/etcd_keyring.rs`):
//! `cargo test -p wid --test cli_etcd -- --test-threads=1`
#[path = "../../tests/etcd_support/mod.rs"]
mod etcd_support;
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use etcd_support::{Cluster, Options, Security, eventually};
use serde::Deserialize;
use serde_json::Value;
use serve_support::{Served, WID};
use workload_identity::codec::Bin;

const T0: i64 = 1_700_000_000;
const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
/// Generous: propagation takes milliseconds, but CI hosts stall.
const LIMIT: Duration = Duration::from_secs(60);

fn wid_env<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(WID);
    c.args(args)
        .stdin(Stdio::null())
        .env_remove("WID_ETCD_PASSWORD");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("wid runs")
}

fn wid<S: AsRef<OsStr>>(args: &[S]) -> Output {
    wid_env(args, &[])
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs wid, expecting `code`; returns the output.
#[track_caller]
fn expect<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S], code: i32) -> Output {
    let o = wid(args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "wid {args:?}\nstdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    o
}

#[track_caller]
fn json_out<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> Value {
    let o = expect(args, 0);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("wid {args:?} printed no JSON ({e}): {}", stdout(&o)))
}

/// The `--json` error object a failure prints on stderr.
#[track_caller]
fn json_err(o: &Output) -> Value {
    serde_json::from_slice::<Value>(&o.stderr)
        .unwrap_or_else(|e| panic!("no JSON error ({e}): {}", stderr(o)))["error"]
        .clone()
}

/// Polls `f` every 20 ms until it is true; panics naming `what` after `limit`.
#[track_caller]
/// Command-line words, owned.
fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|x| x.to_string()).collect()
}

/// `head`, then `flags`, then `more`: one command line.
fn args(head: &[&str], flags: &[String], more: &[&str]) -> Vec<String> {
    [strings(head), flags.to_vec(), strings(more)].concat()
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("a scratch directory"),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// Writes a file of mode 0600.
    fn write(&self, name: &str, bytes: &[u8]) -> String {
        self.write_mode(name, bytes, 0o600)
    }

    /// Writes a file of mode `mode`.
    fn write_mode(&self, name: &str, bytes: &[u8], mode: u32) -> String {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write a scratch file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// A new KEK file made by `wid keyring generate-kek`.
    fn kek(&self, name: &str) -> String {
        let p = self.path(name);
        expect(&["keyring", "generate-kek", "--kek-file", &p], 0);
        p
    }
}

fn request(s: &Scratch) -> String {
    s.write(
        "req.json",
        format!(
            r#"{{"Region":"global",
            "Allocation":{{"ID":"{ALLOC}","Namespace":"default","JobID":"web",
                          "TaskGroup":"frontend","ClientStatus":"running"}},
            "Task":"server",
            "Identity":{{"Name":"vault_default","Audience":["vault.io"],"TTL":"1h"}}}}"#
        )
        .as_bytes(),
    )
}

/// `--etcd` with `urls` (the first the local member) on a plain cluster.
fn etcd_flags(urls: &[String], prefix: &str, kek: &str) -> Vec<String> {
    strings(&[
        "--etcd",
        &urls.join(","),
        "--etcd-allow-plain-http",
        "--etcd-prefix",
        prefix,
        "--kek-file",
        kek,
    ])
}

/// `--keystore path --kek-file kek`: a keystore wrapped by `kek`.
fn keystore_flags(path: &str, kek: &str) -> Vec<String> {
    strings(&["--keystore", path, "--kek-file", kek])
}

/// `wid verify` of `token` with the JWKS at `url`: accepted?
fn verifies(token: &str, url: &str) -> bool {
    let o = wid(&[
        "verify",
        token,
        "--aud",
        "vault.io",
        "--jwks",
        url,
        "--issuer",
        "http://127.0.0.1",
        "--assume-live",
        "--json",
    ]);
    o.status.code() == Some(0)
        && serde_json::from_slice::<Value>(&o.stdout).is_ok_and(|v| v["accepted"] == true)
}

/// `wid issue` with `flags`: the token and its key ID.
fn issue(flags: &[String], req: &str, alg: &str) -> (String, String) {
    let v = json_out(&args(
        &["issue"],
        flags,
        &[
            "--request",
            req,
            "--alg",
            alg,
            "--issuer",
            "http://127.0.0.1",
            "--json",
        ],
    ));
    (
        v["token"].as_str().unwrap().to_string(),
        v["kid"].as_str().unwrap().to_string(),
    )
}

/// `wid keyring <cmd> <flags> <more>`.
fn keyring_json(cmd: &str, flags: &[String], more: &[&str]) -> Value {
    json_out(&args(&["keyring", cmd], flags, more))
}

/// The state of `kid` in `wid keyring list --json` output.
fn state_of(list: &Value, kid: &str) -> Option<String> {
    list["keys"]
        .as_array()?
        .iter()
        .find(|k| k["kid"] == kid)
        .map(|k| k["state"].as_str().unwrap().to_string())
}

/// Two servers, each on its own member, serve one JWKS; a rotation by a
/// third `wid` (through the third member) reaches both without a restart;
/// the elected rotator in one of them promotes the successor after the lead
/// time; tokens from `wid issue --etcd` verify against either server.
#[test]
fn two_servers_serve_one_jwks_and_follow_a_rotation() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let prefix = "/wid-cli/two-servers/";
    let on = |order: [usize; 3]| {
        let ordered: Vec<String> = order.iter().map(|&i| urls[i].clone()).collect();
        etcd_flags(&ordered, prefix, &kek)
    };
    let (host_a, host_b, host_c) = (on([0, 1, 2]), on([1, 2, 0]), on([2, 0, 1]));

    let init = keyring_json(
        "init",
        &host_c,
        &[
            "--alg",
            "EdDSA",
            "--alg",
            "ES256",
            "--etcd-lead-time",
            "2s",
            "--json",
        ],
    );
    assert_eq!(init["committed"], true, "{init}");
    assert_eq!(init["etcd_prefix"], prefix);
    let changes = init["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{init}");
    assert!(changes.iter().all(|c| c["state"] == "active"), "{init}");
    let first_eddsa = changes[0]["kid"].as_str().unwrap().to_string();
    // A prefix that holds keys is never initialised again.
    let again = wid(&args(&["keyring", "init"], &host_c, &["--json"]));
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    assert_eq!(json_err(&again)["code"], "WID_RESULT_KEYRING_CONFLICT");

    let serve = |flags: &[String], extra: &[&str]| {
        let mut a = args(
            &[],
            flags,
            &[
                "--listen",
                "127.0.0.1:0",
                "--issuer",
                "http://127.0.0.1",
                "--etcd-lead-time",
                "2s",
            ],
        );
        a.extend(strings(extra));
        Served::start(&a)
    };
    let a = serve(&host_a, &["--rotator"]);
    let b = serve(&host_b, &[]);

    // One JWKS, byte for byte, and the one `wid keyring jwks` prints.
    let (ja, jb) = (a.jwks(), b.jwks());
    assert_eq!((ja.status, jb.status), (200, 200));
    assert_eq!(ja.body, jb.body, "the two servers serve different JWKS");
    assert_eq!(ja.kids().len(), 2);
    assert_eq!(ja.json(), keyring_json("jwks", &host_c, &["--json"]));
    for srv in [&a, &b] {
        let health = srv.get("/health");
        assert_eq!(health.status, 200, "{}", health.body);
        assert_eq!(health.json()["etcd"]["cut_off"], false);
    }
    assert_eq!(
        b.get("/health").json()["etcd"]["rotator_elected"],
        Value::Null
    );
    let oidc = b.get("/.well-known/openid-configuration");
    assert_eq!(oidc.status, 200);
    assert_eq!(oidc.json()["issuer"], "http://127.0.0.1");

    // Tokens signed with the replicated keyring verify against either server.
    let (token1, kid1) = issue(&host_b, &req, "EdDSA");
    assert_eq!(kid1, first_eddsa);
    assert!(verifies(&token1, &a.jwks_url()));
    assert!(verifies(&token1, &b.jwks_url()));

    // A third process rotates: the successor is prepublished, in the JWKS
    // of both servers without a restart, and signs only after the lead time.
    let rotated = keyring_json("rotate", &host_c, &["--etcd-lead-time", "2s", "--json"]);
    let change = &rotated["changes"][0];
    assert_eq!(change["action"], "prepublished", "{rotated}");
    assert_eq!(change["state"], "prepublished");
    let kid2 = change["kid"].as_str().unwrap().to_string();
    assert!(change["publish_time"].as_i64().unwrap() > 0);
    eventually("both servers serve the successor", LIMIT, || {
        let (ja, jb) = (a.jwks(), b.jwks());
        ja.kids().contains(&kid2) && ja.body == jb.body
    });
    assert_eq!(a.jwks().kids().len(), 3);
    // Rotating again while it waits adds nothing.
    let pending = keyring_json("rotate", &host_a, &["--json"]);
    assert_eq!(
        pending["changes"][0]["action"], "already-pending",
        "{pending}"
    );
    assert_eq!(pending["changes"][0]["kid"], kid2.as_str());
    assert_eq!(pending["committed"], false);

    // The elected rotator (in server a) promotes it after the lead time.
    eventually("the rotator promotes the successor", LIMIT, || {
        let list = keyring_json("list", &host_b, &["--json"]);
        state_of(&list, &kid2).as_deref() == Some("active")
    });
    assert_eq!(a.get("/health").json()["etcd"]["rotator_elected"], true);
    let list = keyring_json("list", &host_b, &["--json"]);
    assert_eq!(state_of(&list, &kid1).as_deref(), Some("inactive"));
    let (token2, signer) = issue(&host_a, &req, "EdDSA");
    assert_eq!(signer, kid2, "wid issue --etcd signs with the promoted key");
    for t in [&token1, &token2] {
        assert!(verifies(t, &a.jwks_url()));
        assert!(verifies(t, &b.jwks_url()));
    }

    // --immediate replaces the active ES256 key at once (a compromised key).
    let es_before = state_of(&list, changes[1]["kid"].as_str().unwrap());
    assert_eq!(es_before.as_deref(), Some("active"));
    let now = keyring_json(
        "rotate",
        &host_b,
        &["--alg", "ES256", "--immediate", "--json"],
    );
    let c = &now["changes"][0];
    assert_eq!(c["state"], "active", "{now}");
    assert_eq!(c["previous"], changes[1]["kid"]);
    let kid3 = c["kid"].as_str().unwrap().to_string();
    eventually("both servers serve the new ES256 key", LIMIT, || {
        a.jwks().kids().contains(&kid3) && b.jwks().kids().contains(&kid3)
    });
    let (token3, signer) = issue(&host_c, &req, "ES256");
    assert_eq!(signer, kid3);
    assert!(verifies(&token3, &a.jwks_url()));
    assert!(verifies(&token3, &b.jwks_url()));

    // Promote and deprecate by hand, through etcd.
    let promoted = keyring_json("promote", &host_c, &[&kid1, "--json"]);
    assert_eq!(
        promoted["changes"][0]["previous"],
        kid2.as_str(),
        "{promoted}"
    );
    let deprecated = keyring_json("deprecate", &host_c, &[&kid2, "--force", "--json"]);
    assert_eq!(deprecated["changes"][0]["state"], "deprecated");
    eventually("both servers drop the deprecated key", LIMIT, || {
        !a.jwks().kids().contains(&kid2) && !b.jwks().kids().contains(&kid2)
    });
    assert!(!verifies(&token2, &a.jwks_url()));

    for srv in [a, b] {
        let (status, out) = srv.terminate();
        assert!(status.success(), "{status:?}: {out}");
    }
}

/// A key record as `EtcdKeyring` stores it (the keystore's per-key map).
#[derive(Deserialize)]
struct Record {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Material", default)]
    material: Option<Bin>,
    #[serde(rename = "Wrapped", default)]
    wrapped: Option<Bin>,
}

/// Every key record under `prefix`'s `keys/`, read from etcd directly.
fn records(cluster: &Cluster, prefix: &str) -> Vec<Record> {
    let keys = format!("{prefix}keys/");
    let mut end = keys.clone().into_bytes();
    *end.last_mut().unwrap() += 1;
    let r = cluster.admin_any(
        "/v3/kv/range",
        &serde_json::json!({"key": STANDARD.encode(&keys), "range_end": STANDARD.encode(&end)}),
    );
    r["kvs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|kv| {
            let value = STANDARD.decode(kv["value"].as_str().unwrap()).unwrap();
            rmp_serde::from_slice(&value).expect("a key record")
        })
        .collect()
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "Body")]
    body: Bin,
}

#[derive(Deserialize)]
struct KeystoreBody {
    #[serde(rename = "Keys")]
    keys: Vec<Record>,
}

/// The records of a keystore file, read directly.
fn file_records(path: &str) -> Vec<Record> {
    let env: Envelope = rmp_serde::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let body: KeystoreBody = rmp_serde::from_slice(&env.body.0).unwrap();
    body.keys
}

fn mode(path: &str) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// No record holds private material in plaintext (`place`: where they are).
#[track_caller]
fn assert_no_plaintext(records: &[Record], place: &str) {
    for r in records {
        assert!(
            r.material.as_ref().is_none_or(|m| m.0.is_empty()),
            "{} has plaintext material in {place}",
            r.id
        );
    }
}

/// file → etcd → file keeps every key: IDs, algorithms, states, times and
/// public keys; etcd holds only wrapped material; the new file is wrapped,
/// 0600, and never replaces a file without --force.
#[test]
fn migrate_round_trip_keeps_every_key() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let ks = s.path("keystore");
    let file = keystore_flags(&ks, &kek);
    let t = |d: i64| (T0 + d).to_string();
    // Every state: active keys of the three algorithms, an inactive key, a
    // deprecated one and prepublished successors.
    keyring_json(
        "init",
        &file,
        &[
            "--alg",
            "EdDSA",
            "--alg",
            "ES256",
            "--alg",
            "RS256",
            "--rotation-threshold",
            "1h",
            "--now",
            &t(0),
            "--json",
        ],
    );
    keyring_json("rotate", &file, &["--now", &t(100), "--json"]);
    let rotated = keyring_json("rotate", &file, &["--now", &t(200), "--json"]);
    let inactive = rotated["changes"][0]["previous"].as_str().unwrap();
    let listed = keyring_json("list", &file, &["--json"]);
    let oldest = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["state"] == "inactive" && k["kid"] != inactive)
        .unwrap()["kid"]
        .as_str()
        .unwrap()
        .to_string();
    keyring_json(
        "deprecate",
        &file,
        &[&oldest, "--now", &t(300), "--force", "--json"],
    );
    let planned = keyring_json(
        "plan",
        &file,
        &[
            "--apply",
            "--rotation-threshold",
            "1h",
            "--now",
            &t(2000),
            "--json",
        ],
    );
    assert!(
        planned["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["action"] == "prepublished"),
        "{planned}"
    );
    let before = keyring_json("list", &file, &["--json"])["keys"].clone();
    let states: std::collections::BTreeSet<&str> = before
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.into_iter().collect::<Vec<_>>(),
        ["active", "deprecated", "inactive", "prepublished"]
    );
    let jwks_before = keyring_json("jwks", &file, &["--json"]);

    // Into etcd.
    let prefix = "/wid-cli/migrate/";
    let etcd = etcd_flags(&urls, prefix, &kek);
    let into = args(
        &["keyring", "migrate", "--keystore", &ks],
        &etcd,
        &["--json"],
    );
    let moved = json_out(&into);
    assert_eq!(moved["keys"], before.as_array().unwrap().len(), "{moved}");
    assert_eq!(moved["to"]["etcd_prefix"], prefix);
    assert_eq!(keyring_json("list", &etcd, &["--json"])["keys"], before);
    assert_eq!(keyring_json("jwks", &etcd, &["--json"]), jwks_before);
    // In etcd every key's material is wrapped, none in plaintext.
    let recs = records(&cluster, prefix);
    assert_eq!(recs.len(), before.as_array().unwrap().len());
    assert_no_plaintext(&recs, "etcd");
    for r in &recs {
        assert!(
            r.wrapped.as_ref().is_some_and(|w| !w.0.is_empty()),
            "{} is not wrapped in etcd",
            r.id
        );
    }
    // The old file refuses changes from now on, saying where the keyring
    // went; reading it still works.
    let stale = wid(&args(&["keyring", "rotate"], &file, &["--json"]));
    assert_eq!(stale.status.code(), Some(2), "{}", stderr(&stale));
    let e = json_err(&stale);
    assert!(
        e["message"].as_str().unwrap().contains(prefix)
            && e["message"].as_str().unwrap().contains("migrated"),
        "{e}"
    );
    assert!(e["hint"].as_str().unwrap().contains(".migrated"), "{e}");
    let policy_set = wid(&args(
        &["keyring", "policy", "set"],
        &file,
        &["--longest-ttl", "1h"],
    ));
    assert_eq!(policy_set.status.code(), Some(2), "{}", stderr(&policy_set));
    assert_eq!(keyring_json("list", &file, &["--json"])["keys"], before);
    // Into a prefix that holds keys: refused, nothing changed.
    let again = wid(&into);
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    assert_eq!(json_err(&again)["code"], "WID_RESULT_KEYRING_CONFLICT");
    assert_eq!(keyring_json("list", &etcd, &["--json"])["keys"], before);

    // And back into a new file: wrapped, 0600, the same keys.
    let out = s.path("dir/back");
    let back = args(
        &["keyring", "migrate", "--keystore", &out, "--to-keystore"],
        &etcd,
        &["--json"],
    );
    let copied = json_out(&back);
    assert_eq!(copied["keys"], before.as_array().unwrap().len(), "{copied}");
    assert_eq!(mode(&out), 0o600);
    let back_flags = keystore_flags(&out, &kek);
    assert_eq!(
        keyring_json("list", &back_flags, &["--json"])["keys"],
        before
    );
    assert_eq!(keyring_json("jwks", &back_flags, &["--json"]), jwks_before);
    assert_no_plaintext(&file_records(&out), "the new keystore");
    // Without the KEK the new file yields no key (listing its IDs and
    // states needs none).
    let locked = expect(&["keyring", "jwks", "--keystore", &out, "--json"], 3);
    assert_eq!(json_err(&locked)["code"], "WID_RESULT_KEY_CUSTODY_FAILED");
    // An existing file is never replaced without --force.
    let bytes = std::fs::read(&out).unwrap();
    let refused = wid(&back);
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    assert_eq!(std::fs::read(&out).unwrap(), bytes);
    let mut forced = back.clone();
    forced.push("--force".into());
    json_out(&forced);
    assert_eq!(
        keyring_json("list", &back_flags, &["--json"])["keys"],
        before
    );
    assert_eq!(mode(&out), 0o600);

    // Plaintext only when asked for by name.
    let plain = s.path("plain");
    json_out(&args(
        &["keyring", "migrate", "--keystore", &plain, "--to-keystore"],
        &etcd,
        &["--plaintext-keystore", "--json"],
    ));
    assert_eq!(mode(&plain), 0o600);
    assert_eq!(
        json_out(&["keyring", "list", "--keystore", &plain, "--json"])["keys"],
        before
    );

    // A plaintext keystore goes into etcd wrapped as well.
    let prefix2 = "/wid-cli/migrate-plain/";
    let etcd2 = etcd_flags(&urls, prefix2, &kek);
    json_out(&args(
        &["keyring", "migrate", "--keystore", &plain],
        &etcd2,
        &["--json"],
    ));
    assert_eq!(keyring_json("list", &etcd2, &["--json"])["keys"], before);
    assert_no_plaintext(&records(&cluster, prefix2), "etcd");

    // With another KEK, neither direction yields a key.
    let other = s.kek("other-kek");
    let wrong = etcd_flags(&urls, prefix, &other);
    let o = expect(
        &args(
            &["keyring", "migrate", "--keystore", &ks],
            &wrong,
            &["--json"],
        ),
        3,
    );
    assert_eq!(json_err(&o)["code"], "WID_RESULT_KEY_CUSTODY_FAILED");
    let gone = s.path("never");
    let o = expect(
        &args(
            &["keyring", "migrate", "--keystore", &gone, "--to-keystore"],
            &wrong,
            &["--json"],
        ),
        3,
    );
    assert_eq!(json_err(&o)["code"], "WID_RESULT_KEY_CUSTODY_FAILED");
    assert!(!std::path::Path::new(&gone).exists());
}

/// Without a KEK and without the opt-in, --etcd is refused before etcd is
/// touched; a wrong KEK, plain http and the other misuses are refused with
/// their own codes.
#[test]
fn refusals() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let url = cluster.url(0);
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let prefix = "/wid-cli/refusals/";
    let good = etcd_flags(std::slice::from_ref(&url), prefix, &kek);
    keyring_json("init", &good, &["--json"]);
    let no_kek = strings(&[
        "--etcd",
        &url,
        "--etcd-allow-plain-http",
        "--etcd-prefix",
        prefix,
    ]);

    // No KEK, no opt-in: refused (usage, exit 2) by every command.
    for a in [
        args(&["keyring", "jwks"], &no_kek, &[]),
        args(&["keyring", "rotate"], &no_kek, &[]),
        args(&["issue"], &no_kek, &["--request", &req]),
        args(&["serve"], &no_kek, &["--listen", "127.0.0.1:0"]),
    ] {
        let o = expect(&a, 2);
        let err = stderr(&o);
        assert!(err.contains("WID_RESULT_INVALID_ARGUMENT"), "{err}");
        assert!(err.contains("no KEK was given"), "{err}");
        assert!(err.contains("--kek-file"), "{err}");
        assert!(err.contains("--etcd-insecure-plaintext-keys"), "{err}");
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    // The opt-in is refused on a wrapped keyring, and with a KEK beside it.
    let mut plain = no_kek.clone();
    plain.push("--etcd-insecure-plaintext-keys".into());
    let o = expect(&args(&["keyring", "list"], &plain, &["--json"]), 3);
    assert_eq!(json_err(&o)["code"], "WID_RESULT_KEY_CUSTODY_FAILED");
    let mut both = good.clone();
    both.push("--etcd-insecure-plaintext-keys".into());
    let o = expect(&args(&["keyring", "list"], &both, &[]), 2);
    assert!(stderr(&o).contains("choose one"), "{}", stderr(&o));
    // With the opt-in, a fresh prefix works in plaintext, and says so.
    let mut fresh = no_kek.clone();
    fresh[4] = "/wid-cli/refusals-plain/".into();
    fresh.push("--etcd-insecure-plaintext-keys".into());
    let o = expect(&args(&["keyring", "init"], &fresh, &[]), 0);
    assert!(stderr(&o).contains("plaintext"), "{}", stderr(&o));
    let recs = records(&cluster, "/wid-cli/refusals-plain/");
    assert_eq!(recs.len(), 1);
    assert!(recs[0].wrapped.is_none());

    // A typo in --etcd-prefix names an empty prefix: rotate, plan --apply
    // and issue refuse it (exit 4) rather than make a second keyring or sign
    // with nothing, and point at init.
    let typo_prefix = "/wid-cli/refusalz/";
    let typo = etcd_flags(std::slice::from_ref(&url), typo_prefix, &kek);
    for a in [
        args(&["keyring", "rotate"], &typo, &["--json"]),
        args(&["keyring", "plan"], &typo, &["--apply", "--json"]),
        args(&["issue"], &typo, &["--request", &req, "--json"]),
    ] {
        let o = expect(&a, 4);
        let err = json_err(&o);
        assert!(
            err["message"].as_str().unwrap().contains(typo_prefix),
            "{err}"
        );
        assert!(
            err["hint"].as_str().unwrap().contains("wid keyring init"),
            "{err}"
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    assert!(
        records(&cluster, typo_prefix).is_empty(),
        "a typo made a keyring"
    );

    // A wrong KEK: refused by every command, nothing signed or served.
    let other = s.kek("other-kek");
    let wrong = etcd_flags(std::slice::from_ref(&url), prefix, &other);
    for (cmd, extra) in [
        (vec!["keyring", "list"], vec!["--json"]),
        (vec!["issue"], vec!["--request", req.as_str(), "--json"]),
        (vec!["serve"], vec!["--listen", "127.0.0.1:0", "--json"]),
        (vec!["keyring", "rotate"], vec!["--json"]),
    ] {
        let o = expect(&args(&cmd, &wrong, &extra), 3);
        assert_eq!(
            json_err(&o)["code"],
            "WID_RESULT_KEY_CUSTODY_FAILED",
            "{cmd:?}"
        );
        assert!(stdout(&o).is_empty(), "{cmd:?}: {}", stdout(&o));
    }
    assert_eq!(
        keyring_json("list", &good, &["--json"])["keys"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the wrong KEK changed nothing"
    );

    // Plain http needs its flag; the library's own check is behind it.
    let o = expect(&["keyring", "list", "--etcd", &url, "--kek-file", &kek], 2);
    assert!(stderr(&o).contains("plain http"), "{}", stderr(&o));
    // etcd that does not answer: unavailable (I/O, exit 3).
    let dead = format!("http://127.0.0.1:{}", etcd_support::free_port());
    let o = expect(
        &[
            "keyring",
            "list",
            "--etcd",
            &dead,
            "--etcd-allow-plain-http",
            "--kek-file",
            &kek,
            "--json",
        ],
        3,
    );
    assert_eq!(json_err(&o)["code"], "WID_RESULT_KEYRING_UNAVAILABLE");
    // --etcd or --keystore, not both; etcd flags only with --etcd.
    let ks = s.path("ks");
    expect(&["keyring", "init", "--keystore", &ks], 0);
    expect(
        &args(&["keyring", "list", "--keystore", &ks], &good, &[]),
        2,
    );
    for extra in [
        vec!["--etcd-prefix", "/x/"],
        vec!["--etcd-user", "wid"],
        vec!["--etcd-insecure-plaintext-keys"],
    ] {
        let o = expect(
            &args(&["keyring", "list", "--keystore", &ks], &[], &extra),
            2,
        );
        assert!(stderr(&o).contains("needs --etcd"), "{}", stderr(&o));
    }
    expect(&["keyring", "rotate", "--keystore", &ks, "--immediate"], 2);
    expect(
        &[
            "serve",
            "--keystore",
            &ks,
            "--listen",
            "127.0.0.1:0",
            "--rotator",
        ],
        2,
    );
    // A client certificate needs its key; a user needs a password.
    expect(
        &args(
            &["keyring", "list"],
            &good,
            &["--etcd-cert", "/nonexistent.crt"],
        ),
        2,
    );
    let o = expect(
        &args(&["keyring", "list"], &good, &["--etcd-user", "wid"]),
        2,
    );
    assert!(stderr(&o).contains("WID_ETCD_PASSWORD"), "{}", stderr(&o));

    // An elected rotator in `wid serve` makes the first key of an empty prefix.
    let empty = etcd_flags(std::slice::from_ref(&url), "/wid-cli/rotator-first/", &kek);
    let served = Served::start(&args(
        &[],
        &empty,
        &["--listen", "127.0.0.1:0", "--rotator"],
    ));
    eventually("the rotator makes a first key", LIMIT, || {
        served.jwks().kids().len() == 1
    });
    let (status, out) = served.terminate();
    assert!(status.success(), "{out}");
}

/// A one-shot `wid keyring promote --etcd` (and `plan --apply`) promotes a
/// prepublished key once its lead time has passed, waiting until the
/// process itself has held the key that long, as the library requires.
#[test]
fn promote_and_plan_apply_through_etcd() {
    let cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let s = Scratch::new();
    let kek = s.kek("kek");
    let mut flags = etcd_flags(&cluster.urls(), "/wid-cli/promote/", &kek);
    flags.extend(["--etcd-lead-time".to_string(), "2s".to_string()]);
    let init = keyring_json("init", &flags, &["--json"]);
    let kid1 = init["changes"][0]["kid"].as_str().unwrap().to_string();
    let rotated = keyring_json("rotate", &flags, &["--json"]);
    assert_eq!(rotated["changes"][0]["action"], "prepublished", "{rotated}");
    let kid2 = rotated["changes"][0]["kid"].as_str().unwrap().to_string();
    // Past its publish time by the clock (the lead time is 2 s).
    std::thread::sleep(Duration::from_millis(2500));
    let t = Instant::now();
    let promoted = keyring_json("promote", &flags, &[&kid2, "--json"]);
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "promote did not wait for its own copy to hold the key for the lead time"
    );
    let c = &promoted["changes"][0];
    assert_eq!(c["kid"], kid2.as_str(), "{promoted}");
    assert_eq!(c["state"], "active");
    assert_eq!(c["previous"], kid1.as_str());
    let list = keyring_json("list", &flags, &["--json"]);
    assert_eq!(state_of(&list, &kid2).as_deref(), Some("active"));
    assert_eq!(state_of(&list, &kid1).as_deref(), Some("inactive"));

    // The plan's promotion, applied.
    let rotated = keyring_json("rotate", &flags, &["--json"]);
    let kid3 = rotated["changes"][0]["kid"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(2500));
    let applied = keyring_json("plan", &flags, &["--apply", "--json"]);
    assert!(
        applied["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["kid"] == kid3.as_str() && c["action"] == "promoted"),
        "{applied}"
    );
    let list = keyring_json("list", &flags, &["--json"]);
    assert_eq!(state_of(&list, &kid3).as_deref(), Some("active"));

    // A key published two lead times ago by the clock (here: --now ten
    // seconds on) has been with every server for a lead time: a process
    // that just opened the keyring promotes it without waiting another.
    let rotated = keyring_json("rotate", &flags, &["--json"]);
    let kid4 = rotated["changes"][0]["kid"].as_str().unwrap().to_string();
    let later = (workload_identity::unix_now() + 10).to_string();
    let o = expect(
        &args(&["keyring", "promote"], &flags, &[&kid4, "--now", &later]),
        0,
    );
    assert!(!stderr(&o).contains("waiting"), "{}", stderr(&o));
    let list = keyring_json("list", &flags, &["--json"]);
    assert_eq!(state_of(&list, &kid4).as_deref(), Some("active"));
}

/// Every material encoding worth looking for in output.
fn encodings(bytes: &[u8]) -> Vec<String> {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut v = vec![STANDARD.encode(bytes), URL_SAFE_NO_PAD.encode(bytes), hex];
    // Long material (RSA's PKCS#8): a window of it is enough to betray it.
    if bytes.len() > 48 {
        v.push(URL_SAFE_NO_PAD.encode(&bytes[bytes.len() - 48..]));
        v.push(STANDARD.encode(&bytes[bytes.len() - 48..]));
    }
    v
}

/// Over mutual TLS with etcd's user auth: every command works with the
/// password from a file or WID_ETCD_PASSWORD, and no output (stdout,
/// stderr, served documents, errors) holds the password, the client key,
/// the KEK or any key's private material.
#[test]
fn credentials_and_key_material_stay_out_of_output() {
    let cluster = Cluster::start_sized(Options::new(Security::MutualTls), 1);
    cluster.enable_auth();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let client_key = cluster.pki.read("wid.key");
    let key = s.write("wid.key", &client_key);
    let password = "wid-pw";
    let pw = s.write("password", format!("{password}\n").as_bytes());
    let prefix = "/wid-test/cli-secrets/";
    let base = strings(&[
        "--etcd",
        &cluster.url(0),
        "--etcd-prefix",
        prefix,
        "--etcd-ca-bundle",
        &cluster.pki.path("ca.crt"),
        "--etcd-cert",
        &cluster.pki.path("wid.crt"),
        "--etcd-key",
        &key,
        "--etcd-user",
        "wid",
        "--kek-file",
        &kek,
    ]);
    let mut with_file = base.clone();
    with_file.extend(["--etcd-password-file".to_string(), pw.clone()]);
    let outputs = std::cell::RefCell::new(Vec::<String>::new());
    let run = |a: Vec<String>, env: &[(&str, &str)], code: i32| -> Output {
        let o = wid_env(&a, env);
        assert_eq!(
            o.status.code(),
            Some(code),
            "wid {a:?}\n{}\n{}",
            stdout(&o),
            stderr(&o)
        );
        outputs.borrow_mut().push(stdout(&o));
        outputs.borrow_mut().push(stderr(&o));
        o
    };

    run(
        args(
            &["keyring", "init"],
            &with_file,
            &["--alg", "EdDSA", "--alg", "ES256", "--alg", "RS256"],
        ),
        &[],
        0,
    );
    run(args(&["keyring", "list"], &with_file, &[]), &[], 0);
    run(args(&["keyring", "list"], &with_file, &["--json"]), &[], 0);
    // The password from the environment instead of a file.
    run(
        args(&["keyring", "rotate"], &base, &["--json"]),
        &[("WID_ETCD_PASSWORD", password)],
        0,
    );
    run(args(&["keyring", "jwks"], &with_file, &[]), &[], 0);
    run(args(&["keyring", "plan"], &with_file, &[]), &[], 0);
    run(args(&["issue"], &with_file, &["--request", &req]), &[], 0);
    run(
        args(&["issue"], &with_file, &["--request", &req, "--json"]),
        &[],
        0,
    );
    // A list with the password from `file`, refused (I/O, exit 3).
    let refused_with_password_file = |file: &str| {
        run(
            args(&["keyring", "list"], &base, &["--etcd-password-file", file]),
            &[],
            3,
        )
    };
    // A wrong password: refused, and not echoed either.
    let wrong_pw = s.write("wrong-password", b"not-the-password-42\n");
    let o = refused_with_password_file(&wrong_pw);
    assert!(
        !stderr(&o).contains("not-the-password-42"),
        "{}",
        stderr(&o)
    );
    run(
        args(&["keyring", "list"], &base, &["--json"]),
        &[("WID_ETCD_PASSWORD", "not-the-password-42")],
        3,
    );
    // A password file others can read is refused before it is read.
    let open_pw = s.write_mode("open-password", format!("{password}\n").as_bytes(), 0o644);
    let o = refused_with_password_file(&open_pw);
    assert!(stderr(&o).contains("chmod 600"), "{}", stderr(&o));
    // As is a client key others can read.
    let open_key = s.write_mode("open.key", &client_key, 0o644);
    let swapped: Vec<String> = with_file
        .iter()
        .map(|x| {
            if *x == key {
                open_key.clone()
            } else {
                x.clone()
            }
        })
        .collect();
    let o = run(args(&["keyring", "list"], &swapped, &[]), &[], 3);
    assert!(stderr(&o).contains("--etcd-key"), "{}", stderr(&o));

    // The server, over the same credentials.
    let served = Served::start(&args(
        &[],
        &with_file,
        &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1"],
    ));
    for path in [
        "/.well-known/jwks.json",
        "/.well-known/openid-configuration",
        "/health",
    ] {
        let r = served.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        outputs.borrow_mut().push(r.body);
    }
    let jwks = served.jwks().json();
    for k in jwks["keys"].as_array().unwrap() {
        for private in ["d", "p", "q", "dp", "dq", "qi"] {
            assert!(
                k.get(private).is_none(),
                "a private member {private} in {k}"
            );
        }
    }
    let first = served.first_line().to_string();
    let (status, out) = served.terminate();
    assert!(status.success(), "{out}");
    outputs.borrow_mut().push(format!("{first}{out}"));

    // The private material, from a plaintext export made on purpose (last,
    // so its own output is checked too).
    let plain = s.path("plain");
    run(
        args(
            &["keyring", "migrate"],
            &with_file,
            &[
                "--keystore",
                &plain,
                "--to-keystore",
                "--plaintext-keystore",
            ],
        ),
        &[],
        0,
    );
    let materials: Vec<Vec<u8>> = file_records(&plain)
        .into_iter()
        .map(|r| r.material.expect("plaintext material").0.to_vec())
        .collect();
    assert_eq!(materials.len(), 4);

    let kek_text = std::fs::read_to_string(&kek).unwrap();
    let kek_bytes = STANDARD.decode(kek_text.trim()).unwrap();
    let key_pem = String::from_utf8(client_key).unwrap();
    let key_body: Vec<&str> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .collect();
    let mut secrets: Vec<String> = vec![password.to_string(), kek_text.trim().to_string()];
    secrets.extend(encodings(&kek_bytes));
    secrets.extend(key_body.iter().map(|l| l.to_string()));
    for m in &materials {
        secrets.extend(encodings(m));
    }
    let all = outputs.into_inner().join("\n");
    assert!(
        all.contains("committed to etcd"),
        "the runs printed something"
    );
    for secret in &secrets {
        assert!(
            !all.contains(secret.as_str()),
            "a secret ({} chars) appears in wid's output",
            secret.len()
        );
    }
}

/// The operator's fourth rotation candidate: once the policy is stored with
/// the keyring (`wid keyring policy set`), a `wid serve --rotator` started
/// with a one-minute policy refuses to start, naming each flag and the
/// stored value; servers without policy flags follow the stored policy; a
/// token longer than its LongestTTL is never signed; and the elected
/// rotator, replaced, never rejects a live token.
#[test]
fn a_candidate_with_another_policy_refuses_to_start() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let prefix = "/wid-cli/policy/";
    let on = |i: usize| {
        let ordered: Vec<String> = (0..3).map(|k| urls[(i + k) % 3].clone()).collect();
        etcd_flags(&ordered, prefix, &kek)
    };
    // init stores the policy with the first key.
    keyring_json(
        "init",
        &on(2),
        &[
            "--alg",
            "ES256",
            "--longest-ttl",
            "1h",
            "--rotation-threshold",
            "720h",
            "--lead-time",
            "2s",
            "--retention",
            "1h",
            "--json",
        ],
    );
    let set = json_out(&args(&["keyring", "policy", "show"], &on(2), &["--json"]));
    assert_eq!(set["policy"]["longest_ttl"], "1h", "{set}");
    assert_eq!(set["policy"]["retention"], "1h", "{set}");
    let shown = json_out(&args(&["keyring", "policy", "show"], &on(1), &["--json"]));
    assert_eq!(shown["policy"], set["policy"]);

    let serve = |flags: &[String], extra: &[&str]| {
        let mut a = args(
            &[],
            flags,
            &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1"],
        );
        a.extend(strings(extra));
        a
    };
    let a = Served::start(&serve(&on(0), &["--rotator"]));
    let b = Served::start(&serve(&on(1), &["--rotator"]));
    let (token, kid) = issue(&on(1), &req, "ES256");
    assert!(verifies(&token, &a.jwks_url()));

    // `wid keyring status`, without the KEK: both servers, the elected
    // rotator (one of them) and since when, the policy, the keys.
    let no_kek: Vec<String> = on(2)
        .into_iter()
        .take_while(|f| f != "--kek-file")
        .collect();
    let status = |flags: &[String]| json_out(&args(&["keyring", "status"], flags, &["--json"]));
    eventually(
        "status shows both servers and an elected rotator",
        LIMIT,
        || {
            let st = status(&no_kek);
            st["servers"].as_array().is_some_and(|s| s.len() == 2)
                && st["rotator"]["elected_since"].is_i64()
        },
    );
    let st = status(&no_kek);
    assert_eq!(st["policy"], set["policy"], "{st}");
    let servers = st["servers"].as_array().unwrap();
    let addresses: Vec<&str> = servers
        .iter()
        .map(|s| s["address"].as_str().unwrap())
        .collect();
    for served in [&a, &b] {
        let url = served.jwks_url();
        assert!(
            addresses.iter().any(|addr| url.contains(addr)),
            "{url} not among {addresses:?}"
        );
    }
    let elected = st["rotator"]["identity"].as_str().unwrap();
    assert!(
        servers
            .iter()
            .any(|s| s["id"] == elected && s["elected_since"].is_i64()),
        "{st}"
    );
    assert!(
        servers.iter().all(|s| s["issuer"] == "http://127.0.0.1"),
        "{st}"
    );
    eventually("both servers have applied the keyring", LIMIT, || {
        status(&no_kek)["servers"]
            .as_array()
            .is_some_and(|s| s.iter().all(|x| x["current"] == true))
    });
    assert_eq!(st["keys"][0]["kid"], kid.as_str(), "{st}");
    assert_eq!(st["keys"][0]["state"], "active");
    assert!(st["next"]["at"].as_i64().unwrap() > 0, "{st}");
    let text = stdout(&expect(&args(&["keyring", "status"], &no_kek, &[]), 0));
    assert!(
        text.contains("rotator: ") && text.contains("LongestTTL        1h"),
        "{text}"
    );
    // `wid keyring list` needs no KEK either.
    let list = keyring_json("list", &no_kek, &["--json"]);
    assert_eq!(state_of(&list, &kid).as_deref(), Some("active"));

    // The fourth candidate, as the operator started it.
    let fourth = wid(&[
        strings(&["serve"]),
        serve(
            &on(2),
            &[
                "--rotator",
                "--rotation-threshold",
                "1m",
                "--longest-ttl",
                "1m",
                "--etcd-lead-time",
                "5s",
            ],
        ),
    ]
    .concat());
    assert_eq!(fourth.status.code(), Some(2), "{}", stderr(&fourth));
    let err = stderr(&fourth);
    for named in [
        "--rotation-threshold differs from the stored RotationThreshold (720h)",
        "--longest-ttl differs from the stored LongestTTL (1h)",
        "--etcd-lead-time differs from the stored LeadTime (2s)",
    ] {
        assert!(err.contains(named), "{named:?} not in: {err}");
    }
    // The same values as stored are no contradiction.
    let same = wid(&args(
        &["keyring", "plan"],
        &on(2),
        &["--longest-ttl", "1h", "--etcd-lead-time", "2s", "--json"],
    ));
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));

    // No issuer of the keyring signs past the promise.
    let long = s.write(
        "long.json",
        format!(
            r#"{{"Region":"global",
            "Allocation":{{"ID":"{ALLOC}","Namespace":"default","JobID":"web",
                          "TaskGroup":"frontend","ClientStatus":"running"}},
            "Task":"server",
            "Identity":{{"Name":"vault_default","Audience":["vault.io"],"TTL":"2h"}}}}"#
        )
        .as_bytes(),
    );
    let refused = wid(&args(
        &["issue"],
        &on(0),
        &["--request", &long, "--alg", "ES256", "--json"],
    ));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let e = json_err(&refused);
    assert_eq!(e["code"], "WID_RESULT_INVALID_ARGUMENT");
    assert!(
        e["message"].as_str().unwrap().contains("LongestTTL (1h)"),
        "{e}"
    );

    // The signing key is replaced at once; the elected rotators stop, and a
    // new candidate without flags takes over under the stored policy: the
    // token's key stays in the JWKS (its tokens live an hour).
    keyring_json("rotate", &on(2), &["--immediate", "--json"]);
    drop(a);
    drop(b);
    eventually("the stopped servers' records are gone", LIMIT, || {
        status(&no_kek)["servers"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    let c = Served::start(&serve(&on(2), &["--rotator"]));
    eventually("the new candidate is elected", LIMIT, || {
        c.get("/health").json()["etcd"]["rotator_elected"] == true
    });
    // A few rounds of its policy (1 s each).
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        verifies(&token, &c.jwks_url()),
        "a live token was rejected after the rotator changed hands"
    );
}

/// `wid keyring revoke` on a replicated keyring: the compromised active key
/// is replaced and leaves the JWKS of a running server at once, `wid verify
/// --jwks` refuses its token while the replacement's verify, and the steps
/// for each relying party are printed; `wid keyring remove` refuses the
/// revoked key until every token it signed has expired (the stored
/// LongestTTL), saying when, and removes it then.
#[test]
fn revoke_and_remove_through_etcd() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let flags = etcd_flags(&urls, "/wid-cli/revoke/", &kek);
    keyring_json(
        "init",
        &flags,
        &["--alg", "EdDSA", "--longest-ttl", "1h", "--json"],
    );
    let a = Served::start(&args(
        &[],
        &flags,
        &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1"],
    ));
    let (stolen, kid) = issue(&flags, &req, "EdDSA");
    assert!(verifies(&stolen, &a.jwks_url()));

    let revoked = json_out(&args(&["keyring", "revoke"], &flags, &[&kid, "--json"]));
    let changes = revoked["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{revoked}");
    assert_eq!(changes[0]["state"], "active", "{revoked}");
    assert_eq!(changes[1]["kid"], kid.as_str());
    assert_eq!(changes[1]["state"], "deprecated");
    let steps = revoked["relying_parties"].to_string();
    assert!(steps.contains("auth/jwt/config"), "{steps}");
    eventually("the server drops the revoked key", LIMIT, || {
        !a.jwks().kids().contains(&kid)
    });
    let o = wid(&[
        "verify",
        &stolen,
        "--aud",
        "vault.io",
        "--jwks",
        &a.jwks_url(),
        "--issuer",
        "http://127.0.0.1",
        "--assume-live",
        "--json",
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("UNKNOWN_KEY")
            || stderr(&o).contains("UNKNOWN_KEY"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let (fresh, signer) = issue(&flags, &req, "EdDSA");
    assert_ne!(signer, kid);
    assert!(verifies(&fresh, &a.jwks_url()));

    // Removal waits for the revoked key's tokens to expire.
    let early = wid(&args(&["keyring", "remove"], &flags, &[&kid, "--json"]));
    assert_eq!(early.status.code(), Some(2), "{}", stderr(&early));
    assert!(
        json_err(&early)["message"]
            .as_str()
            .unwrap()
            .contains("may be removed from"),
        "{}",
        stderr(&early)
    );
    let later = (workload_identity::unix_now() + 3_700).to_string();
    let removed = json_out(&args(
        &["keyring", "remove"],
        &flags,
        &["--now", &later, "--json"],
    ));
    assert_eq!(removed["changes"][0]["action"], "removed", "{removed}");
    assert_eq!(removed["changes"][0]["kid"], kid.as_str());
    let list = keyring_json("list", &flags, &["--json"]);
    assert_eq!(state_of(&list, &kid), None, "{list}");
    assert_eq!(state_of(&list, &signer).as_deref(), Some("active"));
}

const ETCD_MD: &str = include_str!("../../docs/etcd.md");
const WID_MD: &str = include_str!("../../docs/wid.md");

/// The ```sh block of `page` (the text of `page_name`) marked
/// `<!-- run by wid/tests/cli_etcd.rs: NAME -->`.
fn marked_block(page: &str, page_name: &str, name: &str) -> String {
    let marker = format!("<!-- run by wid/tests/cli_etcd.rs: {name} -->");
    let after = page
        .split_once(&marker)
        .unwrap_or_else(|| panic!("{page_name} has no {marker}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a ```sh block after the marker");
    block[..block.find("\n```").expect("the block ends")].to_string() + "\n"
}

/// A marked ```sh block of docs/etcd.md.
fn etcd_doc_block(name: &str) -> String {
    marked_block(ETCD_MD, "docs/etcd.md", name)
}

/// Runs `script` (`what`, for messages) with bash (stopping at the first
/// failure) in `dir`, `wid` being the binary under test; its stdout and
/// stderr.
#[track_caller]
fn run_doc_block(what: &str, script: &str, dir: &std::path::Path) -> (String, String) {
    let bin = dir.join("bin");
    if !bin.exists() {
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(WID, bin.join("wid")).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .args(["-eu", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("WID_ETCD_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{what} block failed:\n{script}\nstdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    (stdout(&o), stderr(&o))
}

/// docs/etcd.md's "Backup and restore" as printed, against a TLS etcd
/// member (only its URL, the CA, the KEK and the backup directory
/// replaced): the backup is a wrapped, 0600 keystore of every key; after the
/// prefix is emptied with `etcdctl` and the backup copied in, a `wid serve`
/// started again serves the same keys, and etcd holds them wrapped.
#[test]
fn backup_and_restore_as_docs_etcd_md_prints_them() {
    let cluster = Cluster::start_sized(Options::new(Security::Tls), 1);
    let url = cluster.urls()[0].clone();
    let ca = cluster.pki.path("ca.crt");
    let s = Scratch::new();
    let kek = s.kek("kek");
    let backups = s.path("backups");
    let prefix = "/workload-identity/keyring/";
    let flags = strings(&["--etcd", &url, "--etcd-ca-bundle", &ca, "--kek-file", &kek]);
    keyring_json(
        "init",
        &flags,
        &["--alg", "EdDSA", "--alg", "ES256", "--json"],
    );
    // A prepublished successor too: every key comes back in its state.
    keyring_json("rotate", &flags, &["--json"]);
    let states = |list: &Value| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["kid"].as_str().unwrap().to_string(),
                    k["state"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = states(&keyring_json("list", &flags, &["--json"]));
    assert_eq!(before.len(), 3, "{before:?}");
    let serve = || {
        Served::start(&args(
            &[],
            &flags,
            &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1"],
        ))
    };
    let served = serve();
    let kids_before = served.jwks().kids();
    assert_eq!(kids_before.len(), 3);

    let here = |block: String| {
        block
            .replace(
                "https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379",
                &url,
            )
            .replace("https://10.0.0.1:2379", &url)
            .replace("/etc/etcd/ca.pem", &ca)
            .replace("/run/secrets/wid-kek", &kek)
    };

    // Back up.
    let backup_block = here(etcd_doc_block("backup")).replace("/var/backups/wid", &backups);
    let (listed, _) = run_doc_block("docs/etcd.md's backup", &backup_block, s.dir.path());
    let files: Vec<String> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let backup = &files[0];
    assert_eq!(mode(backup), 0o600);
    let in_file = file_records(backup);
    assert_eq!(in_file.len(), 3);
    assert_no_plaintext(&in_file, "the backup");
    for (kid, _) in &before {
        assert!(listed.contains(kid.as_str()), "{listed}");
    }

    // Restore, the servers stopped first (as the page says).
    served.terminate();
    let name = std::path::Path::new(backup)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let restore_block = here(etcd_doc_block("restore"))
        .replace("keyring-20250101T020000Z", &name)
        .replace("/var/backups/wid", &backups);
    let (listed, _) = run_doc_block("docs/etcd.md's restore", &restore_block, s.dir.path());
    for (kid, _) in &before {
        assert!(listed.contains(kid.as_str()), "{listed}");
    }
    assert_eq!(
        states(&keyring_json("list", &flags, &["--json"])),
        before,
        "the restored keys and states"
    );
    let in_etcd = records(&cluster, prefix);
    assert_eq!(in_etcd.len(), 3);
    assert_no_plaintext(&in_etcd, "etcd");
    let served = serve();
    assert_eq!(served.jwks().kids(), kids_before);
}

/// docs/etcd.md's policy block, then its remove and revoke block, run by
/// bash as printed against a TLS etcd member, in a directory holding the
/// `ca.pem` and `kek` they name; only the member's URL and the `...` the
/// page leaves to the reader (`--etcd ...`: the URL and the CA;
/// `--etcd-prefix ...`: the prefix `init` was given), `[KID...]` (none:
/// every key that may go) and the revoked `KID` are filled in. The stored
/// policy is the block's; `remove` removes the deprecated key whose tokens
/// have all expired and keeps, saying until when, the one whose tokens may
/// be live; `revoke` replaces the active key and takes it out of the JWKS.
#[test]
fn policy_remove_and_revoke_as_docs_etcd_md_prints_them() {
    let cluster = Cluster::start_sized(Options::new(Security::Tls), 1);
    let url = cluster.urls()[0].clone();
    let s = Scratch::new();
    std::fs::copy(cluster.pki.path("ca.crt"), s.path("ca.pem")).unwrap();
    let kek = s.kek("kek");
    let prefix = "/workload-identity/keyring/";
    let here = |block: String| {
        block
            .replace("https://10.0.0.1:2379", &url)
            .replace(
                "--etcd ...",
                &format!("--etcd {url} --etcd-ca-bundle ca.pem"),
            )
            .replace("--etcd-prefix ...", &format!("--etcd-prefix {prefix}"))
    };
    let flags = strings(&[
        "--etcd",
        &url,
        "--etcd-ca-bundle",
        &s.path("ca.pem"),
        "--etcd-prefix",
        prefix,
        "--kek-file",
        &kek,
    ]);

    // The policy: init stores the values given, set changes one, show
    // prints them.
    let (shown, _) = run_doc_block(
        "docs/etcd.md's policy",
        &here(etcd_doc_block("policy")),
        s.dir.path(),
    );
    let shown = shown.split_whitespace().collect::<Vec<_>>().join(" ");
    for line in [
        "RotationThreshold 720h",
        "LongestTTL 1h",
        "LeadTime 30s",
        "Retention 72h",
    ] {
        assert!(shown.contains(line), "{line:?} not in: {shown}");
    }
    let stored = json_out(&args(&["keyring", "policy", "show"], &flags, &["--json"]));
    assert_eq!(stored["policy"]["retention"], "72h", "{stored}");
    assert_eq!(stored["policy"]["longest_ttl"], "1h", "{stored}");
    let list = keyring_json("list", &flags, &["--json"]);
    let first = list["keys"][0]["kid"].as_str().unwrap().to_string();
    assert_eq!(state_of(&list, &first).as_deref(), Some("active"), "{list}");

    // Keys for remove: `first` replaced and deprecated two hours ago (its
    // tokens, of at most the stored LongestTTL, have all expired) and a
    // second replaced and deprecated now (its tokens may be live).
    let then = (workload_identity::unix_now() - 7_200).to_string();
    let immediate = ["--alg", "ES256", "--immediate", "--json"];
    keyring_json(
        "rotate",
        &flags,
        &[&immediate[..], &["--now", then.as_str()]].concat(),
    );
    keyring_json(
        "deprecate",
        &flags,
        &[first.as_str(), "--force", "--now", &then, "--json"],
    );
    let active = |list: &Value| -> String {
        list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["state"] == "active")
            .unwrap_or_else(|| panic!("no active key: {list}"))["kid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let second = active(&keyring_json("list", &flags, &["--json"]));
    keyring_json("rotate", &flags, &immediate);
    keyring_json("deprecate", &flags, &[second.as_str(), "--force", "--json"]);
    let signer = active(&keyring_json("list", &flags, &["--json"]));
    let served = Served::start(&args(
        &[],
        &flags,
        &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1"],
    ));
    assert_eq!(served.jwks().kids(), std::slice::from_ref(&signer));

    let block = here(etcd_doc_block("remove-and-revoke"))
        .replace(" [KID...]", "")
        .replace(
            "--kek-file kek KID\n",
            &format!("--kek-file kek {signer}\n"),
        );
    let (said, notes) = run_doc_block("docs/etcd.md's remove and revoke", &block, s.dir.path());
    assert!(
        notes.contains(&format!("kept: {second} stays until")),
        "{notes}"
    );
    assert!(said.contains("auth/jwt/config"), "{said}");
    let list = keyring_json("list", &flags, &["--json"]);
    assert_eq!(state_of(&list, &first), None, "removed: {list}");
    assert_eq!(
        state_of(&list, &second).as_deref(),
        Some("deprecated"),
        "kept: {list}"
    );
    assert_eq!(
        state_of(&list, &signer).as_deref(),
        Some("deprecated"),
        "revoked: {list}"
    );
    let replacement = active(&list);
    assert!(
        ![&first, &second, &signer].contains(&&replacement),
        "{list}"
    );
    eventually("the server drops the revoked key", LIMIT, || {
        served.jwks().kids() == std::slice::from_ref(&replacement)
    });
}

/// docs/wid.md's move to etcd as printed: a keystore's keys copied into a
/// TLS etcd member by `wid keyring migrate`, then `wid serve --etcd ...
/// --rotator` on them (each command of the block run with its words as
/// printed; the member's URL, the CA, the KEK and the keystore replaced,
/// and port 0 for 8080): the server serves the keystore's keys and is
/// elected the rotator.
#[test]
fn migrate_and_serve_as_docs_wid_md_prints_them() {
    let cluster = Cluster::start_sized(Options::new(Security::Tls), 1);
    let url = cluster.urls()[0].clone();
    let ca = cluster.pki.path("ca.crt");
    let s = Scratch::new();
    let kek = s.kek("kek");
    let keystore = s.path("keystore");
    let file = keystore_flags(&keystore, &kek);
    keyring_json(
        "init",
        &file,
        &["--alg", "EdDSA", "--alg", "ES256", "--json"],
    );
    let mut kids: Vec<String> = keyring_json("list", &file, &["--json"])["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_string())
        .collect();
    kids.sort();
    assert_eq!(kids.len(), 2);

    let block = marked_block(WID_MD, "docs/wid.md", "migrate-and-serve")
        .replace(
            "https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379",
            &url,
        )
        .replace("/etc/etcd/ca.pem", &ca)
        .replace("/run/secrets/wid-kek", &kek)
        .replace("/var/lib/wid/keystore", &keystore)
        .replace("127.0.0.1:8080", "127.0.0.1:0");
    let commands: Vec<Vec<String>> = block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert_eq!(commands[0][..3], ["wid", "keyring", "migrate"]);
    assert_eq!(commands[1][..2], ["wid", "serve"]);
    expect(&commands[0][1..], 0);
    let served = Served::start(&commands[1][2..]);

    let mut served_kids = served.jwks().kids();
    served_kids.sort();
    assert_eq!(served_kids, kids);
    let etcd = strings(&["--etcd", &url, "--etcd-ca-bundle", &ca, "--kek-file", &kek]);
    let mut in_etcd: Vec<String> = keyring_json("list", &etcd, &["--json"])["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_string())
        .collect();
    in_etcd.sort();
    assert_eq!(in_etcd, kids);
    eventually("the server is elected the rotator", LIMIT, || {
        served.get("/health").json()["etcd"]["rotator_elected"] == true
    });
}

/// The JSON lines `wid serve --log-format json` wrote, parsed (each must be
/// one object with a time).
fn log_lines(served: &Served) -> Vec<Value> {
    served
        .stderr()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The audit trail, as it happens: an elected rotator says so, every key
/// change is one JSON line (RFC 3339 time, key ID, algorithm, purpose, old
/// and new state) in every server that applies it, without a request to
/// prompt it, and the commits say which process made them and why; the
/// metrics carry the election, the cut-off, keys per state and the timing.
#[test]
fn the_audit_trail_and_metrics_say_what_happened() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let flags = etcd_flags(&urls, "/wid-cli/audit/", &kek);
    let init = keyring_json(
        "init",
        &flags,
        &["--alg", "EdDSA", "--etcd-lead-time", "1s", "--json"],
    );
    let first = init["changes"][0]["kid"].as_str().unwrap().to_string();
    let serve = |extra: &[&str]| {
        let mut a = args(
            &[],
            &flags,
            &[
                "--listen",
                "127.0.0.1:0",
                "--etcd-lead-time",
                "1s",
                "--log-format",
                "json",
            ],
        );
        a.extend(strings(extra));
        Served::start(&a)
    };
    let a = serve(&["--rotator"]);
    let b = serve(&[]);
    eventually("the rotator says it was elected", LIMIT, || {
        log_lines(&a)
            .iter()
            .any(|l| l["event"] == "election" && l["to"] == "elected")
    });

    let rotated = keyring_json("rotate", &flags, &["--etcd-lead-time", "1s", "--json"]);
    let next = rotated["changes"][0]["kid"].as_str().unwrap().to_string();
    // Both servers log the new key and, after the rotator promotes it, the
    // switch: no request is made meanwhile.
    for served in [&a, &b] {
        eventually("the switch is in the trail", LIMIT, || {
            let lines = log_lines(served);
            let has = |kid: &str, from: &str, to: &str| {
                lines.iter().any(|l| {
                    l["event"] == "key" && l["kid"] == kid && l["from"] == from && l["to"] == to
                })
            };
            has(&next, "absent", "prepublished")
                && has(&next, "prepublished", "active")
                && has(&first, "active", "inactive")
        });
        let lines = log_lines(served);
        let line = lines
            .iter()
            .find(|l| l["event"] == "key" && l["kid"] == next.as_str())
            .unwrap();
        assert_eq!(line["algorithm"], "EdDSA", "{line}");
        assert_eq!(line["purpose"], "bearer", "{line}");
        assert_eq!(line["level"], "info", "{line}");
        let time = line["time"].as_str().unwrap();
        assert!(
            time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
            "not RFC 3339: {time}"
        );
        assert!(
            lines.iter().any(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.contains("now at etcd revision"))),
            "the revision line came without a request: {lines:?}"
        );
    }
    // The committing process logs its commit once etcd answered it, which
    // may come after its own copy applied the change.
    let commit_line = || {
        log_lines(&a).into_iter().find(|l| {
            l["event"] == "committed"
                && l["why"]
                    .as_str()
                    .is_some_and(|w| w.contains("promoting") && w.contains(&next))
        })
    };
    eventually("the promotion's commit is in the trail", LIMIT, || {
        commit_line().is_some()
    });
    let commit = commit_line().unwrap();
    assert!(
        commit["by"].as_str().unwrap().contains("elected rotator"),
        "{commit}"
    );
    assert!(
        commit["process"].as_str().unwrap().contains(':'),
        "{commit}"
    );

    let metrics = a.get("/metrics").body;
    for line in [
        "wid_serve_rotator_elected 1",
        "wid_serve_etcd_cut_off 0",
        "wid_serve_keys{state=\"active\"} 1",
        "wid_serve_keys{state=\"inactive\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    for name in [
        "wid_serve_next_key_change_seconds ",
        "wid_serve_last_key_change_timestamp_seconds ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name} in\n{metrics}"
        );
    }
    assert!(
        !b.get("/metrics").body.contains("wid_serve_rotator_elected"),
        "a server without --rotator reports no election"
    );
}

/// `wid serve --etcd --etcd-snapshot FILE`: the server keeps a wrapped
/// snapshot of the last keyring it applied; started while etcd is down, it
/// serves that snapshot (stale: /health 503, /metrics cut off) instead of
/// exiting, and serves the replicated keyring as soon as etcd answers.
#[test]
fn a_server_started_while_etcd_is_down_serves_its_snapshot() {
    let mut cluster = Cluster::start_sized(Options::new(Security::Plain), 1);
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let flags = etcd_flags(&urls, "/wid-cli/snapshot/", &kek);
    keyring_json("init", &flags, &["--alg", "ES256", "--json"]);
    let snapshot = s.path("snapshot.keystore");
    let serve = || {
        Served::start(&args(
            &[],
            &flags,
            &[
                "--listen",
                "127.0.0.1:0",
                "--issuer",
                "http://127.0.0.1",
                "--etcd-snapshot",
                &snapshot,
            ],
        ))
    };
    let first = serve();
    let (token, kid) = issue(&flags, &req, "ES256");
    eventually("the snapshot is written", LIMIT, || {
        std::path::Path::new(&snapshot).exists()
    });
    assert_eq!(mode(&snapshot), 0o600);
    // Wrapped by the KEK: no plaintext key material in the file.
    assert_no_plaintext(&file_records(&snapshot), "the snapshot");
    let served_before = first.jwks();
    drop(first);

    // etcd down: a server starts anyway, from the snapshot, and says so.
    cluster.kill(0);
    let second = serve();
    assert_eq!(second.jwks().body, served_before.body);
    assert!(verifies(&token, &second.jwks_url()));
    let health = second.get("/health");
    assert_eq!(health.status, 503, "{}", health.body);
    assert_eq!(health.json()["etcd"]["snapshot"], true, "{}", health.body);
    let metrics = second.get("/metrics").body;
    assert!(
        metrics.lines().any(|l| l == "wid_serve_etcd_cut_off 1"),
        "{metrics}"
    );
    assert!(
        second.stderr().contains("serving the snapshot"),
        "{}",
        second.stderr()
    );
    // Without --etcd-snapshot a server still refuses to start blind.
    let blind = wid(&args(&["serve"], &flags, &["--listen", "127.0.0.1:0"]));
    assert_ne!(blind.status.code(), Some(0), "{}", stderr(&blind));

    // etcd back: the replicated keyring is served, current, without a
    // restart; a rotation made then reaches this server.
    cluster.restart(0);
    eventually(
        "the server serves the replicated keyring again",
        LIMIT,
        || {
            let h = second.get("/health");
            h.status == 200 && h.json()["etcd"]["snapshot"] == false
        },
    );
    let rotated = keyring_json("rotate", &flags, &["--immediate", "--json"]);
    let new = rotated["changes"][0]["kid"].as_str().unwrap().to_string();
    eventually("the rotation reaches the server", LIMIT, || {
        second.jwks().kids().contains(&new)
    });
    assert!(second.jwks().kids().contains(&kid));
}

/// Security round 4 (issue 51, item 2), as the operator ran it: a keyring
/// made by `wid keyring init` with default flags stores the default policy,
/// so a rotation candidate started later with a shorter --longest-ttl
/// refuses to start instead of taking over and deprecating the key of a
/// live token. A keyring of the format before (no policy record) gets its
/// first candidate's policy, and a second candidate with other values is
/// refused the same way; the live token keeps verifying.
#[test]
fn a_keyring_always_has_a_stored_policy() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let serve = |flags: &[String], extra: &[&str]| {
        let mut a = args(
            &["serve"],
            flags,
            &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1"],
        );
        a.extend(strings(extra));
        a
    };

    // init with default flags: the default policy is stored.
    let fresh = etcd_flags(&urls, "/wid-cli/default-policy/", &kek);
    keyring_json("init", &fresh, &["--alg", "ES256", "--json"]);
    let shown = json_out(&args(&["keyring", "policy", "show"], &fresh, &["--json"]));
    assert_eq!(shown["policy"]["longest_ttl"], Value::Null, "{shown}");
    assert_eq!(shown["policy"]["rotation_threshold"], "720h", "{shown}");
    let refused = wid(&serve(&fresh, &["--rotator", "--longest-ttl", "1m"]));
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains("--longest-ttl differs from the stored LongestTTL (unknown)"),
        "{err}"
    );
    // init with values stores those.
    let given = etcd_flags(&urls, "/wid-cli/given-policy/", &kek);
    keyring_json(
        "init",
        &given,
        &[
            "--alg",
            "ES256",
            "--longest-ttl",
            "1h",
            "--lead-time",
            "2s",
            "--json",
        ],
    );
    let shown = json_out(&args(&["keyring", "policy", "show"], &given, &["--json"]));
    assert_eq!(shown["policy"]["longest_ttl"], "1h", "{shown}");
    assert_eq!(shown["policy"]["lead_time"], "2s", "{shown}");

    // A keyring of the format before: init, then its policy record removed.
    let prefix = "/wid-cli/old-format/";
    let old = etcd_flags(&urls, prefix, &kek);
    keyring_json("init", &old, &["--alg", "ES256", "--json"]);
    cluster.admin_any(
        "/v3/kv/deleterange",
        &serde_json::json!({"key": STANDARD.encode(format!("{prefix}policy"))}),
    );
    let none = json_out(&args(&["keyring", "policy", "show"], &old, &["--json"]));
    assert_eq!(none["policy"], Value::Null, "{none}");
    let (token, _) = issue(&old, &req, "ES256");
    // The first candidate stores its policy ...
    let first = Served::start(&serve(&old, &["--rotator", "--longest-ttl", "1h"])[1..]);
    eventually("the first candidate's policy is stored", LIMIT, || {
        json_out(&args(&["keyring", "policy", "show"], &old, &["--json"]))["policy"]["longest_ttl"]
            == "1h"
    });
    // ... and the operator's second, with a one-minute policy, refuses to
    // start, naming both values.
    let second = wid(&serve(
        &old,
        &[
            "--rotator",
            "--longest-ttl",
            "1m",
            "--rotation-threshold",
            "1m",
        ],
    ));
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    let err = stderr(&second);
    assert!(
        err.contains("--longest-ttl differs from the stored LongestTTL (1h)"),
        "{err}"
    );
    // A few rounds of the elected rotator: the live token still verifies.
    eventually("the first candidate is elected", LIMIT, || {
        first.get("/health").json()["etcd"]["rotator_elected"] == true
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(verifies(&token, &first.jwks_url()));
}

/// Security round 4 (issue 51, item 1), as an operator upgrades: a
/// replicated keyring of the format before (its records not authenticated)
/// is refused by `wid issue` with the migration named; `wid keyring
/// migrate --authenticate-records` seals it once, listing the keys it
/// sealed; then it is used as before, and a second run has nothing to do.
#[test]
fn an_unauthenticated_keyring_is_sealed_by_migrate() {
    let cluster = Cluster::start(Options::new(Security::Plain));
    let urls = cluster.urls();
    let s = Scratch::new();
    let kek = s.kek("kek");
    let req = request(&s);
    let prefix = "/wid-cli/seal/";
    let flags = etcd_flags(&urls, prefix, &kek);
    let init = keyring_json("init", &flags, &["--alg", "ES256", "--json"]);
    let kid = init["changes"][0]["kid"].as_str().unwrap().to_string();
    // Made old: the record key out of the wrapping record, no manifest.
    let key = |suffix: &str| STANDARD.encode(format!("{prefix}{suffix}"));
    let got = cluster.admin_any("/v3/kv/range", &serde_json::json!({"key": key("wrapping")}));
    let wrapping = STANDARD
        .decode(got["kvs"][0]["value"].as_str().unwrap())
        .unwrap();
    let old = etcd_support::without_record_key(&wrapping);
    cluster.admin_any(
        "/v3/kv/put",
        &serde_json::json!({"key": key("wrapping"), "value": STANDARD.encode(&old)}),
    );
    cluster.admin_any(
        "/v3/kv/deleterange",
        &serde_json::json!({"key": key("sequence")}),
    );

    let refused = wid(&args(
        &["issue"],
        &flags,
        &["--request", &req, "--alg", "ES256"],
    ));
    assert_ne!(refused.status.code(), Some(0), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains("not authenticated") && err.contains("--authenticate-records"),
        "{err}"
    );
    let sealed = json_out(&args(
        &["keyring", "migrate"],
        &flags,
        &["--authenticate-records", "--json"],
    ));
    assert_eq!(sealed["sealed"], 2, "the key and the policy: {sealed}");
    assert_eq!(sealed["keys"][0]["kid"], kid.as_str(), "{sealed}");
    let (token, used) = issue(&flags, &req, "ES256");
    assert_eq!(used, kid);
    assert_eq!(token.split('.').count(), 3);
    let again = json_out(&args(
        &["keyring", "migrate"],
        &flags,
        &["--authenticate-records", "--json"],
    ));
    assert_eq!(again["sealed"], Value::Null, "{again}");
}
