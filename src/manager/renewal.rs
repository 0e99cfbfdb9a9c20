//! When to renew: pure functions of the expiry times, the clock and a source of
//! jitter, so the schedule is testable without sleeping.

use std::time::Duration;

/// Renewal timing.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RenewalPolicy {
    /// Never renew sooner than this after now (default 10 s)...
    pub min_wait: Duration,
    /// ...plus up to this much jitter (default 1 s).
    pub min_wait_jitter: Duration,
    /// Jitter added to the half-lifetime wait, as a fraction of it (default 0.10).
    pub jitter_fraction: f64,
    /// First retry delay after a signer error (default 1 s); doubles per failure...
    pub backoff_base: Duration,
    /// ...up to this (default 1 h).
    pub backoff_cap: Duration,
}

impl Default for RenewalPolicy {
    fn default() -> Self {
        RenewalPolicy {
            min_wait: Duration::from_secs(10),
            min_wait_jitter: Duration::from_secs(1),
            jitter_fraction: 0.10,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(3600),
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl RenewalPolicy {
    /// When to renew (Unix milliseconds), given the identities' expiry times
    /// (Unix seconds; `None` for identities without `exp`, which never need
    /// renewing) and two jitter draws in `[0, 1)`: half the remaining lifetime of
    /// the soonest-expiring identity plus up to `jitter_fraction` of that, but
    /// never sooner than `min_wait` plus up to `min_wait_jitter`. `None` when no
    /// identity expires.
    pub fn renew_at_ms(
        &self,
        expiries: impl IntoIterator<Item = Option<i64>>,
        now_ms: i64,
        jitter: (f64, f64),
    ) -> Option<i64> {
        let soonest = expiries.into_iter().flatten().min()?;
        let remaining = soonest.saturating_mul(1000).saturating_sub(now_ms).max(0);
        let half = remaining / 2;
        // Caller-given durations and fractions may be huge: saturate, never wrap.
        let wait = half
            .saturating_add((half as f64 * self.jitter_fraction * jitter.0.clamp(0.0, 1.0)) as i64);
        let floor = ms(self.min_wait)
            .saturating_add((ms(self.min_wait_jitter) as f64 * jitter.1.clamp(0.0, 1.0)) as i64);
        Some(now_ms.saturating_add(wait.max(floor)))
    }

    /// The delay before retry number `failures` (1 for the first) after signer
    /// errors: `backoff_base * 2^(failures - 1)`, capped at `backoff_cap`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(40);
        self.backoff_base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.backoff_cap)
            .min(self.backoff_cap)
    }
}

/// A source of jitter draws in `[0, 1)`.
pub trait Jitter: Send + Sync {
    /// The next draw.
    fn draw(&self) -> f64;
}

/// Jitter from the operating system's random source.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsJitter;

impl Jitter for OsJitter {
    fn draw(&self) -> f64 {
        let mut b = [0u8; 8];
        // A failed read gives no jitter, never a panic.
        if getrandom::fill(&mut b).is_err() {
            return 0.0;
        }
        (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
    }
}
