//! [`Verifier::explain`]: the verification pipeline, step by step, for a
//! person asking "why was this token rejected?".
//!
//! It runs the very checks [`Verifier::verify`] runs, in the same order, and
//! stops at the first that fails; its result is what `verify` would return
//! (without the verified-token cache and without counting in the stats).

use super::{KeyWait, VerifiedIdentity, Verifier, check_alg, check_sig, decode_claims};
use crate::error::Result;
use crate::jwt;

/// One step of an explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerificationStep {
    /// What was checked: `length`, `structure`, `key`, `algorithm`,
    /// `signature`, `claims`, `times`, `audience`, `issuer`, `allocation` or `node` (for a node token).
    pub name: &'static str,
    /// Whether it passed.
    pub passed: bool,
    /// What was found (on failure, the error's message).
    pub detail: String,
}

/// The steps [`Verifier::explain`] ran, and the outcome.
#[derive(Debug)]
#[non_exhaustive]
pub struct Explanation {
    /// Every step run, in order; the last one failed if the token was rejected.
    pub steps: Vec<VerificationStep>,
    /// What [`Verifier::verify`] returns for this token.
    pub result: Result<VerifiedIdentity>,
    /// The trusted issuer a [`TrustSet`](crate::TrustSet) chose for the
    /// token (its [`IssuerId`](crate::IssuerId), as text); `None` from a
    /// plain [`Verifier`], or when the token was refused before an issuer
    /// was chosen.
    pub issuer: Option<String>,
}

impl Explanation {
    /// The step that failed, if any.
    pub fn failed_step(&self) -> Option<&VerificationStep> {
        self.steps.iter().find(|s| !s.passed)
    }
}

pub(crate) struct Steps(pub(crate) Vec<VerificationStep>);

impl Steps {
    /// Records `outcome` of step `name`; passes the value on.
    pub(crate) fn record<T>(
        &mut self,
        name: &'static str,
        outcome: Result<T>,
        ok: impl FnOnce(&T) -> String,
    ) -> Result<T> {
        let (passed, detail) = match &outcome {
            Ok(v) => (true, ok(v)),
            Err(e) => (false, e.to_string()),
        };
        self.0.push(VerificationStep {
            name,
            passed,
            detail,
        });
        outcome
    }
}

impl Verifier {
    /// Verifies `token` at `now` as [`Verifier::verify`] does, recording each
    /// check in order: length, structure (segments, base64url, header), key,
    /// algorithm (the key's, and the signature's size), signature, claims
    /// (strict JSON), times (`exp`, `nbf`, `iat` with the leeway), audience,
    /// issuer, allocation (or node). It stops at the first failure. The token cache is
    /// neither read nor filled, and the stats do not count it; an unknown key
    /// is waited for as `verify` would.
    pub fn explain(&self, token: &str, now: i64) -> Explanation {
        let mut steps = Steps(Vec::new());
        let result = self.explain_into(token.as_bytes(), now, &mut steps);
        Explanation {
            steps: steps.0,
            result,
            issuer: None,
        }
    }

    /// The explanation of a token of `token_len` bytes refused from its
    /// length alone (longer than `max_token_bytes`), as [`Verifier::explain`]
    /// gives it, without the token: for front ends that must not read a
    /// token past the limit (a C caller's buffer). `None` when the length is
    /// within the limit.
    pub fn explain_length(&self, token_len: usize) -> Option<Explanation> {
        let mut steps = Steps(Vec::new());
        let max = self.inner.options.max_token_bytes;
        let refused = steps
            .record("length", jwt::check_length(token_len, max), |_| {
                String::new()
            })
            .err()?;
        Some(Explanation {
            steps: steps.0,
            result: Err(refused),
            issuer: None,
        })
    }

    fn explain_into(&self, token: &[u8], now: i64, steps: &mut Steps) -> Result<VerifiedIdentity> {
        let inner = &*self.inner;
        let max = inner.options.max_token_bytes;
        steps.record("length", jwt::check_length(token.len(), max), |_| {
            format!("{} bytes, within the {max}-byte limit", token.len())
        })?;
        let parsed = steps.record(
            "structure",
            self.check_bearer_allowed()
                .and_then(|()| jwt::parse(token, max))
                .and_then(|p| self.check_header(&p).map(|()| p)),
            |p| {
                format!(
                    "three segments of canonical base64url; header alg {}, kid {:?}, typ JWT",
                    p.alg,
                    p.kid.as_str()
                )
            },
        )?;
        self.explain_parsed(&parsed, now, steps)
    }

    /// The steps of [`Verifier::explain`] after the token's structure and
    /// header rules passed: key, algorithm, signature, claims, times,
    /// audience, issuer, allocation (or node; nothing for a foreign token).
    pub(crate) fn explain_parsed(
        &self,
        parsed: &jwt::Parsed<'_>,
        now: i64,
        steps: &mut Steps,
    ) -> Result<VerifiedIdentity> {
        let inner = &*self.inner;
        let key = steps.record(
            "key",
            self.key(
                parsed.kid.as_str(),
                &mut KeyWait::new(inner.options.key_wait),
            )
            .and_then(|k| super::check_bearer_key(&k).map(|()| k)),
            |k| {
                format!(
                    "{} {} key {}, {}",
                    k.algorithm(),
                    k.purpose(),
                    k.id(),
                    k.state().name()
                )
            },
        )?;
        steps.record("algorithm", check_alg(&key, parsed), |()| {
            format!(
                "the header names {}, the key's algorithm; the signature is {} bytes",
                parsed.alg,
                parsed.signature.as_slice().len()
            )
        })?;
        steps.record("signature", check_sig(&key, parsed), |()| {
            format!("valid under key {}", key.id())
        })?;
        let decoded = decode_claims(&parsed.payload).and_then(|c| {
            self.check_kind(&c)?;
            self.check_spiffe_subject(&c)?;
            Ok(c)
        });
        let foreign = inner.options.foreign;
        let claims = steps.record("claims", decoded, |c| match &c.node {
            _ if foreign => format!("strict JSON; foreign token, sub {:?}", c.subject),
            Some(node) => format!("strict JSON; node {:?}, sub {:?}", node.node_id, c.subject),
            None => format!(
                "strict JSON; allocation {:?}, sub {:?}",
                c.allocation_id, c.subject
            ),
        })?;
        let leeway = inner.options.leeway_secs;
        steps.record("times", self.check_times(&claims, now), |()| {
            // In 128 bits: a signed token's times may be anywhere in i64.
            let rel = |t: i64| match i128::from(t) - i128::from(now) {
                d if d >= 0 => format!("{t} (in {d} s)"),
                d => format!("{t} ({} s ago)", -d),
            };
            let mut parts = Vec::new();
            for (name, v) in [
                ("exp", claims.expires_at),
                ("nbf", claims.not_before),
                ("iat", claims.issued_at),
            ] {
                parts.push(match v {
                    Some(t) => format!("{name} {}", rel(t)),
                    None => format!("no {name}"),
                });
            }
            format!("{}; leeway {leeway} s", parts.join(", "))
        })?;
        steps.record("audience", self.check_audience(&claims), |()| {
            format!(
                "aud {:?} includes {:?}",
                claims.audience,
                inner.audience.as_str()
            )
        })?;
        steps.record("issuer", self.check_issuer(&claims), |()| {
            match &inner.options.issuer {
                Some(want) => format!("iss is {want:?}, as required"),
                None => "no issuer required".to_string(),
            }
        })?;
        match &claims.node {
            _ if foreign => {}
            Some(node) => steps.record("node", self.check_bound(&claims), |()| {
                format!("node {:?} is live", node.node_id)
            })?,
            None => steps.record("allocation", self.check_bound(&claims), |()| {
                format!("allocation {:?} is live", claims.allocation_id)
            })?,
        }
        Ok(VerifiedIdentity {
            kid: key.id().clone(),
            claims,
        })
    }
}
