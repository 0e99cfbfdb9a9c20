//! Routing: which one trusted issuer a token claims, read from its
//! (not yet verified) claims before any key is looked up.

use std::collections::HashMap;

use super::issuer::IssuerId;
use crate::claims::Claims;
use crate::error::{Error, Result, truncate_for_message};
use crate::verify::spiffe_trust_domain_of;

/// The issuers by `iss` and by trust domain, each naming an index into the
/// trust set's issuers.
#[derive(Debug, Default)]
pub(super) struct Routes {
    by_iss: HashMap<String, usize>,
    by_trust_domain: HashMap<String, usize>,
    /// Every trusted issuer, for messages: `iss "a", trust domain "b"`.
    trusted: String,
}

/// How a token was routed, for explanations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoutedBy {
    Iss,
    TrustDomain,
    Both,
}

impl Routes {
    /// Adds issuer `index` under `id` (and under `also_iss`, an `iss` a
    /// trust-domain issuer requires). Two issuers under one `iss` or one
    /// trust domain is an error.
    pub(super) fn add(
        &mut self,
        index: usize,
        id: &IssuerId,
        also_iss: Option<&str>,
    ) -> Result<()> {
        let taken = |what: &str, name: &str| {
            Error::invalid(
                "TrustSet",
                "issuers",
                format!(
                    "two trusted issuers under {what} {:?}: a token must route to exactly one issuer",
                    truncate_for_message(name)
                ),
            )
        };
        let (iss, td) = match id {
            IssuerId::Iss(iss) => (Some(iss.as_str()), None),
            IssuerId::TrustDomain(td) => (also_iss, Some(td.as_str())),
        };
        if let Some(iss) = iss {
            if self.by_iss.insert(iss.to_string(), index).is_some() {
                return Err(taken("iss", iss));
            }
        }
        if let Some(td) = td {
            if self.by_trust_domain.insert(td.to_string(), index).is_some() {
                return Err(taken("trust domain", td));
            }
        }
        let mut names: Vec<String> = self
            .by_iss
            .keys()
            .map(|i| format!("iss {:?}", truncate_for_message(i)))
            .chain(
                self.by_trust_domain
                    .keys()
                    .map(|t| format!("trust domain {:?}", truncate_for_message(t))),
            )
            .collect();
        names.sort();
        self.trusted = format!("trusted: {}", names.join(", "));
        Ok(())
    }

    /// The one issuer `claims` route to: by `iss`, by the trust domain of a
    /// SPIFFE `sub`, or by both when both name the same issuer. Two
    /// different issuers, or none, is `UntrustedIssuer`.
    #[inline]
    pub(super) fn route(&self, claims: &Claims) -> Result<(usize, RoutedBy)> {
        let iss = claims.issuer.as_deref();
        let td = spiffe_trust_domain_of(&claims.subject);
        let by_iss = iss.and_then(|i| self.by_iss.get(i).copied());
        let by_td = match td {
            Some(td) if !self.by_trust_domain.is_empty() => self.by_trust_domain.get(td).copied(),
            _ => None,
        };
        match (by_iss, by_td) {
            (Some(a), Some(b)) if a == b => Ok((a, RoutedBy::Both)),
            (Some(_), Some(_)) => Err(Error::UntrustedIssuer {
                found: format!(
                    "the token's iss {} and the trust domain {} of its sub name two different trusted issuers",
                    quoted(iss),
                    quoted(td)
                ),
                trusted: self.trusted.clone(),
            }),
            (Some(a), None) => Ok((a, RoutedBy::Iss)),
            (None, Some(b)) => Ok((b, RoutedBy::TrustDomain)),
            (None, None) => Err(Error::UntrustedIssuer {
                found: format!(
                    "the token names no trusted issuer (iss {}, sub {})",
                    quoted(iss),
                    match td {
                        Some(td) => format!("in trust domain {:?}", truncate_for_message(td)),
                        None => "not a SPIFFE ID".to_string(),
                    }
                ),
                trusted: self.trusted.clone(),
            }),
        }
    }
}

/// `"value"` (truncated), or `none`.
fn quoted(v: Option<&str>) -> String {
    match v {
        Some(v) => format!("{:?}", truncate_for_message(v)),
        None => "none".into(),
    }
}
