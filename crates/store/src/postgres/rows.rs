//! Reading status, queue statistics and the event log on PostgreSQL. (Events are
//! appended at commit by [`super::Tx`].)

use super::{query, PgResult, Tx};
use crate::event::{scoped_horizon, tenant_cut, EventObject, TENANTS_WITH_EVENTS, TRIM_CHUNK};
use crate::lifecycle::status_phase;
use crate::page::phase_condition;
use crate::stored::decode;
use crate::{Event, EventRetention, EventsTrimmed, QueueStats, StatusFilter, StoreError};
use deadpool_postgres::GenericClient;
use fleetsync_model::{KeyStatus, Timestamp, WorkKey};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Events after `after`. The horizon is read by a *later* statement (READ COMMITTED:
/// a later snapshot): it only ever rises, and a trim deletes and raises it in one
/// transaction, so if it is still at or below `after` then, no event after `after`
/// was missing from the page.
pub(super) async fn events_read<C: GenericClient>(c: &C, after: u64, limit: usize) -> PgResult<Vec<Event>> {
    let events = events_page(c, after, limit).await?;
    let horizon = events_horizon(c).await?;
    if after < horizon {
        return Err(StoreError::CursorExpired { cursor: after, horizon }.into());
    }
    Ok(events)
}

pub(super) async fn events_horizon<C: GenericClient>(c: &C) -> PgResult<u64> {
    let rows = query(c, "SELECT horizon FROM events_horizon", &[]).await?;
    let h: i64 = match rows.first() {
        Some(r) => r.try_get(0)?,
        None => 0,
    };
    Ok(u64::try_from(h).unwrap_or(0))
}

/// The events of `tenants` after `after`, oldest first, in one statement that reads a
/// page per tenant from the `events_by_tenant` index: it costs the page, not the log
/// (a row comparison selects the tenant, see [`NEWEST_FIRST`]).
/// The horizon (the highest of those tenants') is read by a later statement, as in
/// [`events_read`].
pub(super) async fn events_read_of<C: GenericClient>(
    c: &C,
    tenants: &[String],
    after: u64,
    limit: usize,
) -> PgResult<Vec<Event>> {
    let (after_sql, limit_sql) = (i64::try_from(after).unwrap_or(i64::MAX), i64::try_from(limit).unwrap_or(i64::MAX));
    let rows = query(
        c,
        "SELECT e.seq, e.at, e.tenant, e.kind, e.name, e.action, e.generation, e.actor
         FROM unnest($1::text[]) AS t(tenant), LATERAL (
             SELECT * FROM events WHERE (events.tenant, seq) > (t.tenant, $2) AND events.tenant <= t.tenant
             ORDER BY events.tenant, seq LIMIT $3) e
         ORDER BY e.seq LIMIT $3",
        &[&tenants, &after_sql, &limit_sql],
    )
    .await?;
    let events = rows.iter().map(event_row).collect::<PgResult<Vec<_>>>()?;
    let horizon = tenants_horizon(c, tenants).await?;
    if after < horizon {
        return Err(StoreError::CursorExpired { cursor: after, horizon }.into());
    }
    Ok(events)
}

/// The newest events before `before` (none: the newest), newest first, of `tenants`
/// (none: every tenant's).
pub(super) async fn events_newest<C: GenericClient>(
    c: &C,
    tenants: Option<&[String]>,
    before: Option<u64>,
    limit: usize,
) -> PgResult<Vec<Event>> {
    let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = match tenants {
        None => {
            let sql = "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events WHERE seq < $1 ORDER BY seq DESC LIMIT $2";
            query(c, sql, &[&before, &limit]).await?
        }
        Some(tenants) => {
            let sql = "SELECT e.seq, e.at, e.tenant, e.kind, e.name, e.action, e.generation, e.actor
                 FROM unnest($1::text[]) AS t(tenant), LATERAL (
                     SELECT * FROM events WHERE (events.tenant, seq) < (t.tenant, $2) AND events.tenant >= t.tenant
                     ORDER BY events.tenant DESC, seq DESC LIMIT $3) e
                 ORDER BY e.seq DESC LIMIT $3";
            query(c, sql, &[&tenants, &before, &limit]).await?
        }
    };
    rows.iter().map(event_row).collect()
}

/// One tenant's events (`$1`), newest first. A tenant's events are selected by a row
/// comparison on `(tenant, seq)` rather than `tenant = $1`: with the tenant a parameter
/// (or from `unnest`), PostgreSQL estimates it matches as many rows as the busiest
/// tenant has, and for an equality it drops the tenant from the order, so it would walk
/// the whole log by `seq` filtering on the tenant (125 ms at 1,000,000 events of
/// another tenant). The comparison keeps `events_by_tenant` the only index that serves
/// the order.
const NEWEST_FIRST: &str = "SELECT seq FROM events WHERE (tenant, seq) < ($1, 9223372036854775807) AND tenant >= $1 ORDER BY tenant DESC, seq DESC";

/// The newest event's sequence number, or the horizon when a trim emptied the log.
const EVENTS_HEAD: &str =
    "SELECT GREATEST((SELECT COALESCE(max(seq), 0) FROM events), (SELECT max(horizon) FROM events_horizon))";

pub(super) async fn events_head<C: GenericClient>(c: &C) -> PgResult<u64> {
    let rows = query(c, EVENTS_HEAD, &[]).await?;
    let head: i64 = match rows.first() {
        Some(r) => r.try_get::<_, Option<i64>>(0)?.unwrap_or(0),
        None => 0,
    };
    Ok(u64::try_from(head).unwrap_or(0))
}

/// The horizon of a read of `tenants`: the highest of theirs (each at least the row of
/// `*`, the whole log's horizon from before horizons were kept per tenant).
async fn tenants_horizon<C: GenericClient>(c: &C, tenants: &[String]) -> PgResult<u64> {
    let rows = query(
        c,
        "SELECT tenant, horizon FROM events_tenant_horizon WHERE tenant = '*' OR tenant = ANY($1)",
        &[&tenants],
    )
    .await?;
    let (mut floor, mut each) = (0, Vec::with_capacity(rows.len()));
    for r in &rows {
        let h = u64::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0);
        if r.try_get::<_, String>(0)? == "*" {
            floor = h;
        } else {
            each.push(h);
        }
    }
    Ok(scoped_horizon(floor, each))
}

/// One chunk of a trim (see [`crate::EventLog::events_trim`]): for each tenant with
/// events, deletes its oldest events beyond `keep` and raises its horizon and the
/// whole log's, at most [`TRIM_CHUNK`] events in all. Returns what it did and whether
/// more is left to trim.
///
/// Events being appended meanwhile are safe: they get their `seq` under the log's
/// advisory lock, after every committed event, so they are above any cut computed here
/// from committed rows. The whole log's horizon row lock serializes concurrent trims.
pub(super) async fn events_trim_chunk(tx: &Tx<'_>, keep: EventRetention) -> PgResult<(EventsTrimmed, bool)> {
    let row = tx.query_opt("SELECT horizon FROM events_horizon FOR UPDATE", &[]).await?;
    let mut horizon = u64::try_from(row.map_or(Ok(0), |r| r.try_get::<_, i64>(0))?).unwrap_or(0);
    let tenants: Vec<String> =
        tx.query(TENANTS_WITH_EVENTS, &[]).await?.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    let cutoff =
        keep.max_age.map(|age| tx.now.millis().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)));
    let (mut budget, mut deleted) = (TRIM_CHUNK, 0u64);
    for tenant in &tenants {
        let seq = |row: Option<Row>| -> PgResult<Option<u64>> {
            let v = match row {
                Some(r) => r.try_get::<_, Option<i64>>(0)?,
                None => None,
            };
            Ok(v.map(|s| u64::try_from(s).unwrap_or(0)))
        };
        let own = tenants_horizon(&tx.tx, std::slice::from_ref(tenant)).await?;
        let last = seq(tx.query_opt(&format!("{NEWEST_FIRST} LIMIT 1"), &[tenant]).await?)?.unwrap_or(0);
        let beyond_count = match keep.max_events {
            Some(n) => {
                let n = i64::try_from(n).unwrap_or(i64::MAX);
                seq(tx.query_opt(&format!("{NEWEST_FIRST} OFFSET $2 LIMIT 1"), &[tenant, &n]).await?)?
            }
            None => None,
        };
        let first_young = match cutoff {
            Some(cutoff) => {
                let sql = "SELECT seq FROM events WHERE (tenant, seq) > ($1, 0) AND tenant <= $1 AND at >= $2 ORDER BY tenant, seq LIMIT 1";
                seq(tx.query_opt(sql, &[tenant, &cutoff]).await?)?
            }
            None => None,
        };
        let cut = tenant_cut(&keep, beyond_count, first_young, last);
        if cut <= own {
            continue;
        }
        let offset = i64::try_from(budget - 1).unwrap_or(0);
        let sql = "SELECT seq FROM events WHERE (tenant, seq) > ($1, 0) AND tenant <= $1 ORDER BY tenant, seq OFFSET $2 LIMIT 1";
        let chunk_end = seq(tx.query_opt(sql, &[tenant, &offset]).await?)?;
        let chunk_cut = chunk_end.map_or(cut, |s| cut.min(s));
        let cut_sql = i64::try_from(chunk_cut).unwrap_or(i64::MAX);
        let n = tx
            .execute("DELETE FROM events WHERE (tenant, seq) <= ($1, $2) AND tenant >= $1", &[tenant, &cut_sql])
            .await?;
        tx.execute(
            "INSERT INTO events_tenant_horizon (tenant, horizon) VALUES ($1, $2)
             ON CONFLICT (tenant) DO UPDATE SET horizon = GREATEST(events_tenant_horizon.horizon, excluded.horizon)",
            &[tenant, &cut_sql],
        )
        .await?;
        horizon = horizon.max(chunk_cut);
        tx.execute("UPDATE events_horizon SET horizon = GREATEST(horizon, $1)", &[&cut_sql]).await?;
        deleted += n;
        budget = budget.saturating_sub(n);
        if chunk_cut < cut || budget == 0 {
            return Ok((EventsTrimmed { deleted, horizon }, true));
        }
    }
    Ok((EventsTrimmed { deleted, horizon }, false))
}

async fn events_page<C: GenericClient>(c: &C, after: u64, limit: usize) -> PgResult<Vec<Event>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(
        c,
        "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
        &[&after, &limit],
    )
    .await?;
    rows.iter().map(event_row).collect()
}

/// The newest events of one object older than `before`, newest first (the
/// `events_by_object` index, in its order).
pub(super) async fn events_of<C: GenericClient>(
    c: &C,
    object: &EventObject,
    before: Option<u64>,
    limit: usize,
) -> PgResult<Vec<Event>> {
    let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(
        c,
        "SELECT seq, at, tenant, kind, name, action, generation, actor FROM events
         WHERE tenant = $1 AND kind = $2 AND name = $3 AND seq < $4 ORDER BY seq DESC LIMIT $5",
        &[&object.tenant, &object.kind, &object.name, &before, &limit],
    )
    .await?;
    rows.iter().map(event_row).collect()
}

fn event_row(r: &Row) -> PgResult<Event> {
    Ok(Event {
        seq: u64::try_from(r.try_get::<_, i64>(0)?).unwrap_or(0),
        at: Timestamp(r.try_get(1)?),
        tenant: r.try_get(2)?,
        kind: r.try_get(3)?,
        name: r.try_get(4)?,
        action: r.try_get(5)?,
        generation: r.try_get(6)?,
        actor: r.try_get(7)?,
    })
}

fn key_status(r: &Row, now: Timestamp) -> PgResult<KeyStatus> {
    let attempts = u32::try_from(r.try_get::<_, i32>(7)?).unwrap_or(0);
    let last_error: Option<String> = r.try_get(8)?;
    let db_phase: &str = r.try_get(3)?;
    let run_at = Timestamp(r.try_get(10)?);
    Ok(KeyStatus {
        key: WorkKey::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?),
        phase: status_phase(db_phase, attempts, last_error.is_some()),
        desired: r.try_get(4)?,
        generation: r.try_get(5)?,
        observed_generation: r.try_get(6)?,
        attempts,
        last_error,
        resources: decode("work", r.try_get(9)?)?,
        next_attempt_at: (db_phase == "ready" && run_at > now).then_some(run_at),
        last_applied_at: r.try_get::<_, Option<i64>>(11)?.map(Timestamp),
        updated_at: Timestamp(r.try_get(12)?),
        rendered_hash: r.try_get(13)?,
        drift: Vec::new(),
        unready: Vec::new(),
    })
}

pub(super) async fn status_list<C: GenericClient>(c: &C, now: Timestamp, f: StatusFilter) -> PgResult<Vec<KeyStatus>> {
    status_rows(c, now, &f, None, None).await
}

/// The statuses `f` selects, in key order: after `after` (if given), at most `limit`.
pub(super) async fn status_rows<C: GenericClient>(
    c: &C,
    now: Timestamp,
    f: &StatusFilter,
    after: Option<&WorkKey>,
    limit: Option<usize>,
) -> PgResult<Vec<KeyStatus>> {
    let limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
    let mut sql = String::from(
        "SELECT tenant, cluster, syncset, phase, desired, generation, observed_generation, attempts,
                last_error, resources, run_at, last_applied_at, updated_at, rendered
         FROM work
         WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR cluster = $2) AND ($3::text IS NULL OR syncset = $3)
             AND (NOT $4 OR observed_generation <> generation)",
    );
    if let Some(phases) = phase_condition(&f.phases) {
        sql.push_str(&format!(" AND {phases}"));
    }
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&f.tenant, &f.cluster, &f.syncset, &f.stale, &limit];
    if let Some(k) = after {
        sql.push_str(" AND (tenant, cluster, syncset) > ($6, $7, $8)");
        params.extend([&k.tenant as &(dyn ToSql + Sync), &k.cluster, &k.syncset]);
    }
    sql.push_str(" ORDER BY tenant, cluster, syncset LIMIT $5");
    let rows = query(c, &sql, &params).await?;
    rows.iter().map(|r| key_status(r, now)).collect()
}

/// The newest migration applied to the schema.
pub(super) async fn schema_version<C: GenericClient>(c: &C) -> PgResult<i32> {
    Ok(c.query_one("SELECT COALESCE(max(version), 0) FROM fleetsync_schema_migrations", &[]).await?.try_get(0)?)
}

pub(super) async fn queue_stats<C: GenericClient>(c: &C, now: Timestamp) -> PgResult<QueueStats> {
    let by_phase = super::counts::by_phase(c);
    let now_ms = now.millis();
    let oldest_params: [&(dyn ToSql + Sync); 1] = [&now_ms];
    // The first key in claim order that is ready: past the leased ones (no more than
    // are in flight), not a scan of `work`.
    let oldest = query(
        c,
        "SELECT d.due_at FROM due d JOIN work w ON w.id = d.id
         WHERE d.due_at <= $1 AND w.phase = 'ready' ORDER BY d.due_at LIMIT 1",
        &oldest_params,
    );
    // The horizon counts when a trim emptied the log.
    let last = query(c, EVENTS_HEAD, &[]);
    // Sent together: the connection pipelines them.
    let ((by_syncset, by_phase), oldest, last) = tokio::try_join!(by_phase, oldest, last)?;

    let oldest: Option<i64> = match oldest.first() {
        Some(r) => r.try_get(0)?,
        None => None,
    };
    let last_event_seq: i64 = match last.first() {
        Some(r) => r.try_get(0)?,
        None => 0,
    };
    Ok(QueueStats {
        by_phase,
        by_syncset,
        oldest_ready_age: oldest.map(|t| now.since(Timestamp(t))).unwrap_or_default(),
        last_event_seq: u64::try_from(last_event_seq).unwrap_or(0),
    })
}
