//! `retry CLUSTER SYNCSET`: runs a key again now, resetting its backoff (also a parked
//! key); `reconcile source NAME`: the same for a source's fetch; `reconcile notifier
//! NAME` for a notifier's deliveries.

use crate::args::{ReconcileArgs, ReconcileKind, RetryArgs};
use crate::client::explain;
use crate::context::connect;
use anyhow::Result;
use fleetsync::outln;

pub async fn retry(a: RetryArgs) -> Result<()> {
    let conn = connect(&a.at.conn)?;
    let tenant = conn.tenant_or(&a.at.tenant);
    let key = conn.client.retry(&tenant, &a.cluster, &a.syncset).await.map_err(explain)?;
    outln!("{}/{} queued to run again (tenant {})", key.cluster, key.syncset, key.tenant)?;
    Ok(())
}

pub async fn reconcile(a: ReconcileArgs) -> Result<()> {
    let conn = connect(&a.at.conn)?;
    let tenant = conn.tenant_or(&a.at.tenant);
    match a.kind {
        ReconcileKind::Source => {
            conn.client.fetch_now(&tenant, &a.name).await.map_err(explain)?;
            outln!("gitrepository/{} queued to fetch now (tenant {tenant})", a.name)?;
        }
        ReconcileKind::Notifier => {
            conn.client.deliver_now(&tenant, &a.name).await.map_err(explain)?;
            outln!("notifier/{} queued to send now (tenant {tenant})", a.name)?;
        }
    }
    Ok(())
}
