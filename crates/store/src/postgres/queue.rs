//! The coalescing keyed work queue on PostgreSQL: one row per key in `work`, following
//! the key lifecycle of [`crate::lifecycle`]. Statements are set-based (arrays passed
//! with `unnest`), and rows are locked in key order so concurrent writers do not
//! deadlock.

use super::{query, Failure, PgResult, Tx};
use fleetsync_model::shard::shard_of;
use std::sync::LazyLock;
use crate::lifecycle::{db_phase, finish, Enqueue, Finish, Held};
use crate::stored::{corrupt, decode, json};
use crate::{ClaimParams, ClaimedItem, ClusterLimit, CompleteOutcome, Completion, Fence, RenewParams, RetryPolicy, StoreError};
use deadpool_postgres::GenericClient;
use fleetsync_model::{ApplyMode, Phase, Timestamp, WorkKey};
use std::collections::{HashMap, HashSet};
use super::cursor::{Floors, ReadyPos};
use super::locations::{Located, Locations};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Keys to enqueue in one statement (distinct keys; see [`enqueue`]).
#[derive(Default)]
pub(super) struct Enqueues {
    tenants: Vec<String>,
    clusters: Vec<String>,
    syncsets: Vec<String>,
    desired: Vec<bool>,
    modes: Vec<&'static str>,
    generations: Vec<i64>,
    shards: Vec<i16>,
}

impl Enqueues {
    /// Adds a key. `e` must say `desired`: apply (with generation and mode) or remove;
    /// a re-run as it is goes through [`retry`].
    pub(super) fn push(&mut self, key: WorkKey, e: Enqueue) {
        let desired = e.desired.unwrap_or(true);
        // Shards are below 256 (`SHARDS`), so they fit PostgreSQL's smallint.
        self.shards.push(shard_of(&key.tenant, &key.cluster) as i16);
        self.tenants.push(key.tenant);
        self.clusters.push(key.cluster);
        self.syncsets.push(key.syncset);
        self.desired.push(desired);
        self.modes.push(e.mode.unwrap_or(ApplyMode::Upsert).as_str());
        self.generations.push(e.generation.unwrap_or(0));
    }

    pub(super) fn len(&self) -> u64 {
        self.tenants.len() as u64
    }
}

/// Makes keys pending (coalesced: one row per key, a newer change replaces the pending
/// one). A running key stays running and becomes dirty. Resets attempts (a new change
/// deserves a fresh set of retries) and un-parks a parked key. A removal keeps the
/// row's generation and mode; a new row for a removal starts at generation 0, Upsert.
/// The key of an own write ([`Tx::own`]) takes the new generation but stays clean, with
/// its attempts, unless whether it is wanted (`desired`) changes.
pub(super) async fn enqueue(tx: &mut Tx<'_>, e: &Enqueues) -> PgResult<u64> {
    if e.tenants.is_empty() {
        return Ok(0);
    }
    let own = tx.own.as_ref();
    let (own_tenant, own_cluster, own_syncset) =
        (own.map(|k| k.tenant.as_str()), own.map(|k| k.cluster.as_str()), own.map(|k| k.syncset.as_str()));
    tx.execute(
        "INSERT INTO work AS w (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq,
                               phase, run_at, fence, attempts, observed_generation, updated_at, shard)
         SELECT u.tenant, u.cluster, u.syncset, u.desired, u.mode, u.generation, 1, 0, 'ready', $7, 0, 0, 0, $7, u.shard
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::text[], $6::bigint[], $8::smallint[])
              AS u(tenant, cluster, syncset, desired, mode, generation, shard)
         ORDER BY u.tenant, u.cluster, u.syncset
         ON CONFLICT (tenant, cluster, syncset) DO UPDATE SET
             desired = EXCLUDED.desired,
             apply_mode = CASE WHEN EXCLUDED.desired THEN EXCLUDED.apply_mode ELSE w.apply_mode END,
             generation = CASE WHEN EXCLUDED.desired THEN EXCLUDED.generation ELSE w.generation END,
             want_seq = CASE WHEN (w.tenant, w.cluster, w.syncset) = ($9::text, $10::text, $11::text)
                                  AND EXCLUDED.desired = w.desired THEN w.want_seq ELSE w.want_seq + 1 END,
             attempts = CASE WHEN (w.tenant, w.cluster, w.syncset) = ($9::text, $10::text, $11::text)
                                  AND EXCLUDED.desired = w.desired THEN w.attempts ELSE 0 END,
             run_at = CASE WHEN w.phase = 'running' THEN w.run_at ELSE EXCLUDED.run_at END,
             phase = CASE WHEN w.phase = 'running' THEN 'running' ELSE 'ready' END,
             updated_at = EXCLUDED.updated_at",
        &[
            &e.tenants,
            &e.clusters,
            &e.syncsets,
            &e.desired,
            &e.modes,
            &e.generations,
            &tx.now.millis(),
            &e.shards,
            &own_tenant,
            &own_cluster,
            &own_syncset,
        ],
    )
    .await?;
    tx.wake_at(tx.now);
    Ok(e.len())
}

/// Leases up to `limit` keys: expired leases first (their keys have waited longest),
/// then ready keys by `run_at`, and equal `run_at` (one transaction's changes) by
/// cluster, so a cluster's SyncSets are claimed together. `SKIP LOCKED`: concurrent
/// claimers take different keys without waiting for each other. Both scans start at
/// the claimer's cursor (`from`, see `cursor.rs`); returns where the next one starts,
/// and where each claimed key's row now is (see `locations.rs`).
pub(super) async fn claim(tx: &mut Tx<'_>, p: ClaimParams, from: Floors, window: i64) -> PgResult<Claimed> {
    let limit = i64::try_from(p.limit).unwrap_or(i64::MAX);
    if limit == 0 {
        return Ok(Claimed { items: Vec::new(), located: Vec::new(), next: from, window_cut: false });
    }
    let expires = tx.now.plus(p.lease_ttl).millis();
    let now = tx.now.millis();
    let shards: Option<Vec<i16>> = p.shards.as_ref().map(|s| s.iter().map(|s| *s as i16).collect());
    let f = &from.ready_from;
    let rows = match &p.cluster_limit {
        None => {
            let params: [&(dyn ToSql + Sync); 10] =
                [&now, &limit, &p.owner, &expires, &shards, &from.expired_from, &f.run_at, &f.tenant, &f.cluster, &f.syncset];
            tx.query(&CLAIM, &params).await?
        }
        Some(cl) => {
            let (tenants, clusters, busy) = in_flight_arrays(cl);
            let max = i64::from(cl.max);
            let params: [&(dyn ToSql + Sync); 15] = [
                &now, &limit, &p.owner, &expires, &max, &window, &tenants, &clusters, &busy, &shards,
                &from.expired_from, &f.run_at, &f.tenant, &f.cluster, &f.syncset,
            ];
            tx.query(&CLAIM_LIMITED, &params).await?
        }
    };
    let limited = p.cluster_limit.is_some();
    let next = next_floors(&from, now, limit, &rows, limited)?;
    let window_cut = limited && window_cut(limit, &rows)?;
    let claimed: Vec<&Row> = rows.iter().filter(|r| is_claimed(r)).collect();
    let items = claimed.iter().map(|r| claimed_item(r)).collect::<PgResult<Vec<_>>>()?;
    let mut located = Vec::with_capacity(items.len());
    for (item, r) in items.iter().zip(&claimed) {
        located.push(Located { key: item.key.clone(), fence: item.fence, ctid: r.try_get(20)? });
    }
    Ok(Claimed { items, located, next, window_cut })
}

/// What one claim statement did.
pub(super) struct Claimed {
    pub items: Vec<ClaimedItem>,
    /// Where each claimed key's row version is now (see `locations.rs`).
    pub located: Vec<Located>,
    /// Where the next claim starts.
    pub next: Floors,
    /// A limited claim took fewer keys than it could because its window filled up
    /// with keys held back by the per-cluster limit: ready keys beyond it went unseen.
    pub window_cut: bool,
}

/// A row of the claim's result carries a claimed key, unless it is the one row of
/// facts a claim that took nothing returns (see [`claim_sql`]).
fn is_claimed(r: &Row) -> bool {
    r.try_get::<_, Option<String>>(0).ok().flatten().is_some()
}

/// Whether the window, not the batch or the lack of ready keys, ended the claim:
/// it was full and allowed fewer keys than the batch had room for.
fn window_cut(limit: i64, rows: &[Row]) -> PgResult<bool> {
    let Some(facts) = rows.first() else { return Ok(false) };
    let expired_locked: i64 = facts.try_get(16)?;
    let (allowed, window_full): (Option<i64>, Option<bool>) = (facts.try_get(18)?, facts.try_get(19)?);
    Ok(window_full.unwrap_or(false) && allowed.unwrap_or(0) < limit - expired_locked)
}

/// Where the claim after the one that returned `rows` starts. Nothing it skipped may
/// fall behind the cursor: a key held back by the per-cluster limit, one beyond a full
/// batch or window, an expired lease it locked but could not take. When every due key
/// was claimed, the next claim starts at `now` (keys made ready later with an earlier
/// `run_at` are announced, see `cursor.rs`).
fn next_floors(from: &Floors, now: i64, limit: i64, rows: &[Row], limited: bool) -> PgResult<Floors> {
    // A claim that took nothing stays: its cursor facts say where keys were held back
    // or locked, not where the keys it skipped end.
    let Some(first) = rows.first().filter(|r| is_claimed(r)) else { return Ok(from.clone()) };
    let (mut claimed_expired, mut last_expired, mut ready, mut last_ready) = (0, None, 0, None);
    for r in rows {
        let (pass, at): (i32, i64) = (r.try_get(10)?, r.try_get(11)?);
        if pass == 0 {
            claimed_expired += 1;
            last_expired = Some(at);
        } else {
            ready += 1;
            last_ready = Some(ReadyPos { run_at: at, tenant: r.try_get(0)?, cluster: r.try_get(1)?, syncset: r.try_get(2)? });
        }
    }
    let held_back = match first.try_get::<_, Option<i64>>(12)? {
        Some(run_at) => Some(ReadyPos { run_at, tenant: first.try_get(13)?, cluster: first.try_get(14)?, syncset: first.try_get(15)? }),
        None => None,
    };
    let (expired_locked, expired_min): (i64, Option<i64>) = (first.try_get(16)?, first.try_get(17)?);
    let expired_from = match (expired_min, last_expired) {
        // A lease locked but not taken (it changed under the claim) is looked at again.
        (Some(min), _) if expired_locked > claimed_expired => min,
        // The batch was full of expired leases: more may follow the last one.
        (_, Some(at)) if claimed_expired >= limit => at,
        _ => now,
    };
    let asked = limit - expired_locked;
    // Whether due keys were left unseen: beyond the window, or beyond the batch.
    let cut = if limited {
        let (allowed, window_full): (Option<i64>, Option<bool>) = (first.try_get(18)?, first.try_get(19)?);
        window_full.unwrap_or(false) || allowed.unwrap_or(0) > asked
    } else {
        ready >= asked
    };
    let mut ready_from = match last_ready {
        _ if asked <= 0 => from.ready_from.clone(),
        Some(last) if cut || ready >= asked => last,
        None if cut => from.ready_from.clone(),
        _ => ReadyPos::at(now),
    };
    if let Some(held_back) = held_back {
        ready_from = ready_from.min(held_back);
    }
    Ok(Floors { ready_from, expired_from })
}

static CLAIM: LazyLock<String> = LazyLock::new(|| claim_sql(READY, 5, false));
static CLAIM_LIMITED: LazyLock<String> = LazyLock::new(|| claim_sql(READY_LIMITED, 10, true));

/// Ready keys, in claim order, from the cursor on.
const READY: &str = "SELECT ctid, 1 AS pass, run_at AS at, tenant, cluster, syncset FROM work
                 WHERE phase = 'ready' AND run_at <= $1 AND {in_shards} AND {from_cursor}
                 ORDER BY run_at, tenant, cluster, syncset
                 LIMIT $2 - (SELECT count(*) FROM expired)
                 FOR UPDATE SKIP LOCKED";

/// A limited claim's window (`win`): the first $6 ready keys from the cursor on, each
/// `allowed` unless its cluster ($7–$9: the claimer's in-flight counts) would exceed
/// $5 with it. CTEs of their own: the cursor's next position depends on them.
const RANKED: &str = "win AS MATERIALIZED (
                 SELECT ctid, run_at, tenant, cluster, syncset FROM work
                 WHERE phase = 'ready' AND run_at <= $1 AND {in_shards} AND {from_cursor}
                 ORDER BY run_at, tenant, cluster, syncset LIMIT $6),
             ranked AS MATERIALIZED (
                 SELECT r.*, r.rn + COALESCE(b.n, 0) <= $5 AS allowed FROM (
                     SELECT c.*, row_number() OVER (PARTITION BY c.tenant, c.cluster ORDER BY c.run_at, c.syncset) AS rn
                     FROM win c) r
                 LEFT JOIN unnest($7::text[], $8::text[], $9::bigint[]) AS b(tenant, cluster, n)
                   ON b.tenant = r.tenant AND b.cluster = r.cluster),";

/// The allowed keys of the window, in claim order. The window function cannot sit
/// beside `FOR UPDATE`, so this locks the rows it picked (re-checking each is ready).
const READY_LIMITED: &str = "SELECT ctid, 1 AS pass, run_at AS at, tenant, cluster, syncset FROM work
                 WHERE ctid = ANY(ARRAY(
                     SELECT ctid FROM ranked WHERE allowed
                     ORDER BY run_at, tenant, cluster, syncset
                     LIMIT $2 - (SELECT count(*) FROM expired)))
                   AND phase = 'ready' AND run_at <= $1
                 ORDER BY run_at, tenant, cluster, syncset
                 FOR UPDATE SKIP LOCKED";

/// What a limited claim tells its cursor: the first key held back (`h`), how many
/// were allowed, whether the window was full.
const LIMITED_FACTS: (&str, &str) = (
    "SELECT run_at, tenant, cluster, syncset FROM ranked WHERE NOT allowed ORDER BY run_at, tenant, cluster, syncset LIMIT 1",
    "(SELECT count(*) FILTER (WHERE allowed) FROM ranked) AS allowed, (SELECT count(*) FROM win) >= $6 AS window_full",
);
/// An unlimited claim holds nothing back and has no window.
const UNLIMITED_FACTS: (&str, &str) = (
    "SELECT NULL::bigint AS run_at, NULL::text AS tenant, NULL::text AS cluster, NULL::text AS syncset",
    "NULL::bigint AS allowed, NULL::bool AS window_full",
);

/// The claim: expired leases first, then `ready`, each leased with a new fence; only
/// keys of the shards in parameter `$shards` (a `smallint[]`; NULL: every shard); the
/// cursor is in the five parameters after it (expiry, then the ready position). Each
/// row also carries what the cursor needs (columns 10 to 19, see [`next_floors`]), and
/// where the version the claim wrote is (column 20, its `ctid` as text); a claim that
/// took nothing returns one row of the cursor's facts alone (columns 0–11 and 20 NULL).
fn claim_sql(ready: &str, shards: usize, limited: bool) -> String {
    let in_shards = in_shards(shards);
    let expired_from = format!("${}", shards + 1);
    let from_cursor = from_cursor(shards + 2);
    let fill = |sql: &str| sql.replace("{in_shards}", &in_shards).replace("{from_cursor}", &from_cursor);
    let (ranked, (held, window)) = if limited { (fill(RANKED), LIMITED_FACTS) } else { (String::new(), UNLIMITED_FACTS) };
    let ready = fill(ready);
    format!(
        "WITH expired AS MATERIALIZED (
                 SELECT ctid, 0 AS pass, lease_expires_at AS at, tenant, cluster, syncset FROM work
                 WHERE phase = 'running' AND lease_expires_at <= $1 AND lease_expires_at >= {expired_from}::bigint AND {in_shards}
                 ORDER BY lease_expires_at, tenant, cluster, syncset
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED),
             {ranked}
             ready AS MATERIALIZED ({ready}),
             picked AS MATERIALIZED (SELECT * FROM expired UNION ALL SELECT * FROM ready),
             -- By `ctid`, the row versions just locked (a TID scan), not by key: the
             -- unique index holds an entry for every version of the key that vacuum has not
             -- removed yet, and a join on it read them all. (A version locked here that
             -- committed after this statement's snapshot is not visible to the UPDATE and
             -- stays as it is: a ready one was made by an enqueue or retry, which are
             -- announced; an expired lease holds the expiry cursor back, see below.)
             claimed AS (
                 UPDATE work w SET phase = 'running', fence = nextval('work_fence'), lease_owner = $3,
                     lease_expires_at = $4, claimed_seq = w.want_seq, attempts = w.attempts + 1, updated_at = $1
                 WHERE w.ctid = ANY(ARRAY(SELECT ctid FROM picked))
                 RETURNING w.tenant, w.cluster, w.syncset, w.desired, w.generation, w.apply_mode, w.inventory,
                     w.attempts, w.fence, w.ctid::text AS location),
             facts AS MATERIALIZED (
                 SELECT h.run_at, h.tenant, h.cluster, h.syncset,
                     (SELECT count(*) FROM expired) AS expired_locked, (SELECT min(at) FROM expired) AS expired_min, {window}
                 FROM (SELECT 1) one LEFT JOIN ({held}) h ON true)
             SELECT c.tenant, c.cluster, c.syncset, c.desired, c.generation, c.apply_mode, c.inventory, c.attempts, c.fence,
                 COALESCE(cl.generation, 0), p.pass, p.at,
                 f.run_at, f.tenant, f.cluster, f.syncset, f.expired_locked, f.expired_min, f.allowed, f.window_full,
                 c.location
             FROM facts f LEFT JOIN (claimed c JOIN picked p ON (p.tenant, p.cluster, p.syncset) = (c.tenant, c.cluster, c.syncset)) ON true
             LEFT JOIN clusters cl ON cl.tenant = c.tenant AND cl.name = c.cluster
             ORDER BY p.pass, p.at, c.tenant, c.cluster, c.syncset"
    )
}

/// Only keys of the shards in parameter `$n` (a `smallint[]`; NULL: every shard).
fn in_shards(n: usize) -> String {
    format!("(${n}::smallint[] IS NULL OR shard = ANY(${n}::smallint[]))")
}

/// Only ready keys at or after a cursor position, given in parameters `$n` to `$n+3`.
/// `run_at >= …` alone as well: an index on (shard, run_at) can use that part.
fn from_cursor(n: usize) -> String {
    let (r, t, c, s) = (n, n + 1, n + 2, n + 3);
    format!("run_at >= ${r}::bigint AND (run_at, tenant, cluster, syncset) >= (${r}::bigint, ${t}::text, ${c}::text, ${s}::text)")
}

/// The claimer's in-flight counts as three parallel arrays, for `unnest`.
fn in_flight_arrays(cl: &ClusterLimit) -> (Vec<&str>, Vec<&str>, Vec<i64>) {
    let mut arrays = (Vec::new(), Vec::new(), Vec::new());
    for ((tenant, cluster), n) in &cl.in_flight {
        arrays.0.push(tenant.as_str());
        arrays.1.push(cluster.as_str());
        arrays.2.push(i64::from(*n));
    }
    arrays
}

fn claimed_item(r: &Row) -> PgResult<ClaimedItem> {
    let mode: String = r.try_get(5)?;
    let inventory: String = r.try_get(6)?;
    Ok(ClaimedItem {
        key: WorkKey::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?),
        desired: r.try_get(3)?,
        generation: r.try_get(4)?,
        apply_mode: ApplyMode::parse(&mode).ok_or_else(|| corrupt("work", format!("apply mode {mode:?}")))?,
        inventory: decode("work", &inventory)?,
        attempt: attempts(r.try_get(7)?)?,
        fence: r.try_get(8)?,
        cluster_generation: r.try_get(9)?,
    })
}

fn attempts(n: i32) -> PgResult<u32> {
    Ok(u32::try_from(n).map_err(|_| corrupt("work", format!("attempts {n}")))?)
}

/// Split keys into the column arrays `unnest` takes.
fn key_columns<'a>(keys: impl Iterator<Item = &'a WorkKey>) -> (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>) {
    let mut cols = (Vec::new(), Vec::new(), Vec::new());
    for k in keys {
        cols.0.push(k.tenant.as_str());
        cols.1.push(k.cluster.as_str());
        cols.2.push(k.syncset.as_str());
    }
    cols
}

/// Extends the leases still held; returns the keys of those that are not, and where
/// the renewed ones' rows now are (a renewal writes a new version).
pub(super) async fn renew(tx: &mut Tx<'_>, p: &RenewParams) -> PgResult<(Vec<WorkKey>, Vec<Located>)> {
    if p.leases.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let expires = tx.now.plus(p.lease_ttl).millis();
    let (tenants, clusters, syncsets) = key_columns(p.leases.iter().map(|(k, _)| k));
    let fences: Vec<Fence> = p.leases.iter().map(|(_, f)| *f).collect();
    let rows = tx
        .query(
            "WITH held AS (
                 SELECT w.ctid FROM work w
                 JOIN unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(tenant, cluster, syncset, fence)
                   ON w.tenant = u.tenant AND w.cluster = u.cluster AND w.syncset = u.syncset AND w.fence = u.fence
                 WHERE w.phase = 'running'
                 ORDER BY w.tenant, w.cluster, w.syncset
                 FOR UPDATE OF w)
             UPDATE work SET lease_expires_at = $1 WHERE work.ctid = ANY(ARRAY(SELECT ctid FROM held))
             RETURNING work.tenant, work.cluster, work.syncset, work.fence, work.ctid::text",
            &[&expires, &tenants, &clusters, &syncsets, &fences],
        )
        .await?;
    let mut renewed = HashSet::with_capacity(rows.len());
    let mut located = Vec::with_capacity(rows.len());
    for r in &rows {
        let key = WorkKey::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?);
        let fence: Fence = r.try_get(3)?;
        renewed.insert((key.clone(), fence));
        located.push(Located { key, fence, ctid: r.try_get(4)? });
    }
    let lost = p.leases.iter().filter(|(k, f)| !renewed.contains(&(k.clone(), *f))).map(|(k, _)| k.clone()).collect();
    Ok((lost, located))
}

/// Writes every completion in one transaction: locks the keys' rows (in key order, see
/// [`lock_rows`]), decides each completion as [`finish`] says, then writes them
/// set-based.
pub(super) async fn complete(
    tx: &mut Tx<'_>,
    retry: &RetryPolicy,
    locations: &Locations,
    items: &[Completion],
) -> PgResult<Vec<CompleteOutcome>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let rows = lock_rows(tx, locations, items).await?;
    let (mut held, ctids) = held_rows(&rows)?;

    let now = tx.now;
    let mut updates = Updates::default();
    let mut deletes: Vec<String> = Vec::new();
    let mut outcomes = Vec::with_capacity(items.len());
    for c in items {
        // A key completed earlier in this batch is no longer running: later ones are stale.
        let Some(h) = held.get_mut(&c.key) else {
            outcomes.push(CompleteOutcome::Stale);
            continue;
        };
        let Some(fin) = finish(h, c, now, retry) else {
            outcomes.push(CompleteOutcome::Stale);
            continue;
        };
        h.running = false;
        let ctid = ctids.get(&c.key).cloned().ok_or_else(|| corrupt("work", format!("row {} without a location", c.key)))?;
        let resources = json("work", &c.resources)?;
        match &fin {
            Finish::Applied { phase, generation, inventory } => {
                let inventory = Some(json("work", inventory)?);
                updates.push(ctid, *phase, now, Some(*generation), resources, inventory, None, Some(now), false)
            }
            // Requeued keys start their attempts over (a requeue is not a failure).
            Finish::Requeue { generation, inventory, run_at } => {
                let inventory = Some(json("work", inventory)?);
                updates.push(ctid, Phase::Pending, *run_at, Some(*generation), resources, inventory, None, Some(now), true)
            }
            Finish::Restart => updates.push(ctid, Phase::Pending, now, Some(0), resources, Some("[]".into()), None, None, false),
            Finish::Delete => deletes.push(ctid),
            Finish::Failed { phase, run_at, error } => {
                updates.push(ctid, *phase, *run_at, None, resources, None, Some(error.to_string()), None, false)
            }
        }
        // Ready again: wake the claimers, and tell their cursors when it is due (a
        // retry's backoff is not a wake-up's business, but its `run_at` is the cursors').
        match (&fin, fin.outcome()) {
            (Finish::Requeue { run_at, .. } | Finish::Failed { run_at, .. }, CompleteOutcome::Committed(Phase::Pending | Phase::Failed)) => {
                tx.wake_at(*run_at)
            }
            (_, CompleteOutcome::Committed(Phase::Pending)) => tx.wake_at(now),
            _ => {}
        }
        let name = format!("{}/{}", c.key.cluster, c.key.syncset);
        tx.event(&c.key.tenant, "Status", &name, fin.event_action(), h.generation);
        outcomes.push(fin.outcome());
    }
    if !updates.ctids.is_empty() {
        let u = &updates;
        tx.execute(
            "UPDATE work w SET phase = u.phase, run_at = u.run_at,
                 observed_generation = COALESCE(u.observed, w.observed_generation),
                 resources = u.resources, inventory = COALESCE(u.inventory, w.inventory), last_error = u.last_error,
                 last_applied_at = COALESCE(u.applied_at, w.last_applied_at),
                 attempts = CASE WHEN u.reset_attempts THEN 0 ELSE w.attempts END,
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = $10
             FROM unnest($1::text[]::tid[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[],
                         $8::bigint[], $9::bool[])
                  AS u(ctid, phase, run_at, observed, resources, inventory, last_error, applied_at, reset_attempts)
             WHERE w.ctid = ANY($1::text[]::tid[]) AND w.ctid = u.ctid",
            &[
                &u.ctids, &u.phases, &u.run_ats, &u.observed, &u.resources, &u.inventories, &u.errors, &u.applied_at,
                &u.reset_attempts, &now.millis(),
            ],
        )
        .await?;
    }
    if !deletes.is_empty() {
        tx.execute("DELETE FROM work WHERE ctid = ANY($1::text[]::tid[])", &[&deletes]).await?;
    }
    Ok(outcomes)
}

/// What a completion reads of each row it locks: columns 0–5 are [`Held`]'s, 6–8 the
/// key, 9 the locked version's `ctid` (as text).
const HELD_COLUMNS: &str = "w.fence, w.phase = 'running', w.want_seq > w.claimed_seq, w.desired, w.attempts, w.generation,
                            w.tenant, w.cluster, w.syncset, w.ctid::text";

/// The row versions at the locations in `$1` (`ctid`s as text) that are rows of the keys
/// in `$2`–`$4`, locked in key order. A TID scan, generic plans too (the planner takes a
/// parameter array for 10 elements; only a table of a few pages is read whole instead),
/// then a semi-join with the keys: a location may by now hold another key's row, which
/// is neither returned nor locked (the join filters below the locking).
pub(super) static LOCK_BY_LOCATION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {HELD_COLUMNS} FROM work w
         WHERE w.ctid = ANY($1::text[]::tid[])
           AND (w.tenant, w.cluster, w.syncset) IN (SELECT * FROM unnest($2::text[], $3::text[], $4::text[]))
         ORDER BY w.tenant, w.cluster, w.syncset
         FOR UPDATE"
    )
});

/// The rows of the keys in `$1`–`$3`, found through the unique index on the key, locked
/// in key order.
static LOCK_BY_KEY: LazyLock<String> = LazyLock::new(|| by_key("FOR UPDATE"));
/// The same, but failing (`lock_not_available`) instead of waiting for a lock.
static LOCK_BY_KEY_NOWAIT: LazyLock<String> = LazyLock::new(|| by_key("FOR UPDATE NOWAIT"));

fn by_key(locking: &str) -> String {
    format!(
        "SELECT {HELD_COLUMNS} FROM work w
         WHERE (w.tenant, w.cluster, w.syncset) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
         ORDER BY w.tenant, w.cluster, w.syncset
         {locking}"
    )
}

/// Locks the rows of the completions' keys and reads them ([`HELD_COLUMNS`]), finding
/// them where this process's claims left them when it can (`locations.rs`).
///
/// Lock order. Row locks on `work` are taken in key order everywhere (`mod.rs`). One
/// statement ordered by key does that; two in a row do not: the second may wait for a
/// key that sorts before one the first locked, while the holder of that key waits, in
/// key order, for ours. So the rule here is: only the first statement that locks rows
/// in the transaction may wait for a lock, and it locks in key order; a later one never
/// waits. With nothing held before a wait, or only keys sorting before the one waited
/// for, no cycle can form.
///
/// - If every lease's location is remembered, the first statement locks the row
///   versions there ([`LOCK_BY_LOCATION`], a TID scan instead of the unique index and
///   every dead version it still lists), in key order, waiting as needed. A version
///   updated since the claim or renewal that wrote it (a change marked the key dirty, a
///   renewal through another store, a take-over, a deletion) is not returned: it is
///   invisible if that update committed before the statement began, and fails the
///   recheck against the updated version if it committed while the statement waited
///   (the TID scan compares the new version's `ctid` with its list, as PostgreSQL 15
///   does; that version stays locked by this transaction. A server whose recheck let it
///   through would return it, locked and current, which serves as well).
/// - The keys it did not return have moved for good: their locations are forgotten, and
///   their rows are locked by key with `NOWAIT`. Out of key order, so this must not
///   wait, and usually need not: whoever moved a row has committed (or the row is
///   already ours, after a recheck). If another transaction holds one, the statement
///   fails, the transaction is run again ([`Failure::GaveWay`]), and the retry, missing
///   those locations, goes by key throughout.
/// - Otherwise (a lease claimed through another store, or not remembered) one statement
///   locks every key by key ([`LOCK_BY_KEY`]), in key order, waiting as needed.
async fn lock_rows(tx: &Tx<'_>, locations: &Locations, items: &[Completion]) -> PgResult<Vec<Row>> {
    let Some(hints) = locations.hints(items.iter().map(|c| (&c.key, c.fence))) else {
        return lock_by_key(tx, items.iter().map(|c| &c.key), &LOCK_BY_KEY).await;
    };
    let (tenants, clusters, syncsets) = key_columns(items.iter().map(|c| &c.key));
    let mut rows = tx.query(&LOCK_BY_LOCATION, &[&hints, &tenants, &clusters, &syncsets]).await?;
    let found = rows.iter().map(row_key).collect::<PgResult<HashSet<WorkKey>>>()?;
    let moved: Vec<&Completion> = items.iter().filter(|c| !found.contains(&c.key)).collect();
    if moved.is_empty() {
        return Ok(rows);
    }
    locations.forget(moved.iter().map(|c| (&c.key, c.fence)));
    match lock_by_key(tx, moved.iter().map(|c| &c.key), &LOCK_BY_KEY_NOWAIT).await {
        Ok(more) => rows.extend(more),
        Err(Failure::Pg(e)) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Err(Failure::GaveWay(e)),
        Err(e) => return Err(e),
    }
    Ok(rows)
}

/// Locks the rows of `keys` with `sql` ([`LOCK_BY_KEY`] or [`LOCK_BY_KEY_NOWAIT`]).
async fn lock_by_key<'a>(tx: &Tx<'_>, keys: impl Iterator<Item = &'a WorkKey>, sql: &str) -> PgResult<Vec<Row>> {
    let (tenants, clusters, syncsets) = key_columns(keys);
    tx.query(sql, &[&tenants, &clusters, &syncsets]).await
}

fn row_key(r: &Row) -> PgResult<WorkKey> {
    Ok(WorkKey::new(r.try_get::<_, String>(6)?, r.try_get::<_, String>(7)?, r.try_get::<_, String>(8)?))
}

/// The locked rows ([`HELD_COLUMNS`]) by key, and where each is: the completion's
/// writes go straight to that version (a TID scan) instead of through an index that may
/// hold an entry for every version of the key vacuum has not removed yet. Locked, so it
/// is the latest version until commit.
fn held_rows(rows: &[Row]) -> PgResult<(HashMap<WorkKey, Held>, HashMap<WorkKey, String>)> {
    let mut held = HashMap::with_capacity(rows.len());
    let mut ctids = HashMap::with_capacity(rows.len());
    for r in rows {
        let key = row_key(r)?;
        let h = Held {
            id: 0,
            fence: r.try_get(0)?,
            running: r.try_get(1)?,
            dirty: r.try_get(2)?,
            desired: r.try_get(3)?,
            attempts: attempts(r.try_get(4)?)?,
            generation: r.try_get(5)?,
        };
        ctids.insert(key.clone(), r.try_get(9)?);
        held.insert(key, h);
    }
    Ok((held, ctids))
}

/// Row updates of a completion batch, as columns, by row version (`ctid`, as text);
/// `None` keeps the row's value (except `errors`, where `None` clears it).
#[derive(Default)]
struct Updates {
    ctids: Vec<String>,
    phases: Vec<&'static str>,
    run_ats: Vec<i64>,
    observed: Vec<Option<i64>>,
    resources: Vec<String>,
    inventories: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    applied_at: Vec<Option<i64>>,
    reset_attempts: Vec<bool>,
}

impl Updates {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        ctid: String,
        phase: Phase,
        run_at: Timestamp,
        observed: Option<i64>,
        resources: String,
        inventory: Option<String>,
        error: Option<String>,
        applied_at: Option<Timestamp>,
        reset_attempts: bool,
    ) {
        self.ctids.push(ctid);
        self.phases.push(db_phase(phase));
        self.run_ats.push(run_at.millis());
        self.observed.push(observed);
        self.resources.push(resources);
        self.inventories.push(inventory);
        self.errors.push(error);
        self.applied_at.push(applied_at.map(Timestamp::millis));
        self.reset_attempts.push(reset_attempts);
    }
}

pub(super) async fn release(tx: &mut Tx<'_>, key: WorkKey, fence: Fence) -> PgResult<()> {
    let n = tx
        .execute(
            "UPDATE work SET phase = 'ready', run_at = $1, attempts = GREATEST(attempts - 1, 0),
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = $1
             WHERE tenant = $2 AND cluster = $3 AND syncset = $4 AND fence = $5 AND phase = 'running'",
            &[&tx.now.millis(), &key.tenant, &key.cluster, &key.syncset, &fence],
        )
        .await?;
    if n > 0 {
        tx.wake_at(tx.now);
    }
    Ok(())
}

/// Runs a key again as it is (an enqueue that changes nothing but the schedule).
pub(super) async fn retry(tx: &mut Tx<'_>, key: WorkKey) -> PgResult<()> {
    let n = tx
        .execute(
            "UPDATE work SET want_seq = want_seq + 1, attempts = 0,
                 run_at = CASE WHEN phase = 'running' THEN run_at ELSE $1 END,
                 phase = CASE WHEN phase = 'running' THEN 'running' ELSE 'ready' END,
                 updated_at = $1
             WHERE tenant = $2 AND cluster = $3 AND syncset = $4",
            &[&tx.now.millis(), &key.tenant, &key.cluster, &key.syncset],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::key_not_found(&key).into());
    }
    tx.wake_at(tx.now);
    Ok(())
}

pub(super) async fn resync(tx: &mut Tx<'_>) -> PgResult<u64> {
    let n = tx
        .execute(
            "UPDATE work SET want_seq = want_seq + 1, phase = 'ready', run_at = $1, attempts = 0, updated_at = $1
             WHERE phase IN ('idle', 'parked')",
            &[&tx.now.millis()],
        )
        .await?;
    if n > 0 {
        tx.wake_at(tx.now);
    }
    Ok(n)
}

/// When the next key of the shards ($1) is due, looking from the claimers' cursors
/// ($2–$5 ready, $6 expiry) as a claim would.
static NEXT_READY: LazyLock<String> = LazyLock::new(|| {
    let (in_shards, from_cursor) = (in_shards(1), from_cursor(2));
    format!(
        "SELECT LEAST(
             (SELECT MIN(run_at) FROM work WHERE phase = 'ready' AND {in_shards} AND {from_cursor}),
             (SELECT MIN(lease_expires_at) FROM work WHERE phase = 'running' AND {in_shards} AND lease_expires_at >= $6::bigint))"
    )
});

pub(super) async fn next_ready_at<C: GenericClient>(c: &C, shards: Option<Vec<i16>>, from: Floors) -> PgResult<Option<Timestamp>> {
    let f = &from.ready_from;
    let rows = query(c, &NEXT_READY, &[&shards, &f.run_at, &f.tenant, &f.cluster, &f.syncset, &from.expired_from]).await?;
    let at: Option<i64> = match rows.first() {
        Some(r) => r.try_get(0)?,
        None => None,
    };
    Ok(at.map(Timestamp))
}
