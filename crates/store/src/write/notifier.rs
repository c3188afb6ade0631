//! Notifiers: a Notifier written enqueues its key, which delivers the tenant's events
//! to it ([`plan::notifier_changed`]).

use super::apply::{logged, By};
use super::{DocRow, WriteTx};
use crate::plan::{self, Upsert};
use crate::stored::canonical;
use fleetsync_model::{Kind, Notifier};

/// A Notifier; a new or changed one enqueues its key.
pub(super) async fn apply<T: WriteTx>(tx: &mut T, n: &Notifier, by: By<'_>) -> Result<(Upsert, u64), T::Error> {
    let (tenant, name) = (n.metadata.tenant(), n.metadata.name.as_str());
    let doc = canonical(n)?;
    let stored = tx.object_stored(Kind::Notifier, tenant, name).await?;
    let upsert = plan::upsert(stored.map(|st| (st.generation, st.doc == doc)));
    let Upsert::Write { generation, .. } = upsert else { return Ok((upsert, 0)) };
    tx.doc_put(Kind::Notifier, DocRow { tenant, name, generation, doc: &doc }).await?;
    logged(tx, Kind::Notifier, tenant, name, upsert, by).await?;
    let enqueued = tx.work_enqueue(&[plan::notifier_changed(tenant, name, generation)]).await?;
    Ok((upsert, enqueued))
}
