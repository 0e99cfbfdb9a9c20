//! [`Verifier::verify_proof`]: a WIT through the whole pipeline, then its
//! WPT against the WIT's `cnf.jwk` (see [`crate::pop`]).

use std::collections::BTreeMap;

use super::{KeyWait, VerifiedIdentity, Verifier, check_alg, check_sig, check_wit_key};
use crate::error::{Result, truncate_for_message};
use crate::jwt::{self, TokenType};
use crate::pop::wpt::{self, invalid};
use crate::pop::{BoundTokens, target_of, token_hash};

/// What the receiver knows about the request a proof came with: the target
/// URI it was reached at (from its own configuration, never from `Host` or
/// `X-Forwarded-Host`), and the tokens the request carries that the proof must
/// bind. `Debug` never shows the tokens.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProofRequest {
    target_uri: String,
    tokens: BoundTokens,
}

impl ProofRequest {
    /// A request to `target_uri` (query and fragment are dropped, as in `aud`).
    pub fn new(target_uri: &str) -> ProofRequest {
        ProofRequest {
            target_uri: target_of(target_uri).to_string(),
            tokens: BoundTokens::default(),
        }
    }

    /// The request carries this access token (without `Bearer `): the proof
    /// must bind it (`ath`).
    pub fn access_token(mut self, token: &str) -> ProofRequest {
        self.tokens.access(token);
        self
    }

    /// The request carries this transaction token: the proof must bind it (`tth`).
    pub fn transaction_token(mut self, token: &str) -> ProofRequest {
        self.tokens.transaction(token);
        self
    }

    /// The request carries this token in HTTP header `header`: the proof must
    /// bind it (`oth`, under the lower-cased header name).
    pub fn other_token(mut self, header: &str, value: &str) -> ProofRequest {
        self.tokens.other(header, value);
        self
    }
}

/// A WIT and its proof, both verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedProof {
    /// The WIT's identity (claims, including `cnf`, and the signing key).
    pub identity: VerifiedIdentity,
    /// The proof's `jti` (now remembered until `expires_at`).
    pub jti: String,
    /// The proof's `exp` (Unix seconds).
    pub expires_at: i64,
}

/// Longest `jti` accepted.
const MAX_JTI: usize = 128;

impl Verifier {
    /// Verifies a workload identity token (`wit`, typ `wit+jwt`) and the
    /// workload proof token (`wpt`) that came with one request, at `now`:
    ///
    /// 1. the WIT through the whole pipeline: structure, key (a WIT key: a
    ///    bearer key's token is refused, `UNKNOWN_KEY`), algorithm,
    ///    signature, times, issuer, live allocation (no audience: a WIT has
    ///    none, the WPT's `aud` is checked instead); it must carry `exp` and
    ///    `cnf.jwk`;
    /// 2. the WPT: typ `wpt+jwt`, its `alg` the `cnf.jwk`'s, its signature by
    ///    that key, `aud` the request's target, `exp` not past and not further
    ///    ahead than the maximum proof lifetime (both with the leeway), a `jti`,
    ///    `wth` the WIT's hash, and `ath`/`tth`/`oth` binding exactly the tokens
    ///    the request carries;
    /// 3. its `jti` not seen before while valid (then remembered).
    ///
    /// WIT failures have the pipeline's codes; WPT failures are
    /// `PROOF_INVALID`, a replay `PROOF_REPLAYED`.
    pub fn verify_proof(
        &self,
        wit: &str,
        wpt: &str,
        request: &ProofRequest,
        now: i64,
    ) -> Result<VerifiedProof> {
        let result = self.run_proof(wit, wpt, request, now);
        self.count(&result);
        result
    }

    fn run_proof(
        &self,
        wit: &str,
        wpt: &str,
        request: &ProofRequest,
        now: i64,
    ) -> Result<VerifiedProof> {
        let inner = &*self.inner;
        let max = inner.options.max_token_bytes;
        // 1. The WIT.
        let parsed = jwt::parse(wit.as_bytes(), max)?;
        if parsed.typ != TokenType::Wit {
            return Err(invalid(
                "the token presented as the WIT has typ JWT: expected wit+jwt (a bearer token names no key to prove possession of)",
            ));
        }
        self.check_allowed(parsed.alg)?;
        let key = self.key(
            parsed.kid.as_str(),
            &mut KeyWait::new(inner.options.key_wait),
        )?;
        check_wit_key(&key)?;
        check_alg(&key, &parsed)?;
        check_sig(&key, &parsed)?;
        let identity = self.finish_wit(&parsed.payload, key, now)?;
        let Some(cnf) = identity.claims.confirmation.as_ref() else {
            return Err(invalid(
                "the WIT has no cnf.jwk: there is no key to check the proof with",
            ));
        };
        if identity.claims.expires_at.is_none() {
            return Err(invalid(
                "the WIT has no exp: a workload identity token must expire",
            ));
        }

        // 2. The WPT.
        let proof = wpt::parse(wpt.as_bytes(), max)?;
        if proof.alg != cnf.alg {
            return Err(invalid(format!(
                "the WPT's alg is {:?}: the WIT's cnf.jwk.alg is {:?}",
                truncate_for_message(&proof.alg),
                cnf.alg
            )));
        }
        let workload_key = inner.proof_keys.get(cnf)?;
        if !workload_key
            .checker
            .verify(proof.signing_input, proof.signature.as_slice())
        {
            return Err(invalid(
                "the WPT's signature does not verify under the WIT's cnf.jwk (made with another key?)",
            ));
        }
        let c = &proof.claims;
        let leeway = inner.options.leeway_secs;
        match c.aud.as_deref() {
            Some(aud) if aud == request.target_uri => {}
            other => {
                return Err(invalid(format!(
                    "the WPT's aud is {:?}: expected this request's target {:?}",
                    other.map(truncate_for_message),
                    request.target_uri
                )));
            }
        }
        let Some(exp) = c.exp else {
            return Err(invalid("the WPT has no exp"));
        };
        if exp.saturating_add(leeway) < now {
            return Err(invalid(format!(
                "the WPT expired at {exp} (now {now}, leeway {leeway}s)"
            )));
        }
        let latest = now
            .saturating_add(inner.options.max_proof_lifetime_secs)
            .saturating_add(leeway);
        if exp > latest {
            return Err(invalid(format!(
                "the WPT's exp {exp} is too far ahead: proofs may live at most {}s (now {now}, leeway {leeway}s)",
                inner.options.max_proof_lifetime_secs
            )));
        }
        let jti = match c.jti.as_deref() {
            Some(j) if !j.is_empty() && j.len() <= MAX_JTI => j,
            other => {
                return Err(invalid(format!(
                    "the WPT's jti is {:?}: expected a unique string of 1 to {MAX_JTI} bytes",
                    other.map(truncate_for_message)
                )));
            }
        };
        if c.wth.as_deref() != Some(token_hash(wit).as_str()) {
            return Err(invalid(
                "the WPT's wth is not the hash of this WIT: the proof was made for another WIT",
            ));
        }
        bind(
            "ath",
            "access token",
            c.ath.as_deref(),
            request.tokens.access_token.as_deref(),
        )?;
        bind(
            "tth",
            "transaction token",
            c.tth.as_deref(),
            request.tokens.transaction_token.as_deref(),
        )?;
        bind_others(c.oth.as_ref(), &request.tokens)?;

        // 3. Replay: last, so a proof that fails no other check is what fills it.
        inner
            .replay
            .record(&workload_key.owner, jti, exp.saturating_add(leeway), now)?;
        Ok(VerifiedProof {
            identity,
            jti: jti.to_string(),
            expires_at: exp,
        })
    }

    /// Unexpired proofs the replay cache remembers at `now`.
    pub fn proofs_remembered(&self, now: i64) -> usize {
        self.inner.replay.len(now)
    }
}

/// A hash claim must be present exactly when the request carries the token,
/// and be its hash.
fn bind(claim: &str, what: &str, hash: Option<&str>, token: Option<&String>) -> Result<()> {
    match (hash, token) {
        (None, None) => Ok(()),
        (Some(h), Some(t)) if h == token_hash(t) => Ok(()),
        (Some(_), Some(_)) => Err(invalid(format!(
            "the WPT's {claim} is not the hash of the request's {what}"
        ))),
        (Some(_), None) => Err(invalid(format!(
            "the WPT has {claim}, but the request carries no {what}"
        ))),
        (None, Some(_)) => Err(invalid(format!(
            "the request carries the {what}, but the WPT has no {claim} binding it"
        ))),
    }
}

/// `oth` must bind exactly the request's other tokens: every entry one of
/// them (an unknown entry is refused), every one of them an entry.
fn bind_others(oth: Option<&BTreeMap<String, String>>, request_tokens: &BoundTokens) -> Result<()> {
    let empty = BTreeMap::new();
    let oth = oth.unwrap_or(&empty);
    // Every value is checked below only because each header has one.
    request_tokens.refuse_repeated_headers()?;
    let tokens = &request_tokens.other_tokens;
    for (header, hash) in oth {
        let Some((_, value)) = tokens.iter().find(|(h, _)| h == header) else {
            return Err(invalid(format!(
                "the WPT's oth has an entry for {:?}, a header the request has no token in",
                truncate_for_message(header)
            )));
        };
        if *hash != token_hash(value.trim()) {
            return Err(invalid(format!(
                "the WPT's oth entry for {header:?} is not the hash of the request's token"
            )));
        }
    }
    if let Some((header, _)) = tokens.iter().find(|(h, _)| !oth.contains_key(h)) {
        return Err(invalid(format!(
            "the request carries a token in {header:?}, but the WPT's oth does not bind it"
        )));
    }
    Ok(())
}
