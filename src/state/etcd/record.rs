//! What etcd's gateway answers, and what an allocation record means.
//!
//! The gateway writes protobuf JSON: int64 fields as strings, fields equal to
//! their zero value left out. Record decoding is the one place that turns a
//! stored value into an [`AllocState`], for direct reads and the mirror alike.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer};

use crate::codec;
use crate::model::Allocation;
use crate::state::{AllocState, NodeState};

/// An int64 as protobuf JSON writes it: a string, or (leniently) a number.
pub(crate) fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int64 {
        Text(String),
        Number(i64),
    }
    match Int64::deserialize(d)? {
        Int64::Number(n) => Ok(n),
        Int64::Text(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

/// A response header: the store's revision when the answer was made.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Header {
    #[serde(default, deserialize_with = "int64")]
    pub revision: i64,
}

/// One key-value pair (base64 key and value).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Kv {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
    #[serde(default, deserialize_with = "int64")]
    pub mod_revision: i64,
}

/// `/v3/kv/range`'s answer.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RangeResponse {
    #[serde(default)]
    pub header: Header,
    #[serde(default)]
    pub kvs: Vec<Kv>,
    #[serde(default)]
    pub more: bool,
    #[serde(default, deserialize_with = "int64")]
    pub count: i64,
}

/// The base64 text of `bytes`, as the gateway takes keys and values.
pub(crate) fn b64(bytes: impl AsRef<[u8]>) -> String {
    STANDARD.encode(bytes)
}

/// The bytes behind a base64 field of an answer.
pub(crate) fn unb64(field: &str, text: &str) -> Result<Vec<u8>, String> {
    STANDARD
        .decode(text)
        .map_err(|e| format!("bad base64 in {field}: {}", crate::error::b64::problem(e)))
}

/// The state a record stored under allocation `alloc_id` gives, or why it
/// gives none (the caller fails closed for that allocation).
pub(crate) fn decode_record(alloc_id: &str, value: &[u8]) -> Result<AllocState, String> {
    let shown = crate::error::truncate_for_message(alloc_id);
    let alloc: Allocation =
        codec::decode(value).map_err(|e| format!("record of allocation {shown:?}: {e}"))?;
    if alloc.id != alloc_id {
        return Err(format!(
            "record under allocation {shown:?} is for {:?}",
            crate::error::truncate_for_message(&alloc.id)
        ));
    }
    let status = alloc
        .client_status()
        .map_err(|e| format!("record of allocation {shown:?}: {e}"))?;
    Ok(if status.is_terminal() {
        AllocState::Terminal
    } else {
        AllocState::Live
    })
}

/// The state a record stored under node `node_id` gives, or why it gives
/// none (the caller fails closed for that node): a `Node` (codec names) whose
/// `ID` is `node_id` and whose `Status` Nomad defines.
pub(crate) fn decode_node_record(node_id: &str, value: &[u8]) -> Result<NodeState, String> {
    let shown = crate::error::truncate_for_message(node_id);
    let node: crate::model::Node =
        codec::decode(value).map_err(|e| format!("record of node {shown:?}: {e}"))?;
    if node.id != node_id {
        return Err(format!(
            "record under node {shown:?} is for {:?}",
            crate::error::truncate_for_message(&node.id)
        ));
    }
    match node.status.as_str() {
        "ready" | "initializing" | "disconnected" | "down" => Ok(NodeState::of(&node)),
        other => Err(format!(
            "record of node {shown:?}: unknown status {:?}: expected one of initializing, ready, down, disconnected",
            crate::error::truncate_for_message(other)
        )),
    }
}

/// The first key after every key that starts with `prefix` (etcd's
/// `range_end` for a prefix read).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from `prefix` on.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end(b"/nomad/allocations/"), b"/nomad/allocations0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
    }

    #[test]
    fn int64_fields_take_protobuf_strings_and_numbers() {
        let h: Header = serde_json::from_str(r#"{"revision":"42"}"#).unwrap();
        assert_eq!(h.revision, 42);
        let h: Header = serde_json::from_str(r#"{"revision":7}"#).unwrap();
        assert_eq!(h.revision, 7);
        let h: Header = serde_json::from_str(r#"{}"#).unwrap();
        assert_eq!(h.revision, 0);
        assert!(serde_json::from_str::<Header>(r#"{"revision":"4x"}"#).is_err());
    }

    #[test]
    fn node_records_give_their_state_and_fail_closed_otherwise() {
        let mut n = crate::model::Node {
            id: "n1".into(),
            status: "ready".into(),
            ..Default::default()
        };
        let enc = |n: &crate::model::Node| codec::encode(n).unwrap();
        assert_eq!(decode_node_record("n1", &enc(&n)), Ok(NodeState::Live));
        for (status, state) in [
            ("initializing", NodeState::Live),
            ("disconnected", NodeState::Live),
            ("down", NodeState::Down),
        ] {
            n.status = status.into();
            assert_eq!(decode_node_record("n1", &enc(&n)), Ok(state), "{status}");
        }
        let e = decode_node_record("n2", &enc(&n)).unwrap_err();
        assert!(e.contains("is for \"n1\""), "{e}");
        n.status = "Ready".into();
        let e = decode_node_record("n1", &enc(&n)).unwrap_err();
        assert!(e.contains("unknown status \"Ready\""), "{e}");
        assert!(decode_node_record("n1", b"\xc1").is_err());
    }

    #[test]
    fn a_record_for_another_allocation_or_status_fails_closed() {
        let mut a = crate::model::Allocation {
            id: "a1".into(),
            client_status: "running".into(),
            ..Default::default()
        };
        assert_eq!(
            decode_record("a1", &codec::encode(&a).unwrap()),
            Ok(AllocState::Live)
        );
        let e = decode_record("a2", &codec::encode(&a).unwrap()).unwrap_err();
        assert!(e.contains("is for \"a1\""), "{e}");
        a.client_status = "complete".into();
        assert_eq!(
            decode_record("a1", &codec::encode(&a).unwrap()),
            Ok(AllocState::Terminal)
        );
        a.client_status = "hibernating".into();
        let e = decode_record("a1", &codec::encode(&a).unwrap()).unwrap_err();
        assert!(e.contains("record of allocation \"a1\""), "{e}");
        let e = decode_record("a1", b"\xc1").unwrap_err();
        assert!(e.contains("record of allocation"), "{e}");
    }
}
