//! An `IssueRequest` from a file: msgpack (what Go hosts send) or JSON.
//!
//! JSON is read by the wire types' own deserializer: their codec names are
//! the Go field names, which Go's `encoding/json` uses too (Nomad's structs
//! carry no json tags). As in Go, a member matches its field without regard
//! to case (`"Taskgroup"` is `TaskGroup`), an exact match first; two members
//! naming one field are refused. `TTL` is Go's JSON form, integer
//! nanoseconds, or for people a duration string (`"1h"`); unknown members are
//! ignored, as Go sends whole structs.

use workload_identity::ResultCode;
use workload_identity::codec::WireType;
use workload_identity::model::{
    Allocation, GoDuration, IssueRequest, Job, Node, ProofKey, WorkloadIdentity,
};

use crate::CliError;
use crate::output::parse_duration;

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

/// Renames the members of `value` (an object of a type with `names`) that
/// match a field only without regard to case to the field's own name, as
/// Go's `encoding/json` matches them; then the same below, for the members
/// that are wire types themselves.
fn fold_case(value: &mut serde_json::Value, names: &[&str], at: &str) -> Result<(), String> {
    let Some(obj) = value.as_object_mut() else {
        return Ok(());
    };
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        if names.contains(&key.as_str()) {
            continue;
        }
        let Some(field) = names.iter().find(|n| n.eq_ignore_ascii_case(&key)) else {
            continue;
        };
        if obj.contains_key(*field) {
            return Err(format!(
                "{at}{key} and {at}{field} name the same field (names match without regard to case, as in Go); give it once"
            ));
        }
        if let Some(v) = obj.remove(&key) {
            obj.insert((*field).to_string(), v);
        }
    }
    // Job.Meta's keys are the job's own and keep their case.
    let nested: [(&str, &[&str]); 7] = [
        ("Allocation", Allocation::CODEC_NAMES),
        ("Job", Job::CODEC_NAMES),
        ("Identity", WorkloadIdentity::CODEC_NAMES),
        ("ProofKey", ProofKey::CODEC_NAMES),
        ("Node", Node::CODEC_NAMES),
        ("Vault", workload_identity::model::Vault::CODEC_NAMES),
        ("Consul", workload_identity::model::Consul::CODEC_NAMES),
    ];
    for (field, inner) in nested {
        if names.contains(&field)
            && let Some(v) = obj.get_mut(field)
        {
            fold_case(v, inner, &format!("{at}{field}."))?;
        }
    }
    Ok(())
}

/// A JSON document in which no object names a member twice (serde_json's
/// `Value` would keep the last one silently; the msgpack decoder refuses
/// duplicates, and so does this).
struct NoDuplicates;

impl<'de> serde::Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NoDuplicates, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NoDuplicates;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, _: bool) -> Result<NoDuplicates, E> {
                Ok(NoDuplicates)
            }
            fn visit_i64<E>(self, _: i64) -> Result<NoDuplicates, E> {
                Ok(NoDuplicates)
            }
            fn visit_u64<E>(self, _: u64) -> Result<NoDuplicates, E> {
                Ok(NoDuplicates)
            }
            fn visit_f64<E>(self, _: f64) -> Result<NoDuplicates, E> {
                Ok(NoDuplicates)
            }
            fn visit_str<E>(self, _: &str) -> Result<NoDuplicates, E> {
                Ok(NoDuplicates)
            }
            fn visit_unit<E>(self) -> Result<NoDuplicates, E> {
                Ok(NoDuplicates)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<NoDuplicates, A::Error> {
                while seq.next_element::<NoDuplicates>()?.is_some() {}
                Ok(NoDuplicates)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<NoDuplicates, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format_args!(
                            "member {:?} appears twice in one object",
                            key.chars().take(64).collect::<String>()
                        )));
                    }
                    map.next_value::<NoDuplicates>()?;
                }
                Ok(NoDuplicates)
            }
        }
        d.deserialize_any(V)
    }
}

fn from_json(bytes: &[u8]) -> Result<IssueRequest, String> {
    serde_json::from_slice::<NoDuplicates>(bytes).map_err(|e| e.to_string())?;
    let mut json: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    fold_case(&mut json, IssueRequest::CODEC_NAMES, "")?;
    // A duration string for people ("1h") becomes Go's nanoseconds.
    if let Some(ttl) = json.pointer_mut("/Identity/TTL")
        && let Some(text) = ttl.as_str()
    {
        let d = parse_duration(text).map_err(|e| format!("Identity.TTL: {e}"))?;
        *ttl = GoDuration::from(d).as_nanos().into();
    }
    // The wire types deserialize by their codec names, which are Go's field
    // names: the same in Go's encoding/json as in its msgpack.
    serde_path_to_error::deserialize::<_, IssueRequest>(json).map_err(|e| {
        let path = e.path().to_string();
        format!("at {path}: {}", e.into_inner())
    })
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
    fn a_member_named_twice_is_refused_at_any_depth() {
        for twice in [
            JSON.replace(
                r#""Task": "server","#,
                r#""Task": "server", "Task": "other","#,
            ),
            JSON.replace(
                r#""ParentID": "parent""#,
                r#""ParentID": "parent", "Meta": {"k": "a", "k": "b"}"#,
            ),
        ] {
            let e = decode(twice.as_bytes(), "r.json").unwrap_err();
            assert!(e.message.contains("appears twice"), "{}", e.message);
        }
    }

    #[test]
    fn ttl_in_go_nanoseconds() {
        let json = JSON.replace(r#""1h""#, "3600000000000");
        let (req, _) = decode(json.as_bytes(), "test").unwrap();
        assert_eq!(req.identity.ttl, GoDuration::from_secs(3600));
    }

    #[test]
    fn member_names_match_without_regard_to_case_as_in_go() {
        let lower = JSON
            .replace("\"TaskGroup\"", "\"Taskgroup\"")
            .replace("\"Identity\"", "\"identity\"")
            .replace("\"TTL\"", "\"ttl\"")
            .replace("\"ParentID\"", "\"parentId\"");
        let (folded, _) = decode(lower.as_bytes(), "test").unwrap();
        let (exact, _) = decode(JSON.as_bytes(), "test").unwrap();
        assert_eq!(folded, exact);
        // The Vault and Consul blocks, folded too.
        let blocks = JSON.replace(
            r#""Task": "server","#,
            r#""Task": "server", "vault": {"role": "r", "Namespace": "ns"}, "CONSUL": {"namespace": "c"},"#,
        );
        let (req, _) = decode(blocks.as_bytes(), "test").unwrap();
        let vault = req.vault.as_ref().unwrap();
        assert_eq!((vault.role.as_str(), vault.namespace.as_str()), ("r", "ns"));
        assert_eq!(req.consul.as_ref().unwrap().namespace, "c");
        assert_eq!(folded.allocation.task_group, "g");
        let e = decode(br#"{"Region": "global", "region": "other"}"#, "r.json").unwrap_err();
        assert!(
            e.message.contains("region and Region name the same field"),
            "{}",
            e.message
        );
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
