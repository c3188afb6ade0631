//! The reconciler that makes the custom resources fleetsync's desired state: it
//! writes each one's spec into the store as a document and answers the status of
//! the keys it affects.
//!
//! A custom resource maps to a document field for field: its namespace is the
//! tenant, its name and labels are the document's, its `spec` is the document's
//! spec; a Cluster's annotations are its document's too (templates read them), except
//! the ones kubectl keeps for itself (`kubectl.kubernetes.io/…`); everything else
//! (other kinds' annotations, status, server fields) stays in Kubernetes.

use crate::handler::{CrKind, CrReconciler, ReconcileError};
use crate::source::{READY, SYNCED};
use async_trait::async_trait;
use fleetsync_model::document::{parse_value, DEFAULT_TENANT};
use fleetsync_model::{Document, SyncSetProgress, API_VERSION};
use fleetsync_store::{StatusFilter, Store, StoreError};
use kube::api::DynamicObject;
use serde_json::{json, Value};
use std::sync::Arc;

/// Writes custom resources into a [`Store`].
pub struct StoreReconciler<S: ?Sized> {
    store: Arc<S>,
}

impl<S: Store + ?Sized> StoreReconciler<S> {
    pub fn new(store: Arc<S>) -> Self {
        Self { store }
    }
}

/// Annotations kubectl writes for itself (`last-applied-configuration`, which holds
/// the whole object again): not the cluster's to template with.
const KUBECTL_PREFIX: &str = "kubectl.kubernetes.io/";

/// The fleetsync document a custom resource stands for; a validation error names
/// the field, as `fleetsync apply` would.
pub fn document(kind: CrKind, object: &DynamicObject) -> Result<Document, ReconcileError> {
    let meta = &object.metadata;
    let annotations: std::collections::BTreeMap<&String, &String> = match kind {
        CrKind::Cluster => meta.annotations.iter().flatten().filter(|(k, _)| !k.starts_with(KUBECTL_PREFIX)).collect(),
        _ => Default::default(),
    };
    let value = json!({
        "apiVersion": API_VERSION,
        "kind": kind.kind(),
        "metadata": {
            "name": meta.name.as_deref().unwrap_or_default(),
            "namespace": meta.namespace.as_deref().unwrap_or(DEFAULT_TENANT),
            "labels": meta.labels.clone().unwrap_or_default(),
            "annotations": annotations,
        },
        "spec": object.data.get("spec").cloned().unwrap_or(Value::Null),
    });
    parse_value(1, value).map_err(|e| ReconcileError(e.to_string()))
}

fn store_error(e: StoreError) -> ReconcileError {
    ReconcileError(format!("the store refused the change: {e}"))
}

impl<S: Store + ?Sized> StoreReconciler<S> {
    /// The status of a custom resource at store generation `generation`: for a
    /// SyncSet its keys, and the conditions `Synced` (in the store) and `Ready` (for
    /// a SyncSet: applied on every cluster it selects; for a Cluster: in the store).
    async fn status(&self, kind: CrKind, tenant: &str, name: &str, generation: i64) -> Result<Value, ReconcileError> {
        let synced = condition(SYNCED, true, "Accepted", format!("in the store at generation {generation}"));
        let mut status = json!({"storeGeneration": generation});
        if kind == CrKind::SyncSet {
            let filter = StatusFilter {
                tenant: Some(tenant.to_string()),
                syncset: Some(name.to_string()),
                ..StatusFilter::default()
            };
            let keys = self.store.status_list(&filter).await.map_err(store_error)?;
            let ready = match self.store.syncset_get(tenant, name).await.map_err(store_error)? {
                Some(set) => {
                    let summary = self.store.status_summary(tenant, Some(name)).await.map_err(store_error)?;
                    let progress = fleetsync_store::progress::read(&*self.store, &set, &summary)
                        .await
                        .map_err(|e| ReconcileError(format!("reading the SyncSet's progress: {e}")))?;
                    readiness(&progress)
                }
                None => condition(READY, false, "NotFound", "not in the store".to_string()),
            };
            let keys: Vec<Value> = keys
                .iter()
                .map(|k| json!({"cluster": k.key.cluster, "phase": k.phase.as_str(), "observedGeneration": k.observed_generation}))
                .collect();
            status["keys"] = keys.into();
            status["conditions"] = json!([synced, ready]);
        } else if matches!(kind, CrKind::GitRepository | CrKind::OCIRepository) {
            let (ready, revision, fetched_at) = self.source_status(tenant, name).await?;
            status["revision"] = revision.into();
            status["fetchedAt"] = fetched_at.into();
            status["conditions"] = json!([synced, ready]);
        } else {
            let ready = condition(READY, true, "Accepted", "in the store".to_string());
            status["conditions"] = json!([synced, ready]);
        }
        Ok(status)
    }
}

impl<S: Store + ?Sized> StoreReconciler<S> {
    /// A source's `Ready` (a revision is stored; else the fetch's last error, if it
    /// failed), its revision and when that was stored.
    async fn source_status(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<(Value, Option<String>, Option<String>), ReconcileError> {
        let Some(source) = self.store.source_get(tenant, name).await.map_err(store_error)? else {
            return Ok((condition(READY, false, "NotFound", "not in the store".to_string()), None, None));
        };
        let fetched_at = source.status().and_then(|s| s.fetched_at).map(|t| t.to_rfc3339());
        if let Some(revision) = source.revision() {
            let ready = condition(READY, true, "Fetched", format!("revision {revision} is stored"));
            return Ok((ready, Some(revision.to_string()), fetched_at));
        }
        let key = fleetsync_model::WorkKey::source(tenant, name);
        let last_error = self.store.status_get(&key).await.map_err(store_error)?.and_then(|k| k.last_error);
        let ready = match last_error {
            Some(error) => condition(READY, false, "FetchFailed", error),
            None => condition(READY, false, "Fetching", "no revision is stored yet".to_string()),
        };
        Ok((ready, None, fetched_at))
    }
}

fn condition(kind: &str, status: bool, reason: &str, message: String) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" }, "reason": reason, "message": message})
}

/// `Ready` from a SyncSet's progress, the one notion of done every view shows: `True`
/// (`Applied`) once every cluster it selects applied its current generation (its
/// rollout, if any, completed); else `False` with the progress's reason (`RollingOut`
/// while a rollout holds clusters at the stable generation, `RolledBack`,
/// `NoClusters`, `Degraded`...) and its message.
fn readiness(p: &SyncSetProgress) -> Value {
    condition(READY, p.done, p.reason.as_str(), p.message.clone())
}

#[async_trait]
impl<S: Store + ?Sized> CrReconciler for StoreReconciler<S> {
    async fn reconcile(&self, kind: CrKind, object: &DynamicObject) -> Result<Value, ReconcileError> {
        let doc = document(kind, object)?;
        let (tenant, name) = (doc.metadata().namespace.clone(), doc.metadata().name.clone());
        let outcome = self.store.objects_apply(vec![doc]).await.map_err(store_error)?;
        let generation = outcome.first().map_or(0, |o| o.generation);
        self.status(kind, &tenant, &name, generation).await
    }

    /// The keys and conditions as they are now, for an object whose last reconcile
    /// succeeded (one that failed keeps its error until its spec changes).
    async fn refresh(&self, kind: CrKind, object: &DynamicObject) -> Option<Result<Value, ReconcileError>> {
        let status = object.data.get("status")?;
        if !status.get("error").is_none_or(Value::is_null) {
            return None;
        }
        let generation = status.get("storeGeneration").and_then(Value::as_i64)?;
        let tenant = object.metadata.namespace.as_deref().unwrap_or(DEFAULT_TENANT);
        let name = object.metadata.name.as_deref()?;
        Some(self.status(kind, tenant, name, generation).await)
    }

    async fn deleted(&self, kind: CrKind, object: &DynamicObject) -> Result<(), ReconcileError> {
        let tenant = object.metadata.namespace.as_deref().unwrap_or(DEFAULT_TENANT);
        let name = object.metadata.name.as_deref().unwrap_or_default();
        match self.store.object_delete(kind.document_kind(), tenant, name).await {
            Ok(()) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(kind: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "fleetsync.io/v1", "kind": kind,
            "metadata": {"name": "s", "namespace": "team", "labels": {"env": "prod"}, "resourceVersion": "3"},
            "spec": spec, "status": {"x": 1},
        }))
        .expect("object")
    }

    #[test]
    fn a_custom_resource_maps_to_its_document() {
        let spec = json!({"clusterNames": ["c1"], "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}]});
        let Document::SyncSet(s) = document(CrKind::SyncSet, &cr("SyncSet", spec)).expect("valid") else {
            panic!("a SyncSet")
        };
        assert_eq!((s.metadata.tenant(), s.metadata.name.as_str()), ("team", "s"));
        assert_eq!(s.metadata.labels.get("env").map(String::as_str), Some("prod"));
        assert_eq!(s.spec.resources.len(), 1);
    }

    #[test]
    fn a_cluster_keeps_its_annotations_but_kubectls_own() {
        let mut object = cr("Cluster", json!({"endpoint": {"simulator": {}}, "values": {"zone": "a"}}));
        object.metadata.annotations = Some(
            [("owner", "team-eu"), ("kubectl.kubernetes.io/last-applied-configuration", "{}")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        );
        let Document::Cluster(c) = document(CrKind::Cluster, &object).expect("valid") else { panic!("a Cluster") };
        assert_eq!(c.metadata.annotations, [("owner".to_string(), "team-eu".to_string())].into());
        assert_eq!(c.spec.values.0["zone"], "a");
        let mut set = cr("SyncSet", json!({"clusterNames": ["c1"]}));
        set.metadata.annotations = object.metadata.annotations.clone();
        let Document::SyncSet(s) = document(CrKind::SyncSet, &set).expect("valid") else { panic!("a SyncSet") };
        assert!(s.metadata.annotations.is_empty(), "other kinds' annotations stay in Kubernetes");
    }

    #[test]
    fn an_invalid_spec_names_the_field() {
        let err = document(CrKind::Cluster, &cr("Cluster", json!({"endpoint": {"http": {"url": "ftp://x"}}})))
            .expect_err("bad url");
        assert!(err.0.contains("spec.endpoint.http.url"), "{err}");
    }
}
