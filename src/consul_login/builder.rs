//! [`ConsulLoginBuilder`]: a [`ConsulLogin`]'s settings, each checked when
//! it is built.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::api::Api;
use super::{
    Consul, ConsulLogin, DEFAULT_LEEWAY, DEFAULT_MIN_TTL, META_NODE_ID, META_REQUESTED_BY,
};
use crate::error::{Error, Result, truncate_for_message};
use crate::login::{Login, Settings, common_setters};
use crate::manager::IdentityId;
use crate::vault_http::is_path_byte;

/// Builds a [`ConsulLogin`].
#[derive(Clone)]
pub struct ConsulLoginBuilder {
    common: Settings,
    auth_method: String,
    namespace: Option<String>,
    partition: Option<String>,
    datacenter: Option<String>,
    meta: BTreeMap<String, String>,
    service: bool,
    node_id: Option<String>,
    leeway: Duration,
}

impl fmt::Debug for ConsulLoginBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsulLoginBuilder")
            .field("addr", &crate::vault_http::shown_addr(&self.common.addr))
            .field("identity", &self.common.identity)
            .field("auth_method", &self.auth_method)
            .field("name", &self.common.name)
            .field("namespace", &self.namespace)
            .field("partition", &self.partition)
            .field("datacenter", &self.datacenter)
            .field("meta", &self.meta)
            .field("service", &self.service)
            .field("node_id", &self.node_id)
            .field("timeout", &self.common.timeout)
            .field("leeway", &self.leeway)
            .field("min_ttl", &self.common.min_ttl)
            .finish_non_exhaustive()
    }
}

impl ConsulLoginBuilder {
    /// The defaults for [`ConsulLogin::builder`].
    pub(super) fn new(addr: &str, identity: IdentityId, auth_method: &str) -> Self {
        ConsulLoginBuilder {
            common: Settings::new(addr, identity, "consul", DEFAULT_MIN_TTL),
            auth_method: auth_method.to_string(),
            namespace: None,
            partition: None,
            datacenter: None,
            meta: BTreeMap::new(),
            service: false,
            node_id: None,
            leeway: DEFAULT_LEEWAY,
        }
    }

    common_setters!("ConsulLogin", "consul", "agent", "Consul token");

    /// The Consul Enterprise namespace to log in to (the login's
    /// `Namespace`, and `ns` on the token calls); default none (the
    /// agent's).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// The Consul Enterprise admin partition to log in to (the login's
    /// `Partition`, and `partition` on the token calls); default none.
    pub fn partition(mut self, partition: &str) -> Self {
        self.partition = Some(partition.to_string());
        self
    }

    /// The datacenter to log in to (`dc` on every call); default the
    /// agent's own.
    pub fn datacenter(mut self, datacenter: &str) -> Self {
        self.datacenter = Some(datacenter.to_string());
        self
    }

    /// Adds `key` = `value` to the login's `Meta` (Consul puts it in the
    /// token's `Description`). A key given here replaces the one derived
    /// ([`META_REQUESTED_BY`], [`META_NODE_ID`]).
    pub fn meta(mut self, key: &str, value: &str) -> Self {
        self.meta.insert(key.to_string(), value.to_string());
        self
    }

    /// Whether the identity's workload is a service (`requested_by` =
    /// `nomad_service_<workload>`) rather than a task (`nomad_task_<workload>`,
    /// the default), as Nomad sends.
    pub fn service(mut self, service: bool) -> Self {
        self.service = service;
        self
    }

    /// The client node's ID, sent as `Meta` [`META_NODE_ID`] (as Nomad 2.0.5
    /// and later do); default none.
    pub fn node_id(mut self, node_id: &str) -> Self {
        self.node_id = Some(node_id.to_string());
        self
    }

    /// The least life an identity token must have left to be sent (default
    /// 5 s): a login with one that expires sooner fails at once, without a
    /// request (it could expire on its way, or by Consul's clock). Match the
    /// auth method's `ClockSkewLeeway` if you want no login Consul could
    /// refuse as expired.
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// The least life a Consul token must have left (default 10 s): a saved
    /// token with less after a restore is replaced, and a new login is made
    /// at least this long before a token's `ExpirationTime` (two thirds into
    /// its life when that is earlier). Keep it well below the auth method's
    /// `MaxTokenTTL`.
    pub fn min_ttl(mut self, min_ttl: Duration) -> Self {
        self.common.min_ttl = min_ttl;
        self
    }

    /// The exchange, after checking the address, names and `Meta`.
    pub fn build(self) -> Result<ConsulLogin> {
        let bad = |field: &str, why: String| Error::invalid("ConsulLogin", field, why);
        self.common.check_addr(
            "ConsulLogin",
            "a login carries the identity token and its answer a Consul token",
        )?;
        if self.auth_method.is_empty()
            || self.auth_method.len() > 128
            || !self.auth_method.bytes().all(is_path_byte)
        {
            return Err(bad(
                "auth_method",
                format!(
                    "{:?} is not an auth method name (1 to 128 letters, digits, '-', '_' and '.')",
                    truncate_for_message(&self.auth_method)
                ),
            ));
        }
        for (field, value) in [
            ("namespace", &self.namespace),
            ("partition", &self.partition),
            ("datacenter", &self.datacenter),
        ] {
            if let Some(v) = value {
                if v.is_empty() || v.len() > 64 || !v.bytes().all(is_path_byte) {
                    return Err(bad(
                        field,
                        format!(
                            "{:?} is not a {field} name (1 to 64 letters, digits, '-', '_' and '.')",
                            truncate_for_message(v)
                        ),
                    ));
                }
            }
        }
        let mut meta = BTreeMap::new();
        if !self.meta.contains_key(META_REQUESTED_BY) {
            if self.common.identity.workload.is_empty() {
                return Err(bad(
                    "meta",
                    format!(
                        "identity {} names no workload, so Meta {META_REQUESTED_BY:?} (nomad_task_<task> or nomad_service_<service>) cannot be derived; name the workload, or give it with .meta({META_REQUESTED_BY:?}, ...)",
                        self.common.identity
                    ),
                ));
            }
            let kind = if self.service { "service" } else { "task" };
            meta.insert(
                META_REQUESTED_BY.to_string(),
                format!("nomad_{kind}_{}", self.common.identity.workload),
            );
        }
        if let Some(node) = &self.node_id {
            if node.is_empty() || node.len() > 128 {
                return Err(bad(
                    "node_id",
                    format!(
                        "{:?} is not a node ID (1 to 128 bytes, e.g. the client's UUID)",
                        truncate_for_message(node)
                    ),
                ));
            }
            meta.insert(META_NODE_ID.to_string(), node.clone());
        }
        for (k, v) in &self.meta {
            if k.is_empty() || k.len() > 128 || v.len() > 512 {
                return Err(bad(
                    "meta",
                    format!(
                        "Meta {:?} = {:?}: a key must have 1 to 128 bytes and a value at most 512",
                        truncate_for_message(k),
                        truncate_for_message(v)
                    ),
                ));
            }
            meta.insert(k.clone(), v.clone());
        }
        if meta.len() > 64 {
            return Err(bad(
                "meta",
                format!("{} Meta entries; at most 64 are sent", meta.len()),
            ));
        }
        let name = self.common.name.clone();
        let built = self.common.finish("ConsulLogin")?;
        Ok(ConsulLogin {
            login: Login {
                common: built.common,
                server: Consul {
                    name,
                    auth_method: self.auth_method,
                    meta,
                    leeway: self.leeway,
                    api: Api {
                        agent: built.agent,
                        addr: built.addr,
                        namespace: self.namespace,
                        partition: self.partition,
                        datacenter: self.datacenter,
                        ca_bundle_given: built.ca_bundle_given,
                    },
                },
            },
        })
    }
}
