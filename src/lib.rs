//! Mint and verify **workload identities**: Ed25519-signed JWTs bound to a running
//! allocation, from a rotating keyring, with a msgpack wire format that Go speaks
//! and a stable C ABI.
//!
//! # Start here
//!
//! * **Issuing** (a scheduler's server): a [`Keyring`] holds the signing keys
//!   (`rotate`, `save`/`load`, `jwks` for relying parties); an [`Issuer`] signs an
//!   [`model::IssueRequest`] into a token.
//! * **Verifying** (a service that receives tokens): a [`Verifier`] checks a
//!   token strictly and asks a [`StateStore`] whether its allocation is still
//!   live ([`MemoryStore`] embedded; implement the trait over your state, or use
//!   `state::etcd::EtcdStore` with the `etcd` feature).
//! * **Holding** (a client running workloads): a [`manager::IdentityManager`]
//!   keeps an allocation's tokens renewed and persisted across restarts.
//! * **From C or Go**: [`ffi`] and `include/workload_identity.h`;
//!   `bindings/go/wid` in the repository.
//!
//! Units: token times are Unix seconds; the manager's are Unix milliseconds
//! (named `_ms`); an identity's TTL is a Go duration in **nanoseconds**
//! ([`model::GoDuration::from_secs`]), and TTL 0 means a token without `exp`.
//! Errors are one [`Error`] whose [`Error::code`] is a stable [`ResultCode`].
//! The library logs through the `log` facade only (see the README).
//!
//! ```
//! use std::sync::Arc;
//! use workload_identity::model::{Allocation, IssueRequest, WorkloadIdentity};
//! use workload_identity::{Audience, Issuer, Keyring, MemoryStore, Verifier};
//!
//! let now = 1_700_000_000;
//! let keyring = Keyring::new();
//! keyring.rotate(now)?;
//! let req = IssueRequest {
//!     region: "global".into(),
//!     allocation: Allocation {
//!         id: "alloc-1".into(),
//!         namespace: "default".into(),
//!         job_id: "web".into(),
//!         task_group: "g".into(),
//!         client_status: "running".into(),
//!         ..Allocation::default()
//!     },
//!     task: "server".into(),
//!     identity: WorkloadIdentity {
//!         name: "default".into(),
//!         audience: vec!["vault.io".into()],
//!         ..WorkloadIdentity::default()
//!     },
//!     ..IssueRequest::default()
//! };
//! let token = Issuer::new(keyring.clone()).issue(&req, now)?.token;
//! let store = Arc::new(MemoryStore::new());
//! store.upsert(&req.allocation);
//! let verifier = Verifier::builder(keyring, store, Audience::new("vault.io")?).build();
//! assert_eq!(verifier.verify(&token, now)?.claims.task.as_deref(), Some("server"));
//! # Ok::<(), workload_identity::Error>(())
//! ```
//!
//! # Modules
//!
//! * [`codec`] and [`model`]: the msgpack wire types shared with Go, by declared
//!   codec names only, decoded strictly and validated with Nomad's rules;
//! * [`keyring`]: HKDF-seeded Ed25519 root keys, rotation, JWKS and OIDC
//!   discovery, JWKS import, a crash-safe keystore;
//! * [`issue`] and [`verify`]: signing identities, and the strict verification
//!   pipeline bound to live allocations in a [`state::StateStore`];
//! * [`manager`]: the client side — renewal, restart-safe restore, watchers and
//!   token-exchange hooks;
//! * [`ffi`]: the stable C ABI;
//! * [`error`]: one error type whose variants map onto the stable C result codes.

// Unsafe code is allowed only in `ffi` (which opts in); everywhere else it is an error.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod claims;
pub mod codec;
mod deadline;
pub mod error;
pub mod ffi;
/// Shared entry points of the fuzz targets, the corpus replay test and the
/// valgrind replay: not part of the library (feature `fuzzing`, off by default).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod issue;
pub mod jwt;
pub mod keyring;
pub mod manager;
pub mod model;
pub mod state;
mod storage;
pub mod verify;

/// The README's example runs as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use claims::Claims;
pub use error::{Error, ResultCode};
pub use issue::{Issuer, SignedIdentity};
pub use keyring::{KeyId, Keyring};
pub use state::{AllocState, Consistency, MemoryStore, StateStore};
pub use verify::{Audience, VerifiedIdentity, Verifier};
