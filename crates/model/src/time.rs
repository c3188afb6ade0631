//! Time, injected. Leases, backoff and timeouts read a [`Clock`] rather than the
//! system time, so tests can move time forward without sleeping.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch. Serialized as RFC 3339 for people, stored as an
/// integer by the stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// This instant moved forward by `d` (saturating).
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// This instant moved back by `d` (saturating).
    pub fn minus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
    }

    /// How long after `earlier` this instant is; zero if it is not after it.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }

    /// RFC 3339 with millisecond precision, e.g. `2026-11-21T18:00:00.123Z`.
    pub fn to_rfc3339(self) -> String {
        let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(self.0).unwrap_or(0));
        humantime::format_rfc3339_millis(t).to_string()
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let t = humantime::parse_rfc3339_weak(&s).map_err(serde::de::Error::custom)?;
        let ms = t.duration_since(UNIX_EPOCH).map_err(serde::de::Error::custom)?.as_millis();
        Ok(Timestamp(i64::try_from(ms).map_err(serde::de::Error::custom)?))
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock that only moves when told to; for tests of leases and backoff.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(AtomicI64::new(start.0))
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Timestamp(1_000));
        assert_eq!(c.now(), Timestamp(1_000));
        c.advance(Duration::from_millis(1_500));
        assert_eq!(c.now(), Timestamp(2_500));
        assert_eq!(c.now().since(Timestamp(1_000)), Duration::from_millis(1_500));
        assert_eq!(Timestamp(0).since(c.now()), Duration::ZERO);
    }

    #[test]
    fn timestamps_round_trip_as_rfc3339() {
        let t = Timestamp(1_795_000_000_123);
        let s = serde_json::to_string(&t).expect("serialize");
        assert!(s.ends_with(".123Z\""), "{s}");
        let back: Timestamp = serde_json::from_str(&s).expect("parse");
        assert_eq!(back, t);
    }
}
