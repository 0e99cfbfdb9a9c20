//! The rotation policy: a pure function from (keys, now, thresholds) to actions.
//!
//! # Timeline (defaults: rotation threshold 720 h, clock skew 60 s)
//!
//! ```text
//! t0            key A created, active (signs)
//! t0 + 360 h    A is older than threshold/2: prepublish B with publish time
//!               t0 + 720 h. B is in the JWKS (verifiers can fetch it) but
//!               does not sign yet. Recommended JWKS max-age shrinks toward
//!               the switch, so caches pick B up well before it signs.
//! t0 + 720 h    B is due: promote. B signs, A becomes inactive (still in the
//!               JWKS, still verifies tokens it signed). A's retired time = now.
//! t0 + 720 h    A is reported for deprecation once every token it signed has
//!   + longest   expired: retired time + the longest token TTL still in use + the
//!   TTL + 60 s  clock skew. Deprecated keys leave the JWKS and stop verifying.
//! t0 + 1080 h   B has signed for threshold/2: prepublish C (publish time
//!               t0 + 1440 h), and so on. A key's age counts from when it began
//!               signing (its publish time), so every key signs for 720 h.
//! ```
//!
//! With tokens that never expire in use (`longest_token_ttl: None`, like Nomad's
//! default identity) no key is ever reported for deprecation. A key whose retired
//! time is unknown (0, e.g. inserted as inactive) is never reported either.
//! If no key is active the plan is to rotate at once; if the active key is already
//! past the threshold with no successor (the service was down), the successor is
//! prepublished with publish time `now`, so it is promoted at once.

use std::time::Duration;

use super::{Algorithm, KeyId, KeyInfo, KeyPurpose, KeyState};

/// Thresholds for [`plan_rotation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotationPolicy {
    /// How long a key signs before its successor takes over (default 720 h).
    pub rotation_threshold: Duration,
    /// The longest TTL of tokens still in use; `None` when tokens without `exp`
    /// are in use, so no key may ever be deprecated automatically.
    pub longest_token_ttl: Option<Duration>,
    /// Allowance for clocks that disagree (default 60 s, the verifier leeway).
    pub clock_skew: Duration,
}

impl RotationPolicy {
    /// The default thresholds, for tokens living at most `longest_token_ttl`.
    pub fn new(longest_token_ttl: Option<Duration>) -> RotationPolicy {
        RotationPolicy {
            rotation_threshold: Duration::from_secs(720 * 3600),
            longest_token_ttl,
            clock_skew: Duration::from_secs(60),
        }
    }

    /// Sets the rotation threshold.
    pub fn rotation_threshold(mut self, threshold: Duration) -> RotationPolicy {
        self.rotation_threshold = threshold;
        self
    }

    /// Sets the clock skew allowance.
    pub fn clock_skew(mut self, skew: Duration) -> RotationPolicy {
        self.clock_skew = skew;
        self
    }

    fn threshold_secs(&self) -> i64 {
        secs(self.rotation_threshold)
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// One step of a rotation plan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RotationAction {
    /// No key of the (`purpose`, `algorithm`) pair is active: make a new
    /// active key now.
    Rotate {
        /// The algorithm that needs a key.
        algorithm: Algorithm,
        /// The purpose the new key must have.
        purpose: KeyPurpose,
    },
    /// Add a successor of the (`purpose`, `algorithm`) pair that becomes
    /// active at `publish_at`.
    Prepublish {
        /// The algorithm of the successor.
        algorithm: Algorithm,
        /// The purpose of the successor.
        purpose: KeyPurpose,
        /// When the successor becomes active.
        publish_at: i64,
    },
    /// Make this prepublished key active (its publish time has come).
    Promote {
        /// The key to promote.
        kid: KeyId,
    },
    /// Every token this inactive key signed has expired: deprecate it.
    Deprecate {
        /// The key to deprecate.
        kid: KeyId,
    },
}

/// What to do now, given the keys (as [`crate::keyring::Keyring::keys`] returns
/// them) and the policy, for every (purpose, algorithm) pair that has a key
/// (bearer EdDSA when there are none): the plans of
/// [`plan_rotation_for_purpose`], bearer pairs first, each in [`Algorithm`]
/// order. Pure: the same inputs always give the same plan.
pub fn plan_rotation(keys: &[KeyInfo], now: i64, policy: &RotationPolicy) -> Vec<RotationAction> {
    let mut pairs: Vec<(KeyPurpose, Algorithm)> =
        // Verify-only keys are never rotated: they belong to no pair.
        keys.iter()
            .filter_map(|k| Some((k.purpose, k.algorithm.signing()?)))
            .collect();
    pairs.sort();
    pairs.dedup();
    if pairs.is_empty() {
        pairs.push((KeyPurpose::Bearer, Algorithm::EdDsa));
    }
    pairs
        .into_iter()
        .flat_map(|(purpose, alg)| plan_rotation_for_purpose(keys, purpose, alg, now, policy))
        .collect()
}

/// What to do now for the bearer keys of `alg` (see
/// [`plan_rotation_for_purpose`]). Pure.
pub fn plan_rotation_for(
    keys: &[KeyInfo],
    alg: Algorithm,
    now: i64,
    policy: &RotationPolicy,
) -> Vec<RotationAction> {
    plan_rotation_for_purpose(keys, KeyPurpose::Bearer, alg, now, policy)
}

/// What to do now for the keys of the (`purpose`, `alg`) pair (keys of other
/// pairs are ignored; with none of the pair, the plan is to rotate one in).
/// Pure.
pub fn plan_rotation_for_purpose(
    keys: &[KeyInfo],
    purpose: KeyPurpose,
    alg: Algorithm,
    now: i64,
    policy: &RotationPolicy,
) -> Vec<RotationAction> {
    let keys: Vec<KeyInfo> = keys
        .iter()
        .filter(|k| k.algorithm == alg && k.purpose == purpose)
        .cloned()
        .collect();
    let keys = keys.as_slice();
    let mut plan = Vec::new();
    let signable = |k: &&KeyInfo| k.can_sign();
    let mut due: Vec<&KeyInfo> = keys
        .iter()
        .filter(signable)
        .filter(|k| k.state == KeyState::Prepublished && k.publish_time <= now)
        .collect();
    due.sort_by(|a, b| (a.publish_time, &a.kid).cmp(&(b.publish_time, &b.kid)));
    let active = keys.iter().find(|k| k.state == KeyState::Active);
    let pending = keys
        .iter()
        .filter(signable)
        .any(|k| k.state == KeyState::Prepublished && k.publish_time > now);

    // The key that signs once the promotions are done.
    let signer = due.last().copied().or(active);
    plan.extend(
        due.iter()
            .map(|k| RotationAction::Promote { kid: k.kid.clone() }),
    );
    match signer {
        None => plan.push(RotationAction::Rotate {
            algorithm: alg,
            purpose,
        }),
        Some(signer) if !pending => {
            let threshold = policy.threshold_secs();
            let born = signing_since(signer);
            if now.saturating_sub(born) > threshold / 2 {
                plan.push(RotationAction::Prepublish {
                    algorithm: alg,
                    purpose,
                    publish_at: born.saturating_add(threshold).max(now),
                });
            }
        }
        Some(_) => {}
    }

    if let Some(ttl) = policy.longest_token_ttl {
        let wait = secs(ttl).saturating_add(secs(policy.clock_skew));
        let mut old: Vec<&KeyInfo> = keys
            .iter()
            .filter(|k| {
                k.state == KeyState::Inactive
                    && k.retired_time > 0
                    && now >= k.retired_time.saturating_add(wait)
            })
            .collect();
        old.sort_by(|a, b| (a.retired_time, &a.kid).cmp(&(b.retired_time, &b.kid)));
        plan.extend(
            old.into_iter()
                .map(|k| RotationAction::Deprecate { kid: k.kid.clone() }),
        );
    }
    plan
}

/// The next time after `now` the plan has something to do, and what: the
/// plan of [`plan_rotation`] at the first moment it is not empty (keys are
/// as they are now; each action changes them). `None` when nothing is ever
/// planned for these keys (no successor ever due, no deprecation, e.g. an
/// empty set, or tokens without expiry and no active key to age). Pure.
pub fn next_planned_change(
    keys: &[KeyInfo],
    now: i64,
    policy: &RotationPolicy,
) -> Option<(i64, Vec<RotationAction>)> {
    let threshold = policy.threshold_secs();
    let wait = policy
        .longest_token_ttl
        .map(|ttl| secs(ttl).saturating_add(secs(policy.clock_skew)));
    let mut moments: Vec<i64> = Vec::new();
    for k in keys {
        let born = signing_since(k);
        // Strictly past half the threshold (plan_rotation's `>`).
        moments.push(born.saturating_add(threshold / 2).saturating_add(1));
        moments.push(born.saturating_add(threshold));
        moments.push(k.publish_time);
        if let (Some(w), true) = (wait, k.retired_time > 0) {
            moments.push(k.retired_time.saturating_add(w));
        }
    }
    moments.retain(|t| *t > now);
    moments.sort_unstable();
    moments.dedup();
    moments.into_iter().find_map(|t| {
        let plan = plan_rotation(keys, t, policy);
        (!plan.is_empty()).then_some((t, plan))
    })
}

/// When a key began (or begins) signing: its publish time if it was prepublished,
/// else its create time. A key's age for rotation counts from here, so a
/// successor signs for the full threshold, not half of it.
fn signing_since(k: &KeyInfo) -> i64 {
    k.create_time.max(k.publish_time)
}

/// The recommended JWKS `Cache-Control: max-age`: half the time left until the
/// next planned key switch of any algorithm (for each, the earliest pending
/// publish time, else the active key's signing start + threshold), and never
/// under 15 minutes.
pub(crate) fn jwks_max_age(keys: &[KeyInfo], now: i64, policy: &RotationPolicy) -> Duration {
    const FLOOR: i64 = 15 * 60;
    let half = next_key_switch(keys, now, policy).map_or(0, |t| t.saturating_sub(now) / 2);
    Duration::from_secs(half.max(FLOOR) as u64)
}

/// [`jwks_max_age`], never more than the time until the next planned change
/// (a key switch, or any action of [`next_planned_change`]: a prepublish, a
/// promotion, a deprecation) less `lead`: a cache honouring it fetches the
/// set again before the change, so it never misses a new key before it
/// signs (0 when the change is due within the lead time).
pub(crate) fn jwks_max_age_with_lead(
    keys: &[KeyInfo],
    now: i64,
    policy: &RotationPolicy,
    lead: Duration,
) -> Duration {
    let half = jwks_max_age(keys, now, policy);
    let due = (!plan_rotation(keys, now, policy).is_empty()).then_some(now);
    let next = [
        due,
        next_key_switch(keys, now, policy),
        next_planned_change(keys, now, policy).map(|(t, _)| t),
    ]
    .into_iter()
    .flatten()
    .min();
    match next {
        None => half,
        Some(t) => {
            let left = t.saturating_sub(now).saturating_sub(secs(lead)).max(0);
            half.min(Duration::from_secs(left.unsigned_abs()))
        }
    }
}

/// When the next planned key switch is (Unix seconds): the soonest
/// prepublished key's publish time, else the soonest time an active key's
/// successor takes over; `None` when there is no key.
pub(crate) fn next_key_switch(keys: &[KeyInfo], now: i64, policy: &RotationPolicy) -> Option<i64> {
    let next_for = |(purpose, alg): (KeyPurpose, Algorithm)| {
        let of_alg = || {
            keys.iter()
                .filter(move |k| k.algorithm == alg && k.purpose == purpose)
        };
        of_alg()
            .filter(|k| k.state == KeyState::Prepublished && k.publish_time > now)
            .map(|k| k.publish_time)
            .min()
            .or_else(|| {
                of_alg()
                    .find(|k| k.state == KeyState::Active)
                    .map(|k| signing_since(k).saturating_add(policy.threshold_secs()))
            })
    };
    KeyPurpose::ALL
        .iter()
        .flat_map(|p| Algorithm::ALL.iter().map(|a| (*p, *a)))
        .filter_map(next_for)
        .min()
}
