//! Mint and verify **workload identities**: JWTs (EdDSA, ES256 or RS256) bound to
//! a running allocation, from a rotating keyring, with a msgpack wire format that
//! Go speaks and a stable C ABI.
//!
//! # Start here
//!
//! * **Issuing** (a scheduler's server): a [`Keyring`] holds the signing keys
//!   (`rotate`/`rotate_alg`, `save`/`load`, `jwks` for relying parties), each of
//!   one [`Algorithm`]; an [`Issuer`] signs an [`model::IssueRequest`] into a
//!   token with the algorithm its relying party accepts.
//! * **Verifying** (a service that receives tokens): a [`Verifier`] checks a
//!   token strictly and asks a [`StateStore`] whether its allocation is still
//!   live ([`MemoryStore`] embedded; implement the trait over your state, or use
//!   `EtcdStore` with the `etcd` feature). A [`TrustSet`] verifies the tokens
//!   of several issuers (federated clusters, SPIFFE trust domains, foreign
//!   issuers such as SPIRE or Kubernetes), each with its own keys and rules,
//!   routing each token to the one issuer it claims before any key is used.
//! * **Holding** (a client running workloads): a [`manager::IdentityManager`]
//!   keeps an allocation's tokens renewed and persisted across restarts, and
//!   its token exchanges' secrets alive (`VaultLogin`, feature `vault`: the
//!   Vault/OpenBao login, see docs/vault.md; `ConsulLogin`, feature
//!   `consul`: the Consul login, see docs/consul.md).
//! * **From C or Go**: the C ABI is a crate of its own,
//!   `workload-identity-ffi` (`ffi/` in the repository: the shared and static
//!   library, `workload_identity.h`); `bindings/go/wid` is the Go binding over
//!   it. This crate is Rust only: `#![forbid(unsafe_code)]`.
//!
//! Units: token times are Unix seconds; the manager's are Unix milliseconds
//! (named `_ms`); an identity's TTL is a Go duration in **nanoseconds**
//! ([`model::GoDuration::from_secs`]), and TTL 0 means a token without `exp`.
//! Errors are one [`Error`] whose [`Error::code`] is a stable [`ResultCode`].
//! The library logs through the `log` facade only (see docs/rust.md).
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
//!     proof_key: None,
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
//! # Where things are
//!
//! Everything is exported here, at the crate root, by one path each: the
//! keyring ([`Keyring`], [`RootKey`], [`KeyId`], [`Jwks`], [`OidcDiscovery`],
//! [`RotationPolicy`], [`plan_rotation`]), issuance ([`Issuer`]), verification
//! ([`Verifier`], [`Audience`], [`Claims`]), several issuers ([`TrustSet`],
//! [`TrustedIssuer`], [`KeySource`]), allocation state ([`StateStore`],
//! [`MemoryStore`]), time ([`Clock`], [`unix_now`]) and errors ([`Error`],
//! [`ResultCode`]). Four namespaces hold the rest:
//!
//! * [`model`]: the msgpack wire types shared with Go, validated with Nomad's
//!   rules; [`codec`]: encoding and strict decoding by declared codec names;
//! * [`manager`]: the client side — renewal, restart-safe restore, watchers and
//!   token-exchange hooks;
//! * [`profile`]: token profiles (SPIFFE JWT-SVIDs, extra claims).

// Forbidden here: the C ABI, with every raw-pointer operation it needs, is the
// `workload-identity-ffi` crate.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// docs.rs (nightly, `--cfg docsrs`) marks each feature-gated item with its
// feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub)]

// The crate root is the front door: the modules below are private except the
// namespaces users reach into (the wire types, the client-side manager, the
// msgpack codec, the token profiles), and every public item has exactly one
// path.
mod algorithm;
#[cfg(feature = "etcd")]
mod audit;
mod b64url;
mod claim_names;
mod claims;
mod clock;
pub mod codec;
#[cfg(feature = "consul")]
mod consul_login;
mod counter;
mod custody;
mod deadline;
mod error;
#[cfg(feature = "etcd")]
mod etcd_keyring;
/// Shared entry points of the fuzz targets, the corpus replay test and the
/// valgrind replay: not part of the library (feature `fuzzing`, off by default).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod issue;
mod jwt;
mod key_id;
mod keyring;
#[cfg(any(feature = "vault", feature = "consul"))]
mod login;
pub mod manager;
pub mod model;
mod numbering;
mod pop;
pub mod profile;
mod purpose;
#[cfg(feature = "remote-jwks")]
mod remote_jwks;
mod service_account;
mod state;
mod storage;
#[cfg(all(test, any(feature = "etcd", feature = "consul")))]
mod test_http;
#[cfg(any(
    feature = "etcd",
    feature = "remote-jwks",
    feature = "transit",
    feature = "vault",
    feature = "consul"
))]
mod tls_pem;
#[cfg(feature = "transit")]
mod transit;
mod trust;
#[cfg(any(feature = "transit", feature = "vault", feature = "consul"))]
mod vault_http;
#[cfg(feature = "vault")]
mod vault_login;
mod verify;

/// docs/vault.md's example runs as a doctest (feature `vault`).
#[doc = include_str!("../docs/vault.md")]
#[cfg(all(doctest, feature = "vault"))]
pub struct VaultDocDoctests;

/// docs/consul.md's example runs as a doctest (feature `consul`).
#[doc = include_str!("../docs/consul.md")]
#[cfg(all(doctest, feature = "consul"))]
pub struct ConsulDocDoctests;

/// docs/federation.md's example runs as a doctest (feature `remote-jwks`).
#[doc = include_str!("../docs/federation.md")]
#[cfg(all(doctest, feature = "remote-jwks"))]
pub struct FederationDocDoctests;

/// The README's example runs as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// docs/rust.md's examples run as doctests.
#[doc = include_str!("../docs/rust.md")]
#[cfg(doctest)]
pub struct RustDocDoctests;

/// docs/keys.md's examples run as doctests.
#[doc = include_str!("../docs/keys.md")]
#[cfg(doctest)]
pub struct KeysDocDoctests;

/// docs/etcd.md's examples run as doctests (the etcd ones with feature `etcd`).
#[doc = include_str!("../docs/etcd.md")]
#[cfg(doctest)]
pub struct EtcdDocDoctests;

#[cfg(feature = "etcd")]
pub use audit::AUDIT_TARGET;
pub use claim_names::CLAIMS_SUPPORTED;
pub use claims::{Claims, ExpectedClaims, NodeClaims};
pub use clock::{Clock, SystemClock, rfc3339, unix_now};
#[cfg(feature = "consul")]
pub use consul_login::{
    ConsulLogin, ConsulLoginBuilder, DEFAULT_LEEWAY as DEFAULT_CONSUL_LEEWAY,
    DEFAULT_MIN_TTL as DEFAULT_CONSUL_MIN_TTL, META_NODE_ID as CONSUL_META_NODE_ID,
    META_REQUESTED_BY as CONSUL_META_REQUESTED_BY,
};
pub use custody::{
    KEK_LEN, KIND_AEAD_KEK, KIND_TRANSIT, KekFile, KeyWrapper, WRAP_AAD_PREFIX, WrapItem,
    associated_data,
};
pub use error::{DecodeError, Error, FieldProblem, InvalidArgument, ResultCode};
#[cfg(feature = "etcd")]
pub use etcd_keyring::{
    DEFAULT_PREFIX as DEFAULT_KEYRING_PREFIX, EtcdKeyring, EtcdKeyringBuilder, EtcdKeyringStats,
    KeyringStatus, Rotator, RotatorOptions, RotatorStats, ServerPresence, ServerRecord,
};
pub use issue::{DEFAULT_MAX_WIT_TTL, Issuer, SignedIdentity};
pub use jwt::{DEFAULT_MAX_TOKEN_BYTES, MAX_TOKEN_BYTES_LIMIT};
pub use keyring::{
    ActiveKey, Algorithm, ExternalSigner, HKDF_P256_SALT, HKDF_V1_SALT, ImportReport, Jwk, Jwks,
    JwsAlgorithm, KEYSTORE_FORMAT, KEYSTORE_PLAINTEXT_VERSION, KEYSTORE_VERSION, KeyDerivation,
    KeyId, KeyInfo, KeyMaterial, KeyPurpose, KeyState, Keyring, KeyringPolicy, KeystoreLoadOptions,
    KeystoreSummary, MATERIAL_LEN, MAX_KEY_ID_LEN, MAX_PKCS8_LEN, MAX_RSA_BITS, MIN_RSA_BITS,
    OidcDiscovery, PolicyOverrides, PublicKey, RootKey, RotationAction, RotationPolicy, RsaKeySize,
    SkippedJwk, VerifyingHandle, inspect_keystore, next_planned_change, plan_rotation,
    plan_rotation_for, plan_rotation_for_purpose,
};
pub use pop::{DEFAULT_PROOF_TTL, ProofOptions, WorkloadKey};
#[cfg(feature = "remote-jwks")]
pub use remote_jwks::{
    MAX_JWKS_BODY_LIMIT, RefreshReport, Refresher, RemoteJwks, RemoteJwksBuilder, RemoteJwksStats,
    SpiffeBundleSource, SpiffeBundleSourceBuilder,
};
pub use service_account::{
    MAX_CLAIMS_CHARS, MIN_MAX_TOKEN_EXPIRATION, ServiceAccountKey, ServiceAccountSigner,
    SignedServiceAccountToken, service_account_discovery, service_account_jwks,
};
#[cfg(feature = "etcd")]
pub use state::etcd::{EtcdConfig, EtcdMirror, EtcdMirrorBuilder, EtcdMirrorStats, EtcdStore};
pub use state::{AllocState, Consistency, MemoryStore, NodeState, StateStore, StoreError};
#[cfg(feature = "transit")]
pub use transit::{Transit, TransitClient, TransitClientBuilder, TransitSigner, TransitSync};
pub use trust::{
    IssuerId, IssuerStats, KeySource, OwnedKeyring, TrustSet, TrustSetBuilder, TrustSetStats,
    TrustedIdentity, TrustedIssuer,
};
#[cfg(feature = "vault")]
pub use vault_login::{DEFAULT_MIN_TTL as DEFAULT_VAULT_MIN_TTL, VaultLogin, VaultLoginBuilder};
pub use verify::{
    Audience, Explanation, MAX_CACHE_ENTRIES, NodeTokens, ProofRequest, VerificationStep,
    VerifiedIdentity, VerifiedProof, Verifier, VerifierBuilder, VerifierStats,
};
