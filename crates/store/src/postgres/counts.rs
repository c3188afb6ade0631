//! Keys counted by SyncSet and group (stored phase, failed, at the generation asked
//! for), so that a summary or a scrape reads a few rows instead of every key.
//!
//! Triggers on `work` (migration 11) record, per statement and in its transaction, how
//! the statement moved keys between groups, as rows of `key_count_deltas`. Those are
//! only ever inserted: two processes completing keys of one SyncSet at once never wait
//! for each other, as they would if both updated the same counter row until their
//! commits. A count is its `key_counts` row plus its deltas; [`fold`] moves the deltas
//! into `key_counts` (heartbeats call it, one process at a time), which keeps the
//! deltas few.

use super::{query, PgResult, Tx};
use crate::summary::Group;
use deadpool_postgres::GenericClient;
use fleetsync_model::cluster_list::ClusterRow;
use fleetsync_model::{ClusterConditions, Kind, Phase, Timestamp};
use std::collections::BTreeMap;
use tokio_postgres::types::ToSql;

/// Every key by SyncSet, stored phase and failed.
const ALL: &str = "SELECT tenant, syncset, phase, failed, SUM(n)::bigint FROM (
        SELECT tenant, syncset, phase, failed, n FROM key_counts
        UNION ALL SELECT tenant, syncset, phase, failed, n FROM key_count_deltas) c
     GROUP BY 1, 2, 3, 4";

/// The groups of a tenant's keys, or of one SyncSet's (see [`crate::summary::scope`]).
pub(super) async fn groups<C: GenericClient>(c: &C, tenant: &str, syncset: Option<&str>) -> PgResult<Vec<Group>> {
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&tenant];
    if let Some(syncset) = &syncset {
        params.push(syncset);
    }
    let scope = crate::summary::scope("", syncset.is_some());
    let sql = format!(
        "SELECT phase, failed, at_generation, SUM(n)::bigint FROM (
            SELECT phase, failed, at_generation, n FROM key_counts WHERE {scope}
            UNION ALL
            SELECT phase, failed, at_generation, n FROM key_count_deltas WHERE {scope}) c
         GROUP BY 1, 2, 3"
    );
    query(c, &sql, &params)
        .await?
        .iter()
        .map(|r| {
            Ok(Group {
                db_phase: r.try_get(0)?,
                failed: r.try_get(1)?,
                at_generation: r.try_get(2)?,
                count: r.try_get::<_, Option<i64>>(3)?.unwrap_or(0).max(0).unsigned_abs(),
            })
        })
        .collect()
}

/// Every key by phase, per `(tenant, syncset)` and in all.
#[allow(clippy::type_complexity)]
pub(super) async fn by_phase<C: GenericClient>(
    c: &C,
) -> PgResult<(BTreeMap<(String, String), BTreeMap<Phase, u64>>, BTreeMap<Phase, u64>)> {
    let groups = query(c, ALL, &[])
        .await?
        .iter()
        .map(|r| {
            let count = r.try_get::<_, Option<i64>>(4)?.unwrap_or(0).max(0).unsigned_abs();
            let group = Group { db_phase: r.try_get(2)?, failed: r.try_get(3)?, at_generation: false, count };
            Ok(((r.try_get(0)?, r.try_get(1)?), group))
        })
        .collect::<PgResult<Vec<_>>>()?;
    Ok(crate::summary::phases_by_syncset(groups))
}

/// The tenant's clusters by condition: each cluster's `cluster_counts` row plus its
/// deltas, one group per cluster; stale when last seen before `cutoff`.
pub(super) async fn cluster_conditions<C: GenericClient>(
    c: &C,
    tenant: &str,
    cutoff: Timestamp,
) -> PgResult<ClusterConditions> {
    let sql = crate::summary::cluster_conditions_sql(
        "SELECT SUM(n) AS n, SUM(bad) AS bad, SUM(done) AS done, MIN(since) AS since, MAX(seen) AS seen FROM (
            SELECT cluster, n, bad, done, since, seen FROM cluster_counts WHERE tenant = $1
            UNION ALL
            SELECT cluster, n, bad, done, since, seen FROM cluster_count_deltas WHERE tenant = $1) u
         GROUP BY cluster",
        "$2",
    );
    let rows = query(c, &sql, &[&tenant, &cutoff.millis()]).await?;
    let count = |i| -> PgResult<u64> {
        Ok(rows.first().map(|r| r.try_get::<_, i64>(i)).transpose()?.unwrap_or(0).max(0).unsigned_abs())
    };
    Ok(ClusterConditions { ready: count(0)?, progressing: count(1)?, degraded: count(2)?, stale: count(3)? })
}

/// Every Cluster of the tenant with its labels and its `cluster_counts` row plus its
/// deltas, by name.
pub(super) async fn cluster_rows<C: GenericClient>(c: &C, tenant: &str) -> PgResult<Vec<ClusterRow>> {
    let rows = query(
        c,
        "SELECT c.name, c.labels, cc.n, cc.bad, cc.done, cc.since, cc.seen
         FROM clusters c LEFT JOIN (
             SELECT cluster, SUM(n)::bigint AS n, SUM(bad)::bigint AS bad, SUM(done)::bigint AS done,
                    MIN(since) AS since, MAX(seen) AS seen FROM (
                 SELECT cluster, n, bad, done, since, seen FROM cluster_counts WHERE tenant = $1
                 UNION ALL
                 SELECT cluster, n, bad, done, since, seen FROM cluster_count_deltas WHERE tenant = $1) u
             GROUP BY cluster) cc ON cc.cluster = c.name
         WHERE c.tenant = $1 ORDER BY c.name",
        &[&tenant],
    )
    .await?;
    let count = |r: &tokio_postgres::Row, i| -> PgResult<u64> {
        Ok(r.try_get::<_, Option<i64>>(i)?.unwrap_or(0).max(0).unsigned_abs())
    };
    rows.iter()
        .map(|r| {
            let labels: String = r.try_get(1)?;
            Ok(ClusterRow {
                name: r.try_get(0)?,
                labels: crate::stored::decode(crate::stored::table(Kind::Cluster), &labels)?,
                keys: count(r, 2)?,
                failing: count(r, 3)?,
                applied: count(r, 4)?,
                since: r.try_get::<_, Option<i64>>(5)?.map(Timestamp),
                seen: r.try_get::<_, Option<i64>>(6)?.map(Timestamp),
            })
        })
        .collect()
}

/// Moves every delta committed so far into `key_counts` and `cluster_counts`, unless another process is
/// doing so now (then it is left to the next call). Returns how many deltas moved.
pub(super) async fn fold(tx: &mut Tx<'_>) -> PgResult<u64> {
    let locked = tx
        .query(
            "SELECT pg_try_advisory_xact_lock(hashtextextended('fleetsync key_counts ' || current_schema(), 0))",
            &[],
        )
        .await?;
    if !locked.first().map(|r| r.try_get::<_, bool>(0)).transpose()?.unwrap_or(false) {
        return Ok(0);
    }
    // Rows are inserted in key order, so two folds (should the lock ever be bypassed)
    // lock them in the same order.
    let moved = tx
        .execute(
            "WITH moved AS (DELETE FROM key_count_deltas RETURNING tenant, syncset, phase, failed, at_generation, n)
             INSERT INTO key_counts
                 SELECT tenant, syncset, phase, failed, at_generation, SUM(n) FROM moved
                 GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
             ON CONFLICT (tenant, syncset, phase, failed, at_generation) DO UPDATE SET n = key_counts.n + EXCLUDED.n",
            &[],
        )
        .await?;
    if moved > 0 {
        tx.execute("DELETE FROM key_counts WHERE n = 0", &[]).await?;
    }
    let clusters = tx
        .execute(
            "WITH moved AS (DELETE FROM cluster_count_deltas RETURNING tenant, cluster, n, bad, done, since, seen)
             INSERT INTO cluster_counts
                 SELECT tenant, cluster, SUM(n), SUM(bad), SUM(done), MIN(since), MAX(seen) FROM moved GROUP BY 1, 2 ORDER BY 1, 2
             ON CONFLICT (tenant, cluster) DO UPDATE
                 SET n = cluster_counts.n + EXCLUDED.n, bad = cluster_counts.bad + EXCLUDED.bad, done = cluster_counts.done + EXCLUDED.done,
                     since = LEAST(cluster_counts.since, EXCLUDED.since), seen = GREATEST(cluster_counts.seen, EXCLUDED.seen)",
            &[],
        )
        .await?;
    if clusters > 0 {
        tx.execute("DELETE FROM cluster_counts WHERE n = 0", &[]).await?;
    }
    Ok(moved + clusters)
}
