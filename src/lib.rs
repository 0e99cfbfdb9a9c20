//! Mint and verify **workload identities**: Ed25519-signed JWTs bound to a running
//! allocation, from a rotating keyring, with a msgpack wire format that Go speaks.
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
//!
//! ```
//! use workload_identity::{codec, model::IssueRequest};
//!
//! let mut req = IssueRequest::default();
//! req.region = "global".into();
//! let bytes = codec::encode(&req).unwrap();
//! let back: IssueRequest = codec::decode(&bytes).unwrap();
//! assert_eq!(back, req);
//! // Empty allocation fields, no task and no identity name: all reported at once.
//! assert!(back.validate().is_err());
//! ```

// Unsafe code is allowed only in `ffi` (which opts in); everywhere else it is an error.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod claims;
pub mod codec;
mod deadline;
pub mod error;
pub mod ffi;
#[doc(hidden)]
pub mod fuzzing;
pub mod issue;
pub mod jwt;
pub mod keyring;
pub mod manager;
pub mod model;
mod persist;
mod sealed;
pub mod state;
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
