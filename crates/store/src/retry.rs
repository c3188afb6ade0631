//! Capped exponential backoff with jitter, and when to give up (park).

use std::time::Duration;

/// How failures are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failure.
    pub base: Duration,
    /// No delay is longer than this.
    pub cap: Duration,
    /// After this many failed attempts of one generation the key is parked.
    pub max_attempts: u32,
    /// Fraction of the delay taken off at random (0 = none, 0.2 = up to 20% shorter),
    /// so keys that failed together do not retry together. Never adds, so `cap` holds.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { base: Duration::from_secs(1), cap: Duration::from_secs(360), max_attempts: 10, jitter: 0.2 }
    }
}

impl RetryPolicy {
    /// The delay before the next try after `attempt` failures (1-based), with `unit`
    /// (in [0, 1)) choosing the jitter. `min(cap, base·2^(attempt−1)) · (1 − jitter·unit)`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(62);
        let raw = self.base.saturating_mul(1u32 << exp.min(31)).min(self.cap);
        let raw = if exp > 31 { self.cap } else { raw };
        raw.mul_f64(1.0 - self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0))
    }

    /// [`delay`](Self::delay) with a random jitter.
    pub fn next_delay(&self, attempt: u32) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }

    /// Whether a key that has failed `attempts` times is parked rather than retried.
    pub fn should_park(&self, attempts: u32) -> bool {
        attempts >= self.max_attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_base_up_to_cap() {
        let p = RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(360), max_attempts: 10, jitter: 0.0 };
        let secs: Vec<u64> = (1..=11).map(|a| p.delay(a, 0.5).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 360, 360]);
        assert_eq!(p.delay(1_000, 0.0), Duration::from_secs(360));
    }

    #[test]
    fn jitter_only_shortens() {
        let p = RetryPolicy { jitter: 0.2, ..RetryPolicy::default() };
        assert_eq!(p.delay(3, 0.0), Duration::from_secs(4));
        assert_eq!(p.delay(3, 1.0), Duration::from_millis(3_200));
        for _ in 0..100 {
            let d = p.next_delay(20);
            assert!(d <= p.cap && d >= p.cap.mul_f64(0.8), "{d:?}");
        }
    }
}
