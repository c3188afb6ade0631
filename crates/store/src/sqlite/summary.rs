//! A SyncSet's status summary (see [`crate::summary`]) and the store-wide counts, from
//! `key_counts` (kept by the schema's triggers) without reading keys.

use crate::summary::{cluster_conditions_sql, failures_sql, phases_by_syncset, scope, summarize, FailureRow, Group};
use crate::Result;
use fleetsync_model::cluster_list::ClusterRow;
use fleetsync_model::{ClusterConditions, Kind, Phase, StatusSummary, Timestamp};
use rusqlite::{params_from_iter, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// SQLite numbers `?1`, `?2` where PostgreSQL writes `$1`, `$2`.
fn numbered(sql: &str) -> String {
    sql.replace('$', "?")
}

pub(super) fn status_summary(
    c: &Connection,
    tenant: &str,
    syncset: Option<&str>,
    now: Timestamp,
) -> Result<StatusSummary> {
    let named = syncset.is_some();
    let (scope, now_at) = (numbered(&scope("", named)), if named { "?3" } else { "?2" });
    let args: Vec<&dyn rusqlite::ToSql> = [&tenant as &dyn rusqlite::ToSql]
        .into_iter()
        .chain(syncset.as_ref().map(|s| s as &dyn rusqlite::ToSql))
        .collect();
    let mut groups =
        c.prepare_cached(&format!("SELECT phase, failed, at_generation, n FROM key_counts WHERE {scope}"))?;
    let groups = groups
        .query_map(params_from_iter(&args), |r| {
            Ok(Group {
                db_phase: r.get(0)?,
                failed: r.get(1)?,
                at_generation: r.get(2)?,
                count: r.get::<_, i64>(3)?.max(0).unsigned_abs(),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    // When the longest-waiting key became due: the first ready key in claim order (the
    // `work_ready` index, read from its start until a key in scope), and the leased
    // ones (no more than are in flight).
    let ready = format!(
        "SELECT run_at FROM work INDEXED BY work_ready WHERE phase = 'ready' AND run_at <= {now_at} AND {scope} ORDER BY run_at LIMIT 1"
    );
    let mut with_now = args.clone();
    let now_ms = now.millis();
    with_now.push(&now_ms);
    let ready: Option<i64> =
        c.prepare_cached(&ready)?.query_row(params_from_iter(&with_now), |r| r.get(0)).optional()?;
    let running = format!("SELECT MIN(run_at) FROM work INDEXED BY work_running WHERE phase = 'running' AND {scope}");
    let running: Option<i64> = c.prepare_cached(&running)?.query_row(params_from_iter(&args), |r| r.get(0))?;
    let oldest = ready.into_iter().chain(running).min().map(Timestamp);
    let mut failures = c.prepare_cached(&numbered(&failures_sql(named)))?;
    let failures = failures
        .query_map(params_from_iter(&args), |r| {
            let syncset: String = r.get(4)?;
            Ok(FailureRow {
                syncset: (!named).then_some(syncset),
                cluster: r.get(0)?,
                db_phase: r.get(1)?,
                attempts: r.get(2)?,
                last_error: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(summarize(groups, oldest, failures))
}

/// Every key counted by phase, per `(tenant, syncset)` and in all.
#[allow(clippy::type_complexity)]
pub(super) fn count_by_phase(
    c: &Connection,
) -> Result<(BTreeMap<(String, String), BTreeMap<Phase, u64>>, BTreeMap<Phase, u64>)> {
    let mut stmt =
        c.prepare_cached("SELECT tenant, syncset, phase, failed, SUM(n) FROM key_counts GROUP BY 1, 2, 3, 4")?;
    let groups = stmt
        .query_map([], |r| {
            let group = Group {
                db_phase: r.get(2)?,
                failed: r.get(3)?,
                at_generation: false,
                count: r.get::<_, i64>(4)?.max(0).unsigned_abs(),
            };
            Ok(((r.get(0)?, r.get(1)?), group))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(phases_by_syncset(groups))
}

/// The tenant's clusters by condition, one `cluster_counts` row each; stale when last
/// seen before `cutoff`.
pub(super) fn cluster_conditions(c: &Connection, tenant: &str, cutoff: Timestamp) -> Result<ClusterConditions> {
    let sql = cluster_conditions_sql("SELECT n, bad, done, since, seen FROM cluster_counts WHERE tenant = ?1", "?2");
    let count =
        |r: &rusqlite::Row<'_>, i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0).unsigned_abs()) };
    Ok(c.prepare_cached(&sql)?.query_row(rusqlite::params![tenant, cutoff.millis()], |r| {
        Ok(ClusterConditions {
            ready: count(r, 0)?,
            progressing: count(r, 1)?,
            degraded: count(r, 2)?,
            stale: count(r, 3)?,
        })
    })?)
}

/// Every Cluster of the tenant with its labels and its `cluster_counts` row, by name.
pub(super) fn cluster_rows(c: &Connection, tenant: &str) -> Result<Vec<ClusterRow>> {
    let mut stmt = c.prepare_cached(
        "SELECT c.name, c.labels, cc.n, cc.bad, cc.done, cc.since, cc.seen
         FROM clusters c LEFT JOIN cluster_counts cc ON cc.tenant = c.tenant AND cc.cluster = c.name
         WHERE c.tenant = ?1 ORDER BY c.name",
    )?;
    let raw = stmt
        .query_map([tenant], |r| {
            let count = |i: usize| -> rusqlite::Result<u64> {
                Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0).max(0).unsigned_abs())
            };
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                (count(2)?, count(3)?, count(4)?),
                (r.get::<_, Option<i64>>(5)?, r.get::<_, Option<i64>>(6)?),
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    raw.into_iter()
        .map(|(name, labels, (keys, failing, applied), (since, seen))| {
            Ok(ClusterRow {
                labels: crate::stored::decode(crate::stored::table(Kind::Cluster), &labels)?,
                name,
                keys,
                failing,
                applied,
                since: since.map(Timestamp),
                seen: seen.map(Timestamp),
            })
        })
        .collect()
}
