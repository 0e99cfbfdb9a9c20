//! `IssueRequest`: what a host sends to have an identity signed.

use super::validate::Problems;
use super::{Allocation, WorkloadIdentity};
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
    }
}

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
