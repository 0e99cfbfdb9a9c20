//! An `IssueRequest` from a file: msgpack (what Go hosts send) or JSON.
//!
//! The JSON form is its own view type with Go's `encoding/json` names, kept
//! apart from the msgpack codec names as `model::json` keeps its views (the
//! library has no JSON view of `IssueRequest` yet; this one belongs there).
//! `TTL` is Go's JSON form, integer nanoseconds, or for people a duration
//! string (`"1h"`); unknown members are ignored, as Go sends whole structs.

use serde::Deserialize;
use workload_identity::ResultCode;
use workload_identity::model::{Allocation, GoDuration, IssueRequest, Job, WorkloadIdentity};

use crate::CliError;
use crate::output::parse_duration;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RequestJson {
    #[serde(rename = "Region")]
    region: String,
    #[serde(rename = "Allocation")]
    allocation: AllocationJson,
    #[serde(rename = "Task")]
    task: Option<String>,
    #[serde(rename = "Service")]
    service: Option<String>,
    #[serde(rename = "Identity")]
    identity: IdentityJson,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AllocationJson {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Namespace")]
    namespace: String,
    #[serde(rename = "JobID")]
    job_id: String,
    #[serde(rename = "TaskGroup")]
    task_group: String,
    #[serde(rename = "ClientStatus")]
    client_status: String,
    #[serde(rename = "DesiredStatus")]
    desired_status: String,
    #[serde(rename = "Job")]
    job: Option<JobJson>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JobJson {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "ParentID")]
    parent_id: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct IdentityJson {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Audience")]
    audience: Option<Vec<String>>,
    #[serde(rename = "TTL")]
    ttl: Option<TtlJson>,
    #[serde(rename = "ChangeMode")]
    change_mode: String,
    #[serde(rename = "ChangeSignal")]
    change_signal: String,
    #[serde(rename = "Env")]
    env: bool,
    #[serde(rename = "File")]
    file: bool,
    #[serde(rename = "Filepath")]
    filepath: String,
    #[serde(rename = "ServiceName")]
    service_name: String,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TtlJson {
    Nanos(i64),
    Text(String),
}

impl TtlJson {
    fn to_go(&self) -> Result<GoDuration, String> {
        match self {
            TtlJson::Nanos(n) => Ok(GoDuration(*n)),
            TtlJson::Text(s) => parse_duration(s).map(GoDuration::from),
        }
    }
}

impl RequestJson {
    fn into_wire(self) -> Result<IssueRequest, String> {
        let a = self.allocation;
        let i = self.identity;
        let ttl = match &i.ttl {
            Some(t) => t.to_go().map_err(|e| format!("Identity.TTL: {e}"))?,
            None => GoDuration::default(),
        };
        Ok(IssueRequest {
            region: self.region,
            allocation: Allocation {
                id: a.id,
                namespace: a.namespace,
                job_id: a.job_id,
                task_group: a.task_group,
                client_status: a.client_status,
                desired_status: a.desired_status,
                job: a.job.map(|j| Job {
                    id: j.id,
                    parent_id: j.parent_id,
                }),
            },
            task: self.task.unwrap_or_default(),
            service: self.service.unwrap_or_default(),
            identity: WorkloadIdentity {
                name: i.name,
                audience: i.audience.unwrap_or_default(),
                ttl,
                change_mode: i.change_mode,
                change_signal: i.change_signal,
                env: i.env,
                file: i.file,
                filepath: i.filepath,
                service_name: i.service_name,
            },
        })
    }
}

/// Which form a request file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Msgpack,
}

impl Format {
    /// JSON starts with `{` (after whitespace); a msgpack map never does
    /// (0x7b is a msgpack integer, which no IssueRequest is).
    pub(crate) fn sniff(bytes: &[u8]) -> Format {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Format::Json,
            _ => Format::Msgpack,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Json => "JSON",
            Format::Msgpack => "msgpack",
        }
    }
}

/// Decodes a request file in either form (not yet validated: issuing does that).
pub(crate) fn decode(bytes: &[u8], source: &str) -> Result<(IssueRequest, Format), CliError> {
    let format = Format::sniff(bytes);
    let req = match format {
        Format::Msgpack => workload_identity::codec::decode::<IssueRequest>(bytes)?,
        Format::Json => from_json(bytes).map_err(|e| {
            CliError::new(
                ResultCode::DecodeError,
                format!("cannot decode IssueRequest (JSON) from {source}: {e}"),
            )
        })?,
    };
    Ok((req, format))
}

fn from_json(bytes: &[u8]) -> Result<IssueRequest, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let view: RequestJson = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        format!("at {path}: {}", e.into_inner())
    })?;
    de.end().map_err(|e| e.to_string())?;
    view.into_wire()
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{
        "Region": "global",
        "Allocation": {"ID": "a1", "Namespace": "default", "JobID": "web",
                       "TaskGroup": "g", "ClientStatus": "running", "Unknown": [1, 2],
                       "Job": {"ID": "web", "ParentID": "parent"}},
        "Task": "server",
        "Service": null,
        "Identity": {"Name": "vault_default", "Audience": ["vault.io"], "TTL": "1h"}
    }"#;

    #[test]
    fn json_and_msgpack_give_the_same_request() {
        let (from_json, f) = decode(JSON.as_bytes(), "test").unwrap();
        assert_eq!(f, Format::Json);
        assert_eq!(from_json.identity.ttl, GoDuration::from_secs(3600));
        assert_eq!(
            from_json.allocation.job.as_ref().unwrap().parent_id,
            "parent"
        );
        let bytes = workload_identity::codec::encode(&from_json).unwrap();
        let (from_msgpack, f) = decode(&bytes, "test").unwrap();
        assert_eq!(f, Format::Msgpack);
        assert_eq!(from_msgpack, from_json);
    }

    #[test]
    fn ttl_in_go_nanoseconds() {
        let json = JSON.replace(r#""1h""#, "3600000000000");
        let (req, _) = decode(json.as_bytes(), "test").unwrap();
        assert_eq!(req.identity.ttl, GoDuration::from_secs(3600));
    }

    #[test]
    fn errors_name_the_field() {
        let e = decode(br#"{"Identity": {"TTL": "an hour"}}"#, "r.json").unwrap_err();
        assert_eq!(e.code, ResultCode::DecodeError);
        assert!(e.message.contains("Identity.TTL"), "{}", e.message);
        let e = decode(br#"{"Region": 5}"#, "r.json").unwrap_err();
        assert!(e.message.contains("r.json"), "{}", e.message);
        assert!(e.message.contains("at Region"), "{}", e.message);
    }
}
