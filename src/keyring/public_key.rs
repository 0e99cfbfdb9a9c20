//! Public keys of every algorithm, and the exact signature check for each.
//!
//! * Ed25519: `verify_strict`'s acceptance, with per-key tables ([`super::sigcheck`]).
//! * ES256: the signature is exactly 64 bytes, `r || s` big-endian (RFC 7518
//!   3.4), with `r` and `s` in `[1, n-1]` (checked here, before the library);
//!   high `s` is accepted, as other JOSE libraries produce it.
//! * RS256: RSASSA-PKCS1-v1_5 with SHA-256; the signature is exactly as long as
//!   the modulus; keys have `n` of 2048 to 8192 bits and `e` = 65537.
//!
//! ES256 and RS256 keys are parsed once into aws-lc-rs's `ParsedPublicKey`
//! (point validation, modulus checks) when they enter the keyring, never per
//! signature.

use std::fmt;

use aws_lc_rs::signature::{self as lc, ParsedPublicKey};
use ed25519_dalek::VerifyingKey;

use super::Algorithm;
use super::sigcheck::SigCheck;

/// The order `n` of the P-256 group, big-endian.
pub(crate) const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The RSA public exponent every key must have: 65537.
pub(crate) const RSA_E: [u8; 3] = [0x01, 0x00, 0x01];
/// Smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: u32 = 2048;
/// Largest RSA modulus accepted, in bits.
pub const MAX_RSA_BITS: u32 = 8192;

/// A key's public half.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublicKey {
    /// An Ed25519 key (EdDSA).
    Ed25519(VerifyingKey),
    /// A P-256 point (ES256), affine coordinates, big-endian.
    P256 {
        /// The x coordinate.
        x: [u8; 32],
        /// The y coordinate.
        y: [u8; 32],
    },
    /// An RSA key (RS256); its exponent is always 65537.
    Rsa {
        /// The modulus, big-endian, without leading zero bytes.
        n: Vec<u8>,
    },
}

impl PublicKey {
    /// The algorithm this key verifies.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            PublicKey::Ed25519(_) => Algorithm::EdDsa,
            PublicKey::P256 { .. } => Algorithm::Es256,
            PublicKey::Rsa { .. } => Algorithm::Rs256,
        }
    }

    /// The Ed25519 key, if this is one.
    pub fn as_ed25519(&self) -> Option<&VerifyingKey> {
        match self {
            PublicKey::Ed25519(vk) => Some(vk),
            _ => None,
        }
    }

    /// The modulus size in bits, for an RSA key.
    pub fn rsa_bits(&self) -> Option<u32> {
        match self {
            PublicKey::Rsa { n } => Some(modulus_bits(n)),
            _ => None,
        }
    }

    /// The bytes the keystore keeps: the 32-byte Ed25519 key, the 65-byte SEC1
    /// uncompressed point (`04 || x || y`), or the RSA modulus.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        match self {
            PublicKey::Ed25519(vk) => vk.as_bytes().to_vec(),
            PublicKey::P256 { x, y } => sec1_uncompressed(x, y).to_vec(),
            PublicKey::Rsa { n } => n.clone(),
        }
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        match self {
            PublicKey::Ed25519(vk) => write!(f, "Ed25519({})", b64(vk.as_bytes())),
            PublicKey::P256 { x, y } => write!(f, "P256(x={}, y={})", b64(x), b64(y)),
            PublicKey::Rsa { n } => write!(f, "Rsa({} bits)", modulus_bits(n)),
        }
    }
}

pub(crate) fn sec1_uncompressed(x: &[u8; 32], y: &[u8; 32]) -> [u8; 65] {
    let mut p = [0u8; 65];
    p[0] = 4;
    p[1..33].copy_from_slice(x);
    p[33..].copy_from_slice(y);
    p
}

/// Bits in a big-endian modulus without leading zero bytes.
pub(crate) fn modulus_bits(n: &[u8]) -> u32 {
    match n.first() {
        None => 0,
        Some(top) => (n.len() as u32).saturating_mul(8) - top.leading_zeros(),
    }
}

/// Why a public key cannot be used, in words for an error message.
pub(crate) type KeyProblem = String;

/// A public key checked and ready to verify with.
pub(crate) struct Checker {
    pub(crate) public: PublicKey,
    check: Check,
}

enum Check {
    Ed25519(SigCheck),
    /// ES256 or RS256: a key parsed once by aws-lc-rs.
    Parsed(ParsedPublicKey),
}

impl Checker {
    /// A checker for `public`, after the checks every key must pass: Ed25519
    /// not of small order; P-256 on the curve; RSA of 2048 to 8192 bits (e is
    /// 65537 by construction).
    pub(crate) fn new(public: PublicKey) -> Result<Checker, KeyProblem> {
        Checker::make(public, SigCheck::new)
    }

    /// A checker for a workload's proof key: the same checks, but an Ed25519
    /// key gets no table of multiples until [`Checker::build_table`].
    pub(crate) fn for_proof_key(public: PublicKey) -> Result<Checker, KeyProblem> {
        Checker::make(public, SigCheck::untabled)
    }

    /// Builds the Ed25519 table of a proof key's checker (nothing for other
    /// algorithms, whose keys aws-lc-rs parsed once already).
    pub(crate) fn build_table(&self) {
        if let Check::Ed25519(c) = &self.check {
            c.build_table();
        }
    }

    fn make(
        public: PublicKey,
        ed25519: fn(VerifyingKey) -> SigCheck,
    ) -> Result<Checker, KeyProblem> {
        let check = match &public {
            PublicKey::Ed25519(vk) => {
                if vk.is_weak() {
                    return Err(
                        "a small-order (weak) Ed25519 public key: it would accept forged signatures"
                            .into(),
                    );
                }
                Check::Ed25519(ed25519(*vk))
            }
            PublicKey::P256 { x, y } => {
                let point = sec1_uncompressed(x, y);
                Check::Parsed(
                    ParsedPublicKey::new(&lc::ECDSA_P256_SHA256_FIXED, point)
                        .map_err(|_| "not a point on the P-256 curve".to_string())?,
                )
            }
            PublicKey::Rsa { n } => {
                check_rsa_modulus(n)?;
                let components = lc::RsaPublicKeyComponents {
                    n: n.as_slice(),
                    e: &RSA_E[..],
                };
                Check::Parsed(
                    components
                        .to_parsed_public_key(&lc::RSA_PKCS1_2048_8192_SHA256)
                        .map_err(|_| "not a usable RSA public key".to_string())?,
                )
            }
        };
        Ok(Checker { public, check })
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        self.public.algorithm()
    }

    /// Whether `signature` is a valid signature of `message` under this key,
    /// with exactly the acceptance the module docs give for its algorithm.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match (&self.check, &self.public) {
            (Check::Ed25519(c), _) => {
                <&[u8; 64]>::try_from(signature).is_ok_and(|sig| c.verify(message, sig))
            }
            (Check::Parsed(key), PublicKey::P256 { .. }) => {
                es256_scalars_in_range(signature) && key.verify_sig(message, signature).is_ok()
            }
            (Check::Parsed(key), PublicKey::Rsa { n }) => {
                signature.len() == n.len() && key.verify_sig(message, signature).is_ok()
            }
            (Check::Parsed(_), PublicKey::Ed25519(_)) => false,
        }
    }

    /// The Ed25519 check, for batch verification.
    pub(crate) fn ed25519(&self) -> Option<&SigCheck> {
        match &self.check {
            Check::Ed25519(c) => Some(c),
            Check::Parsed(_) => None,
        }
    }
}

/// The RSA modulus rules: canonical (no leading zero byte), 2048 to 8192 bits.
pub(crate) fn check_rsa_modulus(n: &[u8]) -> Result<(), KeyProblem> {
    if n.first() == Some(&0) {
        return Err("the RSA modulus has a leading zero byte (not canonical)".into());
    }
    let bits = modulus_bits(n);
    if bits < MIN_RSA_BITS {
        return Err(format!(
            "a {bits}-bit RSA key is too small: at least {MIN_RSA_BITS} bits are required"
        ));
    }
    if bits > MAX_RSA_BITS {
        return Err(format!(
            "a {bits}-bit RSA key is too large: at most {MAX_RSA_BITS} bits are accepted"
        ));
    }
    if n.last().is_some_and(|b| b & 1 == 0) {
        return Err("the RSA modulus is even".into());
    }
    Ok(())
}

/// Whether a 64-byte ES256 signature has `r` and `s` in `[1, n-1]`. Any
/// other length is refused too.
pub(crate) fn es256_scalars_in_range(signature: &[u8]) -> bool {
    let in_range = |v: &[u8]| v.iter().any(|b| *b != 0) && v < &P256_ORDER[..];
    signature.len() == 64 && in_range(&signature[..32]) && in_range(&signature[32..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn es256_scalar_bounds() {
        let mut sig = [1u8; 64];
        assert!(es256_scalars_in_range(&sig));
        sig[..32].copy_from_slice(&[0; 32]);
        assert!(!es256_scalars_in_range(&sig), "r = 0");
        sig[..32].copy_from_slice(&P256_ORDER);
        assert!(!es256_scalars_in_range(&sig), "r = n");
        let mut n_minus_1 = P256_ORDER;
        n_minus_1[31] -= 1;
        sig[..32].copy_from_slice(&n_minus_1);
        assert!(es256_scalars_in_range(&sig), "r = n - 1");
        sig[32..].copy_from_slice(&[0xff; 32]);
        assert!(!es256_scalars_in_range(&sig), "s > n");
        assert!(!es256_scalars_in_range(&[1u8; 63]));
        assert!(!es256_scalars_in_range(&[1u8; 65]));
    }

    #[test]
    fn rsa_modulus_rules() {
        let mut n = vec![0xffu8; 256];
        assert!(check_rsa_modulus(&n).is_ok());
        assert_eq!(modulus_bits(&n), 2048);
        n[0] = 0x7f;
        assert!(check_rsa_modulus(&n).unwrap_err().contains("2047-bit"));
        let mut z = vec![0u8];
        z.extend([0xffu8; 256]);
        assert!(check_rsa_modulus(&z).unwrap_err().contains("leading zero"));
        assert!(
            check_rsa_modulus(&vec![0xffu8; 1025])
                .unwrap_err()
                .contains("too large")
        );
    }
}
