//! Injected faults: a fleet-wide failure rate, and per-cluster overrides that tests
//! set through the control endpoint (one cluster answering 403 to everything,
//! answering so late that the client times out, delivering watch events late, or
//! refusing to apply objects of some names, as an admission webhook might).

use crate::status::ApiError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One cluster's faults. The default is none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Faults {
    /// Answer every object request with this status (after the delay).
    pub status: Option<u16>,
    /// Delay every object request by this much on top of the latency model.
    pub delay_ms: Option<u64>,
    /// Every object request takes this long instead of a sample of the latency model:
    /// a cluster faster (or slower) than the fleet, such as a hub's own API server.
    #[serde(default, alias = "latencyMs", skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Deliver every watch event this much after its write (order kept): a watcher
    /// then sees a stale view for a while, as behind a slow API server.
    #[serde(default, alias = "watchDelayMs")]
    pub watch_delay_ms: Option<u64>,
    /// Answer applies of objects with these names with 500 (deletes and reads go
    /// through): a run stops at such a resource.
    #[serde(default, alias = "refuseApplies", skip_serializing_if = "Vec::is_empty")]
    pub refuse_applies: Vec<String>,
}

impl Faults {
    /// Only error statuses make sense to inject.
    pub fn validate(&self) -> Result<(), ApiError> {
        match self.status {
            Some(code) if !(400..=599).contains(&code) => {
                Err(ApiError::BadRequest(format!("status {code} is not an error status (400-599)")))
            }
            _ => Ok(()),
        }
    }

    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms.unwrap_or(0))
    }

    /// How long an object request waits: the cluster's own latency if it has one,
    /// else `sampled` (from the latency model), plus the delay.
    pub fn wait(&self, sampled: impl FnOnce() -> Duration) -> Duration {
        self.latency_ms.map_or_else(sampled, Duration::from_millis) + self.delay()
    }

    pub fn watch_delay(&self) -> Duration {
        Duration::from_millis(self.watch_delay_ms.unwrap_or(0))
    }

    /// The status an apply of the object `name` is refused with, if it is.
    pub fn refused_apply(&self, name: &str) -> Option<u16> {
        self.refuse_applies.iter().any(|n| n == name).then_some(500)
    }
}

/// The status a request fails with, if it does: the cluster's override first, then
/// (for writes only) the fleet-wide rate. `roll` is a uniform sample in [0, 1).
pub fn failure(faults: &Faults, write: bool, fail_rate: f64, fail_status: u16, roll: f64) -> Option<u16> {
    if faults.status.is_some() {
        return faults.status;
    }
    (write && roll < fail_rate).then_some(fail_status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_override_wins_and_the_rate_hits_writes_only() {
        let forbid = Faults { status: Some(403), ..Faults::default() };
        let refuse = Faults { refuse_applies: vec!["sec".into()], ..Faults::default() };
        assert_eq!((refuse.refused_apply("sec"), refuse.refused_apply("cm")), (Some(500), None));
        assert_eq!(failure(&forbid, false, 1.0, 503, 0.5), Some(403));
        assert_eq!(failure(&Faults::default(), true, 1.0, 503, 0.99), Some(503));
        assert_eq!(failure(&Faults::default(), false, 1.0, 503, 0.0), None);
        assert_eq!(failure(&Faults::default(), true, 0.0, 503, 0.0), None);
    }

    #[test]
    fn a_cluster_latency_replaces_the_model_and_the_delay_adds() {
        let ms = Duration::from_millis;
        assert_eq!(Faults::default().wait(|| ms(250)), ms(250));
        let hub = Faults { latency_ms: Some(10), ..Faults::default() };
        assert_eq!(hub.wait(|| ms(250)), ms(10));
        assert_eq!(Faults { delay_ms: Some(5), ..hub }.wait(|| ms(250)), ms(15));
        let parsed: Faults = serde_json::from_str(r#"{"latencyMs": 10}"#).expect("json");
        assert_eq!(parsed.latency_ms, Some(10));
    }

    #[test]
    fn only_error_statuses() {
        assert!(Faults { status: Some(200), ..Faults::default() }.validate().is_err());
        assert!(Faults { status: Some(429), delay_ms: Some(5), watch_delay_ms: Some(3000), ..Faults::default() }
            .validate()
            .is_ok());
    }
}
