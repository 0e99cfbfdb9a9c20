//! The README's "A short example", verbatim (tests/readme.rs checks they are
//! the same text). It uses only the public API and no repository files, so it
//! compiles in any crate that depends on workload-identity.
use std::sync::Arc;
use std::time::Duration;

use workload_identity::model::{Allocation, GoDuration, IssueRequest, WorkloadIdentity};
use workload_identity::{
    Audience, Issuer, Keyring, MemoryStore, OidcDiscovery, Verifier, unix_now,
};

fn main() -> Result<(), workload_identity::Error> {
    // The keyring: one active key, saved (mode 0600) and loaded back. Real
    // services keep the keystore somewhere like /var/lib/<service>/keystore.
    let dir = std::env::temp_dir().join(format!("wid-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let keystore = dir.join("keystore");
    let keyring = Keyring::new();
    keyring.rotate(unix_now())?; // a fresh active key, in memory only:
    keyring.save(&keystore)?; // save after every rotation, at once
    let keyring = Keyring::load(&keystore)?;

    // What the scheduler asks for (Go hosts send the same struct as msgpack:
    // `workload_identity::codec::decode::<IssueRequest>(bytes)`).
    let req = IssueRequest {
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
        proof_key: None, // Some(key) asks for a proof-bound WIT
        identity: WorkloadIdentity {
            name: "vault_default".into(),
            audience: vec!["vault.io".into()],
            // A TTL is Go nanoseconds: GoDuration::from_nanos(3600) is 3.6 us (and is
            // refused). TTL 0 means a token without exp, as Nomad's default
            // identity; `require_exp(true)` refuses such tokens.
            ttl: GoDuration::from_secs(3600), // or Duration::from_secs(3600).into()
            ..WorkloadIdentity::default()
        },
        ..IssueRequest::default()
    };

    // Sign.
    let issuer_url = "https://nomad.example.com";
    let signed = Issuer::new(keyring.clone())
        .issuer(issuer_url)
        .issue(&req, unix_now())?;

    // Verify: the allocation must be live in the store (MemoryStore here;
    // implement StateStore over your scheduler's state).
    let store = Arc::new(MemoryStore::new());
    store.upsert(&req.allocation);
    let verifier = Verifier::builder(keyring.clone(), store, Audience::new("vault.io")?)
        .issuer(issuer_url)
        .require_exp(true)
        .leeway(Duration::from_secs(30))
        .cache(10_000) // optional
        .build();
    let identity = verifier.verify_now(&signed.token)?;
    assert_eq!(identity.claims.allocation_id, req.allocation.id);
    println!(
        "verified {} (key {})",
        identity.claims.subject, identity.kid
    );

    // What relying parties (Vault, Consul, cloud IAM) fetch.
    let discovery = OidcDiscovery::new(issuer_url)?;
    println!(
        "GET /.well-known/openid-configuration -> {}",
        discovery.to_json()
    );
    println!("GET /.well-known/jwks.json -> {}", keyring.jwks().to_json());

    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
