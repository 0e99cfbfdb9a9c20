//! Public keys of every algorithm, and the exact signature check for each.
//!
//! * Ed25519: `verify_strict`'s acceptance, with per-key tables ([`super::sigcheck`]).
//! * ES256: the signature is exactly 64 bytes, `r || s` big-endian (RFC 7518
//!   3.4), with `r` and `s` in `[1, n-1]` (checked here, before the library);
//!   high `s` is accepted, as other JOSE libraries produce it.
//! * RS256: RSASSA-PKCS1-v1_5 with SHA-256; the signature is exactly as long as
//!   the modulus; keys have `n` of 2048 to 8192 bits and `e` = 65537.
//! * Verify-only (keys of other issuers): ES384 and ES512 as ES256 on P-384
//!   (`r || s`, 48 bytes each) and P-521 (66 bytes each), each scalar in
//!   `[1, n-1]`, nothing but the fixed-size form (never DER); PS256/384/512
//!   (RSASSA-PSS, MGF1 with the same hash, salt as long as the hash, RFC 7518
//!   3.5) and RS384/512, with RS256's key and length rules. An RSA key verifies
//!   the one algorithm it was imported with, never another on the same modulus.
//!
//! Every key but Ed25519 is parsed once into aws-lc-rs's `ParsedPublicKey`
//! (point validation, modulus checks) when they enter the keyring, never per
//! signature.

use std::fmt;

use aws_lc_rs::signature::{self as lc, ParsedPublicKey};
use ed25519_dalek::VerifyingKey;

use super::sigcheck::SigCheck;
use super::{Algorithm, JwsAlgorithm};

/// The order `n` of the P-256 group, big-endian.
pub(crate) const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The order `n` of the P-384 group, big-endian.
pub(crate) const P384_ORDER: [u8; 48] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc7, 0x63, 0x4d, 0x81, 0xf4, 0x37, 0x2d, 0xdf,
    0x58, 0x1a, 0x0d, 0xb2, 0x48, 0xb0, 0xa7, 0x7a, 0xec, 0xec, 0x19, 0x6a, 0xcc, 0xc5, 0x29, 0x73,
];

/// The order `n` of the P-521 group, big-endian in 66 bytes.
pub(crate) const P521_ORDER: [u8; 66] = [
    0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xfa, 0x51, 0x86, 0x87, 0x83, 0xbf, 0x2f, 0x96, 0x6b, 0x7f, 0xcc, 0x01, 0x48, 0xf7, 0x09,
    0xa5, 0xd0, 0x3b, 0xb5, 0xc9, 0xb8, 0x89, 0x9c, 0x47, 0xae, 0xbb, 0x6f, 0xb7, 0x1e, 0x91, 0x38,
    0x64, 0x09,
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
    /// A P-384 point (ES384; verify-only), affine coordinates, big-endian.
    P384 {
        /// The x coordinate.
        x: [u8; 48],
        /// The y coordinate.
        y: [u8; 48],
    },
    /// A P-521 point (ES512; verify-only), affine coordinates, big-endian
    /// in 66 bytes each (RFC 7518 6.2.1.2).
    P521 {
        /// The x coordinate.
        x: [u8; 66],
        /// The y coordinate.
        y: [u8; 66],
    },
    /// An RSA key bound to one verify-only RSA algorithm (`PS256`, `PS384`,
    /// `PS512`, `RS384` or `RS512`; an RS256 key is [`PublicKey::Rsa`]). The
    /// algorithm is part of the key: the same modulus under another
    /// algorithm is another key, and never checks that algorithm's tokens.
    /// Its exponent is always 65537.
    RsaVerifyOnly {
        /// The modulus, big-endian, without leading zero bytes.
        n: Vec<u8>,
        /// The one algorithm it verifies.
        alg: JwsAlgorithm,
    },
}

impl PublicKey {
    /// The algorithm this key verifies (its tokens' header `alg`).
    pub fn algorithm(&self) -> JwsAlgorithm {
        match self {
            PublicKey::Ed25519(_) => JwsAlgorithm::EdDsa,
            PublicKey::P256 { .. } => JwsAlgorithm::Es256,
            PublicKey::Rsa { .. } => JwsAlgorithm::Rs256,
            PublicKey::P384 { .. } => JwsAlgorithm::Es384,
            PublicKey::P521 { .. } => JwsAlgorithm::Es512,
            PublicKey::RsaVerifyOnly { alg, .. } => *alg,
        }
    }

    /// The algorithm a key of this kind can sign with here; `None` for a
    /// verify-only key.
    pub fn signing_algorithm(&self) -> Option<Algorithm> {
        self.algorithm().signing()
    }

    /// The public key of `alg` kept as `bytes` (see [`PublicKey::to_bytes`]).
    pub(crate) fn from_stored(alg: JwsAlgorithm, bytes: &[u8]) -> Result<PublicKey, KeyProblem> {
        fn point<const L: usize>(
            bytes: &[u8],
            curve: &str,
        ) -> Result<([u8; L], [u8; L]), KeyProblem> {
            match bytes.split_first() {
                Some((4, xy)) if xy.len() == 2 * L => {
                    let (x, y) = xy.split_at(L);
                    // Both halves are L bytes: the lengths were just checked.
                    Ok((
                        x.try_into().unwrap_or([0; L]),
                        y.try_into().unwrap_or([0; L]),
                    ))
                }
                _ => Err(format!(
                    "a {curve} key is a {}-byte uncompressed point (04 || x || y), got {} bytes",
                    1 + 2 * L,
                    bytes.len()
                )),
            }
        }
        Ok(match alg {
            JwsAlgorithm::Es384 => {
                let (x, y) = point::<48>(bytes, "P-384")?;
                PublicKey::P384 { x, y }
            }
            JwsAlgorithm::Es512 => {
                let (x, y) = point::<66>(bytes, "P-521")?;
                PublicKey::P521 { x, y }
            }
            JwsAlgorithm::Ps256
            | JwsAlgorithm::Ps384
            | JwsAlgorithm::Ps512
            | JwsAlgorithm::Rs384
            | JwsAlgorithm::Rs512 => PublicKey::RsaVerifyOnly {
                n: bytes.to_vec(),
                alg,
            },
            JwsAlgorithm::EdDsa | JwsAlgorithm::Es256 | JwsAlgorithm::Rs256 => {
                return Err(format!("{alg} keys are not stored this way"));
            }
        })
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
            PublicKey::Rsa { n } | PublicKey::RsaVerifyOnly { n, .. } => Some(modulus_bits(n)),
            _ => None,
        }
    }

    /// The bytes the keystore keeps: the 32-byte Ed25519 key, the 65-byte SEC1
    /// uncompressed point (`04 || x || y`; P-384 97 bytes, P-521 133), or the
    /// RSA modulus (a verify-only RSA key's algorithm is kept beside it).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        match self {
            PublicKey::Ed25519(vk) => vk.as_bytes().to_vec(),
            PublicKey::P256 { x, y } => sec1_uncompressed(x, y).to_vec(),
            PublicKey::P384 { x, y } => sec1_point(x, y),
            PublicKey::P521 { x, y } => sec1_point(x, y),
            PublicKey::Rsa { n } | PublicKey::RsaVerifyOnly { n, .. } => n.clone(),
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
            PublicKey::P384 { x, y } => write!(f, "P384(x={}, y={})", b64(x), b64(y)),
            PublicKey::P521 { x, y } => write!(f, "P521(x={}, y={})", b64(x), b64(y)),
            PublicKey::RsaVerifyOnly { n, alg } => {
                write!(f, "Rsa({} bits, {alg} only)", modulus_bits(n))
            }
        }
    }
}

/// `04 || x || y` for a point of any curve.
fn sec1_point(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(1 + x.len() + y.len());
    p.push(4);
    p.extend_from_slice(x);
    p.extend_from_slice(y);
    p
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
    /// Every other algorithm: a key parsed once by aws-lc-rs for exactly
    /// its algorithm (curve and hash, or RSA padding and hash), with the
    /// fixed signature length the JWS form has.
    Parsed {
        key: ParsedPublicKey,
        sig_len: usize,
        /// For ECDSA, the group order `r` and `s` must be below.
        order: Option<&'static [u8]>,
    },
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
                ec_check(&lc::ECDSA_P256_SHA256_FIXED, "P-256", x, y, &P256_ORDER)?
            }
            PublicKey::P384 { x, y } => {
                ec_check(&lc::ECDSA_P384_SHA384_FIXED, "P-384", x, y, &P384_ORDER)?
            }
            PublicKey::P521 { x, y } => {
                ec_check(&lc::ECDSA_P521_SHA512_FIXED, "P-521", x, y, &P521_ORDER)?
            }
            PublicKey::Rsa { n } => rsa_check(n, &lc::RSA_PKCS1_2048_8192_SHA256)?,
            PublicKey::RsaVerifyOnly { n, alg } => {
                let params = match alg {
                    JwsAlgorithm::Ps256 => &lc::RSA_PSS_2048_8192_SHA256,
                    JwsAlgorithm::Ps384 => &lc::RSA_PSS_2048_8192_SHA384,
                    JwsAlgorithm::Ps512 => &lc::RSA_PSS_2048_8192_SHA512,
                    JwsAlgorithm::Rs384 => &lc::RSA_PKCS1_2048_8192_SHA384,
                    JwsAlgorithm::Rs512 => &lc::RSA_PKCS1_2048_8192_SHA512,
                    other => {
                        return Err(format!(
                            "an RSA key bound to {other}: only PS256, PS384, PS512, RS384 and RS512 keys are bound this way (RS256 keys are plain RSA keys)"
                        ));
                    }
                };
                rsa_check(n, params)?
            }
        };
        Ok(Checker { public, check })
    }

    pub(crate) fn algorithm(&self) -> JwsAlgorithm {
        self.public.algorithm()
    }

    /// Whether `signature` is a valid signature of `message` under this key,
    /// with exactly the acceptance the module docs give for its algorithm.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.check {
            Check::Ed25519(c) => {
                <&[u8; 64]>::try_from(signature).is_ok_and(|sig| c.verify(message, sig))
            }
            Check::Parsed {
                key,
                sig_len,
                order,
            } => {
                signature.len() == *sig_len
                    && order.is_none_or(|n| ecdsa_scalars_in_range(signature, n))
                    && key.verify_sig(message, signature).is_ok()
            }
        }
    }

    /// The Ed25519 check, for batch verification.
    pub(crate) fn ed25519(&self) -> Option<&SigCheck> {
        match &self.check {
            Check::Ed25519(c) => Some(c),
            Check::Parsed { .. } => None,
        }
    }
}

/// An ECDSA check: the point parsed (and so validated on the curve) once.
fn ec_check(
    alg: &'static lc::EcdsaVerificationAlgorithm,
    curve: &str,
    x: &[u8],
    y: &[u8],
    order: &'static [u8],
) -> Result<Check, KeyProblem> {
    let key = ParsedPublicKey::new(alg, sec1_point(x, y))
        .map_err(|_| format!("not a point on the {curve} curve"))?;
    Ok(Check::Parsed {
        key,
        sig_len: 2 * order.len(),
        order: Some(order),
    })
}

/// An RSA check for one padding and hash, after the modulus rules.
fn rsa_check(n: &[u8], params: &'static lc::RsaParameters) -> Result<Check, KeyProblem> {
    check_rsa_modulus(n)?;
    let components = lc::RsaPublicKeyComponents { n, e: &RSA_E[..] };
    let key = components
        .to_parsed_public_key(params)
        .map_err(|_| "not a usable RSA public key".to_string())?;
    Ok(Check::Parsed {
        key,
        sig_len: n.len(),
        order: None,
    })
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

/// Whether a fixed-size ECDSA signature `r || s` (each as long as the group
/// order `n`, big-endian) has both in `[1, n-1]`; any other length is refused.
pub(crate) fn ecdsa_scalars_in_range(signature: &[u8], order: &[u8]) -> bool {
    let in_range = |v: &[u8]| v.iter().any(|b| *b != 0) && v < order;
    signature.len() == 2 * order.len()
        && in_range(&signature[..order.len()])
        && in_range(&signature[order.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es256_scalars_in_range(signature: &[u8]) -> bool {
        ecdsa_scalars_in_range(signature, &P256_ORDER)
    }

    #[test]
    fn es384_and_es512_scalar_bounds() {
        for order in [&P384_ORDER[..], &P521_ORDER[..]] {
            let l = order.len();
            let mut sig = vec![1u8; 2 * l];
            assert!(ecdsa_scalars_in_range(&sig, order));
            sig[..l].copy_from_slice(order);
            assert!(!ecdsa_scalars_in_range(&sig, order), "r = n");
            sig[..l].fill(0);
            assert!(!ecdsa_scalars_in_range(&sig, order), "r = 0");
            sig[..l].copy_from_slice(order);
            sig[l - 1] -= 1;
            assert!(ecdsa_scalars_in_range(&sig, order), "r = n - 1");
            sig[l..].fill(0xff);
            assert!(!ecdsa_scalars_in_range(&sig, order), "s > n");
            assert!(!ecdsa_scalars_in_range(&sig[1..], order), "short");
            assert!(!ecdsa_scalars_in_range(&[1u8; 64], order), "ES256's length");
        }
    }

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
