//! The reconciler that makes the custom resources fleetsync's desired state: it
//! writes each one's spec into the store as a document and answers the status of
//! the keys it affects.
//!
//! A custom resource maps to a document field for field: its namespace is the
//! tenant, its name and labels are the document's, its `spec` is the document's
//! spec; everything else (annotations, status, server fields) stays in Kubernetes.

use crate::handler::{CrKind, ReconcileError, Reconciler};
use crate::source::{READY, SYNCED};
use async_trait::async_trait;
use fleetsync_model::document::{parse_value, DEFAULT_TENANT};
use fleetsync_model::{Document, KeyStatus, Phase, API_VERSION};
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

/// The fleetsync document a custom resource stands for; a validation error names
/// the field, as `fleetsync apply` would.
pub fn document(kind: CrKind, object: &DynamicObject) -> Result<Document, ReconcileError> {
    let meta = &object.metadata;
    let value = json!({
        "apiVersion": API_VERSION,
        "kind": kind.kind(),
        "metadata": {
            "name": meta.name.as_deref().unwrap_or_default(),
            "namespace": meta.namespace.as_deref().unwrap_or(DEFAULT_TENANT),
            "labels": meta.labels.clone().unwrap_or_default(),
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
            let filter =
                StatusFilter { tenant: Some(tenant.to_string()), syncset: Some(name.to_string()), ..StatusFilter::default() };
            let keys = self.store.status_list(&filter).await.map_err(store_error)?;
            let ready = readiness(&keys);
            let keys: Vec<Value> = keys
                .iter()
                .map(|k| json!({"cluster": k.key.cluster, "phase": k.phase.as_str(), "observedGeneration": k.observed_generation}))
                .collect();
            status["keys"] = keys.into();
            status["conditions"] = json!([synced, ready]);
        } else {
            let ready = condition(READY, true, "Accepted", "in the store".to_string());
            status["conditions"] = json!([synced, ready]);
        }
        Ok(status)
    }
}

fn condition(kind: &str, status: bool, reason: &str, message: String) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" }, "reason": reason, "message": message})
}

/// `Ready` from a SyncSet's keys: `True` (`Applied`) once every cluster it selects
/// has its latest generation applied; `False` with `NoClusters` while it selects
/// none (nothing is applied anywhere), `ApplyFailed` when a key failed or is parked
/// (naming the first such cluster and its error), else `Progressing`. Keys whose
/// resources are being removed do not count.
fn readiness(keys: &[KeyStatus]) -> Value {
    let desired: Vec<&KeyStatus> = keys.iter().filter(|k| k.desired).collect();
    if desired.is_empty() {
        return condition(READY, false, "NoClusters", "selects no cluster (yet)".to_string());
    }
    let applied = desired.iter().filter(|k| k.phase == Phase::Applied && k.observed_generation >= k.generation).count();
    let of = format!("applied on {applied} of {} clusters", desired.len());
    if applied == desired.len() {
        return condition(READY, true, "Applied", of);
    }
    match desired.iter().find(|k| matches!(k.phase, Phase::Failed | Phase::Parked)) {
        Some(k) => {
            let error = k.last_error.as_deref().unwrap_or("no error recorded");
            let message = format!("{of}; {} on cluster {}: {error}", k.phase.as_str(), k.key.cluster);
            condition(READY, false, "ApplyFailed", message)
        }
        None => condition(READY, false, "Progressing", of),
    }
}

#[async_trait]
impl<S: Store + ?Sized> Reconciler for StoreReconciler<S> {
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

    fn key(cluster: &str, phase: Phase, generation: i64, observed: i64) -> KeyStatus {
        KeyStatus {
            key: fleetsync_model::WorkKey::new("team", cluster, "s"),
            phase,
            desired: true,
            generation,
            observed_generation: observed,
            attempts: 0,
            last_error: None,
            resources: vec![],
            next_attempt_at: None,
            last_applied_at: None,
            updated_at: fleetsync_model::time::Timestamp(0),
            drift: vec![],
            unready: vec![],
        }
    }

    fn ready(keys: &[KeyStatus]) -> (String, String, String) {
        let c = readiness(keys);
        let field = |f: &str| c[f].as_str().unwrap_or_default().to_string();
        (field("status"), field("reason"), field("message"))
    }

    #[test]
    fn ready_once_every_selected_cluster_applied_the_latest_generation() {
        let applied = key("c1", Phase::Applied, 2, 2);
        assert_eq!(ready(std::slice::from_ref(&applied)), ("True".into(), "Applied".into(), "applied on 1 of 1 clusters".into()));
        let behind = key("c2", Phase::Applied, 3, 2);
        assert_eq!(ready(&[applied.clone(), behind]).1, "Progressing", "applied, but an older generation");
        let mut failed = key("c3", Phase::Parked, 2, 1);
        failed.last_error = Some("forbidden".into());
        let (status, reason, message) = ready(&[applied.clone(), failed]);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "ApplyFailed"));
        assert!(message.contains("c3") && message.contains("forbidden"), "{message}");
        let mut leaving = key("c4", Phase::Pending, 2, 1);
        leaving.desired = false;
        assert_eq!(ready(&[applied, leaving.clone()]).1, "Applied", "clusters being cleaned up do not count");
        assert_eq!(ready(&[leaving]).1, "NoClusters");
        assert_eq!(ready(&[]), ("False".into(), "NoClusters".into(), "selects no cluster (yet)".into()));
    }

    #[test]
    fn an_invalid_spec_names_the_field() {
        let err = document(CrKind::Cluster, &cr("Cluster", json!({"endpoint": {"http": {"url": "ftp://x"}}})))
            .expect_err("bad url");
        assert!(err.0.contains("spec.endpoint.http.url"), "{err}");
    }
}
