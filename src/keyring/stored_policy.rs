//! The keyring's own policy ([`KeyringPolicy`]): stored with the keys (the
//! replicated keyring's `<prefix>policy` record, a keystore body's `Policy`)
//! so every process that issues from, rotates or cleans up a keyring follows
//! the same rules, whatever its flags say.
//!
//! # Record (a fixed contract, DESIGN.md "Cluster policy on etcd")
//!
//! A msgpack map: `RotationThreshold`, `LongestTTL`, `LeadTime`, `Retention`,
//! each a Go duration (int64 nanoseconds). `LongestTTL` 0 means unknown:
//! nothing is ever planned for deprecation. A negative duration, or a
//! rotation threshold of 0, is refused.

use std::time::Duration;

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::{Keyring, RotationPolicy};
use crate::codec::{self, wire_struct};
use crate::error::{Error, Result};

wire_struct! {
    /// The policy as stored.
    pub(crate) struct PolicyRecord {
        /// How long a key signs before its successor takes over (ns).
        pub(crate) rotation_threshold: i64 => "RotationThreshold",
        /// The longest TTL an issuer of the keyring signs (ns; 0: unknown).
        pub(crate) longest_ttl: i64 => "LongestTTL",
        /// How long a new key is published before it signs (ns).
        pub(crate) lead_time: i64 => "LeadTime",
        /// How long a deprecated key is kept before it is removed (ns).
        pub(crate) retention: i64 => "Retention",
    }
}

/// The rules every process of one keyring follows: when keys rotate, the
/// longest token any issuer of the keyring may sign (a promise: issuers
/// refuse longer ones, so a key deprecated after it can never reject a live
/// token), how long a new key is published before it signs, and how long a
/// deprecated key is kept before it is removed.
///
/// Stored with the keys: `EtcdKeyring::set_policy` (feature `etcd`) (the
/// `<prefix>policy` record) or [`crate::Keyring::set_policy`] (a keystore
/// file's body). `wid keyring policy set` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyringPolicy {
    /// How long a key signs before its successor takes over (default 720 h).
    pub rotation_threshold: Duration,
    /// The longest TTL an issuer of this keyring signs; `None` when unknown
    /// (tokens that never expire may be in use): no key is then ever
    /// deprecated or removed by the policy.
    pub longest_token_ttl: Option<Duration>,
    /// How long a new key is published before it signs (default 30 s; a
    /// replicated keyring never uses less than its watchers' lag bound).
    pub lead_time: Duration,
    /// How long a deprecated key is kept before the rotator removes it
    /// (default 168 h).
    pub retention: Duration,
}

impl KeyringPolicy {
    /// `longest_token_ttl` in seconds, `u64::MAX` when unknown.
    #[inline(never)]
    fn longest_ttl_secs(&self) -> u64 {
        self.longest_token_ttl.map_or(u64::MAX, |d| d.as_secs())
    }
}

impl Default for KeyringPolicy {
    fn default() -> Self {
        KeyringPolicy::new(None)
    }
}

/// The clock skew the policy allows for (the verifier's default leeway).
pub(crate) const POLICY_SKEW: Duration = Duration::from_secs(60);

impl KeyringPolicy {
    /// The defaults (720 h threshold, 30 s lead time, 168 h retention), for
    /// tokens living at most `longest_token_ttl`.
    pub fn new(longest_token_ttl: Option<Duration>) -> KeyringPolicy {
        KeyringPolicy {
            rotation_threshold: Duration::from_secs(720 * 3600),
            longest_token_ttl,
            lead_time: Duration::from_secs(30),
            retention: Duration::from_secs(168 * 3600),
        }
    }

    /// Sets the rotation threshold.
    pub fn rotation_threshold(mut self, threshold: Duration) -> KeyringPolicy {
        self.rotation_threshold = threshold;
        self
    }

    /// Sets the lead time.
    pub fn lead_time(mut self, lead: Duration) -> KeyringPolicy {
        self.lead_time = lead;
        self
    }

    /// Sets the retention.
    pub fn retention(mut self, retention: Duration) -> KeyringPolicy {
        self.retention = retention;
        self
    }

    /// The rotation thresholds this policy gives [`crate::plan_rotation`].
    pub fn rotation_policy(&self) -> RotationPolicy {
        RotationPolicy::new(self.longest_token_ttl)
            .rotation_threshold(self.rotation_threshold)
            .clock_skew(POLICY_SKEW)
    }

    /// Checks the values: a rotation threshold of at least one second, every
    /// duration within what a Go duration holds.
    pub fn validate(&self) -> Result<()> {
        if self.rotation_threshold < Duration::from_secs(1) {
            return Err(Error::invalid(
                "KeyringPolicy",
                "RotationThreshold",
                format!(
                    "{} is too short: a key must sign for at least 1s",
                    crate::clock::span(self.rotation_threshold)
                ),
            ));
        }
        if self.longest_token_ttl == Some(Duration::ZERO) {
            return Err(Error::invalid(
                "KeyringPolicy",
                "LongestTTL",
                "is 0, which the record reads as unknown; give None for unknown, or a TTL of at least 1s",
            ));
        }
        for (field, d) in [
            ("RotationThreshold", Some(self.rotation_threshold)),
            ("LongestTTL", self.longest_token_ttl),
            ("LeadTime", Some(self.lead_time)),
            ("Retention", Some(self.retention)),
        ] {
            if d.is_some_and(|d| i64::try_from(d.as_nanos()).is_err()) {
                return Err(Error::invalid(
                    "KeyringPolicy",
                    field,
                    "is longer than a Go duration holds (about 292 years)",
                ));
            }
        }
        Ok(())
    }

    /// The stored record's bytes.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn to_record(self) -> Result<Vec<u8>> {
        self.validate()?;
        codec::encode(&self.record())
    }

    pub(crate) fn record(self) -> PolicyRecord {
        let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        PolicyRecord {
            rotation_threshold: ns(self.rotation_threshold),
            longest_ttl: self.longest_token_ttl.map_or(0, ns),
            lead_time: ns(self.lead_time),
            retention: ns(self.retention),
        }
    }

    /// Reads a stored record; `where_` names it in errors.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn from_record(bytes: &[u8], where_: &str) -> Result<KeyringPolicy> {
        let r: PolicyRecord = codec::decode(bytes).map_err(|_| {
            Error::invalid(
                "KeyringPolicy",
                where_,
                "does not decode as a policy map (RotationThreshold, LongestTTL, LeadTime, Retention)",
            )
        })?;
        KeyringPolicy::from_parts(&r, where_)
    }

    pub(crate) fn from_parts(r: &PolicyRecord, where_: &str) -> Result<KeyringPolicy> {
        let dur = |field: &str, ns: i64| {
            u64::try_from(ns).map(Duration::from_nanos).map_err(|_| {
                Error::invalid(
                    "KeyringPolicy",
                    where_,
                    format!("{field} is negative ({ns} ns); expected a duration of 0 or more"),
                )
            })
        };
        let longest = dur("LongestTTL", r.longest_ttl)?;
        let policy = KeyringPolicy {
            rotation_threshold: dur("RotationThreshold", r.rotation_threshold)?,
            longest_token_ttl: (!longest.is_zero()).then_some(longest),
            lead_time: dur("LeadTime", r.lead_time)?,
            retention: dur("Retention", r.retention)?,
        };
        policy.validate()?;
        Ok(policy)
    }

    /// How `given` differs from this (stored) policy: for each field set in
    /// `given` (`None`: not given) with another value, its name and the
    /// stored value, as an operator writes it (`720h`, `unknown`).
    pub fn differences(&self, given: &PolicyOverrides) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let show = |d: Option<Duration>| d.map_or_else(|| "unknown".into(), crate::clock::span);
        if given
            .rotation_threshold
            .is_some_and(|d| d != self.rotation_threshold)
        {
            out.push((
                "RotationThreshold",
                crate::clock::span(self.rotation_threshold),
            ));
        }
        if given
            .longest_token_ttl
            .is_some_and(|d| d != self.longest_token_ttl)
        {
            out.push(("LongestTTL", show(self.longest_token_ttl)));
        }
        if given.lead_time.is_some_and(|d| d != self.lead_time) {
            out.push(("LeadTime", crate::clock::span(self.lead_time)));
        }
        if given.retention.is_some_and(|d| d != self.retention) {
            out.push(("Retention", crate::clock::span(self.retention)));
        }
        out
    }

    /// The earliest time (Unix seconds) a key that stopped signing at
    /// `retired` may be deprecated: when every token it signed has expired
    /// (`None`: never, the longest TTL or the retired time being unknown).
    pub fn deprecate_after(&self, retired: i64) -> Option<i64> {
        let longest = self.longest_token_ttl?;
        (retired > 0).then(|| {
            retired
                .saturating_add(secs(longest))
                .saturating_add(secs(POLICY_SKEW))
        })
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX) + i64::from(d.subsec_nanos() > 0)
}

/// Policy values a process was given (flags, options), each `None` when not
/// given: compared with the stored policy by [`KeyringPolicy::differences`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyOverrides {
    /// A rotation threshold, if given.
    pub rotation_threshold: Option<Duration>,
    /// A longest token TTL, if given (`Some(None)`: given as unknown).
    pub longest_token_ttl: Option<Option<Duration>>,
    /// A lead time, if given.
    pub lead_time: Option<Duration>,
    /// A retention, if given.
    pub retention: Option<Duration>,
}

impl PolicyOverrides {
    /// Nothing given.
    pub fn none() -> PolicyOverrides {
        PolicyOverrides::default()
    }

    /// Every value of `policy`, as given.
    pub fn all(policy: &KeyringPolicy) -> PolicyOverrides {
        PolicyOverrides {
            rotation_threshold: Some(policy.rotation_threshold),
            longest_token_ttl: Some(policy.longest_token_ttl),
            lead_time: Some(policy.lead_time),
            retention: Some(policy.retention),
        }
    }

    /// The values of a [`RotationPolicy`] (threshold and longest TTL).
    pub fn of_rotation(policy: &RotationPolicy) -> PolicyOverrides {
        PolicyOverrides {
            rotation_threshold: Some(policy.rotation_threshold),
            longest_token_ttl: Some(policy.longest_token_ttl),
            lead_time: None,
            retention: None,
        }
    }

    /// `policy` with every given value applied.
    pub fn apply(&self, mut policy: KeyringPolicy) -> KeyringPolicy {
        if let Some(d) = self.rotation_threshold {
            policy.rotation_threshold = d;
        }
        if let Some(d) = self.longest_token_ttl {
            policy.longest_token_ttl = d;
        }
        if let Some(d) = self.lead_time {
            policy.lead_time = d;
        }
        if let Some(d) = self.retention {
            policy.retention = d;
        }
        policy
    }
}

impl Keyring {
    /// The policy stored with these keys (a keystore file's `Policy`, the
    /// replicated keyring's `policy` record), if any.
    pub fn policy(&self) -> Option<KeyringPolicy> {
        *self
            .shared
            .policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets (or with `None` clears) the policy kept with these keys: saved in
    /// the keystore body by [`Keyring::save`], and its longest TTL a promise
    /// every issuer of this keyring keeps from now on. Refused for the copy
    /// of a replicated keyring (set it with
    /// `EtcdKeyring::set_policy` (feature `etcd`)) and for invalid values.
    pub fn set_policy(&self, policy: Option<KeyringPolicy>) -> Result<()> {
        self.refuse_if_replica()?;
        if let Some(p) = &policy {
            p.validate()?;
        }
        self.adopt_policy(policy);
        Ok(())
    }

    /// Takes the policy its source holds (a load, the replicated record).
    pub(crate) fn adopt_policy(&self, policy: Option<KeyringPolicy>) {
        let mut held = self
            .shared
            .policy
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *held = policy;
        // The policy's fields are read only once it is known to be there
        // (`longest_ttl_secs` is not inlined): an `Option<KeyringPolicy>`
        // that is `None` keeps its discriminant in a field's niche and
        // leaves the rest uninitialised, and optimised code that loaded a
        // field before testing the discriminant made valgrind report a
        // branch on uninitialised memory (the C tests, at one build).
        let secs = match &policy {
            Some(p) => p.longest_ttl_secs(),
            None => u64::MAX,
        };
        self.shared.longest_ttl.store(secs, Ordering::Release);
    }

    /// The longest token TTL the stored policy promises (`None`: no promise).
    pub fn longest_token_ttl(&self) -> Option<Duration> {
        match self.shared.longest_ttl.load(Ordering::Acquire) {
            u64::MAX => None,
            secs => Some(Duration::from_secs(secs)),
        }
    }

    /// Refuses a token of `ttl_secs` (`None`: no `exp`) longer than the
    /// policy's longest TTL: a key is deprecated once that long has passed
    /// after it stopped signing, and must never reject a live token.
    pub(crate) fn check_token_ttl(
        &self,
        ttl_secs: Option<i64>,
        subject: &'static str,
        field: &str,
    ) -> Result<()> {
        let Some(longest) = self.longest_token_ttl() else {
            return Ok(());
        };
        let limit = i64::try_from(longest.as_secs()).unwrap_or(i64::MAX);
        let why = match ttl_secs {
            None => "is unset (a token that never expires)".to_string(),
            Some(t) if t > limit => format!(
                "is {}",
                crate::clock::span(Duration::from_secs(t.unsigned_abs()))
            ),
            Some(_) => return Ok(()),
        };
        Err(Error::invalid(
            subject,
            field,
            format!(
                "{why}, longer than the keyring policy's LongestTTL ({}): every issuer of this keyring promises no longer token, so that deprecating a key after it never rejects a live one; give a TTL of at most {}, or raise LongestTTL (`wid keyring policy set --longest-ttl`)",
                crate::clock::span(longest),
                crate::clock::span(longest)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_with_go_durations_and_zero_as_unknown() {
        let p = KeyringPolicy::new(Some(Duration::from_secs(3600)))
            .rotation_threshold(Duration::from_secs(86400))
            .lead_time(Duration::from_secs(5))
            .retention(Duration::from_secs(60));
        let bytes = p.to_record().unwrap();
        let r: PolicyRecord = codec::decode(&bytes).unwrap();
        assert_eq!(r.longest_ttl, 3_600_000_000_000);
        assert_eq!(r.rotation_threshold, 86_400_000_000_000);
        assert_eq!(KeyringPolicy::from_record(&bytes, "policy").unwrap(), p);
        let unknown = KeyringPolicy::new(None).to_record().unwrap();
        let r: PolicyRecord = codec::decode(&unknown).unwrap();
        assert_eq!(r.longest_ttl, 0);
        assert_eq!(
            KeyringPolicy::from_record(&unknown, "policy")
                .unwrap()
                .longest_token_ttl,
            None
        );
    }

    #[test]
    fn negative_or_empty_values_are_refused_naming_the_field() {
        let mut r = KeyringPolicy::new(None).record();
        r.lead_time = -1;
        let e = KeyringPolicy::from_record(&codec::encode(&r).unwrap(), "policy").unwrap_err();
        assert!(e.to_string().contains("LeadTime is negative"), "{e}");
        let mut r = KeyringPolicy::new(None).record();
        r.rotation_threshold = 0;
        let e = KeyringPolicy::from_record(&codec::encode(&r).unwrap(), "policy").unwrap_err();
        assert!(e.to_string().contains("RotationThreshold"), "{e}");
        let e = KeyringPolicy::from_record(b"\x01", "policy").unwrap_err();
        assert!(e.to_string().contains("does not decode"), "{e}");
    }

    #[test]
    fn differences_name_only_given_fields_that_differ() {
        let stored = KeyringPolicy::new(Some(Duration::from_secs(3600)));
        let given = PolicyOverrides {
            rotation_threshold: Some(Duration::from_secs(60)),
            longest_token_ttl: Some(Some(Duration::from_secs(3600))),
            lead_time: Some(Duration::from_secs(5)),
            retention: None,
        };
        let d = stored.differences(&given);
        assert_eq!(
            d,
            vec![
                ("RotationThreshold", "720h".to_string()),
                ("LeadTime", "30s".to_string())
            ]
        );
        assert!(stored.differences(&PolicyOverrides::none()).is_empty());
    }
}
