//! Recording the live state an agent reports (see [`crate::LiveState::live_record`]):
//! each record judged against the version stored ([`crate::live::batch`]), what is new
//! stored once per resource, and the keys of what drifted enqueued again.

use super::{LiveRow, WriteTx};
use crate::live::{batch, resource_id, LiveRecord, LiveRecorded};
use crate::plan::Announce;
use crate::stored::json;
use crate::StoreError;
use fleetsync_model::WorkKey;

/// Records a batch of `tenant/cluster`'s reports in one transaction; the keys enqueued
/// again are in the answer.
pub(crate) async fn record<T: WriteTx>(
    tx: &mut T,
    tenant: &str,
    cluster: &str,
    records: &[LiveRecord],
) -> Result<LiveRecorded, T::Error> {
    // Two writers receiving the same resend cannot both store it.
    tx.live_lock(tenant, cluster).await?;
    tx.cluster_seen_set(tenant, cluster).await?;
    let ids: Vec<String> = records.iter().map(|r| resource_id(&r.resource)).collect();
    let stored = tx.live_versions(tenant, cluster, &ids).await?;
    let batch = batch(records, &ids, stored);
    // The keys' `work` rows are locked before any `live_state` row, as a completion
    // locks them (it then ends live records): the two never wait for each other in a
    // cycle.
    let mut requeued = Vec::new();
    for syncset in &batch.drifted {
        let key = WorkKey::new(tenant, cluster, syncset.as_str());
        if tx.work_again(&key).await?.is_some() {
            requeued.push(key);
        }
    }
    tx.work_announce(Announce::objects(tx.now(), 0, requeued.len() as u64));
    let rows = batch
        .stored
        .iter()
        .map(|(id, kept)| {
            let r = &records[kept.record];
            Ok(LiveRow {
                resource: id,
                syncset: &r.syncset,
                resource_version: &r.resource_version,
                state: r.state,
                object: r.object.as_ref().map(|o| json("live_state", o)).transpose()?,
                drift: r.drift.as_deref(),
                unready: r.unready.as_deref(),
                versions: kept.versions,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    if !rows.is_empty() {
        tx.live_put(tenant, cluster, &rows).await?;
    }
    Ok(LiveRecorded { outcomes: batch.outcomes, requeued })
}
