//! [`TrustSet::explain`]: the steps of a trust set's verification, with the
//! issuer it chose.

use super::TrustSet;
use super::route::RoutedBy;
use crate::error::Result;
use crate::jwt;
use crate::verify::{Explanation, Steps, VerifiedIdentity, decode_claims};

impl TrustSet {
    /// Verifies `token` at `now` as [`TrustSet::verify`] does, recording each
    /// check in order: length, structure (segments, base64url, header),
    /// route (the claims, strictly decoded, and the issuer they choose),
    /// header (the chosen issuer's rules: an algorithm it allows), then the
    /// chosen issuer's [`Verifier::explain`](crate::Verifier::explain) steps
    /// from the key on. [`Explanation::issuer`] names the chosen issuer. The
    /// caches are neither read nor filled, and the stats do not count it.
    pub fn explain(&self, token: &str, now: i64) -> Explanation {
        let mut steps = Steps(Vec::new());
        let mut issuer = None;
        let result = self.explain_into(token.as_bytes(), now, &mut steps, &mut issuer);
        Explanation {
            steps: steps.0,
            result,
            issuer,
        }
    }

    fn explain_into(
        &self,
        token: &[u8],
        now: i64,
        steps: &mut Steps,
        issuer: &mut Option<String>,
    ) -> Result<VerifiedIdentity> {
        let inner = &*self.inner;
        let max = inner.max_token_bytes;
        steps.record("length", jwt::check_length(token.len(), max), |_| {
            format!("{} bytes, within the {max}-byte limit", token.len())
        })?;
        let parsed = steps.record("structure", jwt::parse(token, max), |p| {
            format!(
                "three segments of canonical base64url; header alg {}, kid {:?}",
                p.alg,
                p.kid.as_str()
            )
        })?;
        let routed = decode_claims(&parsed.payload)
            .and_then(|claims| inner.routes.route(&claims).map(|r| (claims, r)));
        let (_, (index, _)) = steps.record("route", routed, |(claims, (index, by))| {
            let name = &inner.issuers[*index].name;
            match by {
                RoutedBy::Iss => format!("issuer {name:?}, chosen by the token's iss"),
                RoutedBy::TrustDomain => format!(
                    "issuer {name:?}, chosen by the trust domain of sub {:?}",
                    claims.subject
                ),
                RoutedBy::Both => format!(
                    "issuer {name:?}, chosen by the token's iss and the trust domain of its sub"
                ),
            }
        })?;
        let t = &inner.issuers[index];
        *issuer = Some(t.name.clone());
        let v = &t.verifier;
        steps.record("header", v.check_header(&parsed), |()| {
            format!("alg {} is allowed for issuer {:?}", parsed.alg, t.name)
        })?;
        v.explain_parsed(&parsed, now, steps)
    }
}
