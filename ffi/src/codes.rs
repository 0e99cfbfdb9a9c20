//! Every number C sees, from one source: the `#[repr(u32)]` enums themselves.
//!
//! The numbers are written once, as the enums' discriminants: the library's
//! (`ResultCode`, `KeyState`, `KeyDerivation`, `KeyPurpose`, `Algorithm`,
//! `Consistency`, `AllocState`, `NodeState`, read by cbindgen from the
//! workload-identity crate) and this crate's own (`NodeTokenMode` in
//! `verifier_builder`, the identity manager's in `host_callbacks`). cbindgen
//! exports them to the header as `wid_result`, `wid_key_state`,
//! `wid_key_derivation`, `wid_key_purpose`, `wid_alg`, `wid_consistency`,
//! `wid_alloc`, `wid_node`, `wid_node_tokens`, ... with their `WID_*`
//! enumerators (see `cbindgen.toml`). This file gives each variant its C name
//! once, and from that list derives the `WID_*` constants (for Rust callers
//! of the C ABI) and each enum's [`CEnum`] (`VALUES`, `from_number`,
//! `c_name`). Adding a code takes one variant and one line here;
//! `tests/c_header.rs` checks the names here are the header's and that both
//! match the pinned list in `abi/constants.txt`, and a unit test checks that
//! every value of the library's enums (their `ALL`) has its line here.
//!
//! (cbindgen does not expand macros, so nothing generated here reaches the
//! header twice.)

use workload_identity::ResultCode;
use workload_identity::{Algorithm, KeyDerivation, KeyPurpose, KeyState};
use workload_identity::{AllocState, Consistency, NodeState};

pub use super::c_enum::CEnum;
use super::host_callbacks::{ExchangeRefreshReason, ExchangeRefreshed, ManagedEvent, ManagedValue};
use super::verifier_builder::NodeTokenMode;

macro_rules! c_numbers {
    ($(
        $enum:ident {
            $($variant:ident => $cname:ident),+ $(,)?
        }
    )*) => {
        $(
            $(
                #[doc = concat!("`", stringify!($enum), "::", stringify!($variant), "` in C.")]
                pub const $cname: u32 = $enum::$variant as u32;
            )+

            impl CEnum for $enum {
                const VALUES: &'static [$enum] = &[$($enum::$variant),+];

                fn number(self) -> u32 {
                    self as u32
                }

                fn c_name(self) -> &'static std::ffi::CStr {
                    // The library's enums are `#[non_exhaustive]` to other
                    // crates: a variant missing here is caught by the test
                    // that compares `VALUES` with each enum's `ALL`.
                    #[allow(unreachable_patterns)]
                    match self {
                        $($enum::$variant => {
                            match std::ffi::CStr::from_bytes_with_nul(
                                concat!(stringify!($cname), "\0").as_bytes(),
                            ) {
                                Ok(name) => name,
                                // A literal with one trailing NUL: it cannot fail.
                                Err(_) => panic!("C names are NUL-free literals"),
                            }
                        })+
                        _ => c"WID_UNKNOWN",
                    }
                }
            }
        )*
    };
}

c_numbers! {
    ResultCode {
        Ok => WID_RESULT_OK,
        NullArgument => WID_RESULT_NULL_ARGUMENT,
        InvalidArgument => WID_RESULT_INVALID_ARGUMENT,
        DecodeError => WID_RESULT_DECODE_ERROR,
        IoError => WID_RESULT_IO_ERROR,
        Panic => WID_RESULT_PANIC,
        MalformedToken => WID_RESULT_MALFORMED_TOKEN,
        UnsupportedAlgorithm => WID_RESULT_UNSUPPORTED_ALGORITHM,
        UnknownKey => WID_RESULT_UNKNOWN_KEY,
        BadSignature => WID_RESULT_BAD_SIGNATURE,
        Expired => WID_RESULT_EXPIRED,
        NotYetValid => WID_RESULT_NOT_YET_VALID,
        AudienceMismatch => WID_RESULT_AUDIENCE_MISMATCH,
        IssuerMismatch => WID_RESULT_ISSUER_MISMATCH,
        TokenKindRefused => WID_RESULT_TOKEN_KIND_REFUSED,
        AllocationNotFound => WID_RESULT_ALLOCATION_NOT_FOUND,
        AllocationTerminal => WID_RESULT_ALLOCATION_TERMINAL,
        StoreUnavailable => WID_RESULT_STORE_UNAVAILABLE,
        NodeNotFound => WID_RESULT_NODE_NOT_FOUND,
        NodeDown => WID_RESULT_NODE_DOWN,
        NoActiveKey => WID_RESULT_NO_ACTIVE_KEY,
        DuplicateKey => WID_RESULT_DUPLICATE_KEY,
        KeyringConflict => WID_RESULT_KEYRING_CONFLICT,
        KeyringUnavailable => WID_RESULT_KEYRING_UNAVAILABLE,
        TokenExchangeFailed => WID_RESULT_TOKEN_EXCHANGE_FAILED,
        ProofRequired => WID_RESULT_PROOF_REQUIRED,
        ProofInvalid => WID_RESULT_PROOF_INVALID,
        ProofReplayed => WID_RESULT_PROOF_REPLAYED,
        KeyCustodyFailed => WID_RESULT_KEY_CUSTODY_FAILED,
    }
    KeyState {
        Active => WID_KEY_STATE_ACTIVE,
        Inactive => WID_KEY_STATE_INACTIVE,
        Prepublished => WID_KEY_STATE_PREPUBLISHED,
        Deprecated => WID_KEY_STATE_DEPRECATED,
    }
    KeyDerivation {
        HkdfV1 => WID_KEY_DERIVATION_HKDF_V1,
        NomadRawSeed => WID_KEY_DERIVATION_NOMAD_RAW_SEED,
        Pkcs8 => WID_KEY_DERIVATION_PKCS8,
    }
    Algorithm {
        EdDsa => WID_ALG_EDDSA,
        Es256 => WID_ALG_ES256,
        Rs256 => WID_ALG_RS256,
    }
    KeyPurpose {
        Bearer => WID_KEY_PURPOSE_BEARER,
        Wit => WID_KEY_PURPOSE_WIT,
        Kubernetes => WID_KEY_PURPOSE_KUBERNETES,
    }
    Consistency {
        Stale => WID_CONSISTENCY_STALE,
        Consistent => WID_CONSISTENCY_CONSISTENT,
    }
    AllocState {
        Missing => WID_ALLOC_MISSING,
        Live => WID_ALLOC_LIVE,
        Terminal => WID_ALLOC_TERMINAL,
    }
    NodeState {
        Missing => WID_NODE_MISSING,
        Live => WID_NODE_LIVE,
        Down => WID_NODE_DOWN,
    }
    NodeTokenMode {
        Refuse => WID_NODE_TOKENS_REFUSE,
        Accept => WID_NODE_TOKENS_ACCEPT,
        Only => WID_NODE_TOKENS_ONLY,
    }
    ManagedValue {
        Identity => WID_MANAGED_IDENTITY,
        Secret => WID_MANAGED_SECRET,
    }
    ManagedEvent {
        Initial => WID_EVENT_INITIAL,
        Renewed => WID_EVENT_RENEWED,
        Restored => WID_EVENT_RESTORED,
    }
    ExchangeRefreshReason {
        Due => WID_REFRESH_REASON_DUE,
        Resigned => WID_REFRESH_REASON_RESIGNED,
        Restored => WID_REFRESH_REASON_RESTORED,
    }
    ExchangeRefreshed {
        Kept => WID_REFRESHED_KEPT,
        Renewed => WID_REFRESHED_RENEWED,
        Replaced => WID_REFRESHED_REPLACED,
    }
}
