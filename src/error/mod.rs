//! The one error type of the library and its stable result codes.
//!
//! Every [`Error`] variant corresponds to exactly one [`ResultCode`], and the
//! numbers of [`ResultCode`] are the C ABI's `wid_result` values: they are fixed
//! forever, so a Go or C caller can match on them across library versions.
//!
//! Messages say what was wrong with the input and what was expected. They may
//! quote identifiers (key IDs, allocation IDs, field names, claim values) but never
//! key material, seeds, or whole tokens.

use std::fmt;

pub(crate) mod b64;

/// Stable result codes, shared with the C ABI (`wid_result`).
///
/// The numbers are part of the ABI contract and never change; new codes are only
/// ever added.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultCode {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL (C ABI only).
    NullArgument = 1,
    /// An argument was present but not acceptable.
    InvalidArgument = 2,
    /// Bytes could not be decoded into the expected type.
    DecodeError = 3,
    /// A file or OS operation failed.
    IoError = 4,
    /// The library panicked; the panic was contained (C ABI only).
    Panic = 5,
    /// The token is not a well-formed compact JWS.
    MalformedToken = 10,
    /// The token's `alg` is not one this library verifies (EdDSA, ES256, RS256),
    /// or not the algorithm of the key its `kid` names.
    UnsupportedAlgorithm = 11,
    /// The token's `kid` names no key this keyring will verify with.
    UnknownKey = 12,
    /// The signature does not verify.
    BadSignature = 13,
    /// The token's `exp` has passed (beyond the leeway).
    Expired = 14,
    /// The token's `nbf` or `iat` is in the future (beyond the leeway).
    NotYetValid = 15,
    /// The token's `aud` does not contain the verifier's audience.
    AudienceMismatch = 16,
    /// The verifier requires an `iss` and the token's differs or lacks it.
    IssuerMismatch = 17,
    /// A node identity token where this verifier accepts allocation tokens
    /// only, or an allocation token where it accepts node tokens only
    /// (`WID_RESULT_TOKEN_KIND_REFUSED`).
    TokenKindRefused = 18,
    /// The allocation named by the token does not exist.
    AllocationNotFound = 20,
    /// The allocation named by the token is terminal.
    AllocationTerminal = 21,
    /// The state store could not answer; verification failed closed.
    StoreUnavailable = 22,
    /// The client node a node identity token names does not exist
    /// (`WID_RESULT_NODE_NOT_FOUND`).
    NodeNotFound = 23,
    /// The client node a node identity token names is down (the store's
    /// answer: `MemoryStore` also counts a status Nomad does not define as
    /// down, where `EtcdStore` fails closed with `StoreUnavailable`)
    /// (`WID_RESULT_NODE_DOWN`).
    NodeDown = 24,
    /// The keyring has no active key to sign with.
    NoActiveKey = 30,
    /// A key with this ID is already in the keyring.
    DuplicateKey = 31,
    /// A change to a replicated keyring lost a race: the keys changed after
    /// the change was planned, or this process no longer holds the rotator
    /// lease. Nothing was written; plan again from the current keys
    /// (`WID_RESULT_KEYRING_CONFLICT`).
    KeyringConflict = 32,
    /// A replicated keyring's source (etcd) could not be reached or gave an
    /// answer that is not one; nothing was written
    /// (`WID_RESULT_KEYRING_UNAVAILABLE`).
    KeyringUnavailable = 33,
    /// A token-exchange hook (a Consul or Vault login) failed or returned an
    /// empty secret (Rust identity manager only).
    TokenExchangeFailed = 40,
    /// Proof of possession is required and was not given: a WIT presented as
    /// a bearer token, or a bearer token to a verifier that requires proof
    /// (`WID_RESULT_PROOF_REQUIRED`).
    ProofRequired = 50,
    /// A workload proof token (WPT) failed a check: structure, `typ`, `alg`,
    /// signature by the WIT's `cnf` key, audience, time window, or a binding
    /// hash (`WID_RESULT_PROOF_INVALID`).
    ProofInvalid = 51,
    /// A WPT whose `jti` was already seen within its validity window, or one
    /// the replay cache had no room to remember (`WID_RESULT_PROOF_REPLAYED`).
    ProofReplayed = 52,
    /// A key in custody could not be used: no KEK or another KEK was given
    /// for a wrapped keystore, a wrapped key was altered, or the KMS
    /// (Vault/OpenBao Transit) refused, could not be reached, or returned a
    /// signature that does not verify (`WID_RESULT_KEY_CUSTODY_FAILED`).
    KeyCustodyFailed = 60,
}

impl ResultCode {
    /// The C name of this code, e.g. `"WID_RESULT_EXPIRED"`.
    /// The C ABI (workload-identity-ffi) checks its `WID_RESULT_*` constants
    /// against these names.
    pub const fn name(self) -> &'static str {
        match self {
            ResultCode::Ok => "WID_RESULT_OK",
            ResultCode::NullArgument => "WID_RESULT_NULL_ARGUMENT",
            ResultCode::InvalidArgument => "WID_RESULT_INVALID_ARGUMENT",
            ResultCode::DecodeError => "WID_RESULT_DECODE_ERROR",
            ResultCode::IoError => "WID_RESULT_IO_ERROR",
            ResultCode::Panic => "WID_RESULT_PANIC",
            ResultCode::MalformedToken => "WID_RESULT_MALFORMED_TOKEN",
            ResultCode::UnsupportedAlgorithm => "WID_RESULT_UNSUPPORTED_ALGORITHM",
            ResultCode::UnknownKey => "WID_RESULT_UNKNOWN_KEY",
            ResultCode::BadSignature => "WID_RESULT_BAD_SIGNATURE",
            ResultCode::Expired => "WID_RESULT_EXPIRED",
            ResultCode::NotYetValid => "WID_RESULT_NOT_YET_VALID",
            ResultCode::AudienceMismatch => "WID_RESULT_AUDIENCE_MISMATCH",
            ResultCode::IssuerMismatch => "WID_RESULT_ISSUER_MISMATCH",
            ResultCode::TokenKindRefused => "WID_RESULT_TOKEN_KIND_REFUSED",
            ResultCode::AllocationNotFound => "WID_RESULT_ALLOCATION_NOT_FOUND",
            ResultCode::AllocationTerminal => "WID_RESULT_ALLOCATION_TERMINAL",
            ResultCode::StoreUnavailable => "WID_RESULT_STORE_UNAVAILABLE",
            ResultCode::NodeNotFound => "WID_RESULT_NODE_NOT_FOUND",
            ResultCode::NodeDown => "WID_RESULT_NODE_DOWN",
            ResultCode::NoActiveKey => "WID_RESULT_NO_ACTIVE_KEY",
            ResultCode::DuplicateKey => "WID_RESULT_DUPLICATE_KEY",
            ResultCode::KeyringConflict => "WID_RESULT_KEYRING_CONFLICT",
            ResultCode::KeyringUnavailable => "WID_RESULT_KEYRING_UNAVAILABLE",
            ResultCode::TokenExchangeFailed => "WID_RESULT_TOKEN_EXCHANGE_FAILED",
            ResultCode::ProofRequired => "WID_RESULT_PROOF_REQUIRED",
            ResultCode::ProofInvalid => "WID_RESULT_PROOF_INVALID",
            ResultCode::ProofReplayed => "WID_RESULT_PROOF_REPLAYED",
            ResultCode::KeyCustodyFailed => "WID_RESULT_KEY_CUSTODY_FAILED",
        }
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One problem with one field of an input value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field's path by wire (codec) names, e.g. `Identity.Name`.
    pub field: String,
    /// What is wrong and what was expected.
    pub problem: String,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// Every problem found while validating one input value (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidArgument {
    /// What was being validated, e.g. `IssueRequest`.
    pub subject: &'static str,
    /// The problems, in field order.
    pub problems: Vec<FieldProblem>,
}

impl fmt::Display for InvalidArgument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: ", self.subject)?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// Why bytes could not be decoded into a wire type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The wire type being decoded, e.g. `IssueRequest`.
    pub type_name: &'static str,
    /// Where in the value decoding failed, by codec names (`Allocation.Job.ParentID`);
    /// empty when the failure is about the input as a whole.
    pub path: String,
    /// What was wrong and what was expected.
    pub reason: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "cannot decode {}: {}", self.type_name, self.reason)
        } else {
            write!(
                f,
                "cannot decode {} at {}: {}",
                self.type_name, self.path, self.reason
            )
        }
    }
}

/// The library's error. Each variant maps onto exactly one [`ResultCode`]
/// (see [`Error::code`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A required pointer argument was NULL (raised by the C ABI).
    #[error("argument `{name}` must not be NULL")]
    NullArgument {
        /// The parameter's name.
        name: &'static str,
    },
    /// An input value failed validation.
    #[error("{0}")]
    InvalidArgument(InvalidArgument),
    /// Bytes could not be decoded.
    #[error("{0}")]
    Decode(DecodeError),
    /// A file or OS operation failed. The message ends with the OS error,
    /// which is therefore not also returned as
    /// [`source`](std::error::Error::source): a printed chain says it once.
    #[error("{context}: {error}")]
    Io {
        /// What was being done, e.g. `writing keystore /var/lib/wid/keys`.
        context: String,
        /// The OS error (in the message).
        error: std::io::Error,
    },
    /// A panic was caught at the C ABI boundary.
    #[error("internal panic contained at the API boundary: {message}")]
    Panic {
        /// The panic payload, when it was a string.
        message: String,
    },
    /// The token is not a well-formed compact JWS.
    #[error("malformed token: {reason}")]
    MalformedToken {
        /// What was wrong and what was expected.
        reason: String,
    },
    /// The token's `alg` is not one this library verifies, or not the
    /// algorithm of the key its `kid` names.
    #[error("unsupported algorithm {alg:?}: expected {expected}")]
    UnsupportedAlgorithm {
        /// The `alg` the token named.
        alg: String,
        /// What was acceptable instead.
        expected: String,
    },
    /// No usable key has this ID.
    #[error("unknown key {kid:?}: {reason}")]
    UnknownKey {
        /// The key ID the token named (empty when it named none).
        kid: String,
        /// Why the key is not usable (absent, deprecated, waited for and never arrived).
        reason: String,
    },
    /// The signature does not verify under the named key.
    #[error("bad signature for key {kid:?}")]
    BadSignature {
        /// The key ID the token named.
        kid: String,
    },
    /// The token expired.
    #[error("token expired at {exp} (now {now}, leeway {leeway_secs}s)")]
    Expired {
        /// The token's `exp`.
        exp: i64,
        /// The verifier's time.
        now: i64,
        /// The leeway allowed.
        leeway_secs: u64,
    },
    /// A time claim is in the future.
    #[error("token not valid yet: {claim} is {value} (now {now}, leeway {leeway_secs}s)")]
    NotYetValid {
        /// Which claim (`nbf` or `iat`).
        claim: &'static str,
        /// Its value.
        value: i64,
        /// The verifier's time.
        now: i64,
        /// The leeway allowed.
        leeway_secs: u64,
    },
    /// The token is not for this verifier.
    #[error("audience mismatch: expected {expected:?}, token has {found:?}")]
    AudienceMismatch {
        /// The verifier's audience.
        expected: String,
        /// The token's audiences.
        found: Vec<String>,
    },
    /// The verifier requires an issuer and the token's `iss` differs or is absent.
    #[error("issuer mismatch: expected iss {expected:?}, token has {found}")]
    IssuerMismatch {
        /// The issuer the verifier requires.
        expected: String,
        /// The token's `iss`, quoted, or `no iss`.
        found: String,
    },
    /// A trust set trusts no issuer the token names, or the token's `iss`
    /// and its SPIFFE ID's trust domain name two different trusted issuers
    /// (`IssuerMismatch`).
    #[error("untrusted issuer: {found}; {trusted}")]
    UntrustedIssuer {
        /// What the token names (its `iss` and trust domain, quoted and
        /// truncated), and why that chooses no one issuer.
        found: String,
        /// The issuers the trust set trusts.
        trusted: String,
    },
    /// The allocation does not exist (after a consistent read).
    #[error("allocation {alloc_id:?} not found")]
    AllocationNotFound {
        /// The allocation ID from the token.
        alloc_id: String,
    },
    /// The allocation is terminal.
    #[error("allocation {alloc_id:?} is terminal{detail}")]
    AllocationTerminal {
        /// The allocation ID from the token.
        alloc_id: String,
        /// Why, when the store knows more than the state (starts with `": "`;
        /// empty otherwise), e.g. an unknown client status counted as terminal.
        detail: String,
    },
    /// The state store could not answer; the check failed closed.
    #[error("state store unavailable while checking allocation {alloc_id:?}: {cause}")]
    StoreUnavailable {
        /// The allocation ID being checked.
        alloc_id: String,
        /// What the store reported.
        cause: String,
    },
    /// The token is of a kind (node or allocation identity) this verifier
    /// does not accept.
    #[error("{reason}")]
    TokenKindRefused {
        /// What the token is and what the verifier accepts.
        reason: String,
    },
    /// The node does not exist (after a consistent read).
    #[error("node {node_id:?} not found")]
    NodeNotFound {
        /// The node ID from the token.
        node_id: String,
    },
    /// The node is down (as the store answers).
    #[error("node {node_id:?} is down")]
    NodeDown {
        /// The node ID from the token.
        node_id: String,
    },
    /// The state store could not answer a node lookup; the check failed
    /// closed (`StoreUnavailable`).
    #[error("state store unavailable while checking node {node_id:?}: {cause}")]
    NodeStoreUnavailable {
        /// The node ID being checked.
        node_id: String,
        /// What the store reported.
        cause: String,
    },
    /// No key of the algorithm and purpose asked for is active.
    #[error("{}", no_active_key_message(*algorithm, *purpose))]
    NoActiveKey {
        /// The algorithm that has no active key.
        algorithm: crate::algorithm::Algorithm,
        /// The purpose asked for: a WIT needs a `wit` key, a bearer token a
        /// `bearer` key.
        purpose: crate::purpose::KeyPurpose,
    },
    /// A key with this ID already exists.
    #[error("duplicate key ID {kid:?}: a key with this ID is already in the keyring")]
    DuplicateKey {
        /// The duplicated ID.
        kid: String,
    },
    /// A change to a replicated keyring lost a race (see
    /// [`ResultCode::KeyringConflict`]).
    #[error("replicated keyring at {source_name}: {reason}")]
    KeyringConflict {
        /// Where the keyring lives (the etcd prefix).
        source_name: String,
        /// What changed under the plan, and what to do.
        reason: String,
    },
    /// A replicated keyring's source could not answer (see
    /// [`ResultCode::KeyringUnavailable`]).
    #[error("replicated keyring at {source_name} unavailable: {cause}")]
    KeyringUnavailable {
        /// Where the keyring lives (the etcd prefix).
        source_name: String,
        /// What the source reported.
        cause: String,
    },
    /// A token-exchange hook failed; the manager retries with backoff.
    #[error("token exchange {exchange:?} for allocation {alloc_id:?} failed: {reason}")]
    TokenExchange {
        /// The exchange's name (the first that failed).
        exchange: String,
        /// The allocation.
        alloc_id: String,
        /// What the hook reported (never the secret).
        reason: String,
    },
    /// Proof of possession is required and was not given.
    #[error("proof of possession required: {reason}")]
    ProofRequired {
        /// What was presented instead.
        reason: String,
    },
    /// A workload proof token failed a check.
    #[error("invalid proof of possession: {reason}")]
    ProofInvalid {
        /// Which check, what was found and what was expected.
        reason: String,
    },
    /// A workload proof token was replayed (or could not be remembered).
    #[error("proof of possession replayed: {reason}")]
    ProofReplayed {
        /// The replayed `jti` (or why it could not be remembered).
        reason: String,
    },
    /// A key in custody could not be used: a key-encryption key could not
    /// wrap or unwrap a root key, or an external signer (a KMS) failed.
    #[error("key custody failed ({custodian}): {reason}")]
    KeyCustody {
        /// The KEK's or external signer's identifier (never a secret).
        custodian: String,
        /// What failed and what was expected.
        reason: String,
    },
}

impl Error {
    /// `InvalidArgument` unless keys of `purpose` may be made for `alg`
    /// ([`KeyPurpose::allows`](crate::purpose::KeyPurpose::allows)); `what`
    /// names the key for the message.
    pub(crate) fn unless_purpose_allows(
        purpose: crate::purpose::KeyPurpose,
        alg: crate::algorithm::Algorithm,
        what: &str,
    ) -> Result<()> {
        if purpose.allows(alg) {
            return Ok(());
        }
        Err(Error::invalid(
            "Keyring",
            "purpose",
            format!(
                "{what} cannot be a {purpose} key of {alg}: {} are signed with ES256 or RS256 keys only (kube-apiserver takes no EdDSA); make one with `wid keyring rotate --purpose {purpose} --alg ES256` (or RS256)",
                purpose.signs()
            ),
        ))
    }

    /// The error for signing (issuing, rotating, activating) with key `kid`
    /// of `alg` when that algorithm is verify-only.
    pub(crate) fn verify_only(alg: crate::algorithm::JwsAlgorithm, kid: &str) -> Error {
        Error::invalid(
            "Keyring",
            "algorithm",
            format!(
                "key {kid} is {}, a verify-only algorithm: it cannot sign, so it can be only inactive or deprecated (keys sign with EdDSA, ES256 or RS256; {} only verify)",
                alg.name(),
                crate::algorithm::JwsAlgorithm::VERIFY_ONLY_NAMES
            ),
        )
    }

    /// The stable result code for this error.
    pub fn code(&self) -> ResultCode {
        match self {
            Error::NullArgument { .. } => ResultCode::NullArgument,
            Error::InvalidArgument(_) => ResultCode::InvalidArgument,
            Error::Decode(_) => ResultCode::DecodeError,
            Error::Io { .. } => ResultCode::IoError,
            Error::Panic { .. } => ResultCode::Panic,
            Error::MalformedToken { .. } => ResultCode::MalformedToken,
            Error::UnsupportedAlgorithm { .. } => ResultCode::UnsupportedAlgorithm,
            Error::UnknownKey { .. } => ResultCode::UnknownKey,
            Error::BadSignature { .. } => ResultCode::BadSignature,
            Error::Expired { .. } => ResultCode::Expired,
            Error::NotYetValid { .. } => ResultCode::NotYetValid,
            Error::AudienceMismatch { .. } => ResultCode::AudienceMismatch,
            Error::IssuerMismatch { .. } | Error::UntrustedIssuer { .. } => {
                ResultCode::IssuerMismatch
            }
            Error::AllocationNotFound { .. } => ResultCode::AllocationNotFound,
            Error::AllocationTerminal { .. } => ResultCode::AllocationTerminal,
            Error::StoreUnavailable { .. } | Error::NodeStoreUnavailable { .. } => {
                ResultCode::StoreUnavailable
            }
            Error::TokenKindRefused { .. } => ResultCode::TokenKindRefused,
            Error::NodeNotFound { .. } => ResultCode::NodeNotFound,
            Error::NodeDown { .. } => ResultCode::NodeDown,
            Error::NoActiveKey { .. } => ResultCode::NoActiveKey,
            Error::DuplicateKey { .. } => ResultCode::DuplicateKey,
            Error::KeyringConflict { .. } => ResultCode::KeyringConflict,
            Error::KeyringUnavailable { .. } => ResultCode::KeyringUnavailable,
            Error::TokenExchange { .. } => ResultCode::TokenExchangeFailed,
            Error::ProofRequired { .. } => ResultCode::ProofRequired,
            Error::ProofInvalid { .. } => ResultCode::ProofInvalid,
            Error::ProofReplayed { .. } => ResultCode::ProofReplayed,
            Error::KeyCustody { .. } => ResultCode::KeyCustodyFailed,
        }
    }

    /// A single-problem validation error (`WID_RESULT_INVALID_ARGUMENT`):
    /// `subject` is what was validated (`"IssueRequest"`), `field` and
    /// `problem` what was wrong with it. For front ends (the C ABI, hosts)
    /// that refuse their own arguments with the library's wording.
    pub fn invalid(
        subject: &'static str,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Error {
        Error::InvalidArgument(InvalidArgument {
            subject,
            problems: vec![FieldProblem {
                field: field.into(),
                problem: problem.into(),
            }],
        })
    }
}

/// Shortens a caller-supplied value for quoting in an error message (64 bytes at
/// most, cut at a character boundary).
fn no_active_key_message(
    algorithm: crate::algorithm::Algorithm,
    purpose: crate::purpose::KeyPurpose,
) -> String {
    match purpose {
        crate::purpose::KeyPurpose::Bearer => format!(
            "no active {algorithm} key in the keyring: insert or rotate in an {algorithm} key before signing with it"
        ),
        _ => format!(
            "no active {algorithm} {purpose} key in the keyring: {} are signed only by keys made for them, never by a bearer key (whose JWKS relying parties trust); make one with `wid keyring rotate --purpose {purpose} --alg {algorithm}` (Keyring::rotate_purpose, wid_keyring_rotate_purpose)",
            purpose.signs()
        ),
    }
}

pub(crate) fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The library's result type.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
