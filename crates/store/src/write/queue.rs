//! The work queue's writes that are workflows: an explicit retry, a resync, and a run's
//! inventory recorded under its lease.

use super::{status_name, NewEvent, WriteTx};
use crate::plan::Announce;
use crate::stored::json;
use crate::{Fence, StoreError};
use fleetsync_model::{ResourceRef, WorkKey};

/// Runs a key again now, whatever its phase, and logs a `Status` event `Retry` naming
/// `actor` (see [`crate::WorkQueue::work_retry_by`]). `NotFound` for an unknown key.
pub(crate) async fn retry<T: WriteTx>(tx: &mut T, key: &WorkKey, actor: Option<&str>) -> Result<(), T::Error> {
    let Some(generation) = tx.work_again(key).await? else {
        return Err(StoreError::key_not_found(key).into());
    };
    let name = status_name(key);
    tx.event_append(NewEvent { tenant: &key.tenant, kind: "Status", name: &name, action: "Retry", generation, actor })
        .await?;
    tx.work_announce(Announce::objects(tx.now(), 1, 1));
    Ok(())
}

/// Enqueues every key that is not already pending or running; returns how many.
pub(crate) async fn resync<T: WriteTx>(tx: &mut T) -> Result<u64, T::Error> {
    let n = tx.work_resync_all().await?;
    tx.work_announce(Announce::objects(tx.now(), 0, n));
    Ok(n)
}

/// Records the inventory of a key held with token `fence` (see
/// [`crate::WorkQueue::work_inventory_record`]); `LeaseLost`, nothing written, if the
/// token is not the key's current one.
pub(crate) async fn inventory_record<T: WriteTx>(
    tx: &mut T,
    key: &WorkKey,
    fence: Fence,
    inventory: &[ResourceRef],
) -> Result<(), T::Error> {
    if !tx.work_inventory_set(key, fence, &json("work", inventory)?).await? {
        return Err(StoreError::LeaseLost { key: key.clone(), fence }.into());
    }
    Ok(())
}
