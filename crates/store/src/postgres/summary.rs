//! A SyncSet's or a tenant's status summary (see [`crate::summary`]).

use super::{counts, query, PgResult};
use crate::summary::{failures_sql, scope, summarize, FailureRow};
use deadpool_postgres::GenericClient;
use fleetsync_model::{StatusSummary, Timestamp};
use tokio_postgres::types::ToSql;

pub(super) async fn status_summary<C: GenericClient>(
    c: &C,
    tenant: &str,
    syncset: Option<&str>,
    now: Timestamp,
) -> PgResult<StatusSummary> {
    let named = syncset.is_some();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&tenant];
    if let Some(syncset) = &syncset {
        params.push(syncset);
    }
    let now_ms = now.millis();
    let mut oldest_params = params.clone();
    oldest_params.push(&now_ms);
    // When the longest-waiting key became due: its first row in claim order (`due`
    // holds the ready and the leased keys), checked against its `work` row.
    let oldest = format!(
        "SELECT d.due_at FROM due d JOIN work w ON w.id = d.id
         WHERE {} AND d.due_at <= ${} AND w.phase IN ('ready', 'running')
         ORDER BY d.due_at LIMIT 1",
        scope("d.", named),
        oldest_params.len()
    );
    let failures_sql = failures_sql(named);
    // Sent together: the connection pipelines them.
    let (groups, oldest, failures) = tokio::try_join!(
        counts::groups(c, tenant, syncset),
        query(c, &oldest, &oldest_params),
        query(c, &failures_sql, &params)
    )?;
    let oldest = oldest.first().map(|r| r.try_get::<_, i64>(0)).transpose()?.map(Timestamp);
    let failures = failures
        .iter()
        .map(|r| {
            let attempts = u32::try_from(r.try_get::<_, i32>(2)?).unwrap_or(0);
            let syncset: String = r.try_get(4)?;
            Ok(FailureRow {
                syncset: (!named).then_some(syncset),
                cluster: r.try_get(0)?,
                db_phase: r.try_get(1)?,
                attempts,
                last_error: r.try_get(3)?,
            })
        })
        .collect::<PgResult<Vec<_>>>()?;
    Ok(summarize(groups, oldest, failures))
}
