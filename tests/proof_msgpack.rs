//! Go interoperability of `IssueRequest.ProofKey`: the committed vector
//! `issue_request_proof_key.msgpack`, written by Go's go-msgpack
//! (`tests/go/msgpack/main.go`), decodes to the expected request and signs a
//! WIT bound to its key; the `ProofKey` map is byte for byte the form Go
//! writes, in Go's bytes and in ours; and Rust's encoding is written out for
//! the Go program to decode (`scripts/msgpack-vectors.sh check`).

mod common;

use std::path::PathBuf;

use workload_identity::codec;
use workload_identity::model::{IssueRequest, ProofKey, Workload};
use workload_identity::{Algorithm, Issuer, KeyState, Keyring};

const VECTOR: &str = "issue_request_proof_key.msgpack";

/// The key in the vector (Go's `sampleProofKey`): the P-256 public key of
/// the `p256-zero-uuid` vector in `tests/vectors/p256.json`, a point Python
/// `cryptography` computed.
fn proof_key() -> ProofKey {
    ProofKey {
        alg: "ES256".into(),
        crv: "P-256".into(),
        kty: "EC".into(),
        x: "Y6bejJX5OVzmFs_wlgXJc20GiGPjQavixp0fdgkQKEo".into(),
        y: "inaCvw7j3XRbcAKrBotHiA1rL06As33rDwfAArxVjo0".into(),
    }
}

/// What the vector holds, as the Rust view sees it (Go's
/// `proofKeyIssueRequest(viewAllocation())`).
fn expected() -> IssueRequest {
    IssueRequest {
        proof_key: Some(proof_key()),
        node: None,
        ..common::issue_request_task()
    }
}

/// The `ProofKey` entry as Go writes it: the key, then a 5-entry map of
/// old-spec raw strings (fixstr, and str16 for the 43-byte coordinates; never
/// str8), keys sorted.
fn proof_key_entry() -> Vec<u8> {
    fn raw(s: &str, out: &mut Vec<u8>) {
        if s.len() < 32 {
            out.push(0xa0 | s.len() as u8);
        } else {
            out.push(0xda);
            out.extend_from_slice(&(s.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(s.as_bytes());
    }
    let k = proof_key();
    let mut out = Vec::new();
    raw("ProofKey", &mut out);
    out.push(0x85);
    for (name, value) in [
        ("Alg", &k.alg),
        ("Crv", &k.crv),
        ("Kty", &k.kty),
        ("X", &k.x),
        ("Y", &k.y),
    ] {
        raw(name, &mut out);
        raw(value, &mut out);
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_go_vector_decodes_to_the_request_with_its_proof_key() {
    let go = common::go_vector(VECTOR);
    let r: IssueRequest = codec::decode(&go).expect("the Go vector decodes");
    assert_eq!(r, expected());
    // Field by field, so a failure says which one.
    let k = r.proof_key.as_ref().expect("ProofKey is present");
    assert_eq!(k.alg, "ES256");
    assert_eq!(k.crv, "P-256");
    assert_eq!(k.kty, "EC");
    assert_eq!(k.x, "Y6bejJX5OVzmFs_wlgXJc20GiGPjQavixp0fdgkQKEo");
    assert_eq!(k.y, "inaCvw7j3XRbcAKrBotHiA1rL06As33rDwfAArxVjo0");
    assert_eq!(r.workload().unwrap(), Workload::Task("server"));
    r.validate().unwrap();
    // The rest is the bearer-token sample: Go's encoder only added the key.
    assert_eq!(
        IssueRequest {
            proof_key: None,
            node: None,
            vault: None,
            consul: None,
            ..r.clone()
        },
        common::issue_request_task()
    );
}

#[test]
fn the_go_request_signs_a_wit_bound_to_its_key() {
    let keyring = Keyring::new();
    keyring
        .insert(
            common::alg_key(Algorithm::EdDsa, "k-ed", 7, KeyState::Active, 1_700_000_000)
                .with_purpose(workload_identity::KeyPurpose::Wit),
        )
        .unwrap();
    let r: IssueRequest = codec::decode(&common::go_vector(VECTOR)).unwrap();
    let issuer = Issuer::new(keyring)
        .trust_domain("nomad.example.com")
        .unwrap();
    let wit = issuer
        .issue_with(Algorithm::EdDsa, &r, 1_700_000_000)
        .expect("a usable P-256 key (the library checks the point)");
    let header = common::identity::decode_segment(&wit.token, 0);
    assert_eq!(header["typ"], "wit+jwt");
    let claims = common::identity::decode_segment(&wit.token, 1);
    assert_eq!(
        claims["cnf"]["jwk"],
        serde_json::json!({
            "kty": "EC",
            "crv": "P-256",
            "x": "Y6bejJX5OVzmFs_wlgXJc20GiGPjQavixp0fdgkQKEo",
            "y": "inaCvw7j3XRbcAKrBotHiA1rL06As33rDwfAArxVjo0",
            "alg": "ES256"
        })
    );
    assert_eq!(wit.claims.confirmation, Some(proof_key()));
}

#[test]
fn the_proof_key_entry_is_the_same_bytes_in_go_and_rust() {
    let entry = proof_key_entry();
    let go = common::go_vector(VECTOR);
    assert!(
        contains(&go, &entry),
        "Go's ProofKey entry differs from {entry:02x?}"
    );
    let ours = codec::encode(&expected()).unwrap();
    assert!(
        contains(&ours, &entry),
        "our ProofKey entry differs from {entry:02x?}"
    );
    // Go sorts keys: ProofKey comes right after Identity's map, and right
    // before Region, in both encodings.
    let region = b"\xa6Region\xa6global";
    for (who, bytes) in [("Go", &go), ("Rust", &ours)] {
        let at = bytes
            .windows(entry.len())
            .position(|w| w == entry.as_slice())
            .unwrap();
        assert_eq!(
            &bytes[at + entry.len()..at + entry.len() + region.len()],
            region,
            "{who}: Region follows ProofKey"
        );
        assert!(!bytes.contains(&0xd9), "{who}: no str8");
    }
    // Without a key the entry is omitted, in our encoding as in Go's.
    let bearer = codec::encode(&common::issue_request_task()).unwrap();
    assert!(!contains(&bearer, b"ProofKey"));
    assert!(!contains(
        &common::go_vector("issue_request_task.msgpack"),
        b"ProofKey"
    ));
    // Ours decodes back to the same request.
    assert_eq!(codec::decode::<IssueRequest>(&ours).unwrap(), expected());
}

/// Writes Rust's encoding for the Go side to check, beside the other Rust
/// encodings (`tests/msgpack_go_vectors.rs`). CI then runs
/// `scripts/msgpack-vectors.sh check target/tmp/rust-msgpack`.
#[test]
fn write_rust_encoding_for_go() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rust-msgpack");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(VECTOR), codec::encode(&expected()).unwrap()).unwrap();
}
