//! A rollout's step (see [`crate::Rollouts::rollout_write`]): a compare-and-set decided
//! by [`revision::rollout_check`], the keys it moves enqueued and its event appended in
//! the same transaction.

use super::{NewEvent, WriteTx};
use crate::lifecycle::Enqueue;
use crate::plan::{Announce, Planned};
use crate::revision::{self, RolloutCheck};
use crate::rollout::{RolloutEvent, RolloutState};
use crate::stored::corrupt;
use fleetsync_model::WorkKey;
use std::collections::BTreeMap;

/// Writes `next` if it follows the stored rollout, runs each `(cluster, generation)`
/// key still wanted at that generation (a cluster named twice runs the generation named
/// last), and appends `event`. `false`: the rollout moved on; nothing written.
///
/// It runs under the tenant's lock, like object writes (the other writers of rollouts
/// and of which keys are wanted), so the stored rollout and the wanted keys it reads
/// stay as read until commit: of several processes writing from the same version, one
/// writes and the others find the version moved on.
pub(crate) async fn rollout_write<T: WriteTx>(
    tx: &mut T,
    next: &RolloutState,
    enqueue_at: &[(String, i64)],
    event: Option<&RolloutEvent>,
) -> Result<bool, T::Error> {
    let (tenant, syncset) = (next.tenant.as_str(), next.syncset.as_str());
    tx.tenant_lock(tenant).await?;
    let current = tx.rollout_get(tenant, syncset).await?;
    match revision::rollout_check(current.as_ref(), next) {
        RolloutCheck::MovedOn => return Ok(false),
        RolloutCheck::Write => {}
        RolloutCheck::WriteIfEveryWantedKeyAt(generation) => {
            if tx.work_wanted_generations(tenant, syncset).await?.iter().any(|g| *g != generation) {
                return Ok(false);
            }
        }
    }
    tx.rollout_put(next).await?;
    if let Some(e) = event {
        let (action, generation, actor) = (e.action, next.revision, e.actor.as_deref());
        tx.event_append(NewEvent { tenant, kind: "Rollout", name: syncset, action, generation, actor }).await?;
    }
    let mut at: BTreeMap<&str, i64> = BTreeMap::new();
    for (cluster, generation) in enqueue_at {
        at.insert(cluster.as_str(), *generation);
    }
    let mut enqueued = 0;
    if !at.is_empty() {
        let clusters: Vec<&str> = at.keys().copied().collect();
        let wanted = tx.work_wanted_among(tenant, syncset, &clusters).await?;
        let at: Vec<(&str, i64)> = at.into_iter().filter(|(cluster, _)| wanted.contains(*cluster)).collect();
        let mut generations: Vec<i64> = at.iter().map(|(_, g)| *g).collect();
        generations.sort_unstable();
        generations.dedup();
        let modes = tx.revision_modes(tenant, syncset, &generations).await?;
        let mut plan = Vec::with_capacity(at.len());
        for (cluster, generation) in at {
            let Some(mode) = modes.get(&generation) else {
                return Err(
                    corrupt("revisions", format!("{tenant}/{syncset} generation {generation} is not kept")).into()
                );
            };
            let key = WorkKey::new(tenant, cluster, syncset);
            plan.push(Planned { key, enqueue: Enqueue::apply(generation, *mode), dirties: true });
        }
        enqueued = tx.work_enqueue(&plan).await?;
    }
    tx.work_announce(Announce::objects(tx.now(), usize::from(event.is_some()), enqueued));
    Ok(true)
}
