//! Rollouts in progress, driven forward: every process that runs keys looks at each
//! rollout in progress once a tick (and sooner when a step's wait ends), decides its
//! next move and writes it as a compare-and-set (see
//! [`fleetsync_store::rollout_drive`]). Several processes may decide the same move;
//! only one writes it, so steps are neither skipped nor repeated, and a process that
//! dies leaves nothing held.

use fleetsync_model::RolloutPhase;
use fleetsync_store::rollout_drive::drive;
use fleetsync_store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Drives every rollout in progress every `every`, until `stop`.
pub async fn rollout_loop(store: Arc<dyn Store>, every: Duration, stop: CancellationToken) {
    loop {
        let next = tick(&*store).await.unwrap_or(every).min(every);
        tokio::select! {
            () = tokio::time::sleep(next) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// One pass over the rollouts in progress; how long until the earliest wait ends.
async fn tick(store: &dyn Store) -> Option<Duration> {
    let rollouts = match store.rollout_list(None, Some(RolloutPhase::Progressing)).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "listing rollouts failed; trying again at the next tick");
            return None;
        }
    };
    let now = store.clock().now();
    let mut sooner: Option<Duration> = None;
    for r in rollouts {
        match drive(store, &r.tenant, &r.syncset, None, None).await {
            Ok(Some(driven)) => {
                if driven.status.phase != r.phase || driven.status.step != r.step {
                    tracing::info!(tenant = %r.tenant, syncset = %r.syncset, revision = r.revision, phase = %driven.status.phase,
                        step = driven.status.step, reason = driven.status.reason.as_deref().unwrap_or(""), "rollout moved");
                }
                if let Some(at) = driven.wake_at {
                    let wait = Duration::from_millis(u64::try_from(at.millis() - now.millis()).unwrap_or(0));
                    sooner = Some(sooner.map_or(wait, |s| s.min(wait)));
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(tenant = %r.tenant, syncset = %r.syncset, error = %e, "driving a rollout failed; trying again at the next tick"),
        }
    }
    sooner
}
