//! Go interoperability, Rust side: the committed vectors written by Go's
//! go-msgpack decode to the exact expected values, Rust's encodings match Go's
//! bytes where the Go value has no fields beyond our view, and Rust's encodings
//! are written out for the Go program to check (`scripts/msgpack-vectors.sh check`).

mod common;

use std::path::PathBuf;

use workload_identity::ResultCode;
use workload_identity::codec::{self, WireType};
use workload_identity::model::{
    Allocation, ConsulExposeConfig, GoDuration, IssueRequest, Job, NodeIdentityRequest, Workload,
    WorkloadIdentity,
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
    assert_eq!(job.meta.len(), 1);
    assert_eq!(job.meta.get("owner").map(String::as_str), Some("team-a"));
    assert_eq!(job.node_pool, "");
    assert_eq!(a.identity_job_id(), "web");
    assert!(!a.is_client_terminal());
}

#[test]
fn go_workload_identities_decode_exactly() {
    let w: WorkloadIdentity = decode_go("workload_identity.msgpack");
    assert_eq!(w, common::workload_identity());
    assert_eq!(w.ttl, GoDuration::from_nanos(3_600_000_000_000));
    assert_eq!(w.audience, ["vault.io", "consul.io"]);
    assert!(w.extra_claims.is_empty(), "Go's nil ExtraClaims");
    w.validate().unwrap();

    // Go zero values: nil Audience (msgpack nil), zero TTL, empty strings.
    let z: WorkloadIdentity = decode_go("workload_identity_zero.msgpack");
    assert_eq!(z, common::workload_identity_zero());
    assert!(z.audience.is_empty());
    assert!(z.extra_claims.is_empty());
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

    // Requests without a node: Go omits the key (omitempty), we decode None.
    for name in [
        "issue_request_task.msgpack",
        "issue_request_service.msgpack",
    ] {
        assert!(
            !common::go_vector(name).windows(5).any(|w| w == b"\xa4Node"),
            "{name}"
        );
        assert_eq!(decode_go::<IssueRequest>(name).node, None, "{name}");
    }
}

/// The Nomad 2.0.3 fields: Job.Meta and Job.NodePool, Identity.ExtraClaims and
/// the Node (with its Status), whose Go-only key (HTTPAddr) is ignored.
#[test]
fn go_extra_request_decodes_exactly() {
    let r: IssueRequest = decode_go("issue_request_extra.msgpack");
    assert_eq!(r, common::issue_request_extra());
    assert_eq!(r.workload().unwrap(), Workload::Task("server"));
    r.validate().unwrap();

    let job = r.allocation.job.as_ref().expect("Job is present");
    assert_eq!(job.id, common::CHILD_JOB_ID);
    assert_eq!(job.parent_id, "web");
    assert_eq!(
        job.meta.iter().collect::<Vec<_>>(),
        [(&"owner".to_string(), &"team-a".to_string())]
    );
    assert_eq!(job.node_pool, "gpu");

    assert_eq!(r.identity.extra_claims, ["dc", "owner"]);
    assert_eq!(r.identity.name, "vault_default");
    assert_eq!(r.identity.audience, ["vault.io", "consul.io"]);

    let node = r.node.as_ref().expect("Node is present");
    assert_eq!(node.id, common::NODE_ID);
    assert_eq!(node.name, "client-gpu-1");
    assert_eq!(node.datacenter, "dc1");
    assert_eq!(node.node_class, "gpu-a100");
    assert_eq!(node.node_pool, "gpu");
    assert_eq!(node.status, "ready");
    assert_eq!(r.proof_key, None);

    // Go did send the keys the view drops.
    let go = common::go_vector("issue_request_extra.msgpack");
    for key in [&b"\xa8HTTPAddr"[..], b"\xa8Priority"] {
        assert!(go.windows(key.len()).any(|w| w == key), "{key:?}");
    }

    // Ours decodes back to the same request, Node and all.
    let ours = codec::encode(&r).unwrap();
    assert_eq!(codec::decode::<IssueRequest>(&ours).unwrap(), r);
}

/// The Nomad 2.x blocks of the exchange claims: the task's `Vault` (Role,
/// Namespace, Cluster) and the `Consul` block (Namespace), their Go-only keys
/// ignored; and the claims they give the request's `vault_default` identity.
#[test]
fn go_exchange_request_decodes_exactly() {
    let r: IssueRequest = decode_go("issue_request_exchange.msgpack");
    assert_eq!(r, common::issue_request_exchange());
    r.validate().unwrap();
    let vault = r.vault.as_ref().expect("Vault is present");
    assert_eq!(vault.role, "nomad-web");
    assert_eq!(vault.namespace, "engineering/web");
    assert_eq!(vault.cluster, "default");
    assert_eq!(r.consul.as_ref().unwrap().namespace, "web-team");
    assert_eq!(r.vault_for_claims(), Some(vault));
    // vault_default is no Consul identity.
    assert_eq!(r.consul_for_claims(), None);

    // Go did send the keys the view drops.
    let go = common::go_vector("issue_request_exchange.msgpack");
    for key in [&b"\xaaChangeMode"[..], b"\xa9Partition", b"\xa3Env"] {
        assert!(go.windows(key.len()).any(|w| w == key), "{key:?}");
    }

    // Requests without the blocks: Go omits the keys (omitempty), we decode
    // None and leave them out too, so their bytes are as before.
    for name in [
        "issue_request_task.msgpack",
        "issue_request_service.msgpack",
        "issue_request_extra.msgpack",
    ] {
        let go = common::go_vector(name);
        for key in [&b"\xa5Vault"[..], b"\xa6Consul"] {
            assert!(!go.windows(key.len()).any(|w| w == key), "{name}");
        }
        let r = decode_go::<IssueRequest>(name);
        assert_eq!(
            (r.vault.as_ref(), r.consul.as_ref()),
            (None, None),
            "{name}"
        );
        let ours = codec::encode(&r).unwrap();
        assert!(!ours.windows(5).any(|w| w == b"Vault"), "{name}");
        assert!(!ours.windows(6).any(|w| w == b"Consul"), "{name}");
    }

    // Ours decodes back to the same request, blocks and all, with the
    // blocks' keys in Go's (sorted) order.
    let ours = codec::encode(&r).unwrap();
    assert_eq!(codec::decode::<IssueRequest>(&ours).unwrap(), r);
    let vault_map =
        b"\xa5Vault\x83\xa7Cluster\xa7default\xa9Namespace\xafengineering/web\xa4Role\xa9nomad-web";
    assert!(ours.windows(vault_map.len()).any(|w| w == vault_map));
    let consul_map = b"\xa6Consul\x81\xa9Namespace\xa8web-team";
    assert!(ours.windows(consul_map.len()).any(|w| w == consul_map));
}

/// The node identity request (Nomad 1.11's node identities): every field of
/// the view, exactly; the Go-only keys (the request's AuthToken, the node's
/// HTTPAddr) are ignored.
#[test]
fn go_node_identity_request_decodes_exactly() {
    let r: NodeIdentityRequest = decode_go("node_identity_request.msgpack");
    assert_eq!(r, common::node_identity_request());
    assert_eq!(r.region, "global");
    assert_eq!(r.audience, ["nomadproject.io", "consul.io"]);
    assert_eq!(r.ttl, GoDuration::from_nanos(12 * 3_600_000_000_000));
    assert_eq!(r.ttl_secs(), 12 * 3600);
    assert_eq!(r.node.id, common::NODE_ID);
    assert_eq!(r.node.name, "client-gpu-1");
    assert_eq!(r.node.datacenter, "dc1");
    assert_eq!(r.node.node_class, "gpu-a100");
    assert_eq!(r.node.node_pool, "gpu");
    assert_eq!(r.node.status, "ready");
    r.validate().unwrap();

    // Go did send the keys the view drops.
    let go = common::go_vector("node_identity_request.msgpack");
    for key in [&b"\xa9AuthToken"[..], b"\xa8HTTPAddr"] {
        assert!(go.windows(key.len()).any(|w| w == key), "{key:?}");
    }

    // Ours decodes back to the same request; it is Go's bytes without the
    // Go-only keys (same key order, integer and string forms).
    let ours = codec::encode(&r).unwrap();
    assert_eq!(codec::decode::<NodeIdentityRequest>(&ours).unwrap(), r);
    assert!(ours.len() < go.len());
    assert!(!ours.windows(9).any(|w| w == b"AuthToken"));
}

#[test]
fn duplicate_job_meta_keys_are_refused() {
    // {"Meta": {"k": "a", "k": "b"}}: Go would keep the last value; we refuse.
    let dup = b"\x81\xa4Meta\x82\xa1k\xa1a\xa1k\xa1b";
    let e = codec::decode::<Job>(dup).unwrap_err();
    assert_eq!(e.code(), ResultCode::DecodeError, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("duplicate key \"k\""), "{msg}");
    // The same map with distinct keys decodes.
    let ok = b"\x81\xa4Meta\x82\xa1k\xa1a\xa1l\xa1b";
    let job = codec::decode::<Job>(ok).unwrap();
    assert_eq!(job.meta, [("k", "a"), ("l", "b")].into_iter().collect());
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
    // The one documented difference: an empty list is an empty array (0x90)
    // where Go writes nil (0xc0) for a nil slice; both decode to an empty list.
    // Each such value is patched at its key, found in Go's bytes, and then the
    // whole encodings must be identical.
    assert_eq!(
        patch_empty_lists(
            codec::encode(&common::workload_identity()).unwrap(),
            &common::go_vector("workload_identity.msgpack"),
            &["ExtraClaims"],
        ),
        common::go_vector("workload_identity.msgpack")
    );
    assert_eq!(
        codec::encode(&common::consul_expose()).unwrap(),
        common::go_vector("consul_expose.msgpack")
    );
    assert_eq!(
        patch_empty_lists(
            codec::encode(&common::workload_identity_zero()).unwrap(),
            &common::go_vector("workload_identity_zero.msgpack"),
            &["Audience", "ExtraClaims"],
        ),
        common::go_vector("workload_identity_zero.msgpack")
    );
}

/// Replaces, after each of `keys` (a fixstr key in `go`), our empty array
/// (0x90) with Go's nil (0xc0), asserting both are there. Each patch is one
/// byte for one byte, so every offset found in Go's bytes holds in ours.
fn patch_empty_lists(mut ours: Vec<u8>, go: &[u8], keys: &[&str]) -> Vec<u8> {
    for key in keys {
        let needle = [&[0xa0 | key.len() as u8][..], key.as_bytes()].concat();
        let at = go
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
            .unwrap_or_else(|| panic!("Go wrote no {key}"))
            + needle.len();
        assert_eq!(go[at], 0xc0, "Go writes a nil {key} as nil");
        assert_eq!(ours[at - needle.len()..at], needle[..], "{key} key offset");
        assert_eq!(ours[at], 0x90, "we write an empty {key} as an empty array");
        ours[at] = 0xc0;
    }
    ours
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
    let files: [(&str, Vec<u8>); 9] = [
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
        (
            "issue_request_extra.msgpack",
            codec::encode(&common::issue_request_extra()).unwrap(),
        ),
        (
            "node_identity_request.msgpack",
            codec::encode(&common::node_identity_request()).unwrap(),
        ),
        (
            "issue_request_exchange.msgpack",
            codec::encode(&common::issue_request_exchange()).unwrap(),
        ),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.join(name), &bytes).unwrap();
    }
}

/// Nomad 1.7 and later encode with go-msgpack/v2 (Nomad's handle): other
/// bytes than v0.5.5's (a positive signed integer as a signed form, 0xd1
/// where v0.5.5 writes 0xcd), the same values. Each v2 vector
/// (`tests/vectors/msgpack-v2/`, `scripts/msgpack-vectors.sh regen`) decodes
/// to exactly what its v0.5.5 counterpart decodes to.
#[test]
fn go_msgpack_v2_vectors_decode_as_the_v0_ones() {
    fn same<T: WireType + PartialEq + std::fmt::Debug>(name: &str) -> usize {
        let v2_path = common::vectors_dir().join("msgpack-v2").join(name);
        let v2 = std::fs::read(&v2_path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", v2_path.display()));
        let from_v2: T = codec::decode(&v2)
            .unwrap_or_else(|e| panic!("go-msgpack/v2 vector {name} must decode: {e}"));
        assert_eq!(from_v2, decode_go::<T>(name), "{name}");
        usize::from(v2 != common::go_vector(name))
    }
    let differing = same::<Allocation>("allocation.msgpack")
        + same::<WorkloadIdentity>("workload_identity.msgpack")
        + same::<WorkloadIdentity>("workload_identity_zero.msgpack")
        + same::<IssueRequest>("issue_request_task.msgpack")
        + same::<IssueRequest>("issue_request_service.msgpack")
        + same::<ConsulExposeConfig>("consul_expose.msgpack")
        + same::<IssueRequest>("issue_request_proof_key.msgpack")
        + same::<IssueRequest>("issue_request_extra.msgpack")
        + same::<NodeIdentityRequest>("node_identity_request.msgpack")
        + same::<IssueRequest>("issue_request_exchange.msgpack");
    // The generations really differ on the wire (else this test proves
    // nothing beyond the v0.5.5 ones).
    assert!(differing > 0, "v2 wrote v0.5.5's bytes for every vector");
}
