//! What a key signs: bearer tokens or WIMSE workload identity tokens (WITs).
//!
//! A WIT is shown to every service its workload calls; a bearer token only to
//! its audience. If one key signed both, any service that ever saw a WIT could
//! present it as a bearer token to every relying party trusting our OIDC JWKS
//! (OpenBao, AWS, GCP do not look at `typ`). So each key has one purpose,
//! fixed when it is made, and the two kinds of key are published apart: bearer
//! keys in the JWKS and discovery document, WIT keys in the WIT key set.

use std::fmt;

/// A key's purpose (`wid_key_purpose` in C).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum KeyPurpose {
    /// Signs bearer tokens (`typ` `JWT`): published in the JWKS, the OIDC
    /// discovery document and the SPIFFE bundle's `jwt-svid` entries. Every
    /// key made before purposes existed is a bearer key.
    #[default]
    Bearer = 1,
    /// Signs WIMSE workload identity tokens (`typ` `wit+jwt`) only: published
    /// in the WIT key set (`wid keyring jwks --purpose wit`, `/wit/jwks.json`,
    /// SPIFFE bundle entries with `use` `wit-svid`), never in the JWKS.
    Wit = 2,
    /// Signs a Kubernetes cluster's service-account tokens, through `wid
    /// k8s-signer` (the apiserver's external signer): ES256 or RS256 keys
    /// only, published in that purpose's own key set (`wid keyring jwks
    /// --purpose kubernetes`, the cluster issuer's discovery document on
    /// `wid serve`), never in the JWKS nor the WIT key set, so that no
    /// service-account token verifies as a workload identity, or the reverse.
    Kubernetes = 3,
}

/// How many purposes there are (the size of per-purpose tables).
pub(crate) const PURPOSE_COUNT: usize = 3;

impl KeyPurpose {
    /// Its name in keystores, etcd records and flags: `bearer` or `wit`.
    pub const fn name(self) -> &'static str {
        match self {
            KeyPurpose::Bearer => "bearer",
            KeyPurpose::Wit => "wit",
            KeyPurpose::Kubernetes => "kubernetes",
        }
    }

    /// The purpose with this name, exactly.
    pub fn from_name(name: &str) -> Option<KeyPurpose> {
        KeyPurpose::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// What a key of this purpose signs, for messages.
    pub const fn signs(self) -> &'static str {
        match self {
            KeyPurpose::Bearer => "bearer tokens",
            KeyPurpose::Wit => "workload identity tokens (WITs)",
            KeyPurpose::Kubernetes => "Kubernetes service-account tokens",
        }
    }

    /// Whether keys of this purpose may be made for `alg`: every algorithm
    /// but for `kubernetes`, which the apiserver accepts as ES256 and RS256
    /// only (of ours).
    pub const fn allows(self, alg: crate::algorithm::Algorithm) -> bool {
        match self {
            KeyPurpose::Kubernetes => matches!(
                alg,
                crate::algorithm::Algorithm::Es256 | crate::algorithm::Algorithm::Rs256
            ),
            KeyPurpose::Bearer | KeyPurpose::Wit => true,
        }
    }

    /// Position in per-purpose tables (0, 1, 2).
    pub(crate) const fn index(self) -> usize {
        self as usize - 1
    }
}

impl fmt::Display for KeyPurpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The position of the (purpose, algorithm) pair in per-pair tables: each
/// pair has at most one active key.
pub(crate) const fn pair_index(purpose: KeyPurpose, alg: crate::algorithm::Algorithm) -> usize {
    purpose.index() * crate::algorithm::ALGORITHM_COUNT + alg.index()
}

/// The size of per-pair tables.
pub(crate) const PAIR_COUNT: usize = PURPOSE_COUNT * crate::algorithm::ALGORITHM_COUNT;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;

    #[test]
    fn names_numbers_and_pairs() {
        assert_eq!(KeyPurpose::default(), KeyPurpose::Bearer);
        assert_eq!(KeyPurpose::Bearer as u32, 1);
        assert_eq!(KeyPurpose::Wit as u32, 2);
        assert_eq!(KeyPurpose::Kubernetes as u32, 3);
        assert_eq!(
            KeyPurpose::from_name("kubernetes"),
            Some(KeyPurpose::Kubernetes)
        );
        assert!(!KeyPurpose::Kubernetes.allows(Algorithm::EdDsa));
        assert!(KeyPurpose::Kubernetes.allows(Algorithm::Es256));
        assert!(KeyPurpose::Kubernetes.allows(Algorithm::Rs256));
        for &p in KeyPurpose::ALL {
            assert_eq!(KeyPurpose::from_name(p.name()), Some(p));
        }
        assert_eq!(KeyPurpose::from_name("Bearer"), None);
        assert_eq!(KeyPurpose::from_name(""), None);
        let mut seen = std::collections::HashSet::new();
        for &p in KeyPurpose::ALL {
            for a in Algorithm::ALL {
                let i = pair_index(p, *a);
                assert!(i < PAIR_COUNT);
                assert!(seen.insert(i), "pair index {i} twice");
            }
        }
    }
}
