//! A verifier for several issuers: a [`TrustSet`].
//!
//! Each trusted issuer ([`TrustedIssuer`]) is an `iss` or a SPIFFE trust
//! domain ([`IssuerId`]) with its own keys (a [`KeySource`]) and its own
//! rules, and gets a [`Verifier`] of its own. A token is **routed before any
//! key is looked up**: the trust set parses it (the verifier's parser and
//! limits), reads its `iss` and the trust domain of its `sub` from the
//! claims (strictly decoded, once: the chosen verifier reuses them), picks
//! exactly one issuer, and verifies with that issuer's keys and rules only.
//! So a key of issuer A never verifies a token that claims issuer B, even
//! under the same `kid` or with the same key material.
//!
//! Routing: a token whose `iss` names a trusted issuer goes to it; one whose
//! `sub` is a SPIFFE ID of a trusted trust domain goes to that issuer; when
//! both name trusted issuers they must be the same one. Anything else is
//! refused as `UntrustedIssuer` (result code `IssuerMismatch`), naming what
//! the token claims and what is trusted.

mod explain;
mod issuer;
mod route;
mod source;

pub use issuer::{IssuerId, TrustedIssuer};
pub use source::{KeySource, OwnedKeyring};

use std::sync::Arc;
use std::time::Duration;

use route::{RoutedBy, Routes};

use crate::counter::Counter;
use crate::error::{Error, Result};
use crate::jwt;
use crate::verify::{
    AlgSet, KeyWait, Staged, TokenCache, VerifiedIdentity, Verifier, VerifierStats,
    bad_signature_of, decode_claims, settle_signatures,
};

/// A token a [`TrustSet`] accepted, and the issuer that vouched for it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustedIdentity {
    /// The trusted issuer that verified the token (its [`IssuerId`] as
    /// text: the `iss`, or `spiffe://<trust domain>`).
    pub issuer: String,
    /// The verified token.
    pub identity: VerifiedIdentity,
}

/// What one trusted issuer's verifier decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IssuerStats {
    /// The issuer.
    pub issuer: IssuerId,
    /// Its verifier's counters: tokens routed to it and accepted or
    /// rejected, cache hits, key waits, store fallbacks.
    pub stats: VerifierStats,
}

/// Counters of what a trust set did (a cheap snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustSetStats {
    /// Per trusted issuer, in the order they were added.
    pub issuers: Vec<IssuerStats>,
    /// Tokens refused before any issuer was chosen: too long, malformed, or
    /// naming no trusted issuer (or two).
    pub unrouted: u64,
}

struct Trusted {
    id: IssuerId,
    name: String,
    verifier: Verifier,
    /// Kept alive: it keeps the verifier's keyring up to date.
    _source: Arc<dyn KeySource>,
}

struct Inner {
    issuers: Vec<Trusted>,
    routes: Routes,
    max_token_bytes: usize,
    key_wait: Duration,
    /// The one verified-token cache of all the issuers: each entry is filed
    /// under its issuer's index, so a hit costs one look-up whatever the
    /// number of issuers.
    cache: Option<TokenCache>,
    unrouted: Counter,
}

/// Verifies tokens of several issuers, each with its own keys and rules.
/// Cheap to clone; safe to share across threads.
///
/// Each trusted issuer ([`TrustedIssuer`]) is an `iss` or a SPIFFE trust
/// domain ([`IssuerId`]) with its own keys (a [`KeySource`]) and rules, and
/// gets a [`Verifier`] of its own. A token is **routed before any key is
/// looked up**: the trust set parses it (the verifier's parser and limits),
/// decodes its claims strictly (once: the chosen verifier reuses them), and
/// picks exactly one issuer: the one its `iss` names, or the one whose trust
/// domain its SPIFFE `sub` is in, or, when both name trusted issuers, the
/// one they both name. Anything else (no trusted issuer named, or two) is
/// refused as `UntrustedIssuer` (result code `IssuerMismatch`), naming what
/// the token claims and what is trusted. The chosen issuer's keys alone then
/// verify it, so a key of issuer A never verifies a token that claims issuer
/// B, even under the same `kid` or with the same key material.
///
/// ```
/// use std::sync::Arc;
/// use workload_identity::model::{Allocation, IssueRequest, WorkloadIdentity};
/// use workload_identity::{
///     Audience, IssuerId, Issuer, Keyring, MemoryStore, ResultCode, TrustSet, TrustedIssuer,
/// };
///
/// let now = 1_700_000_000;
/// let (east, west) = (Keyring::new(), Keyring::new());
/// east.rotate(now)?;
/// west.rotate(now)?;
/// let store = Arc::new(MemoryStore::new());
/// let aud = Audience::new("vault.io")?;
/// let trust = TrustSet::builder()
///     .issuer(TrustedIssuer::nomad(IssuerId::iss("https://east")?, east.clone(), store.clone(), aud.clone()))
///     .issuer(TrustedIssuer::nomad(IssuerId::iss("https://west")?, west.clone(), store.clone(), aud))
///     .build()?;
///
/// let mut req = IssueRequest::default();
/// req.region = "global".into();
/// req.allocation = Allocation {
///     id: "alloc-1".into(),
///     namespace: "default".into(),
///     job_id: "web".into(),
///     task_group: "g".into(),
///     client_status: "running".into(),
///     ..Allocation::default()
/// };
/// req.task = "server".into();
/// req.identity = WorkloadIdentity {
///     name: "default".into(),
///     audience: vec!["vault.io".into()],
///     ..WorkloadIdentity::default()
/// };
/// store.upsert(&req.allocation);
/// let token = Issuer::new(west.clone()).issuer("https://west").issue(&req, now)?.token;
/// assert_eq!(trust.verify(&token, now)?.issuer, "https://west");
///
/// // West's key claiming to be east: routed to east, whose keys do not verify it.
/// let forged = Issuer::new(west).issuer("https://east").issue(&req, now)?.token;
/// assert_eq!(trust.verify(&forged, now).unwrap_err().code(), ResultCode::UnknownKey);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct TrustSet {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TrustSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustSet")
            .field("issuers", &self.issuers())
            .finish()
    }
}

/// Builds a [`TrustSet`] from its issuers.
#[derive(Debug)]
pub struct TrustSetBuilder {
    issuers: Vec<TrustedIssuer>,
    max_token_bytes: usize,
    key_wait: Duration,
    cache: Option<usize>,
}

impl TrustSetBuilder {
    /// Trusts `issuer` too.
    pub fn issuer(mut self, issuer: TrustedIssuer) -> TrustSetBuilder {
        self.issuers.push(issuer);
        self
    }

    /// Longest token accepted, in bytes, for every issuer (default 8 KiB;
    /// clamped to [`MAX_TOKEN_BYTES_LIMIT`](crate::MAX_TOKEN_BYTES_LIMIT)).
    pub fn max_token_bytes(mut self, max: usize) -> TrustSetBuilder {
        self.max_token_bytes = max.min(jwt::MAX_TOKEN_BYTES_LIMIT);
        self
    }

    /// How long to wait for an unknown `kid` to reach the chosen issuer's
    /// keyring (default 1 s; a batch shares one wait across all issuers).
    pub fn key_wait(mut self, wait: Duration) -> TrustSetBuilder {
        self.key_wait = wait;
        self
    }

    /// Caches verified tokens, `entries` per issuer (see
    /// [`VerifierBuilder::cache`](crate::VerifierBuilder::cache)). The
    /// issuers share one cache of `entries` times their number (clamped to
    /// [`MAX_CACHE_ENTRIES`](crate::MAX_CACHE_ENTRIES)), looked up once per
    /// token whatever the number of issuers. Each issuer keeps at most
    /// `entries` of them, evicted first in, first out among its own, so one
    /// issuer's traffic never evicts another's entries. Each entry is honoured only by
    /// the issuer whose verifier verified it, under that verifier's rules
    /// (time claims, the key still verifying under its kid, the allocation).
    pub fn cache(mut self, entries: usize) -> TrustSetBuilder {
        self.cache = Some(entries);
        self
    }

    /// The trust set. Refused: no issuer, two issuers under one `iss` or
    /// trust domain, or an issuer whose algorithms leave none to accept.
    pub fn build(self) -> Result<TrustSet> {
        if self.issuers.is_empty() {
            return Err(Error::invalid(
                "TrustSet",
                "issuers",
                "must name at least one trusted issuer",
            ));
        }
        let mut routes = Routes::default();
        let mut issuers = Vec::with_capacity(self.issuers.len());
        for (index, t) in self.issuers.into_iter().enumerate() {
            routes.add(index, &t.id, t.require_iss.as_deref())?;
            let mut b = t
                .builder
                .max_token_bytes(self.max_token_bytes)
                .key_wait(self.key_wait);
            let mut allowed = t.algorithms.as_deref().map_or(AlgSet::ALL, AlgSet::of);
            match &t.id {
                IssuerId::Iss(iss) => {
                    // Made directly (not by IssuerId::iss), an empty iss
                    // would mean "no iss required".
                    IssuerId::iss(iss)?;
                    b = b.issuer(iss);
                }
                IssuerId::TrustDomain(td) => {
                    b = b.spiffe_trust_domain(td)?;
                    if let Some(iss) = &t.require_iss {
                        b = b.issuer(iss);
                    }
                    allowed = allowed.and(AlgSet::SPIFFE);
                }
            }
            if allowed.is_empty() {
                return Err(Error::invalid(
                    "TrustedIssuer",
                    "algorithms",
                    format!(
                        "issuer {} would accept no algorithm at all (a trust domain's JWT-SVIDs are RS, ES or PS only)",
                        t.id
                    ),
                ));
            }
            if let Some(algs) = &t.algorithms {
                b = b.allowed_algorithms(algs);
            }
            issuers.push(Trusted {
                name: t.id.to_string(),
                id: t.id,
                verifier: b.build(),
                _source: t.source,
            });
        }
        let cache = self
            .cache
            .map(|entries| TokenCache::shared(entries, issuers.len()));
        Ok(TrustSet {
            inner: Arc::new(Inner {
                issuers,
                routes,
                max_token_bytes: self.max_token_bytes,
                key_wait: self.key_wait,
                cache,
                unrouted: Counter::default(),
            }),
        })
    }
}

impl TrustSet {
    /// Starts an empty trust set.
    pub fn builder() -> TrustSetBuilder {
        TrustSetBuilder {
            issuers: Vec::new(),
            max_token_bytes: jwt::DEFAULT_MAX_TOKEN_BYTES,
            key_wait: Duration::from_secs(1),
            cache: None,
        }
    }

    /// The trusted issuers, in the order they were added.
    pub fn issuers(&self) -> Vec<IssuerId> {
        self.inner.issuers.iter().map(|t| t.id.clone()).collect()
    }

    /// The longest token this trust set accepts, in bytes.
    pub fn max_token_bytes(&self) -> usize {
        self.inner.max_token_bytes
    }

    /// What each issuer's verifier decided, and how many tokens were
    /// refused before any issuer was chosen.
    pub fn stats(&self) -> TrustSetStats {
        TrustSetStats {
            issuers: self
                .inner
                .issuers
                .iter()
                .enumerate()
                .map(|(index, t)| {
                    let mut stats = t.verifier.stats();
                    if let Some(cache) = &self.inner.cache {
                        stats.cache_entries = cache.len_of(index) as u64;
                    }
                    IssuerStats {
                        issuer: t.id.clone(),
                        stats,
                    }
                })
                .collect(),
            unrouted: self.inner.unrouted.get(),
        }
    }

    /// Verifies `token` at `now` (Unix seconds) with the one issuer it
    /// claims.
    pub fn verify(&self, token: &str, now: i64) -> Result<TrustedIdentity> {
        self.verify_bytes(token.as_bytes(), now)
    }

    /// Verifies at the system clock's time.
    pub fn verify_now(&self, token: &str) -> Result<TrustedIdentity> {
        self.verify(token, crate::clock::unix_now())
    }

    /// Verifies a token given as bytes (non-UTF-8 input is malformed).
    pub fn verify_bytes(&self, token: &[u8], now: i64) -> Result<TrustedIdentity> {
        let inner = &*self.inner;
        if let Err(e) = jwt::check_length(token.len(), inner.max_token_bytes) {
            return Err(self.unrouted(e));
        }
        let slot = inner.cache.as_ref().map(|c| c.slot(token));
        if let Some(slot) = slot {
            // A token is cached only under the issuer it routes to (routing
            // is a function of the token's bytes, and only this trust set
            // fills its cache): an entry is its owner's verdict, confirmed
            // by the owner's verifier.
            let hit = slot.cache.with(&slot.probe, |hit| {
                let t = inner.issuers.get(hit.owner)?;
                Some((hit.owner, t.verifier.confirm(hit)))
            });
            if let Some(Some((index, found))) = hit {
                let t = &inner.issuers[index];
                if let Some(result) = t.verifier.settle_hit(slot, found, now) {
                    return self.counted(t, result);
                }
            }
        }
        let (parsed, claims, index, _) = match self.route(token) {
            Ok(routed) => routed,
            Err(e) => return Err(self.unrouted(e)),
        };
        let t = &inner.issuers[index];
        let result =
            t.verifier
                .verify_parsed(&parsed, claims, now, slot.map(|s| s.for_owner(index)));
        self.counted(t, result)
    }

    /// Parses `token` and picks its issuer: the parse and the claims are
    /// the ones the chosen verifier goes on with.
    #[inline]
    fn route<'a>(
        &self,
        token: &'a [u8],
    ) -> Result<(jwt::Parsed<'a>, crate::claims::Claims, usize, RoutedBy)> {
        let parsed = jwt::parse(token, self.inner.max_token_bytes)?;
        let claims = decode_claims(&parsed.payload)?;
        let (index, by) = self.inner.routes.route(&claims)?;
        Ok((parsed, claims, index, by))
    }

    fn unrouted(&self, e: Error) -> Error {
        self.inner.unrouted.bump();
        log::debug!("token refused before any issuer was chosen: {e}");
        e
    }

    fn counted(&self, t: &Trusted, result: Result<VerifiedIdentity>) -> Result<TrustedIdentity> {
        t.verifier.count(&result);
        result.map(|identity| TrustedIdentity {
            issuer: t.name.clone(),
            identity,
        })
    }

    /// Verifies many tokens, of any mix of issuers, with a result per token
    /// in the same order; accepts exactly what [`TrustSet::verify`] accepts.
    /// Unknown kids share one wait for the whole call, and every EdDSA
    /// signature of the batch, whatever its issuer, shares one field
    /// inversion (as [`Verifier::verify_batch`]).
    pub fn verify_batch(&self, tokens: &[&str], now: i64) -> Vec<Result<TrustedIdentity>> {
        let inner = &*self.inner;
        if inner.cache.is_some() {
            // Cache hits take the single path; keep one code path for them.
            return tokens.iter().map(|t| self.verify(t, now)).collect();
        }
        let mut waits = KeyWait::new(inner.key_wait);
        // Stage 1: route each token, then stage its key and signature on
        // its issuer's verifier.
        type Routed = Option<(usize, crate::claims::Claims)>;
        let staged: Vec<(Routed, Result<Staged<'_>>)> = tokens
            .iter()
            .map(|token| match self.route(token.as_bytes()) {
                Ok((parsed, claims, index, _)) => {
                    let st = inner.issuers[index].verifier.stage(parsed, &mut waits);
                    (Some((index, claims)), st)
                }
                Err(e) => (None, Err(self.unrouted(e))),
            })
            .collect();
        // Stage 2: every EdDSA signature, whatever its issuer, with one
        // shared inversion.
        let standing = settle_signatures(&staged);
        // Stage 3: each token's claims and binding on its issuer's verifier.
        staged
            .into_iter()
            .zip(standing)
            .map(|((routed, s), standing)| {
                let Some((index, claims)) = routed else {
                    // Refused when routing (counted as unrouted).
                    return s.and_then(|_| {
                        Err(Error::Panic {
                            message: "an unrouted batch token passed".into(),
                        })
                    });
                };
                let t = &inner.issuers[index];
                let result = match s {
                    Ok(st) if !standing => Err(bad_signature_of(&st)),
                    Ok(st) => t.verifier.finish(claims, st.key, now, None),
                    Err(e) => Err(e),
                };
                self.counted(t, result)
            })
            .collect()
    }
}
