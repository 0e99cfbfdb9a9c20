//! Quickstart: decode an `IssueRequest` that Go encoded (the committed vector,
//! written by hashicorp/go-msgpack as Nomad does), validate it, and print it.
//!
//! Run with `cargo run --example quickstart`.

use workload_identity::codec;
use workload_identity::model::IssueRequest;

/// Bytes written by `tests/go/msgpack/main.go` with `MsgpackHandle{RawToString: true}`.
const GO_REQUEST: &[u8] = include_bytes!("../tests/vectors/msgpack/issue_request_task.msgpack");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let req: IssueRequest = codec::decode(GO_REQUEST)?;
    println!(
        "decoded {} bytes of Go msgpack into an IssueRequest:",
        GO_REQUEST.len()
    );
    println!("  Region      {}", req.region);
    println!(
        "  Allocation  {} (namespace {}, job {}, group {}, client status {})",
        req.allocation.id,
        req.allocation.namespace,
        req.allocation.job_id,
        req.allocation.task_group,
        req.allocation.client_status
    );
    println!(
        "  identity job ID (parent for child jobs)  {}",
        req.allocation.identity_job_id()
    );
    println!("  workload    {:?}", req.workload()?);
    println!(
        "  Identity    {} for {:?}, TTL {}s, change mode {:?}",
        req.identity.name,
        req.identity.audience,
        req.identity.ttl.as_secs(),
        req.identity.change_mode
    );
    req.validate()?;
    println!("valid by Nomad's rules");

    // Re-encoding writes only the fields we model, keyed by the same codec names.
    let ours = codec::encode(&req)?;
    let again: IssueRequest = codec::decode(&ours)?;
    assert_eq!(again, req);
    println!(
        "re-encoded to {} bytes (Go sent {} with fields we ignore); round trip equal",
        ours.len(),
        GO_REQUEST.len()
    );

    // A broken request: every problem is reported with its field.
    let mut bad = req.clone();
    bad.identity.name = "not valid!".into();
    bad.service = "also-a-service".into();
    if let Err(e) = bad.validate() {
        println!("rejected as expected ({}): {e}", e.code());
    }
    Ok(())
}
