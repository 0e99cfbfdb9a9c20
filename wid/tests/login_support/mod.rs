//! What the Vault and Consul login tests share: an allocation's request,
//! a signer over the keystore as it is on disk, a client that keeps its
//! state directory across "restarts" and records every token its login
//! hands out, and docs/etcd.md's certificates for a `wid serve` over https.
//! Each test file keeps only its server's setup.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use workload_identity::manager::{
    EventKind, FileIdentityDb, IdentityManager, IdentitySigner, TokenExchange,
};
use workload_identity::model::{Allocation, GoDuration, IssueRequest, WorkloadIdentity};
use workload_identity::{
    ConsulLoginBuilder, Error, Issuer, Keyring, SignedIdentity, VaultLoginBuilder,
};

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// `wid serve` of `keystore` on a free loopback port, plain http (the
/// servers under test fetch its keys over loopback): its issuer URL, which
/// names the port, and the server.
pub fn serve(keystore: &str) -> (String, crate::serve_support::Served) {
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let served = crate::serve_support::Served::start(&[
        "--keystore",
        keystore,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--issuer",
        &issuer,
    ]);
    (issuer, served)
}

/// docs/etcd.md's openssl recipe, run as printed in `dir`: a CA (`ca.pem`)
/// and leaf certificates for 127.0.0.1 and localhost (`member1.pem`,
/// `member1.key`), for a `wid serve` over https with a private CA.
pub fn recipe_certificates(dir: &Path) {
    let page = include_str!("../../../docs/etcd.md");
    let marker = "<!-- run by tests/tls_refusals.rs: openssl recipe -->";
    let after = page.split_once(marker).expect("docs/etcd.md's recipe").1;
    let block = after.trim_start().strip_prefix("```sh\n").unwrap();
    let script = &block[..block.find("\n```").unwrap()];
    std::fs::write(dir.join("recipe.sh"), script).unwrap();
    let out = Command::new("bash")
        .args(["-eu", "recipe.sh"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/etcd.md's openssl recipe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Allocation `alloc` of job `job` in `namespace`: task `server`'s identity
/// `identity` for audience `aud`, living `ttl_secs`.
pub fn request(
    alloc: &str,
    identity: &str,
    job: &str,
    namespace: &str,
    aud: &str,
    ttl_secs: i64,
) -> IssueRequest {
    IssueRequest {
        region: "global".into(),
        allocation: Allocation {
            id: alloc.into(),
            namespace: namespace.into(),
            job_id: job.into(),
            task_group: "frontend".into(),
            client_status: "running".into(),
            ..Allocation::default()
        },
        task: "server".into(),
        identity: WorkloadIdentity {
            name: identity.into(),
            audience: vec![aud.into()],
            ttl: GoDuration::from_secs(ttl_secs),
            ..WorkloadIdentity::default()
        },
        ..IssueRequest::default()
    }
}

/// Signs with the keystore as it is on disk now (as `wid issue` does), so a
/// rotation made with `wid keyring rotate` takes effect.
pub struct KeystoreSigner {
    pub keystore: String,
    pub issuer: String,
}

impl IdentitySigner for KeystoreSigner {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>, Error> {
        let issuer = Issuer::new(Keyring::load(&self.keystore)?).issuer(&self.issuer);
        requests.iter().map(|r| issuer.issue(r, now)).collect()
    }
}

/// Every token a login handed to the workload.
pub type Delivered = Arc<Mutex<Vec<(String, EventKind)>>>;

/// A login builder of the library, built so that its tokens land in a
/// [`Delivered`].
pub trait RecordedLogin {
    /// The login, recording into `sink`.
    fn recorded(self, sink: Delivered) -> Arc<dyn TokenExchange>;
}

impl RecordedLogin for VaultLoginBuilder {
    fn recorded(self, sink: Delivered) -> Arc<dyn TokenExchange> {
        Arc::new(
            self.on_token(move |t, kind| sink.lock().unwrap().push((t.to_string(), kind)))
                .build()
                .unwrap(),
        )
    }
}

impl RecordedLogin for ConsulLoginBuilder {
    fn recorded(self, sink: Delivered) -> Arc<dyn TokenExchange> {
        Arc::new(
            self.on_token(move |t, kind| sink.lock().unwrap().push((t.to_string(), kind)))
                .build()
                .unwrap(),
        )
    }
}

/// A client host: its state directory survives every manager it builds.
pub struct Client {
    pub db: Arc<FileIdentityDb>,
    pub delivered: Delivered,
}

impl Client {
    /// A client keeping its state in `dir`.
    pub fn new(dir: &Path) -> Client {
        Client {
            db: Arc::new(FileIdentityDb::new(dir.join("client-state"))),
            delivered: Delivered::default(),
        }
    }

    /// A manager as the client process builds it at every start.
    pub fn manager_with(
        &self,
        request: IssueRequest,
        signer: Arc<dyn IdentitySigner>,
        keyring: Keyring,
        login: impl RecordedLogin,
    ) -> IdentityManager {
        IdentityManager::builder(vec![request], signer, self.db.clone(), keyring)
            .exchange(login.recorded(self.delivered.clone()))
            .build()
            .unwrap()
    }

    /// The token handed out last, and why.
    pub fn last(&self) -> (String, EventKind) {
        self.delivered
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a token was delivered")
    }

    /// Every token handed out, in order.
    pub fn all(&self) -> Vec<String> {
        self.delivered
            .lock()
            .unwrap()
            .iter()
            .map(|(t, _)| t.clone())
            .collect()
    }
}
