//! Nomad's Consul types: the `consul` block of a task or group, and
//! `ConsulExposeConfig`, the type whose msgpack and JSON names differ.
//!
//! On the msgpack wire the expose block's list is `Paths`; in Nomad's JSON
//! API it is `Path`. The JSON form lives in [`crate::model::json`]; this is
//! the wire form only.

use crate::codec::wire_struct;

wire_struct! {
    /// A task's or group's `consul` block (Nomad's `Consul`; Go sends the
    /// whole struct, and its other keys, `Cluster` and `Partition`, are
    /// ignored).
    ///
    /// Nomad's servers write `Namespace` into a Consul identity's claims
    /// (`consul_namespace`; see
    /// [`IssueRequest::consul_for_claims`](crate::model::IssueRequest::consul_for_claims)).
    /// It is empty when the job sets none, and at most
    /// [`MAX_BLOCK_FIELD_BYTES`](crate::model::MAX_BLOCK_FIELD_BYTES) bytes.
    pub struct Consul {
        /// The Consul (Enterprise) namespace the workload's Consul tokens
        /// are for.
        pub namespace: String => "Namespace",
    }
}

wire_struct! {
    /// One exposed HTTP path of a Consul Connect sidecar (Nomad's `ConsulExposePath`).
    pub struct ConsulExposePath {
        /// The port the sidecar listens on, by port label.
        pub listener_port: String => "ListenerPort",
        /// The port the task serves the path on.
        pub local_path_port: i64 => "LocalPathPort",
        /// The HTTP path.
        pub path: String => "Path",
        /// `http` or `http2`.
        pub protocol: String => "Protocol",
    }
}

wire_struct! {
    /// The expose block of a Consul Connect sidecar (Nomad's `ConsulExposeConfig`).
    pub struct ConsulExposeConfig {
        /// The exposed paths: msgpack key `Paths` (JSON key `Path`, see the JSON view).
        pub paths: Vec<ConsulExposePath> => "Paths",
    }
}
