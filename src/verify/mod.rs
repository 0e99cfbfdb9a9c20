//! The verification pipeline.
//!
//! A [`Verifier`] cannot exist without an audience: [`Audience`] is a required
//! constructor argument and cannot be empty. For each token, in order (cheapest
//! first, and nothing later runs once something fails):
//!
//! 1. the structural checks of [`crate::jwt`] (length cap, segments, canonical
//!    base64url, header), and a header `alg` among
//!    [`VerifierBuilder::allowed_algorithms`] (default: all);
//! 2. the key: a `kid` this keyring verifies with (active, prepublished or
//!    inactive). A `kid` the keyring has never seen is waited for, up to
//!    [`VerifierBuilder::key_wait`] (default 1 s, as Nomad), because a replica may
//!    receive a new key after a token signed with it; a deprecated key is
//!    rejected at once;
//! 3. the algorithm and the signature: the header's `alg` must be the key's
//!    algorithm (`UnsupportedAlgorithm` otherwise, before any signature check);
//!    EdDSA with exactly ed25519-dalek's `verify_strict` acceptance, computed
//!    with the key's precomputed tables; ES256 with `r`, `s` in `[1, n-1]`;
//!    RS256 with a signature exactly as long as the key's modulus;
//! 4. the claims: strict JSON, integer dates, `exp` (if present, or required),
//!    `nbf` and `iat` against `now` with the leeway (default 60 s), the audience,
//!    the issuer when one is configured, a SPIFFE ID in the trust domain when
//!    one is configured ([`VerifierBuilder::spiffe_trust_domain`]);
//! 5. the allocation: a `Stale` read of the state store; only when it says
//!    *missing*, a `Consistent` read (the replica may lag, seed 000). A store error
//!    fails closed (`StoreUnavailable`). A stale *live* answer is trusted, as the
//!    contract says; a stale *terminal* answer is final (allocations never come
//!    back from terminal). A verifier of foreign tokens
//!    ([`Verifier::foreign_builder`]) has no store and skips this step.
//!
//! A [`TrustSet`](crate::TrustSet) routes each token to one such verifier per
//! trusted issuer.
//!
//! # Batch verification
//!
//! [`Verifier::verify_batch`] checks many tokens in one call and accepts exactly
//! the tokens single verification accepts, naming each failure. For EdDSA
//! tokens it computes each expected `R` with the key's tables and encodes them
//! all with one shared field inversion; ES256 and RS256 tokens are checked one
//! by one, exactly as by [`Verifier::verify`]. It does not use a random-linear-combination batch
//! equation: such an equation (ed25519-dalek's `verify_batch` included) cannot
//! agree with `verify_strict`'s cofactorless equation for a signature whose `R`
//! carries a small-order component unless every `R` also gets a subgroup check,
//! and that check costs more than the batch equation saves (measured in
//! BENCHMARKS.md). Exact acceptance was chosen over speed.

mod batch;
mod cache;
mod explain;
mod explain_json;
mod foreign;
mod proof;
mod rules;

pub(crate) use batch::{Staged, bad_signature_of, settle_signatures};
pub(crate) use explain::Steps;
pub(crate) use foreign::{AlgSet, spiffe_trust_domain_of};
pub(crate) use rules::{KeyWait, check_signature, decode_claims, decode_unverified};
use rules::{bad_signature, check_alg, check_bearer, check_bearer_key, check_sig, check_wit_key};

pub use explain::{Explanation, VerificationStep};
pub use proof::{ProofRequest, VerifiedProof};

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::claims::Claims;
use crate::counter::Counter;
use crate::error::{Error, Result, truncate_for_message};
use crate::jwt;
use crate::keyring::{
    JwsAlgorithm, KeyId, KeyPurpose, KeyState, Keyring, PublicKey, VerifyingHandle,
};

use crate::state::{AllocState, Consistency, NodeState, StateStore};

pub use cache::MAX_CACHE_ENTRIES;
pub(crate) use cache::{Cached, Slot, TokenCache};

/// The audience a verifier accepts: never empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Audience(String);

impl Audience {
    /// A non-empty audience.
    pub fn new(audience: &str) -> Result<Audience> {
        if audience.is_empty() {
            return Err(Error::invalid(
                "Verifier",
                "audience",
                "must not be empty: a verifier always checks aud",
            ));
        }
        Ok(Audience(audience.to_string()))
    }

    /// The audience string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A verified token: its claims and the key that signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedIdentity {
    /// The claims.
    pub claims: Claims,
    /// The signing key's ID.
    pub kid: KeyId,
}

/// Counters of what a verifier did (a cheap snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct VerifierStats {
    /// Tokens accepted.
    pub accepted: u64,
    /// Tokens rejected, for any reason.
    pub rejected: u64,
    /// Stale reads that said missing and were retried consistently.
    pub consistent_fallbacks: u64,
    /// Tokens whose key was unknown and waited for.
    pub key_waits: u64,
    /// Cache hits (parsing and signature skipped).
    pub cache_hits: u64,
    /// Entries in the cache now.
    pub cache_entries: u64,
}

/// Striped, so that threads verifying at once do not share a cache line.
#[derive(Default)]
struct Counters {
    accepted: Counter,
    rejected: Counter,
    consistent_fallbacks: Counter,
    key_waits: Counter,
    cache_hits: Counter,
}

/// A time in 128 bits, where sums of two `i64`s are exact.
fn wide(t: i64) -> i128 {
    i128::from(t)
}

fn bump(c: &Counter) {
    c.bump();
}

struct Options {
    issuer: Option<String>,
    leeway_secs: i64,
    max_token_bytes: usize,
    require_exp: bool,
    key_wait: Duration,
    require_proof: bool,
    max_proof_lifetime_secs: i64,
    node_tokens: NodeTokens,
    /// The header algorithms accepted (before any key is looked up).
    allowed_algs: AlgSet,
    /// Foreign tokens: no Nomad claims, no store (see [`Verifier::foreign_builder`]).
    foreign: bool,
    /// Tokens must be JWT-SVIDs of this SPIFFE trust domain.
    spiffe_trust_domain: Option<String>,
}

/// Which kinds of identity token a verifier accepts: allocation (workload)
/// tokens, client node tokens, or both. The claims decide a token's kind: a
/// node token carries `nomad_node_id` and none of the allocation claims; a
/// token with both kinds of claims is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NodeTokens {
    /// Allocation tokens only (the default): a node token is refused
    /// (`TokenKindRefused`).
    #[default]
    Refuse,
    /// Both: allocation tokens bound to their allocation, node tokens to
    /// their node ([`StateStore::node_state`](crate::StateStore::node_state)).
    Accept,
    /// Node tokens only: an allocation token is refused (`TokenKindRefused`).
    Only,
}

/// Builds a [`Verifier`]; the keyring, store and audience are required.
pub struct VerifierBuilder {
    keyring: Keyring,
    store: Arc<dyn StateStore>,
    audience: Audience,
    options: Options,
    cache_capacity: Option<usize>,
    proof_replay_capacity: usize,
}

impl VerifierBuilder {
    /// Requires proof of possession: [`Verifier::verify`] then refuses every
    /// token (`PROOF_REQUIRED`), and only a WIT with a valid WPT passes
    /// ([`Verifier::verify_proof`]). A WIT is refused as a bearer token
    /// whether or not this is set.
    pub fn require_proof(mut self, require: bool) -> VerifierBuilder {
        self.options.require_proof = require;
        self
    }

    /// Room in the proof replay cache: the most proofs (by `jti`) remembered
    /// at once until they expire (default 100,000; at least 16). When it is
    /// full of unexpired proofs, new proofs are refused (`PROOF_REPLAYED`),
    /// never an old one forgotten. One workload key (a WIT's `cnf.jwk`) may
    /// hold at most 1/64 of it (1,562 proofs by default), so a workload that
    /// floods proofs has its own refused and cannot shut others out.
    pub fn proof_replay_capacity(mut self, entries: usize) -> VerifierBuilder {
        self.proof_replay_capacity = entries.max(16);
        self
    }

    /// The longest a proof (WPT) may be valid for, counted from now: one
    /// whose `exp` is further ahead (beyond the leeway) is refused (default
    /// 5 minutes; at least 1 s).
    pub fn max_proof_lifetime(mut self, lifetime: Duration) -> VerifierBuilder {
        self.options.max_proof_lifetime_secs =
            i64::try_from(lifetime.as_secs().max(1)).unwrap_or(i64::MAX);
        self
    }

    /// Requires tokens to carry exactly this `iss` (mismatch:
    /// `IssuerMismatch`). An empty string means no requirement, as in the C ABI.
    pub fn issuer(mut self, issuer: &str) -> VerifierBuilder {
        self.options.issuer = (!issuer.is_empty()).then(|| issuer.to_string());
        self
    }

    /// Clock skew allowed on `exp`, `nbf` and `iat` (default 60 s).
    pub fn leeway(mut self, leeway: Duration) -> VerifierBuilder {
        self.options.leeway_secs = i64::try_from(leeway.as_secs()).unwrap_or(i64::MAX);
        self
    }

    /// Longest token accepted, in bytes (default 8 KiB). Clamped to
    /// [`MAX_TOKEN_BYTES_LIMIT`](crate::MAX_TOKEN_BYTES_LIMIT) (1 MiB): nothing longer is ever read.
    pub fn max_token_bytes(mut self, max: usize) -> VerifierBuilder {
        self.options.max_token_bytes = max.min(jwt::MAX_TOKEN_BYTES_LIMIT);
        self
    }

    /// Whether tokens must carry `exp` (default no, like Nomad's default identity).
    pub fn require_exp(mut self, require: bool) -> VerifierBuilder {
        self.options.require_exp = require;
        self
    }

    /// How long to wait for an unknown `kid` to reach the keyring (default 1 s;
    /// zero: no wait). A batch shares one such wait for all its tokens; a `kid`
    /// that can never be a key ID is refused without waiting. Durations too long
    /// for the clock saturate.
    pub fn key_wait(mut self, wait: Duration) -> VerifierBuilder {
        self.options.key_wait = wait;
        self
    }

    /// Enables the verified-token cache with room for `entries` tokens,
    /// clamped to [`MAX_CACHE_ENTRIES`] (2^20). Memory grows with the
    /// entries actually cached, not with `entries`: a large capacity costs
    /// nothing until it is used.
    pub fn cache(mut self, entries: usize) -> VerifierBuilder {
        self.cache_capacity = Some(entries);
        self
    }

    /// Which token kinds to accept (default [`NodeTokens::Refuse`]:
    /// allocation tokens only). A node token passes only when its node is
    /// live in the state store (read `Stale`, then `Consistent` on missing; a
    /// missing node is `NodeNotFound`, a down one `NodeDown`).
    pub fn node_tokens(mut self, accept: NodeTokens) -> VerifierBuilder {
        self.options.node_tokens = accept;
        self
    }

    /// Accepts only tokens whose header `alg` is one of `algorithms`
    /// (default: every algorithm; a token must still name its key's own).
    /// Any other is refused as `UnsupportedAlgorithm` before any key is
    /// looked up. With [`VerifierBuilder::spiffe_trust_domain`], only the
    /// RS, ES and PS algorithms among them pass.
    pub fn allowed_algorithms(mut self, algorithms: &[JwsAlgorithm]) -> VerifierBuilder {
        self.options.allowed_algs = AlgSet::of(algorithms);
        self
    }

    /// The verifier.
    pub fn build(mut self) -> Verifier {
        if self.options.spiffe_trust_domain.is_some() {
            self.options.allowed_algs = self.options.allowed_algs.and(AlgSet::SPIFFE);
        }
        Verifier {
            inner: Arc::new(Inner {
                keyring: self.keyring,
                store: self.store,
                audience: self.audience,
                options: self.options,
                cache: self.cache_capacity.map(TokenCache::new),
                counters: Counters::default(),
                replay: crate::pop::ReplayCache::new(self.proof_replay_capacity),
                proof_keys: crate::pop::KeyCache::new(crate::pop::PROOF_KEYS),
            }),
        }
    }
}

struct Inner {
    keyring: Keyring,
    store: Arc<dyn StateStore>,
    audience: Audience,
    options: Options,
    cache: Option<TokenCache>,
    counters: Counters,
    replay: crate::pop::ReplayCache,
    proof_keys: crate::pop::KeyCache,
}

/// Verifies workload identity tokens. Cheap to clone; safe to share across
/// threads (the store is called from whichever thread verifies).
///
/// ```
/// use std::sync::Arc;
/// use workload_identity::model::{Allocation, IssueRequest, WorkloadIdentity};
/// use workload_identity::{Audience, Issuer, Keyring, MemoryStore, ResultCode, Verifier};
///
/// let now = 1_700_000_000;
/// let keyring = Keyring::new();
/// keyring.rotate(now)?;
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
/// let token = Issuer::new(keyring.clone()).issue(&req, now)?.token;
///
/// let store = Arc::new(MemoryStore::new());
/// store.upsert(&req.allocation);
/// let verifier = Verifier::builder(keyring, store.clone(), Audience::new("vault.io")?).build();
/// assert_eq!(verifier.verify(&token, now)?.claims.allocation_id, "alloc-1");
///
/// // The workload stops: its token is refused from then on.
/// req.allocation.client_status = "complete".into();
/// store.upsert(&req.allocation);
/// let e = verifier.verify(&token, now).unwrap_err();
/// assert_eq!(e.code(), ResultCode::AllocationTerminal);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct Verifier {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("audience", &self.inner.audience)
            .field("issuer", &self.inner.options.issuer)
            .finish()
    }
}

impl Verifier {
    /// Starts a verifier over `keyring` (shared: later rotations are seen) that
    /// checks allocations in `store` and accepts tokens for `audience`.
    pub fn builder(
        keyring: Keyring,
        store: Arc<dyn StateStore>,
        audience: Audience,
    ) -> VerifierBuilder {
        VerifierBuilder {
            keyring,
            store,
            audience,
            options: Options {
                issuer: None,
                leeway_secs: 60,
                max_token_bytes: jwt::DEFAULT_MAX_TOKEN_BYTES,
                require_exp: false,
                key_wait: Duration::from_secs(1),
                require_proof: false,
                max_proof_lifetime_secs: 300,
                node_tokens: NodeTokens::Refuse,
                allowed_algs: AlgSet::ALL,
                foreign: false,
                spiffe_trust_domain: None,
            },
            cache_capacity: None,
            proof_replay_capacity: 100_000,
        }
    }

    /// Verifies `token` at `now` (Unix seconds).
    pub fn verify(&self, token: &str, now: i64) -> Result<VerifiedIdentity> {
        self.verify_bytes(token.as_bytes(), now)
    }

    /// Verifies a token given as bytes (non-UTF-8 input is malformed).
    pub fn verify_bytes(&self, token: &[u8], now: i64) -> Result<VerifiedIdentity> {
        let result = self.run(token, now);
        self.count(&result);
        result
    }

    /// Verifies at the system clock's time.
    pub fn verify_now(&self, token: &str) -> Result<VerifiedIdentity> {
        self.verify(token, crate::clock::unix_now())
    }

    pub(crate) fn count<T>(&self, result: &Result<T>) {
        let c = &self.inner.counters;
        match result {
            Ok(_) => bump(&c.accepted),
            Err(e) => {
                bump(&c.rejected);
                log::debug!("workload identity rejected: {e}");
            }
        }
    }

    /// What this verifier has done so far.
    pub fn stats(&self) -> VerifierStats {
        let c = &self.inner.counters;
        let load = Counter::get;
        VerifierStats {
            accepted: load(&c.accepted),
            rejected: load(&c.rejected),
            consistent_fallbacks: load(&c.consistent_fallbacks),
            key_waits: load(&c.key_waits),
            cache_hits: load(&c.cache_hits),
            cache_entries: self.inner.cache.as_ref().map_or(0, |c| c.len() as u64),
        }
    }

    /// The keyring this verifier uses.
    pub fn keyring(&self) -> &Keyring {
        &self.inner.keyring
    }

    /// The audience this verifier accepts.
    pub fn audience(&self) -> &Audience {
        &self.inner.audience
    }

    /// The longest token this verifier accepts, in bytes.
    pub fn max_token_bytes(&self) -> usize {
        self.inner.options.max_token_bytes
    }

    fn run(&self, token: &[u8], now: i64) -> Result<VerifiedIdentity> {
        let inner = &*self.inner;
        // The length cap comes before anything reads the token, the cache's hash
        // included.
        jwt::check_length(token.len(), inner.options.max_token_bytes)?;
        self.check_bearer_allowed()?;
        let slot = inner.cache.as_ref().map(|c| c.slot(token));
        if let Some(slot) = slot {
            if let Some(result) = self.cached(slot, now) {
                return result;
            }
        }
        let parsed = jwt::parse(token, inner.options.max_token_bytes)?;
        self.check_header(&parsed)?;
        let key = self.key(
            parsed.kid.as_str(),
            &mut KeyWait::new(inner.options.key_wait),
        )?;
        check_bearer_key(&key)?;
        check_alg(&key, &parsed)?;
        check_sig(&key, &parsed)?;
        self.finish(decode_claims(&parsed.payload)?, key, now, slot)
    }

    /// The cached verdict for the token `slot` looks up, when the cache
    /// holds it and its key still verifies: the time claims and what the
    /// token binds to are checked again (an entry that fails them is
    /// forgotten). `None`: verify in full.
    #[inline(always)]
    fn cached(&self, slot: Slot<'_>, now: i64) -> Option<Result<VerifiedIdentity>> {
        let found = slot.cache.with(&slot.probe, |hit| self.confirm(hit))?;
        self.settle_hit(slot, found, now)
    }

    /// A cache entry of this verifier's, read where it lies (without a lock
    /// or a reference count): its identity, copied out, when its key still
    /// verifies under its kid. The key is looked up again only when the
    /// keyring changed since the last confirmation (the generation is loaded
    /// first, so a change during the look-up leaves the entry unconfirmed).
    #[inline(always)]
    pub(crate) fn confirm(&self, hit: &Cached) -> Option<VerifiedIdentity> {
        let keyring = &self.inner.keyring;
        let generation = keyring.generation();
        let same_key = hit.checked_at(generation) || {
            let same = keyring
                .verifying_key(hit.identity.kid.as_str())
                .is_some_and(|k| k.is(&hit.key));
            if same {
                hit.mark_checked(generation);
            }
            same
        };
        same_key.then(|| hit.identity.clone())
    }

    /// What a hit found by [`Verifier::confirm`] comes to: the identity once
    /// its time claims and binding still hold (else the entry is forgotten
    /// and the error returned), or `None` (the key no longer verifies: the
    /// entry is forgotten and the full path gives the reason).
    #[inline(always)]
    pub(crate) fn settle_hit(
        &self,
        slot: Slot<'_>,
        found: Option<VerifiedIdentity>,
        now: i64,
    ) -> Option<Result<VerifiedIdentity>> {
        let Some(identity) = found else {
            slot.cache.remove(&slot.probe);
            return None;
        };
        bump(&self.inner.counters.cache_hits);
        let claims = &identity.claims;
        let checked = self
            .check_claims(claims, now)
            .and_then(|()| self.check_bound(claims));
        if checked.is_err() {
            slot.cache.remove(&slot.probe);
        }
        Some(checked.map(|()| identity))
    }

    /// Verifies a token already parsed (with its claims already decoded, by
    /// a trust set that routed it): the header rules of this verifier, the
    /// key, the algorithm, the signature, then the claims and what the token
    /// binds to; fills `slot`. Not counted in the stats.
    pub(crate) fn verify_parsed(
        &self,
        parsed: &jwt::Parsed<'_>,
        claims: Claims,
        now: i64,
        slot: Option<Slot<'_>>,
    ) -> Result<VerifiedIdentity> {
        self.check_bearer_allowed()?;
        self.check_header(parsed)?;
        let key = self.key(
            parsed.kid.as_str(),
            &mut KeyWait::new(self.inner.options.key_wait),
        )?;
        check_bearer_key(&key)?;
        check_alg(&key, parsed)?;
        check_sig(&key, parsed)?;
        self.finish(claims, key, now, slot)
    }

    /// The header rules of a bearer token that need no key: never a WIT,
    /// and an `alg` this verifier accepts.
    #[inline]
    pub(crate) fn check_header(&self, parsed: &jwt::Parsed<'_>) -> Result<()> {
        check_bearer(parsed)?;
        self.check_allowed(parsed.alg)
    }

    /// The steps after the signature: claims, allocation, then the cache
    /// `slot` names.
    pub(crate) fn finish(
        &self,
        claims: Claims,
        key: VerifyingHandle,
        now: i64,
        slot: Option<Slot<'_>>,
    ) -> Result<VerifiedIdentity> {
        self.check_claims(&claims, now)?;
        self.check_bound(&claims)?;
        let verified = VerifiedIdentity {
            claims,
            kid: key.id().clone(),
        };
        if let Some(slot) = slot {
            slot.cache
                .insert(&slot.probe, slot.owner, verified.clone(), key.key_ref());
        }
        Ok(verified)
    }

    /// A WIT's steps after the signature: its claims (no audience) and the
    /// allocation. Never cached: each presentation comes with a new proof.
    fn finish_wit(
        &self,
        payload: &[u8],
        key: VerifyingHandle,
        now: i64,
    ) -> Result<VerifiedIdentity> {
        let claims = decode_claims(payload)?;
        self.check_wit_claims(&claims, now)?;
        self.check_bound(&claims)?;
        Ok(VerifiedIdentity {
            claims,
            kid: key.id().clone(),
        })
    }

    /// Refuses every bearer token when this verifier requires proof.
    fn check_bearer_allowed(&self) -> Result<()> {
        if self.inner.options.require_proof {
            return Err(Error::ProofRequired {
                reason: "this verifier requires proof of possession: present a workload identity token (typ wit+jwt) with a workload proof token (verify_proof), not a bearer token".into(),
            });
        }
        Ok(())
    }
}
