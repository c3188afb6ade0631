//! The coalescing keyed work queue on PostgreSQL: one row per key in `work`, following
//! the key lifecycle of [`crate::lifecycle`], and its row in `due` while it is pending
//! or leased (`due.rs`). Statements are set-based (arrays passed with `unnest`), and
//! rows are locked in id order so concurrent writers do not deadlock (`mod.rs`). Claims
//! are in `claim.rs`, completions in `complete.rs`.

use super::due::position;
use super::{PgResult, Tx};
use crate::lifecycle::Enqueue;
use crate::stored::corrupt;
use crate::write::transitions::{CHANGE, RELEASE, RESYNC};
use crate::{Fence, RenewParams};
use fleetsync_model::shard::shard_of;
use fleetsync_model::{ApplyMode, WorkKey};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Keys to enqueue in one statement (distinct keys; see [`enqueue`]).
#[derive(Default)]
pub(super) struct Enqueues {
    tenants: Vec<String>,
    clusters: Vec<String>,
    syncsets: Vec<String>,
    desired: Vec<bool>,
    /// `None` (NULL): the row's (see [`Enqueues::push`]).
    modes: Vec<Option<&'static str>>,
    generations: Vec<Option<i64>>,
    shards: Vec<i16>,
    /// 1 if the enqueue makes its key dirty, 0 for an own write's key it leaves clean.
    bumps: Vec<i64>,
}

impl Enqueues {
    /// Adds a key. `e` must say `desired`: apply (with generation and mode, or without
    /// them to keep the row's: [`Enqueue::keep_revision`]) or remove; a re-run as it is
    /// goes through [`again`]. `dirties`: see
    /// [`Planned::dirties`](crate::plan::Planned::dirties).
    pub(super) fn push(&mut self, key: WorkKey, e: Enqueue, dirties: bool) {
        let desired = e.desired.unwrap_or(true);
        // A removal keeps the row's generation and mode in any case (the upsert ignores
        // them), and a new row for one starts at 0, Upsert: no need to look the row's up.
        let fill = !desired;
        // Shards are below 256 (`SHARDS`), so they fit PostgreSQL's smallint.
        self.shards.push(shard_of(&key.tenant, &key.cluster) as i16);
        self.tenants.push(key.tenant);
        self.clusters.push(key.cluster);
        self.syncsets.push(key.syncset);
        self.desired.push(desired);
        self.modes.push(e.mode.or(fill.then_some(ApplyMode::Upsert)).map(ApplyMode::as_str));
        self.generations.push(e.generation.or(fill.then_some(0)));
        self.bumps.push(i64::from(dirties));
    }

    pub(super) fn len(&self) -> u64 {
        self.tenants.len() as u64
    }
}

/// The enqueued keys' rows that exist, locked in id order, with what says where their
/// rows in `due` are.
const LOCK_KEYS: &str = "SELECT w.tenant, w.cluster, w.syncset, w.phase, w.run_at FROM work w
             WHERE (w.tenant, w.cluster, w.syncset) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
             ORDER BY w.id
             FOR UPDATE";

/// The enqueue itself (see [`enqueue`]); returns where each key's row in `due` goes.
/// A key kept at its revision (NULL generation and mode) takes its row's, read in the
/// statement's snapshot, which follows [`LOCK_KEYS`]: the rows are locked, so what it
/// reads is what the upsert updates. (COALESCE reads the row only for those keys.)
static UPSERT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO work AS w (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq,
                                   phase, run_at, fence, attempts, observed_generation, updated_at, shard, pending_since)
             SELECT u.tenant, u.cluster, u.syncset, u.desired,
                 COALESCE(u.mode, (SELECT k.apply_mode FROM work k WHERE (k.tenant, k.cluster, k.syncset) = (u.tenant, u.cluster, u.syncset)), 'Upsert'),
                 COALESCE(u.generation, (SELECT k.generation FROM work k WHERE (k.tenant, k.cluster, k.syncset) = (u.tenant, u.cluster, u.syncset)), 0),
                 u.bump, 0, 'ready', $7, 0, 0, 0, $7, u.shard,
                 CASE WHEN u.bump = 1 THEN $7::bigint END
             FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::text[], $6::bigint[], $8::smallint[], $9::bigint[])
                  AS u(tenant, cluster, syncset, desired, mode, generation, shard, bump)
             ORDER BY u.tenant, u.cluster, u.syncset
             ON CONFLICT (tenant, cluster, syncset) DO UPDATE SET
                 desired = EXCLUDED.desired,
                 apply_mode = CASE WHEN EXCLUDED.desired THEN EXCLUDED.apply_mode ELSE w.apply_mode END,
                 generation = CASE WHEN EXCLUDED.desired THEN EXCLUDED.generation ELSE w.generation END,
                 {}
             RETURNING w.tenant, w.cluster, w.syncset, w.phase, w.run_at, w.id, w.shard",
        CHANGE.sql(&[("row", "w."), ("now", "EXCLUDED.updated_at"), ("bump", "EXCLUDED.want_seq")])
    )
});

/// Makes keys pending, as [`CHANGE`] says. A removal keeps the row's generation and
/// mode; a new row for a removal starts at generation 0, Upsert. So does a key kept at
/// its revision ([`Enqueue::keep_revision`]), which stays wanted. An own write's key
/// (see [`Planned::dirties`](crate::plan::Planned::dirties)) has a `bump` of 0, carried
/// in the inserted `want_seq`.
///
/// The rows are locked and read first, in id order, for where each key's row in `due`
/// is; the upsert then says where it goes (and waits for no row: it holds them all).
pub(super) async fn enqueue(tx: &mut Tx<'_>, e: &Enqueues) -> PgResult<u64> {
    if e.tenants.is_empty() {
        return Ok(0);
    }
    let now = tx.now.millis();
    let lock_params: [&(dyn ToSql + Sync); 3] = [&e.tenants, &e.clusters, &e.syncsets];
    let upsert_params: [&(dyn ToSql + Sync); 9] =
        [&e.tenants, &e.clusters, &e.syncsets, &e.desired, &e.modes, &e.generations, &now, &e.shards, &e.bumps];
    // The upsert needs nothing from the read: both go out at once, in this order.
    let mut results = tx.pipeline(&[(LOCK_KEYS, &lock_params), (UPSERT.as_str(), &upsert_params)]).await?.into_iter();
    let (before, after) = (results.next().unwrap_or_default(), results.next().unwrap_or_default());
    let mut was = HashMap::with_capacity(before.len());
    for r in &before {
        was.insert(row_key(r)?, position(r.try_get(3)?, r.try_get(4)?));
    }
    for r in &after {
        let key = row_key(r)?;
        let from = was.get(&key).copied().flatten();
        tx.due.record(key, r.try_get(5)?, r.try_get(6)?, from, position(r.try_get(3)?, r.try_get(4)?));
    }
    Ok(e.len())
}

/// The key in columns 0–2.
pub(super) fn row_key(r: &Row) -> PgResult<WorkKey> {
    Ok(WorkKey::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?))
}

pub(super) fn attempts(n: i32) -> PgResult<u32> {
    Ok(u32::try_from(n).map_err(|_| corrupt("work", format!("attempts {n}")))?)
}

/// Split keys into the column arrays `unnest` takes.
pub(super) fn key_columns<'a>(keys: impl Iterator<Item = &'a WorkKey>) -> (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>) {
    let mut cols = (Vec::new(), Vec::new(), Vec::new());
    for k in keys {
        cols.0.push(k.tenant.as_str());
        cols.1.push(k.cluster.as_str());
        cols.2.push(k.syncset.as_str());
    }
    cols
}

/// Extends the leases still held (a HOT update; nothing moves in `due`); returns the
/// keys of those that are not held any more.
pub(super) async fn renew(tx: &mut Tx<'_>, p: &RenewParams) -> PgResult<Vec<WorkKey>> {
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let expires = tx.now.plus(p.lease_ttl).millis();
    let (tenants, clusters, syncsets) = key_columns(p.leases.iter().map(|(k, _)| k));
    let fences: Vec<i64> = p.leases.iter().map(|(_, f)| f.get()).collect();
    let rows = tx
        .query(
            "WITH held AS (
                 SELECT w.id FROM work w
                 JOIN unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(tenant, cluster, syncset, fence)
                   ON w.tenant = u.tenant AND w.cluster = u.cluster AND w.syncset = u.syncset AND w.fence = u.fence
                 WHERE w.phase = 'running'
                 ORDER BY w.id
                 FOR UPDATE OF w)
             UPDATE work SET lease_expires_at = $1 WHERE work.id = ANY(ARRAY(SELECT id FROM held))
             RETURNING work.tenant, work.cluster, work.syncset, work.fence",
            &[&expires, &tenants, &clusters, &syncsets, &fences],
        )
        .await?;
    let mut renewed = HashSet::with_capacity(rows.len());
    for r in &rows {
        renewed.insert((row_key(r)?, Fence::new(r.try_get(3)?)));
    }
    Ok(p.leases.iter().filter(|(k, f)| !renewed.contains(&(k.clone(), *f))).map(|(k, _)| k.clone()).collect())
}

static RELEASE_ONE: LazyLock<String> = LazyLock::new(|| {
    let args = [("now", "$1"), ("fence", "$5")];
    format!(
        "WITH held AS MATERIALIZED (
             SELECT id, run_at AS was FROM work
             WHERE tenant = $2 AND cluster = $3 AND syncset = $4 AND {}
             FOR UPDATE)
         UPDATE work SET {}
         WHERE id = (SELECT id FROM held)
         RETURNING id, shard, (SELECT was FROM held)",
        RELEASE.guard(&args),
        RELEASE.sql(&args)
    )
});

/// Gives a leased key back: ready now, the attempt not counted. Nothing for a stale token.
pub(super) async fn release(tx: &mut Tx<'_>, key: WorkKey, fence: Fence) -> PgResult<()> {
    let now = tx.now.millis();
    let rows = tx.query(&RELEASE_ONE, &[&now, &key.tenant, &key.cluster, &key.syncset, &fence.get()]).await?;
    if let Some(r) = rows.first() {
        tx.due.record(key, r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, Some(now));
        tx.wake_at(tx.now);
    }
    Ok(())
}

/// Sets a running key's inventory under its lease (see
/// [`WorkQueue::work_inventory_record`](crate::WorkQueue::work_inventory_record)); whether
/// the lease was held. The row stays where it is in `due`: neither its phase nor its
/// times change.
pub(super) async fn inventory_set(tx: &mut Tx<'_>, key: &WorkKey, fence: Fence, inventory: &str) -> PgResult<bool> {
    let n = tx
        .execute(
            "UPDATE work SET inventory = $1
             WHERE tenant = $2 AND cluster = $3 AND syncset = $4 AND fence = $5 AND phase = 'running'",
            &[&inventory, &key.tenant, &key.cluster, &key.syncset, &fence.get()],
        )
        .await?;
    Ok(n > 0)
}

static AGAIN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH held AS MATERIALIZED (
             SELECT id, phase AS was_phase, run_at AS was_run_at FROM work
             WHERE tenant = $2 AND cluster = $3 AND syncset = $4
             FOR UPDATE)
         UPDATE work SET {}
         WHERE id = (SELECT id FROM held)
         RETURNING id, shard, (SELECT was_phase FROM held), (SELECT was_run_at FROM held), phase, run_at, generation",
        CHANGE.sql(&[("row", ""), ("now", "$1"), ("bump", "1")])
    )
});

/// Runs a key again now as it is (an enqueue that changes nothing but the schedule);
/// returns the generation it runs, or `None` for an unknown key.
pub(super) async fn again(tx: &mut Tx<'_>, key: WorkKey) -> PgResult<Option<i64>> {
    let now = tx.now.millis();
    let rows = tx.query(&AGAIN, &[&now, &key.tenant, &key.cluster, &key.syncset]).await?;
    let Some(r) = rows.first() else { return Ok(None) };
    let from = position(r.try_get(2)?, r.try_get(3)?);
    tx.due.record(key, r.try_get(0)?, r.try_get(1)?, from, position(r.try_get(4)?, r.try_get(5)?));
    tx.wake_at(tx.now);
    Ok(Some(r.try_get(6)?))
}

static RESYNC_ALL: LazyLock<String> = LazyLock::new(|| {
    let args = [("now", "$1")];
    let when = RESYNC.guard(&args);
    format!(
        "WITH held AS (SELECT id FROM work WHERE {when} ORDER BY id FOR UPDATE)
         UPDATE work SET {}
         WHERE id = ANY(ARRAY(SELECT id FROM held)) AND {when}
         RETURNING tenant, cluster, syncset, id, shard",
        RESYNC.sql(&args)
    )
});

/// Enqueues every key that is idle or parked (which have no row in `due`), locking
/// their rows in id order first.
pub(super) async fn resync(tx: &mut Tx<'_>) -> PgResult<u64> {
    let now = tx.now.millis();
    let rows = tx.query(&RESYNC_ALL, &[&now]).await?;
    for r in &rows {
        tx.due.record(row_key(r)?, r.try_get(3)?, r.try_get(4)?, None, Some(now));
    }
    if !rows.is_empty() {
        tx.wake_at(tx.now);
    }
    Ok(rows.len() as u64)
}
