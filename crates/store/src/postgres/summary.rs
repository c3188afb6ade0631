//! A SyncSet's status summary (see [`crate::summary`]).

use super::{counts, query, PgResult};
use crate::summary::{failures_sql, summarize, FailureRow};
use deadpool_postgres::GenericClient;
use fleetsync_model::{StatusSummary, Timestamp};
use tokio_postgres::types::ToSql;

/// When the SyncSet's longest-waiting key became due: its first row in claim order
/// (`due` holds the ready and the leased keys), checked against its `work` row.
const OLDEST: &str = "SELECT d.due_at FROM due d JOIN work w ON w.id = d.id
     WHERE d.tenant = $1 AND d.syncset = $2 AND d.due_at <= $3 AND w.phase IN ('ready', 'running')
     ORDER BY d.due_at LIMIT 1";

pub(super) async fn status_summary<C: GenericClient>(c: &C, tenant: &str, syncset: &str, now: Timestamp) -> PgResult<StatusSummary> {
    let params: [&(dyn ToSql + Sync); 2] = [&tenant, &syncset];
    let now_ms = now.millis();
    let oldest_params: [&(dyn ToSql + Sync); 3] = [&tenant, &syncset, &now_ms];
    let failures_sql = failures_sql();
    // Sent together: the connection pipelines them.
    let (groups, oldest, failures) = tokio::try_join!(
        counts::groups(c, tenant, syncset),
        query(c, OLDEST, &oldest_params),
        query(c, &failures_sql, &params)
    )?;
    let oldest = oldest.first().map(|r| r.try_get::<_, i64>(0)).transpose()?.map(Timestamp);
    let failures = failures
        .iter()
        .map(|r| {
            let attempts = u32::try_from(r.try_get::<_, i32>(2)?).unwrap_or(0);
            Ok(FailureRow { cluster: r.try_get(0)?, db_phase: r.try_get(1)?, attempts, last_error: r.try_get(3)? })
        })
        .collect::<PgResult<Vec<_>>>()?;
    Ok(summarize(groups, oldest, failures))
}
