//! Health without an agent (`spec.health`): after a run's applies succeed, the hub
//! reads back every object it applied (but ConfigMaps, Secrets and RBAC objects, which
//! have no readiness) and judges it with the rules agents use
//! ([`fleetsync_model::readiness`]), again every `interval`, until all are ready or
//! `timeout` has passed. The run holds its key meanwhile (its status `Applying`, its
//! lease renewed as usual); a run whose objects are not ready by the timeout fails with
//! the first reason, so it is retried and parked like any failure, and rollout gates
//! and `dependsOn` see it.

use crate::reconciler::{Context, ReconcileError};
use fleetsync_applier::{Applier, ApplyError};
use fleetsync_model::readiness::{has_readiness, readiness};
use fleetsync_model::{Cluster, HealthSpec, ResourceRef};
use std::time::Instant;

/// How a run's applied objects ended up.
#[derive(Debug)]
pub(crate) enum Verdict {
    Ready,
    /// Not all ready by the timeout: the reason, naming the first object not ready.
    NotReady(String),
    /// An object could not be read, and trying again cannot help (the target cannot
    /// be read back at all, or the hub may not reach it).
    Unreadable(ResourceRef, ApplyError),
}

/// Waits until every object of `applied` on `cluster` is ready, within `spec`.
pub(crate) async fn wait_ready(
    applier: &dyn Applier,
    ctx: &Context,
    cluster: &Cluster,
    applied: &[ResourceRef],
    generation: i64,
    spec: &HealthSpec,
) -> Result<Verdict, ReconcileError> {
    let (start, timeout, interval) = (Instant::now(), spec.timeout(), spec.interval());
    // Why each object was not ready when last read: what a read cut short by the
    // timeout reports instead of itself.
    let mut known: Vec<Option<String>> = vec![None; applied.len()];
    loop {
        let mut unready = Vec::new();
        for (index, r) in applied.iter().enumerate().filter(|(_, r)| has_readiness(&r.api_version, &r.kind)) {
            // No read outlasts the timeout: a slow cluster fails the wait on time.
            let left = timeout.saturating_sub(start.elapsed()).max(std::time::Duration::from_millis(1));
            let apply_ctx = ctx.apply_context(generation, index);
            let read = applier.read(cluster, r, &apply_ctx);
            let read = match ctx.until_cancelled(tokio::time::timeout(left, read)).await? {
                Ok(read) => read,
                Err(_) => {
                    let why = known[index].clone().unwrap_or_else(|| "reading it back did not finish in time".into());
                    unready.push((r, why));
                    continue;
                }
            };
            let why = match read {
                Ok(Some(object)) => readiness(&object).err(),
                Ok(None) => Some("not found on the cluster".into()),
                Err(e) if e.parks_at_once() || matches!(e, ApplyError::Unsupported(_)) => {
                    return Ok(Verdict::Unreadable(r.clone(), e));
                }
                Err(e) => Some(format!("reading it back failed: {e}")),
            };
            known[index].clone_from(&why);
            if let Some(why) = why {
                unready.push((r, why));
            }
        }
        let Some((first, why)) = unready.first() else { return Ok(Verdict::Ready) };
        let waited = start.elapsed();
        if waited >= timeout {
            let more = match unready.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            let after = humantime::format_duration(timeout);
            return Ok(Verdict::NotReady(format!("not ready after {after}: {first}: {why}{more}")));
        }
        ctx.until_cancelled(tokio::time::sleep(interval.min(timeout - waited))).await?;
    }
}
