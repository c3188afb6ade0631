//! `spec.health`: in push mode the hub reads back what a run applied and waits, within
//! a timeout, until every object is ready by the rules agents use
//! ([`crate::readiness`]). A key whose objects are ready is `Applied`; one whose
//! objects are not ready by the timeout fails with the first reason, and is retried
//! and parked like any failure (so rollout gates and `dependsOn` see it). Left out,
//! nothing is read back.

use crate::error::FieldError;
use crate::rollout::Wait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long the hub waits for what a run applied to become ready, when left out.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How often it reads the objects back meanwhile, when left out.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The longest timeout: a run waiting for health holds its key (and one of its
/// worker's in-flight slots) that long.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The shortest interval between two readings of a key's objects.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `spec.health` of a SyncSet.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthSpec {
    /// How long to wait for every applied object to be ready (default 5m, at most 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Wait>,
    /// How often to read them back meanwhile (default 5s, at least 100ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Wait>,
}

impl HealthSpec {
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_TIMEOUT, |w| w.0)
    }

    pub fn interval(&self) -> Duration {
        self.interval.map_or(DEFAULT_INTERVAL, |w| w.0)
    }

    /// Both within their bounds, the interval no longer than the timeout.
    pub fn validate(&self) -> Result<(), FieldError> {
        let (timeout, interval) = (self.timeout(), self.interval());
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return Err(FieldError::new("spec.health.timeout", "must be longer than 0s and at most 1h, the limit"));
        }
        if interval < MIN_INTERVAL || interval > timeout {
            return Err(FieldError::new("spec.health.interval", "must be at least 100ms and at most the timeout"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> HealthSpec {
        serde_saphyr::from_str(yaml).expect("a health spec")
    }

    #[test]
    fn defaults_and_bounds() {
        let bare = spec("{}");
        assert_eq!((bare.timeout(), bare.interval()), (DEFAULT_TIMEOUT, DEFAULT_INTERVAL));
        assert!(bare.validate().is_ok());
        let quick = spec("{timeout: 3s, interval: 200ms}");
        assert_eq!((quick.timeout(), quick.interval()), (Duration::from_secs(3), Duration::from_millis(200)));
        assert!(quick.validate().is_ok());
        assert_eq!(spec("{timeout: 2h}").validate().expect_err("too long").field, "spec.health.timeout");
        assert_eq!(spec("{timeout: 0s}").validate().expect_err("zero").field, "spec.health.timeout");
        assert_eq!(spec("{interval: 10ms}").validate().expect_err("too often").field, "spec.health.interval");
        assert_eq!(spec("{timeout: 2s, interval: 5s}").validate().expect_err("longer").field, "spec.health.interval");
    }
}
