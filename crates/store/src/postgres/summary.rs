//! A SyncSet's status summary (see [`crate::summary`]).

use super::{query, PgResult};
use crate::summary::{failures_sql, summarize, FailureRow, Group, GROUPS_SQL};
use deadpool_postgres::GenericClient;
use fleetsync_model::{StatusSummary, Timestamp};
use tokio_postgres::types::ToSql;

pub(super) async fn status_summary<C: GenericClient>(c: &C, tenant: &str, syncset: &str) -> PgResult<StatusSummary> {
    let params: [&(dyn ToSql + Sync); 2] = [&tenant, &syncset];
    let failures_sql = failures_sql();
    // Sent together: the connection pipelines them.
    let (groups, failures) = tokio::try_join!(query(c, GROUPS_SQL, &params), query(c, &failures_sql, &params))?;
    let groups = groups
        .iter()
        .map(|r| {
            Ok(Group {
                db_phase: r.try_get(0)?,
                failed: r.try_get(1)?,
                at_generation: r.try_get(2)?,
                count: r.try_get::<_, i64>(3)?.max(0).unsigned_abs(),
                oldest_change: r.try_get::<_, Option<i64>>(4)?.map(Timestamp),
            })
        })
        .collect::<PgResult<Vec<_>>>()?;
    let failures = failures
        .iter()
        .map(|r| {
            let attempts = u32::try_from(r.try_get::<_, i32>(2)?).unwrap_or(0);
            Ok(FailureRow { cluster: r.try_get(0)?, db_phase: r.try_get(1)?, attempts, last_error: r.try_get(3)? })
        })
        .collect::<PgResult<Vec<_>>>()?;
    Ok(summarize(groups, failures))
}
