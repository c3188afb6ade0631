//! How a resource reaches a target.
//!
//! [`Applier`] is the one interface the runtime calls: apply one manifest, or delete
//! one resource, on one cluster, carrying the key's fencing token so that a target that
//! can check it refuses a worker that lost its lease. [`ByEndpoint`] routes each cluster
//! to the applier for its kind of endpoint. [`sim`] is the in-process simulated fleet.

pub mod deadline;
pub mod error;
#[cfg(feature = "kube")]
mod gate;
#[cfg(feature = "kube")]
pub mod kubeconfig;
#[cfg(feature = "kube")]
pub mod kubernetes;
pub mod latency;
pub mod sim;

pub use deadline::Deadline;
pub use error::ApplyError;

use async_trait::async_trait;
use fleetsync_model::{Cluster, Endpoint, Manifest, ResourceRef, WorkKey};
use std::sync::Arc;

/// Who is applying what: passed with every call so targets can fence and trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyContext {
    pub key: WorkKey,
    /// The key's fencing token; a target that saw a larger one must refuse this call.
    pub fence: i64,
    /// The SyncSet generation being applied.
    pub generation: i64,
    /// Position of the resource in the SyncSet (order is kept within a run).
    pub index: usize,
    /// No request of this call may leave the process once it has passed (the
    /// Kubernetes applier checks it just before a request's body is written).
    pub deadline: Deadline,
}

/// Applies resources to targets.
#[async_trait]
pub trait Applier: Send + Sync + 'static {
    /// Creates or updates `resource` on `cluster` (server-side-apply semantics).
    async fn apply(&self, cluster: &Cluster, resource: &Manifest, ctx: &ApplyContext) -> Result<(), ApplyError>;

    /// Deletes `resource` from `cluster`; deleting what is not there succeeds.
    async fn delete(&self, cluster: &Cluster, resource: &ResourceRef, ctx: &ApplyContext) -> Result<(), ApplyError>;
}

/// Routes each cluster to the applier for its endpoint kind. A kind with no applier
/// configured fails with [`ApplyError::Unsupported`] (and so parks after max attempts
/// with a message that says why).
#[derive(Clone, Default)]
pub struct ByEndpoint {
    pub simulator: Option<Arc<dyn Applier>>,
    pub http: Option<Arc<dyn Applier>>,
    /// For `kubeconfig` and `inCluster` endpoints.
    pub kubeconfig: Option<Arc<dyn Applier>>,
}

impl ByEndpoint {
    fn pick(&self, cluster: &Cluster) -> Result<&Arc<dyn Applier>, ApplyError> {
        let found = match &cluster.spec.endpoint {
            Endpoint::Simulator {} => &self.simulator,
            Endpoint::Http { .. } => &self.http,
            Endpoint::Kubeconfig { .. } | Endpoint::InCluster {} => &self.kubeconfig,
        };
        found.as_ref().ok_or_else(|| {
            ApplyError::Unsupported(format!(
                "no applier for {} endpoints is configured in this process",
                cluster.spec.endpoint.kind_name()
            ))
        })
    }
}

#[async_trait]
impl Applier for ByEndpoint {
    async fn apply(&self, cluster: &Cluster, resource: &Manifest, ctx: &ApplyContext) -> Result<(), ApplyError> {
        self.pick(cluster)?.apply(cluster, resource, ctx).await
    }

    async fn delete(&self, cluster: &Cluster, resource: &ResourceRef, ctx: &ApplyContext) -> Result<(), ApplyError> {
        self.pick(cluster)?.delete(cluster, resource, ctx).await
    }
}
