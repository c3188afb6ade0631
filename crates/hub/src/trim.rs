//! The hub's maintenance of the event log: trimming it to its retention now and then.
//!
//! It lives with the hub, not with the runtime's per-worker loops (lease renewal,
//! heartbeats, the resync in `fleetsync_runtime`): it serves the API's event log, so
//! a `fleetsync worker` without the API does not run it. Several hubs trimming one
//! PostgreSQL store at once is safe.

use fleetsync_store::{EventLog, EventRetention};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What of the event log to keep, and how often to trim it to that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTrim {
    keep: EventRetention,
    every: Duration,
}

/// Why an [`EventTrim`] cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum TrimError {
    #[error("the event log's trim interval must be above zero")]
    ZeroInterval,
}

impl EventTrim {
    /// Keep `keep` of the log, trimming at start and then every `every`.
    pub fn new(keep: EventRetention, every: Duration) -> Result<EventTrim, TrimError> {
        if every.is_zero() {
            return Err(TrimError::ZeroInterval);
        }
        Ok(EventTrim { keep, every })
    }

    pub fn keep(&self) -> EventRetention {
        self.keep
    }

    pub fn every(&self) -> Duration {
        self.every
    }

    /// Whether trimming can drop anything: `false` when the retention is unbounded
    /// both by count and by age, and then the hub does not trim at all.
    pub fn bounded(&self) -> bool {
        self.keep != EventRetention::default()
    }

    /// Trims now and then every `every`, until `shutdown`. A failed trim is logged
    /// and tried again at the next tick.
    pub(crate) async fn run(self, store: Arc<dyn EventLog>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            match store.events_trim(self.keep).await {
                Ok(t) if t.deleted > 0 => {
                    tracing::info!(deleted = t.deleted, horizon = t.horizon, "trimmed the event log")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "trimming the event log failed; trying again later"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_needs_an_interval_and_a_bound_to_do_anything() {
        let by_count = EventRetention { max_events: Some(10), max_age: None };
        assert!(matches!(EventTrim::new(by_count, Duration::ZERO), Err(TrimError::ZeroInterval)));
        let trim = EventTrim::new(by_count, Duration::from_secs(60)).expect("valid");
        assert!(trim.bounded());
        assert_eq!((trim.keep(), trim.every()), (by_count, Duration::from_secs(60)));
        let unbounded = EventTrim::new(EventRetention::default(), Duration::from_secs(60)).expect("valid");
        assert!(!unbounded.bounded(), "nothing to trim");
    }
}
