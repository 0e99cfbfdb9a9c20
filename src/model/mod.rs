//! Wire types shared with Go, and their validation with Nomad's rules.
//!
//! Every type here is declared with its msgpack codec names (the Go field names
//! of the matching Nomad struct); see [`crate::codec`] for the encoding rules.

mod allocation;
mod consul;
mod duration;
mod identity;
pub mod json;
mod node;
mod node_request;
mod proof_key;
mod request;
mod string_map;
mod validate;
mod vault;

pub use allocation::{Allocation, ClientStatus, Job};
pub use consul::{Consul, ConsulExposeConfig, ConsulExposePath};
pub use duration::GoDuration;
pub use identity::WorkloadIdentity;
pub use node::Node;
pub use node_request::{DEFAULT_NODE_IDENTITY_TTL, NODE_IDENTITY_AUDIENCE, NodeIdentityRequest};
pub use proof_key::ProofKey;
pub use request::{IssueRequest, MAX_BLOCK_FIELD_BYTES, Workload};
pub use string_map::StringMap;
pub use vault::Vault;
