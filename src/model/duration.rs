//! Go's `time.Duration` on the wire.

use serde::{Deserialize, Serialize};

/// A Go `time.Duration`: signed 64-bit nanoseconds, encoded as a msgpack integer.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct GoDuration(pub i64);

impl GoDuration {
    /// Nanoseconds per second.
    const NANOS_PER_SEC: i64 = 1_000_000_000;

    /// A duration of whole seconds (saturating at the `i64` nanosecond range).
    pub const fn from_secs(secs: i64) -> GoDuration {
        GoDuration(secs.saturating_mul(Self::NANOS_PER_SEC))
    }

    /// The duration in nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// The duration in whole seconds, rounded toward zero (as JWT dates are).
    pub const fn as_secs(self) -> i64 {
        self.0 / Self::NANOS_PER_SEC
    }

    /// The duration as a `std::time::Duration`, or `None` when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_like_go() {
        assert_eq!(GoDuration::from_secs(3600).as_nanos(), 3_600_000_000_000);
        assert_eq!(GoDuration(1_999_999_999).as_secs(), 1);
        assert_eq!(GoDuration(-1).to_std(), None);
        assert_eq!(GoDuration::from_secs(i64::MAX), GoDuration(i64::MAX));
        assert_eq!(
            GoDuration(1_500_000_000).to_std(),
            Some(std::time::Duration::from_millis(1500))
        );
    }
}
