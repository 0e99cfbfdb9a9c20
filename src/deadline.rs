//! Deadlines from caller-given durations. `Instant + Duration` panics when the
//! sum does not fit (`Duration::MAX` always overflows); a caller asking to wait
//! "forever" gets the farthest deadline the clock can hold instead.

use std::time::{Duration, Instant};

/// `Instant::now() + timeout`, saturated: past what an `Instant` can hold, a
/// deadline more than a century away (no process waits that long).
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    if let Some(deadline) = now.checked_add(timeout) {
        return deadline;
    }
    let mut far = Duration::from_secs(1 << 32);
    while !far.is_zero() {
        if let Some(deadline) = now.checked_add(far) {
            return deadline;
        }
        far /= 2;
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturates_instead_of_panicking() {
        let before = Instant::now();
        assert!(deadline_after(Duration::MAX) > before + Duration::from_secs(3600 * 24 * 365));
        let d = deadline_after(Duration::from_millis(5));
        assert!(d >= before + Duration::from_millis(5));
        assert!(deadline_after(Duration::ZERO) >= before);
    }
}
