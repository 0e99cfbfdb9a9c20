//! The tokens besides the WIT that a proof binds: an access token (`ath`), a
//! transaction token (`tth`) and others by HTTP header (`oth`). The workload
//! names them when it proves, the receiver when it verifies.

use std::fmt;

use zeroize::Zeroizing;

/// Token values are zeroized on drop and never shown by `Debug` (header names are).
#[derive(Clone, Default)]
pub(crate) struct BoundTokens {
    pub(crate) access_token: Option<Zeroizing<String>>,
    pub(crate) transaction_token: Option<Zeroizing<String>>,
    /// Lower-cased header name, value.
    pub(crate) other_tokens: Vec<(String, Zeroizing<String>)>,
}

impl BoundTokens {
    pub(crate) fn access(&mut self, token: &str) {
        self.access_token = Some(Zeroizing::new(token.to_string()));
    }

    pub(crate) fn transaction(&mut self, token: &str) {
        self.transaction_token = Some(Zeroizing::new(token.to_string()));
    }

    pub(crate) fn other(&mut self, header: &str, value: &str) {
        self.other_tokens.push((
            header.to_ascii_lowercase(),
            Zeroizing::new(value.to_string()),
        ));
    }

    /// `ProofInvalid` when one header name carries more than one token: `oth`
    /// maps a header to one hash, so a second value could never be bound, and
    /// a receiver that read only one of them would let the other through
    /// unchecked (frameworks disagree on whether the first or the last wins).
    pub(crate) fn refuse_repeated_headers(&self) -> crate::error::Result<()> {
        for (i, (header, _)) in self.other_tokens.iter().enumerate() {
            if self.other_tokens[..i].iter().any(|(h, _)| h == header) {
                return Err(crate::error::Error::ProofInvalid {
                    reason: format!(
                        "header {:?} carries a token more than once: oth binds one value per header, so a repeated header is refused",
                        crate::error::truncate_for_message(header)
                    ),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Debug for BoundTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |t: &Option<Zeroizing<String>>| t.as_ref().map(|_| "[redacted]");
        f.debug_struct("BoundTokens")
            .field("access_token", &redacted(&self.access_token))
            .field("transaction_token", &redacted(&self.transaction_token))
            .field(
                "other_tokens",
                &self.other_tokens.iter().map(|(h, _)| h).collect::<Vec<_>>(),
            )
            .finish()
    }
}
