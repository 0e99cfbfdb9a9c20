//! What Transit's key reads answer, decoded: each version's public key
//! (Ed25519 as base64, P-256 and RSA as a PEM SubjectPublicKeyInfo) and its
//! creation time (RFC 3339).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::keyring::{Algorithm, PublicKey};

/// The DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey,
/// prime256v1, an uncompressed point of 65 bytes follows).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A Transit public key: Ed25519 as standard base64 of 32 bytes; P-256 and
/// RSA as a PEM SubjectPublicKeyInfo.
pub(super) fn public_key(alg: Algorithm, text: &str) -> std::result::Result<PublicKey, String> {
    match alg {
        Algorithm::EdDsa => {
            let raw = STANDARD
                .decode(text.trim())
                .map_err(|_| "not base64".to_string())?;
            let bytes: [u8; 32] = raw
                .try_into()
                .map_err(|_| "an Ed25519 key is 32 bytes".to_string())?;
            ed25519_dalek::VerifyingKey::from_bytes(&bytes)
                .map(PublicKey::Ed25519)
                .map_err(|_| "not an Ed25519 point".into())
        }
        Algorithm::Es256 => {
            let der = pem_der(text)?;
            match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
                Some([4, rest @ ..]) if rest.len() == 64 => {
                    let mut x = [0u8; 32];
                    let mut y = [0u8; 32];
                    x.copy_from_slice(&rest[..32]);
                    y.copy_from_slice(&rest[32..]);
                    Ok(PublicKey::P256 { x, y })
                }
                _ => Err("not a P-256 SubjectPublicKeyInfo with an uncompressed point".into()),
            }
        }
        Algorithm::Rs256 => {
            let der = pem_der(text)?;
            let key = aws_lc_rs::rsa::PublicKey::from_der(&der)
                .map_err(|e| format!("not an RSA public key ({e})"))?;
            if key.exponent().big_endian_without_leading_zero() != [1, 0, 1] {
                return Err("the RSA public exponent must be 65537".into());
            }
            Ok(PublicKey::Rsa {
                n: key.modulus().big_endian_without_leading_zero().to_vec(),
            })
        }
    }
}

/// The DER inside one `PUBLIC KEY` PEM block.
fn pem_der(text: &str) -> std::result::Result<Vec<u8>, String> {
    let body = text
        .trim()
        .strip_prefix("-----BEGIN PUBLIC KEY-----")
        .and_then(|rest| rest.trim_end().strip_suffix("-----END PUBLIC KEY-----"))
        .ok_or("not a PEM PUBLIC KEY block")?;
    let b64: String = body.split_whitespace().collect();
    STANDARD
        .decode(b64)
        .map_err(|_| "the PEM body is not base64".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transit_public_keys() {
        let pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEhI0hSWDlyKhMsVL8so1gsLCNtBTn\niT9HvRT8oOb/67UiBUE2WPbYEftQY3lMZwmZgZDz2m0qPoMRalT4wEqtKw==\n-----END PUBLIC KEY-----\n";
        match public_key(Algorithm::Es256, pem).unwrap() {
            PublicKey::P256 { x, .. } => assert_eq!(x[0], 0x84),
            other => panic!("{other:?}"),
        }
        assert!(public_key(Algorithm::Es256, "nope").is_err());
        let ed = public_key(
            Algorithm::EdDsa,
            "fVB+HMy1WRuzlnHR7FG3qjPVGTqLUDf68ZqPwlJ2L0c=",
        )
        .unwrap();
        assert_eq!(ed.algorithm(), Algorithm::EdDsa);
        assert!(public_key(Algorithm::EdDsa, "AAAA").is_err());
    }
}
