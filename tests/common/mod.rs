//! Sample values shared by the integration tests. They are the same values the
//! Go program in `tests/go/msgpack/main.go` writes and expects.
#![allow(dead_code)]

pub mod identity;

use workload_identity::model::{
    Allocation, Consul, ConsulExposeConfig, ConsulExposePath, GoDuration, IssueRequest, Job, Node,
    NodeIdentityRequest, Vault, WorkloadIdentity,
};

pub const ALLOC_ID: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
pub const CHILD_JOB_ID: &str = "web/dispatch-1700000000-abcd1234";
pub const NODE_ID: &str = "9d1e6a44-1111-2222-3333-444444444444";

/// The allocation view (the Go sample with its extra fields dropped).
pub fn allocation() -> Allocation {
    Allocation {
        id: ALLOC_ID.into(),
        namespace: "default".into(),
        job_id: CHILD_JOB_ID.into(),
        job: Some(Job {
            id: CHILD_JOB_ID.into(),
            parent_id: "web".into(),
            meta: [("owner", "team-a")].into_iter().collect(),
            ..Job::default()
        }),
        task_group: "frontend".into(),
        desired_status: "run".into(),
        client_status: "running".into(),
    }
}

pub fn workload_identity() -> WorkloadIdentity {
    WorkloadIdentity {
        name: "vault_default".into(),
        audience: vec!["vault.io".into(), "consul.io".into()],
        change_mode: "signal".into(),
        change_signal: "SIGHUP".into(),
        env: true,
        file: true,
        service_name: String::new(),
        ttl: GoDuration::from_secs(3600),
        filepath: "secrets/vault.jwt".into(),
        extra_claims: Vec::new(),
    }
}

pub fn workload_identity_zero() -> WorkloadIdentity {
    WorkloadIdentity {
        name: "default".into(),
        ..WorkloadIdentity::default()
    }
}

pub fn issue_request_task() -> IssueRequest {
    IssueRequest {
        region: "global".into(),
        allocation: allocation(),
        task: "server".into(),
        service: String::new(),
        proof_key: None,
        node: None,
        vault: None,
        consul: None,
        identity: workload_identity(),
    }
}

pub fn issue_request_service() -> IssueRequest {
    IssueRequest {
        region: "eu-west".into(),
        allocation: allocation(),
        task: String::new(),
        service: "web-api".into(),
        proof_key: None,
        node: None,
        vault: None,
        consul: None,
        identity: WorkloadIdentity {
            name: "consul-service_web-api".into(),
            audience: vec!["consul.io".into()],
            ttl: GoDuration::from_secs(90 * 60),
            ..WorkloadIdentity::default()
        },
    }
}

/// The task request with the Nomad 2.0.3 fields set (Go's
/// `extraIssueRequest` view): the job's `Meta` (one entry, so Go's bytes are
/// deterministic) and `NodePool`, the identity's `ExtraClaims`, and the `Node`
/// (Go also sends `HTTPAddr`, which the view ignores).
pub fn issue_request_extra() -> IssueRequest {
    let mut r = issue_request_task();
    let job = r.allocation.job.as_mut().expect("the sample has a Job");
    job.node_pool = "gpu".into();
    r.identity.extra_claims = vec!["dc".into(), "owner".into()];
    r.node = Some(sample_node());
    r
}

/// The task request with the Nomad 2.x blocks of the exchange claims (Go's
/// `exchangeIssueRequest` view): the task's Vault block and the Consul block
/// (Go also sends the Vault block's `Env`, `ChangeMode`, ... and the Consul
/// block's `Cluster` and `Partition`, which the view ignores).
pub fn issue_request_exchange() -> IssueRequest {
    IssueRequest {
        vault: Some(Vault {
            cluster: "default".into(),
            namespace: "engineering/web".into(),
            role: "nomad-web".into(),
        }),
        consul: Some(Consul {
            namespace: "web-team".into(),
        }),
        ..issue_request_task()
    }
}

/// The node of the extra request (Go's `sampleNode` view).
pub fn sample_node() -> Node {
    Node {
        datacenter: "dc1".into(),
        id: NODE_ID.into(),
        name: "client-gpu-1".into(),
        node_class: "gpu-a100".into(),
        node_pool: "gpu".into(),
        status: "ready".into(),
    }
}

/// The node identity request (Go's `nodeIdentityRequest` view): the sample
/// node, two audiences, a 12-hour TTL (Go also sends `AuthToken` and the
/// node's `HTTPAddr`, which the view ignores).
pub fn node_identity_request() -> NodeIdentityRequest {
    NodeIdentityRequest {
        audience: vec!["nomadproject.io".into(), "consul.io".into()],
        node: sample_node(),
        region: "global".into(),
        ttl: GoDuration::from_secs(12 * 3600),
    }
}

pub fn consul_expose() -> ConsulExposeConfig {
    ConsulExposeConfig {
        paths: vec![
            ConsulExposePath {
                path: "/health".into(),
                protocol: "http".into(),
                local_path_port: 8080,
                listener_port: "health".into(),
            },
            ConsulExposePath {
                path: "/metrics".into(),
                protocol: "http2".into(),
                local_path_port: 9102,
                listener_port: "metrics".into(),
            },
        ],
    }
}

/// The repository's `tests/vectors` (these helpers also serve the C ABI's
/// tests, in `ffi/`, one directory below).
pub fn vectors_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("tests/vectors"))
        .find(|d| d.join("msgpack").is_dir())
        .expect("tests/vectors/msgpack in this package or above it")
}

/// Reads a committed Go vector.
pub fn go_vector(name: &str) -> Vec<u8> {
    let path = vectors_dir().join("msgpack").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A committed RSA-2048 PKCS#8 private key (e = 65537), generated by Python
/// `cryptography`.
pub const RSA_PKCS8: &[u8] = include_bytes!("../vectors/rsa2048.pk8");

/// A key of `alg` with ID `kid`: 32 bytes of `byte` (HKDF v1) for EdDSA and
/// ES256, the committed RSA key (PKCS#8) for RS256.
pub fn alg_key(
    alg: workload_identity::Algorithm,
    kid: &str,
    byte: u8,
    state: workload_identity::KeyState,
    create_time: i64,
) -> workload_identity::RootKey {
    use workload_identity::{Algorithm, KeyDerivation, KeyId, KeyMaterial, RootKey};
    let (material, derivation) = match alg {
        Algorithm::Rs256 => (
            KeyMaterial::from_pkcs8_der(RSA_PKCS8).unwrap(),
            KeyDerivation::Pkcs8,
        ),
        _ => (
            KeyMaterial::from_slice(&[byte; 32]).unwrap(),
            KeyDerivation::HkdfV1,
        ),
    };
    RootKey::for_algorithm(
        alg,
        KeyId::new(kid).unwrap(),
        material,
        derivation,
        state,
        create_time,
    )
}
