//! `wid` with the Transit flags against a real OpenBao (`bao server -dev`
//! over TLS): init wraps from the start, every command needs the flags,
//! rewrap moves the keys to a KEK file and back, unwrap. (The library's
//! Transit custody is tested in tests/transit.rs at the repository root; the
//! server harness is shared.)

#[path = "../../tests/bao_support/mod.rs"]
mod bao_support;

use std::process::Command;

use bao_support::Bao;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn wid_with_transit_against_a_real_openbao() {
    let bao = Bao::start();
    let dir = tempfile::tempdir().unwrap();
    command_line(&bao, dir.path());
    let dir = tempfile::tempdir().unwrap();
    k8s_signer(&bao, dir.path());
}

/// `wid k8s-signer` on a keystore wrapped by Transit: it unwraps its
/// kubernetes key through OpenBao at start (listening only once it holds
/// it), and refuses to start without the Transit token.
fn k8s_signer(bao: &Bao, dir: &std::path::Path) {
    use std::io::BufRead;
    bao.cmd(&["write", "-f", "transit/keys/wid-k8s", "type=aes256-gcm96"]);
    let ks = dir.join("k8s-keystore").display().to_string();
    let sock = dir.join("k8s.sock").display().to_string();
    let ca = bao.ca_path().display().to_string();
    let token_file = bao.token_file(dir, &bao.root_token).display().to_string();
    let transit = [
        "--transit-addr",
        bao.addr.as_str(),
        "--transit-key",
        "wid-k8s",
        "--transit-ca-bundle",
        ca.as_str(),
    ];
    let wid = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_wid"));
        c.env_remove("VAULT_TOKEN").env_remove("BAO_TOKEN");
        c
    };
    let out = wid()
        .args([
            "keyring",
            "init",
            "--keystore",
            &ks,
            "--purpose",
            "kubernetes",
        ])
        .args(["--alg", "ES256", "--longest-ttl", "1h"])
        .args(transit)
        .args(["--transit-token-file", &token_file])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let signer = [
        "k8s-signer",
        "--keystore",
        &ks,
        "--issuer",
        "https://cluster.example",
    ];
    let out = wid()
        .args(signer)
        .args(["--socket", &sock])
        .args(transit)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("VAULT_TOKEN or BAO_TOKEN"), "{err}");
    assert!(!std::path::Path::new(&sock).exists());
    let mut child = wid()
        .args(signer)
        .args(["--socket", &sock])
        .args(transit)
        .args(["--transit-token-file", &token_file])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), format!("listening on unix:{sock}"));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `wid` with the Transit flags: init wraps from the start, every command
/// needs the flags, rewrap moves the keys to a KEK file and back, unwrap.
fn command_line(bao: &Bao, dir: &std::path::Path) {
    bao.cmd(&["write", "-f", "transit/keys/wid-cli", "type=aes256-gcm96"]);
    let ks = dir.join("cli-keystore").display().to_string();
    let kek = dir.join("cli-kek").display().to_string();
    let ca = bao.ca_path().display().to_string();
    let token_file = bao.token_file(dir, &bao.root_token).display().to_string();
    let wid = |args: &[&str], env_token: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_wid"));
        c.args(args)
            .env_remove("VAULT_TOKEN")
            .env_remove("BAO_TOKEN");
        if let Some(t) = env_token {
            c.env("BAO_TOKEN", t);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let transit: Vec<&str> = vec![
        "--transit-addr",
        &bao.addr,
        "--transit-key",
        "wid-cli",
        "--transit-ca-bundle",
        &ca,
    ];
    let with_file = |head: &[&str]| -> Vec<String> {
        head.iter()
            .chain(transit.iter())
            .chain(["--transit-token-file", token_file.as_str()].iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        wid(&args, None)
    };
    let (code, out) = run(with_file(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--alg",
        "ES256",
    ]));
    assert_eq!(code, Some(0), "{out}");
    assert!(contains(&std::fs::read(&ks).unwrap(), b"vault:v1:"));
    // Without the flags (listing needs none; the keys do): exit 3, naming
    // the Transit key.
    let (code, out) = wid(&["keyring", "jwks", "--keystore", &ks], None);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("transit/wid-cli") && out.contains("--transit-addr"),
        "{out}"
    );
    // With them, the token from the environment.
    let mut args = vec!["keyring", "list", "--keystore", &ks];
    args.extend(&transit);
    let (code, out) = wid(&args, Some(&bao.root_token));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ES256"), "{out}");
    // No token anywhere: a clear error, exit 2.
    let (code, out) = wid(&args, None);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("VAULT_TOKEN or BAO_TOKEN"), "{out}");
    // To a KEK file and back to Transit, then plaintext.
    assert_eq!(
        wid(&["keyring", "generate-kek", "--kek-file", &kek], None).0,
        Some(0)
    );
    let (code, out) = run(with_file(&[
        "keyring",
        "rewrap",
        "--keystore",
        &ks,
        "--new-kek-file",
        &kek,
    ]));
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        wid(
            &["keyring", "list", "--keystore", &ks, "--kek-file", &kek],
            None
        )
        .0,
        Some(0)
    );
    let mut args: Vec<String> = ["keyring", "rewrap", "--keystore", &ks, "--kek-file", &kek]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(
        [
            "--transit-addr",
            &bao.addr,
            "--transit-ca-bundle",
            &ca,
            "--new-transit-key",
            "wid-cli",
            "--transit-token-file",
            &token_file,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let (code, out) = run(args);
    assert_eq!(
        code,
        Some(0),
        "KEK file to Transit without plaintext on disk: {out}"
    );
    let (code, out) = run(with_file(&[
        "keyring",
        "rewrap",
        "--keystore",
        &ks,
        "--new-kek-file",
        &kek,
    ]));
    assert_eq!(code, Some(0), "and back: {out}");
    // --kek-file and --transit-key name two KEKs for one keystore: refused.
    let (code, out) = run(with_file(&[
        "keyring",
        "list",
        "--keystore",
        &ks,
        "--kek-file",
        &kek,
    ]));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("two KEKs"), "{out}");
    let (code, out) = run(with_file(&["keyring", "unwrap", "--keystore", &ks]));
    assert_eq!(code, Some(3), "the keystore is on the KEK file now: {out}");
    let (code, out) = wid(
        &["keyring", "unwrap", "--keystore", &ks, "--kek-file", &kek],
        None,
    );
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = run(with_file(&["keyring", "wrap", "--keystore", &ks]));
    assert_eq!(code, Some(0), "{out}");
    assert!(contains(&std::fs::read(&ks).unwrap(), b"vault:v1:"));
}
