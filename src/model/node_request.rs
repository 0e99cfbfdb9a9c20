//! `NodeIdentityRequest`: what a host sends to have a client node's own
//! identity signed (Nomad 1.11's node identities).

use super::validate::Problems;
use super::{GoDuration, Node};
use crate::codec::wire_struct;
use crate::error::{Result, truncate_for_message};

/// Nomad's default audience for node identities.
pub const NODE_IDENTITY_AUDIENCE: &str = "nomadproject.io";

/// Nomad's default node identity lifetime (24 h).
pub const DEFAULT_NODE_IDENTITY_TTL: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);

wire_struct! {
    /// A request to sign the identity of one client node: a token whose
    /// claims are Nomad's node identity claims (`nomad_node_id`,
    /// `nomad_node_pool`, `nomad_node_class`, `nomad_node_datacenter`) and
    /// `sub` = `node:<region>:<node pool>:<node ID>:default`, as Nomad 1.11
    /// writes them.
    ///
    /// Fields are declared in codec-name order, the order Go's codec writes them.
    pub struct NodeIdentityRequest {
        /// The audiences; empty means Nomad's `nomadproject.io`.
        pub audience: Vec<String> => "Audience",
        /// The node (`ID`, `Datacenter` and `NodePool` required; `NodeClass`
        /// when it has one).
        pub node: Node => "Node",
        /// The region, part of `sub`.
        pub region: String => "Region",
        /// How long the token lives; zero means Nomad's default, 24 h. A node
        /// identity always expires.
        pub ttl: GoDuration => "TTL",
    }
}

impl NodeIdentityRequest {
    /// The audiences the token carries: the request's, or `nomadproject.io`.
    pub fn audiences(&self) -> Vec<String> {
        if self.audience.is_empty() {
            vec![NODE_IDENTITY_AUDIENCE.to_string()]
        } else {
            self.audience.clone()
        }
    }

    /// The lifetime in whole seconds: the request's TTL, or 24 h.
    pub fn ttl_secs(&self) -> i64 {
        match self.ttl.as_secs() {
            0 => DEFAULT_NODE_IDENTITY_TTL.as_secs() as i64,
            s => s,
        }
    }

    /// Checks the whole request, reporting every problem at once with its
    /// field path (`Node.ID`, `TTL`, ...).
    pub fn validate(&self) -> Result<()> {
        let mut p = Problems::new("NodeIdentityRequest");
        p.require("Region", &self.region);
        p.nested("Node", |p| {
            p.require("ID", &self.node.id);
            p.require("Datacenter", &self.node.datacenter);
            p.require("NodePool", &self.node.node_pool);
        });
        // The parts of sub are separated by ':'.
        for (field, value) in [
            ("Region", &self.region),
            ("Node.ID", &self.node.id),
            ("Node.NodePool", &self.node.node_pool),
        ] {
            if value.contains(':') {
                p.push(
                    field,
                    format!(
                        "must not contain ':' (it separates the parts of sub), got {:?}",
                        truncate_for_message(value)
                    ),
                );
            }
        }
        for (i, aud) in self.audience.iter().enumerate() {
            if aud.is_empty() {
                p.push(&format!("Audience[{i}]"), "must not be an empty string");
            }
        }
        let ttl = self.ttl.as_nanos();
        if ttl < 0 {
            p.push("TTL", format!("must be >= 0, got {ttl}ns"));
        } else if ttl > 0 && ttl < 1_000_000_000 {
            p.push(
                "TTL",
                format!(
                    "is {ttl}ns, under one second: a TTL is Go nanoseconds (time.Duration), so 24 hours is 86400000000000; 0 means Nomad's default, 24 h"
                ),
            );
        }
        p.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> NodeIdentityRequest {
        NodeIdentityRequest {
            region: "global".into(),
            node: Node {
                id: "da86421c-7de9-85e4-2f50-3b2bf95102c1".into(),
                datacenter: "dc1".into(),
                node_pool: "default".into(),
                ..Node::default()
            },
            ..NodeIdentityRequest::default()
        }
    }

    #[test]
    fn nomads_defaults_for_audience_and_ttl() {
        let r = valid();
        r.validate().unwrap();
        assert_eq!(r.audiences(), ["nomadproject.io"]);
        assert_eq!(r.ttl_secs(), 86_400);
        let r = NodeIdentityRequest {
            audience: vec!["consul.io".into()],
            ttl: GoDuration::from_secs(3600),
            ..valid()
        };
        assert_eq!(
            (r.audiences(), r.ttl_secs()),
            (vec!["consul.io".to_string()], 3600)
        );
    }

    #[test]
    fn every_problem_is_named() {
        let r = NodeIdentityRequest {
            region: "a:b".into(),
            audience: vec![String::new()],
            ttl: GoDuration::from_nanos(3600),
            ..NodeIdentityRequest::default()
        };
        let e = r.validate().unwrap_err().to_string();
        for f in [
            "Node.ID",
            "Node.Datacenter",
            "Node.NodePool",
            "Region",
            "Audience[0]",
            "TTL",
        ] {
            assert!(e.contains(f), "{f}: {e}");
        }
    }
}
