//! Tokens of other issuers: the algorithms a verifier accepts
//! ([`VerifierBuilder::allowed_algorithms`]), verifiers without an
//! allocation store ([`Verifier::foreign_builder`]: SPIRE JWT-SVIDs,
//! Kubernetes or AWS tokens), and SPIFFE JWT-SVID rules
//! ([`VerifierBuilder::spiffe_trust_domain`]).

use std::sync::Arc;

use super::{Audience, Verifier, VerifierBuilder};
use crate::claims::Claims;
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{JwsAlgorithm, Keyring};
use crate::profile::spiffe_id_problem;
use crate::state::{AllocState, Consistency, NodeState, StateStore, StoreError};

/// A set of [`JwsAlgorithm`]s, one bit each (their values are 1 to 10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AlgSet(u16);

impl AlgSet {
    /// Every algorithm.
    pub(crate) const ALL: AlgSet = AlgSet(u16::MAX);

    /// The algorithms a SPIFFE JWT-SVID may be signed with: RS, ES and PS
    /// (never EdDSA).
    pub(crate) const SPIFFE: AlgSet = AlgSet(
        Self::bit(JwsAlgorithm::Rs256)
            | Self::bit(JwsAlgorithm::Rs384)
            | Self::bit(JwsAlgorithm::Rs512)
            | Self::bit(JwsAlgorithm::Es256)
            | Self::bit(JwsAlgorithm::Es384)
            | Self::bit(JwsAlgorithm::Es512)
            | Self::bit(JwsAlgorithm::Ps256)
            | Self::bit(JwsAlgorithm::Ps384)
            | Self::bit(JwsAlgorithm::Ps512),
    );

    const fn bit(alg: JwsAlgorithm) -> u16 {
        1 << (alg as u32)
    }

    pub(crate) fn of(algs: &[JwsAlgorithm]) -> AlgSet {
        AlgSet(algs.iter().fold(0, |m, a| m | Self::bit(*a)))
    }

    #[inline]
    pub(crate) fn contains(self, alg: JwsAlgorithm) -> bool {
        self.0 & Self::bit(alg) != 0
    }

    pub(crate) fn and(self, other: AlgSet) -> AlgSet {
        AlgSet(self.0 & other.0)
    }

    pub(crate) fn is_empty(self) -> bool {
        JwsAlgorithm::ALL.iter().all(|a| !self.contains(*a))
    }

    /// The names, quoted, for messages.
    pub(crate) fn names(self) -> String {
        let names: Vec<String> = JwsAlgorithm::ALL
            .iter()
            .filter(|a| self.contains(**a))
            .map(|a| format!("{:?}", a.name()))
            .collect();
        if names.is_empty() {
            "none at all".into()
        } else {
            names.join(", ")
        }
    }
}

/// The store of a verifier without one: never asked (a foreign token binds
/// to nothing in it), and failing closed if it ever were.
struct NoStore;

impl StateStore for NoStore {
    fn allocation_state(
        &self,
        _alloc_id: &str,
        _consistency: Consistency,
    ) -> std::result::Result<AllocState, StoreError> {
        Err(StoreError::new("this verifier has no allocation store"))
    }

    fn node_state(
        &self,
        _node_id: &str,
        _consistency: Consistency,
    ) -> std::result::Result<NodeState, StoreError> {
        Err(StoreError::new("this verifier has no allocation store"))
    }
}

impl Verifier {
    /// Starts a verifier for **foreign** tokens over `keyring` (shared: later
    /// changes are seen, e.g. a [`RemoteJwks`](crate::RemoteJwks)'s keyring):
    /// tokens from issuers that are not Nomad-like (SPIRE JWT-SVIDs,
    /// Kubernetes service-account tokens, AWS outbound identity tokens). No
    /// Nomad claim is required and no allocation store is asked; `sub` is
    /// required (not empty). Signature, algorithm, times and audience are
    /// checked as always; add [`VerifierBuilder::issuer`],
    /// [`VerifierBuilder::spiffe_trust_domain`] or
    /// [`VerifierBuilder::allowed_algorithms`] to narrow it.
    /// [`VerifierBuilder::node_tokens`] has no effect on such a verifier.
    pub fn foreign_builder(keyring: Keyring, audience: Audience) -> VerifierBuilder {
        let mut b = Verifier::builder(keyring, Arc::new(NoStore), audience);
        b.options.foreign = true;
        b
    }

    /// Refuses a header `alg` this verifier does not accept (before any key
    /// is looked up).
    #[inline]
    pub(crate) fn check_allowed(&self, alg: JwsAlgorithm) -> Result<()> {
        let allowed = self.inner.options.allowed_algs;
        if allowed.contains(alg) {
            return Ok(());
        }
        let why = if self.inner.options.spiffe_trust_domain.is_some() {
            " (a SPIFFE JWT-SVID is signed with RS, ES or PS algorithms only)"
        } else {
            ""
        };
        Err(Error::UnsupportedAlgorithm {
            alg: alg.name().to_string(),
            expected: format!(
                "one of the algorithms this verifier allows: {}{why}",
                allowed.names()
            ),
        })
    }

    /// A foreign token's subject is present (its form is
    /// [`Verifier::check_spiffe_subject`]'s).
    pub(super) fn check_foreign_subject(&self, c: &Claims) -> Result<()> {
        if c.subject.is_empty() {
            return Err(Error::MalformedToken {
                reason: "the token has no sub claim (or an empty one): a foreign token must name its subject".into(),
            });
        }
        Ok(())
    }

    /// With a SPIFFE trust domain set: `sub` is a SPIFFE ID in it.
    #[inline]
    pub(super) fn check_spiffe_subject(&self, c: &Claims) -> Result<()> {
        let Some(td) = &self.inner.options.spiffe_trust_domain else {
            return Ok(());
        };
        if let Some(problem) = spiffe_id_problem(&c.subject) {
            return Err(Error::MalformedToken {
                reason: format!(
                    "sub {:?} is not a SPIFFE ID: it {problem}",
                    truncate_for_message(&c.subject)
                ),
            });
        }
        let found = spiffe_trust_domain_of(&c.subject).unwrap_or_default();
        if found != td {
            return Err(Error::IssuerMismatch {
                expected: format!("spiffe://{td}"),
                found: format!(
                    "sub {:?} in trust domain {:?}",
                    truncate_for_message(&c.subject),
                    truncate_for_message(found)
                ),
            });
        }
        Ok(())
    }
}

/// The trust domain of a `spiffe://` subject (not validated), if it is one.
pub(crate) fn spiffe_trust_domain_of(sub: &str) -> Option<&str> {
    let rest = sub.strip_prefix("spiffe://")?;
    Some(rest.split_once('/').map_or(rest, |(td, _)| td))
}

impl VerifierBuilder {
    /// Requires SPIFFE JWT-SVIDs of `trust_domain` (lower-case letters,
    /// digits, `.`, `-`, `_`): `sub` must be a SPIFFE ID in that trust
    /// domain (another trust domain is `IssuerMismatch`, not a SPIFFE ID
    /// `MalformedToken`), `exp` is required, and the header `alg` must be an
    /// RS, ES or PS algorithm (never EdDSA), as the JWT-SVID specification
    /// says.
    pub fn spiffe_trust_domain(mut self, trust_domain: &str) -> Result<VerifierBuilder> {
        if let Some(p) = crate::profile::trust_domain_problem(trust_domain) {
            return Err(Error::invalid(
                "Verifier",
                "spiffe_trust_domain",
                format!("{:?} {p}", truncate_for_message(trust_domain)),
            ));
        }
        self.options.spiffe_trust_domain = Some(trust_domain.to_string());
        self.options.require_exp = true;
        Ok(self)
    }
}
