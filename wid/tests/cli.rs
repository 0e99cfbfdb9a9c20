//! The `wid` tool, end to end: the built binary driven as an operator and a
//! relying party would drive it (the `wid` package's binary).
//!
//! `cargo test -p wid --test cli`

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workload_identity::model::{Allocation, GoDuration, IssueRequest, WorkloadIdentity};

#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use serve_support::{Served, WID, eventually, http};

const T0: i64 = 1_700_000_000;
const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";

fn wid(args: &[&str]) -> Output {
    Command::new(WID)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("wid runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs wid, expecting `code`; returns the output.
#[track_caller]
fn expect(args: &[&str], code: i32) -> Output {
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
fn json_out(args: &[&str]) -> Value {
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

    fn write(&self, name: &str, bytes: &[u8]) -> String {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write a scratch file");
        p
    }
}

fn request_json(ttl: &str) -> String {
    format!(
        r#"{{"Region":"global",
            "Allocation":{{"ID":"{ALLOC}","Namespace":"default","JobID":"web",
                          "TaskGroup":"frontend","ClientStatus":"running"}},
            "Task":"server",
            "Identity":{{"Name":"vault_default","Audience":["vault.io"],"TTL":{ttl}}}}}"#
    )
}

fn request_msgpack() -> Vec<u8> {
    let req = IssueRequest {
        region: "global".into(),
        allocation: Allocation {
            id: ALLOC.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "frontend".into(),
            client_status: "running".into(),
            ..Allocation::default()
        },
        task: "server".into(),
        proof_key: None,
        identity: WorkloadIdentity {
            name: "aws".into(),
            audience: vec!["sts.amazonaws.com".into()],
            ttl: GoDuration::from_secs(900),
            ..WorkloadIdentity::default()
        },
        ..IssueRequest::default()
    };
    workload_identity::codec::encode(&req).expect("encode")
}

fn alloc_state(s: &Scratch, status: &str) -> String {
    s.write(
        &format!("allocs-{status}.json"),
        format!(r#"[{{"ID":"{ALLOC}","ClientStatus":"{status}","DesiredStatus":"run"}}]"#)
            .as_bytes(),
    )
}

#[test]
fn help_documents_the_exit_codes() {
    let out = stdout(&expect(&["--help"], 0));
    for line in [
        "0  success",
        "1  the token was rejected",
        "2  usage",
        "3  I/O or decode",
        "4  the keyring refused",
        "5  internal error",
        "WID_RESULT_",
    ] {
        assert!(out.contains(line), "--help lacks {line:?}:\n{out}");
    }
    // A bad flag is a usage error.
    let o = expect(
        &["keyring", "rotate", "--keystore", "x", "--alg", "HS256"],
        2,
    );
    assert!(stderr(&o).contains("unknown algorithm \"HS256\""));
}

/// init -> rotate (two more algorithms) -> list -> issue (JSON and msgpack
/// requests) -> verify (accepted, and each kind of rejection with its code
/// and exit status) -> jwks, and verification from that JWKS alone.
#[test]
fn keystore_to_verified_token() {
    let s = Scratch::new();
    // init makes a missing directory, private.
    let ks = s.path("state/wid/keystore");
    let now = T0.to_string();

    let init = json_out(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(init["changes"][0]["algorithm"], "EdDSA");
    assert_eq!(init["saved"], true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&ks).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "keystores are written 0600");
        let dir = std::fs::metadata(s.path("state/wid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir, 0o700, "a directory init makes is private");
    }
    // Never overwritten.
    let before = std::fs::read(&ks).unwrap();
    let o = expect(&["keyring", "init", "--keystore", &ks], 3);
    assert!(
        stderr(&o).contains("wid: error: WID_RESULT_IO_ERROR"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("never overwrites"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&ks).unwrap(), before);

    let es = json_out(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--alg",
        "ES256",
        "--now",
        &now,
        "--json",
    ]);
    let rs = json_out(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--alg",
        "RS256",
        "--now",
        &now,
        "--json",
    ]);
    let es_kid = es["changes"][0]["kid"].as_str().unwrap().to_string();
    assert_eq!(rs["changes"][0]["algorithm"], "RS256");
    assert_eq!(rs["changes"][0]["previous"], Value::Null);
    // A second EdDSA rotation names the key it replaced.
    let ed1 = init["changes"][0]["kid"].as_str().unwrap().to_string();
    let ed2 = json_out(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(ed2["changes"][0]["previous"], ed1.as_str());
    let human = stdout(&expect(
        &[
            "keyring",
            "rotate",
            "--keystore",
            &ks,
            "--alg",
            "ES256",
            "--now",
            &now,
        ],
        0,
    ));
    assert!(
        human.contains(&format!("{es_kid} is now inactive")),
        "{human}"
    );

    let list = json_out(&["keyring", "list", "--keystore", &ks, "--json"]);
    let keys = list["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 5);
    let active: Vec<&str> = keys
        .iter()
        .filter(|k| k["state"] == "active")
        .map(|k| k["algorithm"].as_str().unwrap())
        .collect();
    assert_eq!(active.len(), 3, "one active key per algorithm: {list}");
    for alg in ["EdDSA", "ES256", "RS256"] {
        assert!(active.contains(&alg), "{list}");
    }
    assert!(keys.iter().all(|k| k["create_time"] == T0));
    assert_eq!(
        keys.iter().find(|k| k["algorithm"] == "RS256").unwrap()["rsa_bits"],
        2048
    );
    let table = stdout(&expect(
        &["keyring", "list", "--keystore", &ks, "--now", &now],
        0,
    ));
    assert!(table.starts_with("KID "), "{table}");
    assert!(table.contains("2023-11-14T22:13:20Z (now)"), "{table}");

    // Issue from JSON (EdDSA, TTL as a duration) and msgpack (ES256).
    let req = s.write("req.json", request_json(r#""1h""#).as_bytes());
    let issued = json_out(&[
        "issue",
        "--keystore",
        &ks,
        "--request",
        &req,
        "--issuer",
        "https://nomad.example.com",
        "--now",
        &now,
        "--json",
    ]);
    let token = issued["token"].as_str().unwrap().to_string();
    assert_eq!(issued["algorithm"], "EdDSA");
    assert_eq!(issued["request_format"], "JSON");
    assert_eq!(issued["claims"]["exp"], T0 + 3600);
    assert_eq!(issued["claims"]["nomad_allocation_id"], ALLOC);
    assert_eq!(issued["claims"]["iss"], "https://nomad.example.com");
    let mp = s.write("req.msgpack", &request_msgpack());
    let es_issued = json_out(&[
        "issue",
        "--keystore",
        &ks,
        "--request",
        &mp,
        "--alg",
        "ES256",
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(es_issued["request_format"], "msgpack");
    assert_eq!(es_issued["claims"]["aud"], "sts.amazonaws.com");
    assert!(
        es_issued["token"]
            .as_str()
            .unwrap()
            .starts_with("eyJhbGciOiJFUzI1NiIs")
    );
    // Plain output is the token alone, for TOKEN=$(wid issue ...).
    let plain = stdout(&expect(
        &["issue", "--keystore", &ks, "--request", &req, "--now", &now],
        0,
    ));
    assert_eq!(plain.trim().split('.').count(), 3, "{plain}");
    assert_eq!(plain.lines().count(), 1);
    // An invalid request names the field; a bad file is a decode error.
    // A request without a TTL would make a token that never expires:
    // refused unless asked for by name.
    let no_ttl = s.write("no-ttl.json", request_json("0").as_bytes());
    let o = expect(&["issue", "--keystore", &ks, "--request", &no_ttl], 2);
    assert!(
        stderr(&o).contains("has no TTL: its token would have no exp and never expire")
            && stderr(&o).contains("--allow-no-exp"),
        "{}",
        stderr(&o)
    );
    let o = expect(
        &[
            "issue",
            "--keystore",
            &ks,
            "--request",
            &no_ttl,
            "--allow-no-exp",
            "--json",
        ],
        0,
    );
    let claims = &serde_json::from_str::<Value>(&stdout(&o)).unwrap()["claims"];
    assert!(claims.get("exp").is_none(), "{claims}");
    let bad = s.write("bad.json", request_json("3600").as_bytes());
    let o = expect(&["issue", "--keystore", &ks, "--request", &bad], 2);
    // Seconds written where Go nanoseconds belong: the validation says so
    // (not the no-TTL refusal, which would point at --allow-no-exp).
    assert!(
        stderr(&o).contains("WID_RESULT_INVALID_ARGUMENT")
            && stderr(&o).contains("under one second")
            && !stderr(&o).contains("--allow-no-exp"),
        "{}",
        stderr(&o)
    );
    let junk = s.write("junk.json", b"{\"Region\": [");
    let o = expect(&["issue", "--keystore", &ks, "--request", &junk], 3);
    assert!(
        stderr(&o).contains("WID_RESULT_DECODE_ERROR"),
        "{}",
        stderr(&o)
    );

    // Verify: accepted with the allocation running.
    let running = alloc_state(&s, "running");
    let later = (T0 + 60).to_string();
    let ok = expect(
        &[
            "verify",
            &token,
            "--aud",
            "vault.io",
            "--keystore",
            &ks,
            "--alloc-state",
            &running,
            "--issuer",
            "https://nomad.example.com",
            "--now",
            &later,
        ],
        0,
    );
    assert!(stdout(&ok).starts_with("accepted: global:default:web:frontend:server:vault_default"));
    let v = json_out(&[
        "verify",
        &token,
        "--aud",
        "vault.io",
        "--keystore",
        &ks,
        "--alloc-state",
        &running,
        "--now",
        &later,
        "--json",
    ]);
    assert_eq!(v["accepted"], true);
    assert_eq!(v["algorithm"], "EdDSA");
    assert_eq!(v["allocation"]["basis"], "alloc-state");

    // Rejected: each reason with its stable code and exit status 1.
    let terminal = alloc_state(&s, "complete");
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "--aud",
                "vault.io",
                "--alloc-state",
                &terminal,
                "--now",
                &later,
            ],
            "WID_RESULT_ALLOCATION_TERMINAL",
        ),
        (
            &[
                "--aud",
                "consul.io",
                "--alloc-state",
                &running,
                "--now",
                &later,
            ],
            "WID_RESULT_AUDIENCE_MISMATCH",
        ),
        (
            &[
                "--aud",
                "vault.io",
                "--alloc-state",
                &running,
                "--now",
                &(T0 + 7200).to_string(),
            ],
            "WID_RESULT_EXPIRED",
        ),
        (
            &[
                "--aud",
                "vault.io",
                "--alloc-state",
                &running,
                "--now",
                &(T0 - 3600).to_string(),
            ],
            "WID_RESULT_NOT_YET_VALID",
        ),
        (
            &[
                "--aud",
                "vault.io",
                "--alloc-state",
                &running,
                "--issuer",
                "https://other.example",
                "--now",
                &later,
            ],
            "WID_RESULT_ISSUER_MISMATCH",
        ),
        (
            &["--aud", "vault.io", "--now", &later],
            "WID_RESULT_ALLOCATION_NOT_FOUND",
        ),
    ];
    for (extra, code) in cases {
        let mut args = vec!["verify", token.as_str(), "--keystore", ks.as_str()];
        args.extend_from_slice(extra);
        let o = expect(&args, 1);
        assert!(
            stderr(&o).starts_with(&format!("wid: rejected: {code}: ")),
            "{args:?}: {}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty());
        args.push("--json");
        let e = json_err(&expect(&args, 1));
        assert_eq!(e["code"], code);
        assert_eq!(e["exit"], 1);
    }
    // Without allocation state nothing is live, and the hint says why.
    let o = expect(
        &[
            "verify",
            &token,
            "--aud",
            "vault.io",
            "--keystore",
            &ks,
            "--now",
            &later,
        ],
        1,
    );
    assert!(
        stderr(&o).contains("hint: no --alloc-state was given"),
        "{}",
        stderr(&o)
    );
    // --assume-live accepts, and says loudly that nothing was checked.
    let o = expect(
        &[
            "verify",
            &token,
            "--aud",
            "vault.io",
            "--keystore",
            &ks,
            "--assume-live",
            "--now",
            &later,
        ],
        0,
    );
    assert!(stdout(&o).contains("ASSUMED LIVE"), "{}", stdout(&o));
    assert!(stderr(&o).contains("NOT checked"), "{}", stderr(&o));
    // It says what it assumes, not that the token is accepted: a token
    // that fails another rule is still rejected, after the same note.
    assert!(!stderr(&o).contains("accepted"), "{}", stderr(&o));
    let o = expect(
        &[
            "verify",
            &token,
            "--aud",
            "other.io",
            "--keystore",
            &ks,
            "--assume-live",
            "--now",
            &later,
        ],
        1,
    );
    assert!(
        stderr(&o).contains("every other rule is") && stderr(&o).contains("AUDIENCE_MISMATCH"),
        "{}",
        stderr(&o)
    );
    // An allocation-state file that is not one says where it went wrong.
    for (body, want) in [
        (
            r#"[{"ID":"a","ClientStatus":"running"},{"Id":"b"}]"#,
            "allocation 1 of the list: missing field `ID`",
        ),
        (r#""x""#, "a JSON string where a list of allocations"),
        ("[", "not JSON"),
    ] {
        let bad = s.write("bad-allocs.json", body.as_bytes());
        let o = expect(
            &[
                "verify",
                &token,
                "--aud",
                "vault.io",
                "--keystore",
                &ks,
                "--alloc-state",
                &bad,
            ],
            3,
        );
        assert!(stderr(&o).contains(want), "{body}: {}", stderr(&o));
        assert!(!stderr(&o).contains("untagged"), "{}", stderr(&o));
    }
    let v = json_out(&[
        "verify",
        &token,
        "--aud",
        "vault.io",
        "--keystore",
        &ks,
        "--assume-live",
        "--now",
        &later,
        "--json",
    ]);
    assert_eq!(v["allocation"]["basis"], "assumed-live");
    assert_eq!(v["allocation"]["checked"], false);
    // A tampered token is a bad signature.
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    let sig = parts[2].clone();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    parts[2] = format!("{flipped}{}", &sig[1..]);
    let tampered = parts.join(".");
    let e = json_err(&expect(
        &[
            "verify",
            &tampered,
            "--aud",
            "vault.io",
            "--keystore",
            &ks,
            "--assume-live",
            "--now",
            &later,
            "--json",
        ],
        1,
    ));
    assert_eq!(e["code"], "WID_RESULT_BAD_SIGNATURE");

    // The JWKS: every verifying key, and enough to verify with on its own.
    let jwks = json_out(&["keyring", "jwks", "--keystore", &ks, "--json"]);
    let published: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kty"].as_str().unwrap())
        .collect();
    assert_eq!(published.len(), 5);
    for kty in ["OKP", "EC", "RSA"] {
        assert!(published.contains(&kty), "{jwks}");
    }
    let jwks_file = s.write("jwks.json", jwks.to_string().as_bytes());
    let v = json_out(&[
        "verify",
        es_issued["token"].as_str().unwrap(),
        "--aud",
        "sts.amazonaws.com",
        "--jwks",
        &jwks_file,
        "--alloc-state",
        &running,
        "--now",
        &later,
        "--json",
    ]);
    assert_eq!(v["algorithm"], "ES256");
    // A key source is required; the wrong key set names the kid.
    expect(&["verify", &token, "--aud", "vault.io"], 2);
    let other = s.path("other-keystore");
    expect(&["keyring", "init", "--keystore", &other], 0);
    let e = json_err(&expect(
        &[
            "verify",
            &token,
            "--aud",
            "vault.io",
            "--keystore",
            &other,
            "--assume-live",
            "--json",
        ],
        1,
    ));
    assert_eq!(e["code"], "WID_RESULT_UNKNOWN_KEY");

    let oidc = json_out(&[
        "keyring",
        "oidc",
        "--keystore",
        &ks,
        "--issuer",
        "https://nomad.example.com",
        "--json",
    ]);
    assert_eq!(
        oidc["jwks_uri"],
        "https://nomad.example.com/.well-known/jwks.json"
    );
    assert_eq!(
        oidc["id_token_signing_alg_values_supported"],
        serde_json::json!(["EdDSA", "ES256", "RS256"])
    );
    let e = json_err(&expect(
        &[
            "keyring",
            "oidc",
            "--keystore",
            &ks,
            "--issuer",
            "http://nomad.example.com",
            "--json",
        ],
        2,
    ));
    assert_eq!(e["code"], "WID_RESULT_INVALID_ARGUMENT");
}

#[test]
fn refusals_have_their_own_codes() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks, "--alg", "ES256"], 0);
    let req = s.write("req.json", request_json(r#""1h""#).as_bytes());
    // A command line clap refuses is a JSON error too under --json (and
    // help is still help).
    let o = expect(&["keyring", "list", "--bogus", "--json"], 2);
    let e = json_err(&o);
    assert_eq!(e["code"], "WID_RESULT_INVALID_ARGUMENT");
    assert_eq!(e["exit"], 2);
    assert!(e["message"].as_str().unwrap().contains("'--bogus'"), "{e}");
    let o = expect(&["keyring", "list", "--bogus"], 2);
    assert!(stderr(&o).starts_with("error: unexpected argument"));
    let o = expect(&["--json", "keyring", "--help"], 0);
    assert!(stdout(&o).contains("Usage: wid keyring"));
    // Help shown because a subcommand is missing is an error: JSON too.
    let o = expect(&["--json", "keyring"], 2);
    assert_eq!(json_err(&o)["code"], "WID_RESULT_INVALID_ARGUMENT");
    // A missing required argument: the message names it.
    let o = expect(&["keyring", "deprecate", "--keystore", &ks, "--json"], 2);
    let e = json_err(&o);
    assert!(e["message"].as_str().unwrap().contains("<KID>"), "{e}");
    // No active EdDSA key: the keyring refuses (exit 4), and the hint says
    // which algorithm it has.
    let o = expect(&["issue", "--keystore", &ks, "--request", &req], 4);
    assert!(
        stderr(&o).contains("WID_RESULT_NO_ACTIVE_KEY"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("active bearer keys for ES256"),
        "{}",
        stderr(&o)
    );
    // A missing keystore is an I/O error that says how to make one.
    let o = expect(&["keyring", "list", "--keystore", &s.path("nope")], 3);
    assert!(stderr(&o).contains("wid keyring init"), "{}", stderr(&o));
    // A keystore others can read is refused, as the library refuses it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ks, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = json_err(&expect(
            &["keyring", "list", "--keystore", &ks, "--json"],
            3,
        ));
        assert_eq!(e["code"], "WID_RESULT_IO_ERROR");
        assert!(e["message"].as_str().unwrap().contains("0644"), "{e}");
    }
    // A key ID that is not there is a usage error, named.
    let o = expect(&["keyring", "promote", "--keystore", &s.path("k2"), "x"], 3);
    assert!(stderr(&o).contains("WID_RESULT_IO_ERROR"));
    let k2 = s.path("k2");
    expect(&["keyring", "init", "--keystore", &k2], 0);
    let o = expect(&["keyring", "promote", "--keystore", &k2, "no-such-key"], 2);
    assert!(
        stderr(&o).contains("WID_RESULT_UNKNOWN_KEY"),
        "{}",
        stderr(&o)
    );
    // RSA sizes are the library's three.
    let o = expect(
        &[
            "keyring",
            "rotate",
            "--keystore",
            &k2,
            "--alg",
            "RS256",
            "--rsa-bits",
            "1024",
        ],
        2,
    );
    assert!(stderr(&o).contains("--rsa-bits"), "{}", stderr(&o));
}

/// The rotation policy's timeline, carried out by `plan --apply`, then by
/// hand with promote and deprecate.
#[test]
fn plan_promote_deprecate() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    let t = |hours: i64| (T0 + hours * 3600).to_string();
    let init = json_out(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--now",
        &t(0),
        "--json",
    ]);
    let first = init["changes"][0]["kid"].as_str().unwrap().to_string();

    let plan = json_out(&[
        "keyring",
        "plan",
        "--keystore",
        &ks,
        "--now",
        &t(100),
        "--json",
    ]);
    assert_eq!(plan["actions"], serde_json::json!([]));
    let human = stdout(&expect(
        &["keyring", "plan", "--keystore", &ks, "--now", &t(100)],
        0,
    ));
    assert!(
        human.contains("nothing to do") && human.contains("no key is ever deprecated"),
        "{human}"
    );
    // And says when the next step is due.
    assert!(
        human.contains("the next planned key switch is") && human.contains("(in 25d 20h)"),
        "{human}"
    );
    assert!(plan["next_key_switch"].as_i64().is_some(), "{plan}");

    // Past half the 720 h threshold: prepublish a successor for t0 + 720 h.
    let plan = json_out(&[
        "keyring",
        "plan",
        "--keystore",
        &ks,
        "--now",
        &t(400),
        "--json",
    ]);
    assert_eq!(
        plan["actions"],
        serde_json::json!([{"action": "prepublish", "algorithm": "EdDSA", "purpose": "bearer", "publish_at": T0 + 720 * 3600}])
    );
    let applied = json_out(&[
        "keyring",
        "plan",
        "--keystore",
        &ks,
        "--now",
        &t(400),
        "--apply",
        "--json",
    ]);
    assert_eq!(applied["saved"], true);
    let second = applied["changes"][0]["kid"].as_str().unwrap().to_string();
    assert_eq!(applied["changes"][0]["state"], "prepublished");
    // It is published at once.
    let jwks = json_out(&["keyring", "jwks", "--keystore", &ks, "--json"]);
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);

    // Promote by hand, early: the first key becomes inactive.
    let promoted = json_out(&[
        "keyring",
        "promote",
        "--keystore",
        &ks,
        &second,
        "--now",
        &t(500),
        "--json",
    ]);
    assert_eq!(promoted["changes"][0]["previous"], first.as_str());
    let again = json_out(&["keyring", "promote", "--keystore", &ks, &second, "--json"]);
    assert_eq!(again["saved"], false);

    // The active key cannot be deprecated; the old one can, once its
    // tokens (1 h at most) have expired, and the plan of a keystore whose
    // stored policy says so (a copy: init stored LongestTTL unknown, and
    // `plan --longest-ttl 1h` contradicting it is refused) says so.
    let o = expect(&["keyring", "deprecate", "--keystore", &ks, &second], 2);
    assert!(stderr(&o).contains("hint: rotate first"), "{}", stderr(&o));
    let o = expect(
        &["keyring", "plan", "--keystore", &ks, "--longest-ttl", "1h"],
        2,
    );
    assert!(
        stderr(&o).contains("--longest-ttl differs from the stored LongestTTL (unknown)"),
        "{}",
        stderr(&o)
    );
    let copy = s.path("keystore-1h");
    std::fs::copy(&ks, &copy).unwrap();
    expect(
        &[
            "keyring",
            "policy",
            "set",
            "--keystore",
            &copy,
            "--longest-ttl",
            "1h",
            "--force",
        ],
        0,
    );
    let plan = json_out(&[
        "keyring",
        "plan",
        "--keystore",
        &copy,
        "--now",
        &t(502),
        "--json",
    ]);
    assert_eq!(
        plan["actions"],
        serde_json::json!([{"action": "deprecate", "kid": first}])
    );
    // Deprecating a key whose tokens may still be valid is refused: their
    // lifetime unknown (no --longest-ttl), or not over yet, saying when.
    let o = expect(
        &[
            "keyring",
            "deprecate",
            "--keystore",
            &ks,
            &first,
            "--now",
            &t(502),
        ],
        2,
    );
    assert!(
        stderr(&o).contains("may still be valid") && stderr(&o).contains("--longest-ttl"),
        "{}",
        stderr(&o)
    );
    let o = expect(
        &[
            "keyring",
            "deprecate",
            "--keystore",
            &ks,
            &first,
            "--now",
            &t(502),
            "--longest-ttl",
            "3h",
        ],
        2,
    );
    assert!(
        stderr(&o).contains("may be valid until") && stderr(&o).contains("safe from then"),
        "{}",
        stderr(&o)
    );
    let human = stdout(&expect(
        &[
            "keyring",
            "deprecate",
            "--keystore",
            &ks,
            &first,
            "--now",
            &t(502),
            "--longest-ttl",
            "1h",
        ],
        0,
    ));
    assert!(human.contains("left the JWKS"), "{human}");
    let jwks = json_out(&["keyring", "jwks", "--keystore", &ks, "--json"]);
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1);
    assert_eq!(jwks["keys"][0]["kid"], second.as_str());
}

/// `wid inspect`: decoding without keys; with keys, the library's steps in
/// order and the first failing rule.
#[test]
fn inspect_explains() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    let now = T0.to_string();
    expect(&["keyring", "init", "--keystore", &ks, "--now", &now], 0);
    let req = s.write("req.json", request_json(r#""1h""#).as_bytes());
    let token = stdout(&expect(
        &["issue", "--keystore", &ks, "--request", &req, "--now", &now],
        0,
    ))
    .trim()
    .to_string();
    let later = (T0 + 600).to_string();

    // No keys: decoded, times relative to now, nothing verified.
    let o = expect(&["inspect", &token, "--now", &later], 0);
    let out = stdout(&o);
    assert!(out.contains("claims (not verified)"), "{out}");
    assert!(out.contains("exp  2023-11-14T23:13:20Z (in 50m)"), "{out}");
    assert!(out.contains("iat  2023-11-14T22:13:20Z (10m ago)"), "{out}");
    assert!(!out.contains("verdict"), "{out}");

    let steps = |v: &Value| -> Vec<(String, bool)> {
        v["verification"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["passed"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let all = [
        "length",
        "structure",
        "key",
        "algorithm",
        "signature",
        "claims",
        "times",
        "audience",
        "issuer",
        "allocation",
    ];

    // Accepted: every step passes.
    let v = json_out(&[
        "inspect",
        &token,
        "--keystore",
        &ks,
        "--assume-live",
        "--now",
        &later,
        "--json",
    ]);
    assert_eq!(
        steps(&v),
        all.iter()
            .map(|n| (n.to_string(), true))
            .collect::<Vec<_>>()
    );
    assert_eq!(v["verification"]["accepted"], true);
    assert_eq!(v["verification"]["audience_from_token"], true);
    assert_eq!(v["key"]["state"], "active");

    // Each rule, the first failure ends the walk: (flags, failing step, code).
    let running = alloc_state(&s, "running");
    let terminal = alloc_state(&s, "failed");
    let l = later.as_str();
    let cases: [(&[&str], &str, &str); 5] = [
        (
            &["--aud", "consul.io", "--assume-live", "--now", l],
            "audience",
            "WID_RESULT_AUDIENCE_MISMATCH",
        ),
        (
            &["--alloc-state", &terminal, "--now", l],
            "allocation",
            "WID_RESULT_ALLOCATION_TERMINAL",
        ),
        (
            &["--assume-live", "--issuer", "https://x.example", "--now", l],
            "issuer",
            "WID_RESULT_ISSUER_MISMATCH",
        ),
        (
            &["--alloc-state", &running, "--now", "1800000000"],
            "times",
            "WID_RESULT_EXPIRED",
        ),
        (
            &["--now", l],
            "allocation",
            "WID_RESULT_ALLOCATION_NOT_FOUND",
        ),
    ];
    for (extra, failing, code) in cases {
        let mut args = vec!["inspect", token.as_str(), "--keystore", ks.as_str()];
        args.extend_from_slice(extra);
        args.push("--json");
        let o = expect(&args, 1);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let got = steps(&v);
        let n = all.iter().position(|s| s == &failing).unwrap();
        let want: Vec<(String, bool)> = all[..=n]
            .iter()
            .enumerate()
            .map(|(i, s)| (s.to_string(), i < n))
            .collect();
        assert_eq!(got, want, "{args:?}");
        assert_eq!(v["verification"]["code"], code);
        assert_eq!(json_err(&o)["code"], code);
    }
    // Human form: the marks and the verdict.
    let o = expect(
        &[
            "inspect",
            &token,
            "--keystore",
            &ks,
            "--aud",
            "consul.io",
            "--assume-live",
            "--now",
            &later,
        ],
        1,
    );
    let out = stdout(&o);
    assert!(out.contains("ok   signature"), "{out}");
    assert!(out.contains("FAIL audience"), "{out}");
    assert!(
        out.contains("verdict: rejected, WID_RESULT_AUDIENCE_MISMATCH"),
        "{out}"
    );
    // A key the set does not hold; a token that is no token.
    let other = s.path("other");
    expect(&["keyring", "init", "--keystore", &other], 0);
    let o = expect(
        &[
            "inspect",
            &token,
            "--keystore",
            &other,
            "--assume-live",
            "--now",
            &later,
        ],
        1,
    );
    assert!(
        stdout(&o).contains("is not in the keystore"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("FAIL key"), "{}", stdout(&o));
    let o = expect(&["inspect", "not-a-token"], 1);
    assert!(stderr(&o).contains("WID_RESULT_MALFORMED_TOKEN"));
}

fn curl_available() -> bool {
    Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// init -> rotate -> issue -> serve -> verify from the served JWKS; the
/// keystore followed as it rotates; headers; SIGTERM ends it with status 0.
#[test]
fn serve_publishes_and_follows_the_keystore() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks], 0);
    expect(
        &["keyring", "rotate", "--keystore", &ks, "--alg", "ES256"],
        0,
    );
    let req = s.write("req.json", request_json(r#""1h""#).as_bytes());
    let issuer = "http://127.0.0.1";
    let token = stdout(&expect(
        &[
            "issue",
            "--keystore",
            &ks,
            "--request",
            &req,
            "--issuer",
            issuer,
        ],
        0,
    ))
    .trim()
    .to_string();

    let served = Served::start(&[
        "--keystore",
        &ks,
        "--listen",
        "127.0.0.1:0",
        "--issuer",
        issuer,
    ]);

    let jwks = served.get("/.well-known/jwks.json");
    assert_eq!(jwks.status, 200);
    assert_eq!(jwks.header("Content-Type"), Some("application/json"));
    assert!(
        jwks.max_age() >= 15 * 60,
        "{:?}",
        jwks.header("Cache-Control")
    );
    assert!(
        jwks.max_age() <= 360 * 3600,
        "{:?}",
        jwks.header("Cache-Control")
    );
    assert_eq!(
        jwks.json(),
        json_out(&["keyring", "jwks", "--keystore", &ks, "--json"])
    );

    // A relying party verifies the token from what was served.
    let served_jwks = s.write("served.json", jwks.body.as_bytes());
    let running = alloc_state(&s, "running");
    let v = json_out(&[
        "verify",
        &token,
        "--aud",
        "vault.io",
        "--jwks",
        &served_jwks,
        "--issuer",
        issuer,
        "--alloc-state",
        &running,
        "--json",
    ]);
    assert_eq!(v["accepted"], true);

    // And straight from the server, as `wid verify --jwks URL`.
    let url = format!("http://{}/.well-known/jwks.json", served.addr);
    let v = json_out(&[
        "verify",
        &token,
        "--aud",
        "vault.io",
        "--jwks",
        &url,
        "--issuer",
        issuer,
        "--alloc-state",
        &running,
        "--json",
    ]);
    assert_eq!(v["accepted"], true);
    assert_eq!(v["keys"], format!("JWKS {url}"));
    // The server's own URL given for the JWKS's: a 404, and where to look.
    let base = format!("http://{}", served.addr);
    let o = expect(&["verify", &token, "--aud", "vault.io", "--jwks", &base], 3);
    assert!(
        stderr(&o).contains(&format!("a JWKS is usually at {url}")),
        "{}",
        stderr(&o)
    );

    let oidc = served.get("/.well-known/openid-configuration");
    assert_eq!(oidc.status, 200);
    assert_eq!(oidc.header("Content-Type"), Some("application/json"));
    assert!(oidc.max_age() >= 15 * 60);
    assert_eq!(oidc.json()["issuer"], issuer);
    assert_eq!(
        oidc.json()["jwks_uri"],
        "http://127.0.0.1/.well-known/jwks.json"
    );
    assert_eq!(
        oidc.json()["id_token_signing_alg_values_supported"],
        serde_json::json!(["EdDSA", "ES256"])
    );

    let health = served.get("/health");
    assert_eq!(health.status, 200);
    assert_eq!(health.header("Cache-Control"), Some("no-store"));
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(served.get("/nope").status, 404);
    let post = http(&served.addr, "POST", "/health");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow"), Some("GET, HEAD"));
    let head = http(&served.addr, "HEAD", "/.well-known/jwks.json");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    // An oversized request head is refused, not buffered.
    let mut big = TcpStream::connect(&served.addr).unwrap();
    let _ = write!(big, "GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let mut raw = String::new();
    let _ = big.read_to_string(&mut raw);
    assert!(raw.is_empty() || raw.starts_with("HTTP/1.1 431"), "{raw}");

    // The keystore rotates under the server: the next fetch has the new key.
    let rotated = json_out(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--alg",
        "RS256",
        "--json",
    ]);
    let new_kid = rotated["changes"][0]["kid"].as_str().unwrap();
    let jwks = served.get("/.well-known/jwks.json").json();
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert!(kids.contains(&new_kid), "{jwks}");
    assert_eq!(kids.len(), 3);
    assert_eq!(
        served.get("/.well-known/openid-configuration").json()["id_token_signing_alg_values_supported"],
        serde_json::json!(["EdDSA", "ES256", "RS256"])
    );

    // A broken keystore: the last good keys are still served, health says so.
    std::fs::write(&ks, b"not a keystore").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ks, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let health = served.get("/health");
    assert_eq!(health.status, 503);
    assert_eq!(health.json()["status"], "degraded");
    // Unauthenticated clients learn that a reload failed, not where the
    // keystore lives or what its mode is (stderr has the detail).
    assert_eq!(
        health.json()["reload_error"],
        "reload failed: serving the last good keys",
        "{}",
        health.body
    );
    assert!(!health.body.contains("keystore"), "{}", health.body);
    assert_eq!(
        served.get("/.well-known/jwks.json").json()["keys"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    if curl_available() {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-D",
                "-",
                "--max-time",
                "10",
                &format!("http://{}/.well-known/jwks.json", served.addr),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(text.starts_with("http/1.1 200"), "{text}");
        assert!(text.contains("content-type: application/json"), "{text}");
        assert!(text.contains("cache-control: max-age="), "{text}");
        assert!(text.contains(&new_kid.to_lowercase()), "{text}");
    } else {
        eprintln!("curl not installed: the curl check is skipped");
    }

    let (status, err) = served.terminate();
    assert_eq!(status.code(), Some(0), "output: {err}");
    assert!(err.contains("stopped by signal"), "{err}");
}

/// The election's timing flags are checked before etcd is reached (none
/// answers at the address given), each refusal naming its flag, what was
/// given and what is expected; they need --rotator.
#[test]
fn serve_refuses_an_election_it_cannot_keep() {
    let s = Scratch::new();
    let kek = s.path("kek");
    expect(&["keyring", "generate-kek", "--kek-file", &kek], 0);
    let serve = |more: &[&str]| {
        let mut a = vec![
            "serve",
            "--etcd",
            "http://127.0.0.1:1",
            "--etcd-allow-plain-http",
            "--kek-file",
            &kek,
            "--listen",
            "127.0.0.1:0",
        ];
        a.extend_from_slice(more);
        stderr(&expect(&a, 2))
    };
    for (more, said) in [
        (
            &["--rotator", "--rotator-lease-ttl", "1s"][..],
            "--rotator-lease-ttl: is 1s; expected whole seconds",
        ),
        (
            &["--rotator", "--rotator-lease-ttl", "2500ms"][..],
            "--rotator-lease-ttl: is 2.5s",
        ),
        (
            &["--rotator", "--rotator-keep-alive", "1500ms"][..],
            "--rotator-keep-alive: is 1.5s; expected from 10ms to a third of the lease TTL (1s)",
        ),
        (
            &[
                "--rotator",
                "--rotator-lease-ttl",
                "6s",
                "--rotator-keep-alive",
                "5ms",
            ][..],
            "--rotator-keep-alive: is 5ms",
        ),
        (&["--rotator-lease-ttl", "5s"][..], "--rotator"),
    ] {
        let err = serve(more);
        assert!(err.contains(said), "{more:?}: {err}");
    }
}

#[test]
fn serve_refuses_an_http_issuer_off_loopback() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks], 0);
    // Refused before anything listens.
    let o = expect(
        &[
            "serve",
            "--keystore",
            &ks,
            "--listen",
            "0.0.0.0:0",
            "--issuer",
            "http://127.0.0.1",
        ],
        2,
    );
    assert!(stderr(&o).contains("loopback"), "{}", stderr(&o));
    let o = expect(
        &[
            "serve",
            "--keystore",
            &ks,
            "--listen",
            "127.0.0.1:0",
            "--issuer",
            "http://nomad.example.com",
        ],
        2,
    );
    assert!(stderr(&o).contains("loopback host"), "{}", stderr(&o));
    let o = expect(
        &[
            "serve",
            "--keystore",
            &ks,
            "--listen",
            "127.0.0.1:0",
            "--issuer",
            "ftp://x",
        ],
        2,
    );
    assert!(
        stderr(&o).contains("WID_RESULT_INVALID_ARGUMENT"),
        "{}",
        stderr(&o)
    );
}

/// A port that was free a moment ago (the issuer URL must name the port
/// before the server starts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn pyjwt_available() -> bool {
    Command::new("python3")
        .args(["-c", "import jwt, cryptography"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What a standard OIDC client does: read the discovery document at the
/// issuer, follow its jwks_uri, pick the key by kid and verify. PyJWT's
/// PyJWKClient (when installed) for tokens of all three algorithms; wid's own
/// --jwks URL and inspect for the same tokens.
#[test]
fn serve_for_standard_oidc_clients() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(
        &[
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
        ],
        0,
    );
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let listen = format!("127.0.0.1:{port}");
    let req = s.write("req.json", request_json(r#""1h""#).as_bytes());
    let tokens: Vec<String> = ["EdDSA", "ES256", "RS256"]
        .iter()
        .map(|alg| {
            stdout(&expect(
                &[
                    "issue",
                    "--keystore",
                    &ks,
                    "--request",
                    &req,
                    "--alg",
                    alg,
                    "--issuer",
                    &issuer,
                ],
                0,
            ))
            .trim()
            .to_string()
        })
        .collect();
    let served = Served::start(&["--keystore", &ks, "--listen", &listen, "--issuer", &issuer]);
    let doc = served.get("/.well-known/openid-configuration").json();
    assert_eq!(doc["issuer"], issuer.as_str());
    let jwks_uri = doc["jwks_uri"].as_str().unwrap().to_string();
    assert_eq!(jwks_uri, format!("{issuer}/.well-known/jwks.json"));

    for token in &tokens {
        let v = json_out(&[
            "inspect",
            token,
            "--jwks",
            &jwks_uri,
            "--aud",
            "vault.io",
            "--issuer",
            &issuer,
            "--assume-live",
            "--json",
        ]);
        assert_eq!(v["verification"]["accepted"], true, "{v}");
        assert_eq!(v["key"]["found"], true);
    }

    if pyjwt_available() {
        let script = r#"
import json, sys, urllib.request
import jwt
issuer = sys.argv[1]
with urllib.request.urlopen(issuer + "/.well-known/openid-configuration", timeout=10) as r:
    doc = json.load(r)
    assert r.headers["Content-Type"] == "application/json", r.headers["Content-Type"]
    assert r.headers["Cache-Control"].startswith("max-age="), r.headers["Cache-Control"]
assert doc["issuer"] == issuer, doc
client = jwt.PyJWKClient(doc["jwks_uri"], cache_keys=False)
for token in sys.argv[2:]:
    key = client.get_signing_key_from_jwt(token)
    alg = jwt.get_unverified_header(token)["alg"]
    assert alg in doc["id_token_signing_alg_values_supported"], alg
    claims = jwt.decode(token, key.key, algorithms=[alg], audience="vault.io", issuer=issuer)
    print(alg, key.key_id, claims["nomad_allocation_id"])
"#;
        let mut args = vec!["-c".to_string(), script.to_string(), issuer.clone()];
        args.extend(tokens.iter().cloned());
        let out = Command::new("python3").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "PyJWT: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        for alg in ["EdDSA", "ES256", "RS256"] {
            assert!(
                text.contains(&format!("{alg} ")) && text.contains(ALLOC),
                "{text}"
            );
        }
    } else {
        eprintln!("PyJWT not installed: the PyJWKClient check is skipped");
    }
    let (status, err) = served.terminate();
    assert_eq!(status.code(), Some(0), "output: {err}");
}

/// Slow clients cannot hold `wid serve` shut: 70 clients that each send one
/// byte a second (each read succeeds, so a per-read timeout never fires) take
/// every one of the 64 slots, and a normal client is still served once the
/// whole-head deadline (5 s) cuts them, long before they would stop.
#[test]
fn slow_clients_cannot_hold_serve_shut() {
    // This process holds 1,000 connections too.
    let fds = rlimit::increase_nofile_limit(4096).unwrap();
    assert!(
        fds >= 1100,
        "the test needs 1,100 open files; the hard limit is {fds}"
    );
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks], 0);

    // 1,000 slow clients, each having sent part of a request head, while
    // normal clients keep being served: the request deadline is long here
    // (60 s), so all of them are still connected while the normal ones are
    // answered, which /metrics shows.
    let served = Served::start(&[
        "--keystore",
        ks.as_str(),
        "--listen",
        "127.0.0.1:0",
        "--request-timeout",
        "60s",
    ]);
    let slow: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&served.addr).unwrap())
        .collect();
    let request = b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: x\r\n\r\n";
    for (i, mut conn) in slow.iter().enumerate() {
        conn.write_all(&request[..1 + i % 8]).unwrap();
    }
    // The server holds every slow connection (it accepted them in order,
    // before the normal client's).
    eventually("all 1,000 slow clients accepted", || {
        connections(&served) > 1000
    });
    for _ in 0..20 {
        let r = served.get("/.well-known/jwks.json");
        assert_eq!(r.status, 200);
    }
    assert!(
        connections(&served) > 1000,
        "still holding the slow clients"
    );
    drop(slow);

    // At the connection limit (8 here), a normal client waits in the
    // kernel's backlog and is served once the slow clients' request deadline
    // (2 s) has cut them: after it, never before. The lower bound is the
    // server's own deadline (a busy host only adds to it).
    let served = Served::start(&[
        "--keystore",
        ks.as_str(),
        "--listen",
        "127.0.0.1:0",
        "--max-connections",
        "8",
        "--request-timeout",
        "2s",
    ]);
    let slow_connected = Instant::now();
    let mut slow: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(&served.addr).unwrap())
        .collect();
    for conn in &mut slow {
        conn.write_all(b"GET /health HT").unwrap();
    }
    let normal = served.get("/.well-known/jwks.json");
    assert_eq!(normal.status, 200);
    assert!(
        slow_connected.elapsed() >= Duration::from_secs(2),
        "served before any slow client was cut: the slots were never full"
    );
    // Every slow client was cut by the deadline: closed (or a 408).
    for (i, mut conn) in slow.into_iter().enumerate() {
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut got = Vec::new();
        match conn.read_to_end(&mut got) {
            Ok(_) => {
                let text = String::from_utf8_lossy(&got);
                assert!(
                    text.is_empty() || text.starts_with("HTTP/1.1 408"),
                    "slow client {i}: {text}"
                );
            }
            Err(e) => assert_eq!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset,
                "slow client {i} was not cut: {e}"
            ),
        }
    }
    drop(served);

    // A client that pipelines requests and never reads its answers holds
    // the only slot only until its answers' write deadline (2 s): then it is
    // cut and a normal client is served. Bounded by the connection lifetime
    // (60 s) otherwise, which the upper bound below rules out with a margin
    // a busy host cannot use up.
    let served = Served::start(&[
        "--keystore",
        ks.as_str(),
        "--listen",
        "127.0.0.1:0",
        "--max-connections",
        "1",
        "--request-timeout",
        "2s",
    ]);
    let mut hog = TcpStream::connect(&served.addr).unwrap();
    let pipelining = std::thread::spawn(move || {
        let request = b"GET /.well-known/jwks.json HTTP/1.1\r\nHost: x\r\n\r\n";
        // Far more answers than the socket buffers hold; the writes stop
        // when the server stops reading, and fail once it cuts the
        // connection.
        for _ in 0..200_000 {
            if hog.write_all(request).is_err() {
                return true;
            }
        }
        false
    });
    let started = Instant::now();
    let normal = served.get("/.well-known/jwks.json");
    assert_eq!(normal.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "served after {:?}: the non-reading client held the slot to its lifetime",
        started.elapsed()
    );
    assert!(pipelining.join().unwrap(), "the pipelining client was cut");
}

/// The `wid_serve_connections` gauge of `served`'s /metrics.
fn connections(served: &Served) -> u64 {
    let metrics = served.get("/metrics");
    assert_eq!(metrics.status, 200);
    metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("wid_serve_connections "))
        .expect("the connections gauge")
        .parse()
        .unwrap()
}

#[test]
fn serve_drains_on_sigterm() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks], 0);
    // A long request deadline: the half-sent requests below must outlive
    // however long a busy host takes between the steps.
    let args = [
        "--keystore",
        ks.as_str(),
        "--listen",
        "127.0.0.1:0",
        "--request-timeout",
        "60s",
    ];

    // A request in flight: its head written but for the final CRLF. A probe
    // connected after it and answered shows the server accepted it (the
    // kernel hands connections to accept() in order), with no sleeping.
    let mut served = Served::start(&args);
    let mut slow = TcpStream::connect(&served.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(slow, "GET /health HTTP/1.1\r\nHost: x\r\n").unwrap();
    assert!(
        http(&served.addr, "GET", "/health").status == 200,
        "the probe"
    );
    served.signal_term();
    // Draining has begun once the listener is closed: new connections are
    // refused, while the one in flight is still served.
    await_refused(&served.addr);
    slow.write_all(b"\r\n").unwrap();
    let mut answer = String::new();
    slow.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let status = served
        .exit_within(Duration::from_secs(30))
        .expect("stops after draining");
    assert_eq!(status.code(), Some(0));

    // A request half-sent keeps the drain open (until its head deadline); a
    // second signal ends it at once, with status 1.
    let mut served = Served::start(&args);
    let mut half = TcpStream::connect(&served.addr).unwrap();
    write!(half, "GET /health HTTP/1.1\r\n").unwrap();
    assert!(http(&served.addr, "GET", "/health").status == 200);
    served.signal_term();
    await_refused(&served.addr);
    served.signal_term();
    let status = served
        .exit_within(Duration::from_secs(30))
        .expect("a second signal ends it at once");
    assert_eq!(status.code(), Some(1));

    // A kept-alive connection between requests is closed at the stop: it
    // does not hold the drain open.
    let mut served = Served::start(&args);
    let mut idle = TcpStream::connect(&served.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut first = [0u8; 15];
    idle.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK");
    served.signal_term();
    let status = served
        .exit_within(Duration::from_secs(30))
        .expect("stops without waiting for the idle connection");
    assert_eq!(status.code(), Some(0));
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
}

/// Waits (up to 60 s, only to catch a hang) until `addr` refuses
/// connections: `wid serve` closed its listener and is draining.
fn await_refused(addr: &str) {
    let start = Instant::now();
    while TcpStream::connect(addr).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the listener stayed open after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Golden outputs of `wid inspect`, one per verification rule: a fixed
/// Ed25519 key (material 7…7, kid `golden-ed25519`), hand-built tokens (EdDSA
/// signatures are deterministic), a fixed clock. `WID_BLESS=1` rewrites
/// tests/golden/inspect/ after a deliberate change of wording.
mod golden {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};

    const KID: &str = "golden-ed25519";
    const ISS: &str = "https://nomad.example.com";

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn claims() -> Value {
        serde_json::json!({
            "nomad_namespace": "default", "nomad_job_id": "web",
            "nomad_allocation_id": ALLOC, "nomad_task": "server",
            "sub": "global:default:web:frontend:server:vault_default",
            "aud": "vault.io", "iat": T0, "nbf": T0, "exp": T0 + 3600,
            "jti": "00000000-0000-4000-8000-000000000000", "iss": ISS,
        })
    }

    /// A token over `header` and `claims`, signed by the golden key.
    fn token(keyring: &Keyring, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = keyring.active().unwrap().sign(input.as_bytes()).unwrap();
        format!("{input}.{}", b64(&sig))
    }

    fn header() -> Value {
        serde_json::json!({"alg": "EdDSA", "kid": KID, "typ": "JWT"})
    }

    #[test]
    fn inspect_golden_outputs() {
        let s = Scratch::new();
        let ks = s.path("keystore");
        let key = RootKey::new(
            KeyId::new(KID).unwrap(),
            KeyMaterial::from_slice(&[7; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            T0 - 86_400,
        );
        let keyring = Keyring::from_keys([key]).unwrap();
        keyring.save(&ks).unwrap();
        let running = alloc_state(&s, "running");
        let complete = alloc_state(&s, "complete");

        let good = token(&keyring, &header(), &claims());
        let mut parts: Vec<&str> = good.split('.').collect();
        let long_sig = b64(&[1u8; 6200]);
        parts[2] = &long_sig;
        let too_long = parts.join(".");
        let crit = token(
            &keyring,
            &serde_json::json!({"alg": "EdDSA", "kid": KID, "typ": "JWT", "crit": ["exp"]}),
            &claims(),
        );
        let unknown_kid = token(
            &keyring,
            &serde_json::json!({"alg": "EdDSA", "kid": "no-such-key", "typ": "JWT"}),
            &claims(),
        );
        let alg_confusion = token(
            &keyring,
            &serde_json::json!({"alg": "ES256", "kid": KID, "typ": "JWT"}),
            &claims(),
        );
        let mut sig = URL_SAFE_NO_PAD
            .decode(good.rsplit('.').next().unwrap())
            .unwrap();
        sig[10] ^= 1;
        let bad_sig = format!("{}.{}", good.rsplit_once('.').unwrap().0, b64(&sig));
        let mut float_iat = claims();
        float_iat["iat"] = serde_json::json!(1.7e9);
        let float_iat = token(&keyring, &header(), &float_iat);

        let at = |t: i64| t.to_string();
        let ok_now = at(T0 + 600);
        let base = [
            "--keystore",
            ks.as_str(),
            "--aud",
            "vault.io",
            "--issuer",
            ISS,
        ];
        let live = vec!["--alloc-state", running.as_str(), "--now", ok_now.as_str()];
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            ("accepted", &good, live.clone()),
            ("length", &too_long, live.clone()),
            ("structure", &crit, live.clone()),
            ("key", &unknown_kid, live.clone()),
            ("algorithm", &alg_confusion, live.clone()),
            ("signature", &bad_sig, live.clone()),
            ("claims", &float_iat, live.clone()),
            (
                "times-expired",
                &good,
                vec!["--alloc-state", &running, "--now", "1700007200"],
            ),
            (
                "times-not-yet-valid",
                &good,
                vec!["--alloc-state", &running, "--now", "1699996400"],
            ),
            (
                "audience",
                &good,
                vec![
                    "--alloc-state",
                    &running,
                    "--now",
                    &ok_now,
                    "--aud",
                    "consul.io",
                ],
            ),
            (
                "issuer",
                &good,
                vec![
                    "--alloc-state",
                    &running,
                    "--now",
                    &ok_now,
                    "--issuer",
                    "https://other.example",
                ],
            ),
            (
                "allocation-terminal",
                &good,
                vec!["--alloc-state", &complete, "--now", &ok_now],
            ),
            ("allocation-not-found", &good, vec!["--now", &ok_now]),
            (
                "assume-live",
                &good,
                vec!["--assume-live", "--now", &ok_now],
            ),
        ];
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/inspect");
        let bless = std::env::var_os("WID_BLESS").is_some();
        let scratch = s.dir.path().display().to_string();
        let mut failed = Vec::new();
        for (name, token, extra) in cases {
            let mut args = vec!["inspect", token];
            // A later flag of the same name replaces the base one (clap refuses
            // repeats), so the base skips what the case sets.
            let mut i = 0;
            while i < base.len() {
                if !extra.contains(&base[i]) {
                    args.extend_from_slice(&base[i..i + 2]);
                }
                i += 2;
            }
            args.extend(extra.iter().copied());
            let o = wid(&args);
            let text = format!(
                "$ wid inspect <{name} token> {}\n{}--- stderr\n{}--- exit {}\n",
                args[2..].join(" "),
                stdout(&o),
                stderr(&o),
                o.status.code().unwrap_or(-1)
            )
            .replace(&scratch, "$DIR");
            let file = dir.join(format!("{name}.txt"));
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&file, &text).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&file).unwrap_or_default();
            if want != text {
                failed.push(format!(
                    "{name}: got\n{text}\nwant ({})\n{want}",
                    file.display()
                ));
            }
        }
        assert!(
            failed.is_empty(),
            "golden outputs differ (WID_BLESS=1 rewrites them after a deliberate change):\n{}",
            failed.join("\n")
        );
    }
}

/// Key custody from the command line: a KEK made, a keystore created
/// wrapped, used by every command with --kek-file and refused without it;
/// a plaintext keystore wrapped, rewrapped to another KEK and unwrapped.
#[test]
fn wrapped_keystores_from_init_to_verify() {
    let s = Scratch::new();
    let kek = s.path("kek");
    let ks = s.path("keystore");
    let now = T0.to_string();
    let made = json_out(&["keyring", "generate-kek", "--kek-file", &kek, "--json"]);
    let kek_id = made["kek_id"].as_str().unwrap().to_string();
    assert_eq!(kek_id.len(), 16);
    let o = expect(&["keyring", "generate-kek", "--kek-file", &kek], 3);
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));

    let init = json_out(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--alg",
        "EdDSA",
        "--alg",
        "ES256",
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(init["saved"], true);
    let bytes = std::fs::read(&ks).unwrap();
    assert!(
        bytes.windows(9).any(|w| w == b"\xa7Version\x03"),
        "init --kek-file writes version 3"
    );

    // Without the KEK the keys are listed (IDs, states and times are not
    // secret) but never used: jwks is refused with the KEK's ID and a hint
    // (exit 3).
    let listed = json_out(&["keyring", "list", "--keystore", &ks, "--json"]);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2, "{listed}");
    let o = expect(&["keyring", "jwks", "--keystore", &ks], 3);
    let err = stderr(&o);
    assert!(err.contains("WID_RESULT_KEY_CUSTODY_FAILED"), "{err}");
    assert!(err.contains(&kek_id) && err.contains("--kek-file"), "{err}");

    // With it: rotate (stays wrapped), issue, verify.
    json_out(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--now",
        &now,
        "--json",
    ]);
    let bytes = std::fs::read(&ks).unwrap();
    assert!(
        bytes.windows(9).any(|w| w == b"\xa7Version\x03"),
        "still wrapped"
    );
    let req = s.write("req.json", request_json("3600000000000").as_bytes());
    let issued = json_out(&[
        "issue",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--request",
        &req,
        "--now",
        &now,
        "--json",
    ]);
    let token = issued["token"].as_str().unwrap().to_string();
    let allocs = alloc_state(&s, "running");
    let v = json_out(&[
        "verify",
        &token,
        "--aud",
        "vault.io",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--alloc-state",
        &allocs,
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(v["accepted"], true);

    // Another KEK: refused, naming both.
    let other = s.path("kek2");
    let made2 = json_out(&["keyring", "generate-kek", "--kek-file", &other, "--json"]);
    let other_id = made2["kek_id"].as_str().unwrap().to_string();
    let o = expect(
        &["keyring", "jwks", "--keystore", &ks, "--kek-file", &other],
        3,
    );
    let err = stderr(&o);
    assert!(err.contains(&kek_id) && err.contains(&other_id), "{err}");

    // Rewrap to the other KEK, unwrap to plaintext, wrap again.
    let r = json_out(&[
        "keyring",
        "rewrap",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--new-kek-file",
        &other,
        "--json",
    ]);
    assert_eq!(r["kek_id"], other_id.as_str());
    assert_eq!(r["keys"], 3);
    expect(
        &["keyring", "list", "--keystore", &ks, "--kek-file", &kek],
        3,
    );
    expect(
        &["keyring", "list", "--keystore", &ks, "--kek-file", &other],
        0,
    );
    let u = json_out(&[
        "keyring",
        "unwrap",
        "--keystore",
        &ks,
        "--kek-file",
        &other,
        "--json",
    ]);
    assert_eq!(u["action"], "unwrapped");
    expect(&["keyring", "list", "--keystore", &ks], 0);
    // A KEK given for a plaintext keystore is refused: wrap it first.
    let o = expect(
        &["keyring", "list", "--keystore", &ks, "--kek-file", &kek],
        3,
    );
    assert!(stderr(&o).contains("plaintext"), "{}", stderr(&o));
    let o = expect(
        &["keyring", "rewrap", "--keystore", &ks, "--kek-file", &kek],
        3,
    );
    assert!(stderr(&o).contains("wid keyring wrap"), "{}", stderr(&o));
    json_out(&[
        "keyring",
        "wrap",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--json",
    ]);
    let listed = json_out(&[
        "keyring",
        "list",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
        "--json",
    ]);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 3);
    // wrap needs a KEK.
    let o = expect(&["keyring", "wrap", "--keystore", &ks], 2);
    assert!(stderr(&o).contains("--kek-file"), "{}", stderr(&o));
    // A Transit server without a Transit key names no KEK: refused, never a
    // plaintext keystore.
    let fresh = s.path("never-plaintext");
    let o = expect(
        &[
            "keyring",
            "init",
            "--keystore",
            &fresh,
            "--transit-addr",
            "https://127.0.0.1:1",
        ],
        2,
    );
    assert!(stderr(&o).contains("no KEK"), "{}", stderr(&o));
    assert!(!std::path::Path::new(&fresh).exists(), "nothing written");
}

/// Token profiles from the command line: a SPIFFE JWT-SVID with extra claims,
/// the SPIFFE bundle, and the refusals (an EdDSA JWT-SVID, a reserved extra
/// claim name, a missing template field) as exit codes and messages.
#[test]
fn profiles_from_the_command_line() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    let now = T0.to_string();
    expect(&["keyring", "init", "--keystore", &ks, "--now", &now], 0);
    expect(
        &[
            "keyring",
            "rotate",
            "--keystore",
            &ks,
            "--alg",
            "ES256",
            "--now",
            &now,
        ],
        0,
    );
    let req = s.write(
        "req.json",
        format!(
            r#"{{"Region":"global",
                "Allocation":{{"ID":"{ALLOC}","Namespace":"default","JobID":"web",
                              "TaskGroup":"frontend","Job":{{"ID":"web","Meta":{{"Owner":"team-a"}}}}}},
                "node":{{"datacenter":"dc1"}},
                "Task":"server",
                "Identity":{{"Name":"default","Audience":["spiffe-validator"],"TTL":"5m","ExtraClaims":["dc"]}}}}"#
        )
        .as_bytes(),
    );
    let policy = s.write(
        "policy.json",
        br#"{"namespaces":{"default":{
            "required_extra_claims":{"owner":"${job.meta.Owner}"},
            "optional_extra_claims":{"dc":"dc:${node.datacenter}"}}}}"#,
    );
    let issued = json_out(&[
        "issue",
        "--keystore",
        &ks,
        "--request",
        &req,
        "--alg",
        "ES256",
        "--spiffe-trust-domain",
        "prod.example.org",
        "--extra-claims-policy",
        &policy,
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(
        issued["claims"]["sub"],
        "spiffe://prod.example.org/global/default/web/frontend/server/default"
    );
    // Meta keys keep their case (they are the job's, not field names).
    assert_eq!(
        issued["claims"]["extra_claims"],
        json!({"dc": "dc:dc1", "owner": "team-a"})
    );
    // A custom path.
    let custom = json_out(&[
        "issue",
        "--keystore",
        &ks,
        "--request",
        &req,
        "--alg",
        "ES256",
        "--spiffe-trust-domain",
        "prod.example.org",
        "--spiffe-path",
        "/ns/${job.namespace}/sa/${identity.name}",
        "--extra-claims-policy",
        &policy,
        "--now",
        &now,
        "--json",
    ]);
    assert_eq!(
        custom["claims"]["sub"],
        "spiffe://prod.example.org/ns/default/sa/default"
    );
    // EdDSA cannot be a JWT-SVID.
    let o = expect(
        &[
            "issue",
            "--keystore",
            &ks,
            "--request",
            &req,
            "--spiffe-trust-domain",
            "prod.example.org",
            "--extra-claims-policy",
            &policy,
            "--now",
            &now,
        ],
        2,
    );
    assert!(stderr(&o).contains("ES256 or RS256"), "{}", stderr(&o));
    // A reserved name in the policy, and a bad trust domain.
    let bad = s.write(
        "bad.json",
        br#"{"namespaces":{"default":{"required_extra_claims":{"sub":"x"}}}}"#,
    );
    let o = expect(
        &[
            "issue",
            "--keystore",
            &ks,
            "--request",
            &req,
            "--extra-claims-policy",
            &bad,
        ],
        2,
    );
    assert!(stderr(&o).contains("is reserved"), "{}", stderr(&o));
    let o = expect(
        &[
            "issue",
            "--keystore",
            &ks,
            "--request",
            &req,
            "--alg",
            "ES256",
            "--spiffe-trust-domain",
            "Prod.Example.org",
        ],
        2,
    );
    assert!(stderr(&o).contains("lower-case"), "{}", stderr(&o));
    // The optional claim needs the node: named in the message.
    let no_node = s.write(
        "no-node.json",
        std::fs::read_to_string(&req)
            .unwrap()
            .replace(r#""node":{"datacenter":"dc1"},"#, "")
            .as_bytes(),
    );
    let o = expect(
        &[
            "issue",
            "--keystore",
            &ks,
            "--request",
            &no_node,
            "--extra-claims-policy",
            &policy,
        ],
        2,
    );
    assert!(stderr(&o).contains("Node.Datacenter"), "{}", stderr(&o));
    // The SPIFFE bundle: the ES256 key only, use jwt-svid, the refresh hint.
    let bundle = json_out(&[
        "keyring",
        "jwks",
        "--keystore",
        &ks,
        "--format",
        "spiffe",
        "--refresh-hint",
        "1m",
    ]);
    assert_eq!(bundle["spiffe_refresh_hint"], 60);
    let keys = bundle["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{bundle}");
    assert_eq!(keys[0]["use"], "jwt-svid");
    assert_eq!(keys[0]["alg"], "ES256");
    let o = expect(
        &["keyring", "jwks", "--keystore", &ks, "--refresh-hint", "1m"],
        2,
    );
    assert!(stderr(&o).contains("--format spiffe"), "{}", stderr(&o));
}

/// Key purposes (issue 40) through `wid`: a WIT key made with `--purpose
/// wit` signs the WITs `wid issue` makes from a request with a ProofKey; it
/// is listed with its purpose, printed only by `jwks --purpose wit` (never
/// by the default JWKS, its PEM form or the discovery document), in the
/// SPIFFE bundle as a `wit-svid` entry, served at `/wit/jwks.json` only; and
/// `wid verify` with the served JWKS cannot accept the WIT.
#[test]
fn wit_keys_are_made_listed_and_published_apart() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks, "--alg", "ES256"], 0);
    let key = workload_identity::WorkloadKey::generate(workload_identity::Algorithm::Es256)
        .expect("a workload key");
    let pk = key.proof_key();
    let mut req: Value = serde_json::from_str(&request_json(r#""1h""#)).unwrap();
    req["ProofKey"] =
        serde_json::json!({"Alg": pk.alg, "Crv": pk.crv, "Kty": pk.kty, "X": pk.x, "Y": pk.y});
    let req = s.write("wit.json", req.to_string().as_bytes());
    let issue = [
        "issue",
        "--keystore",
        &ks,
        "--request",
        &req,
        "--alg",
        "ES256",
        "--issuer",
        "http://127.0.0.1",
        "--spiffe-trust-domain",
        "example.org",
    ];
    // No WIT key yet: refused, naming the fix.
    let o = wid(&issue);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("--purpose wit"),
        "the refusal names the fix: {}",
        stderr(&o)
    );
    // An unknown purpose is a usage error.
    expect(
        &["keyring", "rotate", "--keystore", &ks, "--purpose", "both"],
        2,
    );
    let rotated = json_out(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--alg",
        "ES256",
        "--purpose",
        "wit",
        "--json",
    ]);
    let change = &rotated["changes"][0];
    assert_eq!(change["purpose"], "wit", "{rotated}");
    let wit_kid = change["kid"].as_str().unwrap().to_string();
    let wit = stdout(&expect(&issue, 0)).trim().to_string();
    let header: Value = {
        use base64::Engine;
        let h = wit.split('.').next().unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(h)
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(header["kid"], wit_kid.as_str());
    assert_eq!(header["typ"], "wit+jwt");

    let list = json_out(&["keyring", "list", "--keystore", &ks, "--json"]);
    let mut purposes: Vec<(&str, &str)> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["purpose"].as_str().unwrap(), k["state"].as_str().unwrap()))
        .collect();
    // Made in the same second: listed by key ID, a random UUID.
    purposes.sort();
    assert_eq!(
        purposes,
        [("bearer", "active"), ("wit", "active")],
        "{list}"
    );
    let only_wit = json_out(&[
        "keyring",
        "list",
        "--keystore",
        &ks,
        "--purpose",
        "wit",
        "--json",
    ]);
    assert_eq!(only_wit["keys"].as_array().unwrap().len(), 1, "{only_wit}");

    let kids = |v: &Value| -> Vec<String> {
        v["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect()
    };
    let jwks = json_out(&["keyring", "jwks", "--keystore", &ks, "--json"]);
    assert!(!kids(&jwks).contains(&wit_kid), "{jwks}");
    let pem = stdout(&expect(
        &["keyring", "jwks", "--keystore", &ks, "--format", "pem"],
        0,
    ));
    assert!(!pem.contains(&wit_kid), "{pem}");
    let wit_set = json_out(&[
        "keyring",
        "jwks",
        "--keystore",
        &ks,
        "--purpose",
        "wit",
        "--json",
    ]);
    assert_eq!(kids(&wit_set), std::slice::from_ref(&wit_kid));
    let bearer_bundle = json_out(&[
        "keyring",
        "jwks",
        "--keystore",
        &ks,
        "--format",
        "spiffe",
        "--json",
    ]);
    assert!(
        !kids(&bearer_bundle).contains(&wit_kid),
        "the JWT-SVID bundle holds a WIT key: {bearer_bundle}"
    );
    let bundle = json_out(&[
        "keyring",
        "jwks",
        "--keystore",
        &ks,
        "--format",
        "spiffe",
        "--purpose",
        "wit",
        "--json",
    ]);
    let uses: Vec<(String, String)> = bundle["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kid"].as_str().unwrap().to_string(),
                k["use"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        uses,
        [(wit_kid.clone(), "wit-svid".to_string())],
        "{bundle}"
    );

    let served = Served::start(&[
        "--keystore",
        &ks,
        "--listen",
        "127.0.0.1:0",
        "--issuer",
        "http://127.0.0.1",
    ]);
    let served_jwks = served.get("/.well-known/jwks.json");
    assert!(!served_jwks.kids().contains(&wit_kid));
    let served_wit = served.get("/wit/jwks.json");
    assert_eq!(served_wit.status, 200);
    assert_eq!(served_wit.kids(), std::slice::from_ref(&wit_kid));
    assert!(served_wit.header("ETag").is_some());
    let discovery = served.get("/.well-known/openid-configuration").json();
    assert!(!discovery.to_string().contains("wit"), "{discovery}");
    // wid verify refuses a WIT by its typ before any key is looked up (a
    // relying party that ignores typ finds no key for it: the served JWKS
    // holds none, asserted above; OpenBao, PyJWT and go-jose are tried in
    // their own tests).
    let o = wid(&[
        "verify",
        &wit,
        "--aud",
        "vault.io",
        "--jwks",
        &served.jwks_url(),
        "--assume-live",
        "--json",
    ]);
    assert_ne!(o.status.code(), Some(0), "wid verify accepted a WIT");
    assert_eq!(
        json_err(&o)["code"],
        "WID_RESULT_PROOF_REQUIRED",
        "{}",
        stderr(&o)
    );
}

/// An operator's typos in `wid issue --issuer` are refused as `wid serve`
/// refuses them (issue 41): a token whose iss no relying party can match is
/// never signed. No issuer at all is allowed, with a warning.
#[test]
fn issue_checks_the_issuer_as_serve_does() {
    let s = Scratch::new();
    let ks = s.path("keystore");
    expect(&["keyring", "init", "--keystore", &ks], 0);
    let req = s.write("req.json", request_json(r#""1h""#).as_bytes());
    let issue = |issuer: Option<&str>| {
        let mut a = vec!["issue", "--keystore", &ks, "--request", &req];
        if let Some(i) = issuer {
            a.extend(["--issuer", i]);
        }
        wid(&a)
    };
    for (bad, why) in [
        ("htps://nomad.example.com", "must start with https://"),
        ("nomad.example.com", "must start with https://"),
        ("http://nomad.example.com", "http only to localhost"),
        ("https://nomad.example.com?x=1", "must not have a query"),
    ] {
        let o = issue(Some(bad));
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{bad}: signed anyway");
        assert!(stderr(&o).contains("--issuer"), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{bad}: {}", stderr(&o));
    }
    for good in [
        "https://nomad.example.com",
        "https://nomad.example.com/tenant-a",
        "http://127.0.0.1:4646",
    ] {
        let o = issue(Some(good));
        assert_eq!(o.status.code(), Some(0), "{good}: {}", stderr(&o));
        assert!(!stderr(&o).contains("no --issuer"), "{}", stderr(&o));
    }
    let o = issue(None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("no --issuer"), "{}", stderr(&o));
    // A trailing slash is another issuer to a relying party: signed, with a
    // warning.
    let o = issue(Some("https://nomad.example.com/"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("ends with a slash"), "{}", stderr(&o));
}

/// docs/wid.md's walk-through, run by bash as printed: keys wrapped from the
/// start (generate-kek, --kek-file on every command), the request file as
/// the page shows it, `wid issue`, `wid serve` and `wid inspect`. Only the
/// directories (`/var/lib/wid`, `/run/secrets`) and the port are replaced,
/// `wid` is the binary under test, and the server it starts is asked for
/// its JWKS before the script ends (its trap then stops it).
#[test]
fn the_walkthrough_of_docs_wid_md_runs_as_printed() {
    const MARKER: &str = "<!-- run by wid/tests/cli.rs: walkthrough -->";
    let page = include_str!("../../docs/wid.md");
    let after = page
        .split_once(MARKER)
        .unwrap_or_else(|| panic!("docs/wid.md has no {MARKER}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .expect("a ```sh block after the marker");
    let block = &block[..block.find("\n```").expect("the block ends")];

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(WID, bin.join("wid")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let walkthrough = block
        .replace("/var/lib/wid", &format!("{d}/var-lib-wid"))
        .replace("/run/secrets", &format!("{d}/secrets"))
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let script = format!(
        "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n\
         {walkthrough}\n\
         # The test's own lines: the server's JWKS, once it listens.\n\
         for _ in $(seq 1 300); do\n\
         \x20   curl -sf http://127.0.0.1:{port}/.well-known/jwks.json > served-jwks.json && break\n\
         \x20   sleep 0.1\n\
         done\n\
         printf '%s' \"$TOKEN\" > token\n"
    );
    std::fs::write(dir.path().join("walkthrough.sh"), script).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-eu", "walkthrough.sh"])
        .current_dir(dir.path())
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (said, errors) = (stdout(&out), stderr(&out));
    assert!(
        out.status.success(),
        "docs/wid.md's walk-through failed:\n{said}\n{errors}"
    );
    assert!(said.contains("verdict: accepted"), "{said}");

    // The keystore holds no plaintext key: it loads only with the KEK.
    let keystore = dir.path().join("var-lib-wid/keystore");
    assert!(workload_identity::Keyring::load(&keystore).is_err());
    let list = wid(&[
        "keyring",
        "list",
        "--keystore",
        keystore.to_str().unwrap(),
        "--kek-file",
        &format!("{d}/secrets/wid-kek"),
        "--json",
    ]);
    assert!(list.status.success(), "{}", stderr(&list));

    // The server served both keys, the token's among them.
    let served: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("served-jwks.json")).unwrap())
            .unwrap();
    let kids: Vec<&str> = served["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids.len(), 2, "{served}");
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    let header: Value = {
        use base64::Engine;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap();
        serde_json::from_slice(&raw).unwrap()
    };
    assert!(kids.contains(&header["kid"].as_str().unwrap()), "{header}");
}

/// The ```sh block that follows `marker` in `page` (the text of `name`).
fn doc_block(page: &str, name: &str, marker: &str) -> String {
    let after = page
        .split_once(marker)
        .unwrap_or_else(|| panic!("{name} has no {marker}"))
        .1;
    let block = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{name}: a ```sh block after {marker}"));
    block[..block.find("\n```").expect("the block ends")].to_string() + "\n"
}

/// docs/relying-parties.md's "Publishing the keys": the export block run by
/// bash as printed (only the keystore's and the KEK's directories replaced,
/// `wid` the binary under test), then what the cloud block (which CI cannot
/// run: no AWS or GCP account) takes from it, checked word by word: the
/// directory it uploads holds only JSON (its `--content-type`), the bucket
/// is the issuer's host, so each object is served at the URL the discovery
/// document names, and the file given to GCP is that JWKS.
#[test]
fn publishing_the_keys_as_docs_relying_parties_md_prints_it() {
    const PAGE: &str = include_str!("../../docs/relying-parties.md");
    const NAME: &str = "docs/relying-parties.md";
    let export = doc_block(PAGE, NAME, "<!-- run by wid/tests/cli.rs: publish -->");
    let cloud = doc_block(
        PAGE,
        NAME,
        "<!-- checked by wid/tests/cli.rs: publish-cloud -->",
    );

    let s = Scratch::new();
    let d = s.dir.path().display().to_string();
    std::fs::create_dir_all(s.dir.path().join("var-lib-wid")).unwrap();
    std::fs::create_dir_all(s.dir.path().join("secrets")).unwrap();
    let keystore = format!("{d}/var-lib-wid/keystore");
    let kek = format!("{d}/secrets/wid-kek");
    expect(&["keyring", "generate-kek", "--kek-file", &kek], 0);
    expect(
        &[
            "keyring",
            "init",
            "--keystore",
            &keystore,
            "--kek-file",
            &kek,
            "--alg",
            "EdDSA",
            "--alg",
            "ES256",
        ],
        0,
    );
    let bin = s.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(WID, bin.join("wid")).unwrap();
    let script = export
        .replace("/var/lib/wid", &format!("{d}/var-lib-wid"))
        .replace("/run/secrets", &format!("{d}/secrets"));
    let out = Command::new("bash")
        .args(["-eu", "-c", &script])
        .current_dir(s.dir.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = stdout(&out);
    assert!(
        out.status.success(),
        "{NAME}'s export block failed:\n{script}\n{printed}\n{}",
        stderr(&out)
    );

    // The export: the JWKS and discovery document of the issuer the block
    // sets, exactly as `wid keyring jwks` and `wid keyring oidc` make them.
    let issuer = export
        .lines()
        .find_map(|l| l.strip_prefix("ISSUER="))
        .expect("the block sets ISSUER")
        .to_string();
    let site = s.dir.path().join("site");
    let read = |rel: &str| -> Value {
        let text =
            std::fs::read_to_string(site.join(rel)).unwrap_or_else(|e| panic!("site/{rel}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("site/{rel} is not JSON ({e})"))
    };
    let jwks = read(".well-known/jwks.json");
    let discovery = read(".well-known/openid-configuration");
    let ks = ["--keystore", keystore.as_str(), "--kek-file", kek.as_str()];
    assert_eq!(
        jwks,
        json_out(&[&["keyring", "jwks"][..], &ks[..]].concat())
    );
    assert_eq!(
        discovery,
        json_out(
            &[
                &["keyring", "oidc"][..],
                &ks[..],
                &["--issuer", issuer.as_str()][..]
            ]
            .concat()
        )
    );
    assert_eq!(discovery["issuer"], issuer.as_str(), "{discovery}");
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids.len(), 2, "{jwks}");
    // The PEM keys: one per key of the JWKS, each after its `kid:` line
    // (`kid: ID (ALG)`).
    let pem_kids: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("kid: ")?.split(' ').next())
        .collect();
    assert_eq!(pem_kids, kids, "{printed}");
    assert_eq!(
        printed.matches("-----BEGIN PUBLIC KEY-----").count(),
        2,
        "{printed}"
    );

    // The cloud block's words (continuation lines joined, comments left out).
    let words: Vec<String> = cloud
        .replace("\\\n", " ")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    let after = |flag: &str| -> &str {
        let at = words
            .iter()
            .position(|w| w == flag)
            .unwrap_or_else(|| panic!("the cloud block has no {flag}"));
        &words[at + 1]
    };
    // It uses the issuer the export block set, never a literal of its own.
    for flag in ["--url", "--issuer-uri"] {
        let given = words
            .iter()
            .enumerate()
            .find_map(|(i, w)| {
                if w == flag {
                    words.get(i + 1).map(String::as_str)
                } else {
                    w.strip_prefix(&format!("{flag}="))
                }
            })
            .unwrap_or_else(|| panic!("the cloud block has no {flag}"));
        assert_eq!(given, "\"$ISSUER\"", "{flag}");
    }
    // The upload: every file of the directory is of the content type given.
    assert_eq!(after("--content-type"), "application/json");
    let at = words.iter().position(|w| w == "--recursive").unwrap();
    let (from, to) = (&words[at + 3], &words[at + 4]);
    assert_eq!(
        (words[at + 1].as_str(), from.as_str()),
        ("--content-type", "site/")
    );
    let mut files = Vec::new();
    let mut dirs = vec![s.dir.path().join(from)];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p.strip_prefix(&site).unwrap().display().to_string());
            }
        }
    }
    files.sort();
    assert_eq!(
        files,
        [".well-known/jwks.json", ".well-known/openid-configuration"]
    );
    for f in &files {
        read(f);
    }
    // The bucket is the issuer's host (virtual-hosted S3): each object is
    // served at the issuer's URL plus its key, so where the discovery
    // document says the JWKS is, and where AWS looks for the document.
    let bucket = to
        .strip_prefix("s3://")
        .and_then(|b| b.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{to}"));
    let host = issuer.strip_prefix("https://").unwrap();
    assert!(
        host.starts_with(&format!("{bucket}.s3.")) && host.ends_with(".amazonaws.com"),
        "{bucket} is not the bucket of {issuer}"
    );
    assert_eq!(
        discovery["jwks_uri"],
        format!("{issuer}/.well-known/jwks.json").as_str(),
        "{discovery}"
    );
    // GCP gets that JWKS, uploaded.
    let given = words
        .iter()
        .find_map(|w| w.strip_prefix("--jwk-json-path="))
        .expect("--jwk-json-path");
    assert_eq!(
        read(given.strip_prefix("site/").expect("a file under site/")),
        jwks
    );
}
