//! What an apply says beside its results, as `kubectl` prints warnings: a SyncSet that
//! selects no cluster, or names clusters that do not exist, is applied all the same but
//! with a warning (a label typo must not pass a pipeline silently); a SyncSet's new
//! generation that its rollout stages says where the rollout starts.

use crate::error::Result;
use fleetsync_api::ApplyResult;
use fleetsync_model::{Document, Kind, RolloutPhase, SyncSetSpec};
use fleetsync_store::{rollout_drive, Store};
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
                    batch.clusters.entry(meta.tenant().to_string()).or_default().insert(meta.name.clone(), meta.labels.clone());
                }
                _ => {}
            }
        }
        batch
    }

    /// Fills in each SyncSet result's `warnings`, and its `staged` start when the
    /// apply committed a new generation that a rollout stages.
    pub async fn annotate(&self, store: &dyn Store, results: &mut [ApplyResult], committed: bool) -> Result<()> {
        let mut known: HashMap<String, BTreeMap<String, BTreeMap<String, String>>> = HashMap::new();
        for r in results.iter_mut().filter(|r| r.kind == Kind::SyncSet) {
            let Some(spec) = self.syncsets.get(&(r.tenant.clone(), r.name.clone())) else { continue };
            if !known.contains_key(&r.tenant) {
                let mut clusters: BTreeMap<String, BTreeMap<String, String>> =
                    store.cluster_list(Some(&r.tenant)).await?.into_iter().map(|c| (c.metadata.name, c.metadata.labels)).collect();
                clusters.extend(self.clusters.get(&r.tenant).cloned().unwrap_or_default());
                known.insert(r.tenant.clone(), clusters);
            }
            let clusters = known.get(&r.tenant).map(|c| c.iter()).into_iter().flatten();
            r.warnings = warnings(spec, clusters, known.get(&r.tenant).map_or(0, BTreeMap::len));
            if committed && r.result == "updated" && spec.rollout.is_some() {
                r.staged = staged(store, &r.tenant, &r.name, r.generation).await?;
            }
        }
        Ok(())
    }
}

/// The warnings of a SyncSet `spec` against the tenant's `clusters` (`total` of them).
fn warnings<'a>(spec: &SyncSetSpec, clusters: impl Iterator<Item = (&'a String, &'a BTreeMap<String, String>)>, total: usize) -> Vec<String> {
    let selected: Vec<&String> = clusters.filter(|(name, labels)| spec.selects(name, labels)).map(|(name, _)| name).collect();
    let mut out = Vec::new();
    if let Some(names) = &spec.cluster_names {
        let missing: Vec<&str> = names.iter().filter(|n| !selected.contains(n)).map(String::as_str).collect();
        if !missing.is_empty() {
            out.push(format!("clusterNames names clusters that do not exist: {}", missing.join(", ")));
        }
    }
    if selected.is_empty() {
        out.push(format!("selects no cluster (the tenant has {total}): nothing will be applied until a cluster matches"));
    }
    out
}

/// Where the rollout of `generation` starts, if it is staged and has not moved yet.
async fn staged(store: &dyn Store, tenant: &str, name: &str, generation: i64) -> Result<Option<String>> {
    let status = rollout_drive::status(store, tenant, name).await.map_err(crate::rollouts::drive_error)?;
    Ok(status.filter(|s| s.revision == generation && s.phase == RolloutPhase::Progressing).map(|s| {
        let reached = s.steps.get(s.step).map_or(0, |c| c.clusters);
        format!("rollout step {} of {} ({reached} cluster{})", s.step + 1, s.steps.len(), if reached == 1 { "" } else { "s" })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::LabelSelector;

    fn clusters() -> BTreeMap<String, BTreeMap<String, String>> {
        [("eu-1", "eu"), ("us-1", "us")].into_iter().map(|(n, r)| (n.to_string(), [("region".to_string(), r.to_string())].into())).collect()
    }

    fn spec(names: Option<&[&str]>, region: Option<&str>) -> SyncSetSpec {
        let mut s: SyncSetSpec = serde_json::from_str("{}").expect("spec");
        s.cluster_names = names.map(|n| n.iter().map(|s| s.to_string()).collect());
        s.cluster_selector = region.map(|r| LabelSelector { match_labels: [("region".into(), r.into())].into() });
        s
    }

    #[test]
    fn a_syncset_that_selects_nothing_or_names_a_missing_cluster_is_warned_about() {
        let c = clusters();
        assert_eq!(warnings(&spec(None, Some("eu")), c.iter(), 2), Vec::<String>::new());
        let typo = warnings(&spec(None, Some("ue")), c.iter(), 2);
        assert_eq!(typo, ["selects no cluster (the tenant has 2): nothing will be applied until a cluster matches"]);
        let missing = warnings(&spec(Some(&["eu-1", "eu-west-9"]), None), c.iter(), 2);
        assert_eq!(missing, ["clusterNames names clusters that do not exist: eu-west-9"]);
        assert_eq!(warnings(&spec(Some(&["eu-west-9"]), None), c.iter(), 2).len(), 2, "missing, and so none selected");
    }
}
