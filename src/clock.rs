//! Time, for the whole crate: token times are Unix seconds ([`unix_now`]); the
//! identity manager's are Unix milliseconds ([`Clock::now_ms`]). Both read the
//! same system clock ([`SystemClock`]); tests pass times in or use their own
//! `Clock`.

/// A clock in Unix milliseconds.
pub trait Clock: Send + Sync {
    /// Now.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Seconds since the Unix epoch by the system clock (0 if the clock is before
/// it): [`SystemClock`] in whole seconds.
pub fn unix_now() -> i64 {
    SystemClock.now_ms().div_euclid(1000)
}

/// A duration as an operator writes it (and `wid`'s flags read it): `720h`,
/// `1h30m`, `30s`, `250ms`, `0s` (see [`crate::model::GoDuration`]'s `Display`).
pub(crate) fn span(d: std::time::Duration) -> String {
    crate::model::GoDuration::from(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_flags_are_written() {
        use std::time::Duration;
        assert_eq!(span(Duration::from_secs(720 * 3600)), "720h");
        assert_eq!(span(Duration::from_secs(5400)), "1h30m");
        assert_eq!(span(Duration::from_secs(30)), "30s");
        assert_eq!(span(Duration::from_millis(250)), "250ms");
        assert_eq!(span(Duration::ZERO), "0s");
    }

    #[test]
    fn seconds_and_milliseconds_read_one_clock() {
        let ms = SystemClock.now_ms();
        let s = unix_now();
        assert!(s >= ms / 1000 && s <= ms / 1000 + 1, "{s} vs {ms}");
        assert!(s > 1_600_000_000, "the clock reads {s}");
    }
}
