//! Strict compact JWS: signed with EdDSA, ES256 or RS256; verified with those
//! and the verify-only ES384, ES512, PS256, PS384, PS512, RS384 and RS512
//! (keys of other issuers, see [`crate::JwsAlgorithm`]).
//!
//! Encoding writes `{"alg":"<alg>","kid":"<key id>","typ":"JWT"}` with the
//! signing key's algorithm (`"typ":"wit+jwt"` for a WIMSE workload identity
//! token, see [`crate::pop`]). Parsing rejects, cheapest check first and before
//! any later step runs:
//!
//! 1. a token longer than the cap (before any decoding), or empty;
//! 2. anything but three dot-separated segments;
//! 3. a segment that is not canonical unpadded base64url (padding, whitespace,
//!    other characters, non-zero trailing bits), or a signature longer than
//!    any key's (1024 bytes, RSA-8192);
//! 4. a header that is not a JSON object of only `alg`, `kid` and `typ` (so
//!    `crit`, `jku`, `jwk`, `x5u`, `x5c`, `cty` are rejected), has a duplicate
//!    member, an `alg` that is not one of the ten [`crate::JwsAlgorithm`]s
//!    (`EdDSA` or RFC 9864's `Ed25519`, `ES256`, `RS256`, `ES384`, `ES512`,
//!    `PS256`, `PS384`, `PS512`, `RS384`, `RS512`; `UnsupportedAlgorithm`:
//!    `none` and `HS*` never pass), a
//!    `typ` other than `JWT` or `wit+jwt` (the caller decides which it takes), or no `kid`, or a `kid` that can never be a key
//!    ID (`UnknownKey` at once: empty, over 128 bytes, other characters than
//!    `A-Z a-z 0-9 . _ : -`, or `..`).
//!
//! The verifier then requires the header's algorithm to be the algorithm of the
//! key its `kid` names (`UnsupportedAlgorithm` otherwise, whatever the
//! signature's size: no algorithm confusion; a PS256 token never checks against
//! an RS256 key of the same modulus, nor an ES384 token against a P-256 key), the
//! signature to have the key's size (64 bytes for EdDSA and ES256, 96 for
//! ES384, 132 for ES512, the modulus size for RSA; DER-encoded ECDSA never
//! passes), and checks the signature and the claims, in
//! that order, on the pieces parsed here.

use crate::b64url::B64URL;
use base64::Engine;
use std::borrow::Cow;

use serde::Deserialize;

use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{ActiveKey, Algorithm, JwsAlgorithm, KeyId};

/// The default cap on a token's length, in bytes.
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The hard ceiling on any caller-given token cap (1 MiB): larger caps are
/// clamped to it, so no token longer than this is ever read.
pub const MAX_TOKEN_BYTES_LIMIT: usize = 1 << 20;

fn malformed(reason: impl Into<String>) -> Error {
    Error::MalformedToken {
        reason: reason.into(),
    }
}

/// What a token's `typ` says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenType {
    /// `JWT`, `JOSE` (or no `typ`): a bearer identity token.
    Jwt,
    /// `wit+jwt`: a WIMSE workload identity token, never a bearer token.
    Wit,
}

impl TokenType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TokenType::Jwt => "JWT",
            TokenType::Wit => "wit+jwt",
        }
    }
}

/// A token split and decoded, not yet verified.
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    /// The header's `alg`.
    pub(crate) alg: JwsAlgorithm,
    /// The header's `typ`.
    pub(crate) typ: TokenType,
    /// The header's `kid`.
    pub(crate) kid: KidBuf,
    /// `<header>.<payload>` as sent: the bytes the signature covers.
    pub(crate) signing_input: &'a [u8],
    /// The decoded payload (claims JSON, not yet parsed).
    pub(crate) payload: Payload,
    /// The decoded signature.
    pub(crate) signature: SigBuf,
}

/// Payloads up to this many decoded bytes are held inline (ours are about
/// 300 to 600 bytes); longer ones on the heap.
const INLINE_PAYLOAD: usize = 768;

/// A decoded payload: inline when it fits (no allocation), else a `Vec`.
// Large on purpose: it lives on the stack for one verification, and saving
// the allocation is the point.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Payload {
    Inline([u8; INLINE_PAYLOAD], usize),
    Heap(Vec<u8>),
}

impl std::ops::Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Payload::Inline(bytes, len) => &bytes[..*len],
            Payload::Heap(v) => v,
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// The decoded payload, which must be UTF-8 (RFC 7519: the claims are a
/// JSON text; serde_json reads past the strings of claims nobody asked for
/// without checking them, so the check is here, once for every token).
pub(crate) fn payload_of(segment: &[u8]) -> Result<Payload> {
    let payload = if base64::decoded_len_estimate(segment.len()) <= INLINE_PAYLOAD {
        let mut bytes = [0u8; INLINE_PAYLOAD];
        let len = b64_into(segment, "payload", &mut bytes)?.len();
        Payload::Inline(bytes, len)
    } else {
        B64URL
            .decode(segment)
            .map(Payload::Heap)
            .map_err(|e| not_b64("payload", e))?
    };
    utf8_claims(&payload)?;
    Ok(payload)
}

/// Refuses claims that are not UTF-8, naming where the first bad byte is.
pub(crate) fn utf8_claims(json: &[u8]) -> Result<&str> {
    std::str::from_utf8(json).map_err(|e| {
        malformed(format!(
            "the payload (the claims) is not UTF-8: byte {} is not part of a UTF-8 character",
            e.valid_up_to()
        ))
    })
}

/// The longest signature of any key: RSA-8192.
pub(crate) const MAX_SIGNATURE_BYTES: usize = 1024;

/// A decoded signature, held inline (no allocation) and decoded in place (the
/// decoder wants a little slack past the longest signature).
#[derive(Clone)]
pub(crate) struct SigBuf {
    bytes: [u8; MAX_SIGNATURE_BYTES + 8],
    len: usize,
}

impl SigBuf {
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Debug for SigBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigBuf({} bytes)", self.len)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header<'a> {
    #[serde(borrow)]
    alg: Option<Cow<'a, str>>,
    #[serde(borrow)]
    kid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    typ: Option<Cow<'a, str>>,
}

/// Longest header accepted, decoded: ours is 42 bytes plus the key ID.
const MAX_HEADER_BYTES: usize = 512;

/// A `kid` held inline (no allocation). Only a string that could be a key ID
/// gets here: anything else (empty, over 128 bytes, other characters, `..`)
/// can never name a key and is refused by [`KidBuf::new`] as `UnknownKey`, at
/// once, never truncated into a real key ID and never waited for.
#[derive(Clone)]
pub(crate) struct KidBuf {
    bytes: [u8; MAX_KID],
    len: usize,
}

const MAX_KID: usize = crate::keyring::MAX_KEY_ID_LEN;

impl KidBuf {
    fn new(kid: &str) -> Result<KidBuf> {
        if let Some(problem) = KeyId::problem(kid) {
            return Err(Error::UnknownKey {
                kid: truncate_for_message(kid),
                reason: format!("the token's kid can never name a key: a key ID {problem}"),
            });
        }
        let mut bytes = [0u8; MAX_KID];
        bytes[..kid.len()].copy_from_slice(kid.as_bytes());
        Ok(KidBuf {
            bytes,
            len: kid.len(),
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        // Built from a whole &str of key-ID (ASCII) characters.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Debug for KidBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// Our own header, `{"alg":"<alg>","kid":"<kid>","typ":"JWT"}` with one of our
/// algorithms' names and a kid of key-ID characters, is recognised without a
/// JSON parser: it is well-formed JSON with exactly these three members, so the
/// outcome is the same. Anything else goes through the strict parser.
fn canonical_header(header: &[u8]) -> Option<(JwsAlgorithm, &str, TokenType)> {
    let rest = header.strip_prefix(br#"{"alg":""#)?;
    let (alg, rest) = JwsAlgorithm::ALL
        .into_iter()
        .find_map(|alg| Some((alg, rest.strip_prefix(alg.name().as_bytes())?)))?;
    let rest = rest.strip_prefix(br#"","kid":""#)?;
    let (kid, typ) = match rest.strip_suffix(br#"","typ":"JWT"}"#) {
        Some(kid) => (kid, TokenType::Jwt),
        None => (rest.strip_suffix(br#"","typ":"wit+jwt"}"#)?, TokenType::Wit),
    };
    let plain = kid
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    // Only ASCII passes the check, so this is valid UTF-8.
    plain
        .then(|| std::str::from_utf8(kid).ok().map(|kid| (alg, kid, typ)))
        .flatten()
}

fn not_b64(what: &str, e: base64::DecodeError) -> Error {
    let why = crate::error::b64::problem(e);
    malformed(format!(
        "the {what} is not canonical unpadded base64url: {why}"
    ))
}

/// Decodes a segment that must fit `buf`, without allocating.
pub(crate) fn b64_into<'b>(segment: &[u8], what: &str, buf: &'b mut [u8]) -> Result<&'b [u8]> {
    if base64::decoded_len_estimate(segment.len()) > buf.len() {
        return Err(malformed(format!(
            "the {what} is longer than {} bytes",
            buf.len()
        )));
    }
    let n = B64URL.decode_slice(segment, buf).map_err(|e| match e {
        base64::DecodeSliceError::DecodeError(e) => not_b64(what, e),
        // The estimate above leaves room for any input that fits.
        base64::DecodeSliceError::OutputSliceTooSmall => {
            malformed(format!("the {what} is longer than {} bytes", buf.len()))
        }
    })?;
    Ok(&buf[..n])
}

/// The signature segment decoded in place; its size is checked against the
/// key (see the module docs), here only against the longest of any key.
pub(crate) fn signature_of(segment: &[u8]) -> Result<SigBuf> {
    let mut sig = SigBuf {
        bytes: [0u8; MAX_SIGNATURE_BYTES + 8],
        len: 0,
    };
    let len = b64_into(segment, "signature", &mut sig.bytes)?.len();
    if len > MAX_SIGNATURE_BYTES {
        return Err(malformed(format!(
            "the signature is {len} bytes, longer than any key's ({MAX_SIGNATURE_BYTES})"
        )));
    }
    sig.len = len;
    Ok(sig)
}

/// Every `alg` a token may name, for messages.
pub(crate) const ACCEPTED_ALGS: &str = "\"EdDSA\" (or \"Ed25519\"), \"ES256\", \"RS256\", \"ES384\", \"ES512\", \"PS256\", \"PS384\", \"PS512\", \"RS384\" or \"RS512\"";

/// The first check: a token longer than `max_bytes` is rejected from its length
/// alone, before any byte of it is read.
pub(crate) fn check_length(len: usize, max_bytes: usize) -> Result<()> {
    if len > max_bytes {
        return Err(malformed(format!(
            "token is {len} bytes, longer than the {max_bytes}-byte limit"
        )));
    }
    Ok(())
}

/// The three segments of a compact JWS, split and decoded (header into a
/// caller's buffer), before anything in them is interpreted.
pub(crate) struct Segments<'a> {
    /// `<header>.<payload>` as sent: the bytes the signature covers.
    pub(crate) signing_input: &'a [u8],
    pub(crate) header_len: usize,
    pub(crate) payload: Payload,
    pub(crate) signature: SigBuf,
}

/// Longest header accepted, decoded (the size of `split`'s header buffer).
pub(crate) const HEADER_BUF: usize = MAX_HEADER_BYTES;

/// Checks the length, splits at the two dots and decodes every segment
/// (the header into `header_buf`).
pub(crate) fn split<'a>(
    token: &'a [u8],
    max_bytes: usize,
    header_buf: &mut [u8; MAX_HEADER_BYTES],
) -> Result<Segments<'a>> {
    check_length(token.len(), max_bytes)?;
    if token.is_empty() {
        return Err(malformed("token is empty"));
    }
    let mut dots = token.iter().enumerate().filter(|(_, b)| **b == b'.');
    let (Some((d1, _)), Some((d2, _)), None) = (dots.next(), dots.next(), dots.next()) else {
        let segments = token.iter().filter(|b| **b == b'.').count() + 1;
        return Err(malformed(format!(
            "expected 3 dot-separated segments (header.payload.signature), got {segments}"
        )));
    };
    let (header_b64, payload_b64, sig_b64) = (&token[..d1], &token[d1 + 1..d2], &token[d2 + 1..]);
    let header_len = b64_into(header_b64, "header", header_buf)?.len();
    let payload = payload_of(payload_b64)?;
    // Room for any key's signature (RSA-8192 is 1024 bytes), so a token for
    // another algorithm is reported by its alg, later, not by its length.
    let signature = signature_of(sig_b64)?;
    Ok(Segments {
        signing_input: &token[..d2],
        header_len,
        payload,
        signature,
    })
}

/// Splits and decodes a compact JWS (see the module docs for the checks).
pub(crate) fn parse(token: &[u8], max_bytes: usize) -> Result<Parsed<'_>> {
    let mut header_buf = [0u8; MAX_HEADER_BYTES];
    let Segments {
        signing_input,
        header_len,
        payload,
        signature,
    } = split(token, max_bytes, &mut header_buf)?;
    let header = &header_buf[..header_len];

    if let Some((alg, kid, typ)) = canonical_header(header) {
        return Ok(Parsed {
            alg,
            typ,
            kid: KidBuf::new(kid)?,
            signing_input,
            payload,
            signature,
        });
    }
    let header: Header = serde_json::from_slice(header).map_err(|e| {
        malformed(format!(
            "header must be a JSON object of only alg, kid and typ, each once: {e}"
        ))
    })?;
    let alg = match header.alg.as_deref() {
        Some(name) => {
            JwsAlgorithm::from_header(name).ok_or_else(|| Error::UnsupportedAlgorithm {
                alg: truncate_for_message(name),
                expected: ACCEPTED_ALGS.into(),
            })?
        }
        None => {
            return Err(malformed(format!(
                "header has no alg: expected {ACCEPTED_ALGS}"
            )));
        }
    };
    // `JOSE` is RFC 7515's media type for a compact JWS, which the SPIFFE
    // JWT-SVID specification (section 2.2) allows beside `JWT`: SPIRE and
    // other issuers may write it, and it names nothing but a JWS, so it is a
    // bearer token like `JWT` (every claim rule still applies). A WIT keeps
    // its own `wit+jwt`.
    let typ = match header.typ.as_deref() {
        None | Some("JWT") | Some("JOSE") => TokenType::Jwt,
        Some("wit+jwt") => TokenType::Wit,
        Some(other) => {
            return Err(malformed(format!(
                "header typ is {:?}: expected \"JWT\" or \"JOSE\" (or \"wit+jwt\" for a workload identity token)",
                truncate_for_message(other)
            )));
        }
    };
    let Some(kid) = header.kid.as_deref() else {
        return Err(Error::UnknownKey {
            kid: String::new(),
            reason: "the token's header has no kid".into(),
        });
    };
    let kid = KidBuf::new(kid)?;
    Ok(Parsed {
        alg,
        typ,
        kid,
        signing_input,
        payload,
        signature,
    })
}

/// The JOSE header of a token `key` signs: exactly `alg`, `kid` and `typ`.
pub(crate) fn header_json(key: &ActiveKey, typ: TokenType) -> String {
    // The kid is a validated KeyId: only [A-Za-z0-9._:-], so no JSON escaping.
    format!(
        r#"{{"alg":"{}","kid":"{}","typ":"{}"}}"#,
        key.algorithm().name(),
        key.id(),
        typ.name()
    )
}

/// The key's header for `typ`, base64url-encoded: made at the key's first
/// signature and kept with the key.
fn encoded_header(key: &ActiveKey, typ: TokenType) -> &str {
    let headers = key.encoded_headers(|| {
        [TokenType::Jwt, TokenType::Wit].map(|t| B64URL.encode(header_json(key, t)).into())
    });
    match typ {
        TokenType::Jwt => &headers[0],
        TokenType::Wit => &headers[1],
    }
}

/// Encodes and signs `claims_json` with `key`: `<header>.<payload>.<signature>`,
/// the header naming the key's algorithm and `typ`.
pub(crate) fn encode_typed(key: &ActiveKey, typ: TokenType, claims_json: &[u8]) -> Result<String> {
    let header = encoded_header(key, typ);
    let payload_len = encoded_len(claims_json.len())?;
    let sig_room = match key.algorithm() {
        Algorithm::Rs256 => 4 * MAX_SIGNATURE_BYTES / 3,
        _ => 86,
    };
    // One buffer, sized once: the header as made for the key, then the
    // payload and the signature encoded in place.
    let mut token = Vec::with_capacity(header.len() + 1 + payload_len + 1 + sig_room);
    token.extend_from_slice(header.as_bytes());
    token.push(b'.');
    encode_onto(&mut token, claims_json)?;
    let signature = key.sign_with(&token, Signature::of)?;
    token.push(b'.');
    encode_onto(&mut token, signature.as_slice())?;
    String::from_utf8(token).map_err(|_| Error::Panic {
        message: "an encoded token is not ASCII".into(),
    })
}

/// A signature as the encoder keeps it: EdDSA's and ES256's 64 bytes on the
/// stack, an RSA signature on the heap.
enum Signature {
    Short([u8; 64]),
    Long(Vec<u8>),
}

impl Signature {
    fn of(sig: &[u8]) -> Signature {
        match <[u8; 64]>::try_from(sig) {
            Ok(short) => Signature::Short(short),
            Err(_) => Signature::Long(sig.to_vec()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Signature::Short(bytes) => bytes,
            Signature::Long(bytes) => bytes,
        }
    }
}

/// The length of `len` bytes in unpadded base64url.
fn encoded_len(len: usize) -> Result<usize> {
    base64::encoded_len(len, false).ok_or_else(|| Error::Panic {
        message: format!("{len} bytes are too many to encode"),
    })
}

/// Appends `bytes` to `out` in unpadded base64url.
fn encode_onto(out: &mut Vec<u8>, bytes: &[u8]) -> Result<()> {
    let at = out.len();
    out.resize(at + encoded_len(bytes.len())?, 0);
    B64URL
        .encode_slice(bytes, &mut out[at..])
        .map(drop)
        .map_err(|e| Error::Panic {
            message: format!("encoding a token segment: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    fn tok(header: &str, payload: &str, sig: &[u8]) -> String {
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(sig)
        )
    }

    /// serde_json reads past an unasked claim's string without checking
    /// its bytes: the payload's UTF-8 is checked before any parser sees it
    /// (a fuzzer found a WPT accepted with such a claim).
    #[test]
    fn claims_that_are_not_utf8_are_refused_inline_and_on_the_heap() {
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"EdDSA","kid":"k1","typ":"JWT"}"#);
        let sig = URL_SAFE_NO_PAD.encode([7; 64]);
        for pad in [0, 4 * INLINE_PAYLOAD] {
            let mut payload = br#"{"x":""#.to_vec();
            payload.extend(std::iter::repeat_n(b'a', pad));
            payload.extend(b"\x8c\x8a\"}");
            let t = format!("{header}.{}.{sig}", URL_SAFE_NO_PAD.encode(&payload));
            let e = parse(t.as_bytes(), 1 << 20).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("is not UTF-8: byte {} is not part", 6 + pad)),
                "{e}"
            );
        }
    }

    #[test]
    fn parses_a_well_formed_token() {
        let t = tok(r#"{"alg":"EdDSA","kid":"k1","typ":"JWT"}"#, "{}", &[7; 64]);
        let p = parse(t.as_bytes(), 8192).unwrap();
        assert_eq!(p.kid.as_str(), "k1");
        assert_eq!(&*p.payload, b"{}");
        assert_eq!(p.alg, Algorithm::EdDsa);
        assert_eq!(p.signature.as_slice(), [7; 64]);
        assert_eq!(p.signing_input, t.rsplit_once('.').unwrap().0.as_bytes());
    }

    /// The fixed token of `tests/vectors/token.json`, signed independently by
    /// Python `cryptography`: our encoder reproduces it byte for byte.
    #[test]
    fn reproduces_the_independent_token_vector() {
        use crate::keyring::{KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../tests/vectors/token.json")).unwrap();
        let s = |k: &str| v[k].as_str().unwrap().to_string();
        let material: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&s("material_hex")[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let kr = Keyring::from_keys([RootKey::new(
            KeyId::new(&s("key_id")).unwrap(),
            KeyMaterial::from_slice(&material).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            0,
        )])
        .unwrap();
        assert_eq!(kr.jwks().keys[0].x.as_deref(), Some(s("x").as_str()));
        let claims: crate::claims::Claims = serde_json::from_str(&s("payload")).unwrap();
        assert_eq!(
            claims.to_json(),
            s("payload"),
            "claims serialize in the same order"
        );
        let token = encode_typed(
            &kr.active().unwrap(),
            TokenType::Jwt,
            claims.to_json().as_bytes(),
        )
        .unwrap();
        assert_eq!(token, s("token"));
        let header = URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(header).unwrap(), s("header"));
    }

    #[test]
    fn the_canonical_header_fast_path_agrees_with_the_parser() {
        for (header, kid) in [
            (r#"{"alg":"EdDSA","kid":"k1","typ":"JWT"}"#, Some("k1")),
            (r#"{"alg":"ES256","kid":"k1","typ":"JWT"}"#, Some("k1")),
            (r#"{"alg":"RS256","kid":"k1","typ":"JWT"}"#, Some("k1")),
            (r#"{"alg":"Ed25519","kid":"k1","typ":"JWT"}"#, None),
            (r#"{"alg":"ES2566","kid":"k1","typ":"JWT"}"#, None),
            (r#"{"alg":"PS384","kid":"k1","typ":"JWT"}"#, Some("k1")),
            (r#"{"alg":"ES512","kid":"k1","typ":"JWT"}"#, Some("k1")),
            (r#"{"alg":"HS384","kid":"k1","typ":"JWT"}"#, None),
            (r#"{"alg":"none","kid":"k1","typ":"JWT"}"#, None),
            (
                r#"{"alg":"EdDSA","kid":"a.b:c_d-9","typ":"JWT"}"#,
                Some("a.b:c_d-9"),
            ),
            (r#"{"alg":"EdDSA","kid":"a\"b","typ":"JWT"}"#, None),
            (r#"{"alg":"EdDSA","kid":"k\u0031","typ":"JWT"}"#, None),
            (r#"{"alg":"EdDSA","kid":"k1","typ":"JWT"} "#, None),
            (r#"{"kid":"k1","alg":"EdDSA","typ":"JWT"}"#, None),
            (r#"{"alg":"EdDSA","kid":"","typ":"JWT"}"#, Some("")),
        ] {
            assert_eq!(
                canonical_header(header.as_bytes()).map(|(_, kid, _)| kid),
                kid,
                "{header}"
            );
            // Whatever the path, the parse result is the same.
            let sig = if header.contains("RS256") {
                vec![1; 256]
            } else {
                vec![1; 64]
            };
            let t = tok(header, "{}", &sig);
            let via_parser: Option<String> = serde_json::from_str::<serde_json::Value>(header)
                .ok()
                // An alg we do not verify fails parsing either way.
                .filter(|v| {
                    v["alg"]
                        .as_str()
                        .and_then(JwsAlgorithm::from_header)
                        .is_some()
                })
                .and_then(|v| v["kid"].as_str().map(str::to_string))
                // A kid that cannot be a key ID fails parsing either way.
                .filter(|kid| KeyId::new(kid).is_ok());
            let parsed = parse(t.as_bytes(), 8192)
                .map(|p| p.kid.as_str().to_string())
                .ok();
            assert_eq!(parsed, via_parser, "{header}");
        }
    }

    #[test]
    fn payloads_inline_and_on_the_heap_decode_the_same() {
        for len in [0, 1, 767, 768, 769, 770, 2000] {
            let payload: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            let t = tok(
                r#"{"alg":"EdDSA","kid":"k1","typ":"JWT"}"#,
                &payload,
                &[7; 64],
            );
            let p = parse(t.as_bytes(), 8192).unwrap();
            assert_eq!(&*p.payload, payload.as_bytes(), "{len}");
            let inline = matches!(p.payload, Payload::Inline(..));
            assert_eq!(inline, len <= 768, "{len}: inline up to 768 bytes");
            // Non-canonical base64 is refused the same way on both paths.
            let bad = t.replacen('.', ".=", 1);
            assert!(parse(bad.as_bytes(), 8192).is_err(), "{len}");
        }
    }

    #[test]
    fn the_length_cap_comes_before_anything_else() {
        let junk = vec![b'!'; 9000];
        let e = parse(&junk, 8192).unwrap_err();
        assert!(
            e.to_string().contains("longer than the 8192-byte limit"),
            "{e}"
        );
    }
}
