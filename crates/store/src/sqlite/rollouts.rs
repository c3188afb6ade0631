//! Revisions ([`crate::revision`]) and rollouts ([`crate::rollout`]) in SQLite.

use super::queue::enqueue;
use super::rows::{event_append, NewEvent};
use crate::lifecycle::Enqueue;
use crate::revision::{self, assemble, split, RolloutWrite, KEPT_HISTORY};
use crate::rollout::{RolloutEvent, RolloutState};
use crate::stored::{corrupt, decode, json};
use crate::Result;
use fleetsync_model::{ApplyMode, RolloutPhase, SyncSet, Timestamp, WorkKey};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

/// Whether revision `generation` of the SyncSet is stored.
pub(super) fn revision_kept(tx: &Connection, tenant: &str, syncset: &str, generation: i64) -> Result<bool> {
    let sql = "SELECT 1 FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation = ?3";
    Ok(tx.prepare_cached(sql)?.exists(params![tenant, syncset, generation])?)
}

/// Stores revision `generation` of `s` unless it is stored already.
pub(super) fn revision_put(tx: &Transaction<'_>, s: &SyncSet, generation: i64) -> Result<()> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    if revision_kept(tx, tenant, name, generation)? {
        return Ok(());
    }
    let split = split(s)?;
    for (hash, body) in &split.parts {
        tx.prepare_cached(
            "INSERT INTO revision_parts (tenant, hash, body, refs) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (tenant, hash) DO UPDATE SET refs = refs + 1",
        )?
        .execute(params![tenant, hash, body])?;
    }
    tx.prepare_cached(
        "INSERT INTO revisions (tenant, syncset, generation, apply_mode, head, parts) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        tenant,
        name,
        generation,
        s.spec.resource_apply_mode.as_str(),
        split.head,
        json("revisions", &split.hashes())?
    ])?;
    Ok(())
}

/// The SyncSet as it was at `generation`, if that revision is kept.
pub(super) fn revision_get(c: &Connection, tenant: &str, syncset: &str, generation: i64) -> Result<Option<SyncSet>> {
    let row: Option<(String, String)> = c
        .prepare_cached("SELECT head, parts FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation = ?3")?
        .query_row(params![tenant, syncset, generation], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((head, parts)) = row else { return Ok(None) };
    let hashes: Vec<String> = decode("revisions", &parts)?;
    let mut body = c.prepare_cached("SELECT body FROM revision_parts WHERE tenant = ?1 AND hash = ?2")?;
    let bodies = hashes
        .iter()
        .map(|h| {
            body.query_row(params![tenant, h], |r| r.get(0))
                .optional()?
                .ok_or_else(|| corrupt("revision_parts", format!("missing {h}")))
        })
        .collect::<Result<Vec<String>>>()?;
    assemble(&head, generation, bodies).map(Some)
}

/// The apply mode of a kept revision.
fn revision_mode(tx: &Connection, tenant: &str, syncset: &str, generation: i64) -> Result<Option<ApplyMode>> {
    let mode: Option<String> = tx
        .prepare_cached("SELECT apply_mode FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation = ?3")?
        .query_row(params![tenant, syncset, generation], |r| r.get(0))
        .optional()?;
    mode.map(|m| ApplyMode::parse(&m).ok_or_else(|| corrupt("revisions", format!("apply mode {m:?}")))).transpose()
}

/// Drops the revisions older than the last [`KEPT_HISTORY`] that no wanted key runs and
/// no rollout returns to; and the resources no revision holds any more.
pub(super) fn revisions_prune(tx: &Transaction<'_>, tenant: &str, syncset: &str, latest: i64) -> Result<()> {
    drop_revisions(tx, tenant, syncset, latest - KEPT_HISTORY + 1, true)
}

/// Drops every revision of a deleted SyncSet, and its rollout.
pub(super) fn syncset_deleted(tx: &Transaction<'_>, tenant: &str, syncset: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM rollouts WHERE tenant = ?1 AND syncset = ?2")?.execute(params![tenant, syncset])?;
    drop_revisions(tx, tenant, syncset, i64::MAX, false)
}

/// Drops the SyncSet's revisions older than `below` (with `keep_needed`, but those a
/// wanted key runs or the rollout returns to), releasing their resources.
fn drop_revisions(tx: &Transaction<'_>, tenant: &str, syncset: &str, below: i64, keep_needed: bool) -> Result<()> {
    let gone: Vec<String> = {
        let mut stmt = tx.prepare_cached(
            "DELETE FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation < ?3
                 AND NOT (?4 AND (generation IN (SELECT generation FROM work WHERE tenant = ?1 AND syncset = ?2 AND desired = 1)
                                  OR generation IN (SELECT stable FROM rollouts WHERE tenant = ?1 AND syncset = ?2)))
             RETURNING parts",
        )?;
        let rows = stmt.query_map(params![tenant, syncset, below, keep_needed], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for parts in gone {
        for hash in decode::<Vec<String>>("revisions", &parts)? {
            tx.prepare_cached("UPDATE revision_parts SET refs = refs - 1 WHERE tenant = ?1 AND hash = ?2")?
                .execute(params![tenant, hash])?;
        }
    }
    tx.prepare_cached("DELETE FROM revision_parts WHERE tenant = ?1 AND refs <= 0")?.execute(params![tenant])?;
    Ok(())
}

/// What a new generation of `s` does to its rollout ([`revision::on_write`]); the
/// generation and mode keys get when they are not told otherwise, and whether clusters
/// are held back.
pub(super) fn on_write(
    tx: &Transaction<'_>,
    now: Timestamp,
    s: &SyncSet,
    generation: i64,
) -> Result<(i64, ApplyMode, bool)> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let previous = rollout_get(tx, tenant, name)?;
    match revision::on_write(s, generation, previous.as_ref(), now) {
        RolloutWrite::None => {
            tx.prepare_cached("DELETE FROM rollouts WHERE tenant = ?1 AND syncset = ?2")?
                .execute(params![tenant, name])?;
            Ok((generation, s.spec.resource_apply_mode, false))
        }
        RolloutWrite::Store(state) => {
            rollout_put(tx, &state)?;
            if !state.phase.holds_back() {
                return Ok((generation, s.spec.resource_apply_mode, false));
            }
            let mode = revision_mode(tx, tenant, name, state.stable)?.unwrap_or(s.spec.resource_apply_mode);
            Ok((state.stable, mode, true))
        }
    }
}

const COLUMNS: &str = "tenant, syncset, phase, step, revision, stable, reason, step_started_at, healthy_since, promoted, version, updated_at";

fn state_of(r: &Row<'_>) -> rusqlite::Result<(RolloutState, String)> {
    let phase: String = r.get(2)?;
    let state = RolloutState {
        tenant: r.get(0)?,
        syncset: r.get(1)?,
        phase: RolloutPhase::Progressing,
        step: r.get(3)?,
        revision: r.get(4)?,
        stable: r.get(5)?,
        reason: r.get(6)?,
        step_started_at: Timestamp(r.get(7)?),
        healthy_since: r.get::<_, Option<i64>>(8)?.map(Timestamp),
        promoted: r.get(9)?,
        version: r.get(10)?,
        updated_at: Timestamp(r.get(11)?),
    };
    Ok((state, phase))
}

fn with_phase((mut state, phase): (RolloutState, String)) -> Result<RolloutState> {
    state.phase = RolloutPhase::parse(&phase).ok_or_else(|| corrupt("rollouts", format!("phase {phase:?}")))?;
    Ok(state)
}

pub(super) fn rollout_get(c: &Connection, tenant: &str, syncset: &str) -> Result<Option<RolloutState>> {
    let sql = format!("SELECT {COLUMNS} FROM rollouts WHERE tenant = ?1 AND syncset = ?2");
    c.prepare_cached(&sql)?.query_row(params![tenant, syncset], state_of).optional()?.map(with_phase).transpose()
}

/// Rollouts in `phase` (every phase: `None`), of one tenant or all, by tenant and name.
pub(super) fn rollout_list(
    c: &Connection,
    tenant: Option<&str>,
    phase: Option<RolloutPhase>,
) -> Result<Vec<RolloutState>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM rollouts WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR phase = ?2) ORDER BY tenant, syncset"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![tenant, phase.map(RolloutPhase::as_str)], state_of)?;
    rows.map(|r| with_phase(r?)).collect()
}

fn rollout_put(tx: &Transaction<'_>, s: &RolloutState) -> Result<()> {
    let sql = format!(
        "INSERT OR REPLACE INTO rollouts ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    );
    tx.prepare_cached(&sql)?.execute(params![
        s.tenant,
        s.syncset,
        s.phase.as_str(),
        i64::try_from(s.step).unwrap_or(i64::MAX),
        s.revision,
        s.stable,
        s.reason,
        s.step_started_at.millis(),
        s.healthy_since.map(Timestamp::millis),
        s.promoted,
        s.version,
        s.updated_at.millis()
    ])?;
    Ok(())
}

/// Writes `next` if the stored rollout is still the one it was decided from (same
/// revision, version one less), and enqueues each `(cluster, generation)` key that is
/// wanted at that generation, in the same transaction. `false`: the rollout moved on
/// (another process wrote first, a newer generation superseded it, or a move to
/// `Completed` found a wanted key told another generation); nothing written.
pub(super) fn rollout_write(
    tx: &Transaction<'_>,
    now: Timestamp,
    next: &RolloutState,
    enqueue_at: &[(String, i64)],
    event: Option<&RolloutEvent>,
) -> Result<bool> {
    let current = rollout_get(tx, &next.tenant, &next.syncset)?;
    if !current.is_some_and(|c| c.revision == next.revision && c.version + 1 == next.version) {
        return Ok(false);
    }
    // Completed only once every wanted key is told the revision: a cluster that joined
    // after the decision was read (at the stable revision) is caught up when decided again.
    let behind = "SELECT 1 FROM work WHERE tenant = ?1 AND syncset = ?2 AND desired = 1 AND generation <> ?3 LIMIT 1";
    if next.phase == RolloutPhase::Completed
        && tx.prepare_cached(behind)?.exists(params![next.tenant, next.syncset, next.revision])?
    {
        return Ok(false);
    }
    rollout_put(tx, next)?;
    if let Some(e) = event {
        let (tenant, name, actor) = (next.tenant.as_str(), next.syncset.as_str(), e.actor.as_deref());
        event_append(
            tx,
            now,
            NewEvent { tenant, kind: "Rollout", name, action: e.action, generation: next.revision, actor },
        )?;
    }
    let wanted = "SELECT 1 FROM work WHERE tenant = ?1 AND cluster = ?2 AND syncset = ?3 AND desired = 1";
    for (cluster, generation) in enqueue_at {
        if !tx.prepare_cached(wanted)?.exists(params![next.tenant, cluster, next.syncset])? {
            continue;
        }
        let Some(mode) = revision_mode(tx, &next.tenant, &next.syncset, *generation)? else {
            return Err(corrupt(
                "revisions",
                format!("{}/{} generation {generation} is not kept", next.tenant, next.syncset),
            ));
        };
        let key = WorkKey::new(next.tenant.as_str(), cluster.as_str(), next.syncset.as_str());
        enqueue(tx, now, &key, Enqueue::apply(*generation, mode), true)?;
    }
    Ok(true)
}
