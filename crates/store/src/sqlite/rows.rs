//! Reading status, queue statistics and the event log; appending events.

use crate::event::{merge_pages, scoped_horizon, tenant_cut, EventObject, TENANTS_WITH_EVENTS, TRIM_CHUNK};
use crate::lifecycle::status_phase;
use crate::page::phase_condition;
use crate::stored::decode;
use crate::{Event, EventRetention, EventsTrimmed, QueueStats, Result, StatusFilter, StoreError};
use fleetsync_model::{KeyStatus, Timestamp, WorkKey};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

/// Appends an event to the log.
pub(super) fn event_append(tx: &Connection, now: Timestamp, e: crate::write::NewEvent<'_>) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO events (at, tenant, kind, name, action, generation, actor) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![now.millis(), e.tenant, e.kind, e.name, e.action, e.generation, e.actor])?;
    Ok(())
}

/// Events after `after`. The horizon is read *after* the events: it only ever rises,
/// and a trim deletes and raises it in one transaction, so if it is still at or below
/// `after` now, no event after `after` was missing when the page was read.
pub(super) fn events_read(c: &Connection, after: u64, limit: usize) -> Result<Vec<Event>> {
    let events = events_page(c, after, limit)?;
    let horizon = events_horizon(c)?;
    if after < horizon {
        return Err(StoreError::CursorExpired { cursor: after, horizon });
    }
    Ok(events)
}

pub(super) fn events_horizon(c: &Connection) -> Result<u64> {
    let h: i64 = c.prepare_cached("SELECT v FROM meta WHERE k = 'events_horizon'")?.query_row([], |r| r.get(0))?;
    Ok(u64::try_from(h).unwrap_or(0))
}

/// The events of `tenants` after `after`, oldest first: a page read per tenant from the
/// `events_by_tenant` index, then merged, so a tenant's page costs its own events, not
/// the log's. The horizon (the highest of those tenants') is read after the pages, as
/// in [`events_read`].
pub(super) fn events_read_of(c: &Connection, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>> {
    let sql = "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events
               WHERE tenant = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";
    let pages = tenant_pages(c, sql, tenants, i64::try_from(after).unwrap_or(i64::MAX), limit)?;
    let horizon = tenants_horizon(c, tenants)?;
    if after < horizon {
        return Err(StoreError::CursorExpired { cursor: after, horizon });
    }
    Ok(merge_pages(pages, limit, false))
}

/// The newest events before `before` (none: the newest), newest first, of `tenants`
/// (none: every tenant's).
pub(super) fn events_newest(
    c: &Connection,
    tenants: Option<&[String]>,
    before: Option<u64>,
    limit: usize,
) -> Result<Vec<Event>> {
    let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let Some(tenants) = tenants else {
        let mut stmt = c.prepare_cached(
            "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events WHERE seq < ?1 ORDER BY seq DESC LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        return Ok(stmt.query_map(params![before, limit], event_row)?.collect::<rusqlite::Result<_>>()?);
    };
    let sql = "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events
               WHERE tenant = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3";
    Ok(merge_pages(tenant_pages(c, sql, tenants, before, limit)?, limit, true))
}

/// A page of each tenant's events by `sql` (bound to the tenant, `bound` and `limit`),
/// for [`merge_pages`].
fn tenant_pages(c: &Connection, sql: &str, tenants: &[String], bound: i64, limit: usize) -> Result<Vec<Vec<Event>>> {
    let mut stmt = c.prepare_cached(sql)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut pages = Vec::with_capacity(tenants.len());
    for tenant in tenants {
        pages.push(stmt.query_map(params![tenant, bound, limit], event_row)?.collect::<rusqlite::Result<Vec<_>>>()?);
    }
    Ok(pages)
}

/// The newest event's sequence number, or the horizon when a trim emptied the log.
pub(super) fn events_head(c: &Connection) -> Result<u64> {
    let head: i64 = c.query_row(
        "SELECT MAX(COALESCE((SELECT MAX(seq) FROM events), 0), (SELECT v FROM meta WHERE k = 'events_horizon'))",
        [],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(head).unwrap_or(0))
}

/// The horizon of a read of `tenants`: the highest of theirs (each at least the row of
/// `*`, the whole log's horizon from before horizons were kept per tenant).
fn tenants_horizon(c: &Connection, tenants: &[String]) -> Result<u64> {
    let mut stmt = c.prepare_cached("SELECT horizon FROM events_tenant_horizon WHERE tenant = ?1")?;
    let mut of = |tenant: &str| -> Result<u64> {
        let h: Option<i64> = stmt.query_row(params![tenant], |r| r.get(0)).optional()?;
        Ok(h.map_or(0, |h| u64::try_from(h).unwrap_or(0)))
    };
    let floor = of("*")?;
    let mut each = Vec::with_capacity(tenants.len());
    for tenant in tenants {
        each.push(of(tenant)?);
    }
    Ok(scoped_horizon(floor, each))
}

/// One chunk of a trim (see [`crate::EventLog::events_trim`]): for each tenant with
/// events, deletes its oldest events beyond `keep` and raises its horizon and the
/// whole log's, at most [`TRIM_CHUNK`] events in all. Returns what it did and whether
/// more is left to trim.
pub(super) fn events_trim_chunk(
    tx: &Transaction<'_>,
    now: Timestamp,
    keep: &EventRetention,
) -> Result<(EventsTrimmed, bool)> {
    let mut horizon = events_horizon(tx)?;
    let tenants: Vec<String> =
        tx.prepare_cached(TENANTS_WITH_EVENTS)?.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    let cutoff =
        keep.max_age.map(|age| now.millis().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)));
    let (mut budget, mut deleted) = (TRIM_CHUNK, 0u64);
    for tenant in &tenants {
        let seq = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> Result<Option<u64>> {
            let v: Option<i64> = tx.prepare_cached(sql)?.query_row(p, |r| r.get(0)).optional()?;
            Ok(v.map(|s| u64::try_from(s).unwrap_or(0)))
        };
        let own = tenants_horizon(tx, std::slice::from_ref(tenant))?;
        let last = seq("SELECT MAX(seq) FROM events WHERE tenant = ?1", &[tenant])?.unwrap_or(0);
        let beyond_count = match keep.max_events {
            Some(n) => seq(
                "SELECT seq FROM events WHERE tenant = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2",
                &[tenant, &i64::try_from(n).unwrap_or(i64::MAX)],
            )?,
            None => None,
        };
        let first_young = match cutoff {
            Some(cutoff) => {
                seq("SELECT seq FROM events WHERE tenant = ?1 AND at >= ?2 ORDER BY seq LIMIT 1", &[tenant, &cutoff])?
            }
            None => None,
        };
        let cut = tenant_cut(keep, beyond_count, first_young, last);
        if cut <= own {
            continue;
        }
        // The budget-th oldest event of the tenant, if the cut goes beyond it.
        let chunk_end = seq(
            "SELECT seq FROM events WHERE tenant = ?1 ORDER BY seq LIMIT 1 OFFSET ?2",
            &[tenant, &i64::try_from(budget - 1).unwrap_or(0)],
        )?;
        let chunk_cut = chunk_end.map_or(cut, |s| cut.min(s));
        let cut_sql = i64::try_from(chunk_cut).unwrap_or(i64::MAX);
        let n = tx
            .prepare_cached("DELETE FROM events WHERE tenant = ?1 AND seq <= ?2")?
            .execute(params![tenant, cut_sql])? as u64;
        tx.prepare_cached(
            "INSERT INTO events_tenant_horizon (tenant, horizon) VALUES (?1, ?2)
             ON CONFLICT (tenant) DO UPDATE SET horizon = MAX(horizon, excluded.horizon)",
        )?
        .execute(params![tenant, cut_sql])?;
        horizon = horizon.max(chunk_cut);
        tx.prepare_cached("UPDATE meta SET v = MAX(v, ?1) WHERE k = 'events_horizon'")?.execute(params![cut_sql])?;
        deleted += n;
        budget = budget.saturating_sub(n);
        if chunk_cut < cut || budget == 0 {
            return Ok((EventsTrimmed { deleted, horizon }, true));
        }
    }
    Ok((EventsTrimmed { deleted, horizon }, false))
}

fn events_page(c: &Connection, after: u64, limit: usize) -> Result<Vec<Event>> {
    let mut stmt = c.prepare_cached(
        "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
    )?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![after, limit], event_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The newest events of one object older than `before`, newest first (the
/// `events_by_object` index, in its order).
pub(super) fn events_of(c: &Connection, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
    let mut stmt = c.prepare_cached(
        "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events
         WHERE tenant = ?1 AND kind = ?2 AND name = ?3 AND seq < ?4 ORDER BY seq DESC LIMIT ?5",
    )?;
    let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![object.tenant, object.kind, object.name, before, limit], event_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        seq: r.get::<_, i64>(0)? as u64,
        at: Timestamp(r.get(1)?),
        tenant: r.get(2)?,
        kind: r.get(3)?,
        name: r.get(4)?,
        action: r.get(5)?,
        generation: r.get(6)?,
        actor: r.get(7)?,
    })
}

const STATUS_COLUMNS: &str = "tenant, cluster, syncset, phase, desired, generation, observed_generation, attempts,
    last_error, resources, run_at, last_applied_at, updated_at, rendered";

fn key_status(r: &Row<'_>, now: Timestamp) -> rusqlite::Result<(KeyStatus, String)> {
    let attempts: u32 = r.get(7)?;
    let last_error: Option<String> = r.get(8)?;
    let db_phase: String = r.get(3)?;
    let phase = status_phase(&db_phase, attempts, last_error.is_some());
    let run_at = Timestamp(r.get(10)?);
    let status = KeyStatus {
        key: WorkKey::new(r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?),
        phase,
        desired: r.get(4)?,
        generation: r.get(5)?,
        observed_generation: r.get(6)?,
        attempts,
        last_error,
        resources: Vec::new(),
        next_attempt_at: (db_phase == "ready" && run_at > now).then_some(run_at),
        last_applied_at: r.get::<_, Option<i64>>(11)?.map(Timestamp),
        updated_at: Timestamp(r.get(12)?),
        rendered_hash: r.get(13)?,
        drift: Vec::new(),
        unready: Vec::new(),
    };
    Ok((status, r.get(9)?))
}

pub(super) fn status_list(c: &Connection, now: Timestamp, f: &StatusFilter) -> Result<Vec<KeyStatus>> {
    status_rows(c, now, f, None, None)
}

/// The statuses `f` selects, in key order: after `after` (if given), at most `limit`.
pub(super) fn status_rows(
    c: &Connection,
    now: Timestamp,
    f: &StatusFilter,
    after: Option<&WorkKey>,
    limit: Option<usize>,
) -> Result<Vec<KeyStatus>> {
    let mut stmt = c.prepare_cached(&status_sql(f, after.is_some()))?;
    let (t, cl, s) = after.map(|k| (k.tenant.as_str(), k.cluster.as_str(), k.syncset.as_str())).unwrap_or_default();
    // Negative: no limit. Every numbered parameter is bound, used by the text or not.
    let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let rows = stmt
        .query_map(params![f.tenant, f.cluster, f.syncset, f.stale, t, cl, s, limit], |r| key_status(r, now))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(mut status, resources)| {
            status.resources = decode("work", &resources)?;
            Ok(status)
        })
        .collect()
}

/// The query of [`status_rows`]: `?1`–`?4` the filter, `?5`–`?7` the key to start
/// after (when `after`), `?8` the limit.
fn status_sql(f: &StatusFilter, after: bool) -> String {
    let mut sql = format!(
        "SELECT {STATUS_COLUMNS} FROM work
         WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR cluster = ?2) AND (?3 IS NULL OR syncset = ?3)
             AND (?4 = 0 OR observed_generation <> generation)"
    );
    if let Some(phases) = phase_condition(&f.phases) {
        sql.push_str(&format!(" AND {phases}"));
    }
    if after {
        sql.push_str(" AND (tenant, cluster, syncset) > (?5, ?6, ?7)");
    }
    sql.push_str(" ORDER BY tenant, cluster, syncset LIMIT ?8");
    sql
}

pub(super) fn queue_stats(c: &Connection, now: Timestamp) -> Result<QueueStats> {
    let (by_syncset, by_phase) = super::summary::count_by_phase(c)?;
    let oldest: Option<i64> = c.query_row(
        "SELECT MIN(run_at) FROM work WHERE phase = 'ready' AND run_at <= ?1",
        params![now.millis()],
        |r| r.get(0),
    )?;
    // The horizon counts when a trim emptied the log.
    let last_event_seq = events_head(c)?;
    Ok(QueueStats {
        by_phase,
        by_syncset,
        oldest_ready_age: oldest.map(|t| now.since(Timestamp(t))).unwrap_or_default(),
        last_event_seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::Phase;

    /// How SQLite reads `status_sql` on a migrated schema.
    fn plan(f: &StatusFilter, after: bool) -> String {
        let mut c = Connection::open_in_memory().expect("open");
        super::super::schema::migrate(&mut c).expect("migrate");
        let sql = format!("EXPLAIN QUERY PLAN {}", status_sql(f, after));
        let mut stmt = c.prepare(&sql).expect("prepare");
        let none: Option<String> = None;
        let rows = stmt
            .query_map(params!["t", none, none, false, "t", "c", "s", 10], |r| r.get::<_, String>(3))
            .expect("plan")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("rows");
        rows.join("; ")
    }

    /// A page of failures reads the keys with an error only, in page order (no sort),
    /// from the start and from a cursor; other phases walk the keys in page order.
    #[test]
    fn a_page_of_failures_reads_the_index_of_keys_with_an_error() {
        for phases in [vec![Phase::Failed, Phase::Parked], vec![Phase::Parked], vec![Phase::Failed]] {
            let f = StatusFilter { tenant: Some("t".into()), phases, ..StatusFilter::default() };
            for after in [false, true] {
                let plan = plan(&f, after);
                assert!(
                    plan.contains("work_errors_by_key") && !plan.contains("TEMP B-TREE"),
                    "{:?}, after {after}: {plan}",
                    f.phases
                );
            }
        }
        let pending = StatusFilter { phases: vec![Phase::Pending, Phase::Failed], ..StatusFilter::default() };
        assert!(!plan(&pending, false).contains("work_errors_by_key"), "Pending keys have no error: not in that index");
    }
}
