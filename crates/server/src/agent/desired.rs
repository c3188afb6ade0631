//! What fleetsync wants on a cluster: the manifests of the SyncSets of its keys (at the
//! revision each key runs, rendered for the cluster if templated), by resource, to match
//! reports to keys and to judge drift.

use crate::error::Result;
use fleetsync_model::live::difference;
use fleetsync_model::{template, LiveReport, LiveState, ResourceRef};
use fleetsync_store::{StatusFilter, Store};
use serde_json::Value;
use std::collections::BTreeMap;

/// The desired manifest of each resource applied to one cluster, with its SyncSet.
#[derive(Debug, Default)]
pub struct Desired {
    by_resource: BTreeMap<ResourceRef, (String, Value)>,
}

impl Desired {
    /// Reads the cluster's keys that are to be on it and their SyncSets' manifests.
    pub async fn load(store: &dyn Store, tenant: &str, cluster: &str) -> Result<Desired> {
        let filter =
            StatusFilter { tenant: Some(tenant.into()), cluster: Some(cluster.into()), ..StatusFilter::default() };
        let mut by_resource = BTreeMap::new();
        let Some(target) = store.cluster_get(tenant, cluster).await? else { return Ok(Desired { by_resource }) };
        for key in store.status_list(&filter).await?.into_iter().filter(|k| k.desired) {
            // The revision the key runs, which a rollout may hold behind the latest (the
            // latest itself for a SyncSet stored before revisions were kept); one no
            // longer kept (the key runs a newer one next) judges nothing.
            let set = match store.revision_get(tenant, &key.key.syncset, key.generation).await? {
                Some(kept) => kept,
                None => match store.syncset_get(tenant, &key.key.syncset).await? {
                    Some(latest) if latest.metadata.generation == key.generation => latest,
                    _ => continue,
                },
            };
            // A templated SyncSet's manifests as rendered for this cluster: what the key
            // applies. One that does not render applies nothing, and judges nothing.
            let Ok(manifests) = template::resources_for(&set, &target) else { continue };
            for m in manifests.iter() {
                if let Ok(r) = m.resource_ref() {
                    by_resource.insert(r, (key.key.syncset.clone(), m.0.clone()));
                }
            }
        }
        Ok(Desired { by_resource })
    }

    /// The SyncSet that applies the reported resource and the drift, if any; `None`
    /// if fleetsync does not apply it to this cluster.
    pub fn judge(&self, r: &LiveReport) -> Option<(String, Option<String>)> {
        let (syncset, manifest) = self.by_resource.get(&r.resource)?;
        let drift = match (r.state, &r.object) {
            (LiveState::Present, Some(object)) => difference(manifest, object),
            _ => Some("deleted".to_string()),
        };
        Some((syncset.clone(), drift))
    }

    /// Every resource applied to the cluster.
    pub fn resources(&self) -> Vec<ResourceRef> {
        self.by_resource.keys().cloned().collect()
    }
}
