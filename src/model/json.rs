//! JSON views of wire types, kept apart from the msgpack names.
//!
//! JSON is never produced from a wire type: each JSON form is its own type with
//! its own names and `From` conversions to and from the wire type. That is what
//! keeps a JSON rename (`Path`) from ever reaching the msgpack wire (`Paths`).

use serde::{Deserialize, Serialize};

use super::{ConsulExposeConfig, ConsulExposePath};
use crate::error::{DecodeError, Error, Result};

/// JSON form of [`ConsulExposePath`] (same names as Go's `encoding/json`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsulExposePathJson {
    /// The HTTP path.
    #[serde(rename = "Path")]
    pub path: String,
    /// `http` or `http2`.
    #[serde(rename = "Protocol")]
    pub protocol: String,
    /// The port the task serves the path on.
    #[serde(rename = "LocalPathPort")]
    pub local_path_port: i64,
    /// The port the sidecar listens on, by port label.
    #[serde(rename = "ListenerPort")]
    pub listener_port: String,
}

/// JSON form of [`ConsulExposeConfig`]: the list is keyed `Path`, as in Nomad's API.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsulExposeConfigJson {
    /// The exposed paths (Go writes `null` for none).
    #[serde(rename = "Path", deserialize_with = "crate::codec::nil_as_default")]
    pub path: Vec<ConsulExposePathJson>,
}

impl From<&ConsulExposePath> for ConsulExposePathJson {
    fn from(w: &ConsulExposePath) -> Self {
        ConsulExposePathJson {
            path: w.path.clone(),
            protocol: w.protocol.clone(),
            local_path_port: w.local_path_port,
            listener_port: w.listener_port.clone(),
        }
    }
}

impl From<ConsulExposePathJson> for ConsulExposePath {
    fn from(j: ConsulExposePathJson) -> Self {
        ConsulExposePath {
            path: j.path,
            protocol: j.protocol,
            local_path_port: j.local_path_port,
            listener_port: j.listener_port,
        }
    }
}

impl From<&ConsulExposeConfig> for ConsulExposeConfigJson {
    fn from(w: &ConsulExposeConfig) -> Self {
        ConsulExposeConfigJson {
            path: w.paths.iter().map(Into::into).collect(),
        }
    }
}

impl From<ConsulExposeConfigJson> for ConsulExposeConfig {
    fn from(j: ConsulExposeConfigJson) -> Self {
        ConsulExposeConfig {
            paths: j.path.into_iter().map(Into::into).collect(),
        }
    }
}

impl ConsulExposeConfig {
    /// The JSON form, as Nomad's HTTP API writes it (`{"Path":[...]}`).
    pub fn to_json(&self) -> String {
        // Serializing plain strings and integers to a String cannot fail.
        serde_json::to_string(&ConsulExposeConfigJson::from(self)).unwrap_or_default()
    }

    /// Parses the JSON form.
    pub fn from_json(json: &str) -> Result<ConsulExposeConfig> {
        serde_json::from_str::<ConsulExposeConfigJson>(json)
            .map(Into::into)
            .map_err(|e| {
                Error::Decode(DecodeError {
                    type_name: "ConsulExposeConfig (JSON)",
                    path: String::new(),
                    reason: e.to_string(),
                })
            })
    }
}
