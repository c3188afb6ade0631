//! What a verdict is drawn from, gathered over every cluster: the counters, each
//! cluster's make-span against its critical path, and the generation each key left
//! on each resource. Served at `/_sim/report` and `/_sim/keys`, and returned by the
//! in-process accessors of [`crate::SimServer`].

use crate::cluster::Clusters;
use crate::record::{ClusterTiming, Totals};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Key (`tenant/cluster/syncset`) → resource (`apiVersion/Kind/namespace/name`,
/// namespace empty when cluster-scoped) → SyncSet generation on the cluster.
pub type KeyGenerations = BTreeMap<String, BTreeMap<String, i64>>;

/// The body of `GET /_sim/report`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub totals: Totals,
    pub clusters: BTreeMap<String, ClusterReport>,
}

/// One cluster's timing in milliseconds, and its applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterReport {
    pub makespan_ms: f64,
    pub critical_path_ms: f64,
    /// Fenced applies that took effect on the cluster.
    #[serde(default)]
    pub applies: u64,
}

impl From<ClusterTiming> for ClusterReport {
    fn from(t: ClusterTiming) -> Self {
        Self {
            makespan_ms: t.makespan.as_secs_f64() * 1e3,
            critical_path_ms: t.critical_path.as_secs_f64() * 1e3,
            applies: t.applies,
        }
    }
}

/// The body of `GET /_sim/keys/summary?prefix=`: keys with that prefix that hold
/// resources, and their resources counted by generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySummary {
    pub keys: u64,
    pub by_generation: BTreeMap<i64, u64>,
}

/// [`KeySummary`] of the keys starting with `prefix`.
pub fn key_summary(clusters: &Clusters, prefix: &str) -> KeySummary {
    let mut out = KeySummary::default();
    for (_, c) in clusters.all() {
        let st = c.lock();
        let mut keys = std::collections::HashSet::new();
        for owner in st.objects.owners().filter(|o| o.key.starts_with(prefix)) {
            keys.insert(owner.key.clone());
            *out.by_generation.entry(owner.generation).or_default() += 1;
        }
        out.keys += keys.len() as u64;
    }
    out
}

/// Every cluster that saw a fenced request, with its timing.
pub fn cluster_timings(clusters: &Clusters) -> BTreeMap<String, ClusterTiming> {
    clusters
        .all()
        .into_iter()
        .filter_map(|(name, c)| {
            let st = c.lock();
            (!st.record.is_empty()).then(|| (name, st.record.timing()))
        })
        .collect()
}

/// What every key left on its cluster (objects applied without a key are left out).
pub fn key_generations(clusters: &Clusters) -> KeyGenerations {
    let mut out = KeyGenerations::new();
    for (_, c) in clusters.all() {
        let st = c.lock();
        for (key, resource, generation) in st.objects.owned() {
            out.entry(key.to_string()).or_default().insert(resource, generation);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timings_in_milliseconds() {
        let t = ClusterTiming {
            makespan: Duration::from_millis(1500),
            critical_path: Duration::from_micros(250_500),
            applies: 3,
        };
        assert_eq!(ClusterReport::from(t), ClusterReport { makespan_ms: 1500.0, critical_path_ms: 250.5, applies: 3 });
    }
}
