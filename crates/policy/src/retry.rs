//! Capped exponential backoff with jitter, and when to give up (park) — for keys; and
//! when a backend's runner runs a failed write again ([`write_again`]), the one layer
//! that tries a store call again.

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

/// How a failed backend call counts for running it again, decided where the backend's
/// error is mapped (PostgreSQL: `postgres/failure.rs`; SQLite: `sqlite/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transience {
    /// Another transaction was in the way (a deadlock, a serialization failure, a busy
    /// or locked file): run again after a few milliseconds.
    Contention,
    /// The backend could not be reached or went away (a lost connection, a shutdown, a
    /// server starting up, too many connections): run again after longer pauses, so an
    /// outage of a second or so is outlasted.
    Outage,
    /// Worth trying later, but the call already waited long (for a free pooled
    /// connection): not run again here.
    Waited,
    /// Running it again would fail the same way (a syntax error, a constraint, a
    /// corrupt, read-only or full file).
    Permanent,
}

impl Transience {
    /// Whether the same call may succeed if tried again (what the store's
    /// `StoreError::is_transient` answers).
    pub fn is_transient(self) -> bool {
        self != Transience::Permanent
    }
}

/// Attempts of a write, in all, while it fails in a way [`write_again`] runs again.
pub const WRITE_ATTEMPTS: u32 = 4;

/// The pause before a backend's runner runs a write again that failed its `attempt`th
/// time (1-based) as `failed`, or `None` when it returns the error instead: after
/// [`WRITE_ATTEMPTS`], and at once for what is not worth running again here.
/// Contention waits `attempt · (2…9) ms` (`unit` in [0, 1) chooses); an outage 50 ms,
/// then 200 ms, then 800 ms (about a second in all).
pub fn write_again(failed: Transience, attempt: u32, unit: f64) -> Option<Duration> {
    if attempt >= WRITE_ATTEMPTS {
        return None;
    }
    match failed {
        Transience::Contention => {
            let ms = 2 + (unit.clamp(0.0, 0.999) * 8.0) as u64;
            Some(Duration::from_millis(u64::from(attempt) * ms))
        }
        Transience::Outage => Some(Duration::from_millis(50).saturating_mul(4u32.saturating_pow(attempt - 1))),
        Transience::Waited | Transience::Permanent => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_runs_again_only_after_a_transient_failure_and_at_most_four_times_in_all() {
        let pauses = |t: Transience, unit: f64| (1..=5).map(|a| write_again(t, a, unit)).collect::<Vec<_>>();
        let ms = |v: &[u64]| v.iter().map(|&m| Some(Duration::from_millis(m))).chain([None, None]).collect::<Vec<_>>();
        assert_eq!(pauses(Transience::Contention, 0.0), ms(&[2, 4, 6]));
        assert_eq!(pauses(Transience::Contention, 0.99), ms(&[9, 18, 27]));
        assert_eq!(pauses(Transience::Outage, 0.5), ms(&[50, 200, 800]));
        assert_eq!(pauses(Transience::Waited, 0.5), [None; 5]);
        assert_eq!(pauses(Transience::Permanent, 0.5), [None; 5]);
        assert!(Transience::Waited.is_transient() && !Transience::Permanent.is_transient());
    }

    #[test]
    fn doubles_from_base_up_to_cap() {
        let p =
            RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(360), max_attempts: 10, jitter: 0.0 };
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
