//! The coalescing keyed work queue: one row per key in `work`, following the key
//! lifecycle of [`crate::lifecycle`] (stored phases, dirty tracking, what a completion
//! does).

use super::ms;
use super::rows::event_append;
use crate::lifecycle::{Enqueue, Held};
use crate::plan::Announce;
use crate::stored::{corrupt, decode, json};
use crate::write::complete::{self, RowWrite};
use crate::write::transitions::{fill, CHANGE, CLAIM, DUE, EXPIRED, RELEASE, RESYNC, TAKE_BACK};
use crate::write::{status_name, NewEvent};
use crate::{
    ClaimParams, ClaimedItem, ClusterLimit, CompleteOutcome, Completion, Fence, RenewParams, Result, RetryPolicy,
};
use fleetsync_model::shard::shard_of;
use fleetsync_model::{ApplyMode, Timestamp, WorkKey};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use std::collections::HashMap;
use std::sync::LazyLock;

/// A new key is ready at once; an existing one takes the change as [`CHANGE`] says.
static ENQUEUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO work (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq,
                           phase, run_at, fence, attempts, observed_generation, updated_at, shard, pending_since)
         VALUES (?1, ?2, ?3, COALESCE(?4, 1), COALESCE(?5, 'Upsert'), COALESCE(?6, 0), 1, 0, 'ready', ?7, 0, 0, 0, ?7, ?8,
                 CASE WHEN ?9 = 1 THEN ?7 END)
         ON CONFLICT (tenant, cluster, syncset) DO UPDATE SET
             desired = COALESCE(?4, desired),
             apply_mode = COALESCE(?5, apply_mode),
             generation = COALESCE(?6, generation),
             {}",
        CHANGE.sql(&[("row", ""), ("now", "?7"), ("bump", "?9")])
    )
});

/// Makes a key pending, as [`CHANGE`] says; `dirties` is false for an own write's key
/// (see [`crate::plan::Planned::dirties`]).
pub(super) fn enqueue(tx: &Connection, now: Timestamp, key: &WorkKey, e: Enqueue, dirties: bool) -> Result<()> {
    let shard = shard_of(&key.tenant, &key.cluster);
    tx.prepare_cached(&ENQUEUE)?.execute(params![
        key.tenant,
        key.cluster,
        key.syncset,
        e.desired,
        e.mode.map(ApplyMode::as_str),
        e.generation,
        now.millis(),
        shard,
        i64::from(dirties)
    ])?;
    Ok(())
}

/// Claims the rows whose ids are in the JSON array `?5` as [`CLAIM`] says, in one
/// statement, each with the fence `?1` plus its place in the array; the rows were
/// chosen by [`EXPIRED_IDS`] or [`DUE_IDS`] in the same transaction. One statement, not
/// one per key: SQLite copies every page a statement changes into its statement
/// journal once per statement (a claim fires the key counts' triggers), and runs it
/// once.
static CLAIM_ALL: LazyLock<String> = LazyLock::new(|| {
    let args = [("row", "work."), ("fence", "?1 + j.key"), ("owner", "?2"), ("expires", "?3"), ("now", "?4")];
    format!(
        "UPDATE work SET {} FROM json_each(?5) AS j WHERE work.id = j.value
         RETURNING id, tenant, cluster, syncset, desired, generation, apply_mode, inventory, attempts, running_since, fence",
        CLAIM.sql(&args)
    )
});

/// The keys whose leases ran out ([`EXPIRED`]), the longest expired first.
static EXPIRED_IDS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM work WHERE {}
             AND (?3 IS NULL OR shard IN (SELECT value FROM json_each(?3)))
         ORDER BY lease_expires_at LIMIT ?2",
        fill(EXPIRED, &[("row", ""), ("now", "?1")])
    )
});

/// The ready keys whose time has come ([`DUE`]), in claim order; with `columns`.
fn due_ids(columns: &str) -> String {
    format!(
        "SELECT {columns} FROM work WHERE {}
             AND (?3 IS NULL OR shard IN (SELECT value FROM json_each(?3)))
         ORDER BY run_at, tenant, cluster, syncset LIMIT ?2",
        fill(DUE, &[("row", ""), ("now", "?1")])
    )
}
static DUE_IDS: LazyLock<String> = LazyLock::new(|| due_ids("id"));
static DUE_IDS_BY_CLUSTER: LazyLock<String> = LazyLock::new(|| due_ids("id, tenant, cluster"));

pub(super) fn claim(tx: &Transaction<'_>, now: Timestamp, p: &ClaimParams) -> Result<Vec<ClaimedItem>> {
    let limit = i64::try_from(p.limit).unwrap_or(i64::MAX);
    // Expired leases first: their keys have waited longest (take-over).
    let shards = shards_json(p.shards.as_deref());
    let mut ids = ids(tx, &EXPIRED_IDS, now, limit, shards.as_deref())?;
    let expired = ids.len();
    let left = limit - i64::try_from(ids.len()).unwrap_or(0);
    if left > 0 {
        // Equal run_at (one transaction's changes) is ordered by cluster, so a cluster's
        // SyncSets are claimed together and its make-span stays near its critical path.
        ids.extend(match &p.cluster_limit {
            None => ids_ready(tx, now, left, shards.as_deref())?,
            Some(cl) => ids_ready_limited(tx, now, left, cl, shards.as_deref())?,
        });
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let fence: i64 = tx.query_row("SELECT v FROM meta WHERE k = 'fence'", [], |r| r.get(0))?;
    let expires = now.millis().saturating_add(ms(p.lease_ttl));
    let ids_json = json("work", &ids)?;
    let mut claimed: HashMap<i64, ClaimedItem> = HashMap::with_capacity(ids.len());
    let mut update = tx.prepare_cached(&CLAIM_ALL)?;
    let mut rows = update.query(params![fence + 1, p.owner, expires, now.millis(), ids_json])?;
    while let Some(r) = rows.next()? {
        let mode: String = r.get(6)?;
        let inventory: String = r.get(7)?;
        let item = ClaimedItem {
            key: WorkKey::new(r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?),
            fence: Fence::new(r.get(10)?),
            desired: r.get(4)?,
            generation: r.get(5)?,
            cluster_generation: 0,
            apply_mode: ApplyMode::parse(&mode).ok_or_else(|| corrupt("work", format!("apply mode {mode:?}")))?,
            inventory: decode("work", &inventory)?,
            attempt: r.get(8)?,
            taken_over: false,
            changed_at: r.get::<_, Option<i64>>(9)?.map(Timestamp),
        };
        claimed.insert(r.get(0)?, item);
    }
    drop(rows);
    // Each cluster's generation, looked up once per cluster (a claim takes a cluster's
    // keys together); the keys in the order they were chosen.
    let mut cluster_gen = tx.prepare_cached("SELECT generation FROM clusters WHERE tenant = ?1 AND name = ?2")?;
    let mut generations: HashMap<String, HashMap<String, i64>> = HashMap::new();
    let mut items = Vec::with_capacity(ids.len());
    for (n, id) in ids.iter().enumerate() {
        let mut item = claimed.remove(id).ok_or_else(|| corrupt("work", format!("claimed row {id} not updated")))?;
        let k = &item.key;
        item.cluster_generation = match generations.get(&k.tenant).and_then(|c| c.get(&k.cluster)) {
            Some(g) => *g,
            None => {
                let g = cluster_gen.query_row(params![k.tenant, k.cluster], |r| r.get(0)).optional()?.unwrap_or(0);
                generations.entry(k.tenant.clone()).or_default().insert(k.cluster.clone(), g);
                g
            }
        };
        item.taken_over = n < expired;
        items.push(item);
    }
    let last = fence + i64::try_from(ids.len()).unwrap_or(i64::MAX);
    tx.execute("UPDATE meta SET v = ?1 WHERE k = 'fence'", params![last])?;
    Ok(items)
}

fn ids(tx: &Transaction<'_>, sql: &str, now: Timestamp, limit: i64, shards: Option<&str>) -> Result<Vec<i64>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map(params![now.millis(), limit, shards], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A shard list as the JSON array `json_each` reads; `None` stands for every shard.
pub(super) fn shards_json(shards: Option<&[u16]>) -> Option<String> {
    shards.map(|s| serde_json::Value::from(s.to_vec()).to_string())
}

fn ids_ready(tx: &Transaction<'_>, now: Timestamp, limit: i64, shards: Option<&str>) -> Result<Vec<i64>> {
    ids(tx, &DUE_IDS, now, limit, shards)
}

/// Ready keys in claim order, skipping those of clusters at their limit. Looks at a
/// bounded window of the ready index, so a claim stays cheap when one cluster has
/// thousands of keys held back at the front.
fn ids_ready_limited(
    tx: &Transaction<'_>,
    now: Timestamp,
    limit: i64,
    cl: &ClusterLimit,
    shards: Option<&str>,
) -> Result<Vec<i64>> {
    let window = ClusterLimit::window(limit);
    let mut stmt = tx.prepare_cached(&DUE_IDS_BY_CLUSTER)?;
    let mut rows = stmt.query(params![now.millis(), window, shards])?;
    let mut room: HashMap<(String, String), u32> = HashMap::new();
    let mut ids = Vec::new();
    while let Some(row) = rows.next()? {
        let (tenant, cluster): (String, String) = (row.get(1)?, row.get(2)?);
        let left = room.entry((tenant, cluster)).or_insert_with_key(|(t, c)| cl.room(t, c));
        if *left > 0 {
            *left -= 1;
            ids.push(row.get(0)?);
            if ids.len() as i64 >= limit {
                break;
            }
        }
    }
    Ok(ids)
}

pub(super) fn renew(tx: &Transaction<'_>, now: Timestamp, p: &RenewParams) -> Result<Vec<WorkKey>> {
    let expires = now.millis().saturating_add(ms(p.lease_ttl));
    let mut stmt = tx.prepare_cached(
        "UPDATE work SET lease_expires_at = ?1
         WHERE tenant = ?2 AND cluster = ?3 AND syncset = ?4 AND fence = ?5 AND phase = 'running'",
    )?;
    let mut lost = Vec::new();
    for (key, fence) in &p.leases {
        if stmt.execute(params![expires, key.tenant, key.cluster, key.syncset, fence.get()])? == 0 {
            lost.push(key.clone());
        }
    }
    Ok(lost)
}

fn held(tx: &Connection, key: &WorkKey) -> Result<Option<Held>> {
    Ok(tx
        .prepare_cached(
            "SELECT id, fence, phase = 'running', want_seq > claimed_seq, desired, attempts, generation
             FROM work WHERE tenant = ?1 AND cluster = ?2 AND syncset = ?3",
        )?
        .query_row(params![key.tenant, key.cluster, key.syncset], |r| {
            Ok(Held {
                id: r.get(0)?,
                fence: Fence::new(r.get(1)?),
                running: r.get(2)?,
                dirty: r.get(3)?,
                desired: r.get(4)?,
                attempts: r.get(5)?,
                generation: r.get(6)?,
            })
        })
        .optional()?)
}

/// Commits completions; returns their outcomes and what the commit announces. Each is
/// decided by [`complete::decide`] and carried out here.
pub(super) fn complete(
    tx: &Transaction<'_>,
    now: Timestamp,
    retry: &RetryPolicy,
    items: &[Completion],
) -> Result<(Vec<CompleteOutcome>, Announce)> {
    let mut announce = Announce::default();
    let mut outcomes = Vec::with_capacity(items.len());
    for c in items {
        let Some(h) = held(tx, &c.key)? else {
            outcomes.push(CompleteOutcome::Stale);
            continue;
        };
        let Some(done) = complete::decide(&h, c, now, retry) else {
            outcomes.push(CompleteOutcome::Stale);
            continue;
        };
        let resources = json("work", &c.resources)?;
        match &done.row {
            RowWrite::Update(row) => {
                let inventory = row.inventory.map(|i| json("work", i)).transpose()?;
                tx.prepare_cached(
                    "UPDATE work SET phase = ?1, run_at = ?2, observed_generation = COALESCE(?3, observed_generation),
                         resources = COALESCE(?4, resources), inventory = COALESCE(?5, inventory), last_error = ?6,
                         last_applied_at = COALESCE(?7, last_applied_at),
                         attempts = CASE WHEN ?8 THEN 0 ELSE attempts END,
                         rendered = CASE WHEN ?11 THEN ?12 ELSE rendered END,
                         lease_owner = NULL, lease_expires_at = NULL, updated_at = ?9
                     WHERE id = ?10",
                )?
                .execute(params![
                    row.db_phase(),
                    row.run_at.millis(),
                    row.observed_generation,
                    (!row.keep_resources).then_some(&resources),
                    inventory,
                    row.last_error,
                    row.last_applied_at.map(Timestamp::millis),
                    row.reset_attempts,
                    now.millis(),
                    h.id,
                    row.rendered.is_some(),
                    row.rendered.flatten()
                ])?;
            }
            RowWrite::Delete => {
                tx.prepare_cached("DELETE FROM work WHERE id = ?1")?.execute(params![h.id])?;
            }
        }
        if let Some(kept) = &done.live_kept {
            super::live::end_all_but(tx, &c.key, kept)?;
        }
        let name = status_name(&c.key);
        let (tenant, action, generation) = (c.key.tenant.as_str(), done.event_action, h.generation);
        event_append(tx, now, NewEvent { tenant, kind: "Status", name: &name, action, generation, actor: None })?;
        outcomes.push(done.outcome);
        announce = announce.and(done.announce);
    }
    Ok((outcomes, announce))
}

/// Makes every running key ready now, its lease dropped: what a process that runs work
/// on the file alone does at start (see `SqliteStore::open_for_work`).
pub(super) fn take_back(tx: &Transaction<'_>, now: Timestamp) -> Result<u64> {
    let args = [("now", "?1")];
    let sql = format!("UPDATE work SET {} WHERE {}", TAKE_BACK.sql(&args), TAKE_BACK.guard(&args));
    Ok(tx.execute(&sql, params![now.millis()])? as u64)
}

/// Sets a running key's inventory under its lease; whether the lease was held.
pub(super) fn inventory_set(
    tx: &Connection,
    now: Timestamp,
    key: &WorkKey,
    fence: Fence,
    inventory: &str,
) -> Result<bool> {
    let n = tx
        .prepare_cached(
            "UPDATE work SET inventory = ?1, updated_at = ?2
             WHERE tenant = ?3 AND cluster = ?4 AND syncset = ?5 AND fence = ?6 AND phase = 'running'",
        )?
        .execute(params![inventory, now.millis(), key.tenant, key.cluster, key.syncset, fence.get()])?;
    Ok(n > 0)
}

static RELEASE_ONE: LazyLock<String> = LazyLock::new(|| {
    let args = [("now", "?1"), ("fence", "?5")];
    format!(
        "UPDATE work SET {} WHERE tenant = ?2 AND cluster = ?3 AND syncset = ?4 AND {}",
        RELEASE.sql(&args),
        RELEASE.guard(&args)
    )
});

pub(super) fn release(tx: &Transaction<'_>, now: Timestamp, key: &WorkKey, fence: Fence) -> Result<()> {
    tx.prepare_cached(&RELEASE_ONE)?.execute(params![
        now.millis(),
        key.tenant,
        key.cluster,
        key.syncset,
        fence.get()
    ])?;
    Ok(())
}

/// Runs a key again now as it is; the generation it runs, or `None` for an unknown key.
pub(super) fn again(tx: &Connection, now: Timestamp, key: &WorkKey) -> Result<Option<i64>> {
    let Some(h) = held(tx, key)? else { return Ok(None) };
    enqueue(tx, now, key, Enqueue::again(), true)?;
    Ok(Some(h.generation))
}

/// Makes every idle or parked key ready now; returns how many.
pub(super) fn resync(tx: &Connection, now: Timestamp) -> Result<u64> {
    let args = [("now", "?1")];
    let sql = format!("UPDATE work SET {} WHERE {}", RESYNC.sql(&args), RESYNC.guard(&args));
    Ok(tx.execute(&sql, params![now.millis()])? as u64)
}

pub(super) fn next_ready_at(c: &Connection, shards: Option<&str>) -> Result<Option<Timestamp>> {
    let at: Option<i64> = c
        .prepare_cached(
            "SELECT MIN(t) FROM (
             SELECT MIN(run_at) AS t FROM work WHERE phase = 'ready'
                 AND (?1 IS NULL OR shard IN (SELECT value FROM json_each(?1)))
             UNION ALL SELECT MIN(lease_expires_at) FROM work WHERE phase = 'running'
                 AND (?1 IS NULL OR shard IN (SELECT value FROM json_each(?1))))",
        )?
        .query_row(params![shards], |r| r.get(0))?;
    Ok(at.map(Timestamp))
}
