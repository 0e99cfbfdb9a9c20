//! Bad input for every decoder: each byte string gives a whole value or a decode
//! error naming the type and field — never a panic, a partial value, or an
//! allocation sized by a length the input cannot back.

mod common;

use proptest::prelude::*;
use serde_json::{Value, json};
use workload_identity::DecodeError;
use workload_identity::codec::{self, DecodeLimits, WireType};
use workload_identity::model::{
    Allocation, ConsulExposeConfig, ConsulExposePath, IssueRequest, Job, WorkloadIdentity,
};
use workload_identity::{Error, ResultCode};

const VECTORS: [&str; 7] = [
    "allocation.msgpack",
    "workload_identity.msgpack",
    "workload_identity_zero.msgpack",
    "issue_request_task.msgpack",
    "issue_request_service.msgpack",
    "consul_expose.msgpack",
    "issue_request_exchange.msgpack",
];

fn decode_err<T: WireType + std::fmt::Debug>(bytes: &[u8]) -> DecodeError {
    match codec::decode::<T>(bytes) {
        Err(Error::Decode(e)) => e,
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// msgpack bytes for a JSON-shaped value (maps keyed by strings).
fn mp(v: &Value) -> Vec<u8> {
    rmp_serde::to_vec_named(v).unwrap()
}

/// Decodes `bytes` as whichever wire type `name` holds; `Ok(())` on success.
fn decode_as(name: &str, bytes: &[u8]) -> Result<(), Error> {
    match name {
        "allocation.msgpack" => codec::decode::<Allocation>(bytes).map(drop),
        "consul_expose.msgpack" => codec::decode::<ConsulExposeConfig>(bytes).map(drop),
        n if n.starts_with("workload_identity") => {
            codec::decode::<WorkloadIdentity>(bytes).map(drop)
        }
        _ => codec::decode::<IssueRequest>(bytes).map(drop),
    }
}

#[test]
fn every_truncation_of_every_vector_is_an_error() {
    for name in VECTORS {
        let full = common::go_vector(name);
        decode_as(name, &full).unwrap();
        for cut in 0..full.len() {
            let e = decode_as(name, &full[..cut]).expect_err(name);
            assert_eq!(
                e.code(),
                ResultCode::DecodeError,
                "{name} cut at {cut}: {e}"
            );
        }
    }
}

#[test]
fn trailing_bytes_are_an_error() {
    for name in VECTORS {
        let mut bytes = common::go_vector(name);
        bytes.push(0xc0);
        let e = decode_as(name, &bytes).expect_err(name);
        assert!(e.to_string().contains("1 trailing bytes"), "{name}: {e}");
    }
    let e = decode_err::<IssueRequest>(&[0x80, 0x80]);
    assert_eq!(e.type_name, "IssueRequest");
}

/// The sample task request as a JSON-shaped value, to corrupt one field at a time.
fn request_value() -> Value {
    json!({
        "Allocation": {
            "ClientStatus": "running", "DesiredStatus": "run",
            "ID": common::ALLOC_ID,
            "Job": {"ID": common::CHILD_JOB_ID, "Meta": {"owner": "team-a"}, "ParentID": "web"},
            "JobID": common::CHILD_JOB_ID, "Namespace": "default", "TaskGroup": "frontend"
        },
        "Identity": {
            "Audience": ["vault.io", "consul.io"], "ChangeMode": "signal",
            "ChangeSignal": "SIGHUP", "Env": true, "File": true,
            "Filepath": "secrets/vault.jwt", "Name": "vault_default",
            "ServiceName": "", "TTL": 3_600_000_000_000i64
        },
        "Region": "global", "Service": "", "Task": "server"
    })
}

#[test]
fn the_json_shaped_sample_is_the_sample() {
    let r: IssueRequest = codec::decode(&mp(&request_value())).unwrap();
    assert_eq!(r, common::issue_request_task());
}

#[test]
fn wrong_type_in_each_field_names_type_and_field() {
    let cases: &[(&str, Value)] = &[
        ("Region", json!(5)),
        ("Task", json!(true)),
        ("Service", json!([1])),
        ("Allocation", json!("not a map")),
        ("Allocation.ID", json!(1)),
        ("Allocation.Namespace", json!(false)),
        ("Allocation.JobID", json!({"a": 1})),
        ("Allocation.TaskGroup", json!(-3)),
        ("Allocation.ClientStatus", json!(1.5)),
        ("Allocation.DesiredStatus", json!([])),
        ("Allocation.Job", json!(7)),
        ("Allocation.Job.ID", json!(7)),
        ("Allocation.Job.ParentID", json!(true)),
        ("Identity", json!(["positional", "not allowed"])),
        ("Identity.Name", json!(1)),
        ("Identity.Audience", json!("vault.io")),
        ("Identity.ChangeMode", json!(1)),
        ("Identity.ChangeSignal", json!(1)),
        ("Identity.Env", json!("yes")),
        ("Identity.File", json!(1)),
        ("Identity.Filepath", json!(1)),
        ("Identity.ServiceName", json!(1)),
        ("Identity.TTL", json!("1h")),
        ("Identity.TTL", json!(1.0)),
        ("Identity.TTL", json!(u64::MAX)),
    ];
    for (path, bad) in cases {
        let mut v = request_value();
        let mut slot = &mut v;
        for part in path.split('.') {
            slot = slot.get_mut(part).unwrap();
        }
        *slot = bad.clone();
        let e = decode_err::<IssueRequest>(&mp(&v));
        assert_eq!(e.type_name, "IssueRequest");
        assert_eq!(&e.path, path, "{bad}: {e}");
        assert!(!e.reason.is_empty());
    }
    // An element inside a list is named by its index.
    let mut v = request_value();
    v["Identity"]["Audience"][1] = json!(7);
    let e = decode_err::<IssueRequest>(&mp(&v));
    assert_eq!(e.path, "Identity.Audience[1]", "{e}");
    assert!(
        e.to_string().starts_with("cannot decode IssueRequest at Identity.Audience[1]: invalid type: integer `7`, expected a string"),
        "{e}"
    );
}

#[test]
fn wire_types_must_be_maps_not_positional_arrays() {
    let w = common::workload_identity();
    let positional = rmp_serde::to_vec(&w).unwrap();
    assert_eq!(positional[0] & 0xf0, 0x90, "rmp's compact form is an array");
    let e = decode_err::<WorkloadIdentity>(&positional);
    assert!(
        e.reason
            .contains("expected a map of WorkloadIdentity fields"),
        "{e}"
    );
}

#[test]
fn duplicate_keys_are_rejected() {
    // {"Name": "a", "Name": "b"}
    let bytes = [
        0x82, 0xa4, b'N', b'a', b'm', b'e', 0xa1, b'a', 0xa4, b'N', b'a', b'm', b'e', 0xa1, b'b',
    ];
    let e = decode_err::<WorkloadIdentity>(&bytes);
    assert!(e.reason.contains("duplicate field `Name`"), "{e}");
}

#[test]
fn unknown_keys_of_any_shape_are_ignored() {
    let mut v = request_value();
    v["Extra"] = json!({"deep": [1, {"x": null}], "n": -5});
    v["Allocation"]["Resources"] = json!([[1, 2], {"cpu": 500}]);
    v["Identity"]["ExtraClaimz"] = json!({"team": "a"});
    let r: IssueRequest = codec::decode(&mp(&v)).unwrap();
    assert_eq!(r, common::issue_request_task());
}

#[test]
fn nil_and_missing_fields_take_go_zero_values() {
    let r: IssueRequest = codec::decode(&mp(&json!({
        "Region": null, "Allocation": null, "Identity": {"Audience": null, "Name": "x"}
    })))
    .unwrap();
    assert_eq!(r.region, "");
    assert_eq!(r.allocation, Allocation::default());
    assert!(r.identity.audience.is_empty());
    assert_eq!(r.identity.name, "x");
    // ...and validation then says what is missing.
    let msg = r.validate().unwrap_err().to_string();
    assert!(msg.contains("Allocation.ID: must not be empty"), "{msg}");
}

#[test]
fn depth_bombs_are_rejected() {
    // 100,000 nested single-element arrays under an unknown key.
    let mut bytes = vec![0x81, 0xa1, b'X'];
    bytes.extend(std::iter::repeat_n(0x91u8, 100_000));
    bytes.push(0xc0);
    let e = decode_err::<IssueRequest>(&bytes);
    assert!(
        e.reason
            .contains("nesting deeper than the limit of 32 levels"),
        "{e}"
    );
    // And a configurable limit: the sample request nests 4 deep (request,
    // Allocation, Job, Meta).
    let sample = mp(&request_value());
    let limits = DecodeLimits::default().max_depth(3);
    assert!(codec::decode_with::<IssueRequest>(&sample, &limits).is_err());
    let limits = DecodeLimits::default().max_depth(4);
    assert!(codec::decode_with::<IssueRequest>(&sample, &limits).is_ok());
}

#[test]
fn length_prefix_claiming_2_pow_32_elements_fails_before_allocating() {
    // {"Audience": array32 with 0xffff_ffff elements and no data}
    let mut bytes = vec![0x81, 0xa8];
    bytes.extend_from_slice(b"Audience");
    bytes.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
    let e = decode_err::<WorkloadIdentity>(&bytes);
    assert!(
        e.reason
            .contains("claims 4294967295 values but only 0 bytes remain"),
        "{e}"
    );
    // The same for a map32 and a str32 header.
    let e = decode_err::<WorkloadIdentity>(&[0xdf, 0xff, 0xff, 0xff, 0xff]);
    assert!(e.reason.contains("claims 8589934590 values"), "{e}");
    let e = decode_err::<WorkloadIdentity>(&[0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, b'x']);
    assert!(e.reason.contains("truncated"), "{e}");
}

#[test]
fn size_limit_is_enforced_and_configurable() {
    let sample = common::go_vector("issue_request_task.msgpack");
    let limits = DecodeLimits::default().max_bytes(sample.len() - 1);
    let e = codec::decode_with::<IssueRequest>(&sample, &limits).unwrap_err();
    assert!(e.to_string().contains("the limit is"), "{e}");
    let limits = DecodeLimits::default().max_bytes(sample.len());
    codec::decode_with::<IssueRequest>(&sample, &limits).unwrap();
    assert_eq!(DecodeLimits::default().max_bytes, 4 << 20);
    assert_eq!(DecodeLimits::default().max_depth, 32);
}

#[test]
fn empty_input_is_an_error() {
    let e = decode_err::<Allocation>(&[]);
    assert!(e.reason.contains("empty input"), "{e}");
}

/// Byte offsets of each codec name (as a fixstr key) in an encoding, in order.
fn key_positions(bytes: &[u8], names: &[&str]) -> Vec<usize> {
    names
        .iter()
        .map(|n| {
            let key = [&[0xa0 | n.len() as u8][..], n.as_bytes()].concat();
            bytes
                .windows(key.len())
                .position(|w| w == key)
                .unwrap_or_else(|| panic!("key {n} missing"))
        })
        .collect()
}

fn assert_declared_names<T: WireType>(value: &T) {
    let names = T::CODEC_NAMES;
    let mut sorted = names.to_vec();
    sorted.sort();
    assert_eq!(
        names,
        sorted,
        "{}: declare fields in Go's (sorted) key order",
        T::TYPE_NAME
    );
    let bytes = codec::encode(value).unwrap();
    assert_eq!(
        bytes[0],
        0x80 | names.len() as u8,
        "{}: a map of exactly the declared fields",
        T::TYPE_NAME
    );
    let pos = key_positions(&bytes, names);
    assert!(
        pos.windows(2).all(|w| w[0] < w[1]),
        "{}: keys in declared order",
        T::TYPE_NAME
    );
}

#[test]
fn every_wire_type_encodes_exactly_its_declared_codec_names() {
    assert_declared_names(&common::allocation());
    assert_declared_names(&Job::default());
    assert_declared_names(&common::workload_identity());
    let proof_key = workload_identity::model::ProofKey {
        alg: "EdDSA".into(),
        crv: "Ed25519".into(),
        kty: "OKP".into(),
        x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo".into(),
        y: String::new(),
    };
    assert_declared_names(&proof_key);
    let mut with_key = common::issue_request_task();
    with_key.proof_key = Some(proof_key);
    with_key.node = common::issue_request_extra().node;
    with_key.vault = common::issue_request_exchange().vault;
    with_key.consul = common::issue_request_exchange().consul;
    assert_declared_names(&with_key);
    assert_declared_names(with_key.vault.as_ref().unwrap());
    assert_declared_names(with_key.consul.as_ref().unwrap());
    assert_eq!(
        codec::decode::<workload_identity::model::IssueRequest>(&codec::encode(&with_key).unwrap())
            .unwrap(),
        with_key
    );
    // Without one, a request encodes exactly as before the field existed:
    // the five other names, no ProofKey, Vault or Consul key (Go's
    // omitempty nil pointers).
    let plain = codec::encode(&common::issue_request_task()).unwrap();
    assert_eq!(plain[0], 0x85);
    assert!(!plain.windows(8).any(|w| w == b"ProofKey"));
    assert!(!plain.windows(5).any(|w| w == b"Vault"));
    assert!(!plain.windows(6).any(|w| w == b"Consul"));
    assert_declared_names(&common::consul_expose());
    assert_declared_names(&common::consul_expose().paths[0]);
    assert_eq!(ConsulExposeConfig::CODEC_NAMES, ["Paths"]);
    assert_eq!(
        ConsulExposePath::CODEC_NAMES,
        ["ListenerPort", "LocalPathPort", "Path", "Protocol"]
    );
}

#[test]
fn consul_expose_round_trips_in_both_formats_with_their_own_names() {
    let c = common::consul_expose();
    let bytes = codec::encode(&c).unwrap();
    assert_eq!(&bytes[..7], b"\x81\xa5Paths");
    assert_eq!(codec::decode::<ConsulExposeConfig>(&bytes).unwrap(), c);
    let json = c.to_json();
    assert!(
        json.starts_with("{\"Path\":[{\"Path\":\"/health\""),
        "{json}"
    );
    assert!(!json.contains("Paths"), "{json}");
    assert_eq!(ConsulExposeConfig::from_json(&json).unwrap(), c);
    // A msgpack map keyed "Path" is not ConsulExposeConfig's list: the key is
    // unknown on the wire and ignored, so nothing leaks across formats.
    let wrong = mp(&json!({"Path": [{"Path": "/x"}]}));
    assert_eq!(
        codec::decode::<ConsulExposeConfig>(&wrong).unwrap().paths,
        vec![]
    );
    assert_eq!(
        ConsulExposeConfig::from_json("{\"Path\":null}")
            .unwrap()
            .paths,
        vec![]
    );
    assert!(ConsulExposeConfig::from_json("{\"Path\":[1]}").is_err());
}

fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_-]{0,12}",
        ".{0,40}",
        "[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}",
        "[a-z]{250,300}",
    ]
}

prop_compose! {
    fn arb_request()(
        strings in proptest::collection::vec(arb_string(), 14),
        audience in proptest::collection::vec(arb_string(), 0..4),
        env in any::<bool>(), file in any::<bool>(), ttl in any::<i64>(),
        has_job in any::<bool>(),
        meta in proptest::collection::btree_map(arb_string(), arb_string(), 0..3),
        extra_claims in proptest::collection::vec(arb_string(), 0..3),
        node in proptest::option::of(proptest::collection::vec(arb_string(), 6)),
        vault in proptest::option::of(proptest::collection::vec(arb_string(), 3)),
        consul in proptest::option::of(arb_string()),
    ) -> IssueRequest {
        let s = |i: usize| strings[i].clone();
        IssueRequest {
            region: s(0),
            allocation: Allocation {
                id: s(1), namespace: s(2), job_id: s(3), task_group: s(4),
                client_status: s(5), desired_status: s(6),
                job: has_job.then(|| Job {
                    id: s(7), parent_id: s(8), node_pool: s(3),
                    meta: workload_identity::model::StringMap(meta),
                }),
            },
            task: s(9), service: s(10),
            proof_key: None,
            node: node.map(|n| workload_identity::model::Node {
                datacenter: n[0].clone(), id: n[1].clone(), name: n[2].clone(),
                node_class: n[3].clone(), node_pool: n[4].clone(), status: n[5].clone(),
            }),
            vault: vault.map(|v| workload_identity::model::Vault {
                cluster: v[0].clone(), namespace: v[1].clone(), role: v[2].clone(),
            }),
            consul: consul.map(|namespace| workload_identity::model::Consul { namespace }),
            identity: WorkloadIdentity {
                name: s(11), audience, change_mode: s(12), change_signal: s(13),
                env, file, service_name: s(0), ttl: workload_identity::model::GoDuration::from_nanos(ttl),
                filepath: s(2), extra_claims,
            },
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_request_round_trips(r in arb_request()) {
        let bytes = codec::encode(&r).unwrap();
        prop_assert_eq!(codec::decode::<IssueRequest>(&bytes).unwrap(), r);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for name in VECTORS {
            let _ = decode_as(name, &bytes);
        }
    }

    #[test]
    fn mutated_vectors_decode_whole_or_fail(
        which in 0..VECTORS.len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let name = VECTORS[which];
        let mut bytes = common::go_vector(name);
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        // If it decodes, the value is whole: it re-encodes and decodes to itself.
        if let Ok(r) = codec::decode::<IssueRequest>(&bytes) {
            let again = codec::encode(&r).unwrap();
            prop_assert_eq!(codec::decode::<IssueRequest>(&again).unwrap(), r);
        }
        let _ = decode_as(name, &bytes);
    }
}
