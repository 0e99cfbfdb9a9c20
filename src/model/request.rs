//! `IssueRequest`: what a host sends to have an identity signed.

use super::validate::Problems;
use super::{Allocation, Consul, Vault, WorkloadIdentity};
use crate::codec::wire_struct;
use crate::error::{Error, Result};

wire_struct! {
    /// A request to sign one identity for one task or service of an allocation.
    ///
    /// Exactly one of `task` and `service` is set; an empty string counts as
    /// absent, because Go sends zero values rather than omitting fields.
    /// Fields are declared in codec-name order, the order Go's codec writes them.
    pub struct IssueRequest {
        /// The allocation the workload belongs to (`ID`, `Namespace`, `JobID`,
        /// `TaskGroup` and, for child jobs, `Job.ParentID` are used).
        pub allocation: Allocation => "Allocation",
        /// The `consul` block that applies to the workload: the task's, or
        /// the group's when the task has none or for a group service (Nomad
        /// reads them in that order). Nomad's `Consul`, under its codec
        /// name, so a Go host sends the block it already has, unchanged; it
        /// is one block, not the task's and the group's, because the claims
        /// read exactly one. Absent (nil) otherwise, and then left out of the
        /// encoding: requests without it encode and sign exactly as before.
        /// See [`IssueRequest::consul_for_claims`].
        #[serde(skip_serializing_if = "Option::is_none")]
        pub consul: Option<Consul> => "Consul",
        /// The identity block to sign.
        pub identity: WorkloadIdentity => "Identity",
        /// The node the allocation runs on, when the sender includes it
        /// (extra-claim templates read `${node.*}` from it). Absent (nil)
        /// otherwise, and then left out of the encoding.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub node: Option<super::Node> => "Node",
        /// The workload's public key, when it asks for a WIMSE workload
        /// identity token bound to that key (`cnf.jwk`) instead of a bearer
        /// token. Absent (nil) in every request that does not: those encode
        /// and sign exactly as before.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub proof_key: Option<super::ProofKey> => "ProofKey",
        /// The region, the first part of the token's `sub`.
        pub region: String => "Region",
        /// The service name, for a service identity.
        pub service: String => "Service",
        /// The task name, for a task identity.
        pub task: String => "Task",
        /// The task's `vault` block (Nomad's `Task.Vault`, under its codec
        /// name, so a Go host sends the block it already has, unchanged).
        /// Absent (nil) when the task has none, and then left out of the
        /// encoding: requests without it encode and sign exactly as before.
        /// See [`IssueRequest::vault_for_claims`].
        #[serde(skip_serializing_if = "Option::is_none")]
        pub vault: Option<Vault> => "Vault",
    }
}

/// The longest `Vault.Cluster`, `Vault.Namespace`, `Vault.Role` and
/// `Consul.Namespace` a request may carry, in bytes. Nomad sets no bound;
/// this one keeps a token's claims small (Vault namespaces nest, as paths,
/// so it is generous) and a mistaken value from reaching the claims.
pub const MAX_BLOCK_FIELD_BYTES: usize = 256;

/// Nomad's name prefix of the identities Vault tokens are derived with
/// (`structs.WorkloadIdentityVaultPrefix`): `vault_<cluster>`.
const VAULT_IDENTITY_PREFIX: &str = "vault_";

/// Nomad's name prefix of Consul identities (`structs.ConsulTaskIdentityNamePrefix`,
/// which `consul-service`, the services' prefix, also starts with).
const CONSUL_IDENTITY_PREFIX: &str = "consul";

/// The workload an identity is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload<'a> {
    /// A task, by name.
    Task(&'a str),
    /// A service, by name.
    Service(&'a str),
}

impl<'a> Workload<'a> {
    /// The task or service name.
    pub fn name(&self) -> &'a str {
        match self {
            Workload::Task(n) | Workload::Service(n) => n,
        }
    }
}

const EXACTLY_ONE: &str = "exactly one of Task and Service must be set";

impl IssueRequest {
    /// The task or service this request is for.
    pub fn workload(&self) -> Result<Workload<'_>> {
        match (self.task.is_empty(), self.service.is_empty()) {
            (false, true) => Ok(Workload::Task(&self.task)),
            (true, false) => Ok(Workload::Service(&self.service)),
            (true, true) => Err(Error::invalid(
                "IssueRequest",
                "Task",
                format!("{EXACTLY_ONE}, both are empty"),
            )),
            (false, false) => Err(Error::invalid(
                "IssueRequest",
                "Task",
                format!(
                    "{EXACTLY_ONE}, got Task {:?} and Service {:?}",
                    self.task, self.service
                ),
            )),
        }
    }

    /// The Vault block whose `Role` and `Namespace` the token carries as
    /// `vault_role` and `vault_namespace`, and whose fields templates read as
    /// `${vault.cluster}`, `${vault.namespace}` and `${vault.role}`: the
    /// request's [`vault`](IssueRequest::vault), for a task identity named
    /// `vault_<cluster>`; `None` for every other identity, which then
    /// carries neither claim and renders the three variables empty.
    ///
    /// This is Nomad's rule (`WorkloadIdentityClaimsBuilder.WithVault`): its
    /// servers add the task's Vault block only for an identity whose name
    /// starts with `vault_` and names a cluster after it, and only when
    /// signing a task's identities (never a service's, nor the default
    /// identity signed with the allocation). A Nomad server also requires
    /// that its configuration has a Vault cluster of that name with a
    /// default identity; a host whose servers have none leaves `Vault` out.
    pub fn vault_for_claims(&self) -> Option<&Vault> {
        let cluster = self.identity.name.strip_prefix(VAULT_IDENTITY_PREFIX)?;
        if cluster.is_empty() || !matches!(self.workload(), Ok(Workload::Task(_))) {
            return None;
        }
        self.vault.as_ref()
    }

    /// The Consul block whose `Namespace` the token carries as
    /// `consul_namespace`: the request's [`consul`](IssueRequest::consul),
    /// for an identity whose name starts with `consul` (`consul_<cluster>`
    /// for tasks, `consul-service_<service>` for services); `None` for every
    /// other identity. Nomad's rule (`WorkloadIdentityClaimsBuilder.WithConsul`),
    /// for tasks and services alike.
    pub fn consul_for_claims(&self) -> Option<&Consul> {
        if !self.identity.name.starts_with(CONSUL_IDENTITY_PREFIX) {
            return None;
        }
        self.consul.as_ref()
    }

    /// Checks the whole request, reporting every problem at once with its field
    /// path (`Allocation.ID`, `Identity.Name`, ...).
    pub fn validate(&self) -> Result<()> {
        let mut p = Problems::new("IssueRequest");
        p.require("Region", &self.region);
        p.nested("Allocation", |p| {
            let a = &self.allocation;
            p.require("ID", &a.id);
            p.require("Namespace", &a.namespace);
            p.require("JobID", &a.job_id);
            p.require("TaskGroup", &a.task_group);
        });
        match (self.task.is_empty(), self.service.is_empty()) {
            (true, true) => p.push("Task", format!("{EXACTLY_ONE}, both are empty")),
            (false, false) => p.push(
                "Task",
                format!(
                    "{EXACTLY_ONE}, got Task {:?} and Service {:?}",
                    self.task, self.service
                ),
            ),
            _ => {}
        }
        p.nested("Identity", |p| self.identity.check(p));
        let bounded = |p: &mut Problems, field: &str, value: &str| {
            if value.len() > MAX_BLOCK_FIELD_BYTES {
                p.push(
                    field,
                    format!(
                        "is {} bytes; expected at most {MAX_BLOCK_FIELD_BYTES}",
                        value.len()
                    ),
                );
            }
        };
        if let Some(v) = &self.vault {
            p.nested("Vault", |p| {
                bounded(p, "Cluster", &v.cluster);
                bounded(p, "Namespace", &v.namespace);
                bounded(p, "Role", &v.role);
            });
        }
        if let Some(c) = &self.consul {
            p.nested("Consul", |p| bounded(p, "Namespace", &c.namespace));
        }
        p.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GoDuration;

    pub(crate) fn valid() -> IssueRequest {
        IssueRequest {
            region: "global".into(),
            allocation: Allocation {
                id: "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc".into(),
                namespace: "default".into(),
                job_id: "web".into(),
                task_group: "frontend".into(),
                client_status: "running".into(),
                ..Allocation::default()
            },
            task: "server".into(),
            service: String::new(),
            proof_key: None,
            node: None,
            vault: None,
            consul: None,
            identity: WorkloadIdentity {
                name: "default".into(),
                audience: vec!["nomadproject.io".into()],
                ttl: GoDuration::from_secs(3600),
                ..WorkloadIdentity::default()
            },
        }
    }

    #[test]
    fn valid_request_names_its_workload() {
        let r = valid();
        r.validate().unwrap();
        assert_eq!(r.workload().unwrap(), Workload::Task("server"));
        let r = IssueRequest {
            task: String::new(),
            service: "web-api".into(),
            ..valid()
        };
        r.validate().unwrap();
        assert_eq!(r.workload().unwrap(), Workload::Service("web-api"));
        assert_eq!(r.workload().unwrap().name(), "web-api");
    }

    #[test]
    fn exactly_one_of_task_and_service() {
        let both = IssueRequest {
            service: "web-api".into(),
            ..valid()
        };
        let msg = both.validate().unwrap_err().to_string();
        assert!(
            msg.contains("Task: exactly one of Task and Service must be set, got Task \"server\" and Service \"web-api\""),
            "{msg}"
        );
        assert!(both.workload().is_err());
        let neither = IssueRequest {
            task: String::new(),
            ..valid()
        };
        assert!(
            neither
                .validate()
                .unwrap_err()
                .to_string()
                .contains("both are empty")
        );
        assert!(neither.workload().is_err());
    }

    #[test]
    fn vault_and_consul_blocks_apply_to_nomads_identities_only() {
        let vault = crate::model::Vault {
            cluster: "default".into(),
            namespace: "ns".into(),
            role: "r".into(),
        };
        let consul = crate::model::Consul {
            namespace: "c".into(),
        };
        let with = |name: &str, task: bool| IssueRequest {
            vault: Some(vault.clone()),
            consul: Some(consul.clone()),
            task: if task { "server".into() } else { String::new() },
            service: if task {
                String::new()
            } else {
                "web-api".into()
            },
            identity: WorkloadIdentity {
                name: name.into(),
                ..valid().identity
            },
            ..valid()
        };
        assert_eq!(with("vault_default", true).vault_for_claims(), Some(&vault));
        assert_eq!(with("vault_other", true).vault_for_claims(), Some(&vault));
        for (name, task) in [
            ("vault_", true),
            ("vault", true),
            ("default", true),
            ("VAULT_default", true),
            ("vault_default", false),
        ] {
            assert_eq!(with(name, task).vault_for_claims(), None, "{name} {task}");
        }
        for (name, task) in [
            ("consul_default", true),
            ("consul-service_web-api", false),
            ("consul", true),
        ] {
            assert_eq!(
                with(name, task).consul_for_claims(),
                Some(&consul),
                "{name}"
            );
        }
        for name in ["default", "vault_default", "Consul_default", "x-consul"] {
            assert_eq!(with(name, true).consul_for_claims(), None, "{name}");
        }
        // No block, nothing, whatever the identity.
        let none = IssueRequest {
            identity: WorkloadIdentity {
                name: "vault_default".into(),
                ..valid().identity
            },
            ..valid()
        };
        assert_eq!(none.vault_for_claims(), None);
        assert_eq!(none.consul_for_claims(), None);
    }

    #[test]
    fn block_fields_are_bounded() {
        let at = "x".repeat(MAX_BLOCK_FIELD_BYTES);
        let mut r = valid();
        r.vault = Some(crate::model::Vault {
            cluster: at.clone(),
            namespace: at.clone(),
            role: at.clone(),
        });
        r.consul = Some(crate::model::Consul {
            namespace: at.clone(),
        });
        r.validate().unwrap();
        let over = format!("{at}y");
        r.vault.as_mut().unwrap().cluster = over.clone();
        r.vault.as_mut().unwrap().role = over.clone();
        r.consul.as_mut().unwrap().namespace = over;
        match r.validate().unwrap_err() {
            Error::InvalidArgument(ia) => {
                let fields: Vec<&str> = ia.problems.iter().map(|p| p.field.as_str()).collect();
                assert_eq!(fields, ["Vault.Cluster", "Vault.Role", "Consul.Namespace"]);
                assert!(
                    ia.problems[0].problem.contains("257 bytes"),
                    "{:?}",
                    ia.problems
                );
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn problems_carry_nested_paths() {
        let mut r = valid();
        r.region.clear();
        r.allocation.id.clear();
        r.allocation.task_group.clear();
        r.identity.name = "no spaces allowed".into();
        match r.validate().unwrap_err() {
            Error::InvalidArgument(ia) => {
                let fields: Vec<&str> = ia.problems.iter().map(|p| p.field.as_str()).collect();
                assert_eq!(
                    fields,
                    [
                        "Region",
                        "Allocation.ID",
                        "Allocation.TaskGroup",
                        "Identity.Name"
                    ]
                );
                assert_eq!(ia.subject, "IssueRequest");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}
