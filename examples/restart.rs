//! A manager keeps an allocation's identities and a Consul-style derived secret;
//! the host "restarts"; a new manager restores from the state file, reuses the
//! identities that still verify, and re-derives the secret that was lost — the
//! failure of seed 001 (recovered workloads left with an empty Consul token)
//! cannot happen.
//!
//! Run with `cargo run --example restart`.

use std::sync::{Arc, Mutex};

use workload_identity::codec;
use workload_identity::manager::{
    EventKind, ExchangeError, FileIdentityDb, IdentityDb, IdentityId, IdentityManager,
    IdentityToken, TokenExchange,
};
use workload_identity::model::IssueRequest;
use workload_identity::unix_now;
use workload_identity::{Issuer, Keyring};

const GO_REQUEST: &[u8] = include_bytes!("../tests/vectors/msgpack/issue_request_task.msgpack");

/// Stands in for a Consul login with the workload identity.
struct ConsulLogin {
    key: IdentityId,
    delivered: Mutex<Vec<(String, EventKind)>>,
}

impl TokenExchange for ConsulLogin {
    fn name(&self) -> &str {
        "consul"
    }
    fn identity(&self) -> &IdentityId {
        &self.key
    }
    fn exchange(&self, token: &IdentityToken) -> Result<String, ExchangeError> {
        Ok(format!("consul-acl-token-for-{}", &token.jwt_id[..8]))
    }
    fn deliver(&self, secret: &str, kind: EventKind) {
        println!(
            "  consumer received a {} Consul token ({kind:?})",
            if secret.is_empty() {
                "EMPTY"
            } else {
                "non-empty"
            }
        );
        self.delivered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((secret.to_string(), kind));
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("wid-restart-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let now_ms = unix_now() * 1000;
    let keyring = Keyring::new();
    keyring.rotate(now_ms / 1000)?;
    let req: IssueRequest = codec::decode(GO_REQUEST)?;
    let key = IdentityId::new("server", &req.identity.name);
    let db = Arc::new(FileIdentityDb::new(&dir));
    let consul = Arc::new(ConsulLogin {
        key: key.clone(),
        delivered: Mutex::new(Vec::new()),
    });
    let build = || {
        IdentityManager::builder(
            vec![req.clone()],
            Arc::new(Issuer::new(keyring.clone())),
            db.clone(),
            keyring.clone(),
        )
        .exchange(consul.clone())
        .build()
    };

    println!(
        "first boot: signing identities for allocation {}",
        req.allocation.id
    );
    let m = build()?;
    let watcher = m.watch(&key)?;
    m.start(now_ms)?;
    let first = watcher.try_recv().ok_or("no initial token")?;
    println!(
        "  {key}: {:?} token {}… (expires {:?})",
        first.kind,
        &first.token.token[..24],
        first.token.expires_at
    );
    println!(
        "  state saved to {}",
        db.path(&req.allocation.id)?.display()
    );
    drop(m);

    println!("\nrestart 1 (one minute later): restore from the state file");
    let m = build()?;
    let watcher = m.watch(&key)?;
    let report = m.restore(now_ms + 60_000)?;
    let u = watcher.try_recv().ok_or("no restored token")?;
    println!(
        "  reused saved identities: {} ; token is the same: {}",
        report.reused,
        u.token.jwt_id == first.token.jwt_id
    );
    println!("  watcher told: {:?}", u.kind);
    drop(m);

    println!("\nrestart 2: the host lost the derived Consul token (seed 001)");
    let mut saved = db.load(&req.allocation.id)?.ok_or("no saved state")?;
    for s in &mut saved.secrets {
        s.secret.clear();
    }
    db.store(&req.allocation.id, &saved)?;
    let m = build()?;
    let report = m.restore(now_ms + 120_000)?;
    println!(
        "  reused saved identities: {} ; secrets derived again: {:?}",
        report.reused, report.rederived
    );
    let secret = m.secret("consul").ok_or("no secret")?;
    println!(
        "  the workload runs with a non-empty Consul token: {}",
        !secret.secret.is_empty()
    );

    let delivered = consul
        .delivered
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert!(
        delivered.iter().all(|(s, _)| !s.is_empty()),
        "never an empty secret"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
