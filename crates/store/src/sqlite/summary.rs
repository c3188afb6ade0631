//! A SyncSet's status summary (see [`crate::summary`]) and the store-wide counts, from
//! `key_counts` (kept by the schema's triggers) without reading keys.

use crate::lifecycle::status_phase;
use crate::summary::{failures_sql, summarize, FailureRow, Group};
use crate::Result;
use fleetsync_model::{Phase, StatusSummary, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// SQLite numbers `?1`, `?2` where PostgreSQL writes `$1`, `$2`.
fn numbered(sql: &str) -> String {
    sql.replace('$', "?")
}

const GROUPS: &str = "SELECT phase, failed, at_generation, n FROM key_counts WHERE tenant = ?1 AND syncset = ?2";

/// When the SyncSet's longest-waiting key became due: the first ready key in claim
/// order (the `work_ready` index, read from its start until a key of the SyncSet), and
/// the leased ones (no more than are in flight).
const OLDEST_READY: &str = "SELECT run_at FROM work INDEXED BY work_ready
     WHERE phase = 'ready' AND run_at <= ?3 AND tenant = ?1 AND syncset = ?2 ORDER BY run_at LIMIT 1";
const OLDEST_RUNNING: &str = "SELECT MIN(run_at) FROM work INDEXED BY work_running WHERE phase = 'running' AND tenant = ?1 AND syncset = ?2";

pub(super) fn status_summary(c: &Connection, tenant: &str, syncset: &str, now: Timestamp) -> Result<StatusSummary> {
    let mut groups = c.prepare_cached(GROUPS)?;
    let groups = groups
        .query_map(params![tenant, syncset], |r| {
            Ok(Group {
                db_phase: r.get(0)?,
                failed: r.get(1)?,
                at_generation: r.get(2)?,
                count: r.get::<_, i64>(3)?.max(0).unsigned_abs(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let ready: Option<i64> = c.prepare_cached(OLDEST_READY)?.query_row(params![tenant, syncset, now.millis()], |r| r.get(0)).optional()?;
    let running: Option<i64> = c.prepare_cached(OLDEST_RUNNING)?.query_row(params![tenant, syncset], |r| r.get(0))?;
    let oldest = ready.into_iter().chain(running).min().map(Timestamp);
    let mut failures = c.prepare_cached(&numbered(&failures_sql()))?;
    let failures = failures
        .query_map(params![tenant, syncset], |r| {
            Ok(FailureRow { cluster: r.get(0)?, db_phase: r.get(1)?, attempts: r.get(2)?, last_error: r.get(3)? })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(summarize(groups, oldest, failures))
}

/// Every key counted by phase.
pub(super) fn count_by_phase(c: &Connection) -> Result<BTreeMap<Phase, u64>> {
    let mut by_phase: BTreeMap<Phase, u64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
    let mut stmt = c.prepare_cached("SELECT phase, failed, SUM(n) FROM key_counts GROUP BY 1, 2")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?, r.get::<_, i64>(2)?)))?;
    for row in rows {
        let (db, failed, n) = row?;
        *by_phase.entry(status_phase(&db, u32::from(failed), failed)).or_default() += n.max(0).unsigned_abs();
    }
    Ok(by_phase)
}
