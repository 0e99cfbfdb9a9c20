//! One trusted issuer of a trust set: who it is ([`IssuerId`]), its keys
//! and its rules ([`TrustedIssuer`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::source::KeySource;
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::JwsAlgorithm;
use crate::state::StateStore;
use crate::verify::{Audience, NodeTokens, Verifier, VerifierBuilder};

/// Who a trusted issuer is: the `iss` its tokens carry, or the SPIFFE trust
/// domain of their `sub`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IssuerId {
    /// Tokens whose `iss` is exactly this.
    Iss(String),
    /// SPIFFE JWT-SVIDs whose `sub` is a SPIFFE ID in this trust domain.
    TrustDomain(String),
}

impl IssuerId {
    /// The issuer of tokens whose `iss` is exactly `iss` (not empty).
    pub fn iss(iss: &str) -> Result<IssuerId> {
        if iss.is_empty() {
            return Err(Error::invalid(
                "TrustedIssuer",
                "iss",
                "must not be empty: an issuer identified by iss needs one",
            ));
        }
        Ok(IssuerId::Iss(iss.to_string()))
    }

    /// The issuer of SPIFFE JWT-SVIDs of `trust_domain` (lower-case
    /// letters, digits, `.`, `-`, `_`; without `spiffe://`).
    pub fn trust_domain(trust_domain: &str) -> Result<IssuerId> {
        if let Some(p) = crate::profile::trust_domain_problem(trust_domain) {
            return Err(Error::invalid(
                "TrustedIssuer",
                "trust_domain",
                format!("{:?} {p}", truncate_for_message(trust_domain)),
            ));
        }
        Ok(IssuerId::TrustDomain(trust_domain.to_string()))
    }
}

/// The `iss` itself, or `spiffe://<trust domain>`: how results, stats and
/// explanations name the issuer.
impl fmt::Display for IssuerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IssuerId::Iss(iss) => f.write_str(iss),
            IssuerId::TrustDomain(td) => write!(f, "spiffe://{td}"),
        }
    }
}

/// One issuer a [`TrustSet`](crate::TrustSet) trusts: who it is, its keys
/// (a [`KeySource`], kept alive by the trust set), and its rules — the
/// audience (required), the algorithms allowed, and what its tokens bind
/// to: an allocation store ([`TrustedIssuer::nomad`]: Nomad-like identity
/// tokens, allocations and, if accepted, nodes checked live) or nothing
/// ([`TrustedIssuer::foreign`]: SPIRE JWT-SVIDs, Kubernetes or AWS tokens).
///
/// An issuer identified by a trust domain follows the SPIFFE JWT-SVID rules
/// whatever it binds to: `sub` a SPIFFE ID in the trust domain, `exp`
/// required, `alg` an RS, ES or PS algorithm.
pub struct TrustedIssuer {
    pub(super) id: IssuerId,
    pub(super) source: Arc<dyn KeySource>,
    pub(super) builder: VerifierBuilder,
    pub(super) algorithms: Option<Vec<JwsAlgorithm>>,
    pub(super) require_iss: Option<String>,
}

impl fmt::Debug for TrustedIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustedIssuer")
            .field("id", &self.id)
            .field("algorithms", &self.algorithms)
            .field("require_iss", &self.require_iss)
            .finish_non_exhaustive()
    }
}

impl TrustedIssuer {
    /// A Nomad-like issuer: its tokens carry the Nomad claims and pass the
    /// whole pipeline of [`Verifier`], their allocation (or node, see
    /// [`TrustedIssuer::node_tokens`]) checked live in `store`.
    pub fn nomad(
        id: IssuerId,
        keys: impl KeySource,
        store: Arc<dyn StateStore>,
        audience: Audience,
    ) -> TrustedIssuer {
        let builder = Verifier::builder(keys.keyring(), store, audience);
        TrustedIssuer::with(id, keys, builder)
    }

    /// A foreign issuer: no Nomad claim is required and no store is asked;
    /// `sub` is required (see [`Verifier::foreign_builder`]).
    pub fn foreign(id: IssuerId, keys: impl KeySource, audience: Audience) -> TrustedIssuer {
        let builder = Verifier::foreign_builder(keys.keyring(), audience);
        TrustedIssuer::with(id, keys, builder)
    }

    fn with(id: IssuerId, keys: impl KeySource, builder: VerifierBuilder) -> TrustedIssuer {
        TrustedIssuer {
            id,
            source: Arc::new(keys),
            builder,
            algorithms: None,
            require_iss: None,
        }
    }

    /// Who this issuer is.
    pub fn id(&self) -> &IssuerId {
        &self.id
    }

    /// The header algorithms this issuer's tokens may carry (default: every
    /// algorithm of its keys; a token must name its key's own in any
    /// case). For a trust-domain issuer only the RS, ES and PS ones count;
    /// none left is an error when the trust set is built.
    pub fn algorithms(mut self, algorithms: &[JwsAlgorithm]) -> TrustedIssuer {
        self.algorithms = Some(algorithms.to_vec());
        self
    }

    /// For an issuer identified by its trust domain: its tokens must also
    /// carry exactly this `iss`, and a token with this `iss` is routed to
    /// it. (An issuer identified by its `iss` always requires it.)
    pub fn require_iss(mut self, iss: &str) -> TrustedIssuer {
        self.require_iss = (!iss.is_empty()).then(|| iss.to_string());
        self
    }

    /// Clock skew allowed on `exp`, `nbf` and `iat` (default 60 s).
    pub fn leeway(mut self, leeway: Duration) -> TrustedIssuer {
        self.builder = self.builder.leeway(leeway);
        self
    }

    /// Whether tokens must carry `exp` (default no; always for a
    /// trust-domain issuer).
    pub fn require_exp(mut self, require: bool) -> TrustedIssuer {
        self.builder = self.builder.require_exp(require);
        self
    }

    /// Which kinds of Nomad identity token to accept (default allocation
    /// tokens only); see [`VerifierBuilder::node_tokens`]. No effect on a
    /// foreign issuer.
    pub fn node_tokens(mut self, accept: NodeTokens) -> TrustedIssuer {
        self.builder = self.builder.node_tokens(accept);
        self
    }
}
