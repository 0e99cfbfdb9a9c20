//! Go interoperability, Rust side: the committed vectors written by Go's
//! go-msgpack decode to the exact expected values, Rust's encodings match Go's
//! bytes where the Go value has no fields beyond our view, and Rust's encodings
//! are written out for the Go program to check (`scripts/msgpack-vectors.sh check`).

mod common;

use std::path::PathBuf;

use workload_identity::codec::{self, WireType};
use workload_identity::model::{
    Allocation, ConsulExposeConfig, GoDuration, IssueRequest, Workload, WorkloadIdentity,
};

fn decode_go<T: WireType>(name: &str) -> T {
    codec::decode(&common::go_vector(name))
        .unwrap_or_else(|e| panic!("Go vector {name} must decode: {e}"))
}

#[test]
fn go_allocation_decodes_to_the_view_ignoring_unknown_keys() {
    let a: Allocation = decode_go("allocation.msgpack");
    assert_eq!(a, common::allocation());
    // Field by field, so a failure says which one.
    assert_eq!(a.id, "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc");
    assert_eq!(a.namespace, "default");
    assert_eq!(a.job_id, "web/dispatch-1700000000-abcd1234");
    assert_eq!(a.task_group, "frontend");
    assert_eq!(a.client_status, "running");
    assert_eq!(a.desired_status, "run");
    let job = a.job.as_ref().expect("Job is present");
    assert_eq!(job.id, "web/dispatch-1700000000-abcd1234");
    assert_eq!(job.parent_id, "web");
    assert_eq!(a.identity_job_id(), "web");
    assert!(!a.is_client_terminal());
}

#[test]
fn go_workload_identities_decode_exactly() {
    let w: WorkloadIdentity = decode_go("workload_identity.msgpack");
    assert_eq!(w, common::workload_identity());
    assert_eq!(w.ttl, GoDuration::from_nanos(3_600_000_000_000));
    assert_eq!(w.audience, ["vault.io", "consul.io"]);
    w.validate().unwrap();

    // Go zero values: nil Audience (msgpack nil), zero TTL, empty strings.
    let z: WorkloadIdentity = decode_go("workload_identity_zero.msgpack");
    assert_eq!(z, common::workload_identity_zero());
    assert!(z.audience.is_empty());
    z.validate().unwrap();
}

#[test]
fn go_issue_requests_decode_exactly() {
    let r: IssueRequest = decode_go("issue_request_task.msgpack");
    assert_eq!(r, common::issue_request_task());
    assert_eq!(r.workload().unwrap(), Workload::Task("server"));
    r.validate().unwrap();

    let r: IssueRequest = decode_go("issue_request_service.msgpack");
    assert_eq!(r, common::issue_request_service());
    assert_eq!(r.workload().unwrap(), Workload::Service("web-api"));
    assert_eq!(r.identity.ttl.as_secs(), 5400);
    r.validate().unwrap();
}

#[test]
fn go_consul_expose_uses_paths_in_msgpack_and_path_in_json() {
    let c: ConsulExposeConfig = decode_go("consul_expose.msgpack");
    assert_eq!(c, common::consul_expose());
    assert_eq!(c.paths[1].local_path_port, 9102);

    let go_json = String::from_utf8(common::go_vector("consul_expose.json")).unwrap();
    assert!(go_json.starts_with("{\"Path\":["), "{go_json}");
    assert_eq!(ConsulExposeConfig::from_json(&go_json).unwrap(), c);
    // Our JSON is Go's JSON, byte for byte.
    assert_eq!(c.to_json(), go_json);
}

#[test]
fn rust_encoding_is_byte_identical_to_go_for_view_only_values() {
    // These Go values have no fields beyond our view, so the bytes can match:
    // same key order (Go sorts by name), same integer forms, same raw strings.
    assert_eq!(
        codec::encode(&common::workload_identity()).unwrap(),
        common::go_vector("workload_identity.msgpack")
    );
    assert_eq!(
        codec::encode(&common::consul_expose()).unwrap(),
        common::go_vector("consul_expose.msgpack")
    );
    // The one documented difference: an empty list is an empty array (0x90)
    // where Go writes nil (0xc0) for a nil slice. Both decode to "no audience".
    let ours = codec::encode(&common::workload_identity_zero()).unwrap();
    let go = common::go_vector("workload_identity_zero.msgpack");
    let audience_at = go.windows(9).position(|w| w == b"\xa8Audience").unwrap() + 9;
    assert_eq!(go[audience_at], 0xc0);
    assert_eq!(ours[audience_at], 0x90);
    let mut patched = ours.clone();
    patched[audience_at] = 0xc0;
    assert_eq!(patched, go);
}

#[test]
fn long_strings_use_go_old_spec_raw_form() {
    // A 36-byte UUID: str16 (0xda 0x00 0x24) as Go writes it, never str8 (0xd9).
    let bytes = codec::encode(&common::allocation()).unwrap();
    let needle = [&[0xda, 0x00, 0x24][..], common::ALLOC_ID.as_bytes()].concat();
    assert!(bytes.windows(needle.len()).any(|w| w == needle));
    assert!(!bytes.contains(&0xd9));
    let go = common::go_vector("allocation.msgpack");
    assert!(go.windows(needle.len()).any(|w| w == needle));
}

/// Writes Rust's encodings of the samples for the Go side to check. CI then runs
/// `scripts/msgpack-vectors.sh check target/tmp/rust-msgpack`.
#[test]
fn write_rust_encodings_for_go() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rust-msgpack");
    std::fs::create_dir_all(&dir).unwrap();
    let files: [(&str, Vec<u8>); 6] = [
        (
            "allocation.msgpack",
            codec::encode(&common::allocation()).unwrap(),
        ),
        (
            "workload_identity.msgpack",
            codec::encode(&common::workload_identity()).unwrap(),
        ),
        (
            "workload_identity_zero.msgpack",
            codec::encode(&common::workload_identity_zero()).unwrap(),
        ),
        (
            "issue_request_task.msgpack",
            codec::encode(&common::issue_request_task()).unwrap(),
        ),
        (
            "issue_request_service.msgpack",
            codec::encode(&common::issue_request_service()).unwrap(),
        ),
        (
            "consul_expose.msgpack",
            codec::encode(&common::consul_expose()).unwrap(),
        ),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.join(name), &bytes).unwrap();
    }
}
