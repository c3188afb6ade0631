//! Prometheus metrics of the queue, read from the store at each scrape, and the build's
//! version; served in the classic text format or, when asked, OpenMetrics ([`text`]).
//!
//! The queue lives in the store, not in this process, so its gauges are refreshed
//! from `queue_stats()` when `/metrics` is scraped rather than kept up to date by
//! events: every hub replica then reports the same, true numbers.

use crate::error::{ApiError, Result};
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use fleetsync_model::Phase;
use fleetsync_store::QueueStats;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

pub mod http;
pub mod process;
pub mod text;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// The metrics the API serves of its own: the queue's gauges (read from the store),
/// open watches, the build, and the API's requests ([`http`]). Cheap to clone: clones
/// share the same values.
#[derive(Debug, Clone, Default)]
pub struct QueueMetrics {
    keys: Family<PhaseLabel, Gauge>,
    parked_keys: Gauge,
    oldest_ready_age: Gauge<f64, AtomicU64>,
    event_log_last_seq: Gauge,
    watches: Gauge,
    pub(crate) http: http::HttpMetrics,
}

impl QueueMetrics {
    /// Creates the gauges and registers them under the `fleetsync` prefix.
    pub fn register(registry: &mut Registry) -> QueueMetrics {
        let r = registry.sub_registry_with_prefix("fleetsync");
        let http = http::HttpMetrics::register(r);
        let m = QueueMetrics { http, ..QueueMetrics::default() };
        r.register("keys", "Work keys by phase", m.keys.clone());
        r.register("parked_keys", "Work keys parked after max attempts, waiting for a change or a retry", m.parked_keys.clone());
        r.register(
            "oldest_ready_age_seconds",
            "How long the oldest claimable key has waited (0 if none waits)",
            m.oldest_ready_age.clone(),
        );
        r.register("event_log_last_seq", "Sequence number of the newest event", m.event_log_last_seq.clone());
        r.register("watches", "Event watches open on this process", m.watches.clone());
        let build: Family<VersionLabel, Gauge> = Family::default();
        build.get_or_create(&VersionLabel { version: env!("CARGO_PKG_VERSION") }).set(1);
        r.register("build_info", "The version of the fleetsync build serving this endpoint (always 1)", build);
        m
    }

    /// Sets every gauge from `stats`; phases with no keys are set to 0 so a phase
    /// that empties does not keep its last value.
    pub fn set(&self, stats: &QueueStats) {
        for phase in Phase::ALL {
            let n = stats.by_phase.get(&phase).copied().unwrap_or(0);
            self.keys.get_or_create(&PhaseLabel { phase: phase.as_str() }).set(saturate(n));
        }
        self.parked_keys.set(saturate(stats.by_phase.get(&Phase::Parked).copied().unwrap_or(0)));
        self.oldest_ready_age.set(stats.oldest_ready_age.as_secs_f64());
        self.event_log_last_seq.set(saturate(stats.last_event_seq));
    }
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `GET /metrics`. If the store cannot be read the scrape fails (500) rather than
/// report stale queue gauges: Prometheus records the failed scrape. The classic text
/// format unless the `Accept` header asks for OpenMetrics.
pub async fn scrape(State(state): State<AppState>, headers: HeaderMap) -> Result<impl IntoResponse> {
    let stats = state.store.queue_stats().await?;
    state.queue_metrics.set(&stats);
    state.queue_metrics.watches.set(i64::try_from(state.watches.open()).unwrap_or(i64::MAX));
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    text::encode(&state.registry, accept).map_err(|e| ApiError::Internal { step: "encoding metrics", message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn gauges_follow_stats() {
        let mut registry = Registry::default();
        let m = QueueMetrics::register(&mut registry);
        let mut stats = QueueStats { oldest_ready_age: Duration::from_millis(1500), last_event_seq: 7, ..Default::default() };
        stats.by_phase.insert(Phase::Pending, 3);
        stats.by_phase.insert(Phase::Parked, 1);
        m.set(&stats);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        assert!(out.contains("fleetsync_keys{phase=\"Pending\"} 3"), "{out}");
        assert!(out.contains("fleetsync_keys{phase=\"Applied\"} 0"), "{out}");
        assert!(out.contains("fleetsync_parked_keys 1"), "{out}");
        assert!(out.contains("fleetsync_oldest_ready_age_seconds 1.5"), "{out}");
        assert!(out.contains("fleetsync_event_log_last_seq 7"), "{out}");
    }
}
