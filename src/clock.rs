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

/// `2024-05-01T12:00:00Z`: Unix seconds as an RFC 3339 date and time, UTC
/// (proleptic Gregorian), for messages and logs that people read.
pub fn rfc3339(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
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
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

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
