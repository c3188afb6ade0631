//! Reading status, queue statistics and the event log on PostgreSQL. (Events are
//! appended at commit by [`super::Tx`].)

use super::{query, PgResult};
use crate::lifecycle::status_phase;
use crate::stored::decode;
use crate::{Event, QueueStats, StatusFilter};
use deadpool_postgres::GenericClient;
use fleetsync_model::{KeyStatus, Phase, Timestamp, WorkKey};
use std::collections::BTreeMap;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

pub(super) async fn events_read<C: GenericClient>(c: &C, after: u64, limit: usize) -> PgResult<Vec<Event>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = query(
        c,
        "SELECT seq, at, tenant, kind, name, action, generation FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
        &[&after, &limit],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Event {
                seq: u64::try_from(r.try_get::<_, i64>(0)?).unwrap_or(0),
                at: Timestamp(r.try_get(1)?),
                tenant: r.try_get(2)?,
                kind: r.try_get(3)?,
                name: r.try_get(4)?,
                action: r.try_get(5)?,
                generation: r.try_get(6)?,
            })
        })
        .collect()
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
    })
}

pub(super) async fn status_list<C: GenericClient>(c: &C, now: Timestamp, f: StatusFilter) -> PgResult<Vec<KeyStatus>> {
    let rows = query(
        c,
        "SELECT tenant, cluster, syncset, phase, desired, generation, observed_generation, attempts,
                last_error, resources, run_at, last_applied_at, updated_at
         FROM work
         WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR cluster = $2) AND ($3::text IS NULL OR syncset = $3)
         ORDER BY tenant, cluster, syncset",
        &[&f.tenant, &f.cluster, &f.syncset],
    )
    .await?;
    rows.iter().map(|r| key_status(r, now)).collect()
}

pub(super) async fn queue_stats<C: GenericClient>(c: &C, now: Timestamp) -> PgResult<QueueStats> {
    let by_db_phase = query(
        c,
        "SELECT phase, attempts > 0 AND last_error IS NOT NULL, COUNT(*) FROM work GROUP BY 1, 2",
        &[],
    );
    let now_ms = now.millis();
    let oldest_params: [&(dyn ToSql + Sync); 1] = [&now_ms];
    let oldest = query(c, "SELECT MIN(run_at) FROM work WHERE phase = 'ready' AND run_at <= $1", &oldest_params);
    let last = query(c, "SELECT COALESCE(MAX(seq), 0) FROM events", &[]);
    // Sent together: the connection pipelines them.
    let (by_db_phase, oldest, last) = tokio::try_join!(by_db_phase, oldest, last)?;

    let mut by_phase: BTreeMap<Phase, u64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
    for r in &by_db_phase {
        let failed: bool = r.try_get(1)?;
        let n = u64::try_from(r.try_get::<_, i64>(2)?).unwrap_or(0);
        *by_phase.entry(status_phase(r.try_get(0)?, u32::from(failed), failed)).or_default() += n;
    }
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
        oldest_ready_age: oldest.map(|t| now.since(Timestamp(t))).unwrap_or_default(),
        last_event_seq: u64::try_from(last_event_seq).unwrap_or(0),
    })
}
