//! Driving a rollout: read what [`rollout::decide`](crate::rollout::decide) needs from
//! the store, decide, and write the decision as one compare-and-set
//! ([`Rollouts::rollout_write`](crate::Rollouts::rollout_write)). Every process that
//! runs keys drives the rollouts in progress, and the API drives one for an operator's
//! control; whoever writes first wins a step, the others decide again from what it
//! wrote, so a step is neither skipped nor taken twice, and a process that dies holds
//! nothing up.

use crate::rollout::{decide, event_action, ClusterView, ControlRefused, KeyView, RolloutEvent, RolloutState};
use crate::{StatusFilter, Store, StoreError};
use fleetsync_model::{RolloutControl, RolloutStatus, Timestamp};
use std::collections::HashMap;

/// How often a control is decided again when other writers keep winning.
const ATTEMPTS: usize = 8;

/// Why a rollout could not be driven.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Refused(#[from] ControlRefused),
    /// Other writers kept changing the rollout while this one decided.
    #[error("the rollout kept changing while deciding; try again")]
    Contended,
    /// A newer generation started a new rollout while a control was being decided.
    #[error(
        "a newer generation superseded the rollout: revision {revision} is rolling out now; look at it and try again"
    )]
    Superseded { revision: i64 },
}

/// A rollout as it stands, and when it must be looked at again.
#[derive(Debug, Clone, PartialEq)]
pub struct Driven {
    pub status: RolloutStatus,
    pub wake_at: Option<Timestamp>,
}

/// The SyncSet's rollout with per-step counts, without changing it; `None` if the
/// SyncSet has no rollout.
pub async fn status<S: Store + ?Sized>(
    store: &S,
    tenant: &str,
    syncset: &str,
) -> Result<Option<RolloutStatus>, DriveError> {
    Ok(status_with_clusters(store, tenant, syncset).await?.map(|(status, _)| status))
}

/// [`status`], with the clusters the SyncSet selects and their keys, as it read them.
pub async fn status_with_clusters<S: Store + ?Sized>(
    store: &S,
    tenant: &str,
    syncset: &str,
) -> Result<Option<(RolloutStatus, Vec<ClusterView>)>, DriveError> {
    let Some((state, spec, clusters)) = load(store, tenant, syncset).await? else { return Ok(None) };
    let decision = decide(&spec, &state, &clusters, store.clock().now(), None)?;
    Ok(Some((shown(state, decision.counts, decision.waiting), clusters)))
}

/// Every rollout of `tenant`, by SyncSet. Only those not completed come with per-step
/// counts (each reads its SyncSet's keys); a completed one is at its revision everywhere.
pub async fn list(store: &dyn Store, tenant: &str) -> Result<Vec<RolloutStatus>, DriveError> {
    let mut out = Vec::new();
    for r in store.rollout_list(Some(tenant), None).await? {
        if r.phase == fleetsync_model::RolloutPhase::Completed {
            out.push(shown(r, Vec::new(), None));
        } else if let Some(s) = status(store, tenant, &r.syncset).await? {
            out.push(s);
        }
    }
    Ok(out)
}

/// Decides the rollout's next move (with an operator's `control`, if any) and writes it;
/// a new phase, step or promote is logged naming `actor`. `None` if the SyncSet has no
/// rollout.
pub async fn drive(
    store: &dyn Store,
    tenant: &str,
    syncset: &str,
    control: Option<RolloutControl>,
    actor: Option<&str>,
) -> Result<Option<Driven>, DriveError> {
    let mut asked_about = None;
    for _ in 0..ATTEMPTS {
        let Some((state, spec, clusters)) = load(store, tenant, syncset).await? else { return Ok(None) };
        // A control acts on the revision it was asked about, not on a newer generation's
        // rollout that superseded it meanwhile.
        if control.is_some() && *asked_about.get_or_insert(state.revision) != state.revision {
            return Err(DriveError::Superseded { revision: state.revision });
        }
        let decision = decide(&spec, &state, &clusters, store.clock().now(), control)?;
        let now_state = match decision.state {
            Some(next) => {
                let event = event_action(&spec, &state, &next)
                    .map(|action| RolloutEvent { action, actor: actor.map(str::to_string) });
                if !store.rollout_write(&next, &decision.enqueue, event).await? {
                    continue;
                }
                next
            }
            None => state,
        };
        return Ok(Some(Driven {
            status: shown(now_state, decision.counts, decision.waiting),
            wake_at: decision.wake_at,
        }));
    }
    Err(DriveError::Contended)
}

/// The rollout, its spec (from the revision it rolls out) and the SyncSet's clusters
/// with their keys, by name.
async fn load<S: Store + ?Sized>(
    store: &S,
    tenant: &str,
    syncset: &str,
) -> Result<Option<(RolloutState, fleetsync_model::RolloutSpec, Vec<ClusterView>)>, StoreError> {
    let Some(state) = store.rollout_get(tenant, syncset).await? else { return Ok(None) };
    let Some(revision) = store.revision_get(tenant, syncset, state.revision).await? else { return Ok(None) };
    let Some(spec) = revision.spec.rollout.clone() else { return Ok(None) };
    let filter = StatusFilter { tenant: Some(tenant.into()), syncset: Some(syncset.into()), ..StatusFilter::default() };
    let mut keys: HashMap<String, KeyView> = store
        .status_list(&filter)
        .await?
        .into_iter()
        .filter(|k| k.desired)
        .map(|k| {
            let view = KeyView {
                generation: k.generation,
                observed_generation: k.observed_generation,
                phase: k.phase,
                last_error: k.last_error,
                drifted: !k.drift.is_empty(),
                unready: k.unready.first().map(|u| format!("{}: {}", u.resource, u.reason)),
            };
            (k.key.cluster, view)
        })
        .collect();
    let clusters = store
        .cluster_list(Some(tenant))
        .await?
        .into_iter()
        .filter(|c| revision.spec.selects(&c.metadata.name, &c.metadata.labels))
        .map(|c| ClusterView { key: keys.remove(&c.metadata.name), name: c.metadata.name, labels: c.metadata.labels })
        .collect();
    Ok(Some((state, spec, clusters)))
}

fn shown(s: RolloutState, steps: Vec<fleetsync_model::StepCounts>, waiting: Option<String>) -> RolloutStatus {
    RolloutStatus {
        tenant: s.tenant,
        syncset: s.syncset,
        phase: s.phase,
        step: s.step,
        revision: s.revision,
        stable: s.stable,
        reason: s.reason,
        waiting,
        step_started_at: s.step_started_at,
        healthy_since: s.healthy_since,
        steps,
        updated_at: s.updated_at,
    }
}
