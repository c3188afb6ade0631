//! A SyncSet's status summary (see [`crate::summary`]).

use crate::summary::{failures_sql, summarize, FailureRow, Group, GROUPS_SQL};
use crate::Result;
use fleetsync_model::{StatusSummary, Timestamp};
use rusqlite::{params, Connection};

/// SQLite numbers `?1`, `?2` where PostgreSQL writes `$1`, `$2`.
fn numbered(sql: &str) -> String {
    sql.replace('$', "?")
}

pub(super) fn status_summary(c: &Connection, tenant: &str, syncset: &str) -> Result<StatusSummary> {
    let mut groups = c.prepare_cached(&numbered(GROUPS_SQL))?;
    let groups = groups
        .query_map(params![tenant, syncset], |r| {
            Ok(Group {
                db_phase: r.get(0)?,
                failed: r.get(1)?,
                at_generation: r.get(2)?,
                count: r.get::<_, i64>(3)?.max(0).unsigned_abs(),
                oldest_change: r.get::<_, Option<i64>>(4)?.map(Timestamp),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut failures = c.prepare_cached(&numbered(&failures_sql()))?;
    let failures = failures
        .query_map(params![tenant, syncset], |r| {
            Ok(FailureRow { cluster: r.get(0)?, db_phase: r.get(1)?, attempts: r.get(2)?, last_error: r.get(3)? })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(summarize(groups, failures))
}
