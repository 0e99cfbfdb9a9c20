//! The allocation view: the fields of Nomad's `Allocation` that identities need.

use crate::codec::wire_struct;
use crate::error::{Error, Result};

wire_struct! {
    /// The job an allocation runs, as far as identities need it (Nomad's `Job`).
    pub struct Job {
        /// The job's ID.
        pub id: String => "ID",
        /// The job's `meta` block (extra-claim templates read it as
        /// `${job.meta.<key>}`).
        pub meta: super::StringMap => "Meta",
        /// The job's node pool (`${job.node_pool}`).
        pub node_pool: String => "NodePool",
        /// For a dispatched or periodic child job, the parent job's ID; else empty.
        pub parent_id: String => "ParentID",
    }
}

wire_struct! {
    /// The fields of Nomad's `Allocation` that identity issuance and verification
    /// use. Go sends the whole struct; the other keys are ignored on decode.
    ///
    /// Fields are declared in codec-name order, the order Go's codec writes them.
    pub struct Allocation {
        /// What the client reports: `pending`, `running`, `complete`, `failed`,
        /// `lost` or `unknown`.
        pub client_status: String => "ClientStatus",
        /// What the scheduler wants: `run`, `stop` or `evict`.
        pub desired_status: String => "DesiredStatus",
        /// The allocation ID (a UUID in Nomad).
        pub id: String => "ID",
        /// The job, when the sender included it.
        pub job: Option<Job> => "Job",
        /// The job's ID.
        pub job_id: String => "JobID",
        /// The namespace.
        pub namespace: String => "Namespace",
        /// The task group.
        pub task_group: String => "TaskGroup",
    }
}

/// Nomad's allocation client statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientStatus {
    /// `pending`: placed, not yet running.
    Pending,
    /// `running`.
    Running,
    /// `complete`: finished successfully (terminal).
    Complete,
    /// `failed` (terminal).
    Failed,
    /// `lost`: its node is gone (terminal).
    Lost,
    /// `unknown`: its node is disconnected; not terminal.
    Unknown,
}

impl ClientStatus {
    /// Every status, with its wire string.
    pub const ALL: [(ClientStatus, &'static str); 6] = [
        (ClientStatus::Pending, "pending"),
        (ClientStatus::Running, "running"),
        (ClientStatus::Complete, "complete"),
        (ClientStatus::Failed, "failed"),
        (ClientStatus::Lost, "lost"),
        (ClientStatus::Unknown, "unknown"),
    ];

    /// The status named by a wire string, if it is one of Nomad's.
    pub fn parse(s: &str) -> Option<ClientStatus> {
        Self::ALL
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(c, _)| *c)
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(c, _)| *c == self)
            .map(|(_, name)| *name)
            // ALL lists every variant, so the lookup cannot miss.
            .unwrap_or("unknown")
    }

    /// Nomad's client-terminal rule: `complete`, `failed` and `lost` are terminal.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        )
    }
}

impl Allocation {
    /// The parsed client status; a status Nomad does not define is an error, so a
    /// caller deciding liveness can fail closed instead of guessing.
    pub fn client_status(&self) -> Result<ClientStatus> {
        ClientStatus::parse(&self.client_status).ok_or_else(|| {
            Error::invalid(
                "Allocation",
                "ClientStatus",
                format!(
                    "unknown client status {:?}: expected one of pending, running, complete, failed, lost, unknown",
                    self.client_status
                ),
            )
        })
    }

    /// Whether the allocation is client-terminal (Nomad's `ClientTerminalStatus`).
    /// An unrecognised status is treated as terminal: a verifier must not honour
    /// an identity on a state it does not understand.
    pub fn is_client_terminal(&self) -> bool {
        self.client_status().map_or(true, ClientStatus::is_terminal)
    }

    /// The job ID identities name: the parent job's ID for child jobs (dispatched
    /// or periodic), else the allocation's own job ID.
    pub fn identity_job_id(&self) -> &str {
        match &self.job {
            Some(job) if !job.parent_id.is_empty() => &job.parent_id,
            _ => &self.job_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(status: &str) -> Allocation {
        Allocation {
            client_status: status.into(),
            ..Allocation::default()
        }
    }

    #[test]
    fn client_terminal_rule_matches_nomad() {
        for (status, terminal) in [
            ("pending", false),
            ("running", false),
            ("unknown", false),
            ("complete", true),
            ("failed", true),
            ("lost", true),
        ] {
            assert_eq!(alloc(status).is_client_terminal(), terminal, "{status}");
        }
    }

    #[test]
    fn unrecognised_status_is_an_error_and_counts_as_terminal() {
        let a = alloc("Running");
        let e = a.client_status().unwrap_err();
        assert!(
            e.to_string().contains("unknown client status \"Running\""),
            "{e}"
        );
        assert!(a.is_client_terminal());
        assert!(alloc("").is_client_terminal());
    }

    #[test]
    fn status_strings_round_trip() {
        for (c, s) in ClientStatus::ALL {
            assert_eq!(ClientStatus::parse(s), Some(c));
            assert_eq!(c.as_str(), s);
        }
    }

    #[test]
    fn child_jobs_name_their_parent() {
        let mut a = Allocation {
            job_id: "web/dispatch-1".into(),
            ..Allocation::default()
        };
        assert_eq!(a.identity_job_id(), "web/dispatch-1");
        a.job = Some(Job {
            id: "web/dispatch-1".into(),
            parent_id: String::new(),
            ..Job::default()
        });
        assert_eq!(a.identity_job_id(), "web/dispatch-1");
        a.job = Some(Job {
            id: "web/dispatch-1".into(),
            parent_id: "web".into(),
            ..Job::default()
        });
        assert_eq!(a.identity_job_id(), "web");
    }
}
