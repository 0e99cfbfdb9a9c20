//! The stable numbers of the enums that cross the C ABI and the wire
//! (`ResultCode`, the key and state enums, `Algorithm`): each enum's `ALL`,
//! `from_u32` and `as_u32`, from its `#[repr(u32)]` discriminants.
//!
//! The C names of these numbers live with the C ABI (the
//! `workload-identity-ffi` crate); here they are plain Rust. Each list is
//! checked complete at compile time: adding a variant without listing it here
//! does not build.

use crate::algorithm::Algorithm;
use crate::error::ResultCode;
use crate::keyring::{KeyDerivation, KeyPurpose, KeyState};
use crate::state::{AllocState, Consistency, NodeState};

macro_rules! numbered {
    ($($enum:ident { $($variant:ident),+ $(,)? })*) => {
        $(
            impl $enum {
                /// Every value, in declaration order.
                pub const ALL: &'static [$enum] = &[$($enum::$variant),+];

                /// The value with this stable number, if there is one.
                pub fn from_u32(n: u32) -> Option<$enum> {
                    Self::ALL.iter().copied().find(|v| *v as u32 == n)
                }

                /// The stable number (the C enumerator's value).
                pub const fn as_u32(self) -> u32 {
                    self as u32
                }
            }

            // The list above names every variant: this match is exhaustive.
            const _: fn($enum) = |v| match v {
                $($enum::$variant => ()),+
            };
        )*
    };
}

numbered! {
    ResultCode {
        Ok, NullArgument, InvalidArgument, DecodeError, IoError, Panic, MalformedToken,
        UnsupportedAlgorithm, UnknownKey, BadSignature, Expired, NotYetValid,
        AudienceMismatch, IssuerMismatch, TokenKindRefused, AllocationNotFound,
        AllocationTerminal, StoreUnavailable, NodeNotFound, NodeDown, NoActiveKey,
        DuplicateKey, KeyringConflict, KeyringUnavailable, TokenExchangeFailed,
        ProofRequired, ProofInvalid, ProofReplayed, KeyCustodyFailed,
    }
    KeyState { Active, Inactive, Prepublished, Deprecated }
    KeyDerivation { HkdfV1, NomadRawSeed, Pkcs8 }
    Algorithm { EdDsa, Es256, Rs256 }
    KeyPurpose { Bearer, Wit, Kubernetes }
    Consistency { Stale, Consistent }
    AllocState { Missing, Live, Terminal }
    NodeState { Missing, Live, Down }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_unknown_numbers_are_none() {
        for c in ResultCode::ALL {
            assert_eq!(ResultCode::from_u32(c.as_u32()), Some(*c));
        }
        assert_eq!(ResultCode::from_u32(6), None);
        assert_eq!(ResultCode::from_u32(u32::MAX), None);
        assert_eq!(Algorithm::from_u32(0), None);
        assert_eq!(AllocState::from_u32(1), Some(AllocState::Live));
    }
}
