//! The signing algorithms a key can have: EdDSA (Ed25519), ES256 (ECDSA P-256
//! with SHA-256) and RS256 (RSASSA-PKCS1-v1_5 with SHA-256).
//!
//! Every key has exactly one, fixed when the key is made and kept in the
//! keystore; a token's header `alg` must name its key's algorithm (see
//! [`Algorithm::from_header`]).
//!
//! Keys this library only *verifies* with (imported from another issuer's
//! JWKS) may have one of seven more algorithms: ES384, ES512, PS256, PS384,
//! PS512, RS384 and RS512. [`JwsAlgorithm`] names all ten; [`Algorithm`] stays
//! the three a key can sign with, so nothing that signs, rotates or issues can
//! even name a verify-only algorithm.

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

/// Every algorithm a token can be verified with: the three signing
/// [`Algorithm`]s and seven **verify-only** ones (keys of other issuers,
/// imported from a JWKS: SPIRE's ES384 JWT-SVIDs, Kubernetes' ES512, RSA-PSS).
///
/// | value | name | keys | signs here |
/// |---|---|---|---|
/// | 1 | `EdDSA` | OKP Ed25519 | yes |
/// | 2 | `ES256` | EC P-256 | yes |
/// | 3 | `RS256` | RSA, RSASSA-PKCS1-v1_5 + SHA-256 | yes |
/// | 4 | `ES384` | EC P-384 | verify-only |
/// | 5 | `ES512` | EC P-521 | verify-only |
/// | 6 | `PS256` | RSA, RSASSA-PSS + SHA-256 | verify-only |
/// | 7 | `PS384` | RSA, RSASSA-PSS + SHA-384 | verify-only |
/// | 8 | `PS512` | RSA, RSASSA-PSS + SHA-512 | verify-only |
/// | 9 | `RS384` | RSA, RSASSA-PKCS1-v1_5 + SHA-384 | verify-only |
/// | 10 | `RS512` | RSA, RSASSA-PKCS1-v1_5 + SHA-512 | verify-only |
///
/// Values 1 to 3 are [`Algorithm`]'s (the C ABI's `WID_ALG_*`); new
/// algorithms are appended, never renumbered. A verify-only key is never
/// active or prepublished: [`JwsAlgorithm::signing`] is `None` for it, and
/// inserting it in a signing state is refused, naming the algorithm.
///
/// An RSA key verifies exactly one RSA algorithm, the one its JWK's `alg`
/// names (`RS256` when the JWK has none, as before), so a PS256 key never
/// checks an RS256 token nor the reverse. An EC key's algorithm is fixed by its
/// curve.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum JwsAlgorithm {
    /// EdDSA over Ed25519 (RFC 8037); signs.
    #[default]
    EdDsa = 1,
    /// ECDSA over P-256 with SHA-256 (RFC 7518 3.4); signs.
    Es256 = 2,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 3.3); signs.
    Rs256 = 3,
    /// ECDSA over P-384 with SHA-384, `r || s` of 48 bytes each; verify-only.
    Es384 = 4,
    /// ECDSA over P-521 with SHA-512, `r || s` of 66 bytes each; verify-only.
    Es512 = 5,
    /// RSASSA-PSS with SHA-256, MGF1-SHA-256, 32-byte salt (RFC 7518 3.5); verify-only.
    Ps256 = 6,
    /// RSASSA-PSS with SHA-384, MGF1-SHA-384, 48-byte salt; verify-only.
    Ps384 = 7,
    /// RSASSA-PSS with SHA-512, MGF1-SHA-512, 64-byte salt; verify-only.
    Ps512 = 8,
    /// RSASSA-PKCS1-v1_5 with SHA-384; verify-only.
    Rs384 = 9,
    /// RSASSA-PKCS1-v1_5 with SHA-512; verify-only.
    Rs512 = 10,
}

impl JwsAlgorithm {
    /// Every algorithm, in value order.
    pub const ALL: [JwsAlgorithm; 10] = [
        JwsAlgorithm::EdDsa,
        JwsAlgorithm::Es256,
        JwsAlgorithm::Rs256,
        JwsAlgorithm::Es384,
        JwsAlgorithm::Es512,
        JwsAlgorithm::Ps256,
        JwsAlgorithm::Ps384,
        JwsAlgorithm::Ps512,
        JwsAlgorithm::Rs384,
        JwsAlgorithm::Rs512,
    ];

    /// The verify-only algorithms' names, for messages.
    pub(crate) const VERIFY_ONLY_NAMES: &'static str =
        "ES384, ES512, PS256, PS384, PS512, RS384, RS512";

    /// The JOSE name (what tokens carry in `alg`).
    pub const fn name(self) -> &'static str {
        match self {
            JwsAlgorithm::EdDsa => "EdDSA",
            JwsAlgorithm::Es256 => "ES256",
            JwsAlgorithm::Rs256 => "RS256",
            JwsAlgorithm::Es384 => "ES384",
            JwsAlgorithm::Es512 => "ES512",
            JwsAlgorithm::Ps256 => "PS256",
            JwsAlgorithm::Ps384 => "PS384",
            JwsAlgorithm::Ps512 => "PS512",
            JwsAlgorithm::Rs384 => "RS384",
            JwsAlgorithm::Rs512 => "RS512",
        }
    }

    /// The algorithm with this JOSE name, exactly (case matters). `HS*` and
    /// `none` are no algorithm here.
    ///
    /// ```
    /// use workload_identity::{Algorithm, JwsAlgorithm};
    /// assert_eq!(JwsAlgorithm::from_name("PS256"), Some(JwsAlgorithm::Ps256));
    /// assert_eq!(JwsAlgorithm::from_name("ES384").unwrap().signing(), None);
    /// assert_eq!(JwsAlgorithm::from_name("ES256").unwrap().signing(), Some(Algorithm::Es256));
    /// assert_eq!(JwsAlgorithm::from_name("HS384"), None);
    /// assert_eq!(JwsAlgorithm::from_name("none"), None);
    /// assert_eq!(JwsAlgorithm::from_header("Ed25519"), Some(JwsAlgorithm::EdDsa));
    /// ```
    pub fn from_name(name: &str) -> Option<JwsAlgorithm> {
        JwsAlgorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The algorithm a token header's `alg` names: the JOSE names, and
    /// `Ed25519` (RFC 9864) for EdDSA.
    pub fn from_header(alg: &str) -> Option<JwsAlgorithm> {
        match alg {
            "Ed25519" => Some(JwsAlgorithm::EdDsa),
            other => JwsAlgorithm::from_name(other),
        }
    }

    /// The algorithm with this value (1 to 10), if any.
    pub fn from_u32(value: u32) -> Option<JwsAlgorithm> {
        JwsAlgorithm::ALL.into_iter().find(|a| *a as u32 == value)
    }

    /// The stable number (see the table above).
    pub const fn as_u32(self) -> u32 {
        self as u32
    }

    /// The signing [`Algorithm`] this is, or `None` for a verify-only one.
    pub const fn signing(self) -> Option<Algorithm> {
        match self {
            JwsAlgorithm::EdDsa => Some(Algorithm::EdDsa),
            JwsAlgorithm::Es256 => Some(Algorithm::Es256),
            JwsAlgorithm::Rs256 => Some(Algorithm::Rs256),
            _ => None,
        }
    }

    /// Whether keys of this algorithm only verify here (never sign).
    pub const fn is_verify_only(self) -> bool {
        self.signing().is_none()
    }

    /// The JWK key type of its keys: `OKP`, `EC` or `RSA`.
    pub const fn key_type(self) -> &'static str {
        match self {
            JwsAlgorithm::EdDsa => "OKP",
            JwsAlgorithm::Es256 | JwsAlgorithm::Es384 | JwsAlgorithm::Es512 => "EC",
            _ => "RSA",
        }
    }
}

impl From<Algorithm> for JwsAlgorithm {
    fn from(alg: Algorithm) -> JwsAlgorithm {
        match alg {
            Algorithm::EdDsa => JwsAlgorithm::EdDsa,
            Algorithm::Es256 => JwsAlgorithm::Es256,
            Algorithm::Rs256 => JwsAlgorithm::Rs256,
        }
    }
}

impl PartialEq<Algorithm> for JwsAlgorithm {
    fn eq(&self, other: &Algorithm) -> bool {
        *self == JwsAlgorithm::from(*other)
    }
}

impl PartialEq<JwsAlgorithm> for Algorithm {
    fn eq(&self, other: &JwsAlgorithm) -> bool {
        JwsAlgorithm::from(*self) == *other
    }
}

impl fmt::Display for JwsAlgorithm {
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
