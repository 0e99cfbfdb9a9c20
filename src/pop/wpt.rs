//! Parsing a workload proof token (WPT) strictly, before it is checked.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::{Error, Result, truncate_for_message};
use crate::jwt::{self, SigBuf};

/// A WPT's claims. Unknown claims are ignored; each known one at most once.
#[derive(Debug, Deserialize)]
pub(crate) struct WptClaims {
    pub(crate) aud: Option<String>,
    pub(crate) exp: Option<i64>,
    pub(crate) jti: Option<String>,
    pub(crate) wth: Option<String>,
    pub(crate) ath: Option<String>,
    pub(crate) tth: Option<String>,
    pub(crate) oth: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header<'a> {
    #[serde(borrow)]
    alg: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    typ: Option<std::borrow::Cow<'a, str>>,
}

/// A WPT split, decoded and parsed, not yet checked.
pub(crate) struct ParsedWpt<'a> {
    /// The header's `alg`, as written.
    pub(crate) alg: String,
    pub(crate) signing_input: &'a [u8],
    pub(crate) signature: SigBuf,
    pub(crate) claims: WptClaims,
}

pub(crate) fn invalid(reason: impl Into<String>) -> Error {
    Error::ProofInvalid {
        reason: reason.into(),
    }
}

/// Splits and parses `wpt`: canonical base64url segments, a header of only
/// `alg` and `typ` (`wpt+jwt`), claims with the right JSON types.
pub(crate) fn parse(wpt: &[u8], max_bytes: usize) -> Result<ParsedWpt<'_>> {
    let mut header_buf = [0u8; jwt::HEADER_BUF];
    let seg = jwt::split(wpt, max_bytes, &mut header_buf).map_err(|e| match e {
        Error::MalformedToken { reason } => invalid(format!("the WPT: {reason}")),
        other => other,
    })?;
    let header: Header = serde_json::from_slice(&header_buf[..seg.header_len]).map_err(|e| {
        invalid(format!(
            "the WPT's header must be a JSON object of only alg and typ, each once: {e}"
        ))
    })?;
    match header.typ.as_deref() {
        Some("wpt+jwt") => {}
        other => {
            return Err(invalid(format!(
                "the WPT's typ is {:?}: expected \"wpt+jwt\"",
                other.map(truncate_for_message)
            )));
        }
    }
    let Some(alg) = header.alg else {
        return Err(invalid("the WPT's header has no alg"));
    };
    let claims: WptClaims = serde_json::from_slice(&seg.payload).map_err(|e| {
        invalid(format!(
            "the WPT's claims must be a JSON object (aud a string, exp an integer, jti, wth, ath, tth strings, oth an object of strings), each once: {e}"
        ))
    })?;
    Ok(ParsedWpt {
        alg: alg.into_owned(),
        signing_input: seg.signing_input,
        signature: seg.signature,
        claims,
    })
}
