//! What fleetsync's tests, demo and benchmarks share: the `hive-fleet` workload
//! (docs/benchmarks.md#the-workload), a way to wait for a fleet to settle, and a
//! throwaway PostgreSQL server for tests that restart or crash the database ([`pg`]),
//! test certificate authorities (`tls`, with the feature `tls`), a mutation fuzzer
//! (`fuzz`, with the feature `fuzz`), and the programs tests run (`tools`, with the
//! feature `tools`).

#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod pg;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tools")]
pub mod tools;

use fleetsync_model::{
    ApplyMode, Cluster, ClusterSpec, Document, Endpoint, LabelSelector, Manifest, ObjectMeta, Phase, SyncSet,
    SyncSetSpec,
};
use fleetsync_store::{QueueStats, Store, StoreError};
use std::time::Duration;

/// The size of a hive-fleet: C clusters × S SyncSets × R resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetShape {
    pub clusters: usize,
    pub syncsets: usize,
    pub resources: usize,
}

impl FleetShape {
    /// The workload's default (docs/benchmarks.md#the-workload): 1,000 × 60 × 10 = 600,000 applies.
    pub const HIVE: FleetShape = FleetShape { clusters: 1000, syncsets: 60, resources: 10 };

    pub fn keys(&self) -> usize {
        self.clusters * self.syncsets
    }

    pub fn applies(&self) -> usize {
        self.keys() * self.resources
    }
}

pub fn cluster_name(i: usize) -> String {
    format!("cluster-{i:05}")
}

pub fn syncset_name(i: usize) -> String {
    format!("syncset-{i:03}")
}

/// Every document of the fleet: clusters on `endpoint`, labelled `fleet=hive`, and
/// SyncSets selecting them, each with `resources` ConfigMaps of about 1 KiB whose data
/// carries `revision`.
pub fn hive_fleet(shape: FleetShape, endpoint: impl Fn(usize) -> Endpoint, revision: &str) -> Vec<Document> {
    let clusters = (0..shape.clusters).map(|i| hive_cluster(i, endpoint(i)));
    let syncsets = (0..shape.syncsets).map(|i| hive_syncset(i, shape.resources, revision));
    clusters.chain(syncsets).collect()
}

pub fn hive_cluster(i: usize, endpoint: Endpoint) -> Document {
    let mut metadata = ObjectMeta::new(cluster_name(i));
    metadata.labels.insert("fleet".into(), "hive".into());
    Document::Cluster(Cluster { metadata, spec: ClusterSpec::new(endpoint) })
}

/// SyncSet `i` with `resources` ConfigMaps (~1 KiB each) at `revision`.
pub fn hive_syncset(i: usize, resources: usize, revision: &str) -> Document {
    let name = syncset_name(i);
    let filler = "x".repeat(900);
    let resources = (0..resources)
        .map(|r| {
            Manifest(serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{r:03}"), "namespace": "fleet-apps"},
                "data": {"revision": revision, "payload": filler},
            }))
        })
        .collect();
    let spec = SyncSetSpec {
        cluster_selector: Some(LabelSelector { match_labels: [("fleet".to_string(), "hive".to_string())].into() }),
        cluster_names: None,
        resource_apply_mode: ApplyMode::Upsert,
        resources,
        rollout: None,
    };
    Document::SyncSet(SyncSet { metadata: ObjectMeta::new(name), spec })
}

/// Keys still to be worked on: pending, applying, or failed and waiting to retry.
pub fn unsettled(stats: &QueueStats) -> u64 {
    [Phase::Pending, Phase::Applying, Phase::Failed].iter().map(|p| stats.by_phase.get(p).copied().unwrap_or(0)).sum()
}

/// Polls every 20 ms until no key is unsettled (every key Applied or Parked) or
/// `timeout` passes; returns the last stats and whether it settled.
pub async fn wait_settled(store: &dyn Store, timeout: Duration) -> Result<(QueueStats, bool), StoreError> {
    wait_settled_with(store, timeout, Duration::from_millis(20), |_| {}).await
}

/// [`wait_settled`], polling every `every` and showing each poll's stats to
/// `on_poll` (the demo's progress bar).
pub async fn wait_settled_with(
    store: &dyn Store,
    timeout: Duration,
    every: Duration,
    mut on_poll: impl FnMut(&QueueStats),
) -> Result<(QueueStats, bool), StoreError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let stats = store.queue_stats().await?;
        on_poll(&stats);
        if unsettled(&stats) == 0 {
            return Ok((stats, true));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok((stats, false));
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_documents_are_valid_and_sized() {
        let shape = FleetShape { clusters: 3, syncsets: 2, resources: 4 };
        let docs = hive_fleet(shape, |_| Endpoint::Simulator {}, "r1");
        assert_eq!(docs.len(), 5);
        for d in &docs {
            d.validate().expect("valid");
        }
        let Document::SyncSet(s) = &docs[3] else { panic!("syncset") };
        let len = s.spec.resources[0].encoded_len();
        assert!((900..1200).contains(&len), "≈1 KiB manifests, got {len}");
        assert_eq!(FleetShape::HIVE.applies(), 600_000);
    }
}
