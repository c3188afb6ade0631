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
use fleetsync_model::status::{reachability, unreachable_cause, Reach};
use fleetsync_model::{ClusterConditions, Phase, RolloutPhase};
use fleetsync_store::rollout::RolloutState;
use fleetsync_store::{QueueStats, StatusFilter, StatusRead};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncSetPhaseLabel {
    tenant: String,
    syncset: String,
    phase: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantConditionLabel {
    tenant: String,
    condition: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantPhaseLabel {
    tenant: String,
    phase: &'static str,
}

/// The conditions `fleetsync_clusters` counts, in [`ClusterConditions`]' order.
const CONDITIONS: [&str; 4] = ["Ready", "Progressing", "Degraded", "Stale"];

/// Every phase a rollout can be in, so that a tenant's series exist at 0.
const ROLLOUT_PHASES: [RolloutPhase; 5] = [
    RolloutPhase::Progressing,
    RolloutPhase::Paused,
    RolloutPhase::Completed,
    RolloutPhase::RolledBack,
    RolloutPhase::Failed,
];

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
    unreachable_clusters: Family<TenantLabel, Gauge>,
    /// Tenants that have had an unreachable cluster: set to 0 when none is left, so a
    /// tenant's series does not keep its last value.
    unreachable_tenants: Arc<Mutex<BTreeSet<String>>>,
    syncset_keys: Family<SyncSetPhaseLabel, Gauge>,
    /// The SyncSets whose series were set at the last scrape: one gone since loses them.
    syncsets: Arc<Mutex<BTreeSet<(String, String)>>>,
    clusters: Family<TenantConditionLabel, Gauge>,
    /// The tenants whose clusters were counted at the last scrape: one gone since loses
    /// its series.
    cluster_tenants: Arc<Mutex<BTreeSet<String>>>,
    rollouts: Family<TenantPhaseLabel, Gauge>,
    /// Tenants that have had a rollout, as `unreachable_tenants`.
    rollout_tenants: Arc<Mutex<BTreeSet<String>>>,
    pub(crate) http: http::HttpMetrics,
}

impl QueueMetrics {
    /// Creates the gauges and registers them under the `fleetsync` prefix.
    pub fn register(registry: &mut Registry) -> QueueMetrics {
        let r = registry.sub_registry_with_prefix("fleetsync");
        let http = http::HttpMetrics::register(r);
        let m = QueueMetrics { http, ..QueueMetrics::default() };
        r.register("keys", "Work keys by phase", m.keys.clone());
        r.register(
            "parked_keys",
            "Work keys parked after max attempts, waiting for a change or a retry",
            m.parked_keys.clone(),
        );
        r.register(
            "oldest_ready_age_seconds",
            "How long the oldest claimable key has waited (0 if none waits)",
            m.oldest_ready_age.clone(),
        );
        r.register("event_log_last_seq", "Sequence number of the newest event", m.event_log_last_seq.clone());
        r.register("watches", "Event watches open on this process", m.watches.clone());
        r.register(
            "unreachable_clusters",
            "Clusters whose reachability condition is Unreachable, per tenant (0 once a tenant has none left)",
            m.unreachable_clusters.clone(),
        );
        r.register(
            "syncset_keys",
            "Work keys by tenant, SyncSet and phase (the series of a SyncSet without keys go)",
            m.syncset_keys.clone(),
        );
        r.register(
            "clusters",
            "Clusters with keys by tenant and condition (Ready, Progressing, Degraded; Stale: no sign of life \
             within the stale window, also counted in one of the others)",
            m.clusters.clone(),
        );
        r.register(
            "rollouts",
            "SyncSets' rollouts by tenant and phase (RolledBack and Failed stay until a new generation)",
            m.rollouts.clone(),
        );
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
        let mut seen = self.syncsets.lock().unwrap_or_else(PoisonError::into_inner);
        for (tenant, syncset) in seen.iter().filter(|at| !stats.by_syncset.contains_key(*at)) {
            for phase in Phase::ALL {
                let label =
                    SyncSetPhaseLabel { tenant: tenant.clone(), syncset: syncset.clone(), phase: phase.as_str() };
                self.syncset_keys.remove(&label);
            }
        }
        for ((tenant, syncset), counts) in &stats.by_syncset {
            for (phase, n) in counts {
                let label =
                    SyncSetPhaseLabel { tenant: tenant.clone(), syncset: syncset.clone(), phase: phase.as_str() };
                self.syncset_keys.get_or_create(&label).set(saturate(*n));
            }
        }
        *seen = stats.by_syncset.keys().cloned().collect();
        self.oldest_ready_age.set(stats.oldest_ready_age.as_secs_f64());
        self.event_log_last_seq.set(saturate(stats.last_event_seq));
    }

    /// Sets the unreachable clusters per tenant; a tenant that had some and is not in
    /// `counts` now is set to 0.
    pub fn set_unreachable(&self, counts: &BTreeMap<String, u64>) {
        let mut tenants = self.unreachable_tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants.extend(counts.keys().cloned());
        for tenant in tenants.iter() {
            let n = counts.get(tenant).copied().unwrap_or(0);
            self.unreachable_clusters.get_or_create(&TenantLabel { tenant: tenant.clone() }).set(saturate(n));
        }
    }
}

impl QueueMetrics {
    /// Sets the clusters of each tenant by condition.
    pub fn set_clusters(&self, by_tenant: &BTreeMap<String, ClusterConditions>) {
        let mut seen = self.cluster_tenants.lock().unwrap_or_else(PoisonError::into_inner);
        for tenant in seen.iter().filter(|t| !by_tenant.contains_key(*t)) {
            for condition in CONDITIONS {
                self.clusters.remove(&TenantConditionLabel { tenant: tenant.clone(), condition });
            }
        }
        *seen = by_tenant.keys().cloned().collect();
        for (tenant, c) in by_tenant {
            for (condition, n) in CONDITIONS.into_iter().zip([c.ready, c.progressing, c.degraded, c.stale]) {
                self.clusters
                    .get_or_create(&TenantConditionLabel { tenant: tenant.clone(), condition })
                    .set(saturate(n));
            }
        }
    }

    /// Sets the rollouts per tenant and phase from `rollouts`; every phase of a tenant
    /// that has or had one is set (0 where none is), so a series does not keep a value
    /// it no longer has.
    pub fn set_rollouts(&self, rollouts: &[RolloutState]) {
        let mut counts: BTreeMap<(&str, &'static str), i64> = BTreeMap::new();
        for r in rollouts {
            *counts.entry((r.tenant.as_str(), r.phase.as_str())).or_insert(0) += 1;
        }
        let mut tenants = self.rollout_tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants.extend(rollouts.iter().map(|r| r.tenant.clone()));
        for tenant in tenants.iter() {
            for phase in ROLLOUT_PHASES.map(RolloutPhase::as_str) {
                let n = counts.get(&(tenant.as_str(), phase)).copied().unwrap_or(0);
                self.rollouts.get_or_create(&TenantPhaseLabel { tenant: tenant.clone(), phase }).set(n);
            }
        }
    }
}

/// Unreachable clusters per tenant (of `tenant` only, if given), by the reachability
/// rule of every view ([`reachability`](fleetsync_model::status::reachability)), read
/// without a scan of every key: the failed and parked keys (an index holds the keys
/// with an error), and then, for each cluster one of them says did not answer, that
/// cluster's keys. Nothing more is read while every cluster answers. A cluster whose
/// only such keys are being run again right now (Applying) is counted at the next read.
pub async fn unreachable_clusters(
    store: &dyn StatusRead,
    tenant: Option<&str>,
) -> fleetsync_store::Result<BTreeMap<String, BTreeSet<String>>> {
    let failing = StatusFilter {
        tenant: tenant.map(str::to_string),
        phases: vec![Phase::Failed, Phase::Parked],
        ..StatusFilter::default()
    };
    let suspects: BTreeSet<(String, String)> = store
        .status_list(&failing)
        .await?
        .into_iter()
        .filter(|k| k.last_error.as_deref().and_then(unreachable_cause).is_some())
        .map(|k| (k.key.tenant, k.key.cluster))
        .collect();
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (tenant, cluster) in suspects {
        let keys =
            StatusFilter { tenant: Some(tenant.clone()), cluster: Some(cluster.clone()), ..StatusFilter::default() };
        if reachability(&store.status_list(&keys).await?).is_some_and(|r| r.state == Reach::Unreachable) {
            found.entry(tenant).or_default().insert(cluster);
        }
    }
    Ok(found)
}

/// How many clusters of each tenant [`unreachable_clusters`] found.
fn counted(found: BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, u64> {
    found.into_iter().map(|(tenant, clusters)| (tenant, clusters.len() as u64)).collect()
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
    state.queue_metrics.set_unreachable(&counted(unreachable_clusters(&*state.store, None).await?));
    state.queue_metrics.set_rollouts(&state.store.rollout_list(None, None).await?);
    // Each tenant with keys: the clusters' conditions, read from the per-cluster counts.
    let tenants: BTreeSet<&str> = stats.by_syncset.keys().map(|(t, _)| t.as_str()).collect();
    let mut clusters = BTreeMap::new();
    for tenant in tenants {
        clusters.insert(tenant.to_string(), state.store.cluster_conditions(tenant, state.stale_after).await?);
    }
    state.queue_metrics.set_clusters(&clusters);
    state.queue_metrics.watches.set(i64::try_from(state.watches.open()).unwrap_or(i64::MAX));
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    text::encode(&state.registry, accept)
        .map_err(|e| ApiError::Internal { step: "encoding metrics", message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn gauges_follow_stats() {
        let mut registry = Registry::default();
        let m = QueueMetrics::register(&mut registry);
        let mut stats =
            QueueStats { oldest_ready_age: Duration::from_millis(1500), last_event_seq: 7, ..Default::default() };
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

        let at = |t: &str, s: &str| (t.to_string(), s.to_string());
        let counts =
            |applied: u64| Phase::ALL.iter().map(|p| (*p, if *p == Phase::Applied { applied } else { 0 })).collect();
        stats.by_syncset = [(at("a", "web"), counts(4)), (at("a", "db"), counts(2))].into();
        m.set(&stats);
        let out = encoded(&registry);
        assert!(out.contains("fleetsync_syncset_keys{tenant=\"a\",syncset=\"web\",phase=\"Applied\"} 4"), "{out}");
        assert!(out.contains("fleetsync_syncset_keys{tenant=\"a\",syncset=\"db\",phase=\"Failed\"} 0"), "{out}");
        stats.by_syncset = [(at("a", "web"), counts(5))].into();
        m.set(&stats);
        let out = encoded(&registry);
        assert!(out.contains("syncset=\"web\",phase=\"Applied\"} 5") && !out.contains("syncset=\"db\""), "{out}");
        let conditions = ClusterConditions { ready: 7, progressing: 1, degraded: 2, stale: 1 };
        m.set_clusters(&[("a".to_string(), conditions)].into());
        let out = encoded(&registry);
        assert!(out.contains("fleetsync_clusters{tenant=\"a\",condition=\"Degraded\"} 2"), "{out}");
        assert!(out.contains("fleetsync_clusters{tenant=\"a\",condition=\"Stale\"} 1"), "{out}");
        m.set_clusters(&BTreeMap::new());
        assert!(
            !encoded(&registry).contains("fleetsync_clusters{tenant=\"a\""),
            "a tenant without keys loses its series"
        );
    }

    #[test]
    fn rollouts_are_counted_per_tenant_and_phase_and_go_back_to_zero() {
        use fleetsync_model::Timestamp;
        let mut registry = Registry::default();
        let m = QueueMetrics::register(&mut registry);
        let rollout = |tenant: &str, syncset: &str, phase| RolloutState {
            tenant: tenant.into(),
            syncset: syncset.into(),
            phase,
            step: 0,
            revision: 2,
            stable: 1,
            reason: None,
            step_started_at: Timestamp(0),
            healthy_since: None,
            promoted: false,
            version: 1,
            updated_at: Timestamp(0),
        };
        m.set_rollouts(&[
            rollout("a", "web", RolloutPhase::RolledBack),
            rollout("a", "db", RolloutPhase::Progressing),
            rollout("b", "web", RolloutPhase::Progressing),
        ]);
        let out = encoded(&registry);
        assert!(out.contains("fleetsync_rollouts{tenant=\"a\",phase=\"RolledBack\"} 1"), "{out}");
        assert!(out.contains("fleetsync_rollouts{tenant=\"b\",phase=\"Progressing\"} 1"), "{out}");
        assert!(out.contains("fleetsync_rollouts{tenant=\"b\",phase=\"RolledBack\"} 0"), "{out}");
        m.set_rollouts(&[rollout("a", "db", RolloutPhase::Completed)]);
        let out = encoded(&registry);
        assert!(out.contains("fleetsync_rollouts{tenant=\"a\",phase=\"RolledBack\"} 0"), "{out}");
        assert!(out.contains("fleetsync_rollouts{tenant=\"b\",phase=\"Progressing\"} 0"), "{out}");
    }

    fn encoded(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).expect("encode");
        out
    }

    /// Clusters counted per tenant by the reachability rule: one whose key failed to
    /// reach it, not one whose other key applied since, nor one failing otherwise; and
    /// back to 0 once it answers.
    #[tokio::test]
    async fn unreachable_clusters_per_tenant() {
        use fleetsync_model::{Endpoint, WorkKey};
        use fleetsync_store::sqlite::SqliteStore;
        use fleetsync_store::{ClaimParams, Completion, Objects, RunOutcome, StoreConfig, WorkQueue};
        use fleetsync_testkit::{cluster_name, hive_fleet, syncset_name, FleetShape};

        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open");
        let shape = FleetShape { clusters: 3, syncsets: 2, resources: 1 };
        store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
        let refused =
            "v1/ConfigMap apps/a: unreachable: https://10.0.0.5:6443/api/v1: tcp connect error: Connection refused";
        // cluster 0: both keys fail to reach it; cluster 1: one fails so, the other applies
        // after it; cluster 2: one key fails with a target's own answer.
        let outcome = |key: &WorkKey, generation: i64| match (
            key.cluster == cluster_name(0),
            key.cluster == cluster_name(1),
            key.syncset == syncset_name(0),
        ) {
            (true, _, _) | (_, true, true) => RunOutcome::Failed { error: refused.into() },
            (false, false, true) => {
                RunOutcome::Failed { error: "v1/ConfigMap apps/a: invalid: 422 Unprocessable Entity".into() }
            }
            _ => RunOutcome::Applied { generation, inventory: vec![], rendered: None },
        };
        let run = |claimed: Vec<fleetsync_store::ClaimedItem>, first: bool| {
            claimed
                .into_iter()
                .filter(|c| (c.key.syncset == syncset_name(0)) == first)
                .map(|c| Completion {
                    outcome: outcome(&c.key, c.generation),
                    key: c.key,
                    fence: c.fence,
                    resources: vec![],
                })
                .collect::<Vec<_>>()
        };
        let claimed =
            store.work_claim(ClaimParams::new("w", 6, std::time::Duration::from_secs(30))).await.expect("claim");
        assert_eq!(claimed.len(), 6);
        store.work_complete(run(claimed.clone(), true)).await.expect("the failures first");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        store.work_complete(run(claimed, false)).await.expect("then the others");

        let counts = counted(unreachable_clusters(&store, None).await.expect("count"));
        assert_eq!(counts, BTreeMap::from([("default".to_string(), 1)]));
        let mut registry = Registry::default();
        let m = QueueMetrics::register(&mut registry);
        m.set_unreachable(&counts);
        assert!(
            encoded(&registry).contains("fleetsync_unreachable_clusters{tenant=\"default\"} 1"),
            "{}",
            encoded(&registry)
        );

        // Cluster 0 answers again: a retry of one key applies.
        let key = WorkKey::new("default", cluster_name(0), syncset_name(1));
        store.work_retry(&key).await.expect("retry");
        let again =
            store.work_claim(ClaimParams::new("w", 6, std::time::Duration::from_secs(30))).await.expect("claim");
        let done = again
            .into_iter()
            .filter(|c| c.key == key)
            .map(|c| Completion {
                outcome: RunOutcome::Applied { generation: c.generation, inventory: vec![], rendered: None },
                key: c.key,
                fence: c.fence,
                resources: vec![],
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        store.work_complete(done).await.expect("applied");
        let counts = counted(unreachable_clusters(&store, None).await.expect("count"));
        assert_eq!(counts, BTreeMap::new());
        m.set_unreachable(&counts);
        assert!(
            encoded(&registry).contains("fleetsync_unreachable_clusters{tenant=\"default\"} 0"),
            "{}",
            encoded(&registry)
        );
    }
}
