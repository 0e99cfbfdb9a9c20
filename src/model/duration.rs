//! Go's `time.Duration` on the wire.

use serde::{Deserialize, Serialize};

/// A Go `time.Duration`: signed 64-bit **nanoseconds**, encoded as a msgpack
/// integer. Built only by constructors, so a bare number cannot slip in as
/// seconds: [`GoDuration::from_secs`], [`GoDuration::from_nanos`] (3600
/// nanoseconds is 3.6 microseconds, not an hour), or from a
/// [`std::time::Duration`] (`Duration::from_secs(3600).into()`).
///
/// ```compile_fail
/// // The field is private: a bare number is not a duration.
/// let _ = workload_identity::model::GoDuration(3600);
/// ```
///
/// ```
/// use workload_identity::model::GoDuration;
/// assert_eq!(GoDuration::from_secs(3600), GoDuration::from_nanos(3_600_000_000_000));
/// assert_eq!(GoDuration::from(std::time::Duration::from_secs(1)).as_nanos(), 1_000_000_000);
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct GoDuration(i64);

impl GoDuration {
    /// Nanoseconds per second.
    const NANOS_PER_SEC: i64 = 1_000_000_000;

    /// A duration of `nanos` nanoseconds (Go's own unit).
    pub const fn from_nanos(nanos: i64) -> GoDuration {
        GoDuration(nanos)
    }

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
    /// (The reverse is `From<std::time::Duration>`, saturating at `i64::MAX`
    /// nanoseconds, about 292 years.)
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }
}

/// As an operator writes a duration (and `wid`'s flags read it): `720h`,
/// `1h30m`, `30s`, `250ms`, `0s`, `-5s`; sub-millisecond remainders are left
/// out of durations of a second or more.
impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0;
        if n < 0 {
            f.write_str("-")?;
        }
        let abs = n.unsigned_abs();
        let secs = abs / 1_000_000_000;
        let sub = abs % 1_000_000_000;
        if secs == 0 {
            return match sub {
                0 => f.write_str("0s"),
                s if s % 1_000_000 == 0 => write!(f, "{}ms", s / 1_000_000),
                s => write!(f, "{s}ns"),
            };
        }
        for (v, unit) in [(secs / 3600, "h"), (secs / 60 % 60, "m"), (secs % 60, "s")] {
            if v > 0 {
                write!(f, "{v}{unit}")?;
            }
        }
        Ok(())
    }
}

impl From<std::time::Duration> for GoDuration {
    fn from(d: std::time::Duration) -> GoDuration {
        GoDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
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

    #[test]
    fn converts_from_std_durations_saturating() {
        use std::time::Duration;
        assert_eq!(
            GoDuration::from(Duration::from_secs(3600)),
            GoDuration::from_secs(3600)
        );
        assert_eq!(GoDuration::from(Duration::from_nanos(7)), GoDuration(7));
        assert_eq!(GoDuration::from(Duration::MAX), GoDuration(i64::MAX));
    }
}
