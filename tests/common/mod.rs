//! Sample values shared by the integration tests. They are the same values the
//! Go program in `tests/go/msgpack/main.go` writes and expects.
#![allow(dead_code)]

pub mod identity;

use workload_identity::model::{
    Allocation, ConsulExposeConfig, ConsulExposePath, GoDuration, IssueRequest, Job,
    WorkloadIdentity,
};

pub const ALLOC_ID: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
pub const CHILD_JOB_ID: &str = "web/dispatch-1700000000-abcd1234";

/// The allocation view (the Go sample with its extra fields dropped).
pub fn allocation() -> Allocation {
    Allocation {
        id: ALLOC_ID.into(),
        namespace: "default".into(),
        job_id: CHILD_JOB_ID.into(),
        job: Some(Job {
            id: CHILD_JOB_ID.into(),
            parent_id: "web".into(),
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
        identity: workload_identity(),
    }
}

pub fn issue_request_service() -> IssueRequest {
    IssueRequest {
        region: "eu-west".into(),
        allocation: allocation(),
        task: String::new(),
        service: "web-api".into(),
        identity: WorkloadIdentity {
            name: "consul-service_web-api".into(),
            audience: vec!["consul.io".into()],
            ttl: GoDuration::from_secs(90 * 60),
            ..WorkloadIdentity::default()
        },
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

/// Reads a committed Go vector.
pub fn go_vector(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/vectors/msgpack/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}
