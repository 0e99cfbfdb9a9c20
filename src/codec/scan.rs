//! A structural pass over msgpack bytes, run before any value is built.
//!
//! It walks the encoding without allocating per element and proves three things
//! that serde alone cannot promise cheaply: the input is exactly one value (no
//! trailing bytes), containers nest no deeper than the limit, and no length prefix
//! claims more than the remaining input could hold — so a 5-byte array header that
//! claims 2^32 elements fails here, before anything is allocated for it.
//!
//! The same walk rewrites `str8` headers for the encoder: Go's codec in Nomad's
//! configuration writes the old msgpack spec, which has no `str8`.

use super::DecodeLimits;

/// Where and why the structural pass stopped.
#[derive(Debug)]
pub(crate) struct ScanError {
    pub(crate) offset: usize,
    pub(crate) reason: String,
}

/// The header of one msgpack value: its bytes, the payload that follows them, and
/// how many child values (for containers) come after that.
struct Header {
    /// Length of the marker plus its length/type bytes.
    len: usize,
    /// Length of the raw payload (string, binary, ext data, scalar bytes).
    payload: usize,
    /// Number of child values for arrays (n) and maps (2n); `None` for scalars.
    children: Option<u64>,
}

const STR8: u8 = 0xd9;
const STR16: u8 = 0xda;

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

fn header(input: &[u8], at: usize) -> Result<Header, ScanError> {
    let rest = &input[at..];
    let marker = rest[0];
    // Reads an n-byte big-endian length that follows the marker (and `skip` type bytes).
    let len_field = |n: usize| -> Result<usize, ScanError> {
        let field = rest.get(1..1 + n).ok_or_else(|| ScanError {
            offset: at,
            reason: format!(
                "truncated: a length field of {n} bytes was expected after marker 0x{marker:02x}"
            ),
        })?;
        // A u32 always fits in usize on the 32- and 64-bit targets we build for.
        usize::try_from(be(field)).map_err(|_| ScanError {
            offset: at,
            reason: "length does not fit in memory".to_string(),
        })
    };
    let scalar = |payload: usize| Header {
        len: 1,
        payload,
        children: None,
    };
    let h = match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => scalar(0),
        0x80..=0x8f => Header {
            len: 1,
            payload: 0,
            children: Some(2 * u64::from(marker & 0x0f)),
        },
        0x90..=0x9f => Header {
            len: 1,
            payload: 0,
            children: Some(u64::from(marker & 0x0f)),
        },
        0xa0..=0xbf => scalar(usize::from(marker & 0x1f)),
        0xc1 => {
            return Err(ScanError {
                offset: at,
                reason: "marker 0xc1 is reserved by the msgpack spec".to_string(),
            });
        }
        // bin8/16/32 and str8/16/32: a length, then that many bytes.
        0xc4 | 0xd9 => Header {
            len: 2,
            payload: len_field(1)?,
            children: None,
        },
        0xc5 | 0xda => Header {
            len: 3,
            payload: len_field(2)?,
            children: None,
        },
        0xc6 | 0xdb => Header {
            len: 5,
            payload: len_field(4)?,
            children: None,
        },
        // ext8/16/32: a length, a type byte, then that many bytes.
        0xc7 => Header {
            len: 3,
            payload: len_field(1)?,
            children: None,
        },
        0xc8 => Header {
            len: 4,
            payload: len_field(2)?,
            children: None,
        },
        0xc9 => Header {
            len: 6,
            payload: len_field(4)?,
            children: None,
        },
        0xca => scalar(4),
        0xcb => scalar(8),
        0xcc | 0xd0 => scalar(1),
        0xcd | 0xd1 => scalar(2),
        0xce | 0xd2 => scalar(4),
        0xcf | 0xd3 => scalar(8),
        // fixext 1/2/4/8/16: a type byte, then fixed data.
        0xd4 => Header {
            len: 2,
            payload: 1,
            children: None,
        },
        0xd5 => Header {
            len: 2,
            payload: 2,
            children: None,
        },
        0xd6 => Header {
            len: 2,
            payload: 4,
            children: None,
        },
        0xd7 => Header {
            len: 2,
            payload: 8,
            children: None,
        },
        0xd8 => Header {
            len: 2,
            payload: 16,
            children: None,
        },
        0xdc => Header {
            len: 3,
            payload: 0,
            children: Some(len_field(2)? as u64),
        },
        0xdd => Header {
            len: 5,
            payload: 0,
            children: Some(len_field(4)? as u64),
        },
        0xde => Header {
            len: 3,
            payload: 0,
            children: Some(2 * len_field(2)? as u64),
        },
        0xdf => Header {
            len: 5,
            payload: 0,
            children: Some(2 * len_field(4)? as u64),
        },
    };
    let available = rest.len();
    if h.len + h.payload > available {
        return Err(ScanError {
            offset: at,
            reason: format!(
                "truncated: the value with marker 0x{marker:02x} needs {} bytes, only {available} remain",
                h.len + h.payload
            ),
        });
    }
    Ok(h)
}

/// Walks exactly one msgpack value spanning all of `input`, calling `visit` with
/// the byte range of each header and of its payload, in order.
fn walk(
    input: &[u8],
    limits: &DecodeLimits,
    mut visit: impl FnMut(usize, &Header),
) -> Result<(), ScanError> {
    if input.len() > limits.max_bytes {
        return Err(ScanError {
            offset: 0,
            reason: format!(
                "input is {} bytes, the limit is {} bytes",
                input.len(),
                limits.max_bytes
            ),
        });
    }
    if input.is_empty() {
        return Err(ScanError {
            offset: 0,
            reason: "empty input: expected one msgpack map".to_string(),
        });
    }
    let mut pos = 0usize;
    // Values still expected at each open nesting level; the bottom entry is the
    // single top-level value. Its length is the current depth + 1, so it is
    // bounded by the depth limit.
    let mut pending: Vec<u64> = vec![1];
    while let Some(top) = pending.last_mut() {
        if *top == 0 {
            pending.pop();
            continue;
        }
        *top -= 1;
        if pos >= input.len() {
            return Err(ScanError {
                offset: pos,
                reason: "truncated: input ended where another value was expected".to_string(),
            });
        }
        let h = header(input, pos)?;
        visit(pos, &h);
        pos += h.len + h.payload;
        if let Some(children) = h.children {
            let depth = pending.len();
            if depth > limits.max_depth {
                return Err(ScanError {
                    offset: pos - h.len,
                    reason: format!(
                        "nesting deeper than the limit of {} levels",
                        limits.max_depth
                    ),
                });
            }
            // Every value takes at least one byte, so a count larger than what is
            // left is a lie: reject it before anything is sized from it.
            let left = (input.len() - pos) as u64;
            if children > left {
                return Err(ScanError {
                    offset: pos - h.len,
                    reason: format!(
                        "container claims {children} values but only {left} bytes remain"
                    ),
                });
            }
            pending.push(children);
        }
    }
    if pos != input.len() {
        return Err(ScanError {
            offset: pos,
            reason: format!(
                "{} trailing bytes after the value: expected the input to end",
                input.len() - pos
            ),
        });
    }
    Ok(())
}

/// Checks that `input` is exactly one well-formed msgpack value within `limits`.
pub(crate) fn check(input: &[u8], limits: &DecodeLimits) -> Result<(), ScanError> {
    walk(input, limits, |_, _| {})
}

/// Rewrites every `str8` header as `str16`, producing the old-spec ("raw") string
/// encoding that Go's `MsgpackHandle` writes when `WriteExt` is false (Nomad's
/// configuration). Everything else is copied unchanged.
pub(crate) fn downgrade_str8(input: &[u8]) -> Result<Vec<u8>, ScanError> {
    let limits = DecodeLimits::unlimited();
    let mut str8_at = Vec::new();
    walk(input, &limits, |at, _| {
        if input[at] == STR8 {
            str8_at.push(at);
        }
    })?;
    if str8_at.is_empty() {
        return Ok(input.to_vec());
    }
    let mut out = Vec::with_capacity(input.len() + str8_at.len());
    let mut copied = 0;
    for at in str8_at {
        out.extend_from_slice(&input[copied..at]);
        out.extend_from_slice(&[STR16, 0, input[at + 1]]);
        copied = at + 2;
    }
    out.extend_from_slice(&input[copied..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(depth: usize) -> DecodeLimits {
        DecodeLimits::default().max_depth(depth)
    }

    #[test]
    fn accepts_exactly_one_value() {
        assert!(check(&[0x80], &limits(4)).is_ok());
        let e = check(&[0x80, 0x00], &limits(4)).unwrap_err();
        assert_eq!(e.offset, 1);
        assert!(e.reason.contains("1 trailing bytes"), "{}", e.reason);
    }

    #[test]
    fn array_header_claiming_2_pow_32_elements_fails_before_allocating() {
        let e = check(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x00], &limits(4)).unwrap_err();
        assert!(
            e.reason
                .contains("claims 4294967295 values but only 1 bytes remain"),
            "{}",
            e.reason
        );
        let e = check(&[0xdf, 0xff, 0xff, 0xff, 0xff], &limits(4)).unwrap_err();
        assert!(
            e.reason.contains("claims 8589934590 values"),
            "{}",
            e.reason
        );
    }

    #[test]
    fn depth_is_bounded_without_recursion() {
        let bomb = vec![0x91u8; 100_000];
        let e = check(&bomb, &limits(32)).unwrap_err();
        assert!(e.reason.contains("limit of 32 levels"), "{}", e.reason);
        // Exactly at the limit is fine: 3 nested arrays ending in nil.
        assert!(check(&[0x91, 0x91, 0x91, 0xc0], &limits(3)).is_ok());
        assert!(check(&[0x91, 0x91, 0x91, 0xc0], &limits(2)).is_err());
    }

    #[test]
    fn str8_becomes_str16() {
        let mut input = vec![0x81, 0xa1, b'k', STR8, 40];
        input.extend(std::iter::repeat_n(b'x', 40));
        let out = downgrade_str8(&input).unwrap();
        assert_eq!(&out[..6], &[0x81, 0xa1, b'k', STR16, 0, 40]);
        assert_eq!(out.len(), input.len() + 1);
        assert!(check(&out, &limits(4)).is_ok());
    }

    #[test]
    fn reserved_marker_is_rejected() {
        let e = check(&[0xc1], &limits(4)).unwrap_err();
        assert!(e.reason.contains("reserved"));
    }
}
