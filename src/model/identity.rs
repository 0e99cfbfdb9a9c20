//! Nomad's `WorkloadIdentity`: which identity a workload asks for.

use super::GoDuration;
use super::validate::Problems;
use crate::codec::wire_struct;
use crate::error::{Result, truncate_for_message};

wire_struct! {
    /// An identity block of a task or service (Nomad's `WorkloadIdentity`).
    ///
    /// Fields are declared in codec-name order, the order Go's codec writes them.
    pub struct WorkloadIdentity {
        /// The audiences the token is for; each must be non-empty.
        pub audience: Vec<String> => "Audience",
        /// What happens when the token changes: empty, `restart` or `signal`.
        pub change_mode: String => "ChangeMode",
        /// The signal sent when `change_mode` is `signal`.
        pub change_signal: String => "ChangeSignal",
        /// Whether the token is exposed in the task's environment.
        pub env: bool => "Env",
        /// The extra claims this identity asks for by name (Nomad 2.0.3's
        /// `extra_claims`): each must be one the issuer's policy offers the
        /// allocation's namespace (see
        /// [`ExtraClaimsPolicy`](crate::profile::ExtraClaimsPolicy)).
        pub extra_claims: Vec<String> => "ExtraClaims",
        /// Whether the token is written to a file in the task's secrets directory.
        pub file: bool => "File",
        /// A custom path for that file; requires `file`.
        pub filepath: String => "Filepath",
        /// The identity's name: `^[a-zA-Z0-9-_]{1,128}$`.
        pub name: String => "Name",
        /// For a service identity, the service's name.
        pub service_name: String => "ServiceName",
        /// How long the token lives; zero means no expiry.
        pub ttl: GoDuration => "TTL",
    }
}

/// Change modes Nomad accepts.
const CHANGE_MODE_RESTART: &str = "restart";
const CHANGE_MODE_SIGNAL: &str = "signal";

/// Nomad's identity name rule, `^[a-zA-Z0-9-_]{1,128}$`.
pub(crate) fn valid_identity_name(name: &str) -> bool {
    // A fold without an early exit: a name is checked every time one is
    // issued, and this compiles to a few operations per byte.
    (1..=128).contains(&name.len())
        && name.bytes().fold(true, |ok, b| {
            ok & (b.is_ascii_alphanumeric() | (b == b'-') | (b == b'_'))
        })
}

impl WorkloadIdentity {
    /// Checks the identity with Nomad's rules, reporting every problem at once.
    pub fn validate(&self) -> Result<()> {
        let mut p = Problems::new("WorkloadIdentity");
        self.check(&mut p);
        p.finish()
    }

    pub(crate) fn check(&self, p: &mut Problems) {
        if !valid_identity_name(&self.name) {
            p.push(
                "Name",
                format!(
                    "must match ^[a-zA-Z0-9-_]{{1,128}}$, got {:?}",
                    truncate_for_message(&self.name)
                ),
            );
        }
        for (i, aud) in self.audience.iter().enumerate() {
            if aud.is_empty() {
                p.push(&format!("Audience[{i}]"), "must not be an empty string");
            }
        }
        let ttl = self.ttl.as_nanos();
        if ttl < 0 {
            p.push("TTL", format!("must be >= 0, got {ttl}ns"));
        } else if ttl > 0 && ttl < 1_000_000_000 {
            // A TTL is Go nanoseconds: 3600 is 3.6 us, which would issue a token
            // without exp. Someone who wrote it meant seconds.
            p.push(
                "TTL",
                format!(
                    "is {ttl}ns, under one second: a TTL is Go nanoseconds (time.Duration), so an hour is 3600000000000 (Go: time.Hour; C: 3600 * 1000000000LL; Rust: GoDuration::from_secs(3600)); 0 means a token without exp"
                ),
            );
        }
        match self.change_mode.as_str() {
            CHANGE_MODE_SIGNAL if self.change_signal.is_empty() => {
                p.push("ChangeSignal", "must be set when ChangeMode is \"signal\"");
            }
            CHANGE_MODE_SIGNAL => {}
            "" | CHANGE_MODE_RESTART if !self.change_signal.is_empty() => p.push(
                "ChangeSignal",
                format!(
                    "may only be set when ChangeMode is \"signal\", got ChangeMode {:?}",
                    self.change_mode
                ),
            ),
            "" | CHANGE_MODE_RESTART => {}
            other => p.push(
                "ChangeMode",
                format!(
                    "must be empty, \"restart\" or \"signal\", got {:?}",
                    truncate_for_message(other)
                ),
            ),
        }
        if !self.filepath.is_empty() && !self.file {
            p.push("Filepath", "requires File to be true");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn valid() -> WorkloadIdentity {
        WorkloadIdentity {
            name: "vault_default".into(),
            audience: vec!["vault.io".into()],
            ttl: GoDuration::from_secs(3600),
            ..WorkloadIdentity::default()
        }
    }

    fn fields(e: Error) -> Vec<String> {
        match e {
            Error::InvalidArgument(ia) => ia.problems.into_iter().map(|p| p.field).collect(),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn names_follow_nomads_pattern() {
        for ok in [
            "a",
            "default",
            "vault_default",
            "consul-service_web-api",
            &"x".repeat(128),
        ] {
            assert!(valid_identity_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a.b", "a/b", "é", "a:b", &"x".repeat(129)] {
            assert!(!valid_identity_name(bad), "{bad}");
        }
    }

    #[test]
    fn valid_identity_passes() {
        valid().validate().unwrap();
        let mut w = valid();
        w.change_mode = "signal".into();
        w.change_signal = "SIGHUP".into();
        w.file = true;
        w.filepath = "secrets/x.jwt".into();
        w.validate().unwrap();
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let w = WorkloadIdentity {
            name: "bad name".into(),
            audience: vec!["ok".into(), String::new()],
            ttl: GoDuration::from_nanos(-1),
            change_mode: "explode".into(),
            filepath: "x".into(),
            ..WorkloadIdentity::default()
        };
        let e = w.validate().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("Name: must match ^[a-zA-Z0-9-_]{1,128}$, got \"bad name\""),
            "{msg}"
        );
        assert!(msg.contains("TTL: must be >= 0, got -1ns"), "{msg}");
        assert_eq!(
            fields(e),
            ["Name", "Audience[1]", "TTL", "ChangeMode", "Filepath"]
        );
    }

    /// 3600 nanoseconds (what `ttl: 3600` meant, when the field took a bare
    /// number) used to issue a token without `exp`; a positive TTL under a
    /// second is refused, whole seconds and 0 (no `exp`) are not.
    #[test]
    fn a_positive_ttl_under_one_second_is_refused() {
        for ns in [1, 3600, 999_999_999] {
            let w = WorkloadIdentity {
                ttl: GoDuration::from_nanos(ns),
                ..valid()
            };
            let e = w.validate().unwrap_err();
            assert_eq!(e.code(), crate::error::ResultCode::InvalidArgument);
            assert!(e.to_string().contains("Go nanoseconds"), "{e}");
            assert_eq!(fields(e), ["TTL"]);
        }
        for ttl in [
            GoDuration::from_nanos(0),
            GoDuration::from_nanos(1_000_000_000),
            GoDuration::from_secs(3600),
            std::time::Duration::from_secs(60).into(),
        ] {
            WorkloadIdentity { ttl, ..valid() }.validate().unwrap();
        }
    }

    #[test]
    fn change_signal_only_and_always_with_signal_mode() {
        let mut w = valid();
        w.change_mode = "signal".into();
        assert_eq!(fields(w.validate().unwrap_err()), ["ChangeSignal"]);
        let mut w = valid();
        w.change_signal = "SIGHUP".into();
        assert_eq!(fields(w.validate().unwrap_err()), ["ChangeSignal"]);
        w.change_mode = "restart".into();
        assert_eq!(fields(w.validate().unwrap_err()), ["ChangeSignal"]);
    }

    #[test]
    fn long_values_are_truncated_in_messages() {
        let w = WorkloadIdentity {
            name: "ü".repeat(1000),
            ..valid()
        };
        let msg = w.validate().unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.ends_with("…\""), "{msg}");
    }
}
