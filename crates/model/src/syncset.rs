//! A SyncSet: an ordered list of resources and the clusters they go to.

use crate::document::ObjectMeta;
use crate::manifest::Manifest;
use crate::selector::LabelSelector;
use serde::{Deserialize, Serialize};

/// A SyncSet document (`kind: SyncSet`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncSet {
    pub metadata: ObjectMeta,
    pub spec: SyncSetSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncSetSpec {
    /// Clusters whose labels match. Exactly one of this and `clusterNames` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_names: Option<Vec<String>>,
    #[serde(default)]
    pub resource_apply_mode: ApplyMode,
    /// Applied in this order; a run stops at the first failure.
    #[serde(default)]
    pub resources: Vec<Manifest>,
}

/// What happens to resources removed from a SyncSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ApplyMode {
    /// Removed resources are left on the target.
    #[default]
    Upsert,
    /// Removed resources are deleted from the target.
    Sync,
}

impl ApplyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMode::Upsert => "Upsert",
            ApplyMode::Sync => "Sync",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Upsert" => Some(ApplyMode::Upsert),
            "Sync" => Some(ApplyMode::Sync),
            _ => None,
        }
    }
}

impl SyncSetSpec {
    /// Whether this SyncSet targets the cluster with this name and labels.
    pub fn selects(&self, cluster_name: &str, labels: &std::collections::BTreeMap<String, String>) -> bool {
        if let Some(names) = &self.cluster_names {
            return names.iter().any(|n| n == cluster_name);
        }
        self.cluster_selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// The targeting part alone (selector and names, no resources): what the store
    /// keeps to match clusters without reading every manifest.
    pub fn targeting(&self) -> SyncSetSpec {
        SyncSetSpec {
            cluster_selector: self.cluster_selector.clone(),
            cluster_names: self.cluster_names.clone(),
            resource_apply_mode: self.resource_apply_mode,
            resources: Vec::new(),
        }
    }
}
