//! The cluster's policy, stored at `<prefix>policy` (DESIGN.md "Cluster
//! policy on etcd"): read from the copy by every process, written in one
//! transaction with the revision compare, like keys.

use std::time::Duration;

use super::{EtcdKeyring, LONGEST, Shared};
use crate::error::{Error, Result};
use crate::keyring::{KeyringPolicy, PolicyOverrides, RotationPolicy};

impl Shared {
    /// The policy stored with the keys, if any (as the copy holds it).
    pub(crate) fn stored_policy(&self) -> Option<KeyringPolicy> {
        self.keyring.policy()
    }

    /// The lead time in force: the stored policy's (never under the lag
    /// bound), else this process's setting.
    pub(crate) fn lead_time(&self) -> Duration {
        match self.stored_policy() {
            Some(p) => p.lead_time.min(LONGEST).max(self.settings.max_lag),
            None => self.settings.lead_time,
        }
    }

    /// The rotation thresholds in force: the stored policy's, else this
    /// process's setting.
    pub(crate) fn rotation_policy(&self) -> RotationPolicy {
        self.stored_policy()
            .map_or(self.settings.policy, |p| p.rotation_policy())
    }
}

impl EtcdKeyring {
    /// The policy stored at `<prefix>policy`, as this copy holds it (`None`:
    /// none was ever set; each process then follows its own settings).
    pub fn policy(&self) -> Option<KeyringPolicy> {
        self.shared().stored_policy()
    }

    /// Stores `policy` at `<prefix>policy` (one transaction that holds only
    /// if neither the keys nor the policy changed after this copy's
    /// revision; `KeyringConflict` otherwise). From then on every process of
    /// the keyring follows it: the rotator plans with it, issuers refuse
    /// tokens longer than its `LongestTTL`, and processes given other values
    /// refuse to start ([`EtcdKeyring::check_policy`]). Returns the revision.
    pub fn set_policy(&self, policy: &KeyringPolicy) -> Result<i64> {
        let s = self.shared();
        let bytes = policy.to_record()?;
        let plan = s.plan();
        s.commit_policy(&plan, bytes, &format!("setting the policy ({policy:?})"))
    }

    /// Stores `policy` if the keyring stores none yet, by a compare-and-set
    /// on the record's absence, so that of processes racing to store theirs
    /// exactly one wins; returns the policy stored (this one, or the one
    /// another process stored first: compare it with
    /// [`EtcdKeyring::check_policy`]). [`EtcdKeyring::start_rotator`] calls
    /// it, so a keyring made before `wid keyring init` stored a policy gets
    /// its first rotator's. `InvalidArgument` for a policy that does not
    /// validate, `KeyringConflict` when the keys kept changing under every
    /// attempt, `KeyringUnavailable` when etcd does not answer; a record that
    /// is there but does not decode is never written over (`InvalidArgument`).
    pub fn store_policy_if_none(&self, policy: &KeyringPolicy) -> Result<KeyringPolicy> {
        policy.validate()?;
        let s = self.shared();
        let bytes = policy.to_record()?;
        let mut last = None;
        for _ in 0..20 {
            if let Some(stored) = s.stored_policy() {
                return Ok(stored);
            }
            let plan = s.plan();
            if plan.has_policy_record() {
                // The record may be another candidate's, stored after the
                // look above: once the copy has taken the revision the plan
                // was made at, the policy is held unless its record was
                // refused. A copy still behind (a busy host) looks again.
                if !super::view::wait_for_revision(s, plan.revision, Duration::from_secs(5)) {
                    continue;
                }
                if let Some(stored) = s.stored_policy() {
                    return Ok(stored);
                }
                return Err(Error::invalid(
                    "policy",
                    "record",
                    format!(
                        "the policy record at {}policy cannot be used, and no policy is stored over it here; put it right with `wid keyring policy set`",
                        s.prefix
                    ),
                ));
            }
            match s.commit_policy(
                &plan,
                bytes.clone(),
                &format!("storing the first rotator's policy ({policy:?}): the keyring had none"),
            ) {
                Ok(_) => return Ok(*policy),
                Err(e) if e.code() == crate::error::ResultCode::KeyringConflict => {
                    // Another change (or another candidate's policy) came
                    // first: bring the copy up to date (one linearizable
                    // read), then look again.
                    last = Some(e);
                    super::listing::relist(s)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| s.conflict("the policy could not be stored")))
    }

    /// Checks the values this process was given against the stored policy:
    /// `InvalidArgument` naming each given value that differs, with the
    /// stored value, when they disagree (a process with other rules must not
    /// run beside the others); nothing when no policy is stored or
    /// everything given agrees. `flag` names how each field is given
    /// (`--rotation-threshold`, say), for the message.
    pub fn check_policy(
        &self,
        given: &PolicyOverrides,
        flag: impl Fn(&'static str) -> String,
    ) -> Result<()> {
        let Some(stored) = self.policy() else {
            return Ok(());
        };
        let diffs = stored.differences(given);
        if diffs.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = diffs
            .iter()
            .map(|(field, value)| format!("{} (stored {field}: {value})", flag(field)))
            .collect();
        Err(Error::invalid(
            "policy",
            "flags",
            format!(
                "the keyring at {} stores its policy, and this process was given other values: {}; drop those flags (every process then follows the stored policy) or change the policy for all with `wid keyring policy set`",
                self.prefix(),
                named.join(", ")
            ),
        ))
    }
}
