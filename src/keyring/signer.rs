//! Private keys of every algorithm, made once from a root key's material when
//! the key enters the keyring (never per signature).
//!
//! * EdDSA: the Ed25519 seed from the key's derivation (HKDF v1 or Nomad's raw
//!   seed).
//! * ES256: a P-256 scalar derived from the 32 bytes of material by the fixed
//!   contract: okm = HKDF-SHA256(salt `workload-identity/p256/v1`, IKM material,
//!   info key ID), 48 bytes; d = (OS2IP(okm) mod (n - 1)) + 1. The reduction runs
//!   in constant time (it handles the secret).
//! * RS256: the material is the PKCS#8 DER private key itself (RSA keys cannot
//!   be derived; they are generated from the OS CSPRNG).
//!
//! Ed25519, ECDSA and RSA signing run in aws-lc-rs (AWS-LC): constant-time
//! scalar multiplication and blinded, constant-time RSA private-key
//! operations. The Ed25519 seed and public key still come from
//! ed25519-dalek (the seeding contract); aws-lc signs with the pair.

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as lc, EcdsaKeyPair, KeyPair, RsaKeyPair};
use hkdf::Hkdf;
use sha2::Sha256;
use subtle::{Choice, ConditionallySelectable};
use zeroize::Zeroizing;

use super::public_key::{
    MAX_RSA_BITS, MIN_RSA_BITS, P256_ORDER, PublicKey, RSA_E, check_rsa_modulus,
};
use super::{Algorithm, KeyDerivation, KeyId, KeyMaterial, RsaKeySize};

/// The HKDF salt of the ES256 derivation (fixed by the contract).
pub const HKDF_P256_SALT: &[u8] = b"workload-identity/p256/v1";

/// A private key ready to sign.
pub(crate) enum Signer {
    Ed25519(Ed25519Signer),
    P256(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

/// An Ed25519 key, signing with aws-lc-rs: its x86-64 and aarch64 assembly
/// (s2n-bignum) signs in half the instructions ed25519-dalek's portable code
/// takes (BENCHMARKS.md). The signature is RFC 8032's, deterministic, so the
/// same bytes either way; the key pair is checked at load against the
/// public key ed25519-dalek derives from the same seed (the key-seeding
/// contract's), and a mismatch refuses the key. aws-lc clears the key when
/// it frees it.
pub(crate) struct Ed25519Signer {
    pair: lc::Ed25519KeyPair,
}

impl Ed25519Signer {
    fn of(key: &ed25519_dalek::SigningKey) -> Result<Ed25519Signer, MaterialProblem> {
        let public = key.verifying_key();
        let pair = lc::Ed25519KeyPair::from_seed_and_public_key(key.as_bytes(), public.as_bytes())
            .map_err(|e| format!("the Ed25519 key was refused by aws-lc: {e}"))?;
        Ok(Ed25519Signer { pair })
    }

    fn sign(&self, message: &[u8]) -> lc::Signature {
        self.pair.sign(message)
    }
}

/// Why material cannot make a key of its algorithm.
pub(crate) type MaterialProblem = String;

impl Signer {
    /// The signer and public key for `material` under `id`, with `alg` and
    /// `derivation` (a pairing the contract allows: EdDSA with HKDF v1 or Nomad's
    /// raw seed, ES256 with HKDF v1, RS256 with PKCS#8).
    pub(crate) fn new(
        alg: Algorithm,
        derivation: KeyDerivation,
        material: &KeyMaterial,
        id: &KeyId,
    ) -> Result<(Signer, PublicKey), MaterialProblem> {
        check_pairing(alg, derivation)?;
        if alg != Algorithm::Rs256 && material.len() != super::MATERIAL_LEN {
            return Err(format!(
                "{alg} material must be {} bytes, got {}",
                super::MATERIAL_LEN,
                material.len()
            ));
        }
        match alg {
            Algorithm::EdDsa => {
                let signing = derivation.signing_key(material, id);
                let public = PublicKey::Ed25519(signing.verifying_key());
                Ok((Signer::Ed25519(Ed25519Signer::of(&signing)?), public))
            }
            Algorithm::Es256 => {
                let d = p256_scalar(material, id);
                let der = ec_private_key_der(&d);
                let pair =
                    EcdsaKeyPair::from_private_key_der(&lc::ECDSA_P256_SHA256_FIXED_SIGNING, &*der)
                        .map_err(|e| format!("the derived P-256 key was refused: {e}"))?;
                let point = pair.public_key().as_ref();
                let (x, y) = match point {
                    [4, rest @ ..] if rest.len() == 64 => {
                        let mut x = [0u8; 32];
                        let mut y = [0u8; 32];
                        x.copy_from_slice(&rest[..32]);
                        y.copy_from_slice(&rest[32..]);
                        (x, y)
                    }
                    _ => return Err("the P-256 public key is not an uncompressed point".into()),
                };
                Ok((Signer::P256(pair), PublicKey::P256 { x, y }))
            }
            Algorithm::Rs256 => {
                check_der_whole(material.expose_secret())?;
                let pair = RsaKeyPair::from_pkcs8(material.expose_secret()).map_err(|e| match e
                    .description_()
                {
                    "TooSmall" => format!(
                        "the RSA key is too small: at least {MIN_RSA_BITS} bits are required"
                    ),
                    "TooLarge" => format!(
                        "the RSA key is too large: at most {MAX_RSA_BITS} bits are accepted"
                    ),
                    why => format!("not a PKCS#8 DER RSA private key ({why})"),
                })?;
                let public = pair.public_key();
                if public.exponent().big_endian_without_leading_zero() != RSA_E {
                    return Err("the RSA public exponent must be 65537".into());
                }
                let n = public.modulus().big_endian_without_leading_zero().to_vec();
                check_rsa_modulus(&n)?;
                Ok((Signer::Rsa(pair), PublicKey::Rsa { n }))
            }
        }
    }

    /// Signs `message` (the JWS signing input) and hands the signature to
    /// `f` where it was made (on the stack for Ed25519 and ECDSA), so a
    /// caller that only copies it on allocates nothing. Only a failure
    /// inside the crypto library (none is known for valid keys) is an error.
    pub(crate) fn sign_with<R>(
        &self,
        message: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, &'static str> {
        match self {
            Signer::Ed25519(k) => Ok(f(k.sign(message).as_ref())),
            // Borrowed where it lies: aws-lc-rs's `Signature` has room for
            // any algorithm's (over 1 KiB), and moving it is a copy.
            Signer::P256(k) => match &k.sign(&SystemRandom::new(), message) {
                Ok(sig) => Ok(f(sig.as_ref())),
                Err(_) => Err("ECDSA signing failed"),
            },
            Signer::Rsa(k) => {
                let mut sig = vec![0u8; k.public_modulus_len()];
                k.sign(
                    &lc::RSA_PKCS1_SHA256,
                    &SystemRandom::new(),
                    message,
                    &mut sig,
                )
                .map_err(|_| "RSA signing failed")?;
                Ok(f(&sig))
            }
        }
    }
}

/// The material must be exactly one DER SEQUENCE: bytes after it (which a
/// parser may skip) would be stored and carried along unchecked.
fn check_der_whole(der: &[u8]) -> Result<(), MaterialProblem> {
    let whole = match der {
        [0x30, n, rest @ ..] if *n < 0x80 => Some(usize::from(*n) == rest.len()),
        [0x30, 0x81, n, rest @ ..] => Some(usize::from(*n) == rest.len()),
        [0x30, 0x82, hi, lo, rest @ ..] => {
            Some((usize::from(*hi) << 8 | usize::from(*lo)) == rest.len())
        }
        [0x30, 0x83, a, b, c, rest @ ..] => {
            Some((usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c)) == rest.len())
        }
        _ => None,
    };
    match whole {
        Some(true) => Ok(()),
        Some(false) => Err(
            "not a PKCS#8 DER RSA private key: its length does not match the DER SEQUENCE (trailing or missing bytes)"
                .into(),
        ),
        None => Err("not a PKCS#8 DER RSA private key: it does not start with a DER SEQUENCE".into()),
    }
}

/// Whether `derivation` can make a key of `alg`.
pub(crate) fn check_pairing(
    alg: Algorithm,
    derivation: KeyDerivation,
) -> Result<(), MaterialProblem> {
    let ok = matches!(
        (alg, derivation),
        (
            Algorithm::EdDsa,
            KeyDerivation::HkdfV1 | KeyDerivation::NomadRawSeed
        ) | (Algorithm::Es256, KeyDerivation::HkdfV1)
            | (Algorithm::Rs256, KeyDerivation::Pkcs8)
    );
    if ok {
        Ok(())
    } else {
        let expected = match alg {
            Algorithm::EdDsa => "hkdf-v1 or nomad-raw-seed",
            Algorithm::Es256 => "hkdf-v1",
            Algorithm::Rs256 => "pkcs8",
        };
        Err(format!(
            "an {alg} key cannot use the {} derivation: expected {expected}",
            derivation.name()
        ))
    }
}

/// Fresh RSA key material: a PKCS#8 DER private key from the OS CSPRNG, e = 65537.
pub(crate) fn generate_rsa(size: RsaKeySize) -> Result<KeyMaterial, &'static str> {
    let size = match size {
        RsaKeySize::Bits2048 => aws_lc_rs::rsa::KeySize::Rsa2048,
        RsaKeySize::Bits3072 => aws_lc_rs::rsa::KeySize::Rsa3072,
        RsaKeySize::Bits4096 => aws_lc_rs::rsa::KeySize::Rsa4096,
    };
    let pair = RsaKeyPair::generate(size).map_err(|_| "RSA key generation failed")?;
    // aws-lc-rs zeroizes this buffer on drop.
    let der = pair
        .as_der()
        .map_err(|_| "RSA private key encoding failed")?;
    KeyMaterial::from_pkcs8_der(der.as_ref()).map_err(|_| "RSA private key encoding failed")
}

/// n - 1 as little-endian 64-bit limbs.
const N_MINUS_1: [u64; 4] = {
    let mut limbs = [0u64; 4];
    let mut i = 0;
    while i < 4 {
        let mut limb = 0u64;
        let mut j = 0;
        while j < 8 {
            limb = (limb << 8) | P256_ORDER[(3 - i) * 8 + j] as u64;
            j += 1;
        }
        limbs[i] = limb;
        i += 1;
    }
    limbs[0] -= 1; // n is odd: no borrow.
    limbs
};

/// The ES256 private scalar for `material` under `id` (see the module docs),
/// big-endian.
pub(crate) fn p256_scalar(material: &KeyMaterial, id: &KeyId) -> Zeroizing<[u8; 32]> {
    let mut okm = Zeroizing::new([0u8; 48]);
    let hk = Hkdf::<Sha256>::new(Some(HKDF_P256_SALT), material.expose_secret());
    // 48 bytes is far below HKDF-SHA256's 8160-byte output limit.
    hk.expand(id.as_str().as_bytes(), okm.as_mut())
        .expect("48 bytes is a valid HKDF-SHA256 output length");
    let r = Zeroizing::new(reduce_mod_n_minus_1(okm.as_slice()));
    // r <= n - 2, so r + 1 fits in 256 bits.
    let mut d = Zeroizing::new([0u64; 4]);
    let mut carry = 1u64;
    for i in 0..4 {
        let (v, c) = r[i].overflowing_add(carry);
        d[i] = v;
        carry = u64::from(c);
    }
    let mut out = Zeroizing::new([0u8; 32]);
    for i in 0..4 {
        out[(3 - i) * 8..(4 - i) * 8].copy_from_slice(&d[i].to_be_bytes());
    }
    out
}

/// A big-endian number mod (n - 1), bit by bit in constant time: the same
/// shifts, subtractions and selections whatever the value.
fn reduce_mod_n_minus_1(be: &[u8]) -> [u64; 4] {
    let m = N_MINUS_1;
    let mut r = [0u64; 4];
    for byte in be {
        for bit in (0..8).rev() {
            let incoming = u64::from((byte >> bit) & 1);
            // r = 2r + bit, with the bit shifted out of r kept in `top`.
            let top = r[3] >> 63;
            r[3] = (r[3] << 1) | (r[2] >> 63);
            r[2] = (r[2] << 1) | (r[1] >> 63);
            r[1] = (r[1] << 1) | (r[0] >> 63);
            r[0] = (r[0] << 1) | incoming;
            // t = r - m (mod 2^256) and the borrow out.
            let mut t = [0u64; 4];
            let mut borrow = 0u64;
            for i in 0..4 {
                let (v1, b1) = r[i].overflowing_sub(m[i]);
                let (v2, b2) = v1.overflowing_sub(borrow);
                t[i] = v2;
                borrow = u64::from(b1) | u64::from(b2);
            }
            // The true value is top * 2^256 + r < 2m; subtract m when it is >= m:
            // when the top bit is set, or when r - m did not borrow.
            let subtract = Choice::from((top | (borrow ^ 1)) as u8);
            for i in 0..4 {
                r[i] = u64::conditional_select(&r[i], &t[i], subtract);
            }
        }
    }
    r
}

/// An RFC 5915 `ECPrivateKey` for P-256 without the optional public key
/// (AWS-LC computes it): SEQUENCE { 1, OCTET STRING d, [0] prime256v1 }.
fn ec_private_key_der(d: &[u8; 32]) -> Zeroizing<[u8; 51]> {
    const HEAD: [u8; 7] = [0x30, 0x31, 0x02, 0x01, 0x01, 0x04, 0x20];
    const CURVE: [u8; 12] = [
        0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ];
    let mut der = Zeroizing::new([0u8; 51]);
    der[..7].copy_from_slice(&HEAD);
    der[7..39].copy_from_slice(d);
    der[39..].copy_from_slice(&CURVE);
    der
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(limbs: [u64; 4]) -> [u8; 32] {
        let mut out = [0u8; 32];
        for i in 0..4 {
            out[(3 - i) * 8..(4 - i) * 8].copy_from_slice(&limbs[i].to_be_bytes());
        }
        out
    }

    #[test]
    fn reduction_edges() {
        let m = be(N_MINUS_1);
        let mut n = P256_ORDER;
        n[31] -= 1;
        assert_eq!(m, n, "N_MINUS_1 is n - 1");
        let wide = |v: &[u8; 32]| {
            let mut w = [0u8; 48];
            w[16..].copy_from_slice(v);
            w
        };
        assert_eq!(reduce_mod_n_minus_1(&[0u8; 48]), [0; 4]);
        assert_eq!(reduce_mod_n_minus_1(&wide(&m)), [0; 4], "m mod m");
        let mut m_minus_1 = m;
        m_minus_1[31] -= 1;
        assert_eq!(be(reduce_mod_n_minus_1(&wide(&m_minus_1))), m_minus_1);
        // 2^256 mod m = 2^256 - m (m > 2^255), and 2^256 - m = 2^256 - n + 1.
        let mut two_256 = [0u8; 48];
        two_256[15] = 1;
        let r = reduce_mod_n_minus_1(&two_256);
        let expected = be([
            0u64.wrapping_sub(N_MINUS_1[0]),
            !N_MINUS_1[1],
            !N_MINUS_1[2],
            !N_MINUS_1[3],
        ]);
        assert_eq!(be(r), expected);
    }

    #[test]
    fn pkcs8_material_is_one_whole_der_sequence() {
        let der = include_bytes!("../../tests/vectors/rsa2048.pk8");
        assert!(check_der_whole(der).is_ok());
        let mut longer = der.to_vec();
        longer.push(0);
        assert!(check_der_whole(&longer).unwrap_err().contains("trailing"));
        assert!(check_der_whole(&der[..der.len() - 1]).is_err());
        assert!(
            check_der_whole(&[0x04, 0x00])
                .unwrap_err()
                .contains("SEQUENCE")
        );
        assert!(check_der_whole(&[0x30, 0x00]).is_ok());
        assert!(check_der_whole(&[0x30, 0x81, 0x01, 0x05]).is_ok());
    }

    #[test]
    fn pairings_are_the_contract() {
        use KeyDerivation::*;
        for (alg, d, ok) in [
            (Algorithm::EdDsa, HkdfV1, true),
            (Algorithm::EdDsa, NomadRawSeed, true),
            (Algorithm::EdDsa, Pkcs8, false),
            (Algorithm::Es256, HkdfV1, true),
            (Algorithm::Es256, NomadRawSeed, false),
            (Algorithm::Es256, Pkcs8, false),
            (Algorithm::Rs256, HkdfV1, false),
            (Algorithm::Rs256, NomadRawSeed, false),
            (Algorithm::Rs256, Pkcs8, true),
        ] {
            assert_eq!(check_pairing(alg, d).is_ok(), ok, "{alg} {d:?}");
        }
    }
}
