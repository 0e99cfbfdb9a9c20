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

/// Unix seconds of an RFC 3339 UTC or offset time, as Transit writes
/// `creation_time` (`2026-12-03T10:05:51.865092437Z`); fractions dropped.
pub(super) fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    // Days from the civil date (proleptic Gregorian), Howard Hinnant's method.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + min * 60 + sec - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20.865092437Z"),
            Some(1_700_000_000)
        );
        assert_eq!(
            parse_rfc3339("2023-11-15T00:13:20+02:00"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_rfc3339("2000-02-29T12:00:00Z"), Some(951_825_600));
        for bad in [
            "",
            "2023-11-14 22:13:20Z",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20Zx",
            "２023-11-14T22:13:20Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

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
