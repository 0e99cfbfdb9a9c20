//! The flags several commands share: the size of new RSA keys (`init`,
//! `rotate`, `plan --apply`), the rotation policy (`plan`, `wid serve`) and
//! the keys' purpose (`init`, `rotate`, `list`, `jwks`, `plan`).

use std::time::Duration;

use clap::Args;
use workload_identity::{Algorithm, KeyPurpose, PolicyOverrides, RotationPolicy, RsaKeySize};

use crate::CliError;
use crate::output::parse_duration;
use crate::sources::bad_flag;

#[derive(Debug, Args)]
pub(super) struct RsaArgs {
    /// Size of new RS256 keys: 2048, 3072 or 4096.
    #[arg(long, value_name = "BITS", default_value_t = 2048)]
    pub(super) rsa_bits: u32,
}

impl RsaArgs {
    pub(super) fn size(&self) -> Result<RsaKeySize, CliError> {
        RsaKeySize::from_bits(self.rsa_bits).ok_or_else(|| {
            bad_flag(
                "--rsa-bits",
                format!("{} is not 2048, 3072 or 4096", self.rsa_bits),
            )
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// How long a key signs before its successor takes over (default 720h).
    /// A keyring that stores its policy (`wid keyring policy set`) refuses
    /// another value.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    rotation_threshold: Option<Duration>,
    /// The longest TTL of the tokens in use. Unset: tokens without exp may be
    /// in use, so no key is ever planned for deprecation. A keyring that
    /// stores its policy refuses another value.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    longest_ttl: Option<Duration>,
}

/// The values of the policy stored with the keys (`wid keyring init`,
/// `wid keyring policy set`): those given; the stored or default ones for the
/// rest.
#[derive(Debug, Args)]
pub(crate) struct StoredPolicyArgs {
    /// How long a key signs before its successor takes over (default 720h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    rotation_threshold: Option<Duration>,
    /// The longest TTL any issuer of the keyring may sign (a promise: longer
    /// tokens are refused, so a key deprecated after it never rejects a live
    /// token), or `unknown` (the default: no key is then ever deprecated by
    /// the policy).
    #[arg(long, value_name = "DURATION|unknown", value_parser = parse_longest)]
    longest_ttl: Option<Longest>,
    /// How long a new key is published before it signs (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    lead_time: Option<Duration>,
    /// How long a deprecated key is kept before the rotator removes it
    /// (default 168h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    retention: Option<Duration>,
}

/// `--longest-ttl`: a TTL, or unknown (`None`).
#[derive(Debug, Clone, Copy)]
struct Longest(Option<Duration>);

fn parse_longest(text: &str) -> Result<Longest, String> {
    if text == "unknown" {
        return Ok(Longest(None));
    }
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err("0 is no TTL: give a duration, or `unknown`".into());
    }
    Ok(Longest(Some(d)))
}

impl StoredPolicyArgs {
    /// The values given.
    pub(crate) fn overrides(&self) -> PolicyOverrides {
        let mut given = PolicyOverrides::none();
        given.rotation_threshold = self.rotation_threshold;
        given.longest_token_ttl = self.longest_ttl.map(|l| l.0);
        given.lead_time = self.lead_time;
        given.retention = self.retention;
        given
    }
}

/// The default rotation threshold.
pub(crate) const DEFAULT_THRESHOLD: Duration = Duration::from_secs(720 * 3600);

impl PolicyArgs {
    /// The policy the flags give (defaults for what they leave out), for a
    /// keyring that stores none.
    pub(crate) fn policy(&self) -> RotationPolicy {
        RotationPolicy::new(self.longest_ttl)
            .rotation_threshold(self.rotation_threshold.unwrap_or(DEFAULT_THRESHOLD))
    }

    /// The policy and the values given, as `StoreArgs::open_with_policy`
    /// takes them.
    pub(crate) fn both(&self) -> (RotationPolicy, PolicyOverrides) {
        (self.policy(), self.overrides())
    }

    /// The values given, to compare with a stored policy.
    pub(crate) fn overrides(&self) -> PolicyOverrides {
        let mut o = PolicyOverrides::none();
        o.rotation_threshold = self.rotation_threshold;
        o.longest_token_ttl = self.longest_ttl.map(Some);
        o
    }
}

/// `--purpose bearer|wit|kubernetes`: which keys a command makes, lists or
/// publishes.
#[derive(Debug, Args)]
pub(super) struct PurposeArgs {
    /// The keys' purpose: `bearer` (tokens relying parties verify with the
    /// JWKS) or `wit` (workload identity tokens, verified only with a proof;
    /// published apart, in the WIT key set) or `kubernetes` (a cluster's
    /// service-account tokens, signed by `wid k8s-signer`; ES256 or RS256
    /// only, published apart too). A key's purpose is fixed when it is made.
    #[arg(long, value_name = "bearer|wit|kubernetes", value_parser = parse_purpose, default_value = "bearer")]
    pub(super) purpose: KeyPurpose,
}

/// A key purpose by name (`bearer`, `wit` or `kubernetes`, any case).
pub(crate) fn parse_purpose(name: &str) -> Result<KeyPurpose, String> {
    KeyPurpose::from_name(&name.to_ascii_lowercase())
        .ok_or_else(|| format!("unknown key purpose {name:?}: expected bearer, wit or kubernetes"))
}

/// The keys a change is about: a purpose and an algorithm (each pair has
/// its own active key). Printed as `ES256` for bearer keys and `ES256 wit`
/// for WIT keys. A key imported from another issuer's JWKS may have a
/// verify-only algorithm (`PS256`, `ES384`...): such a pair is named in
/// reports, never rotated or signed with ([`Pair::signing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pair {
    pub(super) purpose: KeyPurpose,
    pub(super) alg: workload_identity::JwsAlgorithm,
}

impl Pair {
    pub(super) fn new(purpose: KeyPurpose, alg: Algorithm) -> Pair {
        Pair {
            purpose,
            alg: alg.into(),
        }
    }

    pub(super) fn of(info: &workload_identity::KeyInfo) -> Pair {
        Pair {
            purpose: info.purpose,
            alg: info.algorithm,
        }
    }

    /// The algorithm keys of this pair sign with; an error naming the
    /// algorithm for a verify-only pair.
    pub(super) fn signing(self) -> Result<Algorithm, crate::CliError> {
        self.alg.signing().ok_or_else(|| {
            crate::CliError::new(
                workload_identity::ResultCode::InvalidArgument,
                format!(
                    "{} is a verify-only algorithm (keys of other issuers): keys here sign, rotate and activate with EdDSA, ES256 or RS256 only",
                    self.alg
                ),
            )
        })
    }
}

impl std::fmt::Display for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.purpose {
            KeyPurpose::Bearer => write!(f, "{}", self.alg),
            other => write!(f, "{} {other}", self.alg),
        }
    }
}
