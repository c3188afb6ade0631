//! Deleting an object (see [`crate::Objects::object_delete_by`]): what it does to the
//! keys is [`plan::deleted`]'s.

use super::{NewEvent, WriteTx};
use crate::plan::{self, Announce, Deleted};
use crate::revision::RevisionsDrop;
use crate::StoreError;
use fleetsync_model::Kind;

/// Deletes `kind` `tenant/name` by `actor`: the row goes, the event names `actor`, and a
/// Cluster's keys go with it, or a SyncSet's keys are enqueued for removal (its rollout
/// and revisions go). `NotFound` if absent.
pub(crate) async fn delete<T: WriteTx>(
    tx: &mut T,
    kind: Kind,
    tenant: &str,
    name: &str,
    actor: Option<&str>,
) -> Result<(), T::Error> {
    tx.tenant_lock(tenant).await?;
    let Some(generation) = tx.object_delete(kind, tenant, name).await? else {
        return Err(StoreError::not_found(kind, tenant, name).into());
    };
    tx.event_append(NewEvent { tenant, kind: kind.as_str(), name, action: "Deleted", generation, actor }).await?;
    let keyed = match kind {
        Kind::SyncSet => tx.work_clusters_of(tenant, name).await?,
        Kind::Cluster | Kind::Secret | Kind::GitRepository | Kind::OCIRepository | Kind::Notifier => Vec::new(),
    };
    let enqueued = match plan::deleted(kind, tenant, name, keyed) {
        Deleted::ClusterKeysDropped => {
            tx.cluster_keys_drop(tenant, name).await?;
            0
        }
        Deleted::Removals(plan) => {
            tx.rollout_delete(tenant, name).await?;
            tx.revisions_drop(tenant, name, &RevisionsDrop::every()).await?;
            tx.work_enqueue(&plan).await?
        }
        Deleted::SourceRemoved(planned) => tx.work_enqueue(&[planned]).await?,
        Deleted::Nothing => 0,
    };
    tx.work_announce(Announce::objects(tx.now(), 1, enqueued));
    Ok(())
}
