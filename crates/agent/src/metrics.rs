//! What an agent tells Prometheus and its probes: reports acknowledged and pending,
//! exchanges with the hub that failed, watches of the target that broke, and whether
//! its last exchange with the hub succeeded (its readiness).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The agent's metrics. Cheap to clone: clones share the same values.
#[derive(Debug, Clone, Default)]
pub struct AgentMetrics {
    acknowledged: Counter,
    send_failures: Counter,
    pending: Gauge,
    watched_kinds: Gauge,
    watch_failures: Counter,
    last_acknowledged: Gauge<f64, AtomicU64>,
    hub_ok: Arc<AtomicBool>,
}

impl AgentMetrics {
    /// Creates the metrics and registers them under the `fleetsync_agent` prefix.
    pub fn register(registry: &mut Registry) -> AgentMetrics {
        let r = registry.sub_registry_with_prefix("fleetsync_agent");
        let m = AgentMetrics::default();
        r.register("reports_acknowledged", "Reports of live state the hub acknowledged", m.acknowledged.clone());
        r.register(
            "send_failures",
            "Batches of reports the hub did not acknowledge (to be sent again)",
            m.send_failures.clone(),
        );
        r.register("pending_reports", "Reports waiting to be acknowledged by the hub", m.pending.clone());
        r.register("watched_kinds", "Kinds of resources watched on the target", m.watched_kinds.clone());
        r.register(
            "watch_failures",
            "Lists or watches of the target that failed (each followed by a re-list)",
            m.watch_failures.clone(),
        );
        r.register(
            "last_acknowledged_timestamp_seconds",
            "When the hub last acknowledged reports (Unix time; 0 before the first)",
            m.last_acknowledged.clone(),
        );
        m
    }

    /// Whether the agent's last exchange with the hub succeeded (none yet: not ready).
    pub fn hub_reachable(&self) -> bool {
        self.hub_ok.load(Ordering::Relaxed)
    }

    pub(crate) fn acknowledged(&self, reports: usize, pending: usize) {
        self.acknowledged.inc_by(reports as u64);
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.last_acknowledged.set(now.as_secs_f64());
        self.hub_ok.store(true, Ordering::Relaxed);
    }

    pub(crate) fn not_acknowledged(&self, pending: usize) {
        self.send_failures.inc();
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        self.hub_ok.store(false, Ordering::Relaxed);
    }

    /// The hub answered (`true`) or not the request for what to watch.
    pub(crate) fn hub_answered(&self, ok: bool) {
        self.hub_ok.store(ok, Ordering::Relaxed);
    }

    pub(crate) fn pending(&self, pending: usize) {
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    pub(crate) fn watching(&self, kinds: usize) {
        self.watched_kinds.set(i64::try_from(kinds).unwrap_or(i64::MAX));
    }

    pub(crate) fn watch_failed(&self) {
        self.watch_failures.inc();
    }
}
