//! Public keys as X.509 SubjectPublicKeyInfo (RFC 5280), DER and PEM: what
//! Vault's `jwt_validation_pubkeys`, SPIFFE bundles' consumers and most
//! TLS-era tools take. The three encodings are fixed by RFC 8410 (Ed25519),
//! RFC 5480 (P-256, uncompressed point) and RFC 8017 (RSA, `rsaEncryption`
//! with NULL parameters); only RSA's lengths vary. Verify-only P-384 and
//! P-521 keys are RFC 5480's `id-ecPublicKey` with their named curve.

use base64::Engine;

use super::public_key::{PublicKey, RSA_E, sec1_uncompressed};

/// `SEQUENCE { SEQUENCE { OID id-Ed25519 }, BIT STRING (32 bytes) }` up to
/// the key (RFC 8410).
const ED25519_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// `SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING (65
/// bytes) }` up to the point (RFC 5480).
const P256_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// `SEQUENCE { id-ecPublicKey, secp384r1 }` (RFC 5480).
const P384_ALGORITHM: [u8; 18] = [
    0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04,
    0x00, 0x22,
];
/// `SEQUENCE { id-ecPublicKey, secp521r1 }` (RFC 5480).
const P521_ALGORITHM: [u8; 18] = [
    0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04,
    0x00, 0x23,
];
/// `SEQUENCE { OID rsaEncryption, NULL }` (RFC 8017, appendix C).
const RSA_ALGORITHM: [u8; 15] = [
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];

/// A DER element: `tag`, the definite length of `content`, `content`.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = Vec::with_capacity(len + 6);
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// A DER INTEGER of the unsigned big-endian `magnitude` (a zero byte in
/// front when its top bit is set, so it stays positive).
fn unsigned_integer(magnitude: &[u8]) -> Vec<u8> {
    let trimmed = match magnitude.iter().position(|b| *b != 0) {
        Some(i) => &magnitude[i..],
        None => &[0u8][..],
    };
    if trimmed[0] & 0x80 != 0 {
        let mut padded = Vec::with_capacity(trimmed.len() + 1);
        padded.push(0);
        padded.extend_from_slice(trimmed);
        der(0x02, &padded)
    } else {
        der(0x02, trimmed)
    }
}

impl PublicKey {
    /// The key as a DER SubjectPublicKeyInfo.
    pub fn to_spki_der(&self) -> Vec<u8> {
        match self {
            PublicKey::Ed25519(vk) => [&ED25519_PREFIX[..], vk.as_bytes()].concat(),
            PublicKey::P256 { x, y } => [&P256_PREFIX[..], &sec1_uncompressed(x, y)[..]].concat(),
            PublicKey::P384 { .. } | PublicKey::P521 { .. } => {
                let algorithm = match self {
                    PublicKey::P384 { .. } => &P384_ALGORITHM,
                    _ => &P521_ALGORITHM,
                };
                let bits = der(0x03, &[&[0u8][..], &self.to_bytes()].concat());
                der(0x30, &[&algorithm[..], &bits].concat())
            }
            // A verify-only RSA key (PS*, RS384/512) as `rsaEncryption` too:
            // what JWKS-to-PEM tools write; the algorithm is the JWK's, not
            // the SPKI's.
            PublicKey::Rsa { n } | PublicKey::RsaVerifyOnly { n, .. } => {
                let rsa_public_key = der(
                    0x30,
                    &[unsigned_integer(n), unsigned_integer(&RSA_E)].concat(),
                );
                // The BIT STRING's first byte: no unused bits.
                let bits = der(0x03, &[&[0u8][..], &rsa_public_key].concat());
                der(0x30, &[&RSA_ALGORITHM[..], &bits].concat())
            }
        }
    }

    /// The key as a PEM `PUBLIC KEY` block (RFC 7468), ending in a newline.
    pub fn to_pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(self.to_spki_der());
        let mut out = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            // Base64 is ASCII.
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END PUBLIC KEY-----\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8410, section 10.1's example public key.
    #[test]
    fn ed25519_is_rfc_8410s_example() {
        let mut raw = [0u8; 32];
        let hex = "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1";
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        let key = PublicKey::Ed25519(ed25519_dalek::VerifyingKey::from_bytes(&raw).unwrap());
        assert_eq!(
            key.to_pem(),
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n"
        );
    }

    #[test]
    fn der_lengths_and_integers() {
        assert_eq!(der(0x04, &[1, 2]), [0x04, 2, 1, 2]);
        assert_eq!(&der(0x04, &[0; 200])[..3], [0x04, 0x81, 200]);
        assert_eq!(&der(0x04, &[0; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(unsigned_integer(&[0x80]), [0x02, 2, 0, 0x80]);
        assert_eq!(unsigned_integer(&[0, 0, 0x7f]), [0x02, 1, 0x7f]);
        assert_eq!(unsigned_integer(&RSA_E), [0x02, 3, 1, 0, 1]);
    }

    /// An RSA key's SPKI is what aws-lc-rs reads back as the same key.
    #[test]
    fn rsa_spki_parses_back() {
        use aws_lc_rs::signature::{KeyPair, RsaKeyPair};
        let pair = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        // aws-lc-rs's public key bytes are the PKCS#1 RSAPublicKey.
        let pkcs1 = pair.public_key().as_ref().to_vec();
        let spki = aws_lc_rs::rsa::PublicEncryptingKey::from_der(&{
            let n = modulus_of(&pkcs1);
            PublicKey::Rsa { n }.to_spki_der()
        })
        .expect("a SubjectPublicKeyInfo aws-lc-rs accepts");
        assert_eq!(spki.key_size_bits(), 2048);
    }

    /// The modulus of a PKCS#1 RSAPublicKey (test helper: SEQUENCE {
    /// INTEGER n, INTEGER e } with long-form lengths).
    fn modulus_of(pkcs1: &[u8]) -> Vec<u8> {
        let skip_len = |b: &[u8], at: usize| -> (usize, usize) {
            if b[at] < 0x80 {
                (b[at] as usize, at + 1)
            } else {
                let k = (b[at] & 0x7f) as usize;
                let mut len = 0usize;
                for i in 0..k {
                    len = (len << 8) | b[at + 1 + i] as usize;
                }
                (len, at + 1 + k)
            }
        };
        let (_, at) = skip_len(pkcs1, 1);
        let (len, at) = skip_len(pkcs1, at + 1);
        let n = &pkcs1[at..at + len];
        n.iter().skip_while(|b| **b == 0).copied().collect()
    }
}
