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

/// An RFC 3339 date and time as Go's `time.Time` writes it in JSON (Consul's
/// `ExpirationTime`, Transit's `creation_time`:
/// `2024-05-01T12:00:00.123456789Z`, or with an offset such as `+02:00`) as
/// Unix milliseconds, digits past the milliseconds dropped; `None` for
/// anything else (a space for the `T` too).
#[cfg(any(feature = "consul", feature = "transit"))]
pub(crate) fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, c: &[u8]| b.get(at).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, min, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    // 60: a leap second, as RFC 3339 allows.
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if sep(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        // The first three digits are milliseconds; the rest are dropped.
        for k in 0..3 {
            let d = b
                .get(start + k)
                .filter(|_| start + k < i)
                .map_or(0, |d| d - b'0');
            millis = millis * 10 + i64::from(d);
        }
    }
    let offset_secs = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b":") => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    Some(secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "consul", feature = "transit"))]
    fn parse_rfc3339_secs(s: &str) -> Option<i64> {
        parse_rfc3339_ms(s).map(|ms| ms.div_euclid(1000))
    }

    #[cfg(any(feature = "consul", feature = "transit"))]
    #[test]
    fn rfc3339_times_as_go_writes_them() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00Z"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00.123456789Z"),
            Some(1_714_564_800_123)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00.5Z"),
            Some(1_714_564_800_500)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T07:30:00-04:30"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T00:00:00Z"),
            Some(951_782_400_000)
        );
        for bad in [
            "",
            "2024-05-01",
            "2024-05-01T12:00:00",
            "2024-13-01T12:00:00Z",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00Zjunk",
            "2024-05-01T12:00:00+2:00",
            "２０２４-05-01T12:00:00Z",
            "2024-05-01T12:00:00+99:00",
            "+024-05-01T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[cfg(any(feature = "consul", feature = "transit"))]
    #[test]
    fn rfc3339_times_as_transit_writes_them() {
        assert_eq!(parse_rfc3339_secs("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_secs("2023-11-14T22:13:20Z"),
            Some(1_700_000_000)
        );
        assert_eq!(
            parse_rfc3339_secs("2023-11-14T22:13:20.865092437Z"),
            Some(1_700_000_000)
        );
        assert_eq!(
            parse_rfc3339_secs("2023-11-15T00:13:20+02:00"),
            Some(1_700_000_000)
        );
        assert_eq!(
            parse_rfc3339_secs("2000-02-29T12:00:00Z"),
            Some(951_825_600)
        );
        for bad in [
            "",
            "2023-11-14 22:13:20Z",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20Zx",
            "２023-11-14T22:13:20Z",
        ] {
            assert_eq!(parse_rfc3339_secs(bad), None, "{bad:?}");
        }
    }

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
