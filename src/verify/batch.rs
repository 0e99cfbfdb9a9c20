//! [`Verifier::verify_batch`], in stages that a trust set shares across its
//! issuers: each token's key and signature are staged on its own verifier,
//! then every EdDSA point of the whole batch is encoded with one shared
//! field inversion ([`settle_signatures`]), then each token is finished on
//! its own verifier.

use curve25519_dalek::edwards::EdwardsPoint;

use super::{KeyWait, VerifiedIdentity, Verifier, bad_signature, decode_claims};
use super::{check_alg, check_bearer_key, check_sig};
use crate::error::Result;
use crate::jwt;
use crate::keyring::{VerifyingHandle, sigcheck};

/// Where a batch token's signature check stands after stage 1.
enum SigStage {
    /// EdDSA: the point `R` must encode, to be encoded with the batch.
    Point(EdwardsPoint),
    /// Any other algorithm: already checked, and valid.
    Checked,
}

/// A batch token whose key is found and whose signature is checked or
/// staged for the shared encoding.
pub(crate) struct Staged<'a> {
    pub(crate) parsed: jwt::Parsed<'a>,
    pub(crate) key: VerifyingHandle,
    stage: SigStage,
}

impl Verifier {
    /// Stage 1 of a batch for one parsed token: this verifier's header
    /// rules, its key (unknown kids share `waits`' one deadline), the
    /// algorithm, and the signature (EdDSA: the point `R` must encode).
    pub(crate) fn stage<'a>(
        &self,
        parsed: jwt::Parsed<'a>,
        waits: &mut KeyWait,
    ) -> Result<Staged<'a>> {
        self.check_bearer_allowed()?;
        self.check_header(&parsed)?;
        let key = self.key(parsed.kid.as_str(), waits)?;
        check_bearer_key(&key)?;
        check_alg(&key, &parsed)?;
        let Some(ed) = key.ed25519() else {
            check_sig(&key, &parsed)?;
            return Ok(Staged {
                parsed,
                key,
                stage: SigStage::Checked,
            });
        };
        let point = <&[u8; 64]>::try_from(parsed.signature.as_slice())
            .ok()
            .and_then(|sig| ed.expected_r(parsed.signing_input, sig));
        match point {
            Some(point) => Ok(Staged {
                parsed,
                key,
                stage: SigStage::Point(point),
            }),
            None => Err(bad_signature(&key)),
        }
    }

    /// Verifies many tokens, with a result per token in the same order. Accepts
    /// exactly what [`Verifier::verify`] accepts; the
    /// signature step shares one field inversion across the batch.
    pub fn verify_batch(&self, tokens: &[&str], now: i64) -> Vec<Result<VerifiedIdentity>> {
        if self.inner.cache.is_some() {
            // Cache hits take the single path; keep one code path for them.
            return tokens.iter().map(|t| self.verify(t, now)).collect();
        }
        // Stage 1: parse, find the key, compute the point R must encode. Unknown
        // kids share one deadline for the whole call, each waited for once.
        let mut waits = KeyWait::new(self.inner.options.key_wait);
        let staged: Vec<((), Result<Staged<'_>>)> = tokens
            .iter()
            .map(|t| {
                let staged = jwt::parse(t.as_bytes(), self.inner.options.max_token_bytes)
                    .and_then(|parsed| self.stage(parsed, &mut waits));
                ((), staged)
            })
            .collect();
        // Stage 2: the EdDSA signatures, with one shared inversion.
        let standing = settle_signatures(&staged);
        // Stage 3: the claims and the allocation, per token.
        staged
            .into_iter()
            .zip(standing)
            .map(|(((), s), standing)| {
                let result = match s {
                    Ok(st) if !standing => Err(bad_signature(&st.key)),
                    Ok(st) => decode_claims(&st.parsed.payload)
                        .and_then(|claims| self.finish(claims, st.key, now, None)),
                    Err(e) => Err(e),
                };
                self.count(&result);
                result
            })
            .collect()
    }
}

/// `BadSignature` for a staged token whose signature [`settle_signatures`]
/// refused.
pub(crate) fn bad_signature_of(st: &Staged<'_>) -> crate::error::Error {
    bad_signature(&st.key)
}

/// Stage 2 of a batch: encodes every staged EdDSA point with one shared
/// inversion and compares each with its signature's `R`. Gives, per token,
/// whether its signature stands: `false` only for a staged EdDSA signature
/// that fails (the caller refuses it with `BadSignature`); a token staged
/// otherwise, or refused already, is `true`. Nothing is moved: the staged
/// tokens (each a few KiB) stay where they are until stage 3 takes them.
pub(crate) fn settle_signatures<T>(staged: &[(T, Result<Staged<'_>>)]) -> Vec<bool> {
    let points: Vec<EdwardsPoint> = staged
        .iter()
        .filter_map(|(_, s)| match s {
            Ok(Staged {
                stage: SigStage::Point(p),
                ..
            }) => Some(*p),
            _ => None,
        })
        .collect();
    let mut encoded = EdwardsPoint::compress_batch_alloc(&points).into_iter();
    staged
        .iter()
        .map(|(_, s)| match s {
            Ok(
                st @ Staged {
                    stage: SigStage::Point(_),
                    ..
                },
            ) => {
                // One encoding per staged point, in order: `next` is never
                // short (a short one refuses the token).
                encoded.next().is_some_and(|expected| {
                    <&[u8; 64]>::try_from(st.parsed.signature.as_slice())
                        .is_ok_and(|sig| sigcheck::accepts(sig, &expected))
                })
            }
            _ => true,
        })
        .collect()
}
