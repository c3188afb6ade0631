//! Rollouts in progress, driven forward: every process that runs keys looks at each
//! rollout in progress when something happened that can move it, decides its
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

/// The least time between two passes: a burst of events makes one pass, not one each.
const GAP: Duration = Duration::from_millis(50);

/// Drives every rollout in progress when the event log moves (a new generation, a key's
/// run ending: what can move a rollout), when a step's wait ends, and at least every
/// `every` (agents' reports, which log no event, change health too), until `stop`.
pub async fn rollout_loop(store: Arc<dyn Store>, every: Duration, stop: CancellationToken) {
    let mut events = Some(store.events_subscribe());
    loop {
        if let Some(e) = events.as_mut() {
            e.mark_unchanged();
        }
        let next = tick(&*store).await.unwrap_or(every).min(every);
        let moved = async {
            match events.as_mut() {
                Some(e) => e.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(next) => {}
            alive = moved => {
                if !alive {
                    // No more wake-ups from the store: the timer alone from now on.
                    events = None;
                }
                tokio::time::sleep(GAP).await;
            }
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
            Err(e) => {
                tracing::warn!(tenant = %r.tenant, syncset = %r.syncset, error = %e, "driving a rollout failed; trying again at the next tick")
            }
        }
    }
    sooner
}
