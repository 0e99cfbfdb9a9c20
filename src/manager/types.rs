//! The manager's vocabulary: which identity, the token kept for it, secrets
//! derived from it, what watchers are told, and how identities are signed.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::issue::{Issuer, SignedIdentity};
use crate::model::IssueRequest;
use crate::pop::{ProofOptions, WorkloadKey};

/// Which identity: its task or service, and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityId {
    /// The task or service name.
    pub workload: String,
    /// The identity's name.
    pub name: String,
}

impl IdentityId {
    /// The key for `name` of `workload`.
    pub fn new(workload: &str, name: &str) -> IdentityId {
        IdentityId {
            workload: workload.to_string(),
            name: name.to_string(),
        }
    }

    /// The identity `req` signs: its workload (task or service) and identity
    /// name.
    pub fn of(req: &IssueRequest) -> IdentityId {
        let workload = req
            .workload()
            .map(|w| w.name().to_string())
            .unwrap_or_default();
        IdentityId::new(&workload, &req.identity.name)
    }
}

impl fmt::Display for IdentityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.workload, self.name)
    }
}

/// A signed identity as the manager keeps it. `Debug` redacts the token and
/// shows of the workload key only its algorithm.
///
/// For a proof-bound identity (see
/// [`IdentityManagerBuilder::proof_of_possession`](super::IdentityManagerBuilder::proof_of_possession))
/// the token is a WIMSE workload identity token (WIT) and `workload_key` the
/// key its `cnf.jwk` names, made for this WIT alone: [`IdentityToken::prove`]
/// mints the proofs (WPTs) that go with it.
#[derive(Clone)]
pub struct IdentityToken {
    /// Which identity.
    pub key: IdentityId,
    /// The compact JWS.
    pub token: String,
    /// The signing key's ID.
    pub kid: String,
    /// Its `jti`.
    pub jwt_id: String,
    /// Its `iat` (Unix seconds).
    pub issued_at: i64,
    /// Its `exp` (Unix seconds), if any.
    pub expires_at: Option<i64>,
    /// The private key this WIT is bound to, for a proof-bound identity;
    /// `None` for a bearer token. Shared by clones (one copy of the secret,
    /// zeroized when the last goes); never to be used after `expires_at`.
    pub workload_key: Option<Arc<WorkloadKey>>,
}

impl IdentityToken {
    pub(crate) fn from_signed(
        key: IdentityId,
        s: SignedIdentity,
        workload_key: Option<Arc<WorkloadKey>>,
    ) -> IdentityToken {
        IdentityToken {
            key,
            kid: s.kid.to_string(),
            jwt_id: s.claims.jwt_id,
            issued_at: s.claims.issued_at.unwrap_or_default(),
            expires_at: s.claims.expires_at,
            token: s.token,
            workload_key,
        }
    }

    /// Whether the token may still be served at `now_ms`.
    pub fn valid_at(&self, now_ms: i64) -> bool {
        self.expires_at
            .is_none_or(|exp| now_ms < exp.saturating_mul(1000))
    }

    /// When its renewal window opens (Unix seconds): half-way through its life.
    /// Computed without overflow for any times (the midpoint of two `i64`s is
    /// an `i64`).
    pub fn renewal_window_start(&self) -> Option<i64> {
        self.expires_at.map(|exp| {
            let (iat, exp) = (i128::from(self.issued_at), i128::from(exp));
            // Between iat and exp, so within i64.
            i64::try_from(iat + (exp - iat) / 2).unwrap_or(i64::MAX)
        })
    }

    /// Whether the token is a WIT with a workload key to prove possession of.
    pub fn is_proof_bound(&self) -> bool {
        self.workload_key.is_some()
    }

    /// A workload proof token (WPT) for one request to `target_uri`, bound to
    /// this WIT and to the tokens `options` name, valid from `now` (Unix
    /// **seconds**, as in the token's claims) for the options' lifetime; send
    /// it in `Workload-Proof-Token` beside the WIT in `Workload-Identity-Token`.
    ///
    /// Refused for a bearer identity (`InvalidArgument`: it is not
    /// proof-bound), and once the WIT has expired (`Expired` when `now >=
    /// exp`): a workload key is never used after its WIT; take the renewed
    /// token from the manager instead.
    pub fn prove(&self, target_uri: &str, now: i64, options: &ProofOptions) -> Result<String> {
        let Some(workload_key) = &self.workload_key else {
            return Err(Error::invalid(
                "IdentityToken",
                "workload_key",
                format!(
                    "identity {} is not proof-bound: its token is a bearer token with no workload key to prove possession of (ask for a WIT with IdentityManagerBuilder::proof_of_possession)",
                    self.key
                ),
            ));
        };
        match self.expires_at {
            Some(exp) if now < exp => workload_key.prove(&self.token, target_uri, now, options),
            Some(exp) => Err(Error::Expired {
                exp,
                now,
                leeway_secs: 0,
            }),
            None => Err(Error::invalid(
                "IdentityToken",
                "expires_at",
                format!(
                    "the WIT of identity {} has no exp: a workload key is used only while its WIT lives",
                    self.key
                ),
            )),
        }
    }
}

/// Tokens are equal when every field is; workload keys when their algorithm
/// and public half are (the secret determines the public half).
impl PartialEq for IdentityToken {
    fn eq(&self, other: &IdentityToken) -> bool {
        let IdentityToken {
            key,
            token,
            kid,
            jwt_id,
            issued_at,
            expires_at,
            workload_key,
        } = self;
        let same_key = match (workload_key, &other.workload_key) {
            (None, None) => true,
            (Some(a), Some(b)) => a.algorithm() == b.algorithm() && a.proof_key() == b.proof_key(),
            _ => false,
        };
        *key == other.key
            && *token == other.token
            && *kid == other.kid
            && *jwt_id == other.jwt_id
            && *issued_at == other.issued_at
            && *expires_at == other.expires_at
            && same_key
    }
}

impl Eq for IdentityToken {}

impl fmt::Debug for IdentityToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityToken")
            .field("key", &self.key)
            .field(
                "token",
                &format_args!("[redacted, {} bytes]", self.token.len()),
            )
            .field("kid", &self.kid)
            .field("jwt_id", &self.jwt_id)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            // The algorithm only: never the secret (nor the public half,
            // which is in the WIT's cnf anyway).
            .field(
                "workload_key",
                &self.workload_key.as_ref().map(|k| k.algorithm()),
            )
            .finish()
    }
}

/// A secret a token exchange derived from an identity. `Debug` shows its
/// length only; it is zeroized when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct DerivedSecret {
    /// The exchange's name.
    pub exchange: String,
    /// The identity it was derived from.
    pub identity: IdentityId,
    /// The secret.
    pub secret: String,
    /// The `jti` of the identity token it was derived from.
    pub derived_from: String,
    /// Where it was minted ([`TokenExchange::origin`](super::TokenExchange::origin)):
    /// a restore sends it back only there. `""` in states saved before
    /// origins were.
    pub origin: String,
}

impl Drop for DerivedSecret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.secret);
    }
}

impl fmt::Debug for DerivedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DerivedSecret")
            .field("exchange", &self.exchange)
            .field("identity", &self.identity)
            .field(
                "secret",
                &format_args!("[redacted, {} bytes]", self.secret.len()),
            )
            .field("derived_from", &self.derived_from)
            .finish()
    }
}

/// Why a watcher was told about a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// First signed for a new allocation.
    Initial,
    /// Renewed before expiry.
    Renewed,
    /// Restored after a restart (reused or re-signed).
    Restored,
}

/// What a watcher receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityUpdate {
    /// The newest token.
    pub token: IdentityToken,
    /// Why.
    pub kind: EventKind,
}

/// How signed identities are obtained: the in-process [`Issuer`], or the host's
/// RPC. All requested identities, in order, or an error — never a partial set.
pub trait IdentitySigner: Send + Sync {
    /// Signs every request at `now` (Unix seconds).
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>>;

    /// The `sub` and extra claims a token signed for `req` carries, when the
    /// signer knows them; the manager checks every token it is given or
    /// restores against them. `None` (the default, for a host's RPC): `sub`
    /// must be Nomad's form (a WIT's `wimse://<trust domain>/<path>`) and
    /// extra claims are not compared. The [`Issuer`] answers from its
    /// profiles, so SPIFFE IDs and extra claims are checked exactly.
    fn expected_claims(&self, req: &IssueRequest) -> Option<Result<crate::claims::ExpectedClaims>> {
        let _ = req;
        None
    }
}

impl IdentitySigner for Issuer {
    fn sign(&self, requests: &[IssueRequest], now: i64) -> Result<Vec<SignedIdentity>> {
        requests.iter().map(|r| self.issue(r, now)).collect()
    }

    fn expected_claims(&self, req: &IssueRequest) -> Option<Result<crate::claims::ExpectedClaims>> {
        Some(Issuer::expected_claims(self, req))
    }
}

/// How a restore went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Whether the saved tokens were reused (else everything was re-signed).
    pub reused: bool,
    /// Why they were not reused (empty when they were).
    pub reason: String,
    /// Exchanges whose secret was derived anew (not reused).
    pub rederived: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::Algorithm;

    fn token(workload_key: Option<Arc<WorkloadKey>>, exp: Option<i64>) -> IdentityToken {
        IdentityToken {
            key: IdentityId::new("server", "vault_default"),
            token: "h.p.s".into(),
            kid: "key-1".into(),
            jwt_id: "jti".into(),
            issued_at: 1_000,
            expires_at: exp,
            workload_key,
        }
    }

    #[test]
    fn only_a_live_proof_bound_token_proves() {
        let key = Arc::new(WorkloadKey::generate(Algorithm::EdDsa).unwrap());
        let t = token(Some(key), Some(2_000));
        assert!(t.is_proof_bound());
        let wpt = t
            .prove("https://svc.example/a", 1_999, &ProofOptions::new())
            .unwrap();
        assert_eq!(wpt.split('.').count(), 3);
        for late in [2_000, i64::MAX] {
            match t.prove("https://svc.example/a", late, &ProofOptions::new()) {
                Err(Error::Expired {
                    exp: 2_000, now, ..
                }) => assert_eq!(now, late),
                other => panic!("{other:?}"),
            }
        }
        let no_exp = token(t.workload_key.clone(), None);
        let e = no_exp
            .prove("https://svc.example/a", 1_500, &ProofOptions::new())
            .unwrap_err();
        assert!(e.to_string().contains("has no exp"), "{e}");
        let bearer = token(None, Some(2_000));
        assert!(!bearer.is_proof_bound());
        let e = bearer
            .prove("https://svc.example/a", 1_500, &ProofOptions::new())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("identity server/vault_default is not proof-bound"),
            "{e}"
        );
    }

    #[test]
    fn equality_compares_workload_keys_and_debug_shows_only_their_algorithm() {
        let a = Arc::new(WorkloadKey::generate(Algorithm::Es256).unwrap());
        let b = Arc::new(WorkloadKey::generate(Algorithm::Es256).unwrap());
        let same = Arc::new(WorkloadKey::from_secret(Algorithm::Es256, &a.secret()).unwrap());
        assert_eq!(token(Some(a.clone()), Some(1)), token(Some(same), Some(1)));
        assert_ne!(token(Some(a.clone()), Some(1)), token(Some(b), Some(1)));
        assert_ne!(token(Some(a.clone()), Some(1)), token(None, Some(1)));
        let shown = format!("{:?}", token(Some(a.clone()), Some(1)));
        assert!(shown.contains("workload_key: Some(Es256)"), "{shown}");
        assert!(!shown.contains(&a.proof_key().x), "{shown}");
        assert!(!shown.contains("h.p.s"), "{shown}");
    }
}
