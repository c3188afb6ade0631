//! The SyncSet applier, written as a [`Reconciler`] on the same API users get: apply
//! the SyncSet's resources to the cluster in order, stopping at the first failure; in
//! Sync mode, then delete what was removed from the SyncSet. In Sync mode the key's
//! inventory (what the target may hold because of it) is recorded in the store before
//! the first apply, so deletion and removal also find what failed, cancelled and
//! killed runs applied. A key whose SyncSet depends on others applies nothing until
//! they are Applied on its cluster ([`crate::dependencies`]); one whose SyncSet asks
//! for health is Applied only once what it applied is ready ([`crate::health`]). A run is abandoned (no
//! completion) when the context is cancelled: the lease was lost, or shutdown ran out
//! of grace.

use crate::health::{self, Verdict};
use crate::metrics::{OutcomeLabel, RuntimeMetrics};
use crate::reconciler::{Action, Context, ReconcileError, Reconciler};
use async_trait::async_trait;
use fleetsync_applier::{Applier, ApplyError};
use fleetsync_model::{template, ApplyMode, Cluster, ResourceOutcome, ResourceRef, ResourceResult};
use fleetsync_store::RunOutcome;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// The default reconciler of a [`Runtime`](crate::Runtime): SyncSets onto clusters.
pub struct SyncSetReconciler {
    applier: Arc<dyn Applier>,
    metrics: RuntimeMetrics,
}

type Run = Result<(RunOutcome, Vec<ResourceResult>), ReconcileError>;

#[async_trait]
impl Reconciler for SyncSetReconciler {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        let (outcome, resources) = self.run(ctx).await?;
        Ok(Action::Report { outcome, resources })
    }
}

impl SyncSetReconciler {
    pub fn new(applier: Arc<dyn Applier>, metrics: RuntimeMetrics) -> Self {
        Self { applier, metrics }
    }

    async fn run(&self, ctx: &Context) -> Run {
        let (k, item) = (ctx.key(), ctx.item());
        let cluster = match ctx.cluster().await {
            Ok(Some(c)) => c,
            // The cluster was deleted after the claim; its keys are gone with it.
            Ok(None) => return Ok((RunOutcome::Removed, Vec::new())),
            Err(e) => return Ok(failed(format!("reading cluster {}: {e}", k.cluster))),
        };
        if !item.desired {
            return self.remove(ctx, &cluster).await;
        }
        let syncset = match ctx.revision().await {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(failed("SyncSet deleted while claimed; its removal runs next".into())),
            Err(ReconcileError::Cancelled) => return Err(ReconcileError::Cancelled),
            Err(ReconcileError::Failed(e)) => return Ok(failed(format!("reading SyncSet {}: {e}", k.syncset))),
        };
        let generation = syncset.metadata.generation;
        if !syncset.spec.depends_on.is_empty() {
            if let Some(wait) = crate::dependencies::unmet(ctx, &syncset, &cluster).await? {
                return Ok((RunOutcome::Waiting { reason: wait.reason, after: wait.after }, Vec::new()));
            }
        }
        // A templated SyncSet's resources are this cluster's rendering of them; one that
        // does not render parks with the reason until the SyncSet or the cluster changes.
        let manifests = match template::resources_for(&syncset, &cluster) {
            Ok(manifests) => manifests,
            Err(e) => return Ok((RunOutcome::Parked { error: e.to_string() }, Vec::new())),
        };
        let manifests = &manifests[..];
        if item.apply_mode == ApplyMode::Sync {
            // Before anything is applied: a run that fails, is cancelled or dies midway
            // must leave behind nothing that a later run or the removal would not find.
            let planned: Vec<ResourceRef> = manifests.iter().filter_map(|m| m.resource_ref().ok()).collect();
            ctx.record_inventory(&planned).await?;
        }
        let mut results = Vec::with_capacity(manifests.len());
        let mut applied = Vec::with_capacity(manifests.len());
        for (index, manifest) in manifests.iter().enumerate() {
            let Ok(r) = manifest.resource_ref() else {
                return Ok(failed(format!("resource {index} has no valid identity")));
            };
            let apply_ctx = ctx.apply_context(generation, index);
            let (res, ms) = self.timed(ctx, self.applier.apply(&cluster, manifest, &apply_ctx)).await?;
            if let Err(e) = res {
                let outcome = failure(&e, format!("{r}: {e}"));
                results.push(result(r, ResourceOutcome::Failed, Some(e.to_string()), ms));
                results.extend(manifests[index + 1..].iter().filter_map(|m| m.resource_ref().ok()).map(skipped));
                return Ok((outcome, results));
            }
            results.push(result(r.clone(), ResourceOutcome::Applied, None, ms));
            applied.push(r);
        }
        if item.apply_mode == ApplyMode::Sync {
            let keep: HashSet<&ResourceRef> = applied.iter().collect();
            let gone: Vec<ResourceRef> = ctx.inventory().into_iter().filter(|r| !keep.contains(r)).collect();
            if let Some(failed) = self.delete_all(ctx, &cluster, gone, generation, &mut results).await? {
                return Ok((failed, results));
            }
        }
        if let Some(spec) = &syncset.spec.health {
            match health::wait_ready(&*self.applier, ctx, &cluster, &applied, generation, spec).await? {
                Verdict::Ready => {}
                Verdict::NotReady(error) => return Ok((RunOutcome::Failed { error }, results)),
                Verdict::Unreadable(r, e) => return Ok((failure(&e, format!("reading back {r}: {e}")), results)),
            }
        }
        let rendered = syncset.spec.templated.then(|| template::rendered_hash(manifests));
        Ok((RunOutcome::Applied { generation, inventory: applied, rendered }, results))
    }

    /// Removes what the key applied (Sync mode) or leaves it (Upsert mode).
    async fn remove(&self, ctx: &Context, cluster: &Cluster) -> Run {
        let item = ctx.item();
        let mut results = Vec::new();
        if item.apply_mode == ApplyMode::Sync {
            let gone = ctx.inventory();
            if let Some(failed) = self.delete_all(ctx, cluster, gone, item.generation, &mut results).await? {
                return Ok((failed, results));
            }
        }
        Ok((RunOutcome::Removed, results))
    }

    /// Deletes `gone` in reverse order (dependents before what they depend on);
    /// returns the failed outcome of the first error.
    async fn delete_all(
        &self,
        ctx: &Context,
        cluster: &Cluster,
        gone: Vec<ResourceRef>,
        generation: i64,
        results: &mut Vec<ResourceResult>,
    ) -> Result<Option<RunOutcome>, ReconcileError> {
        for (index, r) in gone.into_iter().rev().enumerate() {
            let apply_ctx = ctx.apply_context(generation, index);
            let (res, ms) = self.timed(ctx, self.applier.delete(cluster, &r, &apply_ctx)).await?;
            match res {
                Ok(()) => results.push(result(r, ResourceOutcome::Deleted, None, ms)),
                Err(e) => {
                    let outcome = failure(&e, format!("deleting {r}: {e}"));
                    results.push(result(r, ResourceOutcome::Failed, Some(e.to_string()), ms));
                    return Ok(Some(outcome));
                }
            }
        }
        Ok(None)
    }

    /// Awaits one target call unless cancelled; records its latency and outcome.
    async fn timed(
        &self,
        ctx: &Context,
        call: impl Future<Output = Result<(), ApplyError>>,
    ) -> Result<(Result<(), ApplyError>, u32), ReconcileError> {
        let start = Instant::now();
        let res = ctx.until_cancelled(call).await?;
        let elapsed = start.elapsed();
        self.metrics.apply_duration.observe(elapsed.as_secs_f64());
        let outcome = if res.is_ok() { "ok" } else { "error" };
        self.metrics.applies.get_or_create(&OutcomeLabel { outcome }).inc();
        Ok((res, u32::try_from(elapsed.as_millis()).unwrap_or(u32::MAX)))
    }
}

/// A run stopped by `e`: parked at once if trying again cannot help
/// ([`ApplyError::parks_at_once`]), else retried with backoff.
fn failure(e: &ApplyError, error: String) -> RunOutcome {
    match e.parks_at_once() {
        true => RunOutcome::Parked { error },
        false => RunOutcome::Failed { error },
    }
}

fn failed(error: String) -> (RunOutcome, Vec<ResourceResult>) {
    (RunOutcome::Failed { error }, Vec::new())
}

fn result(resource: ResourceRef, outcome: ResourceOutcome, error: Option<String>, duration_ms: u32) -> ResourceResult {
    ResourceResult { resource, outcome, error, duration_ms }
}

fn skipped(resource: ResourceRef) -> ResourceResult {
    result(resource, ResourceOutcome::Skipped, None, 0)
}
