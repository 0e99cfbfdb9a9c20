//! Base64 refusals in our words, for every decoder of the crate (JWS
//! segments, JWKS members, etcd records).

/// Why input is not canonical base64, in our words (the base64 crate's own
/// messages are its internals, not ours to promise).
pub(crate) fn problem(e: base64::DecodeError) -> String {
    use base64::DecodeError as D;
    match e {
        D::InvalidByte(at, b'=') => format!("padding '=' at offset {at} where none may be"),
        D::InvalidByte(at, byte) if byte.is_ascii_graphic() => {
            format!(
                "the character {:?} at offset {at} is not in the base64url alphabet",
                char::from(byte)
            )
        }
        D::InvalidByte(at, byte) => {
            format!("the byte 0x{byte:02x} at offset {at} is not in the base64url alphabet")
        }
        D::InvalidLength(len) => format!("{len} characters is not a possible base64url length"),
        D::InvalidLastSymbol { offset: at, .. } => {
            format!("the last character, at offset {at}, has non-zero trailing bits")
        }
        D::InvalidPadding => "its padding is missing or misplaced".into(),
    }
}
