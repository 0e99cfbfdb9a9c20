//! docs/rust.md's identity-manager example, verbatim (tests/readme.rs checks they
//! are the same text): a client keeping one allocation's identity renewed and
//! persisted, restored after a restart. Public API only, no repository files.
use std::sync::Arc;
use std::time::Duration;

use workload_identity::manager::{FileIdentityDb, IdentityId, IdentityManager, Runner};
use workload_identity::model::{Allocation, IssueRequest, WorkloadIdentity};
use workload_identity::{Clock, Issuer, Keyring, SystemClock, unix_now};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keyring = Keyring::new();
    keyring.rotate(unix_now())?;
    let request = IssueRequest {
        region: "global".into(),
        allocation: Allocation {
            id: "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "frontend".into(),
            client_status: "running".into(),
            ..Allocation::default()
        },
        task: "server".into(),
        proof_key: None, // see proof_of_possession for proof-bound WITs
        identity: WorkloadIdentity {
            name: "vault_default".into(),
            audience: vec!["vault.io".into()],
            ttl: Duration::from_secs(3600).into(),
            ..WorkloadIdentity::default()
        },
        ..IssueRequest::default()
    };
    // State files live in <dir>/<alloc id>.identities (mode 0600); the
    // directory is created 0700 on the first save.
    let dir = std::env::temp_dir().join(format!("wid-readme-manager-{}", std::process::id()));
    let build = || {
        IdentityManager::builder(
            vec![request.clone()],
            Arc::new(Issuer::new(keyring.clone())), // or your host's signing RPC
            Arc::new(FileIdentityDb::new(&dir)),
            keyring.clone(), // restore checks saved tokens still verify
        )
        .build()
    };
    let key = IdentityId::new("server", "vault_default");
    // The manager's times are Unix milliseconds (every such name ends in _ms).
    let clock = Arc::new(SystemClock);

    // A new allocation: sign now, then keep renewing from a thread.
    let manager = build()?;
    manager.start(clock.now_ms())?;
    let watcher = manager.watch(&key)?; // gets the current token, then every renewal
    let update = watcher
        .recv_timeout(Duration::from_secs(1))
        .ok_or("no token")?;
    println!(
        "token for {key}: {} bytes, expires {:?}",
        update.token.token.len(),
        update.token.expires_at
    );
    let runner = Runner::spawn(manager, clock.clone())?;
    // The running manager answers while its thread renews.
    let current = runner.manager().current(&key, clock.now_ms());
    assert!(current.is_some());
    runner.stop();

    // After a restart: reuse the saved token if it is still good, else re-sign.
    let manager = build()?;
    let report = manager.restore(clock.now_ms())?;
    println!("restored: reused={} {}", report.reused, report.reason);
    let token = manager.current(&key, clock.now_ms()).ok_or("no token")?;
    println!("serving {token:?}"); // Debug never prints the token itself

    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
