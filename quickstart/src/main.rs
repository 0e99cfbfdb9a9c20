//! Quickstart, end to end: decode an `IssueRequest` that Go encoded (the
//! committed vector, written by hashicorp/go-msgpack as Nomad does), create a
//! keyring, register the allocation, issue an identity, show the token, its
//! claims and the JWKS, verify it, then mark the allocation terminal and show the
//! rejection.
//!
//! Run with `cargo run --locked -p quickstart` from the repository root: its
//! own package, so the build compiles the library and its dependencies only,
//! none of the library's dev-dependencies (benchmarks, test tools).

use std::sync::Arc;

use workload_identity::codec;
use workload_identity::model::IssueRequest;
use workload_identity::unix_now;
use workload_identity::{Algorithm, Audience, Issuer, Keyring, MemoryStore, Verifier};

/// Bytes written by `tests/go/msgpack/main.go` with `MsgpackHandle{RawToString: true}`.
const GO_REQUEST: &[u8] = include_bytes!("../../tests/vectors/msgpack/issue_request_task.msgpack");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. The request, as a Go host would send it.
    let req: IssueRequest = codec::decode(GO_REQUEST)?;
    req.validate()?;
    println!(
        "decoded a {}-byte Go msgpack IssueRequest:",
        GO_REQUEST.len()
    );
    println!(
        "  allocation {} (namespace {}, job {}, group {}), {:?}, identity {:?} for {:?}, TTL {}s",
        req.allocation.id,
        req.allocation.namespace,
        req.allocation.job_id,
        req.allocation.task_group,
        req.workload()?,
        req.identity.name,
        req.identity.audience,
        req.identity.ttl.as_secs()
    );

    // 2. A keyring with a fresh active key, and a store that knows the allocation.
    let now = unix_now();
    let keyring = Keyring::new();
    let kid = keyring.rotate(now)?;
    // ES256 and RS256 keys too, for relying parties that take no EdDSA (AWS
    // STS, GCP: ES256; Azure: RS256).
    let es_kid = keyring.rotate_alg(Algorithm::Es256, now)?;
    let rs_kid = keyring.rotate_alg(Algorithm::Rs256, now)?;
    let store = Arc::new(MemoryStore::new());
    store.upsert(&req.allocation);
    println!("\nkeyring: active keys {kid} (EdDSA), {es_kid} (ES256), {rs_kid} (RS256)");

    // 3. Issue.
    let issuer = Issuer::new(keyring.clone()).issuer("https://nomad.example.com");
    let signed = issuer.issue(&req, now)?;
    println!("\ntoken:\n  {}", signed.token);
    println!("claims:\n  {}", signed.claims.to_json());
    println!(
        "JWKS (serve at /.well-known/jwks.json):\n  {}",
        keyring.jwks().to_json()
    );
    println!(
        "OIDC discovery (serve at /.well-known/openid-configuration):\n  {}",
        keyring
            .oidc_discovery("https://nomad.example.com")?
            .to_json()
    );

    // 4. Verify, as Vault would for audience "vault.io".
    let verifier = Verifier::builder(keyring.clone(), store.clone(), Audience::new("vault.io")?)
        .issuer("https://nomad.example.com")
        .build();
    let verified = verifier.verify(&signed.token, now)?;
    println!(
        "\nverified: sub {} (key {}, job {}, allocation {})",
        verified.claims.subject,
        verified.kid,
        verified.claims.job_id,
        verified.claims.allocation_id
    );
    // The same identity for AWS STS, which accepts ES256 but not EdDSA: the
    // issuer picks the algorithm by audience.
    let mut aws = req.clone();
    aws.identity.audience = vec!["sts.amazonaws.com".into()];
    let aws_issuer = issuer
        .clone()
        .algorithm_for_audience("sts.amazonaws.com", Algorithm::Es256);
    let aws_token = aws_issuer.issue(&aws, now)?;
    let sts = Verifier::builder(
        keyring.clone(),
        store.clone(),
        Audience::new("sts.amazonaws.com")?,
    )
    .build();
    println!(
        "for AWS: an {} token from key {}, verified: {}",
        aws_issuer.algorithm_of(&aws),
        aws_token.kid,
        sts.verify(&aws_token.token, now).is_ok()
    );

    // 5. The workload stops: its identity must stop working at once.
    let mut stopped = req.allocation.clone();
    stopped.client_status = "complete".into();
    store.upsert(&stopped);
    match verifier.verify(&signed.token, now) {
        Ok(_) => return Err("a terminal allocation's token was accepted".into()),
        Err(e) => println!(
            "after the allocation completed: rejected ({}): {e}",
            e.code()
        ),
    }
    println!("\nverifier stats: {:?}", verifier.stats());
    Ok(())
}
