//! Nomad's `ConsulExposeConfig`: the type whose msgpack and JSON names differ.
//!
//! On the msgpack wire its list is `Paths`; in Nomad's JSON API it is `Path`. The
//! JSON form lives in [`crate::model::json`]; this is the wire form only.

use crate::codec::wire_struct;

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
