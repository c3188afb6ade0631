//! How a resource reaches a target.
//!
//! [`Applier`] is the one interface the runtime calls: apply one manifest, or delete
//! one resource, on one cluster, carrying the key's fencing token so that a target that
//! can check it refuses a worker that lost its lease. [`ByEndpoint`] routes each cluster
//! to the applier for its kind of endpoint.

#[cfg(feature = "kube")]
mod clients;
pub mod deadline;
#[cfg(feature = "egress")]
pub mod egress;
pub mod error;
#[cfg(feature = "kube")]
mod gate;
#[cfg(feature = "kube")]
pub mod kubeconfig;
#[cfg(feature = "kube")]
pub mod kubernetes;

pub use deadline::Deadline;
pub use error::ApplyError;

use async_trait::async_trait;
use fleetsync_model::{Cluster, Endpoint, Fence, Manifest, ResourceRef, WorkKey};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A point in this process's order of events. A `Moment::now()` is greater than every
/// one taken before it, on any thread, so "did B start after A ended" is exact: take
/// a moment when A ended and one when B starts, and compare. (Clock instants can be
/// equal — always, under `tokio::time::pause` — which would leave that open.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment(u64);

impl Moment {
    pub fn now() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Moment(NEXT.fetch_add(1, Ordering::SeqCst))
    }
}

/// Who is applying what: passed with every call so targets can fence and trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyContext {
    pub key: WorkKey,
    /// The key's fencing token; a target that saw a larger one must refuse this call.
    pub fence: Fence,
    /// The SyncSet generation being applied.
    pub generation: i64,
    /// Position of the resource in the SyncSet (order is kept within a run).
    pub index: usize,
    /// No request of this call may leave the process once it has passed (the
    /// Kubernetes applier checks it just before a request's body is written).
    pub deadline: Deadline,
    /// Taken when the run's claim returned: every change that enqueued the key had
    /// committed by then, so what the applier caches about the cluster (a kubeconfig
    /// client built from a Secret) is checked again if it was last checked before
    /// this. `None` (no claim to go by): cached state is checked now and then.
    pub claimed_at: Option<Moment>,
}

impl ApplyContext {
    /// A call made outside a run's lease (benchmarks, tests, tools): no claim to check
    /// cached state against, no deadline.
    pub fn new(key: WorkKey, fence: Fence, generation: i64, index: usize) -> Self {
        Self { key, fence, generation, index, claimed_at: None, deadline: Deadline::none() }
    }
}

/// Applies resources to targets.
#[async_trait]
pub trait Applier: Send + Sync + 'static {
    /// Creates or updates `resource` on `cluster` (server-side-apply semantics).
    async fn apply(&self, cluster: &Cluster, resource: &Manifest, ctx: &ApplyContext) -> Result<(), ApplyError>;

    /// Deletes `resource` from `cluster`; deleting what is not there succeeds.
    async fn delete(&self, cluster: &Cluster, resource: &ResourceRef, ctx: &ApplyContext) -> Result<(), ApplyError>;

    /// Reads `resource` back from `cluster` as it is now (with its `status`), `None`
    /// if it is not there: what a SyncSet's `spec.health` judges. Targets that cannot
    /// be read answer [`ApplyError::Unsupported`].
    async fn read(
        &self,
        cluster: &Cluster,
        resource: &ResourceRef,
        ctx: &ApplyContext,
    ) -> Result<Option<serde_json::Value>, ApplyError> {
        let _ = (resource, ctx);
        Err(ApplyError::Unsupported(format!(
            "objects on {} endpoints cannot be read back for health",
            cluster.spec.endpoint.kind_name()
        )))
    }
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

    async fn read(
        &self,
        cluster: &Cluster,
        resource: &ResourceRef,
        ctx: &ApplyContext,
    ) -> Result<Option<serde_json::Value>, ApplyError> {
        self.pick(cluster)?.read(cluster, resource, ctx).await
    }
}
