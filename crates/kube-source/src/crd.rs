//! The custom resources' definitions (CRDs), generated from Rust types: the spec
//! of each kind is the fleetsync document's spec ([`fleetsync_model`]), its status
//! what the source writes back. `deploy/crds/` ships them as YAML; a test keeps the
//! files equal to what these types generate.
//!
//! The types describe the objects for the CRDs' schemas (and `kubectl explain`);
//! the source itself reads objects untyped and validates specs as `fleetsync apply`
//! does, so that an error names the field.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::CustomResourceExt;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The targets of a SyncSet and the resources it applies to them, in order.
#[derive(CustomResource, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fleetsync.io",
    version = "v1",
    kind = "SyncSet",
    plural = "syncsets",
    namespaced,
    status = "SyncSetStatus",
    category = "fleetsync",
    // Columns as JSON: the same keys repeated in attributes trip a lint.
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct SyncSetCrdSpec(pub fleetsync_model::syncset::SyncSetSpec);

/// A target cluster and how fleetsync reaches it.
#[derive(CustomResource, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fleetsync.io",
    version = "v1",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    status = "ClusterStatus",
    category = "fleetsync",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct ClusterCrdSpec(pub fleetsync_model::ClusterSpec);

/// A Git repository's ref, fetched into the store for the SyncSets that read it.
#[derive(CustomResource, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fleetsync.io",
    version = "v1",
    kind = "GitRepository",
    plural = "gitrepositories",
    namespaced,
    status = "SourceStatus",
    category = "fleetsync",
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".spec.url"}"#,
    printcolumn = r#"{"name": "Revision", "type": "string", "jsonPath": ".status.revision"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct GitRepositoryCrdSpec(pub fleetsync_model::GitRepositorySpec);

/// An OCI artifact's tag, version range or digest, pulled into the store for the
/// SyncSets that read it.
#[derive(CustomResource, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fleetsync.io",
    version = "v1",
    kind = "OCIRepository",
    plural = "ocirepositories",
    namespaced,
    status = "SourceStatus",
    category = "fleetsync",
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".spec.url"}"#,
    printcolumn = r#"{"name": "Revision", "type": "string", "jsonPath": ".status.revision"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
pub struct OciRepositoryCrdSpec(pub fleetsync_model::OciRepositorySpec);

/// What the source writes back to a GitRepository or OCIRepository.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The generation of the source in fleetsync's store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_generation: Option<i64>,
    /// Why the spec was not accepted (null when it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The revision its SyncSets read (a commit id, a manifest digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// When that revision was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<String>,
    /// `Synced` (the spec is in fleetsync's store) and `Ready` (a revision is stored;
    /// `False` with the fetch's last error while none is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What the source writes back to a SyncSet.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncSetStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The generation of the SyncSet in fleetsync's store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_generation: Option<i64>,
    /// Why the spec was not accepted (null when it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// One entry per cluster the SyncSet selects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyStatus>,
    /// `Synced` (the spec is in fleetsync's store) and `Ready` (applied on every
    /// cluster the SyncSet selects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What the source writes back to a Cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The generation of the Cluster in fleetsync's store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_generation: Option<i64>,
    /// Why the spec was not accepted (null when it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `Synced` and `Ready` (both: the spec is in fleetsync's store).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Where one SyncSet stands on one cluster.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyStatus {
    pub cluster: String,
    /// `Pending`, `Applying`, `Applied`, `Failed` or `Parked`.
    pub phase: String,
    /// The SyncSet generation last applied on the cluster (0: never).
    pub observed_generation: i64,
}

/// A condition in Kubernetes' standard shape (`metav1.Condition`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Synced` or `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why, in one CamelCase word.
    pub reason: String,
    /// Why, for people.
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// The `metadata.generation` the condition was set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Every definition the source needs, in a stable order.
pub fn definitions() -> Vec<CustomResourceDefinition> {
    vec![
        structural(Cluster::crd()),
        structural(GitRepository::crd()),
        structural(OCIRepository::crd()),
        structural(SyncSet::crd()),
    ]
}

/// `crd` without `additionalProperties: false`, which the API server refuses in a
/// CRD's schema (the schemas of variants without fields, such as
/// `endpoint.inCluster`, have it); unknown fields are pruned there anyway.
fn structural(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if map.get("additionalProperties") == Some(&serde_json::Value::Bool(false)) {
                    map.remove("additionalProperties");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = match serde_json::to_value(&crd) {
        Ok(v) => v,
        Err(_) => return crd,
    };
    strip(&mut value);
    serde_json::from_value(value).unwrap_or(crd)
}
