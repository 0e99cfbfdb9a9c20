//! Token profiles: what an [`Issuer`](crate::Issuer) writes beyond the
//! fixed claim set.
//!
//! * [`SpiffeProfile`] makes tokens SPIFFE JWT-SVIDs (`sub` a SPIFFE ID) and
//!   WITs WIT-SVIDs (see [`Issuer::spiffe`](crate::Issuer::spiffe)).
//! * [`ExtraClaimsPolicy`] adds templated claims per namespace, as Nomad
//!   2.0.3 does (see [`Issuer::extra_claims`](crate::Issuer::extra_claims)).
//!
//! # Templates
//!
//! Both take templates over the issue request: text with variables
//! `${...}`. The names are Nomad's where Nomad has one:
//!
//! | variable | value (request field, codec names) |
//! |---|---|
//! | `${job.region}` | `Region` |
//! | `${job.namespace}` | `Allocation.Namespace` |
//! | `${job.id}` | the parent job's ID for a child job, else `Allocation.JobID` (as `nomad_job_id`) |
//! | `${job.parent_id}` | `Allocation.Job.ParentID` (ours) |
//! | `${job.node_pool}` | `Allocation.Job.NodePool` |
//! | `${job.meta.<key>}` | `Allocation.Job.Meta[<key>]` (Nomad 2.0.3) |
//! | `${group.name}` | `Allocation.TaskGroup` |
//! | `${alloc.id}` | `Allocation.ID` |
//! | `${task.name}` | `Task` |
//! | `${service.name}` | `Service` (ours) |
//! | `${workload.name}` | the task or service name (ours) |
//! | `${identity.name}` | `Identity.Name` (ours) |
//! | `${node.id}`, `${node.name}`, `${node.datacenter}`, `${node.pool}`, `${node.class}` | `Node.ID`, `Node.Name` (ours), `Node.Datacenter`, `Node.NodePool`, `Node.NodeClass` |
//! | `${vault.cluster}`, `${vault.namespace}`, `${vault.role}` | `Vault.Cluster`, `Vault.Namespace`, `Vault.Role` of a Vault identity (`vault_<cluster>`, a task's; see [`IssueRequest::vault_for_claims`](crate::model::IssueRequest::vault_for_claims)); empty for any other identity or when the field is (Nomad 2.x) |
//!
//! Stricter than Nomad, which keeps an unknown `${...}` as text and writes an
//! empty string for a field it lacks: an unknown variable is refused when the
//! template is set, and a variable whose field the request lacks (absent or
//! empty: Go sends zero values) fails the issue with the field named. The
//! exception is `${vault.*}`, empty as in Nomad: a job's Vault fields are
//! optional (an empty role is the auth method's default), and Nomad renders
//! them for identities of every kind. `$` without `{` is plain text.

mod extra_claims;
mod spiffe;
pub(crate) mod template;

pub use extra_claims::{
    EVERY_NAMESPACE, ExtraClaimsPolicy, MAX_EXTRA_CLAIM_VALUE_BYTES, MAX_EXTRA_CLAIMS,
    MAX_EXTRA_CLAIMS_JSON_BYTES,
};
pub(crate) use spiffe::trust_domain_problem;
pub use spiffe::{DEFAULT_SPIFFE_PATH, MAX_SPIFFE_ID_BYTES, SpiffeProfile, spiffe_id_problem};
