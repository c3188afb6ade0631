//! What an apply says beside its results, as `kubectl` prints warnings: a SyncSet that
//! selects no cluster, or names clusters that do not exist, is applied all the same but
//! with a warning (a label typo must not pass a pipeline silently); a SyncSet's new
//! generation that its rollout stages says where the rollout starts.

use crate::error::Result;
use fleetsync_api::ApplyResult;
use fleetsync_model::{Document, Kind, LabelQuery, RolloutPhase, SyncSetSpec};
use fleetsync_store::{progress, rollout_drive, ClusterFilter, PageRequest, Store};
use std::collections::{BTreeMap, HashMap};

/// The targeting of the SyncSets and the Clusters of one apply, taken before the
/// documents go to the store.
pub struct Batch {
    /// `(tenant, name)` → the SyncSet's targeting (no resources).
    syncsets: HashMap<(String, String), SyncSetSpec>,
    /// `tenant` → the clusters the apply writes, by name, with their labels.
    clusters: HashMap<String, BTreeMap<String, BTreeMap<String, String>>>,
}

impl Batch {
    pub fn of(docs: &[Document]) -> Self {
        let mut batch = Batch { syncsets: HashMap::new(), clusters: HashMap::new() };
        for doc in docs {
            let meta = doc.metadata();
            match doc {
                Document::SyncSet(s) => {
                    let mut spec = s.spec.targeting();
                    spec.rollout = s.spec.rollout.clone();
                    batch.syncsets.insert((meta.tenant().to_string(), meta.name.clone()), spec);
                }
                Document::Cluster(_) => {
                    batch
                        .clusters
                        .entry(meta.tenant().to_string())
                        .or_default()
                        .insert(meta.name.clone(), meta.labels.clone());
                }
                _ => {}
            }
        }
        batch
    }

    /// Fills in each SyncSet result's `warnings`, and its `staged` start when the
    /// apply committed a new generation that a rollout stages. Looks clusters up one by
    /// name, or a page of one by label: never the tenant's whole list.
    pub async fn annotate(&self, store: &dyn Store, results: &mut [ApplyResult], committed: bool) -> Result<()> {
        for r in results.iter_mut().filter(|r| r.kind == Kind::SyncSet) {
            let Some(spec) = self.syncsets.get(&(r.tenant.clone(), r.name.clone())) else { continue };
            let batch = self.clusters.get(&r.tenant);
            let in_batch = |name: &str| batch.is_some_and(|b| b.contains_key(name));
            let names = spec.cluster_names.as_deref().unwrap_or_default();
            let missing = progress::missing_clusters(store, &r.tenant, names, in_batch).await?;
            let selects_any = match (&spec.cluster_names, &spec.cluster_selector) {
                (Some(names), _) => names.len() > missing.len(),
                (None, Some(selector)) => {
                    let by_batch = batch.is_some_and(|b| b.iter().any(|(name, labels)| spec.selects(name, labels)));
                    let terms = selector.terms();
                    let filter = ClusterFilter { tenant: Some(r.tenant.clone()), labels: LabelQuery { terms } };
                    by_batch || !store.cluster_page(&filter, &PageRequest::first(1)).await?.items.is_empty()
                }
                (None, None) => false,
            };
            r.warnings = warnings(&missing, selects_any);
            if committed && r.result == "updated" && spec.rollout.is_some() {
                r.staged = staged(store, &r.tenant, &r.name, r.generation).await?;
            }
        }
        Ok(())
    }
}

/// The warnings of a SyncSet whose `clusterNames` name `missing` clusters that do not
/// exist, and that selects some cluster or none.
fn warnings(missing: &[String], selects_any: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !missing.is_empty() {
        out.push(format!("clusterNames names clusters that do not exist: {}", missing.join(", ")));
    }
    if !selects_any {
        out.push("selects no cluster: nothing will be applied until a cluster matches".to_string());
    }
    out
}

/// Where the rollout of `generation` starts, if it is staged and has not moved yet.
async fn staged(store: &dyn Store, tenant: &str, name: &str, generation: i64) -> Result<Option<String>> {
    let status = rollout_drive::status(store, tenant, name).await.map_err(crate::rollouts::drive_error)?;
    Ok(status.filter(|s| s.revision == generation && s.phase == RolloutPhase::Progressing).map(|s| {
        let reached = s.steps.get(s.step).map_or(0, |c| c.clusters);
        format!(
            "rollout step {} of {} ({reached} cluster{})",
            s.step + 1,
            s.steps.len(),
            if reached == 1 { "" } else { "s" }
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syncset_that_selects_nothing_or_names_a_missing_cluster_is_warned_about() {
        assert_eq!(warnings(&[], true), Vec::<String>::new());
        assert_eq!(warnings(&[], false), ["selects no cluster: nothing will be applied until a cluster matches"]);
        let missing = ["eu-west-9".to_string()];
        assert_eq!(warnings(&missing, true), ["clusterNames names clusters that do not exist: eu-west-9"]);
        assert_eq!(warnings(&missing, false).len(), 2, "missing, and so none selected");
    }
}
