//! The flags several commands share: the size of new RSA keys (`init`,
//! `rotate`, `plan --apply`) and the rotation policy (`plan`, `wid serve`).

use std::time::Duration;

use clap::Args;
use workload_identity::{RotationPolicy, RsaKeySize};

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
    /// How long a key signs before its successor takes over.
    #[arg(long, value_name = "DURATION", default_value = "720h", value_parser = parse_duration)]
    rotation_threshold: Duration,
    /// The longest TTL of the tokens in use. Unset: tokens without exp may be
    /// in use, so no key is ever planned for deprecation.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    longest_ttl: Option<Duration>,
}

impl PolicyArgs {
    pub(crate) fn policy(&self) -> RotationPolicy {
        RotationPolicy::new(self.longest_ttl).rotation_threshold(self.rotation_threshold)
    }
}
