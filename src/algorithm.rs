//! The signing algorithms a key can have: EdDSA (Ed25519), ES256 (ECDSA P-256
//! with SHA-256) and RS256 (RSASSA-PKCS1-v1_5 with SHA-256).
//!
//! Every key has exactly one, fixed when the key is made and kept in the
//! keystore; a token's header `alg` must name its key's algorithm (see
//! [`Algorithm::from_header`]).

use std::fmt;

/// A signing algorithm (its JOSE name is `Algorithm::name`).
///
/// Which to use: `EdDSA` where the relying party accepts it (Vault, Consul):
/// the smallest keys and tokens, fast to sign and to verify. `ES256` for AWS
/// STS and GCP workload identity federation (and SPIFFE JWT-SVID validators):
/// keys derive from the same 32 bytes of root material, so keystores stay
/// small; the slowest to verify. `RS256` where only RSA is accepted (Azure
/// federated credentials) or for verifying Nomad 1.7+ tokens: generated keys,
/// ten times slower to sign, the fastest to verify.
/// cbindgen:rename-all=UpperCase
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// EdDSA over Ed25519 (RFC 8037); the default.
    #[default]
    EdDsa = 1,
    /// ECDSA over P-256 with SHA-256 (RFC 7518 3.4).
    Es256 = 2,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 3.3).
    Rs256 = 3,
}

/// How many algorithms there are (the size of per-algorithm tables).
pub(crate) const ALGORITHM_COUNT: usize = 3;

impl Algorithm {
    /// The JOSE name: `EdDSA`, `ES256` or `RS256` (what tokens carry in `alg`).
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::EdDsa => "EdDSA",
            Algorithm::Es256 => "ES256",
            Algorithm::Rs256 => "RS256",
        }
    }

    /// The algorithm with this JOSE name, exactly (case matters).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        match name {
            "EdDSA" => Some(Algorithm::EdDsa),
            "ES256" => Some(Algorithm::Es256),
            "RS256" => Some(Algorithm::Rs256),
            _ => None,
        }
    }

    /// The algorithm a token header's `alg` names: the JOSE names, and
    /// `Ed25519` (RFC 9864's fully specified name) for EdDSA.
    ///
    /// ```
    /// use workload_identity::Algorithm;
    /// assert_eq!(Algorithm::Es256.name(), "ES256");
    /// assert_eq!(Algorithm::from_name("RS256"), Some(Algorithm::Rs256));
    /// assert_eq!(Algorithm::from_name("HS256"), None);
    /// // RFC 9864's name is accepted in a token header, never as a name.
    /// assert_eq!(Algorithm::from_header("Ed25519"), Some(Algorithm::EdDsa));
    /// assert_eq!(Algorithm::from_name("Ed25519"), None);
    /// ```
    pub fn from_header(alg: &str) -> Option<Algorithm> {
        match alg {
            "Ed25519" => Some(Algorithm::EdDsa),
            other => Algorithm::from_name(other),
        }
    }

    /// The JWK key type of its keys: `OKP`, `EC` or `RSA`.
    pub const fn key_type(self) -> &'static str {
        match self {
            Algorithm::EdDsa => "OKP",
            Algorithm::Es256 => "EC",
            Algorithm::Rs256 => "RSA",
        }
    }

    /// Position in per-algorithm tables (0, 1, 2).
    pub(crate) const fn index(self) -> usize {
        self as usize - 1
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The size of a generated RSA key, in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RsaKeySize {
    /// 2048 bits (the default; what Nomad, AWS and Azure use).
    #[default]
    Bits2048,
    /// 3072 bits.
    Bits3072,
    /// 4096 bits.
    Bits4096,
}

impl RsaKeySize {
    /// The size in bits.
    pub const fn bits(self) -> u32 {
        match self {
            RsaKeySize::Bits2048 => 2048,
            RsaKeySize::Bits3072 => 3072,
            RsaKeySize::Bits4096 => 4096,
        }
    }

    /// The size for `bits` (2048, 3072 or 4096).
    pub fn from_bits(bits: u32) -> Option<RsaKeySize> {
        [
            RsaKeySize::Bits2048,
            RsaKeySize::Bits3072,
            RsaKeySize::Bits4096,
        ]
        .into_iter()
        .find(|s| s.bits() == bits)
    }
}
