//! Mint and verify **workload identities**: Ed25519-signed JWTs bound to a running
//! allocation, from a rotating keyring, with a msgpack wire format that Go speaks.
//!
//! This release holds the foundation: the msgpack [`codec`] (declared codec names
//! only, strict bounded decoding), the wire [`model`] shared with Go with Nomad's
//! validation rules, and the one [`error`] type whose variants map onto the stable
//! C result codes.
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

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod claims;
pub mod codec;
pub mod error;
pub mod issue;
pub mod jwt;
pub mod keyring;
pub mod model;
mod persist;
pub mod state;
pub mod verify;

pub use claims::Claims;
pub use error::{Error, ResultCode};
pub use issue::{Issuer, SignedIdentity};
pub use keyring::{KeyId, Keyring};
pub use state::{AllocState, Consistency, MemoryStore, StateStore};
pub use verify::{Audience, VerifiedIdentity, Verifier};
