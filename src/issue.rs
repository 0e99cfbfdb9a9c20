//! Signing identities for workloads.

use crate::claims::Claims;
use crate::error::{Error, Result};
use crate::jwt;
use crate::keyring::{Algorithm, KeyId, KeyPurpose, Keyring};
use crate::model::IssueRequest;
use crate::profile::{ExtraClaimsPolicy, SpiffeProfile};

/// A signed identity: the token and what it says. `Debug` redacts the token
/// (it is a bearer credential).
#[derive(Clone, PartialEq, Eq)]
pub struct SignedIdentity {
    /// The compact JWS.
    pub token: String,
    /// Its claims.
    pub claims: Claims,
    /// The key that signed it.
    pub kid: KeyId,
}

impl SignedIdentity {
    /// A token a host's signer returned (its servers signed it, over RPC),
    /// checked against `keyring` the way a restored token is: well formed,
    /// signed by a key of the keyring with the purpose its type needs (a WIT
    /// by a WIT key, any other token by a bearer key), in that key's
    /// algorithm. Times, audience and allocation are not checked here: an
    /// [`IdentitySigner`](crate::manager::IdentitySigner) returning it has
    /// them compared with its request by the manager.
    ///
    /// For hosts whose signer is not an in-process [`Issuer`]: the manager's
    /// C and Go faces build their host signers on it.
    pub fn from_token(token: String, keyring: &Keyring) -> Result<SignedIdentity> {
        let claims = crate::verify::check_signature(keyring, &token)?;
        let parsed = jwt::parse(token.as_bytes(), jwt::DEFAULT_MAX_TOKEN_BYTES)?;
        let kid = KeyId::new(parsed.kid.as_str())?;
        Ok(SignedIdentity { token, claims, kid })
    }
}

impl std::fmt::Debug for SignedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIdentity")
            .field(
                "token",
                &format_args!("[redacted, {} bytes]", self.token.len()),
            )
            .field("claims", &self.claims)
            .field("kid", &self.kid)
            .finish()
    }
}

/// Signs identities with a keyring's active key of the algorithm each identity
/// calls for: [`Issuer::algorithm`] (EdDSA unless set), overridden per identity
/// name and/or audience (see [`Issuer::algorithm_of`] for the precedence).
///
/// ```
/// use workload_identity::model::{GoDuration, IssueRequest, WorkloadIdentity};
/// use workload_identity::{Issuer, Keyring};
///
/// let keyring = Keyring::new();
/// keyring.rotate(1_700_000_000)?;
/// let mut req = IssueRequest::default();
/// req.region = "global".into();
/// req.allocation.id = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc".into();
/// req.allocation.namespace = "default".into();
/// req.allocation.job_id = "web".into();
/// req.allocation.task_group = "frontend".into();
/// req.task = "server".into();
/// req.identity = WorkloadIdentity {
///     name: "vault_default".into(),
///     audience: vec!["vault.io".into()],
///     ttl: GoDuration::from_secs(3600), // nanoseconds on the wire
///     ..WorkloadIdentity::default()
/// };
/// let signed = Issuer::new(keyring.clone())
///     .issuer("https://nomad.example.com")
///     .issue(&req, 1_700_000_000)?;
/// assert_eq!(signed.claims.subject, "global:default:web:frontend:server:vault_default");
/// assert_eq!(signed.claims.expires_at, Some(1_700_003_600));
///
/// // Identities for AWS get ES256 (AWS STS does not accept EdDSA).
/// use workload_identity::Algorithm;
/// keyring.rotate_alg(Algorithm::Es256, 1_700_000_000)?;
/// let issuer = Issuer::new(keyring).algorithm_for_audience("sts.amazonaws.com", Algorithm::Es256);
/// req.identity.audience = vec!["sts.amazonaws.com".into()];
/// let aws = issuer.issue(&req, 1_700_000_000)?;
/// assert!(aws.token.starts_with("eyJhbGciOiJFUzI1NiI")); // {"alg":"ES256"
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Issuer {
    keyring: Keyring,
    issuer: Option<String>,
    algorithm: Algorithm,
    rules: Vec<AlgorithmRule>,
    trust_domain: Option<String>,
    max_wit_ttl: std::time::Duration,
    spiffe: Option<SpiffeProfile>,
    extra_claims: Option<std::sync::Arc<ExtraClaimsPolicy>>,
}

/// The longest a WIT lives by default (the drafts: hours at most).
pub const DEFAULT_MAX_WIT_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// An override of the default algorithm for some identities.
#[derive(Debug, Clone)]
struct AlgorithmRule {
    identity: Option<String>,
    audience: Option<String>,
    algorithm: Algorithm,
}

impl AlgorithmRule {
    /// 2 for a rule naming both the identity and an audience, 1 for the
    /// identity alone, 0 for an audience alone; `None` if it does not match.
    fn specificity(&self, req: &IssueRequest) -> Option<u8> {
        let name_ok = self
            .identity
            .as_deref()
            .is_none_or(|n| n == req.identity.name);
        let aud_ok = self
            .audience
            .as_deref()
            .is_none_or(|a| req.identity.audience.iter().any(|x| x == a));
        let rank = match (self.identity.is_some(), self.audience.is_some()) {
            (true, true) => 2,
            (true, false) => 1,
            _ => 0,
        };
        (name_ok && aud_ok).then_some(rank)
    }
}

impl Issuer {
    /// An issuer over `keyring` (shared: rotations are seen at once), signing
    /// with EdDSA unless told otherwise.
    pub fn new(keyring: Keyring) -> Issuer {
        Issuer {
            keyring,
            issuer: None,
            algorithm: Algorithm::EdDsa,
            rules: Vec::new(),
            trust_domain: None,
            max_wit_ttl: DEFAULT_MAX_WIT_TTL,
            spiffe: None,
            extra_claims: None,
        }
    }

    /// Makes every token this issuer signs a SPIFFE SVID: `sub` is the
    /// profile's SPIFFE ID for the request. A bearer token is then a
    /// JWT-SVID, and issuing one is refused unless it has an audience and a
    /// TTL (`aud` and `exp` are required) and its algorithm is ES256 or
    /// RS256 (the JWT-SVID specification allows no EdDSA; set
    /// [`Issuer::algorithm`] or an override). A WIT becomes a WIT-SVID: its
    /// `sub` is the SPIFFE ID instead of a `wimse://` URI, and no
    /// [`Issuer::trust_domain`] is needed. The Nomad claims stay, so
    /// [`Verifier`](crate::Verifier) binds the token to its allocation as
    /// for any other.
    ///
    /// ```
    /// use workload_identity::model::{GoDuration, IssueRequest};
    /// use workload_identity::profile::SpiffeProfile;
    /// use workload_identity::{Algorithm, Issuer, Keyring};
    ///
    /// let keyring = Keyring::new();
    /// keyring.rotate_alg(Algorithm::Es256, 1_700_000_000)?;
    /// let issuer = Issuer::new(keyring)
    ///     .algorithm(Algorithm::Es256)
    ///     .spiffe(SpiffeProfile::new("example.org")?);
    /// let mut req = IssueRequest::default();
    /// req.region = "global".into();
    /// req.allocation.id = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc".into();
    /// req.allocation.namespace = "default".into();
    /// req.allocation.job_id = "web".into();
    /// req.allocation.task_group = "frontend".into();
    /// req.task = "server".into();
    /// req.identity.name = "default".into();
    /// req.identity.audience = vec!["spiffe-validator".into()];
    /// req.identity.ttl = GoDuration::from_secs(300);
    /// let svid = issuer.issue(&req, 1_700_000_000)?;
    /// assert_eq!(svid.claims.subject, "spiffe://example.org/global/default/web/frontend/server/default");
    /// # Ok::<(), workload_identity::Error>(())
    /// ```
    pub fn spiffe(mut self, profile: SpiffeProfile) -> Issuer {
        self.spiffe = Some(profile);
        self
    }

    /// The extra claims tokens carry, per namespace (see
    /// [`ExtraClaimsPolicy`]). Without a policy, a request whose identity
    /// names extra claims is refused.
    pub fn extra_claims(mut self, policy: ExtraClaimsPolicy) -> Issuer {
        self.extra_claims = Some(std::sync::Arc::new(policy));
        self
    }

    /// The `sub` and extra claims signing `req` gives (everything in a token
    /// that depends on the issuer's configuration and the request, but not
    /// on the time or the key), or why `req` cannot be signed.
    pub fn expected_claims(&self, req: &IssueRequest) -> Result<crate::claims::ExpectedClaims> {
        req.validate()?;
        let workload = req.workload()?;
        let extra_claims = self.extra_claims_for(req)?;
        if req.proof_key.is_some() && req.identity.ttl.as_nanos() <= 0 {
            return Err(wit_without_ttl());
        }
        let subject = match (&self.spiffe, &req.proof_key, &self.trust_domain) {
            (Some(p), proof_key, _) => {
                match proof_key {
                    None => self.check_jwt_svid(self.algorithm_of(req), req)?,
                    Some(k) => check_wit_svid(self.algorithm_of(req), k)?,
                }
                p.id_for(req)?
            }
            (None, Some(_), Some(td)) => crate::claims::workload_uri(td, req)?,
            (None, Some(_), None) => return Err(no_trust_domain()),
            (None, None, _) => crate::claims::nomad_subject(req, workload),
        };
        Ok(crate::claims::ExpectedClaims::new(subject, extra_claims))
    }

    fn extra_claims_for(
        &self,
        req: &IssueRequest,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        match &self.extra_claims {
            Some(policy) => policy.claims_for(req),
            None if req.identity.extra_claims.is_empty() => Ok(Default::default()),
            None => Err(Error::invalid(
                "IssueRequest",
                "Identity.ExtraClaims",
                format!(
                    "names {} extra claim(s) ({:?}...), but the issuer has no extra-claims policy (Issuer::extra_claims; wid issue --extra-claims-policy)",
                    req.identity.extra_claims.len(),
                    req.identity
                        .extra_claims
                        .first()
                        .map_or(String::new(), |n| crate::error::truncate_for_message(n)
                            .to_string())
                ),
            )),
        }
    }

    /// The JWT-SVID rules for a bearer token of a SPIFFE issuer.
    fn check_jwt_svid(&self, algorithm: Algorithm, req: &IssueRequest) -> Result<()> {
        if !matches!(algorithm, Algorithm::Es256 | Algorithm::Rs256) {
            return Err(Error::invalid(
                "Issuer",
                "algorithm",
                format!(
                    "is {} for identity {:?}, but a SPIFFE JWT-SVID must be signed with ES256 or RS256 (the JWT-SVID specification allows RS, ES and PS algorithms, not EdDSA): set Issuer::algorithm(Algorithm::Es256), or wid issue --alg ES256",
                    algorithm.name(),
                    crate::error::truncate_for_message(&req.identity.name)
                ),
            ));
        }
        if req.identity.audience.is_empty() {
            return Err(Error::invalid(
                "IssueRequest",
                "Identity.Audience",
                "is empty, but a SPIFFE JWT-SVID must have an audience (aud is required)",
            ));
        }
        if req.identity.ttl.as_nanos() <= 0 {
            return Err(Error::invalid(
                "IssueRequest",
                "Identity.TTL",
                "is 0, but a SPIFFE JWT-SVID must expire (exp is required): give the identity a TTL",
            ));
        }
        Ok(())
    }

    /// The WIMSE trust domain (a DNS-style name such as `nomad.example.com`):
    /// the authority of the `wimse://` workload identifier in every WIT this
    /// issuer signs. Required before a request with a `ProofKey` can be
    /// signed; refused unless it is 1 to 253 lower-case letters, digits, `-`
    /// and `.` without empty labels.
    pub fn trust_domain(mut self, trust_domain: &str) -> Result<Issuer> {
        if let Some(problem) = crate::pop::trust_domain_problem(trust_domain) {
            return Err(Error::invalid(
                "Issuer",
                "trust_domain",
                format!(
                    "{:?} {problem}",
                    crate::error::truncate_for_message(trust_domain)
                ),
            ));
        }
        self.trust_domain = Some(trust_domain.to_string());
        Ok(self)
    }

    /// The longest a WIT may live (default 1 hour; at least 1 s): a longer
    /// identity TTL is shortened to it.
    pub fn max_wit_ttl(mut self, ttl: std::time::Duration) -> Issuer {
        self.max_wit_ttl = ttl.max(std::time::Duration::from_secs(1));
        self
    }

    /// The algorithm for identities no override names (default EdDSA).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Issuer {
        self.algorithm = algorithm;
        self
    }

    /// Signs identities named `name` (e.g. `vault_default`) with `algorithm`.
    pub fn algorithm_for_identity(mut self, name: &str, algorithm: Algorithm) -> Issuer {
        self.rules.push(AlgorithmRule {
            identity: Some(name.to_string()),
            audience: None,
            algorithm,
        });
        self
    }

    /// Signs identities whose audience includes `audience` (e.g.
    /// `sts.amazonaws.com`) with `algorithm`.
    pub fn algorithm_for_audience(mut self, audience: &str, algorithm: Algorithm) -> Issuer {
        self.rules.push(AlgorithmRule {
            identity: None,
            audience: Some(audience.to_string()),
            algorithm,
        });
        self
    }

    /// Signs identities named `name` whose audience includes `audience` with
    /// `algorithm`.
    pub fn algorithm_for_identity_and_audience(
        mut self,
        name: &str,
        audience: &str,
        algorithm: Algorithm,
    ) -> Issuer {
        self.rules.push(AlgorithmRule {
            identity: Some(name.to_string()),
            audience: Some(audience.to_string()),
            algorithm,
        });
        self
    }

    /// The algorithm `req` is signed with: the most specific matching override
    /// (identity name and audience, then identity name, then audience; among
    /// equals the first added), else the default.
    pub fn algorithm_of(&self, req: &IssueRequest) -> Algorithm {
        let mut best: Option<(u8, Algorithm)> = None;
        for rule in &self.rules {
            if let Some(rank) = rule.specificity(req) {
                if best.is_none_or(|(b, _)| rank > b) {
                    best = Some((rank, rule.algorithm));
                }
            }
        }
        best.map_or(self.algorithm, |(_, alg)| alg)
    }

    /// Sets the `iss` claim (e.g. the OIDC issuer URL, as
    /// [`VerifierBuilder::issuer`](crate::verify::VerifierBuilder::issuer)
    /// requires it). An empty string means no `iss`, as in the C ABI.
    pub fn issuer(mut self, issuer: &str) -> Issuer {
        self.issuer = (!issuer.is_empty()).then(|| issuer.to_string());
        self
    }

    /// The keyring this issuer signs with.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Signs the identity `req` asks for, at `now` (Unix seconds), with the
    /// algorithm [`Issuer::algorithm_of`] picks. An invalid request is
    /// `InvalidArgument` naming every bad field; no active key of that
    /// algorithm is `NoActiveKey`. Also `InvalidArgument`: a `now` that is
    /// plainly milliseconds or nanoseconds (past the year 5138), an
    /// allocation whose `ClientStatus` is terminal (`complete`, `failed`,
    /// `lost`: a stopped workload gets no new identity; the issuer reads only
    /// the request, so whether the allocation still runs is the verifier's
    /// allocation store's to say), and a TTL past the keyring policy's
    /// `LongestTTL`.
    pub fn issue(&self, req: &IssueRequest, now: i64) -> Result<SignedIdentity> {
        self.issue_with(self.algorithm_of(req), req, now)
    }

    /// [`Issuer::issue`] at the system clock's time (beside
    /// [`Verifier::verify_now`](crate::Verifier::verify_now)).
    pub fn issue_now(&self, req: &IssueRequest) -> Result<SignedIdentity> {
        self.issue(req, crate::clock::unix_now())
    }

    /// [`Issuer::issue`] with `algorithm`, whatever the overrides say.
    pub fn issue_with(
        &self,
        algorithm: Algorithm,
        req: &IssueRequest,
        now: i64,
    ) -> Result<SignedIdentity> {
        check_now_is_seconds(now)?;
        req.validate()?;
        refuse_terminal(req)?;
        let workload = req.workload()?;
        let extra_claims = self.extra_claims_for(req)?;
        let spiffe_id = match &self.spiffe {
            Some(p) => {
                match &req.proof_key {
                    None => self.check_jwt_svid(algorithm, req)?,
                    Some(proof_key) => check_wit_svid(algorithm, proof_key)?,
                }
                Some(p.id_for(req)?)
            }
            None => None,
        };
        // A WIT is signed only by a WIT key, a bearer token only by a bearer
        // key: a WIT is shown to every service its workload calls, so its
        // key must never verify where bearer tokens are accepted.
        // The request's and the issuer's faults are named before a missing
        // key is; checked once, here.
        let wit = match &req.proof_key {
            Some(proof_key) => {
                let td = self.wit_trust_domain(spiffe_id.is_some())?;
                check_wit_request(req, proof_key)?;
                Some((proof_key, td))
            }
            None => None,
        };
        let purpose = match wit {
            Some(_) => KeyPurpose::Wit,
            None => KeyPurpose::Bearer,
        };
        // The keyring policy's longest TTL is a promise every issuer keeps.
        let ttl = req.identity.ttl.as_secs();
        let ttl = match wit {
            Some(_) => Some(ttl.min(i64::try_from(self.max_wit_ttl.as_secs()).unwrap_or(i64::MAX))),
            None => (ttl > 0).then_some(ttl),
        };
        self.keyring
            .check_token_ttl(ttl, "IssueRequest", "Identity.TTL")?;
        // The key is borrowed, not cloned: signers on other threads share it,
        // and a lock or a reference count written on every signature would
        // be a cache line moving between their cores (issue 27).
        self.keyring.with_active(purpose, algorithm, |key| {
            let mut claims =
                Claims::for_request(req, workload, now, self.issuer.as_deref(), extra_claims);
            if let Some(id) = spiffe_id {
                claims.subject = id;
            }
            let typ = match wit {
                None => jwt::TokenType::Jwt,
                Some((proof_key, td)) => {
                    self.make_wit(req, proof_key, td, &mut claims, now)?;
                    jwt::TokenType::Wit
                }
            };
            let token = claims.with_payload(|json| jwt::encode_typed(key, typ, json))?;
            check_size(&token)?;
            Ok(SignedIdentity {
                token,
                claims,
                kid: key.id().clone(),
            })
        })
    }

    /// Signs a client node's own identity (Nomad 1.11's node identity) at
    /// `now`, with the issuer's default algorithm ([`Issuer::algorithm`]):
    /// claims `nomad_node_id`, `nomad_node_pool`, `nomad_node_class` (when
    /// the node has one), `nomad_node_datacenter`, `sub` =
    /// `node:<region>:<node pool>:<node ID>:default`, `aud` (Nomad's
    /// `nomadproject.io` unless the request names others), `iat` = `nbf` =
    /// now, `exp` = now + TTL (24 h unless set: a node identity always
    /// expires), `jti`, and `iss` when configured. No allocation claim, no
    /// profile (SPIFFE, extra claims) applies. A verifier accepts it only
    /// with [`VerifierBuilder::node_tokens`](crate::VerifierBuilder::node_tokens).
    ///
    /// ```
    /// use workload_identity::model::{Node, NodeIdentityRequest};
    /// use workload_identity::{Issuer, Keyring};
    ///
    /// let keyring = Keyring::new();
    /// keyring.rotate(1_700_000_000)?;
    /// let req = NodeIdentityRequest {
    ///     region: "global".into(),
    ///     node: Node {
    ///         id: "da86421c-7de9-85e4-2f50-3b2bf95102c1".into(),
    ///         datacenter: "dc1".into(),
    ///         node_pool: "default".into(),
    ///         ..Node::default()
    ///     },
    ///     ..NodeIdentityRequest::default()
    /// };
    /// let signed = Issuer::new(keyring).issue_node(&req, 1_700_000_000)?;
    /// assert_eq!(signed.claims.subject, "node:global:default:da86421c-7de9-85e4-2f50-3b2bf95102c1:default");
    /// assert_eq!(signed.claims.audience, ["nomadproject.io"]);
    /// assert_eq!(signed.claims.expires_at, Some(1_700_000_000 + 24 * 3600));
    /// # Ok::<(), workload_identity::Error>(())
    /// ```
    pub fn issue_node(
        &self,
        req: &crate::model::NodeIdentityRequest,
        now: i64,
    ) -> Result<SignedIdentity> {
        self.issue_node_with(self.algorithm, req, now)
    }

    /// [`Issuer::issue_node`] with `algorithm`.
    pub fn issue_node_with(
        &self,
        algorithm: Algorithm,
        req: &crate::model::NodeIdentityRequest,
        now: i64,
    ) -> Result<SignedIdentity> {
        check_now_is_seconds(now)?;
        req.validate()?;
        self.keyring
            .check_token_ttl(Some(req.ttl_secs()), "NodeIdentityRequest", "TTL")?;
        let node = &req.node;
        self.keyring
            .with_active(KeyPurpose::Bearer, algorithm, |key| {
                let claims = Claims {
                    node: Some(crate::claims::NodeClaims::of(node)),
                    subject: format!("node:{}:{}:{}:default", req.region, node.node_pool, node.id),
                    audience: req.audiences(),
                    issued_at: Some(now),
                    not_before: Some(now),
                    expires_at: Some(now.saturating_add(req.ttl_secs())),
                    jwt_id: crate::claims::fresh_jwt_id(),
                    issuer: self.issuer.clone(),
                    ..Claims::default()
                };
                let token = claims
                    .with_payload(|json| jwt::encode_typed(key, jwt::TokenType::Jwt, json))?;
                check_size(&token)?;
                Ok(SignedIdentity {
                    token,
                    claims,
                    kid: key.id().clone(),
                })
            })
    }

    /// Turns bearer claims into a WIT's: `sub` the workload identifier URI
    /// (kept when it is already a SPIFFE ID), no `aud` (the WPT carries each
    /// request's audience; a WIT is no bearer token for anyone), `exp`
    /// required and at most `max_wit_ttl` away, `cnf.jwk` the workload's
    /// checked public key.
    /// `td` and the request were checked by [`Issuer::wit_trust_domain`] and
    /// [`check_wit_request`].
    fn make_wit(
        &self,
        req: &IssueRequest,
        proof_key: &crate::model::ProofKey,
        td: Option<&String>,
        claims: &mut Claims,
        now: i64,
    ) -> Result<()> {
        let ttl = req.identity.ttl.as_secs();
        let ttl = ttl.min(i64::try_from(self.max_wit_ttl.as_secs()).unwrap_or(i64::MAX));
        if let Some(td) = td {
            claims.subject = crate::claims::workload_uri(td, req)?;
        }
        claims.audience.clear();
        claims.expires_at = Some(now.saturating_add(ttl));
        claims.confirmation = Some(proof_key.clone());
        Ok(())
    }
}

impl Issuer {
    /// The trust domain of a WIT's `wimse://` subject (`None` for a SPIFFE
    /// issuer's WIT-SVID), or why there is none.
    fn wit_trust_domain(&self, spiffe: bool) -> Result<Option<&String>> {
        match (&self.trust_domain, spiffe) {
            (_, true) => Ok(None),
            (Some(td), false) => Ok(Some(td)),
            (None, false) => Err(no_trust_domain()),
        }
    }
}

/// The latest `now` taken as Unix seconds: the year 5138. A larger one is
/// plainly milliseconds (today about 1.8e12) or nanoseconds (1.8e18).
const LATEST_SECONDS: i64 = 100_000_000_000;

/// Refuses a `now` that is plainly Unix milliseconds or nanoseconds: a token
/// signed with it would carry `iat` thousands of years ahead, which relying
/// parties reject (or, with no `exp` check, accept forever).
fn check_now_is_seconds(now: i64) -> Result<()> {
    if now <= LATEST_SECONDS {
        return Ok(());
    }
    let (unit, per_second) = if now > 100_000_000_000_000 {
        ("nanoseconds", 1_000_000_000)
    } else {
        ("milliseconds", 1_000)
    };
    Err(Error::invalid(
        "Issuer",
        "now",
        format!(
            "{now} is Unix {unit}, not seconds (it would be {} in seconds): pass seconds, e.g. workload_identity::unix_now(), or use issue_now()",
            now / per_second
        ),
    ))
}

/// Refuses a request whose allocation has stopped on its client (Nomad's
/// client-terminal statuses `complete`, `failed`, `lost`): a dead workload
/// is never given a new identity, as Nomad's servers refuse to sign one.
fn refuse_terminal(req: &IssueRequest) -> Result<()> {
    let status = req.allocation.client_status.as_str();
    if matches!(status, "complete" | "failed" | "lost") {
        return Err(Error::invalid(
            "IssueRequest",
            "Allocation.ClientStatus",
            format!(
                "is {status:?}: the allocation has stopped on its client, and a stopped workload gets no new identity (statuses complete, failed and lost are refused)"
            ),
        ));
    }
    Ok(())
}

/// What a request for a WIT must carry: a usable workload key and a TTL.
fn check_wit_request(req: &IssueRequest, proof_key: &crate::model::ProofKey) -> Result<()> {
    crate::keyring::proof_key_checker(proof_key, "ProofKey")
        .map_err(|why| Error::invalid("IssueRequest", "ProofKey", why))?;
    if req.identity.ttl.as_secs() <= 0 {
        return Err(wit_without_ttl());
    }
    Ok(())
}

/// The WIT-SVID rules: the token's `alg` and the workload key's
/// `cnf.jwk.alg` from the RS, ES and PS families only (the SPIFFE WIT-SVID
/// draft, as JWT-SVIDs: no EdDSA).
fn check_wit_svid(algorithm: Algorithm, proof_key: &crate::model::ProofKey) -> Result<()> {
    if algorithm == Algorithm::EdDsa {
        return Err(Error::invalid(
            "Issuer",
            "algorithm",
            "is EdDSA, but a SPIFFE WIT-SVID must be signed with an RS, ES or PS algorithm (the WIT-SVID draft allows no EdDSA): sign it with ES256 or RS256 (Issuer::algorithm, wid issue --alg ES256) and a WIT key of that algorithm",
        ));
    }
    // Workload keys are EdDSA or ES256 (anything else is refused as an
    // unusable ProofKey): EdDSA is the one a WIT-SVID cannot bind.
    if proof_key.alg == Algorithm::EdDsa.name() {
        return Err(Error::invalid(
            "IssueRequest",
            "ProofKey.Alg",
            format!(
                "is {:?}, but a SPIFFE WIT-SVID's cnf.jwk.alg must be an RS, ES or PS algorithm (the WIT-SVID draft allows no EdDSA): give the workload an ES256 (P-256) proof key",
                crate::error::truncate_for_message(&proof_key.alg)
            ),
        ));
    }
    Ok(())
}

fn wit_without_ttl() -> Error {
    Error::invalid(
        "IssueRequest",
        "Identity.TTL",
        "is 0, but a workload identity token must expire: give the identity a TTL",
    )
}

fn no_trust_domain() -> Error {
    Error::invalid(
        "Issuer",
        "trust_domain",
        "the request carries a ProofKey (it asks for a workload identity token) but the issuer has no trust domain; call Issuer::trust_domain (or Issuer::spiffe for a WIT-SVID)",
    )
}

/// Refuses a token verifiers would refuse for its size.
fn check_size(token: &str) -> Result<()> {
    if token.len() > jwt::DEFAULT_MAX_TOKEN_BYTES {
        return Err(Error::invalid(
            "IssueRequest",
            "Identity",
            format!(
                "would make a token of {} bytes, over the {} that verifiers (ours included) accept by default: shorten its audiences, names or extra claims",
                token.len(),
                jwt::DEFAULT_MAX_TOKEN_BYTES
            ),
        ));
    }
    Ok(())
}
