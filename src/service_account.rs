//! Kubernetes service-account tokens signed from the keyring: the part of
//! kube-apiserver's external signer (KEP-740, `v1.ExternalJWTSigner`) that
//! is no transport. `wid k8s-signer` serves it over gRPC on a Unix socket.
//!
//! The apiserver builds the claims and sends them base64url-encoded; we
//! check them, choose the active key of the `kubernetes` purpose and return
//! the header and the signature, never a whole token. Keys of that purpose
//! sign nothing else, and no other key signs for the cluster: a
//! service-account token never verifies as a workload identity (`verify`
//! refuses its `kid`), and a workload identity never verifies at the cluster.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::algorithm::Algorithm;
use crate::error::{Error, Result};
use crate::key_id::KeyId;
use crate::keyring::{Jwks, Keyring, OidcDiscovery};
use crate::purpose::KeyPurpose;

/// The shortest `max_token_expiration_seconds` kube-apiserver accepts.
pub const MIN_MAX_TOKEN_EXPIRATION: Duration = Duration::from_secs(600);

/// The longest `claims` segment taken (base64url characters): an
/// apiserver's claims are a few hundred bytes.
pub const MAX_CLAIMS_CHARS: usize = 64 * 1024;

/// Signs a cluster's service-account tokens with the keyring's active
/// `kubernetes` key of one algorithm (ES256 or RS256).
#[derive(Clone)]
pub struct ServiceAccountSigner {
    keyring: Keyring,
    issuer: String,
    algorithm: Algorithm,
}

/// What `Sign` answers: the token's first and last segments, and what the
/// audit line names.
#[derive(Debug, Clone)]
pub struct SignedServiceAccountToken {
    /// base64url (no padding) of `{"alg":…,"kid":…,"typ":"JWT"}`.
    pub header: String,
    /// base64url (no padding) of the signature over `header "." claims`
    /// (ECDSA as raw r‖s).
    pub signature: String,
    /// The key that signed.
    pub kid: KeyId,
    /// The token's `sub`, if it has one.
    pub subject: Option<String>,
    /// The token's `exp` (Unix seconds).
    pub expires_at: i64,
}

/// One key of `FetchKeys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountKey {
    /// The `kid` of its tokens.
    pub key_id: KeyId,
    /// Its public key as DER PKIX SubjectPublicKeyInfo.
    pub spki_der: Vec<u8>,
    /// `true` only for a key this keyring cannot sign with (imported
    /// verify-only: the cluster's previous signer's keys, kept to verify the
    /// tokens it signed): the apiserver verifies with it but leaves it out
    /// of its discovery document, and we never sign with it.
    pub exclude_from_oidc_discovery: bool,
}

impl ServiceAccountSigner {
    /// A signer for the cluster whose `--service-account-issuer` is
    /// `issuer`, signing with the active `kubernetes` key of `algorithm`.
    /// `InvalidArgument` for an empty issuer or an algorithm the purpose
    /// does not allow (EdDSA). Call [`ServiceAccountSigner::check_ready`]
    /// before serving.
    pub fn new(keyring: &Keyring, issuer: &str, algorithm: Algorithm) -> Result<Self> {
        if issuer.trim().is_empty() {
            return Err(Error::invalid(
                "ServiceAccountSigner",
                "issuer",
                "the cluster's issuer is empty: give the apiserver's --service-account-issuer",
            ));
        }
        Error::unless_purpose_allows(KeyPurpose::Kubernetes, algorithm, "the signing key")?;
        Ok(ServiceAccountSigner {
            keyring: keyring.clone(),
            issuer: issuer.to_string(),
            algorithm,
        })
    }

    /// The issuer every token must carry.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The algorithm it signs with.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Whether it can serve: an active `kubernetes` key of its algorithm
    /// (`NoActiveKey`, naming the command that makes one) and a stored
    /// longest TTL of at least 600 s ([`Self::max_token_expiration`]).
    pub fn check_ready(&self) -> Result<()> {
        self.keyring
            .with_active(KeyPurpose::Kubernetes, self.algorithm, |_| Ok(()))?;
        self.max_token_expiration().map(drop)
    }

    /// `max_token_expiration_seconds`: the keyring policy's `LongestTTL`,
    /// the promise every issuer of the keyring keeps. `InvalidArgument` when
    /// no policy is stored, its `LongestTTL` is unknown, or it is under
    /// 600 s (kube-apiserver refuses such a signer).
    pub fn max_token_expiration(&self) -> Result<Duration> {
        let longest = self.keyring.policy().and_then(|p| p.longest_token_ttl);
        match longest {
            Some(d) if d >= MIN_MAX_TOKEN_EXPIRATION => Ok(d),
            Some(d) => Err(Error::invalid(
                "ServiceAccountSigner",
                "LongestTTL",
                format!(
                    "the keyring's stored LongestTTL is {} s, under the 600 s kube-apiserver requires of max_token_expiration_seconds; raise it with `wid keyring policy set --longest-ttl`",
                    d.as_secs()
                ),
            )),
            None => Err(Error::invalid(
                "ServiceAccountSigner",
                "LongestTTL",
                "the keyring stores no LongestTTL, so no longest token lifetime can be promised to kube-apiserver; set one with `wid keyring policy set --longest-ttl` (at least 600 s)",
            )),
        }
    }

    /// Signs the claims kube-apiserver sent (`claims`: the payload segment,
    /// base64url without padding). `InvalidArgument`, naming what is wrong,
    /// for claims that are not base64url JSON objects, whose `iss` is not
    /// the issuer, with no integer `exp`, an `exp` not after `iat` (or now,
    /// without `iat`), or a lifetime beyond the stored `LongestTTL`;
    /// `NoActiveKey` when the keyring has no active `kubernetes` key of the
    /// algorithm.
    pub fn sign(&self, claims: &str, now: i64) -> Result<SignedServiceAccountToken> {
        let checked = self.check_claims(claims, now)?;
        let longest = self.max_token_expiration()?;
        let lifetime = checked.expires_at.saturating_sub(checked.starts_at);
        if u64::try_from(lifetime).map_or(true, |l| l > longest.as_secs()) {
            return Err(bad_claims(format!(
                "the token would live {lifetime} s (exp {} - {} {}), longer than the keyring's LongestTTL of {} s (max_token_expiration_seconds)",
                checked.expires_at,
                checked.start_claim,
                checked.starts_at,
                longest.as_secs()
            )));
        }
        self.keyring
            .with_active(KeyPurpose::Kubernetes, self.algorithm, |key| {
                let header = crate::jwt::header_json(key, crate::jwt::TokenType::Jwt);
                let mut input = String::with_capacity(header.len() * 4 / 3 + claims.len() + 4);
                URL_SAFE_NO_PAD.encode_string(header.as_bytes(), &mut input);
                let header_len = input.len();
                input.push('.');
                input.push_str(claims);
                let signature = key.sign(input.as_bytes())?;
                input.truncate(header_len);
                Ok(SignedServiceAccountToken {
                    header: input,
                    signature: URL_SAFE_NO_PAD.encode(signature),
                    kid: key.id().clone(),
                    subject: checked.subject.clone(),
                    expires_at: checked.expires_at,
                })
            })
    }

    /// `FetchKeys`: every `kubernetes` key that verifies (active,
    /// prepublished, inactive), so a prepublished key is listed from the
    /// moment it is published, before it signs, and a retired one for as
    /// long as its tokens may live. Sorted by key ID.
    pub fn keys(&self) -> Vec<ServiceAccountKey> {
        let mut keys: Vec<ServiceAccountKey> = listed_keys(&self.keyring)
            .map(|k| ServiceAccountKey {
                spki_der: k.public_key.to_spki_der(),
                exclude_from_oidc_discovery: !k.can_sign(),
                key_id: k.kid,
            })
            .collect();
        keys.sort_by(|a, b| a.key_id.as_str().cmp(b.key_id.as_str()));
        keys
    }

    /// `data_timestamp` (Unix seconds): the latest moment the `kubernetes`
    /// keys record (a key made, published or retired), which every replica
    /// of one keyring reads from the same records.
    pub fn data_timestamp(&self) -> i64 {
        self.keyring
            .keys()
            .iter()
            .filter(|k| k.purpose == KeyPurpose::Kubernetes)
            .map(|k| k.create_time.max(k.publish_time).max(k.retired_time))
            .max()
            .unwrap_or(0)
    }

    /// `refresh_hint_seconds`: half the stored lead time (how long a new key
    /// is published before it signs), at least 1 s and at most 60 s, so the
    /// apiserver fetches a prepublished key at least once before it signs.
    pub fn refresh_hint(&self) -> Duration {
        let lead = self
            .keyring
            .policy()
            .map_or(Duration::from_secs(30), |p| p.lead_time);
        (lead / 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
    }

    fn check_claims(&self, claims: &str, now: i64) -> Result<CheckedClaims> {
        if claims.len() > MAX_CLAIMS_CHARS {
            return Err(bad_claims(format!(
                "the claims are {} characters, more than the {MAX_CLAIMS_CHARS} taken",
                claims.len()
            )));
        }
        let json = URL_SAFE_NO_PAD.decode(claims).map_err(|e| {
            bad_claims(format!(
                "the claims are not base64url without padding (the JWT's second segment): {e}"
            ))
        })?;
        // serde reads past unasked claims' strings without checking them:
        // no token with bytes that are not UTF-8 is signed.
        if let Err(e) = std::str::from_utf8(&json) {
            return Err(bad_claims(format!(
                "the claims are not UTF-8: byte {} is not part of a UTF-8 character",
                e.valid_up_to()
            )));
        }
        if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            // Checked first: serde would take an array as the fields in order.
            return Err(
                match serde_json::from_slice::<serde::de::IgnoredAny>(&json) {
                    Ok(_) => bad_claims("the claims are JSON but not an object"),
                    Err(e) => bad_claims(format!("the claims are not JSON: {e}")),
                },
            );
        }
        // Only the claims checked are kept; the others are read past (and
        // one named twice is refused, as serde refuses a duplicate field).
        let map: Wanted = serde_json::from_slice(&json)
            .map_err(|e| bad_claims(format!("the claims are not JSON: {e}")))?;
        match &map.iss {
            Some(Value::String(iss)) if *iss == self.issuer => {}
            Some(Value::String(iss)) => {
                return Err(bad_claims(format!(
                    "iss is {:?}, not this signer's issuer {:?}",
                    crate::error::truncate_for_message(iss),
                    self.issuer
                )));
            }
            Some(_) => return Err(bad_claims("iss is not a string")),
            None => {
                return Err(bad_claims(format!(
                    "the claims carry no iss (expected {:?})",
                    self.issuer
                )));
            }
        }
        let expires_at = match &map.exp {
            Some(v) => numeric_date(v, "exp")?,
            None => {
                return Err(bad_claims(
                    "the claims carry no exp: a service-account token without an expiry is never signed",
                ));
            }
        };
        let (starts_at, start_claim) = match &map.iat {
            Some(v) => (numeric_date(v, "iat")?, "iat"),
            None => (now, "now"),
        };
        if expires_at <= starts_at {
            return Err(bad_claims(format!(
                "exp {expires_at} is not after {start_claim} {starts_at}"
            )));
        }
        let subject = match map.sub {
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(bad_claims("sub is not a string")),
            None => None,
        };
        Ok(CheckedClaims {
            expires_at,
            starts_at,
            start_claim,
            subject,
        })
    }
}

/// The `kubernetes` keys that verify: what `FetchKeys` lists.
fn listed_keys(keyring: &Keyring) -> impl Iterator<Item = crate::keyring::KeyInfo> {
    keyring
        .keys()
        .into_iter()
        .filter(|k| k.purpose == KeyPurpose::Kubernetes && k.state.verifies())
}

/// Of [`listed_keys`], those not excluded from discovery: the keys this
/// keyring signs with.
fn discovery_keys(keyring: &Keyring) -> impl Iterator<Item = crate::keyring::KeyInfo> {
    listed_keys(keyring).filter(|k| k.can_sign())
}

/// The cluster issuer's key set, what kube-apiserver publishes at
/// `/openid/v1/jwks` and `wid serve` at `/kubernetes/jwks.json`: the
/// `kubernetes` keys [`ServiceAccountSigner::keys`] lists for discovery
/// (those that verify and that this keyring signs with; imported
/// verify-only keys are left out, as the apiserver leaves them).
pub fn service_account_jwks(keyring: &Keyring) -> Jwks {
    let listed: std::collections::HashSet<KeyId> = discovery_keys(keyring).map(|k| k.kid).collect();
    let mut jwks = keyring.jwks_for(KeyPurpose::Kubernetes);
    jwks.keys
        .retain(|k| listed.iter().any(|kid| kid.as_str() == k.kid));
    jwks
}

/// The cluster issuer's discovery document, in kube-apiserver's shape:
/// `jwks_uri` `<issuer>/openid/v1/jwks`, `response_types_supported`
/// `["id_token"]`, the algorithms of [`service_account_jwks`]'s keys (RS256,
/// the apiserver's default, while it holds none). `InvalidArgument` for an
/// issuer that is not https (http only to a loopback host).
pub fn service_account_discovery(keyring: &Keyring, issuer: &str) -> Result<OidcDiscovery> {
    let mut algorithms: Vec<Algorithm> = discovery_keys(keyring)
        .filter_map(|k| k.algorithm.signing())
        .collect();
    algorithms.sort();
    algorithms.dedup();
    if algorithms.is_empty() {
        algorithms.push(Algorithm::Rs256);
    }
    let mut doc = OidcDiscovery::with_algorithms(issuer, &algorithms)?;
    doc.jwks_uri = format!("{}/openid/v1/jwks", issuer.trim_end_matches('/'));
    doc.response_types_supported = vec!["id_token"];
    doc.claims_supported = vec![
        "aud",
        "exp",
        "iat",
        "iss",
        "jti",
        "kubernetes.io",
        "nbf",
        "sub",
    ];
    Ok(doc)
}

/// The claims `Sign` checks, as the JSON has them.
#[derive(serde::Deserialize)]
struct Wanted {
    #[serde(default)]
    iss: Option<Value>,
    #[serde(default)]
    exp: Option<Value>,
    #[serde(default)]
    iat: Option<Value>,
    #[serde(default)]
    sub: Option<Value>,
}

struct CheckedClaims {
    expires_at: i64,
    starts_at: i64,
    start_claim: &'static str,
    subject: Option<String>,
}

/// A JWT NumericDate the apiserver writes: an integer number of seconds.
fn numeric_date(v: &Value, name: &str) -> Result<i64> {
    v.as_i64()
        .ok_or_else(|| bad_claims(format!("{name} is not an integer number of seconds: {v}")))
}

fn bad_claims(problem: impl Into<String>) -> Error {
    Error::invalid("SignJWTRequest", "claims", problem)
}

impl std::fmt::Debug for ServiceAccountSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountSigner")
            .field("issuer", &self.issuer)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
