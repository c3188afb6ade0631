//! The hive-fleet workload (docs/benchmarks.md): C clusters on simulated endpoints,
//! labelled `fleet=hive`, and S SyncSets selecting them, each with R ConfigMaps of about
//! 1 KiB — what `fleetsync demo`, the benchmarks and the tests load into a hub to run
//! against the simulated fleet.

use fleetsync_model::{
    ApplyMode, Cluster, ClusterSpec, Document, Endpoint, LabelSelector, Manifest, ObjectMeta, SyncSet, SyncSetSpec,
};

/// The size of a hive-fleet: C clusters × S SyncSets × R resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetShape {
    pub clusters: usize,
    pub syncsets: usize,
    pub resources: usize,
}

impl FleetShape {
    /// The benchmarks' default: 1,000 × 60 × 10 = 600,000 applies.
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
        source_ref: None,
        cluster_selector: Some(LabelSelector::labels([("fleet".to_string(), "hive".to_string())].into())),
        cluster_names: None,
        resource_apply_mode: ApplyMode::Upsert,
        resources,
        rollout: None,
        templated: false,
        values: Default::default(),
        target_customizations: Vec::new(),
        depends_on: Vec::new(),
        health: None,
    };
    Document::SyncSet(SyncSet { metadata: ObjectMeta::new(name), spec, status: None })
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
